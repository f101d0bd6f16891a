//! The data path's hazards, each against a real userfaultfd and a real
//! memory server (the embedded one, over a Unix socket): write-backs in
//! flight while pages refault, eviction racing writers on 16 threads, pins
//! for system calls within the budget, and signals arriving during faults.
//! One runtime per process, so every test here shares it.

use farmem_runtime::{Advice, Config, Runtime};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

mod common;
use common::{Region, PAGE};

const BUDGET: usize = 4 << 20;

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        // Four connections, so that pages of different stripes travel on
        // different connections and a refault could overtake its write-back
        // if routing did not prevent it.
        let cfg = Config::from_str_config(&common::with_transport(&format!(
            "local={BUDGET} arena=4G timeout_ms=20000 conns=4 stripe=1"
        )))
        .unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

/// Write a page, evict it at once (its write-back is sent, not yet
/// acknowledged), read it back: the read must queue behind the write on the
/// server, never return the older copy. Stripe 1 spreads consecutive pages
/// over all four connections.
#[test]
fn refault_right_after_write_back_sees_the_new_bytes() {
    let r = Region::new(rt(), 64 * PAGE);
    let per_page = PAGE / 8;
    for round in 1..=200u64 {
        for p in 0..64 {
            r.word(p * per_page)
                .store(round * 1000 + p as u64, Ordering::Relaxed);
        }
        rt().advise(r.addr(0), 64 * PAGE, Advice::DontNeed).unwrap();
        for p in (0..64).rev() {
            let got = r.word(p * per_page).load(Ordering::Relaxed);
            assert_eq!(got, round * 1000 + p as u64, "round {round} page {p}");
        }
    }
    assert!(rt().snapshot().bytes_written_back >= 200 * 64 * PAGE as u64);
}

/// 16 threads add to shared counters spread over 8× the budget while
/// eviction writes pages back under them: every increment must survive.
#[test]
fn sixteen_threads_racing_eviction_lose_no_write() {
    let bytes = 8 * BUDGET;
    let r = Region::new(rt(), bytes);
    let words = r.words;
    let threads = 16;
    let rounds = 3;
    let stride = 61; // touches every page, in an order unlike any prefetch stream
    std::thread::scope(|s| {
        for t in 0..threads {
            let r = &r;
            s.spawn(move || {
                for _ in 0..rounds {
                    let mut i = (t * 4099) % words;
                    for _ in 0..words / 512 {
                        r.word(i).fetch_add(1, Ordering::Relaxed);
                        i = (i + stride * 64) % words;
                    }
                }
            });
        }
    });
    let mut expect = vec![0u64; words];
    for t in 0..threads {
        for _ in 0..rounds {
            let mut i = (t * 4099) % words;
            for _ in 0..words / 512 {
                expect[i] += 1;
                i = (i + stride * 64) % words;
            }
        }
    }
    for (i, &e) in expect.iter().enumerate() {
        if e != 0 {
            assert_eq!(r.word(i).load(Ordering::Relaxed), e, "word {i}");
        }
    }
}

/// Many concurrent system calls each pinning a quarter of the budget would
/// together pin more than all of it; the pin limit makes them take turns
/// instead of starving the fault path (which would stop the program).
#[test]
fn concurrent_io_pins_stay_within_the_budget() {
    let chunk = rt().io_chunk();
    assert!(chunk >= BUDGET / 4 - PAGE);
    let threads = 8;
    let r = Region::new(rt(), threads * chunk);
    let max_seen = AtomicUsize::new(0);
    let live = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (r, max_seen, live) = (&r, &max_seen, &live);
            s.spawn(move || {
                for k in 0..20u64 {
                    let start = t * chunk / 8;
                    let pin = rt().pin_for_io(r.addr(start), chunk, true);
                    let now = live.fetch_add(chunk, Ordering::SeqCst) + chunk;
                    max_seen.fetch_max(now, Ordering::SeqCst);
                    // The pinned range is resident and writable: a "kernel" write.
                    r.word(start).store(k, Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    live.fetch_sub(chunk, Ordering::SeqCst);
                    drop(pin);
                }
            });
        }
    });
    assert!(
        max_seen.load(Ordering::SeqCst) <= BUDGET * 3 / 4 + chunk,
        "pins reached {} of a {} budget",
        max_seen.load(Ordering::SeqCst),
        BUDGET
    );
    assert!(
        rt().snapshot().pin_waits > 0,
        "no call ever waited for the pin limit"
    );
}

static SIG_REGION: AtomicUsize = AtomicUsize::new(0);
static SIG_WORDS: AtomicUsize = AtomicUsize::new(0);
static SIG_SEEN: AtomicU64 = AtomicU64::new(0);
static SIG_BAD: AtomicU64 = AtomicU64::new(0);
/// Handlers running now (SIGALRM goes to any thread of the process).
static SIG_ACTIVE: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_alarm(_: libc::c_int) {
    // A program's signal handler that reads far memory: it may land while
    // this thread is inside the SIGBUS handler resolving a fault.
    SIG_ACTIVE.fetch_add(1, Ordering::SeqCst);
    let base = SIG_REGION.load(Ordering::SeqCst) as *const u64;
    let words = SIG_WORDS.load(Ordering::SeqCst);
    if words == 0 {
        SIG_ACTIVE.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let n = farmem_sys::usize_from(SIG_SEEN.fetch_add(1, Ordering::Relaxed));
    let i = (n * 7919 * 512) % words;
    // SAFETY: i < words, inside the live region; the content is i's tag.
    let v = unsafe { std::ptr::read_volatile(base.add(i)) };
    if v != i as u64 {
        SIG_BAD.fetch_add(1, Ordering::Relaxed);
    }
    SIG_ACTIVE.fetch_sub(1, Ordering::SeqCst);
}

/// A timer signal every 50 µs whose handler reads far memory, while the
/// same thread faults all the time: the fault handler must defer the signal
/// (before the fix the process died with SIGBUS).
#[test]
fn signal_handler_touching_far_memory_during_faults() {
    let r = Region::new(rt(), 4 * BUDGET);
    for i in (0..r.words).step_by(512) {
        r.word(i).store(i as u64, Ordering::Relaxed);
    }
    SIG_REGION.store(r.ptr as usize, Ordering::Relaxed);
    SIG_WORDS.store(r.words, Ordering::Relaxed);
    // SAFETY: installing a plain handler for SIGALRM; it only reads far
    // memory and atomics.
    unsafe { libc::signal(libc::SIGALRM, on_alarm as *const () as libc::sighandler_t) };
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 50,
    };
    let it = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: `it` is a live itimerval.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()) };
    let mut sum = 0u64;
    for _ in 0..4 {
        for i in (0..r.words).step_by(512) {
            sum = sum.wrapping_add(r.word(i).load(Ordering::Relaxed));
        }
    }
    let off = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
    };
    // SAFETY: as above.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &off, std::ptr::null_mut()) };
    // A signal still pending may reach another test's thread: stop the
    // handler from reading the region before it is freed.
    SIG_WORDS.store(0, Ordering::SeqCst);
    while SIG_ACTIVE.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
    let expect: u64 = (0..r.words).step_by(512).map(|i| i as u64).sum::<u64>() * 4;
    assert_eq!(sum, expect);
    assert!(
        SIG_SEEN.load(Ordering::Relaxed) > 10,
        "the timer hardly fired"
    );
    assert_eq!(SIG_BAD.load(Ordering::Relaxed), 0);
}

/// Sequential sweeps over 4x the budget run pipelined (the next window is
/// requested while the current one is read, its first page parked as the
/// trigger); short streams the program abandons leave parked triggers that
/// must neither leak slots nor budget nor block a free.
#[test]
fn pipelined_sweeps_and_abandoned_streams() {
    let before = rt().snapshot().prefetch_async;
    let r = Region::new(rt(), 4 * BUDGET);
    let per_page = PAGE / 8;
    for i in (0..r.words).step_by(per_page) {
        r.word(i).store(i as u64 ^ 0xabcd, Ordering::Relaxed);
    }
    for _ in 0..3 {
        for i in (0..r.words).step_by(per_page) {
            assert_eq!(
                r.word(i).load(Ordering::Relaxed),
                i as u64 ^ 0xabcd,
                "word {i}"
            );
        }
    }
    assert!(
        rt().snapshot().prefetch_async > before,
        "no window was pipelined"
    );
    // 60 streams of 300 pages each, each abandoned in the middle.
    for s in 0..60 {
        let first = (s * 977 * per_page) % (r.words - 300 * per_page);
        for k in 0..300 {
            let i = first + k * per_page;
            assert_eq!(r.word(i).load(Ordering::Relaxed), i as u64 ^ 0xabcd);
        }
    }
    drop(r);
    // Everything the abandoned streams held is back: a new region sweeps
    // (and pipelines) as before.
    let again = rt().snapshot().prefetch_async;
    let r = Region::new(rt(), 4 * BUDGET);
    for i in (0..r.words).step_by(per_page) {
        r.word(i).store(i as u64, Ordering::Relaxed);
    }
    for i in (0..r.words).step_by(per_page) {
        assert_eq!(r.word(i).load(Ordering::Relaxed), i as u64);
    }
    assert!(rt().snapshot().prefetch_async > again);
}
