//! Where a page's time goes (`FARMEM_BREAKDOWN`), on whichever page path the
//! environment chooses (`FARMEM_TRANSPORT`, `FARMEM_SERVERS`; the embedded
//! server by default). One runtime per process, so the tests take turns.
//!
//! `page_cost_table` is a benchmark (`bench/cost/page-cost.sh` runs it on every
//! page path): a sequential and a random sweep at 4× the budget, each
//! pass's wall time beside farmem's own time per part, per page moved.

use farmem_runtime::cost::Phase;
use farmem_runtime::stats::Snapshot;
use farmem_runtime::{Advice, Config, Runtime};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

mod common;
use common::{Region, PAGE};

const BUDGET: usize = 32 << 20;

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let cfg = Config::from_env()
            .and_then(|c| c.with("LOCAL", &BUDGET.to_string()))
            .and_then(|c| c.with("ARENA", "4G"))
            .and_then(|c| c.with("BREAKDOWN", "1"))
            .expect("configuration");
        farmem_runtime::init(cfg).expect("init")
    })
}

fn alone() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Touch one word of each page of `r` in `order`, reading, or adding one
/// (read-modify-write). Returns the sum read.
fn sweep(r: &Region, order: &[usize], write: bool) -> u64 {
    let per_page = PAGE / 8;
    let mut sum = 0u64;
    for &p in order {
        let w = r.word(p * per_page);
        if write {
            sum = sum.wrapping_add(w.fetch_add(1, Ordering::Relaxed));
        } else {
            sum = sum.wrapping_add(w.load(Ordering::Relaxed));
        }
    }
    sum
}

fn shuffled(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let j = usize::try_from(s % (i as u64 + 1)).expect("below i + 1");
        v.swap(i, j);
    }
    v
}

/// Run `f` and return its wall time in ns and the counters it moved.
fn measured(f: impl FnOnce()) -> (u64, Snapshot) {
    let before = rt().snapshot();
    let t = Instant::now();
    f();
    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    (ns, rt().snapshot().since(&before))
}

/// The accounting itself: every timed part is charged its own time once,
/// so on one thread the parts add up to no more than the wall time, and a
/// sweep that moves pages both ways is charged for fetching, installing
/// and unmapping them.
#[test]
fn the_parts_add_up_to_no_more_than_the_wall_time() {
    let _turn = alone();
    let pages = 2 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    let order: Vec<usize> = (0..pages).collect();
    sweep(&r, &order, true);
    rt().advise(r.addr(0), pages * PAGE, Advice::DontNeed)
        .unwrap();
    let (ns, d) = measured(|| {
        assert_eq!(sweep(&r, &order, false), pages as u64);
    });
    let own: u64 = d.phase_ns.iter().sum();
    assert!(own > 0, "nothing was timed: {d:?}");
    assert!(own <= ns, "parts {own} ns, more than the wall time {ns} ns");
    for ph in [
        Phase::Fault,
        Phase::Fetch,
        Phase::Install,
        Phase::EvictUnmap,
    ] {
        assert!(d.phase_ns[ph as usize] > 0, "{} not charged", ph.name());
    }
    assert_eq!(d.pages_in(), pages as u64, "{d:?}");
    let text = d.render_breakdown();
    for ph in Phase::ALL {
        assert!(text.contains(ph.name()), "{text}");
    }
}

/// One row per pass: what the program saw and what farmem spent.
fn row(name: &str, pages: usize, local_ns: u64, ns: u64, d: &Snapshot) {
    let own: u64 = d.phase_ns.iter().sum();
    let faults = d.faults + d.wp_faults;
    // Wall time that is neither the program's own loop (the same loop on
    // local memory) nor farmem's timed parts: entering and leaving the
    // signal handler, the kernel's fault path, TLB misses on new pages.
    // With two threads the parts add up over both, so this is not shown.
    let outside = if name.contains("2thr") {
        0
    } else {
        ns.saturating_sub(own).saturating_sub(local_ns)
    };
    let per = |v: u64, n: u64| if n == 0 { 0.0 } else { v as f64 / n as f64 };
    println!(
        "{name:<18} pages={pages} in={} out={} faults={} wall={:.1}ms local={:.1}ms \
         per-page-in: wall {:.0} ns, farmem {:.0} ns; per fault outside farmem {:.0} ns",
        d.pages_in(),
        d.evictions,
        faults,
        ns as f64 / 1e6,
        local_ns as f64 / 1e6,
        per(ns, d.pages_in()),
        per(own, d.pages_in()),
        per(outside, faults),
    );
    print!("{}", d.render_breakdown());
}

/// The breakdown table for `bench/cost/page-cost.sh`: 4× the budget, swept in
/// order (prefetched, pipelined) and at random (one fault per page), read
/// and read-modify-write, beside the same loops over local memory.
#[test]
#[ignore = "a benchmark: run on a quiet machine with --ignored --nocapture"]
fn page_cost_table() {
    let _turn = alone();
    let pages = 4 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    println!("transport: {}", rt().backend_description());
    let seq: Vec<usize> = (0..pages).collect();
    let rnd = shuffled(pages);
    // The same loops over local memory, for the program's own share.
    let local = vec![0u64; pages * PAGE / 8];
    let local_ns = |order: &[usize], write: bool| {
        let l = local.as_ptr();
        let t = Instant::now();
        let mut sum = 0u64;
        for &p in order {
            // SAFETY: p < pages, so the word is inside `local`; the writes
            // go through a raw pointer the loop alone uses.
            unsafe {
                let w = l.add(p * PAGE / 8).cast_mut();
                sum = sum.wrapping_add(std::ptr::read_volatile(w));
                if write {
                    std::ptr::write_volatile(w, 1);
                }
            }
        }
        std::hint::black_box(sum);
        u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
    };
    // Fill: every page written once, so that every later pass fetches.
    let (ns, d) = measured(|| {
        sweep(&r, &seq, true);
    });
    row("fill (first write)", pages, local_ns(&seq, true), ns, &d);
    for (name, order, write) in [
        ("sequential read", &seq, false),
        ("sequential rmw", &seq, true),
        ("random read", &rnd, false),
        ("random rmw", &rnd, true),
    ] {
        let (ns, d) = measured(|| {
            std::hint::black_box(sweep(&r, order, write));
        });
        row(name, pages, local_ns(order, write), ns, &d);
    }
    // Two threads, each over half of the random order: the other thread's
    // CPU now takes every TLB shootdown (a VM exit here).
    for (name, write) in [("random read 2thr", false), ("random rmw 2thr", true)] {
        let (ns, d) = measured(|| {
            std::thread::scope(|s| {
                for half in rnd.chunks(pages / 2) {
                    let r = &r;
                    s.spawn(move || std::hint::black_box(sweep(r, half, write)));
                }
            });
        });
        row(name, pages, local_ns(&rnd, write) / 2, ns, &d);
    }
    // Every page was written four times: nothing lost on the way.
    let per_page = PAGE / 8;
    for p in 0..pages {
        assert_eq!(r.word(p * per_page).load(Ordering::Relaxed), 4, "page {p}");
    }
}
