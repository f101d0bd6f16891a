//! The hold (`FARMEM_HOLD`) under pressure: pages evicted into it, reused
//! from it, written while there and evicted from it for good, by several
//! threads at 8x the budget, every read checked against what was written
//! last. One runtime per process: every test here shares it.

#[allow(dead_code)]
mod common;
use common::{Region, PAGE};
use farmem_runtime::{Config, Runtime};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

const BUDGET: usize = 8 << 20;

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let cfg = Config::from_str_config(&common::with_transport(&format!(
            "local={BUDGET} arena=4G timeout_ms=20000 hold=25"
        )))
        .unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

fn val(round: u64, i: u64) -> u64 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .rotate_left(13)
}

/// Each thread owns a stripe of pages; it writes rounds of values over a
/// hot set (reused while held) and a cold sweep (leaving for good), and
/// checks every page it reads against the last round it wrote there.
#[test]
fn held_pages_never_lose_a_write() {
    let threads = 4;
    let pages = 8 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    let words_per_page = PAGE / 8;
    std::thread::scope(|s| {
        for t in 0..threads {
            let r = &r;
            s.spawn(move || {
                let mine: Vec<usize> = (t..pages).step_by(threads).collect();
                let mut last = vec![0u64; mine.len()];
                let mut x = 0x1234_5678_9abc_def1u64 ^ (t as u64);
                for round in 1..=6u64 {
                    for step in 0..mine.len() * 2 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Half the steps in a hot eighth, half anywhere.
                        let k = if step % 2 == 0 {
                            usize::try_from(x % (mine.len() as u64 / 8)).unwrap()
                        } else {
                            usize::try_from(x % mine.len() as u64).unwrap()
                        };
                        let p = mine[k];
                        let w = p * words_per_page + 1 + usize::try_from(x % 8).unwrap();
                        let got = r.word(p * words_per_page).load(Ordering::Relaxed);
                        let want = if last[k] == 0 {
                            0
                        } else {
                            val(last[k], p as u64)
                        };
                        assert_eq!(got, want, "page {p}: stale or lost content");
                        if !x.is_multiple_of(3) {
                            r.word(p * words_per_page)
                                .store(val(round, p as u64), Ordering::Relaxed);
                            r.word(w).store(round, Ordering::Relaxed);
                            last[k] = round;
                        }
                    }
                }
            });
        }
    });
    let s = rt().snapshot();
    assert!(
        s.held > 0 && s.hold_reused > 0,
        "the hold was not used: {s:?}"
    );
    assert!(s.evictions > 0, "{s:?}");
}

/// Freeing memory whose pages sit in the hold gives their slots back: the
/// next allocation's pages read as zero, and the hold keeps working.
#[test]
fn freeing_held_pages_gives_their_slots_back() {
    for round in 0..3u64 {
        let pages = 4 * BUDGET / PAGE;
        let r = Region::new(rt(), pages * PAGE);
        for p in 0..pages {
            assert_eq!(
                r.word(p * PAGE / 8).load(Ordering::Relaxed),
                0,
                "round {round}: page {p} not zero"
            );
            r.word(p * PAGE / 8).store(p as u64 + 1, Ordering::Relaxed);
        }
        for p in (0..pages).rev() {
            assert_eq!(r.word(p * PAGE / 8).load(Ordering::Relaxed), p as u64 + 1);
        }
    }
}
