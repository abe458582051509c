//! The settings a live instance runs with, replaceable while calls read them.
//!
//! A call reads its spec's settings once, when it starts, and keeps reading
//! that version until it ends, while a reload may publish a new one: the
//! call finishes under the settings it started with, and never sees half of
//! each. Reading is one atomic load, with no lock and no reference count:
//! every version ever published stays alive as long as the instance, so a
//! reference to one is good for as long as the instance is borrowed.
//!
//! What that keeps in memory is bounded by the distinct values published: a
//! value equal to one published before is found and published again, not
//! stored twice (reloading an unchanged file, or toggling `enabled` back and
//! forth, stores nothing new).
//!
//! The word that points to the current version also carries a few bits of
//! it (its [`Tag`]), read with the pointer in one load: what a call needs on
//! its success path (is the spec enabled, does it have a budget) it knows
//! without following the pointer.

#![allow(unsafe_code)] // one raw pointer, read-only, to a value this cell owns

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The bits of a version that travel with the pointer to it.
pub(crate) trait Tag {
    /// The bits a tag may use: the low bits of a pointer to the value,
    /// below its alignment ([`TAG_BITS`] for a value aligned to 8; a type
    /// aligned to 16 may take one more).
    const BITS: usize = TAG_BITS;

    /// At most [`BITS`](Self::BITS) bits.
    fn tag(&self) -> usize {
        0
    }
}

/// Bits a tag may use: the low bits of a pointer to a value aligned to 8.
pub(crate) const TAG_BITS: usize = 0b111;

/// The versions of one value: the current one, and every one published.
pub(crate) struct Versions<T> {
    /// The current version: the address of one of `later`'s values, or 0
    /// for `first`, with its tag in the low bits.
    current: AtomicUsize,
    /// The version the cell was made with, kept in place: while it is
    /// current (until the first reload that changes it, and after one that
    /// changes it back), a reader reaches it without following a pointer.
    first: T,
    /// Every version published since, in order; never shrinks while `self`
    /// lives. `Arc`, not `Box`: moving an `Arc` asserts nothing about the
    /// value it points to, so references taken from `current` stay valid
    /// when the vector grows.
    later: Mutex<Vec<Arc<T>>>,
}

/// The word of a version at `address` (0 for the first) with `value`'s tag.
fn word<T: Tag>(address: usize, value: &T) -> usize {
    const { assert!(std::mem::align_of::<T>() > T::BITS) };
    address | (value.tag() & T::BITS)
}

impl<T: Tag> Versions<T> {
    /// The versions of `first`, which is current.
    pub(crate) fn new(first: T) -> Self {
        Self {
            current: AtomicUsize::new(word(0, &first)),
            first,
            later: Mutex::new(Vec::new()),
        }
    }

    /// The version a word read from this cell names.
    #[inline(always)]
    fn at(&self, word: usize) -> &T {
        let address = word & !T::BITS;
        if address == 0 {
            return &self.first;
        }
        // SAFETY: a nonzero address in a word of this cell is the address of
        // the value of an `Arc` held in `self.later` (`publish` pushes the
        // `Arc` before it stores its address), with bits below its alignment
        // as the tag; `later` only grows while `self` lives, so the value
        // outlives the borrow of `self`. No `&mut T` to it is ever made:
        // versions are immutable once published.
        unsafe { &*(address as *const T) }
    }

    /// The current version.
    #[inline(always)]
    pub(crate) fn get(&self) -> &T {
        self.get_tagged().0
    }

    /// The current version and its tag, read in one load.
    #[inline(always)]
    pub(crate) fn get_tagged(&self) -> (&T, usize) {
        let current = self.current.load(Ordering::Acquire);
        (self.at(current), current & T::BITS)
    }

    /// The current version and its tag, as a [`Pinned`] read: what a call
    /// that holds the instance owning this cell keeps, to read the same
    /// version again for as long as it holds the instance.
    #[inline(always)]
    pub(crate) fn pin(&self) -> Pinned<T> {
        let current = self.current.load(Ordering::Acquire);
        Pinned {
            word: current,
            cell: self as *const Self,
        }
    }

    /// Makes current the version `find` accepts among those published
    /// before, or else a new one, `make()`; returns it, and whether it is
    /// new. Calls that already read the current version keep it.
    pub(crate) fn publish(
        &self,
        find: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> (&T, bool) {
        let mut later = self.later.lock().unwrap_or_else(PoisonError::into_inner);
        let (current, new) = if find(&self.first) {
            (word(0, &self.first), false)
        } else {
            match later.iter().find(|v| find(v)) {
                Some(v) => (word(Arc::as_ptr(v) as usize, &**v), false),
                None => {
                    let v = Arc::new(make());
                    let current = word(Arc::as_ptr(&v) as usize, &*v);
                    later.push(v);
                    (current, true)
                }
            }
        };
        // Release: a reader that loads the word sees the value complete.
        self.current.store(current, Ordering::Release);
        drop(later);
        (self.get(), new)
    }

    /// How many versions are kept.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        1 + self
            .later
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A version read from a [`Versions`] cell, kept by whoever keeps the cell
/// alive (a call, which holds its spec's instance, owning the cell), without
/// borrowing it: the call need not borrow what it holds.
pub(crate) struct Pinned<T> {
    /// The version's address and tag, as the cell held it.
    word: usize,
    /// The cell it was read from.
    cell: *const Versions<T>,
}

// SAFETY (for the auto traits the raw pointers opt out of): a `Pinned` is an
// address and a tag; it gives access to the version only through `get`,
// which takes the cell by shared reference, as `Versions::get` does, and
// `Versions<T>` is `Sync` exactly when `T` is `Send + Sync`.
unsafe impl<T: Send + Sync> Send for Pinned<T> {}
unsafe impl<T: Send + Sync> Sync for Pinned<T> {}

impl<T: Tag> Pinned<T> {
    /// A read of no cell, tag 0: what a call without an instance keeps.
    pub(crate) const NONE: Self = Self {
        word: 0,
        cell: std::ptr::null(),
    };

    /// The tag of the version.
    #[inline(always)]
    pub(crate) fn tag(&self) -> usize {
        self.word & T::BITS
    }

    /// The version, from `cell`, the cell it was read from; the cell's
    /// current version if `cell` is another.
    #[inline(always)]
    pub(crate) fn get<'c>(&self, cell: &'c Versions<T>) -> &'c T {
        if std::ptr::eq(self.cell, cell) {
            // The word was read from `cell`: it names one of its versions.
            cell.at(self.word)
        } else {
            cell.get()
        }
    }
}

impl<T> std::fmt::Debug for Pinned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned").finish_non_exhaustive()
    }
}

impl<T: Tag + std::fmt::Debug> std::fmt::Debug for Versions<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Tag for String {}
    impl Tag for u64 {
        fn tag(&self) -> usize {
            (*self as usize) & TAG_BITS
        }
    }
    impl Tag for (u64, u64) {}

    #[test]
    fn a_pinned_read_keeps_its_version_and_falls_back_on_another_cell() {
        let v = Versions::new(5u64);
        let pinned = v.pin();
        v.publish(|v| *v == 6, || 6);
        assert_eq!(*pinned.get(&v), 5, "the version read when pinned");
        assert_eq!(pinned.tag(), 5);
        let other = Versions::new(7u64);
        assert_eq!(*pinned.get(&other), 7, "another cell: its current version");
    }

    #[test]
    fn a_version_s_tag_travels_with_it() {
        let v = Versions::new(5u64);
        assert_eq!(v.get_tagged(), (&5, 5));
        v.publish(|v| *v == 2, || 2);
        assert_eq!(v.get_tagged(), (&2, 2));
    }

    #[test]
    fn a_reader_keeps_its_version_while_another_is_published() {
        let v = Versions::new(String::from("one"));
        let before = v.get();
        v.publish(|v| v == "two", || String::from("two"));
        assert_eq!(before, "one", "the version read before is intact");
        assert_eq!(v.get(), "two");
    }

    #[test]
    fn an_equal_value_is_published_again_not_stored_twice() {
        let v = Versions::new(1u64);
        for i in 0..1000 {
            v.publish(|v| *v == i % 3, || i % 3);
        }
        assert_eq!(v.kept(), 3);
        assert_eq!(*v.get(), 999 % 3);
    }

    #[test]
    fn readers_on_other_threads_see_whole_versions() {
        let v = Arc::new(Versions::new((0u64, 0u64)));
        let reader = {
            let v = Arc::clone(&v);
            std::thread::spawn(move || {
                for _ in 0..100_000 {
                    let (a, b) = *v.get();
                    assert_eq!(a * 2, b, "a torn version");
                }
            })
        };
        for i in 0..200u64 {
            v.publish(|v| *v == (i, i * 2), || (i, i * 2));
        }
        assert!(reader.join().is_ok());
    }
}
