//! Far memory under pressure: real userfaultfd, a real memory server over
//! loopback, regions 8× the local budget, several threads, checked against a
//! reference. One runtime per process, so every test here shares it.

#[allow(dead_code)]
mod common;
use farmem_runtime::{Advice, Config, Runtime};
use farmem_sys::usize_from;
use std::sync::OnceLock;

const BUDGET: u64 = 8 << 20;

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let cfg = Config::from_str_config(&common::with_transport(&format!(
            "local={BUDGET} arena=4G timeout_ms=20000"
        )))
        .unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

/// A deterministic value for (round, word index).
fn val(round: u64, i: u64) -> u64 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .rotate_left(17)
}

struct Region {
    ptr: *mut u64,
    words: usize,
}
// SAFETY: the test coordinates access by index ranges.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    fn new(bytes: usize) -> Region {
        let p = rt().alloc(bytes).unwrap();
        Region {
            ptr: p.cast(),
            words: bytes / 8,
        }
    }
    fn get(&self, i: usize) -> u64 {
        assert!(i < self.words);
        // SAFETY: i is in bounds of the live allocation.
        unsafe { std::ptr::read_volatile(self.ptr.add(i)) }
    }
    fn set(&self, i: usize, v: u64) {
        assert!(i < self.words);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(self.ptr.add(i), v) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        rt().free(self.ptr.cast()).unwrap();
    }
}

#[test]
fn fresh_memory_reads_zero() {
    let r = Region::new(3 * usize_from(BUDGET));
    for i in (0..r.words).step_by(509) {
        assert_eq!(r.get(i), 0, "word {i}");
    }
}

#[test]
fn sequential_then_random_multithreaded_8x() {
    let bytes = 8 * usize_from(BUDGET);
    let r = Region::new(bytes);
    let threads = 4;
    let per = r.words / threads;
    // Round 1: each thread writes its own quarter sequentially (one word per 64 bytes
    // and the rest of every 4th page, to mix partial and full page writes).
    std::thread::scope(|s| {
        for t in 0..threads {
            let r = &r;
            s.spawn(move || {
                for i in t * per..(t + 1) * per {
                    if i % 8 == 0 || (i / 512) % 4 == 0 {
                        r.set(i, val(1, i as u64));
                    }
                }
            });
        }
    });
    let expect1 = |i: usize| {
        if i.is_multiple_of(8) || (i / 512).is_multiple_of(4) {
            val(1, i as u64)
        } else {
            0
        }
    };
    // Round 2: all threads read and write random words anywhere (same pages
    // from several threads at once); a word's owner is i % threads so the
    // expected value stays deterministic.
    std::thread::scope(|s| {
        for t in 0..threads {
            let r = &r;
            s.spawn(move || {
                let mut x = 0x1234_5678u64 + t as u64;
                for _ in 0..40_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (usize_from(x) % r.words) / threads * threads + t;
                    if i >= r.words {
                        continue;
                    }
                    let old = r.get(i);
                    assert!(
                        old == expect1(i) || old == val(2, i as u64),
                        "word {i}: {old:#x}"
                    );
                    r.set(i, val(2, i as u64));
                }
            });
        }
    });
    // Round 3: verify everything, from two threads, backwards and forwards.
    let mut written2 = vec![false; r.words];
    {
        let mut xs = [0x1234_5678u64, 0x1234_5679, 0x1234_567A, 0x1234_567B];
        for (t, x) in xs.iter_mut().enumerate() {
            for _ in 0..40_000 {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                let i = (usize_from(*x) % r.words) / threads * threads + t;
                if i < r.words {
                    written2[i] = true;
                }
            }
        }
    }
    let mismatches = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for half in 0..2 {
            let (r, w2, mm) = (&r, &written2, &mismatches);
            s.spawn(move || {
                let idx: Box<dyn Iterator<Item = usize>> = if half == 0 {
                    Box::new(0..r.words / 2)
                } else {
                    Box::new((r.words / 2..r.words).rev())
                };
                for i in idx {
                    let want = if w2[i] { val(2, i as u64) } else { expect1(i) };
                    if r.get(i) != want {
                        mm.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(mismatches.into_inner(), 0);
    let s = rt().snapshot();
    assert!(
        s.evictions > 0 && s.bytes_written_back > 0 && s.bytes_fetched > 0,
        "{s:?}"
    );
    assert!(
        s.resident_bytes <= BUDGET,
        "resident {} over budget",
        s.resident_bytes
    );
}

#[test]
fn advice_pin_dontneed_and_free_reuse() {
    let r = Region::new(2 * usize_from(BUDGET));
    for i in (0..r.words).step_by(512) {
        r.set(i, val(7, i as u64));
    }
    let bytes = r.words * 8;
    rt().advise(r.ptr as usize, bytes, Advice::DontNeed)
        .unwrap();
    rt().advise(r.ptr as usize, 1 << 20, Advice::Pin).unwrap();
    assert!(
        rt().advise(r.ptr as usize, 8 << 20, Advice::Pin).is_err(),
        "pinning the whole budget must fail"
    );
    rt().advise(r.ptr as usize, bytes, Advice::Sequential)
        .unwrap();
    for i in (0..r.words).step_by(512) {
        assert_eq!(r.get(i), val(7, i as u64));
    }
    rt().advise(r.ptr as usize, 1 << 20, Advice::Unpin).unwrap();
    assert!(rt().advise(r.ptr as usize, 1 << 20, Advice::Unpin).is_err());
    assert!(rt()
        .advise(r.ptr as usize + (64 << 30), 10, Advice::Random)
        .is_err());
    let p = r.ptr;
    drop(r);
    assert!(rt().free(p.cast()).is_err(), "double free must be refused");
    // Memory handed out again reads as zero, not the old content.
    let r2 = Region::new(2 * usize_from(BUDGET));
    for i in (0..r2.words).step_by(512) {
        assert_eq!(r2.get(i), 0);
    }
}

/// `zero` (what the shim's `madvise(MADV_DONTNEED)` does on far memory):
/// the pages covering the range read as zero afterwards, resident or
/// evicted to the server, and the pages around it keep their content.
#[test]
fn zeroed_range_reads_zero_resident_or_evicted() {
    let words = (32 << 20) / 8; // 4× the budget: most pages are on the server
    let r = Region::new(words * 8);
    for i in 0..words {
        r.set(i, val(7, i as u64) | 1);
    }
    let page_words = 4096 / 8;
    // One range at the start (evicted by now), one at the end (resident).
    for first_page in [3usize, words / page_words - 40] {
        let a = r.ptr as usize + first_page * 4096;
        rt().zero(a, 20 * 4096).unwrap();
        for i in first_page * page_words..(first_page + 20) * page_words {
            assert_eq!(r.get(i), 0, "word {i} after zero");
        }
        let before = (first_page - 1) * page_words;
        let after = (first_page + 20) * page_words;
        assert_eq!(r.get(before), val(7, before as u64) | 1);
        assert_eq!(r.get(after), val(7, after as u64) | 1);
        // Written again, the zeroed pages hold the new data through eviction.
        for i in first_page * page_words..(first_page + 20) * page_words {
            r.set(i, val(8, i as u64));
        }
    }
    for i in (0..words).step_by(97) {
        let p = i / page_words;
        let zeroed =
            (3..23).contains(&p) || (words / page_words - 40..words / page_words - 20).contains(&p);
        let want = if zeroed {
            val(8, i as u64)
        } else {
            val(7, i as u64) | 1
        };
        assert_eq!(r.get(i), want, "word {i}");
    }
}
