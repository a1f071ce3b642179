//! An allocator that counts: the bytes allocated and not yet freed, and their peak since the
//! last [`reset_peak`]. A bench that includes this module installs it for its whole process,
//! to weigh what a state holds and what a restore needs on the way.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

use weir_host::HostAllocator;

/// Forwards to the `weir` binary's allocator, counting.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// This thread's allocations not yet added to [`LIVE`]. Every allocation updating two
    /// shared counters made threads that allocate side by side (a restore decoding on every
    /// core) wait on each other's cache line, which took about a tenth off the restore's
    /// measured speed; a thread adds its count in steps of [`STEP`] instead. `LIVE` and `PEAK` are then off by less than a
    /// step per thread, well under a MB against the hundreds the benches weigh.
    static UNCOUNTED: Cell<isize> = const { Cell::new(0) };
}

/// Bytes a thread allocates or frees before it updates the shared counters: small, as what
/// a thread has not added when it ends is lost (a restore starts a few dozen threads).
const STEP: isize = 32 << 10;

fn grew(by: isize) {
    let pending = UNCOUNTED.try_with(|uncounted| {
        let pending = uncounted.get() + by;
        if pending.abs() < STEP {
            uncounted.set(pending);
            0
        } else {
            uncounted.set(0);
            pending
        }
    });
    // A thread being torn down has no counter of its own left: count at once.
    count(pending.unwrap_or(by));
}

fn count(bytes: isize) {
    if bytes != 0 {
        let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

/// Adds the calling thread's uncounted bytes to the shared counters.
fn flush() {
    count(UNCOUNTED.try_with(|u| u.replace(0)).unwrap_or(0));
}

// SAFETY: every call is forwarded to the host's allocator unchanged; only counters are kept.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { HostAllocator.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        grew(-(layout.size() as isize));
        // SAFETY: ptr was allocated by HostAllocator.alloc with this layout.
        unsafe { HostAllocator.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded as received.
        unsafe { HostAllocator.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated and not freed now (the calling thread's exactly, other threads' to a
/// step).
pub fn live() -> isize {
    flush();
    LIVE.load(Ordering::Relaxed)
}

/// The most bytes allocated at once since the last call; the count starts again from now.
pub fn reset_peak() -> isize {
    PEAK.swap(live(), Ordering::Relaxed)
}

/// The most bytes allocated at once since [`reset_peak`].
pub fn peak() -> isize {
    flush();
    PEAK.load(Ordering::Relaxed)
}
