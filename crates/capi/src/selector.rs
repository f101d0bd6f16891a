//! The raw-call net's state in each thread: the selector byte the kernel
//! reads on a system call from outside the C library, and the allowed
//! range. Kept below every call family, so that pin-and-call can arm a
//! thread and the SIGSYS handler ([`crate::dispatch`]) can let one call run
//! natively, without either importing the other.

use farmem_sys::dispatch::{self, FILTER_ALLOW, FILTER_BLOCK};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    /// The selector byte the kernel reads on each system call from outside
    /// the allowed range; its address is stable for the thread's life.
    static SELECTOR: Cell<u8> = const { Cell::new(FILTER_BLOCK) };
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

/// The allowed range: the C library's executable segment (0..0 when the
/// net is off).
static LO: AtomicUsize = AtomicUsize::new(0);
static HI: AtomicUsize = AtomicUsize::new(0);

/// Set the allowed range (the C library's code) and arm this thread.
pub fn set_range(lo: usize, hi: usize) {
    HI.store(hi, Ordering::Release);
    LO.store(lo, Ordering::Release);
    arm_this_thread();
}

/// Turn dispatch on for the calling thread (idempotent), or re-block after
/// a call the handler let run natively.
#[inline]
pub fn arm_this_thread() {
    let lo = LO.load(Ordering::Acquire);
    if lo == 0 {
        return;
    }
    SELECTOR.with(|s| s.set(FILTER_BLOCK));
    if ARMED.with(|a| a.replace(true)) {
        return;
    }
    let hi = HI.load(Ordering::Acquire);
    let sel = SELECTOR.with(|s| s.as_ptr() as *const u8);
    // SAFETY: the selector is this thread's thread-local, alive as long as
    // the thread.
    if unsafe { dispatch::enable(lo, hi - lo, sel) }.is_err() {
        ARMED.with(|a| a.set(false));
    }
}

/// Whether the net is on (farmem's SIGSYS handler is installed).
pub fn active() -> bool {
    LO.load(Ordering::Acquire) != 0
}

/// Let the call the handler stopped run natively when it is retried (the
/// next call through a farmem wrapper blocks again).
pub fn allow_once() {
    SELECTOR.with(|s| s.set(FILTER_ALLOW));
}
