//! Issue 9: the flat per-session page store, served by parallel connections
//! with no lock held while sending. Content is checked byte for byte.

mod common;

use common::{error_code, pattern, server, Client};
use farmem_wire::{ErrorCode, Header, Op, HEADER_LEN, PAGE_SIZE};
use std::time::{Duration, Instant};

#[test]
fn connections_of_one_session_work_in_parallel_on_disjoint_pages() {
    let h = server(1 << 20);
    let threads = 4u64;
    let rounds = 40u64;
    // Held throughout, so the session outlives the worker connections.
    let mut c = Client::session(&h, 7, 1 << 20);
    std::thread::scope(|s| {
        for t in 0..threads {
            let h = &h;
            s.spawn(move || {
                let mut c = Client::session(h, 7, 1 << 20);
                // Interleaved pages (t, t+4, t+8, ...): every thread's batches
                // share bitmap words with the others'.
                let page = |round: u64, i: u64| (round * 64 + i) * threads + t;
                for round in 0..rounds {
                    let pages: Vec<u64> = (0..64).map(|i| page(round, i)).collect();
                    let data: Vec<_> = pages.iter().map(|&p| pattern(p, round)).collect();
                    assert_eq!(c.write(&pages, &data).0.op, Op::WriteOk);
                    // Read back in another order, mixing in an older batch.
                    let mut back: Vec<u64> = pages.iter().rev().copied().collect();
                    back.truncate(48);
                    back.extend((0..16).map(|i| page(round / 2, i)));
                    let (rh, d) = c.read(&back);
                    assert_eq!(rh.op, Op::ReadOk);
                    for (k, &p) in back.iter().enumerate() {
                        let r = if k < 48 { round } else { round / 2 };
                        assert!(
                            d[k * PAGE_SIZE..(k + 1) * PAGE_SIZE] == pattern(p, r)[..],
                            "thread {t} page {p} round {r}: wrong bytes"
                        );
                    }
                }
            });
        }
    });
    assert_eq!(c.stats()[1], threads * rounds * 64);
    // Another connection of the session sees everything.
    let (rh, d) = c.read(&[0, 1, 2, 3]);
    assert_eq!(rh.op, Op::ReadOk);
    for p in 0..4u64 {
        assert!(d[usize::try_from(p).unwrap() * PAGE_SIZE..][..PAGE_SIZE] == pattern(p, 0)[..]);
    }
}

#[test]
fn a_page_never_written_reads_as_an_error() {
    let h = server(1000);
    let mut c = Client::session(&h, 1, 1000);
    assert_eq!(c.write_fill(&[64], 9).0.op, Op::WriteOk);
    // Neighbours in the same and the previous bitmap word, the first and last page.
    for p in [63, 65, 0, 127, 999] {
        assert_eq!(
            error_code(&c.read(&[p])),
            Some(ErrorCode::NotFound),
            "page {p}"
        );
    }
    // One absent page refuses the whole batch, with no page data sent.
    let r = c.read(&[64, 65]);
    assert_eq!(error_code(&r), Some(ErrorCode::NotFound));
    assert!(String::from_utf8_lossy(&r.1).contains("page 65"));
    let (rh, d) = c.read(&[64]);
    assert_eq!(rh.op, Op::ReadOk);
    assert!(d.iter().all(|&b| b == 9));
}

#[test]
fn free_then_read_is_an_error() {
    let h = server(1000);
    let mut c = Client::session(&h, 2, 1000);
    let pages: Vec<u64> = (0..100).collect();
    let data: Vec<_> = pages.iter().map(|&p| pattern(p, 1)).collect();
    assert_eq!(c.write(&pages, &data).0.op, Op::WriteOk);
    assert_eq!(c.free(10, 20), 20);
    assert_eq!(c.stats()[1], 80);
    for p in 10..30 {
        assert_eq!(error_code(&c.read(&[p])), Some(ErrorCode::NotFound));
    }
    let (rh, d) = c.read(&[9, 30]);
    assert_eq!(rh.op, Op::ReadOk);
    assert!(d[..PAGE_SIZE] == pattern(9, 1)[..] && d[PAGE_SIZE..] == pattern(30, 1)[..]);
    // A freed page can be written again, and counts again.
    assert_eq!(c.write(&[15], &[pattern(15, 2)]).0.op, Op::WriteOk);
    assert!(c.read(&[15]).1 == pattern(15, 2));
    assert_eq!(c.stats()[1], 81);
    // Freeing nothing, then everything.
    assert_eq!(c.free(500, 100), 0);
    assert_eq!(c.free(0, 1000), 81);
    assert_eq!(c.stats()[1], 0);
    assert_eq!(error_code(&c.read(&[0])), Some(ErrorCode::NotFound));
}

#[test]
fn capacity_exhaustion_is_all_or_nothing() {
    let h = server(100);
    let mut a = Client::session(&h, 3, 1000);
    assert_eq!(
        a.write_fill(&(0..90).collect::<Vec<_>>(), 1).0.op,
        Op::WriteOk
    );
    // 5 overwrites and 5 new pages: exactly full.
    assert_eq!(
        a.write_fill(&(85..95).collect::<Vec<_>>(), 2).0.op,
        Op::WriteOk
    );
    // 2 overwrites and 10 new pages would need 105: refused whole.
    let mut batch = vec![0, 1];
    batch.extend(200..210);
    let r = a.write_fill(&batch, 3);
    assert_eq!(error_code(&r), Some(ErrorCode::Capacity));
    assert!(String::from_utf8_lossy(&r.1).contains("--capacity"));
    let (rh, d) = a.read(&[0, 1]);
    assert_eq!(rh.op, Op::ReadOk);
    assert!(
        d.iter().all(|&b| b == 1),
        "a refused batch overwrote nothing"
    );
    assert_eq!(error_code(&a.read(&[200])), Some(ErrorCode::NotFound));
    assert_eq!(a.stats()[1], 95);
    // Duplicates count once: 5 distinct new pages fill the server exactly.
    let dup = [300, 300, 301, 302, 301, 303, 304];
    assert_eq!(a.write_fill(&dup, 4).0.op, Op::WriteOk);
    assert_eq!(a.stats()[1], 100);
    assert_eq!(
        error_code(&a.write_fill(&[305], 5)),
        Some(ErrorCode::Capacity)
    );
    // Overwrites need no capacity even when full.
    assert_eq!(a.write_fill(&[300, 0], 6).0.op, Op::WriteOk);
    // Another session is refused too, until the first frees.
    let mut b = Client::session(&h, 4, 1000);
    assert_eq!(
        error_code(&b.write_fill(&[0], 7)),
        Some(ErrorCode::Capacity)
    );
    assert_eq!(a.free(0, 10), 10);
    assert_eq!(
        b.write_fill(&(0..10).collect::<Vec<_>>(), 7).0.op,
        Op::WriteOk
    );
    assert_eq!(
        error_code(&b.write_fill(&[10], 7)),
        Some(ErrorCode::Capacity)
    );
}

#[test]
fn capacity_races_between_sessions_stay_exact() {
    let cap = 1000u64;
    let h = server(cap);
    let stored: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let h = &h;
                s.spawn(move || {
                    let mut c = Client::session(h, 100 + t, 10_000);
                    let mut ok = 0u64;
                    for round in 0..40u64 {
                        let pages: Vec<u64> = (round * 17..round * 17 + 17).collect();
                        let r = c.write_fill(&pages, u8::try_from(t).unwrap());
                        if r.0.op == Op::WriteOk {
                            ok += 17;
                        } else {
                            assert_eq!(error_code(&r), Some(ErrorCode::Capacity));
                            // Nothing of the refused batch landed.
                            for p in pages {
                                assert_eq!(error_code(&c.read(&[p])), Some(ErrorCode::NotFound));
                            }
                        }
                    }
                    // Keep the session (and its pages) until all threads are done.
                    (ok, c)
                })
            })
            .map(|w| w.join().unwrap())
            .collect();
        let total = workers.iter().map(|(ok, _)| ok).sum();
        let mut c = Client::connect(&h);
        assert_eq!(
            c.stats()[1],
            total,
            "used_pages equals the pages acknowledged"
        );
        total
    });
    assert!(stored <= cap && stored > cap - 17);
}

#[test]
fn two_sessions_are_isolated() {
    let h = server(100_000);
    // Held throughout, so the sessions outlive the worker connections.
    let mut a = Client::session(&h, 0xA, 4096);
    let mut b = Client::session(&h, 0xB, 4096);
    std::thread::scope(|s| {
        for token in [0xA, 0xB] {
            let h = &h;
            s.spawn(move || {
                let mut c = Client::session(h, token, 4096);
                for round in 0..30u64 {
                    // Both sessions use the same page numbers.
                    let pages: Vec<u64> = (0..64).map(|i| (round * 64 + i) % 4096).collect();
                    let data: Vec<_> = pages.iter().map(|&p| pattern(p, token)).collect();
                    assert_eq!(c.write(&pages, &data).0.op, Op::WriteOk);
                    let (rh, d) = c.read(&pages);
                    assert_eq!(rh.op, Op::ReadOk);
                    assert!(d == data.concat(), "session {token:#x} saw foreign bytes");
                }
            });
        }
    });
    // A session's Free leaves the other's pages alone.
    assert_eq!(a.free(0, 4096), 30 * 64);
    assert_eq!(error_code(&a.read(&[5])), Some(ErrorCode::NotFound));
    assert!(b.read(&[5]).1 == pattern(5, 0xB));
    // A token that never wrote sees nothing, whatever the page number.
    let mut c = Client::session(&h, 0xC, 4096);
    assert_eq!(error_code(&c.read(&[5])), Some(ErrorCode::NotFound));
    // Ending a session releases its pages only.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.stats()[1] != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(c.stats()[1], 0);
    assert_eq!(a.write_fill(&[1], 1).0.op, Op::WriteOk);
    assert_eq!(error_code(&c.read(&[1])), Some(ErrorCode::NotFound));
}

/// Free racing Reads on other connections of the session: each Read gets
/// the old bytes or NotFound, never zeros and never a crash.
#[test]
fn free_racing_reads_returns_old_bytes_or_an_error() {
    let h = server(10_000);
    let pages: Vec<u64> = (0..64).collect();
    let data: Vec<_> = pages.iter().map(|&p| pattern(p, 3)).collect();
    let mut w = Client::session(&h, 9, 1000);
    assert_eq!(w.write(&pages, &data).0.op, Op::WriteOk);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (found, missing) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (h, pages, data, stop) = (&h, &pages, &data, &stop);
                s.spawn(move || {
                    let mut c = Client::session(h, 9, 1000);
                    let (mut found, mut missing) = (0u32, 0u32);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let r = c.read(pages);
                        match error_code(&r) {
                            None => {
                                assert!(
                                    r.1 == data.concat(),
                                    "a Read racing Free sent wrong bytes"
                                );
                                found += 1;
                            }
                            Some(ErrorCode::NotFound) => missing += 1,
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                    (found, missing)
                })
            })
            .collect();
        let end = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < end {
            assert_eq!(w.free(0, 64), 64);
            assert_eq!(w.write(&pages, &data).0.op, Op::WriteOk);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    eprintln!("reads racing Free: {found} whole, {missing} NotFound");
    assert!(found > 0);
    assert_eq!(w.stats()[1], 64);
}

#[test]
fn a_huge_session_is_backed_only_where_written() {
    let h = server(1000);
    // 16 TiB of page space: only the pages written take memory.
    let max = 1u64 << 32;
    let mut c = Client::session(&h, 11, max);
    let pages = [0, max / 2, max - 1];
    let data: Vec<_> = pages.iter().map(|&p| pattern(p, 0)).collect();
    assert_eq!(c.write(&pages, &data).0.op, Op::WriteOk);
    assert!(c.read(&pages).1 == data.concat());
    assert_eq!(c.free(0, max), 3);
    // Beyond what the address space can hold: refused with a hint, and the
    // connection (and server) keep working.
    let mut d = Client::connect(&h);
    let r = d.hello(12, farmem_wire::MAX_PAGES);
    assert_eq!(error_code(&r), Some(ErrorCode::Capacity));
    assert!(String::from_utf8_lossy(&r.1).contains("FARMEM_ARENA"));
    let r = d.hello(12, 100);
    assert_eq!(r.0.op, Op::HelloOk);
}

#[test]
fn a_write_cut_off_mid_frame_stores_nothing() {
    let h = server(1000);
    let mut keep = Client::session(&h, 13, 1000);
    assert_eq!(keep.write_fill(&[1], 1).0.op, Op::WriteOk);
    let mut c = Client::session(&h, 13, 1000);
    let pages = [500u64, 501, 502, 503];
    let mut b = Header::new(
        Op::Write,
        99,
        4,
        u32::try_from(4 * (8 + PAGE_SIZE)).unwrap(),
    )
    .encode()
    .to_vec();
    b.extend(pages.iter().flat_map(|p| p.to_le_bytes()));
    b.extend(std::iter::repeat_n(0xEE, PAGE_SIZE + PAGE_SIZE / 2));
    c.send_raw(&b);
    drop(c);
    std::thread::sleep(Duration::from_millis(100));
    for p in pages {
        assert_eq!(error_code(&keep.read(&[p])), Some(ErrorCode::NotFound));
    }
    assert_eq!(
        keep.stats()[1],
        1,
        "the cut-off batch's reservation was returned"
    );
}

#[test]
fn a_reply_sent_as_a_request_is_refused_after_its_payload() {
    let h = server(1000);
    let mut c = Client::connect(&h);
    // A ReadOk "request" with a 64 KiB payload: read past, then refused.
    let mut b = Header::new(Op::ReadOk, 5, 16, u32::try_from(16 * PAGE_SIZE).unwrap())
        .encode()
        .to_vec();
    b.extend(std::iter::repeat_n(0u8, 16 * PAGE_SIZE));
    c.send_raw(&b);
    let (rh, _) = c.reply().expect("an error reply before the close");
    assert_eq!((rh.op, rh.tag), (Op::Error, 5));
    assert_eq!(ErrorCode::from_u32(rh.status), Some(ErrorCode::UnknownOp));
    let mut hb = [0u8; HEADER_LEN];
    assert!(std::io::Read::read(&mut c.s, &mut hb).map_or(true, |n| n == 0));
}
