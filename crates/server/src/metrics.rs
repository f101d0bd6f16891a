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
//!
//! The HTTP side: one accept loop, and each connection on a short-lived
//! thread of its own (at most 16 at once, 4 from one IP address) with an
//! absolute deadline of two seconds for reading the request and writing
//! the reply, so a client that trickles its request one byte at a time
//! holds one thread for two seconds and never delays another scrape. On an
//! address other machines can reach, every request must carry a bearer
//! token derived from the shared secret ([`metrics_token`]); the `peer`
//! label (who uses this server) is shown only when asked for.

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
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Request kinds counted, by their `Op` (the wire's own list, so a new
/// request is counted under its name, never as "other").
const OPS: [Op; Op::REQUESTS.len()] = Op::REQUESTS;

/// Error replies counted, by their code (the wire's own list, so a new
/// code is counted under its name): slot 0 collects codes unknown to this
/// build, slot `i + 1` counts `ErrorCode::ALL[i]`.
const CODES: usize = ErrorCode::ALL.len() + 1;

/// The slot that counts error code `code`.
fn code_slot(code: u32) -> usize {
    ErrorCode::ALL
        .iter()
        .position(|c| *c as u32 == code)
        .map_or(0, |i| i + 1)
}

/// The `kind` label of slot `i`.
fn code_name(i: usize) -> &'static str {
    i.checked_sub(1)
        .and_then(|i| ErrorCode::ALL.get(i))
        .map_or("other", |c| c.name())
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
        let i = OPS.iter().position(|op| *op == h.op).unwrap_or(OPS.len());
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
        self.errors[code_slot(code)].fetch_add(1, Relaxed);
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Refusal {
    /// Every reason, in discriminant order (each counts at `reason as usize`).
    const ALL: [Refusal; 4] = [
        Refusal::Quota,
        Refusal::Capacity,
        Refusal::Auth,
        Refusal::Limit,
    ];

    /// The `reason` label.
    fn name(self) -> &'static str {
        match self {
            Refusal::Quota => "quota",
            Refusal::Capacity => "capacity",
            Refusal::Auth => "auth",
            Refusal::Limit => "limit",
        }
    }
}

/// The server's counters besides the connections' own.
pub(crate) struct Metrics {
    started: Instant,
    refused: [AtomicU64; Refusal::ALL.len()],
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
struct Scrape {
    server: Weak<Shared>,
    /// Label sessions with their first peer (`--metrics-peers`).
    peers: bool,
}

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
        let Some(sh) = self.server.upgrade() else {
            return Ok(());
        };
        encode_server(&mut e, &sh)?;
        self.encode_sessions(&mut e, &sh)?;
        encode_refusals(&mut e, &sh.metrics)?;
        encode_traffic(&mut e, &sh.metrics)
    }
}

/// The server as a whole: its build, uptime, capacity and pages stored.
fn encode_server(e: &mut DescriptorEncoder, sh: &Shared) -> std::fmt::Result {
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
        e,
        "farmem_uptime_seconds",
        "Seconds since this server started",
        signed(sh.metrics.started.elapsed().as_secs()),
    )?;
    gauge(
        e,
        "farmem_capacity_bytes",
        "Most all sessions together may store (--capacity)",
        signed(sh.capacity.total() * page),
    )?;
    let used = sh.capacity.used();
    gauge(
        e,
        "farmem_stored_pages",
        "Pages stored, all sessions together (with one-sided chunks granted)",
        signed(used),
    )?;
    gauge(
        e,
        "farmem_stored_bytes",
        "Bytes stored, all sessions together (with UCX chunks granted)",
        signed(used * page),
    )
}

impl Scrape {
    /// The sessions, each one's pages, and the connections.
    fn encode_sessions(&self, e: &mut DescriptorEncoder, sh: &Shared) -> std::fmt::Result {
        let page = PAGE_SIZE as u64;
        // One pass over the session table (locked at Hello and close only,
        // never on the page path).
        let sessions: Vec<(u64, String, u64)> = lock(&sh.sessions)
            .values()
            // What the session is charged for: pages stored, and the chunks
            // of its one-sided pages (UCX or memory files), as the total
            // below counts them.
            .map(|s| (s.id, s.peer.clone(), s.store.charged()))
            .collect();
        gauge(
            e,
            "farmem_sessions",
            "Sessions open (client processes)",
            signed(sessions.len() as u64),
        )?;
        gauge(
            e,
            "farmem_draining",
            "1 while the server leaves (--drain, stopped): no new session, clients move their pages off",
            i64::from(sh.draining.load(std::sync::atomic::Ordering::Acquire)),
        )?;
        counter(
            e,
            "farmem_sessions_opened",
            "Sessions opened since start",
            sh.metrics.sessions_opened.load(Relaxed),
        )?;
        // The peer (a client's IP and port) only when asked for: it tells
        // whoever scrapes who uses this server.
        let (pages_help, bytes_help) = if self.peers {
            (
                "Pages one session stores, by session number and first peer",
                "Bytes one session stores, by session number and first peer",
            )
        } else {
            (
                "Pages one session stores, by session number",
                "Bytes one session stores, by session number",
            )
        };
        for (name, help, unit) in [
            ("farmem_session_stored_pages", pages_help, 1),
            ("farmem_session_stored_bytes", bytes_help, page),
        ] {
            let mut f = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (id, peer, pages) in &sessions {
                let g = ConstGauge::new(signed(pages * unit));
                if self.peers {
                    let labels = [("session", id.to_string()), ("peer", peer.clone())];
                    g.encode(f.encode_family(&labels)?)?;
                } else {
                    g.encode(f.encode_family(&[("session", id.to_string())])?)?;
                }
            }
        }
        gauge(
            e,
            "farmem_connections",
            "Connections open",
            signed(lock(&sh.conns).len() as u64),
        )
    }
}

/// What was refused, by reason, and the handshakes that failed.
fn encode_refusals(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut f = e.encode_descriptor(
        "farmem_refusals",
        "Refused: connections and sessions (auth: no shared secret proven; limit: --max-connections or --max-sessions), writes and UCX chunks (quota: --session-quota full; capacity: --capacity full)",
        None,
        MetricType::Counter,
    )?;
    for reason in Refusal::ALL {
        ConstCounter::new(m.refused[reason as usize].load(Relaxed))
            .encode(f.encode_family(&[("reason", reason.name())])?)?;
    }
    counter(
        e,
        "farmem_auth_failures",
        "Handshakes that failed: a wrong proof, or a client that rejected this server's proof",
        m.auth_failures.load(Relaxed),
    )
}

/// The connections' requests by kind, bytes each way, and error replies
/// by kind.
fn encode_traffic(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let t = m.totals();
    let mut f = e.encode_descriptor(
        "farmem_requests",
        "Requests served over the connections, by kind (UCX one-sided gets and puts do not pass through the server and are not counted)",
        None,
        MetricType::Counter,
    )?;
    for (i, op) in OPS.iter().map(|op| op.name()).enumerate() {
        ConstCounter::new(t.requests[i].load(Relaxed)).encode(f.encode_family(&[("op", op)])?)?;
    }
    ConstCounter::new(t.requests[OPS.len()].load(Relaxed))
        .encode(f.encode_family(&[("op", "other")])?)?;
    counter(
        e,
        "farmem_received_bytes",
        "Bytes of requests received (headers and payloads)",
        t.bytes_in.load(Relaxed),
    )?;
    counter(
        e,
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

/// The most scrapes answered at once, and from one IP address. Each has
/// its own short-lived thread, so a slow client holds one of these for
/// [`SCRAPE_DEADLINE`] at most and never the others.
const MAX_SCRAPES: usize = 16;
const MAX_SCRAPES_PER_IP: usize = 4;
/// Everything one scrape may take: reading the request and writing the
/// reply together (an absolute deadline, not a timeout per `read`).
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(2);
/// The longest request read (its line and headers).
const MAX_REQUEST: usize = 8192;

/// Who may scrape, and what a scrape shows.
#[derive(Clone, Default)]
pub struct MetricsAccess {
    /// The bearer token every request must carry (`Authorization: Bearer
    /// TOKEN`), or None to answer anyone who can connect (loopback).
    pub token: Option<String>,
    /// Label the per-session gauges with the session's first peer (client
    /// IP and port, `--metrics-peers`); off by default.
    pub peers: bool,
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAccess")
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("peers", &self.peers)
            .finish()
    }
}

/// The bearer token for a metrics endpoint that other machines can reach:
/// 64 hex digits of an HMAC-SHA256 under the shared secret, so whoever
/// holds the secret file can compute it (`farmem serve
/// --print-metrics-token`) and the secret itself never goes to Prometheus.
///
/// It is `Secret::derive("farmem metrics")` in hex: a key of its own, which
/// no handshake message can equal.
pub fn metrics_token(secret: &farmem_wire::auth::Secret) -> String {
    crate::hex(&secret.derive(b"farmem metrics"))
}

/// A bound metrics endpoint, not yet serving.
pub struct MetricsEndpoint {
    listener: TcpListener,
    access: MetricsAccess,
}

impl MetricsEndpoint {
    pub fn bind(addr: &str) -> io::Result<MetricsEndpoint> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(MetricsEndpoint {
            listener,
            access: MetricsAccess::default(),
        })
    }

    /// Require a token, or show peers (see [`MetricsAccess`]).
    pub fn with_access(mut self, access: MetricsAccess) -> MetricsEndpoint {
        self.access = access;
        self
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve scrapes of `server` until it stops: an accept loop on a
    /// thread of its own, and each connection on a short-lived thread.
    pub fn serve(self, server: &crate::Server) -> io::Result<()> {
        let shared = Arc::downgrade(&server.shared);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape {
            server: shared.clone(),
            peers: self.access.peers,
        }));
        let registry = Arc::new(registry);
        let token = Arc::new(self.access.token);
        let busy = Arc::new(Mutex::new(Busy::default()));
        std::thread::Builder::new()
            .name("farmem-metrics".into())
            .spawn(move || {
                while let Some(sh) = shared.upgrade() {
                    if sh.shutdown.load(Relaxed) {
                        break;
                    }
                    drop(sh);
                    match self.listener.accept() {
                        Ok((s, peer)) => {
                            let Some(slot) = Busy::take(&busy, peer.ip()) else {
                                refuse_busy(s);
                                continue;
                            };
                            let (registry, token) = (registry.clone(), token.clone());
                            let spawned = std::thread::Builder::new()
                                .name("farmem-scrape".into())
                                .spawn(move || {
                                    let deadline = Instant::now() + SCRAPE_DEADLINE;
                                    let _ = answer(s, &registry, token.as_deref(), deadline);
                                    drop(slot);
                                });
                            if let Err(e) = spawned {
                                tracing::warn!("cannot start a thread for a scrape: {e}");
                            }
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

/// The scrapes in progress: in all, and by client IP address.
#[derive(Default)]
struct Busy {
    total: usize,
    by_ip: HashMap<IpAddr, usize>,
}

/// One scrape's place among [`MAX_SCRAPES`], given back on drop.
struct ScrapeSlot {
    busy: Arc<Mutex<Busy>>,
    ip: IpAddr,
}

impl Busy {
    /// A place for a scrape from `ip`, unless too many are in progress.
    fn take(busy: &Arc<Mutex<Busy>>, ip: IpAddr) -> Option<ScrapeSlot> {
        let mut b = lock(busy);
        let mine = b.by_ip.get(&ip).copied().unwrap_or(0);
        if b.total >= MAX_SCRAPES || mine >= MAX_SCRAPES_PER_IP {
            return None;
        }
        b.total += 1;
        b.by_ip.insert(ip, mine + 1);
        Some(ScrapeSlot {
            busy: busy.clone(),
            ip,
        })
    }
}

impl Drop for ScrapeSlot {
    fn drop(&mut self) {
        let mut b = lock(&self.busy);
        b.total -= 1;
        if let Some(n) = b.by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                b.by_ip.remove(&self.ip);
            }
        }
    }
}

/// Too many scrapes in progress: say so if the socket takes it at once,
/// and close.
fn refuse_busy(mut s: TcpStream) {
    const BUSY: &[u8] =
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if s.set_nonblocking(true).is_ok() {
        let _ = s.write(BUSY);
        // Read what already came, so that the close is not a reset.
        let _ = s.read(&mut [0u8; 1024]);
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
}

/// Time left until `deadline`, or a timeout error once it has passed.
fn left(deadline: Instant) -> io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "the scrape's deadline passed"))
}

/// Write all of `b` by `deadline`.
fn write_by(s: &mut TcpStream, mut b: &[u8], deadline: Instant) -> io::Result<()> {
    while !b.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))?;
        match s.write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The value of header `name` (case-insensitive) in request `head`.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Whether `head` carries `Authorization: Bearer TOKEN`, compared in
/// constant time.
fn authorized(head: &str, token: &str) -> bool {
    let Some(v) = header(head, "authorization") else {
        return false;
    };
    let Some((scheme, given)) = v.split_once(' ') else {
        return false;
    };
    let given = given.trim().as_bytes();
    scheme.eq_ignore_ascii_case("bearer")
        && given.len() == token.len()
        && given
            .iter()
            .zip(token.as_bytes())
            .fold(0u8, |d, (a, b)| d | (a ^ b))
            == 0
}

/// Read one HTTP request and answer it by `deadline`: the metrics at
/// `/metrics`, to a request with the bearer `token` where one is required.
fn answer(
    mut s: TcpStream,
    registry: &Registry,
    token: Option<&str>,
    deadline: Instant,
) -> io::Result<()> {
    s.set_nonblocking(false)?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < MAX_REQUEST {
        s.set_read_timeout(Some(left(deadline)?))?;
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&req);
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let text = |t: &str| t.to_string();
    let (status, kind, body, extra) = match (method, path) {
        _ if token.is_some_and(|t| !authorized(&head, t)) => (
            "401 Unauthorized",
            "text/plain; charset=utf-8",
            text("farmem serve: these metrics need `Authorization: Bearer TOKEN` (`farmem serve --print-metrics-token` prints it)\n"),
            "WWW-Authenticate: Bearer realm=\"farmem\"\r\n",
        ),
        ("GET" | "HEAD", "/metrics") => {
            let mut t = String::new();
            prometheus_client::encoding::prometheus_text::encode(&mut t, registry)
                .map_err(|_| io::Error::other("encoding the metrics failed"))?;
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", t, "")
        }
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            text("farmem serve: the metrics are at /metrics\n"),
            "",
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            text("farmem serve: only GET /metrics is served here\n"),
            "",
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    write_by(&mut s, head.as_bytes(), deadline)?;
    if method != "HEAD" {
        write_by(&mut s, body.as_bytes(), deadline)?;
    }
    Ok(())
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
        assert_eq!(
            c.errors[code_slot(ErrorCode::NotFound as u32)].load(Relaxed),
            1
        );
        let m = Metrics::default();
        let a = m.open(1);
        c.add_into(&a);
        m.close(1);
        assert_eq!(m.totals().requests[1].load(Relaxed), 2);
        assert_eq!(
            code_name(code_slot(ErrorCode::AuthFailed as u32)),
            "auth_failed"
        );
        assert_eq!(code_name(code_slot(0)), "other");
        assert_eq!(code_name(code_slot(u32::MAX)), "other");
    }

    /// Every error code the wire knows has a slot and a label of its own;
    /// every refusal reason counts in its own slot.
    #[test]
    fn tables_follow_the_lists() {
        let mut names: Vec<&str> = (0..CODES).map(code_name).collect();
        assert_eq!(names[0], "other");
        for code in ErrorCode::ALL {
            assert_eq!(code_name(code_slot(code as u32)), code.name());
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CODES);
        for (i, r) in Refusal::ALL.into_iter().enumerate() {
            assert_eq!(r as usize, i, "{r:?} counts in its own slot");
        }
    }
}
