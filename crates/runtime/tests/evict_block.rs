//! Lone dirty victims take their block along (`FARMEM_EVICT_BLOCK`, on by
//! default): a scattered writer's victims leave with their block's other
//! dirty pages under one write-protect call, the pages between them held
//! (reserved) meanwhile. In a process of its own, against the embedded
//! server, on the transport `FARMEM_TRANSPORT` names.

use farmem_runtime::{Config, Runtime};
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

mod common;
use common::{scattered_next as next, with_transport, Region, PAGE};

const BUDGET: usize = 4 << 20;

fn rt() -> &'static Runtime {
    static RT: OnceLock<&'static Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let cfg = Config::from_str_config(&with_transport(&format!(
            "local={BUDGET} arena=1G timeout_ms=20000"
        )))
        .unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

fn tag(t: usize, p: usize, round: u64) -> u64 {
    ((t as u64) << 40) | ((p as u64) << 8) | round
}

/// Two threads write every page of their part of 4× the budget, then read
/// and rewrite it, in scattered orders, while a third reads a file into
/// far pages of its own with `pread` (pinned, as the system call wrappers
/// do). Blocks must have come along; every word must come back as last
/// written; no `pread` may fail (a span write-protected over a page that
/// the eviction does not own would make the kernel's write fail with
/// EFAULT); and the queues must hold one entry per resident or STALE page,
/// before and after the region is freed and a new one is used. A fourth
/// thread writes and frees regions of its own all the while.
#[test]
fn blocks_leave_together_and_lose_nothing() {
    // A page write-protected while marked Dirty makes its writer fault
    // forever (the fault path takes it as resolved): fail, do not hang.
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(120));
        eprintln!("blocks_leave_together_and_lose_nothing: no progress in 120 s (a dirty page left write-protected?)");
        std::process::abort();
    });
    let mut file = tempfile();
    let content: Vec<u8> = (0..PAGE)
        .map(|i| u8::try_from(i * 7 % 251).unwrap())
        .collect();
    file.write_all(&content).unwrap();
    let fd = file.as_raw_fd();

    for life in 0..2u64 {
        let bytes = 4 * BUDGET;
        let r = Region::new(rt(), bytes);
        let per_page = PAGE / 8;
        let part = bytes / PAGE / 4; // a power of two: the walk's period is full
        std::thread::scope(|s| {
            for t in 0..2 {
                let r = &r;
                s.spawn(move || {
                    let word = |p: usize| r.word((t * part + p) * per_page + p % per_page);
                    for round in 0..3u64 {
                        let mut p = 0;
                        for _ in 0..part {
                            p = next(p, part, round);
                            if round > 0 {
                                let got = word(p).load(Ordering::Relaxed);
                                assert_eq!(
                                    got,
                                    tag(t, p, round - 1),
                                    "life {life} thread {t} page {p}"
                                );
                            }
                            word(p).store(tag(t, p, round), Ordering::Relaxed);
                        }
                    }
                });
            }
            // Meanwhile regions of a budget's size are written scattered and
            // freed, with their pages among the blocks and the STALE ones.
            s.spawn(move || {
                for round in 0..6u64 {
                    let f = Region::new(rt(), BUDGET);
                    let pages = BUDGET / PAGE;
                    let mut p = 0;
                    for _ in 0..pages {
                        p = next(p, pages, round);
                        f.word(p * per_page)
                            .store(tag(3, p, round), Ordering::Relaxed);
                    }
                    for p in 0..pages {
                        assert_eq!(
                            f.word(p * per_page).load(Ordering::Relaxed),
                            tag(3, p, round),
                            "life {life}: freed region, page {p}"
                        );
                    }
                }
            });
            // The reader: pages of the other half, in the same scattered order.
            let r = &r;
            s.spawn(move || {
                let first = 2 * part;
                let mut p = 0;
                for i in 0..2 * part {
                    p = next(p, 2 * part, 0);
                    let addr = r.addr((first + p) * per_page);
                    let pin = rt().pin_for_io(addr, PAGE, true);
                    // SAFETY: addr is a whole page of the live region, pinned
                    // resident and writable for the call.
                    let n = unsafe { libc::pread(fd, addr as *mut libc::c_void, PAGE, 0) };
                    drop(pin);
                    assert_eq!(
                        n,
                        PAGE as isize,
                        "pread into far page {p} (call {i}): {}",
                        std::io::Error::last_os_error()
                    );
                }
            });
        });
        let s = rt().snapshot();
        assert!(
            s.evicted_with_block > s.evictions / 4,
            "life {life}: only {} of {} evictions came with a block: {s:?}",
            s.evicted_with_block,
            s.evictions
        );
        // Each page that came back while STALE left with a block once; the
        // writers go round their pages again, so some come back soon.
        assert!(
            s.block_back_soon > 0 && s.block_back_soon <= s.evicted_with_block,
            "life {life}: {} pages back soon of {} evicted with a block: {s:?}",
            s.block_back_soon,
            s.evicted_with_block
        );
        for t in 0..2 {
            for p in 0..part {
                let got = r
                    .word((t * part + p) * per_page + p % per_page)
                    .load(Ordering::Relaxed);
                assert_eq!(
                    got,
                    tag(t, p, 2),
                    "life {life} thread {t} page {p} at the end"
                );
            }
        }
        for p in 2 * part..4 * part {
            // SAFETY: a whole page of the live region, read as bytes.
            let page =
                unsafe { std::slice::from_raw_parts(r.addr(p * per_page) as *const u8, PAGE) };
            assert!(
                page == content.as_slice(),
                "life {life}: far page {p} read from the file differs"
            );
        }
        rt().check_queues()
            .unwrap_or_else(|e| panic!("life {life}, before free: {e}"));
        drop(r);
        rt().check_queues()
            .unwrap_or_else(|e| panic!("life {life}, after free: {e}"));
    }
}

fn tempfile() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("farmem-evict-block-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}
