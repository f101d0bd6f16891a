//! Nothing the SIGBUS handler runs allocates: a fault can interrupt the
//! program inside `malloc`, holding its lock, and an allocation in the
//! handler would then wait for ever (or corrupt the heap).
//!
//! This test binary's global allocator counts the allocations made on a
//! thread while it is armed. The test arms it, then drives the fault path
//! hard on that thread: demand faults, prefetch windows, write-protect
//! faults, evictions with write-back, refaults. Every one of them runs in
//! the SIGBUS handler on the armed thread, so any allocation the runtime's
//! Rust code makes there (a `Vec`, a `format!`, a `Box`) is counted.
//! What C libraries allocate inside themselves (UCX) goes through `malloc`,
//! not this allocator, and is not seen here; the socket transport has none.

use farmem_runtime::{Advice, Config, Runtime};
use std::sync::atomic::Ordering;

mod common;
use common::{Region, PAGE};
#[path = "../../../tests/support/count_alloc.rs"]
mod count_alloc;
use count_alloc::allocations_during;

const BUDGET: usize = 2 << 20;

fn rt() -> &'static Runtime {
    let cfg = Config::from_str_config(&common::with_transport(&format!(
        "local={BUDGET} arena=4G timeout_ms=20000"
    )))
    .unwrap();
    farmem_runtime::init(cfg).expect("init")
}

#[test]
fn the_fault_path_allocates_nothing() {
    let rt = rt();
    // The counter itself works: an allocation while armed is seen.
    let seen = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(seen, 1);

    let bytes = 16 * BUDGET;
    let r = Region::new(rt, bytes);
    let words = bytes / 8;
    let per_page = PAGE / 8;
    // One pass first: whatever is set up once, lazily (the backend's
    // buffers), is set up outside the measured passes.
    for p in (0..words).step_by(per_page) {
        r.word(p).store(p as u64, Ordering::Relaxed);
    }
    let n = allocations_during(|| {
        for round in 0..3u64 {
            // Sequential writes: prefetch windows, write streams, evictions
            // with write-back.
            for p in (0..words).step_by(per_page) {
                r.word(p).store(p as u64 ^ round, Ordering::Relaxed);
            }
            // Strided reads back: demand faults and refaults.
            for p in (0..words).step_by(per_page * 7) {
                assert_eq!(r.word(p).load(Ordering::Relaxed), p as u64 ^ round);
            }
            // Random reads: no stream to follow.
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ round;
            for _ in 0..2000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let p = (usize::try_from(x % (words / per_page) as u64).unwrap()) * per_page;
                let _ = r.word(p).load(Ordering::Relaxed);
            }
        }
    });
    let s = rt.snapshot();
    assert!(
        s.faults > 0 && s.bytes_written_back > 0 && s.bytes_fetched > 0,
        "the fault path did not run: {s:?}"
    );
    assert_eq!(
        n, 0,
        "the runtime allocated {n} times on a thread whose faults it served in the SIGBUS handler"
    );
    // Evicting on request runs outside the handler; it may allocate.
    rt.advise(r.addr(0), bytes, Advice::DontNeed).unwrap();
}
