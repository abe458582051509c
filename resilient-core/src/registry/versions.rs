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

#![allow(unsafe_code)] // one raw pointer, read-only, to a value this cell owns

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The versions of one value: the current one, and every one published.
pub(crate) struct Versions<T> {
    /// Points into one of `all`'s values: the current version.
    current: AtomicPtr<T>,
    /// Every version published, in order; never shrinks while `self` lives.
    /// `Arc`, not `Box`: moving an `Arc` asserts nothing about the value it
    /// points to, so references taken from `current` stay valid when the
    /// vector grows.
    all: Mutex<Vec<Arc<T>>>,
}

impl<T> Versions<T> {
    /// The versions of `first`, which is current.
    pub(crate) fn new(first: T) -> Self {
        let first = Arc::new(first);
        Self {
            current: AtomicPtr::new(Arc::as_ptr(&first).cast_mut()),
            all: Mutex::new(vec![first]),
        }
    }

    /// The current version.
    #[inline(always)]
    pub(crate) fn get(&self) -> &T {
        let current = self.current.load(Ordering::Acquire);
        // SAFETY: `current` always points to the value of an `Arc` held in
        // `self.all` (set in `new` and `publish`, each time from an `Arc`
        // pushed there first), and `all` only grows while `self` lives, so
        // the value outlives the borrow of `self`. No `&mut T` to it is ever
        // made: versions are immutable once published.
        unsafe { &*current }
    }

    /// Makes current the version `find` accepts among those published
    /// before, or else a new one, `make()`; returns it, and whether it is
    /// new. Calls that already read the current version keep it.
    pub(crate) fn publish(
        &self,
        find: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> (&T, bool) {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, new) = match all.iter().position(|v| find(v)) {
            Some(at) => (at, false),
            None => {
                all.push(Arc::new(make()));
                (all.len() - 1, true)
            }
        };
        let pointer = Arc::as_ptr(&all[at]).cast_mut();
        // Release: a reader that loads the pointer sees the value complete.
        self.current.store(pointer, Ordering::Release);
        drop(all);
        (self.get(), new)
    }

    /// How many versions are kept.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.all
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Versions<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let v = Versions::new(1u32);
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
