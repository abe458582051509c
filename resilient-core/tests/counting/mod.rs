//! A global allocator that counts, for the tests that no call allocates:
//! each such test binary declares it as its `#[global_allocator]`.

#![allow(unsafe_code, dead_code, unreachable_pub)] // it only forwards to `System`

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to the system allocator and counts each allocation.
pub struct Counting;

thread_local! {
    /// Allocations made by this thread. Per thread: the test harness's own
    /// thread allocates now and then while a test runs, and the calls under
    /// test all run on the test's current-thread runtime.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// Allocations made by this thread so far.
pub fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}
