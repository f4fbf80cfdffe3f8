//! Hostile counts must fail with small allocations: a counting global allocator records the
//! largest single allocation while tiny files claiming 2^63 elements are parsed.
//!
//! This binary holds a single test so that no other test allocates concurrently. The `unsafe`
//! here is the `GlobalAlloc` contract, forwarded unchanged to the system allocator.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; we only record sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn hostile_counts_allocate_little() {
    let cases = common::huge_count_cases();
    assert!(cases.len() > 40);
    for (what, bytes) in cases {
        let len = bytes.len();
        LARGEST.store(0, Ordering::Relaxed);
        let r = gguf::GgufFile::from_bytes(bytes);
        let largest = LARGEST.load(Ordering::Relaxed);
        assert!(r.is_err(), "{what}");
        // The input copy and error strings, nothing sized by the hostile count.
        assert!(
            largest <= 64 * 1024,
            "{what}: largest allocation {largest} bytes for a {len}-byte file"
        );
    }
}
