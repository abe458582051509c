//! How the key of a keyed instance (a tenant, an API key, a host) is
//! written inside a Redis key.
//!
//! A key comes from a caller (a request's header, an argument), so its
//! text may hold anything: the `}` that would end the hash tag Redis
//! Cluster hashes, the `:` that separates the parts of a key, the text of
//! another key. It is written so that no key can reach another's Redis
//! key, nor change the shape of its own:
//!
//! - a whole number (`KeyRef::Int`) as its decimal: `42`, `-7`;
//! - a text with every byte other than an ASCII letter, a digit, `-`, `_`
//!   and `.` escaped as `%XX` (`%` itself included): `tenant-7` stays
//!   `tenant-7`, `db:5432` is `db%3A5432`, `a}` is `a%7D`;
//! - a text that is a whole number's decimal (`"42"`) with its first
//!   character escaped too (`%342`): the number `42` and the text `"42"`
//!   are two keys in the process, so they are two keys in Redis.
//!
//! Decoding the `%XX` escapes gives back the text, and no text's form is a
//! number's decimal, so two keys never share a form. A key is written
//! whole, however long: Redis keeps it exactly, and an application that
//! keys by long texts (a token) bounds them itself, as it does for the
//! process's own keys (`keys.max`).

use crate::keyed::KeyRef;

/// `key` as it is written inside a Redis key (see the module's docs).
pub(crate) fn redis_text(key: KeyRef<'_>) -> String {
    match key {
        KeyRef::Int(n) => itoa::Buffer::new().format(n).to_owned(),
        KeyRef::Text(t) => {
            let mut out = String::with_capacity(t.len());
            let number = is_decimal(t);
            for (i, b) in t.bytes().enumerate() {
                if (i == 0 && number) || !kept(b) {
                    escape(b, &mut out);
                } else {
                    out.push(char::from(b));
                }
            }
            out
        }
    }
}

/// A byte written as it is.
fn kept(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

fn escape(b: u8, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xF)]));
}

/// Whether `t` is what a whole number's decimal would be: the text a
/// `KeyRef::Int` writes.
fn is_decimal(t: &str) -> bool {
    t.parse::<i128>()
        .is_ok_and(|n| itoa::Buffer::new().format(n) == t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> String {
        redis_text(KeyRef::Text(t))
    }

    #[test]
    fn plain_texts_and_numbers_are_written_as_they_are() {
        assert_eq!(text("tenant-7"), "tenant-7");
        assert_eq!(text("api_key.v2"), "api_key.v2");
        assert_eq!(redis_text(KeyRef::Int(42)), "42");
        assert_eq!(redis_text(KeyRef::Int(-7)), "-7");
    }

    #[test]
    fn separators_braces_and_escapes_are_escaped() {
        assert_eq!(text("db:5432"), "db%3A5432");
        assert_eq!(text("a}"), "a%7D");
        assert_eq!(text("{a}"), "%7Ba%7D");
        assert_eq!(text("%34"), "%2534");
        assert_eq!(text("a b"), "a%20b");
        assert_eq!(text("ü"), "%C3%BC");
        assert_eq!(text(""), "");
    }

    #[test]
    fn a_text_that_reads_as_a_number_is_not_that_number() {
        assert_eq!(text("42"), "%342");
        assert_eq!(text("-7"), "%2D7");
        assert_eq!(text("0"), "%30");
        // Not a number's decimal: written as it is.
        assert_eq!(text("042"), "042");
        assert_eq!(text("+42"), "%2B42");
        assert_ne!(text("42"), redis_text(KeyRef::Int(42)));
    }

    #[test]
    fn no_two_keys_share_a_form() {
        let texts = [
            "", "a", "a}", "{a}", "a:key:b", "42", "%342", "%34", "4", "-0", "0", "00", "a%7D",
            "A", "a.b", "a_b", "a-b", "a b", "a+b", "a/b",
        ];
        let mut forms: Vec<String> = texts.iter().map(|t| text(t)).collect();
        forms.extend([0, 4, 42, -1].map(|n| redis_text(KeyRef::Int(n))));
        let all = forms.len();
        forms.sort();
        forms.dedup();
        assert_eq!(forms.len(), all, "{forms:?}");
        for form in &forms {
            assert!(!form.contains(['{', '}', ':', ' ']), "{form}");
        }
    }
}
