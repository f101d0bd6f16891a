//! Write streams over clean pages (see the runtime's `dirty` module), in a
//! process of its own: other tests' eviction pressure would make the pages
//! absent, not clean.

use farmem_runtime::{Advice, Config, Runtime};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

mod common;
use common::{alone, Region, PAGE};

const BUDGET: usize = 4 << 20;

// The tests count write-protect faults, so they take turns (`alone`): one
// test's pages would push the other's out under the shared budget, and a
// page pushed out faults again (CI once saw 70 faults against a bound of 68).

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        // Without recycled pages: the tests count write-protect calls, and
        // a batch moved into the bin takes none (tests/recycle.rs).
        let cfg = Config::from_str_config(&common::with_transport(&format!(
            "local={BUDGET} arena=1G recycle=0"
        )))
        .unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

/// Write back and unmap every page of `r`: its next touch fetches it again.
fn evict(r: &Region) {
    rt().advise(r.addr(0), r.words * 8, Advice::DontNeed)
        .unwrap();
}

/// The first word of page `p` of `r`.
fn page_word(r: &Region, p: usize) -> &AtomicU64 {
    r.word(p * PAGE / 8)
}

/// Read a region (its pages come in clean), then overwrite it in order: the
/// write faults on clean pages run as a stream, so most pages are made
/// writable ahead of the writer instead of faulting one by one, and every
/// write survives eviction.
#[test]
fn writes_over_clean_pages_run_as_a_stream() {
    let _turn = alone();
    // Half the budget: after the read pass every page is resident and clean.
    let r = Region::new(rt(), BUDGET / 2);
    let per_page = PAGE / 8;
    for i in (0..r.words).step_by(per_page) {
        r.word(i).store(1, Ordering::Relaxed);
    }
    evict(&r);
    let mut sum = 0;
    for i in (0..r.words).step_by(per_page) {
        sum += r.word(i).load(Ordering::Relaxed);
    }
    assert_eq!(farmem_sys::usize_from(sum), r.words / per_page);
    let before = rt().snapshot();
    for i in (0..r.words).step_by(per_page) {
        r.word(i).store(7, Ordering::Relaxed);
        r.word(i + 1).store(7, Ordering::Relaxed);
    }
    let after = rt().snapshot();
    let pages = (r.words / per_page) as u64;
    let faults = after.wp_faults - before.wp_faults;
    assert!(
        faults * 4 < pages,
        "{faults} write-protect faults for {pages} pages written in order"
    );
    assert!(after.wp_ahead - before.wp_ahead >= pages / 2);
    evict(&r);
    for i in (0..r.words).step_by(per_page) {
        assert_eq!(r.word(i).load(Ordering::Relaxed), 7, "word {i}");
        assert_eq!(r.word(i + 1).load(Ordering::Relaxed), 7, "word {}", i + 1);
    }
}

/// A read-modify-write sweep just behind its read front (NPB MG's `psinv`:
/// read a row, update it): each write burst runs out of clean pages where
/// the reads have not reached yet. Its write stream must continue from
/// where it stopped at the next burst, one fault per burst, rather than
/// start over (two or three faults per burst before).
#[test]
fn a_write_stream_that_outruns_the_reads_continues_where_it_stopped() {
    let _turn = alone();
    const BURST: usize = 8;
    const BURSTS: usize = 64;
    let r = Region::new(rt(), BURST * BURSTS * PAGE);
    // Demand pages only, so that exactly one burst is read in at a time.
    rt().advise(r.addr(0), r.words * 8, Advice::Random).unwrap();
    let mut faults = 0;
    for b in 0..BURSTS {
        let pages = b * BURST..(b + 1) * BURST;
        let mut sum = 0;
        for p in pages.clone() {
            sum += page_word(&r, p).load(Ordering::Relaxed);
        }
        assert_eq!(sum, 0);
        let before = rt().snapshot().wp_faults;
        for p in pages {
            page_word(&r, p).store(p as u64 + 1, Ordering::Relaxed);
        }
        faults += rt().snapshot().wp_faults - before;
    }
    // The first bursts build the window up; then one fault per burst.
    assert!(
        faults <= (BURSTS + 4) as u64,
        "{faults} write-protect faults for {BURSTS} bursts of {BURST} pages"
    );
    evict(&r);
    for p in 0..BURST * BURSTS {
        assert_eq!(
            page_word(&r, p).load(Ordering::Relaxed),
            p as u64 + 1,
            "page {p}"
        );
    }
}

/// A read-modify-write sweep over far pages (NPB MG's `psinv`, SP's
/// `add`): each window comes in on a read, and the writes follow. Where
/// the write stream expects its next fault, the window comes in writable
/// at once: one write-protect fault per credit's worth of windows, not one
/// per window, and every write survives.
#[test]
fn a_read_modify_write_sweep_brings_its_windows_in_writable() {
    let _turn = alone();
    let pages = 2 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    for p in 0..pages {
        page_word(&r, p).store(p as u64, Ordering::Relaxed);
    }
    // Out to the backend, so that the sweep reads every window from there.
    evict(&r);
    let before = rt().snapshot();
    for p in 0..pages {
        let w = page_word(&r, p);
        // A read, then a write: folded into one `add` to memory, the first
        // access would already be a write.
        let v = std::hint::black_box(w.load(Ordering::Relaxed));
        w.store(v + 1, Ordering::Relaxed);
    }
    let after = rt().snapshot();
    let faults = after.faults - before.faults;
    let wp = after.wp_faults - before.wp_faults;
    assert!(faults > 0, "the sweep took no missing faults");
    assert!(
        wp * 4 <= faults + 4,
        "{wp} write-protect faults for {faults} missing faults in a read-modify-write sweep"
    );
    evict(&r);
    for p in 0..pages {
        assert_eq!(
            page_word(&r, p).load(Ordering::Relaxed),
            p as u64 + 1,
            "page {p}"
        );
    }
}

/// A write stream the program left costs a bounded write-back: a region
/// read and then overwritten in order leaves its stream expecting the page
/// just past it; a read-only sweep that starts there has its first windows
/// brought in writable, on credit, and then no more: the credit, 16
/// windows of at most 64 pages (the runtime's `dirty::CREDIT`), and the
/// clean pages after the stream's last write made writable with it (at
/// most 63).
#[test]
fn a_write_stream_left_behind_wastes_at_most_its_credit() {
    let _turn = alone();
    let written = BUDGET / PAGE / 2;
    let read = 4 * BUDGET / PAGE;
    let r = Region::new(rt(), (written + read) * PAGE);
    for p in 0..written + read {
        page_word(&r, p).store(p as u64, Ordering::Relaxed);
    }
    evict(&r);
    let mut sum = 0;
    for p in 0..written {
        sum += page_word(&r, p).load(Ordering::Relaxed);
    }
    for p in 0..written {
        page_word(&r, p).store(sum + p as u64, Ordering::Relaxed);
    }
    rt().advise(r.addr(0), written * PAGE, Advice::DontNeed)
        .unwrap();
    let before = rt().snapshot();
    let mut sum = 0;
    for p in written..written + read {
        sum += page_word(&r, p).load(Ordering::Relaxed);
    }
    assert_eq!(
        sum,
        ((written + read) * (written + read - 1) / 2 - written * (written - 1) / 2) as u64
    );
    evict(&r);
    let after = rt().snapshot();
    let wasted = (after.bytes_written_back - before.bytes_written_back) / PAGE as u64;
    assert!(
        wasted <= 17 * 64,
        "a read-only sweep of {read} pages wrote {wasted} back"
    );
}

/// Eviction write-protects each run of consecutive dirty pages with one
/// call (a TLB shootdown on every CPU running the program), and the
/// statistics count the calls, those that covered a single page, and the
/// unmap calls: a scattered writer's dirty pages take a call each, a
/// sweep's one per round of 128.
#[test]
fn eviction_counts_its_write_protect_and_unmap_calls() {
    let _turn = alone();
    const PAGES: usize = 256;
    let r = Region::new(rt(), PAGES * PAGE);
    // Demand pages only: the odd pages are never touched and stay absent.
    rt().advise(r.addr(0), r.words * 8, Advice::Random).unwrap();
    for p in (0..PAGES).step_by(2) {
        page_word(&r, p).store(p as u64 + 1, Ordering::Relaxed);
    }
    let before = rt().snapshot();
    evict(&r);
    let d = rt().snapshot().since(&before);
    let dirty = (PAGES / 2) as u64;
    // Each dirty page's neighbours are absent: lone, but no holes.
    assert_eq!(
        (d.protect_calls, d.protect_lone, d.protect_hole),
        (dirty, dirty, 0),
        "every other page dirty: {d:?}"
    );
    // One unmap per batch where the kernel takes ranges, one per page where not.
    assert!(
        (1..=dirty).contains(&d.unmap_calls),
        "{} unmap calls for {dirty} pages",
        d.unmap_calls
    );

    for p in 0..PAGES {
        page_word(&r, p).store(p as u64 + 7, Ordering::Relaxed);
    }
    let before = rt().snapshot();
    evict(&r);
    let d = rt().snapshot().since(&before);
    // `DontNeed` evicts a range in rounds of the most victims a round takes.
    let batches = PAGES.div_ceil(farmem_runtime::config::MAX_EVICT_BATCH) as u64;
    assert_eq!(
        (d.protect_calls, d.protect_lone),
        (batches, 0),
        "every page dirty: {d:?}"
    );
    assert!(
        (batches..=PAGES as u64).contains(&d.unmap_calls),
        "{} unmap calls for {PAGES} pages",
        d.unmap_calls
    );
    for p in 0..PAGES {
        assert_eq!(
            page_word(&r, p).load(Ordering::Relaxed),
            p as u64 + 7,
            "page {p}"
        );
    }
}

/// A single dirty page evicted from between two dirty resident pages is a
/// hole, and `--stats` counts it as one: its own write-protect call, which
/// the run around it would otherwise have shared. At a run's end, or beside
/// a clean page, a lone write-protect is not a hole.
#[test]
fn a_lone_write_protect_between_dirty_pages_counts_as_a_hole() {
    let _turn = alone();
    const PAGES: usize = 8;
    let r = Region::new(rt(), PAGES * PAGE);
    rt().advise(r.addr(0), r.words * 8, Advice::Random).unwrap();
    let write_all = |v: u64| {
        for p in 0..PAGES {
            page_word(&r, p).store(v + p as u64, Ordering::Relaxed);
        }
    };
    let evict_page = |p: usize| {
        rt().advise(r.addr(p * PAGE / 8), PAGE, Advice::DontNeed)
            .unwrap();
    };
    let lone_and_holes = |evict: &dyn Fn()| {
        let before = rt().snapshot();
        evict();
        let d = rt().snapshot().since(&before);
        (d.protect_calls, d.protect_lone, d.protect_hole)
    };

    write_all(100);
    assert_eq!(
        lone_and_holes(&|| evict_page(3)),
        (1, 1, 1),
        "page 3 of 8 dirty"
    );
    // Page 0 has no left neighbour; page 7 none on the right.
    assert_eq!(lone_and_holes(&|| evict_page(0)), (1, 1, 0), "first page");
    assert_eq!(lone_and_holes(&|| evict_page(7)), (1, 1, 0), "last page");
    // Page 4's left neighbour (3) was evicted: absent, so not a hole.
    assert_eq!(
        lone_and_holes(&|| evict_page(4)),
        (1, 1, 0),
        "beside an absent page"
    );

    // Read every page back (0, 3, 4 and 7 come in clean), then dirty all
    // but 4.
    let sum: u64 = (0..PAGES)
        .map(|p| page_word(&r, p).load(Ordering::Relaxed))
        .sum();
    assert_eq!(sum, (0..PAGES as u64).map(|p| 100 + p).sum::<u64>());
    for p in (0..PAGES).filter(|&p| p != 4) {
        page_word(&r, p).store(200 + p as u64, Ordering::Relaxed);
    }
    // Page 5 sits between a clean page (4) and a dirty one (6).
    assert_eq!(
        lone_and_holes(&|| evict_page(5)),
        (1, 1, 0),
        "beside a clean page"
    );
    assert_eq!(
        lone_and_holes(&|| evict_page(2)),
        (1, 1, 1),
        "page 2 between 1 and 3"
    );
    for p in 0..PAGES {
        let want = if p == 4 { 104 } else { 200 + p as u64 };
        assert_eq!(page_word(&r, p).load(Ordering::Relaxed), want, "page {p}");
    }
}
