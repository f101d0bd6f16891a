//! The free reserve (`FARMEM_RESERVE`): a fault with room to spare sends
//! its request first and evicts while the reply is on the wire. In a
//! process of its own, over sockets (the transport whose reads can be sent
//! without waiting), against the embedded server.

use farmem_runtime::{Config, Runtime};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

// Not every shared helper is needed here (the transport is fixed).
#[allow(dead_code)]
mod common;
use common::{scattered_next as next, Region, PAGE};

const BUDGET: usize = 4 << 20;

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let cfg = Config::from_str_config(&format!(
            "local={BUDGET} arena=1G transport=socket reserve=64 timeout_ms=20000"
        ))
        .unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

/// Two threads write every page of their half of 8× the budget, then read
/// and rewrite it twice, in scattered orders. Every word must come back as
/// last written, and most evictions must have been made while the thread's
/// own fetch was on the wire (the first pass fetches nothing: its pages are
/// zero-filled, so its evictions have nothing to hide behind).
#[test]
fn evictions_overlap_fetches_and_lose_nothing() {
    let bytes = 8 * BUDGET;
    let r = Region::new(rt(), bytes);
    let per_page = PAGE / 8;
    let half = bytes / PAGE / 2; // a power of two: the walk's period is full
    let tag = |t: usize, p: usize, round: u64| ((t as u64) << 40) | ((p as u64) << 8) | round;
    std::thread::scope(|s| {
        for t in 0..2 {
            let r = &r;
            s.spawn(move || {
                let word = |p: usize| r.word((t * half + p) * per_page + p % per_page);
                for round in 0..3u64 {
                    let mut p = 0;
                    for _ in 0..half {
                        p = next(p, half, round);
                        if round > 0 {
                            let got = word(p).load(Ordering::Relaxed);
                            assert_eq!(got, tag(t, p, round - 1), "thread {t} page {p}");
                        }
                        word(p).store(tag(t, p, round), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let s = rt().snapshot();
    assert!(s.evictions > 3 * half as u64, "{s:?}");
    assert!(
        2 * s.evicted_overlapped >= s.evictions,
        "only {} of {} evictions overlapped a fetch: {s:?}",
        s.evicted_overlapped,
        s.evictions
    );
    for t in 0..2 {
        for p in 0..half {
            let got = r
                .word((t * half + p) * per_page + p % per_page)
                .load(Ordering::Relaxed);
            assert_eq!(got, tag(t, p, 2), "thread {t} page {p} at the end");
        }
    }
}
