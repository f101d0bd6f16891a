//! Pages striped over `farmem serve` memory servers.
//!
//! **Write-back does not wait for its acknowledgement.** A write request is
//! complete for the runtime once `send` has copied it into the socket buffer:
//! the arena pages can be unmapped at once. Its `WriteOk` is read later, by
//! the next request on that connection (replies come in request order), and
//! an error there stops the program as a failed write-back would.
//!
//! Hazard: a refault could overtake its own write-back. Thread A evicts page
//! p and sends `Write p` on connection 1, not waiting; thread B faults p back
//! and sends `Read p` on connection 2; the server serves connection 2 first
//! and returns the old bytes. So every page has one connection (its *route*:
//! server by stripe, connection by stripe within the server), and a server
//! serves one connection's requests in order: `Read p` queues behind
//! `Write p`. `free` drains every connection first, so a Free cannot overtake
//! a write either.
//!
//! **Replicas** (`FARMEM_REPLICAS`): copy k of a page lives on the server
//! after its primary's k places further on (by stripe), on that server's
//! connection for the page, so the ordering above holds on every copy.
//! A write goes to every live copy and, unlike a single copy's, waits for
//! every acknowledgement before the page may leave local memory; a read
//! goes to the first live one. An I/O
//! or protocol error on a server marks it down for good (one warning line),
//! and the replies it still owed are *salvaged*: an owed read is read again
//! from the next live copy into the same buffer and completed; an owed
//! write acknowledgement counts its pages as kept on fewer copies. Then the
//! failed request is retried on the next copy. With one copy left and that
//! server lost, the error reaches the runtime, which stops the program
//! naming the server: never zeros.
//!
//! Hazard: the failed-over read must not overtake the write it should see.
//! Thread A evicts p: `Write p` to primary P (conn P1) and replica R (conn
//! R1). P dies. Thread B faults p: the read fails on P, so B reads p from R,
//! on R1, behind A's `Write p` there. Had B used any other connection of R,
//! it could get the old bytes; [`RemoteBackend::route`] gives every copy of
//! a page one connection.

mod conn;
mod erasure;
mod handshake;
mod join;
mod leave;
mod memfd;
mod one_sided;
mod path;
mod repair;
mod replicas;
mod reply;
mod set;
#[cfg(test)]
mod tests;
mod ucx;

use super::placement::{Placement, MAX_SERVERS};
use super::sealed::Sealed;
use super::transport::{StreamSocket, Transport};
use super::{Backend, BackendError, MemoryServers, Pipelined, MAX_BATCH};
use crate::config::{Config, Redundancy};
use conn::{Conn, Owed};
use farmem_sys::net::Wait;
use farmem_wire::{ServerAddr, TOKEN_LEN};
use handshake::{authenticate, check_peer, hello, random_token};
use path::{choose_path, PagePath};
use reply::frame_u32;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};

pub use repair::RepairPass;

struct Server {
    name: String,
    conns: Vec<Conn>,
    /// A TCP server on this host: the connection by its side door, where
    /// the session's memory files are granted (see `farmem_wire`).
    side: Option<Conn>,
    /// Lost for good: nothing is routed to it any more.
    down: AtomicBool,
    /// Leaving on purpose: read from, but its copies move elsewhere (see
    /// `leave.rs`).
    leaving: AtomicBool,
}

impl Server {
    /// A failure of I/O with this server, named.
    fn io(&self, source: io::Error) -> BackendError {
        BackendError::Io {
            server: self.name.clone(),
            source,
        }
    }

    /// This server broke the protocol: `why`.
    fn protocol(&self, why: impl Into<String>) -> BackendError {
        BackendError::Protocol {
            server: self.name.clone(),
            why: why.into(),
        }
    }

    /// The page path asked for cannot work with this server: `why`.
    fn transport(&self, why: impl Into<String>) -> BackendError {
        BackendError::Transport {
            server: self.name.clone(),
            why: why.into(),
        }
    }

    /// This server did not prove itself, or refused our proof: `why`.
    fn auth(&self, why: impl Into<String>) -> BackendError {
        BackendError::Auth {
            server: self.name.clone(),
            why: why.into(),
        }
    }

    /// The connection that grants this server's memory files.
    fn memfd_conn(&self) -> &Conn {
        self.side.as_ref().unwrap_or(&self.conns[0])
    }
}

/// Pages striped over `farmem serve` memory servers.
pub struct RemoteBackend {
    servers: set::ServerSet,
    /// Servers given at start: what the connection of a unit on a server
    /// is chosen by, so that joins never move a unit's connection.
    initial: usize,
    stripe: u64,
    wait: Wait,
    /// Copies of every page, on as many different servers.
    replicas: usize,
    /// Pages whose write reached fewer than `replicas` servers.
    under_replicated: std::sync::atomic::AtomicU64,
    /// Installs a completed asynchronous read (the runtime's).
    complete: OnceLock<fn(u64)>,
    /// How pages move: requests on the connections, or one of the
    /// one-sided paths (then the connections carry only control messages:
    /// grants, Free).
    path: PagePath,
    /// Where `farmem stat` reads the servers' health (see `publish`).
    published: OnceLock<&'static crate::publish::Health>,
    /// Every unit's copies: the starting rule, or where repair put them.
    placement: Placement,
    /// Writes and frees hold it shared; repair holds it alone while it
    /// copies one unit (see the hazard in `repair.rs`). Taken only with
    /// more than one copy.
    write_gate: RwLock<()>,
    /// Servers lost so far (the repair thread's cue).
    losses: AtomicU64,
    /// Woken when a server is lost: the repair thread.
    waker: OnceLock<std::thread::Thread>,
    last_repair: Mutex<Option<RepairPass>>,
    /// Servers released after leaving, in order (their memory files'
    /// pages are given back a pass later).
    released: Mutex<Vec<usize>>,
    /// What a server joining later needs, and the joiners not yet given
    /// their share of the copies.
    joining: join::Joining,
    /// Erasure coding (`FARMEM_REDUNDANCY=ec:K+M`): then one copy, and
    /// rows of pages with parity (see `erasure.rs`).
    ec: Option<erasure::Erasure>,
}

/// One server's connections, made but not yet greeted: what
/// [`RemoteBackend::from_links`] takes (sockets from [`RemoteBackend::connect`],
/// or a test's fake links).
pub(crate) struct Links {
    pub(crate) name: String,
    pub(crate) links: Vec<Box<dyn Transport>>,
}

impl RemoteBackend {
    /// Connect `cfg.conns` connections to each server and open one session
    /// (a fresh random token) spanning `max_pages` pages.
    pub fn connect(
        cfg: &Config,
        servers: &[ServerAddr],
        max_pages: u64,
    ) -> Result<RemoteBackend, BackendError> {
        enough_servers(cfg.redundancy(), servers.len())?;
        let mut all = Vec::with_capacity(servers.len());
        for addr in servers {
            let name = addr.to_string();
            let mut links: Vec<Box<dyn Transport>> = Vec::with_capacity(cfg.conns);
            for _ in 0..cfg.conns {
                let link = StreamSocket::connect(addr, cfg.timeout_ms).map_err(|source| {
                    BackendError::Connect {
                        server: name.clone(),
                        source,
                    }
                })?;
                links.push(Box::new(link));
            }
            all.push(Links { name, links });
        }
        let token = random_token().map_err(|e| BackendError::Transport {
            server: servers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            why: format!("the kernel gave no random session token (getrandom: {e}); farmem does not make one up"),
        })?;
        RemoteBackend::from_links(cfg, all, max_pages, token)
    }

    /// A backend over links the caller made (`(server name, its
    /// connections)`): another transport, or a test's scripted server. The
    /// same greeting, checks and page path as [`RemoteBackend::connect`].
    pub fn over_links(
        cfg: &Config,
        servers: Vec<(String, Vec<Box<dyn Transport>>)>,
        max_pages: u64,
    ) -> Result<RemoteBackend, BackendError> {
        let token = random_token().map_err(|e| BackendError::Transport {
            server: servers
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(","),
            why: format!("the kernel gave no random session token (getrandom: {e})"),
        })?;
        let links = servers
            .into_iter()
            .map(|(name, links)| Links { name, links })
            .collect();
        RemoteBackend::from_links(cfg, links, max_pages, token)
    }

    /// Greet every connection of every server (the handshake where needed,
    /// Hello with `token`), move the session onto UCX where `cfg.transport`
    /// says so, and stripe pages over the servers in the order given.
    pub(crate) fn from_links(
        cfg: &Config,
        servers: Vec<Links>,
        max_pages: u64,
        token: [u8; TOKEN_LEN],
    ) -> Result<RemoteBackend, BackendError> {
        enough_servers(cfg.redundancy(), servers.len())?;
        // With erasure coding, every server may hold parity pages past the
        // arena's.
        let (ec, server_pages) = match cfg.redundancy() {
            Redundancy::Erasure { data, parity } => (
                Some(erasure::Erasure::new(data, parity, max_pages)?),
                erasure::Erasure::server_pages(data, parity, max_pages),
            ),
            Redundancy::Replicas(_) => (None, max_pages),
        };
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let secret = farmem_wire::auth::find(cfg.secret_file.as_deref(), home.as_deref())?;
        let wait = Wait {
            spin_ns: cfg.spin_us * 1000,
            timeout_ns: cfg.timeout_ms * 1_000_000,
        };
        // Every connection greeted first; then the session's page path,
        // one for all its servers.
        let mut out = Vec::with_capacity(servers.len());
        for Links { name, links } in servers {
            out.push(greet(
                name,
                links,
                secret.as_ref(),
                &token,
                server_pages,
                wait,
            )?);
        }
        let path = choose_path(cfg, &mut out, server_pages, &token, wait)?;
        let placement = match &ec {
            Some(ec) => Placement::coded(
                out.len(),
                ec.data + ec.parity,
                erasure::Erasure::rows(ec.data, max_pages).div_ceil(cfg.stripe_pages),
            ),
            None => Placement::new(
                out.len(),
                cfg.copies(),
                max_pages.div_ceil(cfg.stripe_pages),
            ),
        }
        .map_err(|e| {
            BackendError::Config(format!(
                "cannot map the placement table for {max_pages} pages: {e}"
            ))
        })?;
        Ok(RemoteBackend {
            initial: out.len(),
            placement,
            write_gate: RwLock::new(()),
            losses: AtomicU64::new(0),
            waker: OnceLock::new(),
            last_repair: Mutex::new(None),
            released: Mutex::new(Vec::new()),
            joining: join::Joining::new(cfg, token, server_pages, secret),
            servers: set::ServerSet::new(out),
            stripe: cfg.stripe_pages,
            wait,
            replicas: cfg.copies(),
            ec,
            under_replicated: std::sync::atomic::AtomicU64::new(0),
            published: OnceLock::new(),
            complete: OnceLock::new(),
            path,
        })
    }

    /// The server and the connection that carry every request for copy `k`
    /// of `page` (see the hazards in the module comment).
    pub(super) fn route(&self, page: u64, k: usize) -> (usize, usize) {
        if self.ec.is_some() {
            let (row, place) = self.ec_where(page);
            let s = self.placement.server(row / self.stripe, place);
            return (s, self.conn_on(s, page));
        }
        let stripe = page / self.stripe;
        let ns = self.initial;
        let s = self.placement.server(stripe, k);
        let c = farmem_sys::usize_from((stripe / ns as u64) % self.servers[s].conns.len() as u64);
        (s, c)
    }

    pub(super) fn is_down(&self, s: usize) -> bool {
        self.servers[s].down.load(Ordering::Acquire)
    }

    /// Server `s` is lost for good; true the first time.
    pub(super) fn mark_down(&self, s: usize) -> bool {
        let first = !self.servers[s].down.swap(true, Ordering::AcqRel);
        if let Some(h) = self.published.get() {
            h.set_down(s);
        }
        if first {
            self.losses.fetch_add(1, Ordering::AcqRel);
            // A futex wake: no lock, no allocation (this may run in the
            // fault handler).
            if let Some(t) = self.waker.get() {
                t.unpark();
            }
        }
        first
    }

    /// `n` page writes reached fewer than `replicas` servers.
    pub(super) fn count_short(&self, n: u64) {
        self.under_replicated.fetch_add(n, Ordering::Relaxed);
        if let Some(h) = self.published.get() {
            h.add_short(n);
        }
    }

    /// The route of the first live copy of `page`, if any is left.
    pub(super) fn live_route(&self, page: u64) -> Option<(usize, usize)> {
        (0..self.replicas)
            .map(|k| self.route(page, k))
            .find(|&(s, _)| !self.is_down(s))
    }

    /// Group a batch's positions by route (server and connection), then call
    /// `f` once per route, in order of first appearance.
    pub(super) fn per_route(
        &self,
        pages: &[u64],
        route_of: impl Fn(u64) -> (usize, usize),
        mut f: impl FnMut((usize, usize), &[usize]) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        assert!(pages.len() <= MAX_BATCH);
        let mut done = [false; MAX_BATCH];
        for i in 0..pages.len() {
            if done[i] {
                continue;
            }
            let route = route_of(pages[i]);
            let mut idx = [0usize; MAX_BATCH];
            let mut n = 0;
            for (k, &p) in pages.iter().enumerate().skip(i) {
                if !done[k] && route_of(p) == route {
                    done[k] = true;
                    idx[n] = k;
                    n += 1;
                }
            }
            f(route, &idx[..n])?;
        }
        Ok(())
    }
}

/// A server's connections greeted: each checked (a Unix socket's peer),
/// authenticated and sealed where it needs the secret, and joined to the
/// session `token` with Hello.
fn greet(
    name: String,
    links: Vec<Box<dyn Transport>>,
    secret: Option<&farmem_wire::auth::Secret>,
    token: &[u8; TOKEN_LEN],
    max_pages: u64,
    wait: Wait,
) -> Result<Server, BackendError> {
    let mut server = Server {
        name,
        conns: Vec::with_capacity(links.len()),
        side: None,
        down: AtomicBool::new(false),
        leaving: AtomicBool::new(false),
    };
    for mut link in links {
        check_peer(&server, &*link)?;
        if let (Some(secret), false) = (secret, link.is_local()) {
            // From here on, every frame both ways carries its tag.
            let key = authenticate(&server, &*link, secret, wait)?;
            link = Box::new(Sealed::new(link, key));
        }
        hello(&server, &*link, token, max_pages, wait)?;
        server.conns.push(Conn::new(link));
    }
    Ok(server)
}

/// Each page's copies go to different servers, as do a coded row's pages.
fn enough_servers(redundancy: Redundancy, servers: usize) -> Result<(), BackendError> {
    if servers > MAX_SERVERS {
        return Err(BackendError::Config(format!(
            "{servers} memory servers are given, and a session stripes over at most {MAX_SERVERS}; name fewer (FARMEM_SERVERS or --servers)"
        )));
    }
    let are = if servers == 1 { "is" } else { "are" };
    match redundancy {
        Redundancy::Erasure { data, parity } if data + parity > servers => {
            Err(BackendError::Config(format!(
                "FARMEM_REDUNDANCY=ec:{data}+{parity} puts each row's {} pages on as many servers, and {servers} {are} given (FARMEM_SERVERS or --servers)",
                data + parity,
            )))
        }
        Redundancy::Replicas(replicas) if replicas > servers => {
            Err(BackendError::Config(format!(
                "FARMEM_REPLICAS={replicas} needs at least {replicas} memory servers, and {servers} {are} given (FARMEM_SERVERS or --servers)",
            )))
        }
        _ => Ok(()),
    }
}

impl RemoteBackend {
    /// Whether pages survive a lost server (copies or parity): then writes
    /// hold the write gate, and repair runs.
    pub(super) fn redundant(&self) -> bool {
        self.replicas > 1 || self.ec.is_some()
    }

    /// Read `pages` from the first live copy of each (every copy there is,
    /// or a coded page's one server).
    fn plain_read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        if let Some(p) = self.path.one_sided() {
            return p.read(self, pages, buf);
        }
        // Each round reads from the first live copy of every page; a server
        // lost meanwhile is failed over and the round tried again.
        loop {
            let mut lost = None;
            let r = self.per_route(
                pages,
                |p| self.live_route(p).unwrap_or(self.route(p, 0)),
                |r, idx| {
                    let res = self.read_from(r, pages, idx, buf);
                    match res {
                        Err(e) if self.lost(&e) => {
                            lost = Some((r.0, e));
                            Ok(())
                        }
                        other => other,
                    }
                },
            );
            match lost {
                Some((s, e)) => {
                    self.fail_over(s, &e)?;
                    if pages.iter().any(|&p| self.live_route(p).is_none()) {
                        return Err(e);
                    }
                }
                None => return r,
            }
        }
    }
}

impl Backend for RemoteBackend {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        if self.ec.is_some() {
            return self.ec_read(pages, buf);
        }
        self.plain_read(pages, buf)
    }

    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        // With copies or parity, repair may be copying these pages' unit:
        // see the hazard in `repair.rs`.
        let _gate = self.redundant().then(|| self.write_gate.read());
        if self.ec.is_some() {
            return self.ec_write(pages, data);
        }
        if let Some(p) = self.path.one_sided() {
            return p.write(self, pages, data);
        }
        if self.replicas == 1 {
            return self.per_route(
                pages,
                |p| self.route(p, 0),
                |r, idx| self.write_to(r, pages, data, idx),
            );
        }
        // Send to every live copy, then wait for every acknowledgement: with
        // replicas, a page leaves local memory only once each live copy has
        // stored it (with one copy the acknowledgement is read later; see
        // the module comment). A copy whose server is lost is counted, and
        // the write fails only if no copy of some page is left.
        let mut sent = [[false; MAX_BATCH]; crate::config::MAX_REPLICAS];
        for (k, sent_k) in sent[..self.replicas].iter_mut().enumerate() {
            *sent_k = self.on_copy(pages, k, |r, idx| {
                self.write_to(r, pages, data, idx).map(|()| true)
            })?;
        }
        let mut copies = [0u8; MAX_BATCH];
        for (k, sent_k) in sent[..self.replicas].iter().enumerate() {
            // Routes group the same positions in both rounds, so one
            // position tells whether the route's write was sent.
            let acked = self.on_copy(pages, k, |r, idx| {
                Ok(sent_k[idx[0]] && self.drain_conn(r.0, r.1).map(|()| true)?)
            })?;
            for (c, ok) in copies.iter_mut().zip(acked) {
                *c += u8::from(ok);
            }
        }
        for (i, &c) in copies[..pages.len()].iter().enumerate() {
            if c == 0 {
                return Err(BackendError::Io {
                    server: self.holder(pages[i]),
                    source: io::Error::other("every server holding a copy of this page is down"),
                });
            }
            if (c as usize) < self.replicas {
                self.count_short(1);
            }
        }
        Ok(())
    }

    fn free(&self, start: u64, n: u64) -> Result<(), BackendError> {
        // Every server may hold part of the range. Write-backs of these pages
        // were all sent before the pages were released; draining every
        // connection makes sure the server stored them before it frees.
        let _gate = self.redundant().then(|| self.write_gate.read());
        if self.ec.is_some() {
            return self.ec_free(start, n);
        }
        for (s, server) in self.servers.iter().enumerate() {
            if self.is_down(s) {
                continue;
            }
            let r = self.free_on(s, server, start, n);
            match r {
                Err(e) if self.lost(&e) => self.fail_over(s, &e)?,
                other => other?,
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let names: Vec<_> = self.servers.iter().map(|s| s.name.as_str()).collect();
        format!("memory servers {}", names.join(","))
    }

    fn holder(&self, page: u64) -> String {
        if let Some(ec) = &self.ec {
            let (row, place) = self.ec_where(page);
            let unit = row / self.stripe;
            let others: Vec<&str> = (0..ec.data + ec.parity)
                .filter(|&j| j != place)
                .map(|j| self.servers[self.placement.server(unit, j)].name.as_str())
                .collect();
            return format!(
                "{} (its row's others: {})",
                self.servers[self.placement.server(unit, place)].name,
                others.join(", ")
            );
        }
        let names: Vec<&str> = (0..self.replicas)
            .map(|k| self.servers[self.route(page, k).0].name.as_str())
            .collect();
        names.join(" and ")
    }

    fn transport(&self) -> &'static str {
        match &self.path {
            PagePath::Ucx(u) if u.is_local() => "ucx (one-sided, shared memory: a test path)",
            PagePath::Ucx(_) => "ucx (one-sided)",
            PagePath::Memfd(_) => "memfd (one-sided, sealed memory files on this host)",
            PagePath::Sockets => "socket",
        }
    }

    fn pipelined(&self) -> Option<&dyn Pipelined> {
        Some(self)
    }

    fn memory_servers(&self) -> Option<&dyn MemoryServers> {
        Some(self)
    }
}

impl Pipelined for RemoteBackend {
    unsafe fn read_async(
        &self,
        pages: &[u64],
        buf: *mut u8,
        token: u64,
    ) -> Result<bool, BackendError> {
        if self.path.one_sided().is_some() || self.ec.is_some() {
            // One-sided reads complete within the caller's own batch read,
            // and so do coded pages (see `erasure.rs`).
            return Ok(false);
        }
        let Some(route) = self.live_route(pages[0]) else {
            // Every copy is down: the synchronous read reports it.
            return Ok(false);
        };
        let (s, c) = route;
        let server = &self.servers[s];
        let r = {
            let mut conn = self.acquire(s, c);
            (|| {
                self.room(server, &mut conn)?;
                let n = pages.len();
                let idx: [usize; MAX_BATCH] = std::array::from_fn(|i| i);
                let tag = self.send_read(server, &conn, pages, &idx[..n])?;
                conn.pending().push(Owed::Read {
                    tag,
                    first: pages[0],
                    pages: frame_u32(n),
                    buf,
                    token,
                });
                Ok(true)
            })()
        };
        match r {
            // Every error comes before the request is queued (the push
            // is the last step): salvage what the server owed, and let the
            // caller read synchronously from another copy.
            Err(e) if self.lost(&e) => {
                self.fail_over(s, &e)?;
                Ok(false)
            }
            other => other,
        }
    }

    fn progress(&self, page: u64) -> Result<(), BackendError> {
        // The page's unit's connection on every server, not only those of
        // its copies now: a read owed by a server that is now down is
        // salvaged here, and one sent to a server just before repair or a
        // join moved the unit's copy off it is received, or its page would
        // wait for ever. A connection that owes nothing costs one lock.
        let conns = if self.redundant() {
            self.servers.len()
        } else {
            1
        };
        for k in 0..conns {
            let (s, c) = if self.redundant() {
                (k, self.conn_on(k, page))
            } else {
                self.route(page, 0)
            };
            if let Err(e) = self.drain_conn(s, c) {
                if !self.lost(&e) {
                    return Err(e);
                }
                self.fail_over(s, &e)?;
            }
        }
        Ok(())
    }

    fn progress_all(&self) -> Result<(), BackendError> {
        for (s, server) in self.servers.iter().enumerate() {
            for c in 0..server.conns.len() {
                if let Err(e) = self.drain_conn(s, c) {
                    if !self.lost(&e) {
                        return Err(e);
                    }
                    self.fail_over(s, &e)?;
                }
            }
        }
        Ok(())
    }

    fn route_run(&self, page: u64) -> u64 {
        if self.ec.is_some() {
            // A row's consecutive pages are on as many servers, and coded
            // pages are read in one batch whatever their routes (one request
            // per route, all sent before any reply is awaited: `erasure.rs`),
            // so a window need not stop anywhere.
            return 1 << 40;
        }
        self.stripe - page % self.stripe
    }

    fn set_completion(&self, f: fn(u64)) {
        let _ = self.complete.set(f);
    }
}

impl MemoryServers for RemoteBackend {
    fn distrust(&self, page: u64) -> bool {
        if !self.redundant() {
            return false;
        }
        let Some((s, _)) = self.live_route(page) else {
            return false;
        };
        // Only the flag: this may run inside `drain` (an asynchronous read's
        // completion) holding one of this server's connections, so no
        // salvage here. The server still answers; what it owes arrives and
        // is checked like any page. Hazard: the re-read that follows takes
        // a connection of the next copy's server while this thread may hold
        // one of the distrusted server's; a thread doing the same the other
        // way round at once (two servers corrupting pages at the same
        // moment) would wait for ever.
        // (A coded page whose server is down was decoded, from places each
        // checked against what was written there: nothing is left to try,
        // and `live_route` said so above.)
        self.distrusted(s);
        // A coded page is decoded from its row once its server is down.
        self.ec.is_some() || self.live_route(page).is_some()
    }

    fn servers(&self) -> (usize, Vec<String>) {
        (
            // With parity, the servers a page survives losing, plus one.
            self.ec.as_ref().map_or(self.replicas, |ec| 1 + ec.parity),
            self.servers.iter().map(|s| s.name.clone()).collect(),
        )
    }

    fn publish(&self, h: &'static crate::publish::Health) {
        if self.published.set(h).is_ok() {
            // A server lost before now (or while setting) is marked too.
            for s in 0..self.servers.len() {
                if self.is_down(s) {
                    h.set_down(s);
                }
            }
            h.add_short(self.under_replicated.load(Ordering::Relaxed));
        }
    }

    fn health(&self) -> Option<String> {
        if !self.redundant() {
            return None;
        }
        // A server lost and back (it joined again at its address) is not
        // named down.
        let back = |s: usize| {
            (0..self.servers.len())
                .any(|t| !self.is_down(t) && self.servers[t].name == self.servers[s].name)
        };
        let down: Vec<usize> = (0..self.servers.len())
            .filter(|&s| self.is_down(s) && !back(s))
            .collect();
        let names: Vec<&str> = down
            .iter()
            .map(|&s| self.servers[s].name.as_str())
            .collect();
        let under = self.under_replicated.load(Ordering::Relaxed);
        let repair = match self.last_repair() {
            None if down.is_empty() => String::new(),
            None => "; repair has not run".to_string(),
            Some(r) => format!(
                "; last repair: {} of {} pages short copied again in {} ms, {} still short, {} with no copy, {} moved to servers that joined",
                r.pages_copied, r.pages_short, r.millis, r.pages_left_short, r.pages_lost, r.pages_moved
            ),
        };
        let (label, value) = match &self.ec {
            Some(ec) => ("erasure coding", format!("ec:{}+{}", ec.data, ec.parity)),
            None => ("replicas", self.replicas.to_string()),
        };
        Some(format!(
            "  {label:<30} {value:>12} (servers down: {}{repair}; page writes that reached fewer copies: {under})\n",
            if names.is_empty() { "none".into() } else { names.join(", ") },
        ))
    }

    fn prepare(&self, first: u64, n: u64) -> Result<(), BackendError> {
        match self.path.one_sided() {
            Some(p) => p.prepare(self, first, n),
            None => Ok(()),
        }
    }

    fn register_slots(&self, ptr: *mut u8, len: usize) {
        if let PagePath::Ucx(ucx) = &self.path {
            ucx.register_slots(ptr, len);
        }
    }

    fn repairs(&self, waker: std::thread::Thread) -> bool {
        if !self.redundant() {
            return false;
        }
        let _ = self.waker.set(waker);
        true
    }

    fn watch(&self) -> Result<bool, BackendError> {
        RemoteBackend::watch(self)
    }

    fn join(&self, addr: &ServerAddr) -> Result<(), BackendError> {
        if let Some(s) = (0..self.servers.len())
            .find(|&s| !self.is_down(s) && self.servers[s].name == addr.to_string())
        {
            return Err(BackendError::Config(format!(
                "{} is already one of this session's servers (server {s})",
                addr
            )));
        }
        RemoteBackend::join(self, addr).map(|_| ())
    }

    fn losses(&self) -> (u64, u64) {
        (RemoteBackend::losses(self), self.short_writes())
    }

    fn repair(&self, stored: &dyn Fn(u64) -> bool, bound: u64) -> Result<RepairPass, BackendError> {
        self.repair_pass(stored, bound)
    }
}
