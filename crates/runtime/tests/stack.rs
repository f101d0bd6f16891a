//! The fault path runs on the faulting thread's own stack (the SIGBUS
//! handler has no alternate stack: a small one, such as Rust's for overflow
//! detection, would not hold it), and an eviction round's page lists live
//! there too. A thread with a small stack must fault, evict in the largest
//! rounds, and write back, scattered and in sweeps, dirty and clean. In a
//! process of its own, so that the rounds are this test's.

use farmem_runtime::{Advice, Runtime};
use std::sync::atomic::Ordering;

mod common;
use common::{scattered_next, Region, PAGE};

/// 8,192 pages: a bin of one chunk (128 pages), and eviction rounds of 126
/// victims (a 64th of the 8,064 pages beside it), so that rounds both move
/// pages out and write-protect and unmap them.
const BUDGET: usize = 32 << 20;
/// musl's default thread stack, and well under glibc's (8 MiB).
const STACK: usize = 128 << 10;

fn rt() -> &'static Runtime {
    common::runtime(|| format!("local={BUDGET} arena=1G"))
}

fn value(p: usize, pass: u64) -> u64 {
    (p as u64) << 8 | pass
}

#[test]
fn the_fault_path_fits_a_small_thread_stack() {
    // A power of two, for the scattered walk.
    let pages = 4 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    let before = rt().snapshot();
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("small-stack".into())
            .stack_size(STACK)
            .spawn_scoped(s, || {
                // A write sweep: dirty rounds, moved out or write-protected.
                for p in 0..pages {
                    r.word(p * PAGE / 8).store(value(p, 1), Ordering::Relaxed);
                }
                // Scattered read-modify-writes: demand faults, lone dirty victims.
                let mut p = 0;
                for _ in 0..pages {
                    let w = r.word(p * PAGE / 8);
                    assert_eq!(w.load(Ordering::Relaxed), value(p, 1), "page {p}");
                    w.store(value(p, 2), Ordering::Relaxed);
                    p = scattered_next(p, pages, 1);
                }
                // A range evicted at once, in rounds, and read back clean.
                rt().advise(r.addr(0), r.words * 8, Advice::DontNeed)
                    .unwrap();
                let mut sum = 0u64;
                for p in 0..pages {
                    sum = sum.wrapping_add(r.word(p * PAGE / 8).load(Ordering::Relaxed));
                }
                sum
            })
            .expect("spawn a thread with a small stack")
            .join()
            .expect("the small-stack thread")
    });
    let d = rt().snapshot().since(&before);
    for p in 0..pages {
        assert_eq!(
            r.word(p * PAGE / 8).load(Ordering::Relaxed),
            value(p, 2),
            "page {p}"
        );
    }
    // Rounds above the old limit of 64 pages, each one unmap call where
    // the kernel takes ranges (`process_madvise`).
    if !farmem_sys::mem::discard_batches().unwrap() {
        return;
    }
    assert!(
        d.evictions > 64 * d.unmap_calls && d.unmap_calls > 0,
        "{} pages evicted in {} unmap calls",
        d.evictions,
        d.unmap_calls
    );
}
