//! `farmem serve --metrics ADDR`: the server's counters in the Prometheus
//! text format, over a small HTTP endpoint (`GET /metrics`).
//!
//! The page path never takes a lock for them: each connection counts its
//! requests, bytes and errors in atomics of its own ([`ConnCounters`]),
//! which a scrape sums. The registry of live connections is locked only
//! when a connection opens or closes and during a scrape; a closing
//! connection folds its counts into `closed` under that lock, so a scrape
//! never counts a connection twice or drops it. Refusals are rare events
//! and count in shared atomics.

use crate::{lock, Shared};
use farmem_wire::{ErrorCode, Header, Op, HEADER_LEN, PAGE_SIZE};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Request kinds counted, by their `Op`.
const OPS: [(Op, &str); 9] = [
    (Op::Hello, "hello"),
    (Op::Read, "read"),
    (Op::Write, "write"),
    (Op::Free, "free"),
    (Op::Stats, "stats"),
    (Op::Auth, "auth"),
    (Op::AuthProof, "auth_proof"),
    (Op::UcxOpen, "ucx_open"),
    (Op::UcxChunk, "ucx_chunk"),
];

/// Error replies counted, by their code (1..=13; 0 collects codes unknown
/// to this build).
const CODES: usize = 14;

fn code_name(i: usize) -> &'static str {
    match u32::try_from(i).ok().and_then(ErrorCode::from_u32) {
        Some(ErrorCode::BadMagic) => "bad_magic",
        Some(ErrorCode::BadVersion) => "bad_version",
        Some(ErrorCode::UnknownOp) => "unknown_op",
        Some(ErrorCode::BadLength) => "bad_length",
        Some(ErrorCode::TooLarge) => "too_large",
        Some(ErrorCode::OutOfRange) => "out_of_range",
        Some(ErrorCode::NoSession) => "no_session",
        Some(ErrorCode::Capacity) => "capacity",
        Some(ErrorCode::NotFound) => "not_found",
        Some(ErrorCode::Malformed) => "malformed",
        Some(ErrorCode::AuthRequired) => "auth_required",
        Some(ErrorCode::AuthFailed) => "auth_failed",
        Some(ErrorCode::Unsupported) => "unsupported",
        None => "other",
    }
}

/// One connection's counts, written only by its own thread.
#[derive(Default)]
pub(crate) struct ConnCounters {
    requests: [AtomicU64; OPS.len() + 1],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    errors: [AtomicU64; CODES],
}

impl ConnCounters {
    /// A frame `h` came in; `reply` went out (empty for a Read served
    /// straight from the store, whose size the header tells).
    pub(crate) fn frame(&self, h: &Header, reply: &[u8]) {
        let i = OPS
            .iter()
            .position(|(op, _)| *op == h.op)
            .unwrap_or(OPS.len());
        self.requests[i].fetch_add(1, Relaxed);
        self.bytes_in
            .fetch_add(HEADER_LEN as u64 + u64::from(h.len), Relaxed);
        let out = if reply.is_empty() && h.op == Op::Read {
            (HEADER_LEN + h.count as usize * PAGE_SIZE) as u64
        } else {
            reply.len() as u64
        };
        self.bytes_out.fetch_add(out, Relaxed);
        if reply.len() >= HEADER_LEN {
            let mut hb = [0u8; HEADER_LEN];
            hb.copy_from_slice(&reply[..HEADER_LEN]);
            if let Ok(r) = Header::decode(&hb) {
                if r.op == Op::Error {
                    self.error(r.status);
                }
            }
        }
    }

    /// An error reply with `code` went out.
    pub(crate) fn error(&self, code: u32) {
        let i = usize::try_from(code)
            .ok()
            .filter(|&c| c < CODES)
            .unwrap_or(0);
        self.errors[i].fetch_add(1, Relaxed);
    }

    fn add_into(&self, to: &ConnCounters) {
        for (a, b) in self.requests.iter().zip(&to.requests) {
            b.fetch_add(a.load(Relaxed), Relaxed);
        }
        for (a, b) in self.errors.iter().zip(&to.errors) {
            b.fetch_add(a.load(Relaxed), Relaxed);
        }
        to.bytes_in.fetch_add(self.bytes_in.load(Relaxed), Relaxed);
        to.bytes_out
            .fetch_add(self.bytes_out.load(Relaxed), Relaxed);
    }
}

/// Why something was refused.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refusal {
    /// A session's `--session-quota` is full.
    Quota,
    /// The server's `--capacity` is full.
    Capacity,
    /// No shared secret proven (missing, wrong, or out of order).
    Auth,
    /// `--max-connections` or `--max-sessions` reached.
    Limit,
}

const REFUSALS: [(Refusal, &str); 4] = [
    (Refusal::Quota, "quota"),
    (Refusal::Capacity, "capacity"),
    (Refusal::Auth, "auth"),
    (Refusal::Limit, "limit"),
];

/// The server's counters besides the connections' own.
pub(crate) struct Metrics {
    started: Instant,
    refused: [AtomicU64; REFUSALS.len()],
    /// Handshakes that failed: a wrong proof, a proof this server could
    /// not check, or a client that rejected this server's proof.
    auth_failures: AtomicU64,
    sessions_opened: AtomicU64,
    live: Mutex<HashMap<u64, Arc<ConnCounters>>>,
    closed: ConnCounters,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            refused: Default::default(),
            auth_failures: AtomicU64::new(0),
            sessions_opened: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            closed: ConnCounters::default(),
        }
    }
}

impl Metrics {
    pub(crate) fn refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn auth_failed(&self) {
        self.auth_failures.fetch_add(1, Relaxed);
    }

    pub(crate) fn session_opened(&self) {
        self.sessions_opened.fetch_add(1, Relaxed);
    }

    /// A new connection's counters.
    pub(crate) fn open(&self, id: u64) -> Arc<ConnCounters> {
        let c = Arc::new(ConnCounters::default());
        lock(&self.live).insert(id, c.clone());
        c
    }

    /// Connection `id` closed: its counts join the closed ones.
    pub(crate) fn close(&self, id: u64) {
        let mut live = lock(&self.live);
        if let Some(c) = live.remove(&id) {
            c.add_into(&self.closed);
        }
    }

    /// Every connection's counts, live and closed, summed.
    fn totals(&self) -> ConnCounters {
        let sum = ConnCounters::default();
        let live = lock(&self.live);
        self.closed.add_into(&sum);
        for c in live.values() {
            c.add_into(&sum);
        }
        sum
    }
}

/// The collector a scrape runs: reads the server's state at that moment.
struct Scrape(Weak<Shared>);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("farmem serve metrics")
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let Some(sh) = self.0.upgrade() else {
            return Ok(());
        };
        let m = &sh.metrics;
        let page = PAGE_SIZE as u64;
        let ucx = match sh.ucx.get() {
            None => "not_started",
            Some(Ok(_)) => "running",
            Some(Err(_)) => "unavailable",
        };
        let info = [
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("protocol", farmem_wire::VERSION.to_string()),
            ("transport", sh.transport.to_string()),
            ("ucx", ucx.to_string()),
        ];
        let mut f = e.encode_descriptor(
            "farmem_server",
            "This server's build, protocol version and transports (the value is 1)",
            None,
            MetricType::Info,
        )?;
        f.encode_info(&info)?;
        gauge(
            &mut e,
            "farmem_uptime_seconds",
            "Seconds since this server started",
            signed(m.started.elapsed().as_secs()),
        )?;
        gauge(
            &mut e,
            "farmem_capacity_bytes",
            "Most all sessions together may store (--capacity)",
            signed(sh.cfg.capacity_pages * page),
        )?;
        let used = sh.used_pages.load(Relaxed);
        gauge(
            &mut e,
            "farmem_stored_pages",
            "Pages stored, all sessions together (with UCX chunks granted)",
            signed(used),
        )?;
        gauge(
            &mut e,
            "farmem_stored_bytes",
            "Bytes stored, all sessions together (with UCX chunks granted)",
            signed(used * page),
        )?;
        // One pass over the session table (locked at Hello and close only,
        // never on the page path).
        let sessions: Vec<(u64, String, u64)> = lock(&sh.sessions)
            .values()
            .map(|s| {
                let pooled = s.store.pool.get().map_or(0, |p| p.charged());
                (s.id, s.peer.clone(), s.store.len() + pooled)
            })
            .collect();
        gauge(
            &mut e,
            "farmem_sessions",
            "Sessions open (client processes)",
            signed(sessions.len() as u64),
        )?;
        counter(
            &mut e,
            "farmem_sessions_opened",
            "Sessions opened since start",
            m.sessions_opened.load(Relaxed),
        )?;
        for (name, help, unit) in [
            (
                "farmem_session_stored_pages",
                "Pages one session stores, by session number and first peer",
                1,
            ),
            (
                "farmem_session_stored_bytes",
                "Bytes one session stores, by session number and first peer",
                page,
            ),
        ] {
            let mut f = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (id, peer, pages) in &sessions {
                let labels = [("session", id.to_string()), ("peer", peer.clone())];
                ConstGauge::new(signed(pages * unit)).encode(f.encode_family(&labels)?)?;
            }
        }
        gauge(
            &mut e,
            "farmem_connections",
            "Connections open",
            signed(lock(&sh.conns).len() as u64),
        )?;
        let mut f = e.encode_descriptor(
            "farmem_refusals",
            "Refused: connections and sessions (auth: no shared secret proven; limit: --max-connections or --max-sessions), writes and UCX chunks (quota: --session-quota full; capacity: --capacity full)",
            None,
            MetricType::Counter,
        )?;
        for (i, (_, reason)) in REFUSALS.iter().enumerate() {
            ConstCounter::new(m.refused[i].load(Relaxed))
                .encode(f.encode_family(&[("reason", *reason)])?)?;
        }
        counter(
            &mut e,
            "farmem_auth_failures",
            "Handshakes that failed: a wrong proof, or a client that rejected this server's proof",
            m.auth_failures.load(Relaxed),
        )?;
        let t = m.totals();
        let mut f = e.encode_descriptor(
            "farmem_requests",
            "Requests served over the connections, by kind (UCX one-sided gets and puts do not pass through the server and are not counted)",
            None,
            MetricType::Counter,
        )?;
        for (i, (_, op)) in OPS.iter().enumerate() {
            ConstCounter::new(t.requests[i].load(Relaxed))
                .encode(f.encode_family(&[("op", *op)])?)?;
        }
        ConstCounter::new(t.requests[OPS.len()].load(Relaxed))
            .encode(f.encode_family(&[("op", "other")])?)?;
        counter(
            &mut e,
            "farmem_received_bytes",
            "Bytes of requests received (headers and payloads)",
            t.bytes_in.load(Relaxed),
        )?;
        counter(
            &mut e,
            "farmem_sent_bytes",
            "Bytes of replies sent (headers and page data)",
            t.bytes_out.load(Relaxed),
        )?;
        let mut f = e.encode_descriptor(
            "farmem_errors",
            "Error replies sent, by kind",
            None,
            MetricType::Counter,
        )?;
        for (i, n) in t.errors.iter().enumerate() {
            let n = n.load(Relaxed);
            if n > 0 || i > 0 {
                ConstCounter::new(n).encode(f.encode_family(&[("kind", code_name(i))])?)?;
            }
        }
        Ok(())
    }
}

/// A bound metrics endpoint, not yet serving.
pub struct MetricsEndpoint {
    listener: TcpListener,
}

impl MetricsEndpoint {
    pub fn bind(addr: &str) -> io::Result<MetricsEndpoint> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(MetricsEndpoint { listener })
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve scrapes of `server` on a thread of their own until it stops.
    pub fn serve(self, server: &crate::Server) -> io::Result<()> {
        let shared = Arc::downgrade(&server.shared);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape(shared.clone())));
        std::thread::Builder::new()
            .name("farmem-metrics".into())
            .spawn(move || {
                while let Some(sh) = shared.upgrade() {
                    if sh.shutdown.load(Relaxed) {
                        break;
                    }
                    drop(sh);
                    match self.listener.accept() {
                        Ok((s, _)) => {
                            // A slow or broken scraper costs this thread
                            // two seconds at most, never a connection.
                            let _ = answer(s, &registry);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            farmem_sys::net::wait_readable(self.listener.as_raw_fd(), 100);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
            .map(drop)
    }
}

/// Read one HTTP request and answer it: the metrics at `/metrics`.
fn answer(mut s: TcpStream, registry: &Registry) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&req);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let mut text = String::new();
            prometheus_client::encoding::prometheus_text::encode(&mut text, registry)
                .map_err(|_| io::Error::other("encoding the metrics failed"))?;
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
        }
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "farmem serve: the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "farmem serve: only GET /metrics is served here\n".to_string(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    if method != "HEAD" {
        s.write_all(body.as_bytes())?;
    }
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_count_requests_bytes_and_errors() {
        let c = ConnCounters::default();
        let read = Header::new(Op::Read, 1, 4, 32);
        c.frame(&read, &[]);
        let err = farmem_wire::Frame::Error {
            code: ErrorCode::NotFound,
            message: "page 3 was never written",
        }
        .encode(1);
        c.frame(&read, &err);
        assert_eq!(c.requests[1].load(Relaxed), 2);
        assert_eq!(c.bytes_in.load(Relaxed), 2 * (HEADER_LEN as u64 + 32));
        assert_eq!(
            c.bytes_out.load(Relaxed),
            (HEADER_LEN + 4 * PAGE_SIZE + err.len()) as u64
        );
        assert_eq!(c.errors[ErrorCode::NotFound as usize].load(Relaxed), 1);
        let m = Metrics::default();
        let a = m.open(1);
        c.add_into(&a);
        m.close(1);
        assert_eq!(m.totals().requests[1].load(Relaxed), 2);
        assert_eq!(code_name(ErrorCode::AuthFailed as usize), "auth_failed");
        assert_eq!(code_name(0), "other");
    }
}
