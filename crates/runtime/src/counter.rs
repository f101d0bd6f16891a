//! A striped counter. Every fault bumps several counters. One shared atomic
//! per counter would be a cache line that all faulting threads of a large
//! node fight over, so each counter is striped: a thread adds to its own
//! stripe (chosen once per thread), and a read sums the stripes. Relaxed
//! atomics only: safe inside the SIGBUS handler.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Stripes per counter: enough to spread a 64-thread node's faults.
const STRIPES: usize = 16;

#[repr(C, align(64))]
#[derive(Default)]
struct Line(AtomicU64);

/// A striped counter. `repr(C)` here and below: `farmem stat` reads these
/// from another process (see `publish`).
#[repr(C)]
#[derive(Default)]
pub struct Counter {
    lines: [Line; STRIPES],
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised with no destructor: safe to touch in a signal handler.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's number: 0 for the first thread to ask, 1 for the next,
/// and so on, chosen once per thread (no system call, safe in the SIGBUS
/// handler).
pub(crate) fn thread_number() -> usize {
    STRIPE.with(|s| {
        let mut v = s.get();
        if v == usize::MAX {
            v = NEXT_STRIPE.fetch_add(1, Relaxed);
            s.set(v);
        }
        v
    })
}

fn stripe() -> usize {
    thread_number() % STRIPES
}

impl Counter {
    pub fn add(&self, n: u64) {
        self.lines[stripe()].0.fetch_add(n, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.lines.iter().map(|l| l.0.load(Relaxed)).sum()
    }
}
