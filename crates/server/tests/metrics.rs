//! `--metrics`: scrapes of a real server while clients write and read,
//! checked against what the clients know they stored and were refused.

mod common;
use common::*;
use farmem_server::{MetricsEndpoint, Server, ServerConfig, ServerHandle};
use farmem_wire::{ErrorCode, Op, PAGE_SIZE};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn server_with_metrics(quota_pages: u64) -> (ServerHandle, String) {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        4096 * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    cfg.session_quota_pages = quota_pages;
    let server = Server::bind(cfg).unwrap();
    let m = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let at = m.local_addr().unwrap().to_string();
    m.serve(&server).unwrap();
    (server.spawn().unwrap(), at)
}

/// GET `path`: the status line and the body.
fn get(at: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(at).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {at}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// Every sample of a scrape: `name{labels}` to value.
fn scrape(at: &str) -> HashMap<String, f64> {
    let (status, body) = get(at, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// A sample's value: the metrics here are counts, whole and small.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn v(m: &HashMap<String, f64>, k: &str) -> u64 {
    *m.get(k).unwrap_or_else(|| panic!("no {k} in {m:?}")) as u64
}

#[test]
fn a_scrape_counts_what_clients_stored_and_were_refused() {
    let (h, at) = server_with_metrics(64);
    let mut a = Client::session(&h, 1, 1000);
    let pages: Vec<u64> = (0..40).collect();
    assert_eq!(a.write_fill(&pages, 1).0.op, Op::WriteOk);
    assert_eq!(a.write_fill(&pages[..8], 2).0.op, Op::WriteOk);
    assert_eq!(a.read(&pages[..16]).0.op, Op::ReadOk);
    let r = a.read(&[500]);
    assert_eq!(error_code(&r), Some(ErrorCode::NotFound));
    // Past the quota: refused, and counted so.
    let more: Vec<u64> = (40..70).collect();
    assert_eq!(
        error_code(&a.write_fill(&more, 3)),
        Some(ErrorCode::Capacity)
    );
    let mut b = Client::session(&h, 2, 1000);
    assert_eq!(b.write_fill(&pages[..5], 4).0.op, Op::WriteOk);

    let m = scrape(&at);
    assert_eq!(v(&m, "farmem_stored_pages"), 45);
    assert_eq!(v(&m, "farmem_stored_bytes"), 45 * PAGE_SIZE as u64);
    assert_eq!(v(&m, "farmem_sessions"), 2);
    assert_eq!(v(&m, "farmem_connections"), 2);
    let per_session: Vec<u64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("farmem_session_stored_pages{"))
        .map(|(k, _)| v(&m, k))
        .collect();
    let mut sorted = per_session.clone();
    sorted.sort();
    assert_eq!(sorted, vec![5, 40], "{m:?}");
    // No peer label unless asked for (`--metrics-peers`).
    assert!(
        m.contains_key("farmem_session_stored_bytes{session=\"1\"}"),
        "{m:?}"
    );
    assert_eq!(v(&m, "farmem_requests_total{op=\"hello\"}"), 2);
    assert_eq!(v(&m, "farmem_requests_total{op=\"write\"}"), 4);
    assert_eq!(v(&m, "farmem_requests_total{op=\"read\"}"), 2);
    assert_eq!(v(&m, "farmem_errors_total{kind=\"not_found\"}"), 1);
    assert_eq!(v(&m, "farmem_errors_total{kind=\"capacity\"}"), 1);
    assert_eq!(v(&m, "farmem_refusals_total{reason=\"quota\"}"), 1);
    assert_eq!(v(&m, "farmem_refusals_total{reason=\"auth\"}"), 0);
    // Page data both ways: 83 pages written (the refused 30 were still
    // sent), 16 read.
    assert!(v(&m, "farmem_received_bytes_total") >= 83 * PAGE_SIZE as u64);
    let sent = v(&m, "farmem_sent_bytes_total");
    assert!(
        (16 * PAGE_SIZE as u64..17 * PAGE_SIZE as u64).contains(&sent),
        "{sent}"
    );
    assert!(m.contains_key(&format!(
        "farmem_server_info{{version=\"{}\",protocol=\"{}\",transport=\"tcp\",ucx=\"not_started\"}}",
        env!("CARGO_PKG_VERSION"),
        farmem_wire::VERSION
    )));

    // A closed connection's counts stay; its session's pages go.
    drop(b);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let m = scrape(&at);
    assert_eq!(v(&m, "farmem_stored_pages"), 40);
    assert_eq!(v(&m, "farmem_sessions"), 1);
    assert_eq!(v(&m, "farmem_requests_total{op=\"hello\"}"), 2);
    assert_eq!(v(&m, "farmem_sessions_opened_total"), 2);

    let (status, _) = get(&at, "/");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
}

#[test]
fn scrapes_while_a_client_writes_and_reads_agree_with_it() {
    let (h, at) = server_with_metrics(0);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (mut c, stop2, written2) = (Client::session(&h, 7, 4096), stop.clone(), written.clone());
    let t = std::thread::spawn(move || {
        let mut rounds = 0u64;
        let mut next = 0u64;
        while !stop2.load(Ordering::Relaxed) || next < 64 {
            // A batch of new pages, then read them back checked.
            let pages: Vec<u64> = (next..next + 8).collect();
            let data: Vec<Vec<u8>> = pages.iter().map(|&p| pattern(p, 0)).collect();
            assert_eq!(c.write(&pages, &data).0.op, Op::WriteOk);
            written2.store(next + 8, Ordering::Release);
            let r = c.read(&pages);
            assert_eq!(r.1, data.concat());
            next = (next + 8).min(4000);
            rounds += 1;
        }
        (rounds, c)
    });
    let mut last = 0;
    for _ in 0..20 {
        let before = written.load(Ordering::Acquire);
        let m = scrape(&at);
        let after = written.load(Ordering::Acquire);
        let stored = v(&m, "farmem_stored_pages");
        // Never less than what was acknowledged before the scrape, never
        // more than a batch beyond what was after it; never going back.
        assert!(
            stored >= before && stored <= after + 8,
            "{before} <= {stored} <= {after}+8"
        );
        assert!(stored >= last);
        last = stored;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    // The client stays connected: its session's pages stay stored.
    let (rounds, _c) = t.join().unwrap();
    let m = scrape(&at);
    assert_eq!(
        v(&m, "farmem_stored_pages"),
        written.load(Ordering::Acquire)
    );
    assert_eq!(v(&m, "farmem_requests_total{op=\"write\"}"), rounds);
    assert_eq!(v(&m, "farmem_requests_total{op=\"read\"}"), rounds);
    assert!(v(&m, "farmem_sent_bytes_total") >= rounds * 8 * PAGE_SIZE as u64);
}
