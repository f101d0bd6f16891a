//! `farmem serve`: a memory server holding other processes' pages.
//!
//! One thread per connection. A connection thread spins briefly on its
//! non-blocking socket after each reply before it blocks, because a blocked
//! thread on an idle vCPU costs ~100 µs to wake (docs/design.md) while a
//! faulting client sends its next request within microseconds.
//!
//! Sessions: a client names its page space with a random 128-bit token at
//! Hello. Connections with the same token share the space; nothing else can
//! read it. A session's pages are released when its last connection closes.

mod store;

use farmem_sys::net::{send_vectored, set_nonblocking, Wait, MAX_IOV};
use farmem_wire::{self as wire, ErrorCode, Header, Op, Request, HEADER_LEN, PAGE_SIZE};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use store::Store;
use thiserror::Error;

/// Errors that stop the server as a whole (connection errors never do).
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source} (is the port in use? pick another with --listen)")]
    Bind { addr: ListenAddr, source: io::Error },
    #[error("{0:?} is not an address to listen on; use IP:PORT (e.g. 0.0.0.0:7070), unix:/PATH or unix:@NAME")]
    BadAddr(String),
    #[error("accept failed: {0}")]
    Accept(io::Error),
    #[error("cannot start a server thread: {0}")]
    Spawn(io::Error),
}

/// Where a server listens: TCP, or a Unix-domain socket for clients on the
/// same machine (`unix:/path`, or `unix:@name` in the abstract namespace).
/// A Unix socket skips the TCP stack: about half the round-trip time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(String),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{p}"),
        }
    }
}

impl std::str::FromStr for ListenAddr {
    type Err = ServerError;
    fn from_str(s: &str) -> Result<ListenAddr, ServerError> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() || p == "@" || p.len() > 100 {
                return Err(ServerError::BadAddr(s.into()));
            }
            return Ok(ListenAddr::Unix(p.into()));
        }
        s.parse()
            .map(ListenAddr::Tcp)
            .map_err(|_| ServerError::BadAddr(s.into()))
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(a: SocketAddr) -> ListenAddr {
        ListenAddr::Tcp(a)
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn bind(addr: &ListenAddr) -> io::Result<Listener> {
        match addr {
            ListenAddr::Tcp(a) => TcpListener::bind(a).map(Listener::Tcp),
            ListenAddr::Unix(p) => {
                let l = match p.strip_prefix('@') {
                    Some(name) => {
                        use std::os::linux::net::SocketAddrExt;
                        let sa = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                        UnixListener::bind_addr(&sa)?
                    }
                    None => UnixListener::bind(p)?,
                };
                Ok(Listener::Unix(l))
            }
        }
    }

    fn fd(&self) -> std::os::fd::RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }

    /// Accept one connection: its socket and a name for messages.
    fn accept(&self) -> io::Result<(OwnedFd, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok((s.into(), peer.to_string()))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                Ok((s.into(), "unix client".into()))
            }
        }
    }
}

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: ListenAddr,
    /// Total pages all sessions together may store.
    pub capacity_pages: u64,
    /// How long a connection thread spins for the next request before blocking.
    pub spin_ns: u64,
    /// Most connections served at once; more are refused with an error.
    pub max_connections: usize,
    /// Print one line per client error on stderr.
    pub verbose: bool,
}

impl ServerConfig {
    pub fn new(listen: impl Into<ListenAddr>, capacity_bytes: u64) -> ServerConfig {
        ServerConfig {
            listen: listen.into(),
            capacity_pages: capacity_bytes / PAGE_SIZE as u64,
            spin_ns: 1_000_000,
            max_connections: 1024,
            verbose: false,
        }
    }
}

struct Session {
    store: Mutex<Store>,
    max_pages: u64,
    connections: u64,
}

struct Shared {
    cfg: ServerConfig,
    used_pages: AtomicU64,
    sessions: Mutex<HashMap<[u8; wire::TOKEN_LEN], Arc<Mutex<Session>>>>,
    conns: Mutex<HashMap<u64, OwnedFd>>,
    next_conn: AtomicU64,
    shutdown: AtomicBool,
}

/// A bound server, not yet accepting.
pub struct Server {
    listener: Listener,
    shared: Arc<Shared>,
}

/// A server running on its own thread; dropping it shuts it down.
pub struct ServerHandle {
    addr: ListenAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Server {
    pub fn bind(cfg: ServerConfig) -> Result<Server, ServerError> {
        let bind_err = |source| ServerError::Bind {
            addr: cfg.listen.clone(),
            source,
        };
        let listener = Listener::bind(&cfg.listen).map_err(bind_err)?;
        listener.set_nonblocking().map_err(bind_err)?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                cfg,
                used_pages: AtomicU64::new(0),
                sessions: Mutex::new(HashMap::new()),
                conns: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                shutdown: AtomicBool::new(false),
            }),
        })
    }

    /// The address clients connect to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> ListenAddr {
        match &self.listener {
            Listener::Tcp(l) => l
                .local_addr()
                .map(ListenAddr::Tcp)
                .unwrap_or_else(|_| self.shared.cfg.listen.clone()),
            Listener::Unix(_) => self.shared.cfg.listen.clone(),
        }
    }

    /// A flag that makes [`Server::run`] return when set.
    pub fn shutdown_flag(&self) -> ServerStop {
        ServerStop(self.shared.clone())
    }

    /// Accept and serve until the shutdown flag is set.
    pub fn run(self) -> Result<(), ServerError> {
        let shared = self.shared;
        while !shared.shutdown.load(Ordering::Acquire) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    let sh = shared.clone();
                    let full = lock(&shared.conns).len() >= shared.cfg.max_connections;
                    if full {
                        let mut out = Vec::new();
                        wire::encode_error(
                            0,
                            ErrorCode::Capacity,
                            "server has too many connections",
                            &mut out,
                        );
                        let _ = send_vectored(stream.as_raw_fd(), &[&out], quick_wait());
                        drop(stream);
                        continue;
                    }
                    if let Ok(clone) = stream.try_clone() {
                        lock(&shared.conns).insert(id, clone);
                    }
                    let spawned = std::thread::Builder::new()
                        .name(format!("farmem-conn-{id}"))
                        .spawn(move || {
                            let r = serve_connection(&sh, stream);
                            if let Err(e) = r {
                                if sh.cfg.verbose && !sh.shutdown.load(Ordering::Relaxed) {
                                    eprintln!("farmem serve: client {peer}: {e}");
                                }
                            }
                            lock(&sh.conns).remove(&id);
                        });
                    if let Err(e) = spawned {
                        lock(&shared.conns).remove(&id);
                        eprintln!("farmem serve: cannot start a connection thread: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let mut pfd = libc::pollfd {
                        fd: self.listener.fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: pfd is one live pollfd.
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_transient_accept_error(&e) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(ServerError::Accept(e)),
            }
        }
        // Close every connection so their threads see EOF and exit.
        for (_, s) in lock(&shared.conns).drain() {
            farmem_sys::net::shutdown(s.as_raw_fd());
        }
        Ok(())
    }

    /// Run on a background thread.
    pub fn spawn(self) -> Result<ServerHandle, ServerError> {
        let addr = self.local_addr();
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("farmem-server".into())
            .spawn(move || self.run())
            .map_err(ServerError::Spawn)?;
        Ok(ServerHandle {
            addr,
            shared,
            thread: Some(thread),
        })
    }
}

/// Stops a running server from another thread or a signal handler.
#[derive(Clone)]
pub struct ServerStop(Arc<Shared>);

impl ServerStop {
    pub fn stop(&self) {
        self.0.shutdown.store(true, Ordering::Release);
    }
}

impl ServerHandle {
    pub fn addr(&self) -> ListenAddr {
        self.addr.clone()
    }

    /// Pages stored across all sessions.
    pub fn used_pages(&self) -> u64 {
        self.shared.used_pages.load(Ordering::Relaxed)
    }

    pub fn shutdown(mut self) -> Result<(), ServerError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ServerError> {
        self.shared.shutdown.store(true, Ordering::Release);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or(Ok(())),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE)
            | Some(libc::ENFILE)
            | Some(libc::ENOBUFS)
            | Some(libc::ENOMEM)
            | Some(libc::ECONNABORTED)
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn quick_wait() -> Wait {
    Wait {
        spin_ns: 0,
        timeout_ns: 2_000_000_000,
    }
}

/// Why a connection ended early.
#[derive(Debug, Error)]
enum ConnError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("protocol error, connection closed: {0}")]
    Protocol(#[from] wire::WireError),
}

fn serve_connection(sh: &Shared, stream: OwnedFd) -> Result<(), ConnError> {
    let fd = stream.as_raw_fd();
    set_nonblocking(fd)?;
    // Wait for requests forever (EOF or shutdown ends the loop), spinning first.
    let idle = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: u64::MAX / 2,
    };
    let reply_wait = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: 30_000_000_000,
    };
    let mut session: Option<([u8; wire::TOKEN_LEN], Arc<Mutex<Session>>)> = None;
    let mut input = Input::new();
    let mut out = Vec::with_capacity(HEADER_LEN + 64 * PAGE_SIZE);
    let result = loop {
        match input.fill(fd, HEADER_LEN, idle) {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(input.peek(HEADER_LEN));
        let h = match Header::decode(&hb) {
            Ok(h) => h,
            Err(e) => {
                out.clear();
                wire::encode_error(0, e.code(), &e.to_string(), &mut out);
                let _ = send_vectored(fd, &[&out], reply_wait);
                break Err(e.into());
            }
        };
        let frame = HEADER_LEN + h.len as usize;
        if let Err(e) = input.fill(fd, frame, reply_wait) {
            break Err(e.into());
        }
        let payload = &input.peek(frame)[HEADER_LEN..];
        out.clear();
        let keep = match wire::decode_request(&h, payload) {
            Ok(req) => handle(sh, &mut session, &h, req, &mut out, fd, reply_wait),
            Err(e) => {
                wire::encode_error(h.tag, e.code(), &e.to_string(), &mut out);
                Ok(e.code().keeps_connection())
            }
        };
        input.consume(frame);
        let keep = match keep {
            Ok(k) => k,
            Err(e) => break Err(e.into()),
        };
        if !out.is_empty() {
            if let Err(e) = send_vectored(fd, &[&out], reply_wait) {
                break Err(e.into());
            }
        }
        if !keep {
            break Ok(());
        }
    };
    if let Some((token, s)) = session {
        leave_session(sh, token, s);
    }
    result
}

/// Requests arrive through a buffer: one `recv` usually brings a whole
/// request (header and payload), saving a system call per request.
struct Input {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Input {
    fn new() -> Input {
        Input {
            buf: vec![0u8; HEADER_LEN + wire::MAX_PAYLOAD].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Make `n` bytes available (n <= the buffer size). Ok(false): the peer
    /// closed cleanly between frames.
    fn fill(&mut self, fd: std::os::fd::RawFd, n: usize, wait: Wait) -> io::Result<bool> {
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end - self.start < n {
            let r = farmem_sys::net::recv_some(fd, &mut self.buf[self.end..], wait)?;
            if r == 0 {
                if self.end == self.start {
                    return Ok(false);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame",
                ));
            }
            self.end += r;
        }
        Ok(true)
    }

    fn peek(&self, n: usize) -> &[u8] {
        &self.buf[self.start..self.start + n]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}

/// Handle one decoded request. The reply goes into `out`, except for page
/// data, which is sent straight from the store (and `out` left empty).
/// Returns whether the connection stays open.
fn handle(
    sh: &Shared,
    session: &mut Option<([u8; wire::TOKEN_LEN], Arc<Mutex<Session>>)>,
    h: &Header,
    req: Request<'_>,
    out: &mut Vec<u8>,
    fd: std::os::fd::RawFd,
    wait: Wait,
) -> io::Result<bool> {
    let err = |out: &mut Vec<u8>, code: ErrorCode, msg: &str| {
        wire::encode_error(h.tag, code, msg, out);
        Ok(code.keeps_connection())
    };
    match req {
        Request::Hello { token, max_pages } => {
            if session.is_some() {
                return err(
                    out,
                    ErrorCode::Malformed,
                    "this connection already said Hello",
                );
            }
            let s = {
                let mut sessions = lock(&sh.sessions);
                let s = sessions
                    .entry(token)
                    .or_insert_with(|| {
                        Arc::new(Mutex::new(Session {
                            store: Mutex::new(Store::default()),
                            max_pages,
                            connections: 0,
                        }))
                    })
                    .clone();
                let mut g = lock(&s);
                if g.max_pages != max_pages {
                    drop(g);
                    return err(
                        out,
                        ErrorCode::Malformed,
                        "max_pages differs from the session's",
                    );
                }
                g.connections += 1;
                drop(g);
                s
            };
            *session = Some((token, s));
            let mut p = [0u8; 24];
            p[0..8].copy_from_slice(&sh.cfg.capacity_pages.to_le_bytes());
            p[8..16].copy_from_slice(&sh.used_pages.load(Ordering::Relaxed).to_le_bytes());
            p[16..24].copy_from_slice(&(PAGE_SIZE as u64).to_le_bytes());
            out.extend_from_slice(&Header::new(Op::HelloOk, h.tag, 0, 24).encode());
            out.extend_from_slice(&p);
            Ok(true)
        }
        Request::Stats => {
            let sessions = lock(&sh.sessions).len() as u64;
            let conns = lock(&sh.conns).len() as u64;
            out.extend_from_slice(&Header::new(Op::StatsOk, h.tag, 0, 32).encode());
            for v in [
                sh.cfg.capacity_pages,
                sh.used_pages.load(Ordering::Relaxed),
                sessions,
                conns,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            Ok(true)
        }
        Request::Read { pages } => {
            let s = match checked_session(session, pages, "Read") {
                Ok(s) => s,
                Err((code, msg)) => return err(out, code, &msg),
            };
            let store = lock(&s.store);
            if let Some(p) = wire::pages(pages).find(|&p| store.get(p).is_none()) {
                return err(
                    out,
                    ErrorCode::NotFound,
                    &format!("page {p} was never written"),
                );
            }
            // Gather the pages straight from the store into the socket, in
            // groups that fit one sendmsg.
            let hdr = Header::new(Op::ReadOk, h.tag, h.count, h.count * PAGE_SIZE as u32).encode();
            let mut parts: [&[u8]; MAX_IOV] = [&[]; MAX_IOV];
            parts[0] = &hdr;
            let mut k = 1;
            for p in wire::pages(pages) {
                if k == MAX_IOV {
                    send_vectored(fd, &parts[..k], wait)?;
                    k = 0;
                }
                parts[k] = store.get(p).unwrap_or(&[]);
                k += 1;
            }
            send_vectored(fd, &parts[..k], wait)?;
            Ok(true)
        }
        Request::Write { pages, data } => {
            let s = match checked_session(session, pages, "Write") {
                Ok(s) => s,
                Err((code, msg)) => return err(out, code, &msg),
            };
            let mut store = lock(&s.store);
            let new = store.count_new(wire::pages(pages));
            // Reserve capacity for the whole batch first: all or nothing.
            let reserved = sh
                .used_pages
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    (u + new <= sh.cfg.capacity_pages).then_some(u + new)
                })
                .is_ok();
            if !reserved {
                return err(
                    out,
                    ErrorCode::Capacity,
                    &format!(
                        "server capacity exhausted ({} of {} pages used); start it with a larger --capacity or add servers",
                        sh.used_pages.load(Ordering::Relaxed),
                        sh.cfg.capacity_pages
                    ),
                );
            }
            for (p, d) in wire::pages(pages).zip(data.chunks_exact(PAGE_SIZE)) {
                store.put(p, d);
            }
            out.extend_from_slice(&Header::new(Op::WriteOk, h.tag, h.count, 0).encode());
            Ok(true)
        }
        Request::Free { start, pages } => {
            let Some((_, s)) = session else {
                return err(out, ErrorCode::NoSession, "say Hello before Free");
            };
            let s = lock(s);
            let end = start.checked_add(pages);
            if end.is_none_or(|e| e > s.max_pages) {
                return err(
                    out,
                    ErrorCode::OutOfRange,
                    "free range is beyond the session's pages",
                );
            }
            let freed = lock(&s.store).remove_range(start, pages);
            sh.used_pages.fetch_sub(freed, Ordering::AcqRel);
            out.extend_from_slice(
                &Header::new(Op::FreeOk, h.tag, freed.min(u32::MAX as u64) as u32, 0).encode(),
            );
            Ok(true)
        }
    }
}

/// The connection's session, if it said Hello and every page is in its range.
fn checked_session<'a>(
    session: &'a Option<([u8; wire::TOKEN_LEN], Arc<Mutex<Session>>)>,
    pages: &[u8],
    op: &str,
) -> Result<std::sync::MutexGuard<'a, Session>, (ErrorCode, String)> {
    let Some((_, s)) = session else {
        return Err((ErrorCode::NoSession, format!("say Hello before {op}")));
    };
    let s = lock(s);
    if let Some(p) = wire::pages(pages).find(|&p| p >= s.max_pages) {
        return Err((
            ErrorCode::OutOfRange,
            format!("page {p} is beyond the session's {} pages", s.max_pages),
        ));
    }
    Ok(s)
}

fn leave_session(sh: &Shared, token: [u8; wire::TOKEN_LEN], s: Arc<Mutex<Session>>) {
    let mut sessions = lock(&sh.sessions);
    let mut g = lock(&s);
    g.connections -= 1;
    if g.connections == 0 {
        let n = lock(&g.store).len() as u64;
        sh.used_pages.fetch_sub(n, Ordering::AcqRel);
        drop(g);
        sessions.remove(&token);
    }
}
