//! Recycled pages (the runtime's `recycle` module): evicted pages moved out
//! into the bin and moved back in by writable installs. In a process of its
//! own, with the bin on, so that the counts are this program's.

use farmem_runtime::{Advice, Runtime};
use std::sync::atomic::Ordering;

mod common;
#[path = "../../../tests/support/skip.rs"]
mod skip;
use common::{alone, Region, PAGE};

/// 32,768 pages: a bin of two chunks, and eviction rounds of 128 victims.
const BUDGET: usize = 128 << 20;
/// Pages per chunk of the bin: the most victims a round chooses.
const CHUNK: usize = farmem_runtime::config::MAX_EVICT_BATCH;
/// Chunks of the bin at this budget.
const CHUNKS: u64 = 2;

fn rt() -> &'static Runtime {
    common::runtime(|| format!("local={BUDGET} arena=1G"))
}

/// Where the kernel cannot move pages (Linux < 6.8), the runtime copies and
/// unmaps as before, and these tests have nothing to check: a skip, which
/// fails under CI (`tests/support/skip.rs`).
fn recycles(test: &str) -> bool {
    if rt().recycles() {
        return true;
    }
    skip::skip(
        test,
        "the bin of recycled pages is off: this kernel does not move pages (UFFDIO_MOVE, Linux 6.8)",
    );
    false
}

/// The value every word of page `p` holds after pass `pass`.
fn value(p: usize, pass: u64) -> u64 {
    (p as u64) << 20 | pass
}

/// Read-modify-write sweeps over twice the budget: every word comes
/// back with the last pass's value, although many pages went out by a move
/// into the bin and came back by a move out of it.
#[test]
fn recycled_pages_carry_every_write_both_ways() {
    let _turn = alone();
    if !recycles("recycled_pages_carry_every_write_both_ways") {
        return;
    }
    let pages = 2 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    let per_page = PAGE / 8;
    let before = rt().snapshot();
    for p in 0..pages {
        for w in 0..per_page {
            r.word(p * per_page + w)
                .store(value(p, 0), Ordering::Relaxed);
        }
    }
    for pass in 1..=3 {
        for p in 0..pages {
            for w in 0..per_page {
                let word = r.word(p * per_page + w);
                let v = word.load(Ordering::Relaxed);
                assert_eq!(
                    v,
                    value(p, pass - 1),
                    "page {p} word {w} before pass {pass}"
                );
                word.store(value(p, pass), Ordering::Relaxed);
            }
        }
    }
    let d = rt().snapshot().since(&before);
    // A round of 128 victims moves only into a chunk with room for all of
    // its dirty runs: about one page fetched in eight went through the bin
    // here (at rounds of 32, more than one in four); half that at least.
    let least = (4 * pages / 16) as u64;
    assert!(
        d.recycled_out >= least && d.recycled_in >= least,
        "three sweeps of {pages} pages recycled {} out and {} in",
        d.recycled_out,
        d.recycled_in
    );
    // Every page moved in was moved out first (here, or by the test before
    // it), and the bin holds what is left.
    assert!(
        d.recycled_in.abs_diff(d.recycled_out) <= CHUNKS * CHUNK as u64,
        "{d:?}"
    );
    // Runs: a move each, not a page each.
    assert!(d.move_in_calls * 16 <= d.recycled_in, "{d:?}");
    rt().advise(r.addr(0), r.words * 8, Advice::DontNeed)
        .unwrap();
    for p in 0..pages {
        for w in [0, per_page / 2, per_page - 1] {
            assert_eq!(
                r.word(p * per_page + w).load(Ordering::Relaxed),
                value(p, 3)
            );
        }
    }
}

/// A round of dirty pages leaves by one move into a chunk with room, which
/// replaces its write-protect and its unmap; once the bin is full the
/// rounds after it are write-protected, copied and unmapped as before.
/// Either way every write survives.
#[test]
fn a_full_bin_leaves_eviction_the_old_way() {
    let _turn = alone();
    if !recycles("a_full_bin_leaves_eviction_the_old_way") {
        return;
    }
    const PAGES: usize = 8 * CHUNK;
    let r = Region::new(rt(), PAGES * PAGE);
    rt().advise(r.addr(0), r.words * 8, Advice::Random).unwrap();
    for p in 0..PAGES {
        r.word(p * PAGE / 8).store(p as u64 + 11, Ordering::Relaxed);
    }
    let before = rt().snapshot();
    rt().advise(r.addr(0), r.words * 8, Advice::DontNeed)
        .unwrap();
    let d = rt().snapshot().since(&before);
    // `DontNeed` evicts a range in rounds of a chunk's size.
    let batches = (PAGES / CHUNK) as u64;
    // A round moves only into an empty chunk: at most one round a chunk
    // moved (none where the test before this one left it full), the rest
    // went the old way.
    assert!(
        d.move_out_calls <= CHUNKS,
        "a bin of {CHUNKS} chunks took {} rounds: {d:?}",
        d.move_out_calls
    );
    assert_eq!(d.recycled_out, d.move_out_calls * CHUNK as u64, "{d:?}");
    assert_eq!(
        d.move_out_calls + d.protect_calls,
        batches,
        "one call per batch, a move or a write-protect: {d:?}"
    );
    assert_eq!(d.protect_lone, 0, "{d:?}");
    assert_eq!(d.unmap_calls, batches - d.move_out_calls, "{d:?}");
    assert_eq!(d.bytes_written_back, (PAGES * PAGE) as u64);
    for p in 0..PAGES {
        assert_eq!(
            r.word(p * PAGE / 8).load(Ordering::Relaxed),
            p as u64 + 11,
            "page {p}"
        );
    }
}

/// Clean pages are installed by copy: a page moved in is writable, and the
/// first write of a clean page must fault. A read sweep moves nothing in,
/// and a write to a page it read is seen (written back).
#[test]
fn clean_installs_never_take_recycled_pages() {
    let _turn = alone();
    if !recycles("clean_installs_never_take_recycled_pages") {
        return;
    }
    let pages = 2 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    for p in 0..pages {
        r.word(p * PAGE / 8).store(p as u64 + 5, Ordering::Relaxed);
    }
    rt().advise(r.addr(0), r.words * 8, Advice::DontNeed)
        .unwrap();
    let before = rt().snapshot();
    let mut sum = 0u64;
    for p in 0..pages {
        sum += r.word(p * PAGE / 8).load(Ordering::Relaxed);
    }
    let d = rt().snapshot().since(&before);
    assert_eq!(sum, (0..pages as u64).map(|p| p + 5).sum::<u64>());
    assert_eq!(d.recycled_in, 0, "a read sweep took recycled pages: {d:?}");
    // The last page read is resident and clean: a write to it faults, and
    // eviction writes it back.
    let last = pages - 1;
    let before = rt().snapshot();
    r.word(last * PAGE / 8).store(99, Ordering::Relaxed);
    rt().advise(r.addr(last * PAGE / 8), PAGE, Advice::DontNeed)
        .unwrap();
    let d = rt().snapshot().since(&before);
    assert_eq!(d.bytes_written_back, PAGE as u64, "{d:?}");
    assert_eq!(r.word(last * PAGE / 8).load(Ordering::Relaxed), 99);
}

/// Pages shared with a forked child (copy-on-write) cannot be moved: the
/// kernel refuses them (`EBUSY`), and eviction writes them back and unmaps
/// them as before, losing nothing; the bin stays on for pages it can take.
#[test]
fn pages_shared_since_a_fork_leave_the_old_way() {
    let _turn = alone();
    if !recycles("pages_shared_since_a_fork_leave_the_old_way") {
        return;
    }
    const PAGES: usize = 2 * CHUNK;
    let r = Region::new(rt(), PAGES * PAGE);
    for p in 0..PAGES {
        r.word(p * PAGE / 8).store(p as u64 + 3, Ordering::Relaxed);
    }
    // SAFETY: the child only exits; nothing in it runs past the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: _exit is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: pid is our child; status is a live int.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let before = rt().snapshot();
    rt().advise(r.addr(0), r.words * 8, Advice::DontNeed)
        .unwrap();
    let d = rt().snapshot().since(&before);
    assert_eq!(d.recycled_out, 0, "shared pages moved: {d:?}");
    assert_eq!(d.bytes_written_back, (PAGES * PAGE) as u64, "{d:?}");
    assert!(rt().recycles(), "a busy page turned the bin off");
    for p in 0..PAGES {
        assert_eq!(
            r.word(p * PAGE / 8).load(Ordering::Relaxed),
            p as u64 + 3,
            "page {p}"
        );
    }
}

/// Threads sweeping one region from different starting points, all adding
/// to the same words: their windows come in writable and take recycled
/// pages while the others' victims move out, and no increment is lost.
#[test]
fn threads_sweeping_one_region_lose_no_increment() {
    let _turn = alone();
    if !recycles("threads_sweeping_one_region_lose_no_increment") {
        return;
    }
    let pages = 2 * BUDGET / PAGE;
    let (threads, sweeps) = (4, 2);
    let r = Region::new(rt(), pages * PAGE);
    let before = rt().snapshot();
    std::thread::scope(|s| {
        for t in 0..threads {
            let r = &r;
            s.spawn(move || {
                for _ in 0..sweeps {
                    for k in 0..pages {
                        let p = (t * pages / threads + k) % pages;
                        r.word(p * PAGE / 8).fetch_add(1, Ordering::Relaxed);
                        r.word(p * PAGE / 8 + 1 + t)
                            .store(p as u64, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let d = rt().snapshot().since(&before);
    assert!(d.recycled_in > 0 && d.recycled_out > 0, "{d:?}");
    for p in 0..pages {
        let w = p * PAGE / 8;
        assert_eq!(
            r.word(w).load(Ordering::Relaxed),
            (threads * sweeps) as u64,
            "page {p}"
        );
        for t in 0..threads {
            assert_eq!(
                r.word(w + 1 + t).load(Ordering::Relaxed),
                p as u64,
                "page {p}"
            );
        }
    }
}
