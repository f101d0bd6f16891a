//! Erasure-coded pages (`FARMEM_REDUNDANCY=ec:K+M`): every K consecutive
//! far pages form a *row*, and the row gets M parity pages (Reed-Solomon,
//! `backend/codec.rs`). The row's K + M pages, its *places*, are on K + M
//! different servers: place j of the rows of stripe unit u (`FARMEM_STRIPE`
//! rows a unit) is on the placement's server j of u. A data page keeps its
//! own page number on its server; parity page j of row r is page
//! `parity_base + r * M + j` there (`parity_base` is the arena's pages, so
//! the two never meet).
//!
//! Why the page, not a fragment of it, is the unit coded: a read while the
//! page's server lives is that server's one page, as fast as without
//! coding; splitting a page into K fragments would make every read wait for
//! K servers, and every server would hold fragments the wire protocol does
//! not have. The cost moves to write-back: a row written back whole (a
//! sequential sweep's eviction) sends K + M pages and reads nothing; a
//! page alone reads its old bytes and the M parity pages first and updates
//! the parity from the change (the code is linear), so 1 + M reads and
//! 1 + M writes. docs/design.md has the measurements.
//!
//! A page whose server is lost is decoded from any K of its row's other
//! places; a write-back to such a row decodes the row too and rewrites the
//! parity from it. Freeing part of a row writes zeros at the freed places
//! (the parity updated), so that a row's pages always agree with its
//! parity: a page that holds no content on the servers reads as zeros,
//! and repair can skip rows with no content.
//!
//! Hazard: two write-backs to one row. Thread A writes page 0 of row r,
//! thread B page 1: each reads the old parity P, and each writes P plus its
//! own change; the last one loses the other's change, and a later decode of
//! page 0 from the parity gives bytes it never held. So every operation on a
//! row (a write-back, a decode, a rebuild) holds the row's lock (a spin
//! lock of [`ROW_LOCKS`], by row number) from its first read to its last
//! acknowledgement.
//!
//! Hazard: a server lost in the middle of a write-back. Thread A has sent
//! the new page 0 and parity 0 of row r, and parity 1's server fails: the
//! live servers hold parity 0 new and parity 1 old, so the row decodes to
//! neither version. A therefore keeps, from before it sent anything, the
//! old bytes of every place it read; once anything was sent it never reads
//! a changed place or parity again, but decodes the old row from what it
//! kept and from the unchanged places (the same in both versions), and
//! rewrites the changed pages and every live parity page from that, still
//! holding the row's lock.
//!
//! **Every place read inside a row operation is checked.** The runtime
//! checks what it installs against its own checksums, but a row operation
//! also reads pages the program never sees: the old bytes and parity of a
//! write-back, the other places of a decode or a rebuild. A bad one there
//! would go into the parity unseen and come out, much later, as a wrong
//! decoded page. So this module keeps a CRC32C of every place it writes
//! (4 bytes per server page, mapped without reserve), and a place that
//! reads back different, or that a server says it never held, marks that
//! server down like a lost one (one warning line) and the operation starts
//! again without it; repair then rebuilds its places elsewhere.
//!
//! **Writes** are not waited for, as with one copy: a request is done
//! for the runtime once its bytes are in the socket, and its
//! acknowledgement is read by the next request on that connection. Every
//! request for a server page, data or parity, goes on that page's one
//! connection there (`conn_on`), so a later read of it (a fault, a
//! parity update's read of the old parity, a decode, a rebuild) queues
//! behind the write it must see. A server lost before it stored what was
//! sent leaves its place of the row missing, as any loss does: every live
//! server stores what it was sent, so the places left agree.
//!
//! **Reads.** A row's consecutive pages are on K servers, so a window of a
//! sequential stream is K requests: they are all sent before any reply is
//! awaited (`read_spread`), one round trip for the window as with one
//! copy. No read is asynchronous (the runtime's pipelined prefetch reads
//! its window at once instead): an asynchronous read covers consecutive
//! pages on one connection, which a coded window is not.
//!
//! Hazard: a salvage inside a row operation. Were a read owed by a lost
//! server S (none is today, but a later change might send one), failing S
//! over from inside a row operation would read that page again at once,
//! perhaps decoding it under the very row lock held (rows share 4,096
//! locks): the thread would wait for itself. So a row operation only marks
//! a lost server down ([`RemoteBackend::mark_lost`]); anything S owes is
//! salvaged by the next drain of its connections, which holds no row
//! lock.

use super::RemoteBackend;
use crate::backend::codec::{xor_into, Codec, Parts, BATCH_PAGES, ZERO_PAGE};
use crate::backend::placement::MAX_PLACES;
use crate::backend::{BackendError, MAX_BATCH};
use crate::config::MAX_EC_DATA;
use crate::sync::{SpinGuard, SpinLock};
use farmem_sys::mem::Mapping;
use farmem_sys::PAGE_SIZE;
use farmem_wire::ErrorCode;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Row locks, by row number modulo this.
const ROW_LOCKS: usize = 4096;

/// Most pages read in one go: a batch's rows' old places and parity.
const MANY: usize = crate::backend::codec::BATCH_PAGES;

/// Most pages one connection has in flight unread while others are sent
/// to or awaited: 32 KiB, which the socket's buffers hold, so that its
/// server never waits to send. A server's connection blocked sending a
/// reply holds its session's store open, and a Free from another thread
/// then waits for it while holding every other read of that session off:
/// with a reply on another connection awaited first, that was a deadlock
/// (found on GAPBS BFS, which frees while it writes).
const WAVE: usize = 8;

/// A coded session's code, layout and row locks.
pub(super) struct Erasure {
    pub(super) codec: Codec,
    pub(super) data: usize,
    pub(super) parity: usize,
    /// Where each server's parity pages start (the arena's page count).
    parity_base: u64,
    locks: Box<[SpinLock<()>]>,
    /// Per server page (data, then parity): the CRC32C of what was last
    /// written there, at least 1; 0 where nothing was (reads as zeros).
    sums: Mapping,
}

impl Erasure {
    pub(super) fn new(data: usize, parity: usize, max_pages: u64) -> Result<Erasure, BackendError> {
        let callers = std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .min(16)
            + 1;
        let codec = Codec::new(data, parity, callers).map_err(|e| {
            BackendError::Config(format!("FARMEM_REDUNDANCY=ec:{data}+{parity}: {e}"))
        })?;
        // Row operations check places in the fault handler.
        crate::checksum::warm_up();
        Ok(Erasure {
            codec,
            data,
            parity,
            parity_base: max_pages,
            locks: (0..ROW_LOCKS).map(|_| SpinLock::new(())).collect(),
            sums: Mapping::anonymous(
                farmem_sys::usize_from(Erasure::server_pages(data, parity, max_pages) * 4)
                    .next_multiple_of(PAGE_SIZE),
                true,
            )
            .map_err(|e| {
                BackendError::Config(format!(
                    "cannot map the parity checksums for {max_pages} pages: {e}"
                ))
            })?,
        })
    }

    fn sum(&self, page: u64) -> &AtomicU32 {
        let i = farmem_sys::usize_from(page);
        assert!(i * 4 < self.sums.len());
        // SAFETY: in bounds (checked), the mapping lives as long as self,
        // and AtomicU32 has u32's layout and alignment (page-aligned base).
        unsafe { &*self.sums.as_ptr().cast::<AtomicU32>().add(i) }
    }

    /// `bytes` will be what server page `page` holds.
    fn record(&self, page: u64, bytes: &[u8]) {
        self.sum(page)
            .store(crate::checksum::crc32c(bytes).max(1), Ordering::Relaxed);
    }

    /// Server pages `[start, start + n)` hold nothing any more.
    fn forget(&self, start: u64, n: u64) {
        for p in start..start + n {
            self.sum(p).store(0, Ordering::Relaxed);
        }
    }

    /// Whether `bytes`, read from server page `page` (None: the server
    /// says it never held it), is what was written there.
    fn matches(&self, page: u64, bytes: Option<&[u8]>) -> bool {
        match (self.sum(page).load(Ordering::Relaxed), bytes) {
            (0, None) => true,
            (0, Some(b)) => b.iter().all(|&x| x == 0),
            (_, None) => false,
            (want, Some(b)) => crate::checksum::crc32c(b).max(1) == want,
        }
    }

    /// The pages each server of a coded session over `max_pages` arena
    /// pages may hold: the arena's, then every row's parity.
    pub(super) fn server_pages(data: usize, parity: usize, max_pages: u64) -> u64 {
        max_pages + max_pages.div_ceil(data as u64) * parity as u64
    }

    /// The rows of an arena of `max_pages` pages.
    pub(super) fn rows(data: usize, max_pages: u64) -> u64 {
        max_pages.div_ceil(data as u64)
    }

    fn places(&self) -> usize {
        self.data + self.parity
    }

    /// The page number, on its server, of place `j` of `row`.
    fn page_of(&self, row: u64, j: usize) -> u64 {
        if j < self.data {
            row * self.data as u64 + j as u64
        } else {
            self.parity_base + row * self.parity as u64 + (j - self.data) as u64
        }
    }

    fn lock_index(&self, row: u64) -> usize {
        farmem_sys::usize_from(row % ROW_LOCKS as u64)
    }

    fn lock(&self, row: u64) -> SpinGuard<'_, ()> {
        self.locks[self.lock_index(row)].lock()
    }
}

/// Page `i` of a buffer of pages.
fn nth(buf: &[u8], i: usize) -> &[u8] {
    &buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]
}

fn nth_mut(buf: &mut [u8], i: usize) -> &mut [u8] {
    &mut buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]
}

impl RemoteBackend {
    pub(super) fn ec(&self) -> &Erasure {
        self.ec.as_ref().expect("a coded session")
    }

    /// Row and place of `page`.
    pub(super) fn ec_where(&self, page: u64) -> (u64, usize) {
        let k = self.ec().data as u64;
        (page / k, farmem_sys::usize_from(page % k))
    }

    /// The server of place `j` of `row`.
    fn ec_server(&self, row: u64, j: usize) -> usize {
        self.placement.server(row / self.stripe, j)
    }

    /// The servers of `row`'s places.
    fn ec_servers(&self, row: u64) -> [usize; MAX_PLACES] {
        let mut out = [0; MAX_PLACES];
        for (j, s) in out.iter_mut().enumerate().take(self.ec().places()) {
            *s = self.ec_server(row, j);
        }
        out
    }

    /// A result of server `s`: None when `s` was lost (marked down here;
    /// what it owes is salvaged by the next drain of its connections, not
    /// here, where a row's lock may be held: see the module comment).
    fn ec_io<T>(&self, s: usize, r: Result<T, BackendError>) -> Result<Option<T>, BackendError> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if self.lost(&e) => {
                self.mark_lost(s, &e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Page `page` of server `s` into `out`, checked; a page it never held
    /// (never written, or freed with its whole row) reads as zeros. None
    /// when `s` was lost, or sent what was not written there (then it is
    /// down from now on, as if lost).
    fn shard_read(&self, s: usize, page: u64, out: &mut [u8]) -> Result<Option<()>, BackendError> {
        let (r, held) = match self.read_copy(s, &[page], out) {
            Err(BackendError::Refused {
                code: Some(ErrorCode::NotFound),
                ..
            }) => {
                out.fill(0);
                (Ok(()), false)
            }
            other => (other, true),
        };
        if self.ec_io(s, r)?.is_none() {
            return Ok(None);
        }
        if !self.ec().matches(page, held.then_some(&*out)) {
            self.distrusted(s);
            return Ok(None);
        }
        Ok(Some(()))
    }

    /// Read the places `want` of `row` (on `servers`) into `old` (place j
    /// at j), checked, and mark them `known`: [`Self::read_many`]. False
    /// when a server was lost or sent a wrong page (marked down; the caller
    /// starts again).
    fn read_places(
        &self,
        row: u64,
        servers: &[usize],
        want: &[bool],
        old: &mut [u8],
        known: &mut [bool],
    ) -> Result<bool, BackendError> {
        let ec = self.ec();
        let mut targets = [(0usize, 0u64, 0usize); MAX_PLACES];
        let mut n = 0;
        for (j, &w) in want.iter().enumerate() {
            if w {
                targets[n] = (servers[j], ec.page_of(row, j), j);
                n += 1;
            }
        }
        self.read_many(&mut targets[..n], old, known)
    }

    /// Read every target `(server, page there, slot)` into page `slot` of
    /// `out`, each checked as [`Self::shard_read`] checks it, and mark its
    /// slot in `known`. Over sockets every request is sent before any reply
    /// is awaited (a row's places are on as many servers, and a batch's
    /// rows on all of them), with the connections taken as in
    /// [`Self::read_spread`]. False when a server was lost or sent a wrong
    /// page (marked down; the caller starts again). Sorts `targets`.
    fn read_many(
        &self,
        targets: &mut [(usize, u64, usize)],
        out: &mut [u8],
        known: &mut [bool],
    ) -> Result<bool, BackendError> {
        let ec = self.ec();
        let one_by_one = |targets: &[(usize, u64, usize)], out: &mut [u8], known: &mut [bool]| {
            for &(s, page, slot) in targets {
                if self.shard_read(s, page, nth_mut(out, slot))?.is_none() {
                    return Ok(false);
                }
                known[slot] = true;
            }
            Ok(true)
        };
        if targets.len() <= 1 || self.path.one_sided().is_some() {
            return one_by_one(targets, out, known);
        }
        let route = |t: &(usize, u64, usize)| (t.0, self.conn_on(t.0, t.1));
        targets.sort_unstable_by_key(route);
        // One connection held per route, in ascending order.
        let mut held: [Option<super::conn::Held<'_>>; MANY] = std::array::from_fn(|_| None);
        let mut route_of = [0usize; MANY];
        let mut nroutes = 0;
        for (t, target) in targets.iter().enumerate() {
            let r = route(target);
            if t == 0 || r != route(&targets[t - 1]) {
                held[nroutes] = if nroutes == 0 {
                    Some(self.acquire(r.0, r.1))
                } else {
                    self.try_acquire(r.0, r.1)
                };
                if held[nroutes].is_none() {
                    drop(held);
                    return one_by_one(targets, out, known);
                }
                nroutes += 1;
            }
            route_of[t] = nroutes - 1;
        }
        let mut all = true;
        let mut other: Option<BackendError> = None;
        let mut broken = [false; MANY];
        // Waves of at most WAVE requests a route (see [`WAVE`]); a route's
        // targets are consecutive, in the order they are sent.
        let mut done = 0;
        while done < targets.len() {
            let mut tags: [Option<u32>; MANY] = [None; MANY];
            let mut in_route = 0;
            let mut end = done;
            while end < targets.len() {
                if end > done && route_of[end] != route_of[end - 1] {
                    in_route = 0;
                }
                if in_route == WAVE {
                    // This route waits for the next wave; so do the routes
                    // after it (their targets follow it).
                    break;
                }
                in_route += 1;
                end += 1;
            }
            for t in done..end {
                let (s, page, _) = targets[t];
                if broken[route_of[t]] {
                    continue;
                }
                let conn = held[route_of[t]].as_ref().expect("held above");
                match self.send_read(&self.servers[s], conn, &[page], &[0]) {
                    Ok(tag) => tags[t] = Some(tag),
                    Err(e) => {
                        broken[route_of[t]] = true;
                        if self.lost(&e) {
                            self.mark_lost(s, &e);
                            all = false;
                        } else {
                            other.get_or_insert(e);
                        }
                    }
                }
            }
            // Replies come back in order on each connection, and the
            // targets of one connection were sent in this order.
            for t in done..end {
                let (s, page, slot) = targets[t];
                let Some(tag) = tags[t] else { continue };
                if broken[route_of[t]] {
                    continue;
                }
                let conn = held[route_of[t]].as_mut().expect("held above");
                let dst = nth_mut(out, slot);
                let more_sent = t + 1 < end && route_of[t + 1] == route_of[t];
                let held_page =
                    match self.recv_read(&self.servers[s], conn, tag, &[0], dst, more_sent) {
                        Ok(()) => true,
                        Err(BackendError::Refused {
                            code: Some(ErrorCode::NotFound),
                            ..
                        }) => {
                            dst.fill(0);
                            false
                        }
                        Err(e) => {
                            // The connection's stream is lost with its server:
                            // the replies after this one on it are not read.
                            broken[route_of[t]] = true;
                            if self.lost(&e) {
                                self.mark_lost(s, &e);
                                all = false;
                            } else {
                                other.get_or_insert(e);
                            }
                            continue;
                        }
                    };
                if ec.matches(page, held_page.then_some(&*dst)) {
                    known[slot] = true;
                } else {
                    self.distrusted(s);
                    all = false;
                }
            }
            done = end;
        }
        drop(held);
        match other {
            Some(e) => Err(e),
            None => Ok(all),
        }
    }

    /// Server `s` sent a page with the wrong contents: down from now on.
    pub(super) fn distrusted(&self, s: usize) {
        if self.mark_down(s) {
            use std::fmt::Write as _;
            let mut m = farmem_sys::msg::MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: warning: memory server {} returned a page with the wrong contents (checksum mismatch); it is no longer used, and its pages are {}",
                self.servers[s].name,
                if self.ec.is_some() {
                    "decoded from their rows' other pages"
                } else {
                    "served from their other copies"
                }
            );
            farmem_sys::write_stderr(m.as_bytes());
        }
    }

    /// Send `data` as `page` to server `s`, on the page's connection there
    /// (see Writes in the module comment).
    fn shard_send(&self, s: usize, page: u64, data: &[u8]) -> Result<Option<()>, BackendError> {
        self.ec().record(page, data);
        if self.path.one_sided().is_some() {
            return self.ec_io(s, self.write_copy(s, &[page], &[data]));
        }
        let c = self.conn_on(s, page);
        self.ec_io(s, self.write_to((s, c), &[page], &[data], &[0]))
    }

    /// More of `row`'s places lost than its parity covers.
    fn row_lost(&self, row: u64, servers: &[usize]) -> BackendError {
        let names: Vec<&str> = servers
            .iter()
            .filter(|&&s| self.is_down(s))
            .map(|&s| self.servers[s].name.as_str())
            .collect();
        BackendError::Io {
            server: names.join(", "),
            source: io::Error::other(format!(
                "{} of the {} servers of row {row} (pages {}..{}) are lost, and ec:{}+{} decodes with at most {} lost",
                names.len(),
                servers.len(),
                row * self.ec().data as u64,
                (row + 1) * self.ec().data as u64,
                self.ec().data,
                self.ec().parity,
                self.ec().parity
            )),
        }
    }

    /// Read `pages` into `buf`: each from its server while it lives, else
    /// decoded from its row.
    pub(super) fn ec_read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        // Each round loses a server for good or ends.
        for _ in 0..=self.servers.len() {
            if pages.iter().any(|&p| self.is_down(self.route(p, 0).0)) {
                break;
            }
            let r = if self.path.one_sided().is_some() {
                self.plain_read(pages, buf)
            } else {
                self.read_spread(pages, buf)
            };
            match r {
                Err(e) if self.lost(&e) => continue,
                other => return other,
            }
        }
        for (i, &p) in pages.iter().enumerate() {
            let out = nth_mut(buf, i);
            let s = self.route(p, 0).0;
            if !self.is_down(s) && self.shard_read(s, p, out)?.is_some() {
                continue;
            }
            self.ec_decode_page(p, out)?;
        }
        Ok(())
    }

    /// Read `pages` over sockets, a request per route, every request sent
    /// before any reply is awaited: a row's consecutive pages are on as
    /// many servers, and one round trip after another would cost a
    /// sequential read K times one copy's. The routes' connections are
    /// held together: the first waited for, the others only taken if free
    /// (else the read goes one route at a time), since a thread that
    /// holds one connection may wait for another (a page that fails its
    /// check in an asynchronous read's completion is read again from
    /// inside the drain), and waiting for a second here could close the
    /// cycle. A server that fails is marked down once every reply sent on
    /// the others is in (one left unread would be taken by the next
    /// request there as its own).
    fn read_spread(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        assert!(pages.len() <= MAX_BATCH);
        let mut routes = [(0usize, 0usize); MAX_BATCH];
        for (r, &p) in routes.iter_mut().zip(pages) {
            *r = self.route(p, 0);
        }
        let routes = &mut routes[..pages.len()];
        routes.sort_unstable();
        let mut distinct = [(0usize, 0usize); MAX_BATCH];
        let mut n = 0;
        for &r in routes.iter() {
            if n == 0 || distinct[n - 1] != r {
                distinct[n] = r;
                n += 1;
            }
        }
        let distinct = &distinct[..n];
        let mut held: [Option<super::conn::Held<'_>>; MAX_BATCH] = std::array::from_fn(|_| None);
        for (i, (h, &(s, c))) in held.iter_mut().zip(distinct).enumerate() {
            *h = if i == 0 {
                Some(self.acquire(s, c))
            } else {
                self.try_acquire(s, c)
            };
            if h.is_none() {
                drop(held);
                return self.plain_read(pages, buf);
            }
        }
        // Each route's positions, in order.
        let mut route_pos = [0usize; MAX_BATCH];
        let mut starts = [0usize; MAX_BATCH + 1];
        {
            let mut k = 0;
            for (i, &r) in distinct.iter().enumerate() {
                starts[i] = k;
                for (pos, &p) in pages.iter().enumerate() {
                    if self.route(p, 0) == r {
                        route_pos[k] = pos;
                        k += 1;
                    }
                }
            }
            starts[distinct.len()] = k;
        }
        let mut cur: [usize; MAX_BATCH] = starts[..MAX_BATCH].try_into().expect("MAX_BATCH starts");
        let mut failed: Option<(usize, BackendError)> = None;
        let mut broken = [false; MAX_BATCH];
        // Waves of at most WAVE pages a route (see [`WAVE`]).
        loop {
            let mut tags: [Option<(u32, usize, usize)>; MAX_BATCH] = [None; MAX_BATCH];
            let mut any = false;
            for (i, &r) in distinct.iter().enumerate() {
                let (from, to) = (cur[i], (cur[i] + WAVE).min(starts[i + 1]));
                if broken[i] || from == to {
                    continue;
                }
                any = true;
                let conn = held[i].as_ref().expect("held above");
                match self.send_read(&self.servers[r.0], conn, pages, &route_pos[from..to]) {
                    Ok(t) => tags[i] = Some((t, from, to)),
                    Err(e) => {
                        broken[i] = true;
                        failed.get_or_insert((r.0, e));
                    }
                }
            }
            if !any {
                break;
            }
            for (i, &r) in distinct.iter().enumerate() {
                let Some((tag, from, to)) = tags[i] else {
                    continue;
                };
                let conn = held[i].as_mut().expect("held above");
                // (One request a connection in each wave here.)
                match self.recv_read(
                    &self.servers[r.0],
                    conn,
                    tag,
                    &route_pos[from..to],
                    buf,
                    false,
                ) {
                    Ok(()) => cur[i] = to,
                    Err(e) => {
                        broken[i] = true;
                        failed.get_or_insert((r.0, e));
                    }
                }
            }
        }
        drop(held);
        match failed {
            None => Ok(()),
            Some((s, e)) => {
                if self.lost(&e) {
                    self.mark_lost(s, &e);
                }
                Err(e)
            }
        }
    }

    /// Page `page`, whose server is lost, decoded from its row into `out`.
    fn ec_decode_page(&self, page: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let ec = self.ec();
        let (row, i) = self.ec_where(page);
        let _row = ec.lock(row);
        let mut work = ec.codec.work();
        let Parts {
            coder,
            old,
            row: rowbuf,
            ..
        } = work.parts();
        'attempt: loop {
            let servers = self.ec_servers(row);
            let servers = &servers[..ec.places()];
            // Repair may have given the place a live server meanwhile.
            if !self.is_down(servers[i]) {
                if self.shard_read(servers[i], page, out)?.is_some() {
                    return Ok(());
                }
                continue 'attempt;
            }
            // K live places, the data places first (with all of them,
            // nothing is decoded but the one page).
            let mut want = [false; MAX_PLACES];
            let mut have = 0;
            for (j, w) in want[..ec.places()].iter_mut().enumerate() {
                if have < ec.data && j != i && !self.is_down(servers[j]) {
                    *w = true;
                    have += 1;
                }
            }
            let mut known = [false; MAX_PLACES];
            if !self.read_places(row, servers, &want[..ec.places()], old, &mut known)? {
                continue 'attempt;
            }
            if have < ec.data {
                return Err(self.row_lost(row, servers));
            }
            let shards = shards_of(old, &known[..ec.places()]);
            coder
                .decode(&shards[..ec.places()], rowbuf)
                .map_err(|e| self.row_lost_or(row, servers, e))?;
            out.copy_from_slice(nth(rowbuf, i));
            return Ok(());
        }
    }

    fn row_lost_or(
        &self,
        row: u64,
        servers: &[usize],
        e: crate::backend::codec::CodecError,
    ) -> BackendError {
        match e {
            crate::backend::codec::CodecError::TooFew { .. } => self.row_lost(row, servers),
            other => BackendError::Config(format!("row {row}: {other}")),
        }
    }

    /// Write `pages` back, each row's parity along (sent on return; see
    /// Writes in the module comment). Whole rows whose places all live go together: every
    /// server gets one request for all its pages of them, and one wait
    /// covers them all. The other rows go one at a time.
    pub(super) fn ec_write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        assert!(pages.len() <= MAX_BATCH);
        let k = self.ec().data;
        // The batch's rows, in order of first appearance, each with its
        // pages by place (a page twice in one batch: the later bytes).
        let mut rows = [0u64; MAX_BATCH];
        let mut row_pages: [[Option<&[u8]>; MAX_EC_DATA]; MAX_BATCH] =
            [[None; MAX_EC_DATA]; MAX_BATCH];
        let mut nrows = 0;
        for (&p, &d) in pages.iter().zip(data) {
            let (row, place) = self.ec_where(p);
            let j = match rows[..nrows].iter().position(|&r| r == row) {
                Some(j) => j,
                None => {
                    rows[nrows] = row;
                    nrows += 1;
                    nrows - 1
                }
            };
            row_pages[j][place] = Some(d);
        }
        let whole = |j: usize| {
            row_pages[j][..k].iter().all(Option::is_some)
                && self.ec_servers(rows[j])[..self.ec().places()]
                    .iter()
                    .all(|&s| !self.is_down(s))
        };
        let mut together = [0usize; MAX_BATCH];
        let mut n = 0;
        // As many as the batch space holds the parity of.
        let most = BATCH_PAGES / self.ec().parity;
        for j in 0..nrows {
            if n < most && whole(j) {
                together[n] = j;
                n += 1;
            }
        }
        let sent = n > 0 && self.ec_write_whole_rows(&rows, &row_pages, &together[..n])?;
        let mut rest = [0usize; MAX_BATCH];
        let mut nrest = 0;
        for j in 0..nrows {
            if !(sent && together[..n].contains(&j)) {
                rest[nrest] = j;
                nrest += 1;
            }
        }
        if nrest > 0 {
            self.ec_write_rows(&rows, &row_pages, &rest[..nrest])?;
        }
        Ok(())
    }

    /// Write the rows `which` of `rows` (their pages in `row_pages`), each
    /// as [`Self::ec_write_row`] does, under every one's lock at once, the
    /// old bytes of their changed places and parity read first for all of
    /// them together (one round trip for the batch, not one a row).
    fn ec_write_rows(
        &self,
        rows: &[u64],
        row_pages: &[[Option<&[u8]>; MAX_EC_DATA]],
        which: &[usize],
    ) -> Result<(), BackendError> {
        let ec = self.ec();
        let (k, m) = (ec.data, ec.parity);
        let mut locks = [0usize; MAX_BATCH];
        for (l, &j) in locks.iter_mut().zip(which) {
            *l = ec.lock_index(rows[j]);
        }
        let _held = self.lock_rows(&mut locks[..which.len()]);
        let mut work = ec.codec.work();
        let Parts {
            coder,
            old,
            row: rowbuf,
            parity,
            batch,
        } = work.parts();
        // Where each row's prefetched places are in `batch`.
        let mut slot_of = [[u16::MAX; MAX_PLACES]; MAX_BATCH];
        let mut targets = [(0usize, 0u64, 0usize); MANY];
        let mut n = 0;
        for (r, &j) in which.iter().enumerate() {
            let servers = self.ec_servers(rows[j]);
            let places = &row_pages[j];
            let reads = places[..k].iter().filter(|p| p.is_some()).count() + m;
            let whole = places[..k].iter().all(Option::is_some);
            if whole
                || n + reads > BATCH_PAGES.min(MANY)
                || servers[..k + m].iter().any(|&s| self.is_down(s))
            {
                continue;
            }
            for place in 0..k + m {
                if place >= k || places[place].is_some() {
                    slot_of[r][place] = u16::try_from(n).expect("fewer than 2^16 slots");
                    targets[n] = (servers[place], ec.page_of(rows[j], place), n);
                    n += 1;
                }
            }
        }
        let mut known = [false; MANY];
        // A server lost or distrusted here: nothing was sent, so each row
        // simply reads for itself.
        let prefetched = self.read_many(&mut targets[..n], batch, &mut known[..n])?;
        for (r, &j) in which.iter().enumerate() {
            let mut new: [(usize, &[u8]); MAX_EC_DATA] = [(0, &[]); MAX_EC_DATA];
            let mut c = 0;
            for (place, d) in row_pages[j][..k].iter().enumerate() {
                if let Some(d) = d {
                    new[c] = (place, d);
                    c += 1;
                }
            }
            let mut pre = [None; MAX_PLACES];
            if prefetched {
                for (p, &slot) in pre.iter_mut().zip(&slot_of[r]) {
                    if slot != u16::MAX && known[usize::from(slot)] {
                        *p = Some(nth(batch, usize::from(slot)));
                    }
                }
            }
            self.write_row_locked(rows[j], &new[..c], &mut pre, coder, old, rowbuf, parity)?;
        }
        Ok(())
    }

    /// Take the row locks `locks` (indices), each once, in ascending order:
    /// a thread holding one row's lock never waits for another's, so
    /// there is no cycle.
    fn lock_rows(&self, locks: &mut [usize]) -> [Option<SpinGuard<'_, ()>>; MAX_BATCH] {
        let ec = self.ec();
        locks.sort_unstable();
        let mut held: [Option<SpinGuard<'_, ()>>; MAX_BATCH] = std::array::from_fn(|_| None);
        let mut last = None;
        for (h, &l) in held.iter_mut().zip(locks.iter()) {
            if last != Some(l) {
                *h = Some(ec.locks[l].lock());
                last = Some(l);
            }
        }
        held
    }

    /// Write the whole rows `which` of `rows` (their pages in `row_pages`)
    /// with their parity, a request per server and connection. False when a server was
    /// lost on the way (marked down; the caller writes the rows again one
    /// at a time, which a whole row needs nothing read for).
    fn ec_write_whole_rows(
        &self,
        rows: &[u64],
        row_pages: &[[Option<&[u8]>; MAX_EC_DATA]],
        which: &[usize],
    ) -> Result<bool, BackendError> {
        let ec = self.ec();
        let (k, m) = (ec.data, ec.parity);
        assert!(which.len() * m <= BATCH_PAGES);
        // The rows' locks, each once, in ascending order (a thread holding
        // one row's lock never waits for another's, so no cycle).
        let mut locks = [0usize; MAX_BATCH];
        for (l, &j) in locks.iter_mut().zip(which) {
            *l = ec.lock_index(rows[j]);
        }
        let held = self.lock_rows(&mut locks[..which.len()]);
        let mut work = ec.codec.work();
        let Parts { coder, batch, .. } = work.parts();
        // Every place of every row: (server, page number there, bytes).
        let mut out: [(usize, u64, &[u8]); 3 * MAX_BATCH] = [(0, 0, &[]); 3 * MAX_BATCH];
        let mut n = 0;
        for (r, &j) in which.iter().enumerate() {
            let servers = self.ec_servers(rows[j]);
            if servers[..k + m].iter().any(|&s| self.is_down(s)) {
                return Ok(false);
            }
            let mut data: [&[u8]; MAX_EC_DATA] = [&[]; MAX_EC_DATA];
            for (d, p) in data.iter_mut().zip(&row_pages[j][..k]) {
                *d = p.expect("a whole row");
            }
            let parity = &mut batch[r * m * PAGE_SIZE..(r + 1) * m * PAGE_SIZE];
            coder
                .encode(&data[..k], parity)
                .map_err(|e| self.row_lost_or(rows[j], &servers[..k + m], e))?;
            for (place, d) in data[..k].iter().enumerate() {
                out[n] = (servers[place], ec.page_of(rows[j], place), d);
                n += 1;
            }
            for i in 0..m {
                out[n] = (servers[k + i], ec.page_of(rows[j], k + i), &[]);
                n += 1;
            }
        }
        // The parity pages, now that the batch space is written.
        let mut r = 0;
        let mut i = 0;
        for o in out[..n].iter_mut() {
            if o.2.is_empty() {
                o.2 = &batch[(r * m + i) * PAGE_SIZE..(r * m + i + 1) * PAGE_SIZE];
                i += 1;
                if i == m {
                    i = 0;
                    r += 1;
                }
            }
        }
        for &(_, page, bytes) in &out[..n] {
            ec.record(page, bytes);
        }
        // A request per server and connection: each page on its own
        // connection there (see Writes in the module comment).
        let one_sided = self.path.one_sided().is_some();
        let conn = |o: &(usize, u64, &[u8])| if one_sided { 0 } else { self.conn_on(o.0, o.1) };
        let out = &mut out[..n];
        out.sort_unstable_by_key(|o| (o.0, conn(o)));
        for group in out.chunk_by(|a, b| (a.0, conn(a)) == (b.0, conn(b))) {
            let s = group[0].0;
            let mut list = [0u64; MAX_BATCH];
            let mut bytes: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
            for (i, o) in group.iter().enumerate() {
                list[i] = o.1;
                bytes[i] = o.2;
            }
            let g = group.len();
            let r = if one_sided {
                self.write_copy(s, &list[..g], &bytes[..g])
            } else {
                let idx: [usize; MAX_BATCH] = std::array::from_fn(|i| i);
                self.write_to((s, conn(&group[0])), &list[..g], &bytes[..g], &idx[..g])
            };
            if self.ec_io(s, r)?.is_none() {
                return Ok(false);
            }
        }
        drop(held);
        Ok(true)
    }

    /// Write `new` (places and their bytes) into `row`, the parity updated;
    /// sent on return (see Writes and the hazards in the module comment).
    pub(super) fn ec_write_row(
        &self,
        row: u64,
        new: &[(usize, &[u8])],
    ) -> Result<(), BackendError> {
        let ec = self.ec();
        let _row = ec.lock(row);
        let mut work = ec.codec.work();
        let Parts {
            coder,
            old,
            row: rowbuf,
            parity,
            ..
        } = work.parts();
        let mut none = [None; MAX_PLACES];
        self.write_row_locked(row, new, &mut none, coder, old, rowbuf, parity)
    }

    /// [`Self::ec_write_row`] with the row's lock held, in the caller's
    /// working space, and `pre` the old bytes of places already read
    /// under that lock (place j's, where given).
    #[allow(clippy::too_many_arguments)]
    fn write_row_locked(
        &self,
        row: u64,
        new: &[(usize, &[u8])],
        pre: &mut [Option<&[u8]>; MAX_PLACES],
        coder: &mut crate::backend::codec::Coder,
        old: &mut [u8],
        rowbuf: &mut [u8],
        parity: &mut [u8],
    ) -> Result<(), BackendError> {
        let ec = self.ec();
        let (k, m) = (ec.data, ec.parity);
        let mut changed = [false; MAX_EC_DATA];
        for &(i, _) in new {
            changed[i] = true;
        }
        let full = changed[..k].iter().all(|&c| c);
        // Places whose old bytes are in `old`.
        let mut known = [false; MAX_PLACES];
        for (j, p) in pre.iter_mut().enumerate().take(k + m) {
            if let Some(bytes) = p.take() {
                nth_mut(old, j).copy_from_slice(bytes);
                known[j] = true;
            }
        }
        // Whether anything was sent: from then on, changed places and
        // parity are never read again.
        let mut sent_any = false;
        let mut short = false;
        'attempt: loop {
            let servers = self.ec_servers(row);
            let servers = &servers[..k + m];
            let live = |j: usize| !self.is_down(servers[j]);
            short |= !(0..k + m).all(live);
            let delta =
                !full && !sent_any && new.iter().all(|&(i, _)| live(i)) && (k..k + m).all(live);
            if delta {
                // The old bytes of the changed places and of the parity.
                let mut want = [false; MAX_PLACES];
                for (j, w) in want[..k + m].iter_mut().enumerate() {
                    *w = (j >= k || changed[j]) && !known[j];
                }
                if !self.read_places(row, servers, &want[..k + m], old, &mut known)? {
                    continue 'attempt;
                }
                for (i, &c) in changed[..k].iter().enumerate() {
                    let d = nth_mut(rowbuf, i);
                    d.fill(0);
                    if c {
                        d.copy_from_slice(nth(old, i));
                    }
                }
                for &(i, bytes) in new {
                    xor_into(nth_mut(rowbuf, i), bytes);
                }
                let refs = pages_of(rowbuf, k);
                coder
                    .encode(&refs[..k], parity)
                    .map_err(|e| self.row_lost_or(row, servers, e))?;
                for j in 0..m {
                    xor_into(nth_mut(parity, j), nth(old, k + j));
                }
            } else {
                if !full {
                    // The whole old row, from what is kept and what the
                    // live servers hold (after a send, only unchanged
                    // places: the others may be of either version).
                    let mut want = [false; MAX_PLACES];
                    for (j, w) in want[..k + m].iter_mut().enumerate() {
                        *w = !known[j] && live(j) && !(sent_any && (j >= k || changed[j]));
                    }
                    if !self.read_places(row, servers, &want[..k + m], old, &mut known)? {
                        continue 'attempt;
                    }
                    let shards = shards_of(old, &known[..k + m]);
                    coder
                        .decode(&shards[..k + m], rowbuf)
                        .map_err(|e| self.row_lost_or(row, servers, e))?;
                }
                for &(i, bytes) in new {
                    nth_mut(rowbuf, i).copy_from_slice(bytes);
                }
                let refs = pages_of(rowbuf, k);
                coder
                    .encode(&refs[..k], parity)
                    .map_err(|e| self.row_lost_or(row, servers, e))?;
            }
            // Every live place that changes: the pages, then the parity.
            sent_any = true;
            for &(i, bytes) in new {
                if live(i)
                    && self
                        .shard_send(servers[i], ec.page_of(row, i), bytes)?
                        .is_none()
                {
                    continue 'attempt;
                }
            }
            for j in 0..m {
                if live(k + j)
                    && self
                        .shard_send(servers[k + j], ec.page_of(row, k + j), nth(parity, j))?
                        .is_none()
                {
                    continue 'attempt;
                }
            }
            if short {
                self.count_short(new.len() as u64);
            }
            return Ok(());
        }
    }

    /// Free `[start, start + n)`: whole rows on every live server (their
    /// pages and parity); the freed places of a row only partly in the
    /// range are written as zeros, so the row still agrees with its parity
    /// for the pages outside it.
    pub(super) fn ec_free(&self, start: u64, n: u64) -> Result<(), BackendError> {
        let ec = self.ec();
        let k = ec.data as u64;
        let end = start + n;
        let (first_whole, end_whole) = (start.div_ceil(k), end / k);
        let mut edges = [None; 2];
        if !start.is_multiple_of(k) {
            edges[0] = Some(start / k);
        }
        if !end.is_multiple_of(k) && Some(end / k) != edges[0] {
            edges[1] = Some(end / k);
        }
        for row in edges.into_iter().flatten() {
            let zeros: [(usize, &[u8]); MAX_EC_DATA] = std::array::from_fn(|i| (i, &ZERO_PAGE[..]));
            let (lo, hi) = (start.max(row * k), end.min(row * k + k));
            let places = farmem_sys::usize_from(lo - row * k)..farmem_sys::usize_from(hi - row * k);
            self.ec_write_row(row, &zeros[places])?;
        }
        if first_whole >= end_whole {
            return Ok(());
        }
        let rows = end_whole - first_whole;
        let m = ec.parity as u64;
        ec.forget(first_whole * k, rows * k);
        ec.forget(ec.parity_base + first_whole * m, rows * m);
        for (s, server) in self.servers.iter().enumerate() {
            if self.is_down(s) {
                continue;
            }
            let r = self
                .free_on(s, server, first_whole * k, rows * k)
                .and_then(|()| self.free_on(s, server, ec.parity_base + first_whole * m, rows * m));
            match r {
                Err(e) if self.lost(&e) => self.fail_over(s, &e)?,
                other => other?,
            }
        }
        Ok(())
    }

    /// How many rows [`Self::ec_rebuild_rows`] takes at once when `gone`
    /// places of each are rebuilt: as many as the batch space holds, the
    /// K places read of each or its rebuilt pages, whichever is more.
    pub(super) fn ec_rebuild_batch(&self, gone: usize) -> usize {
        let ec = self.ec();
        let stride = ec.data.max(gone);
        (BATCH_PAGES / stride).min(MANY / ec.data).min(MAX_BATCH)
    }

    /// Rebuild the lost or leaving places `gone` of each of `rows` onto
    /// `to` (one new server each), from any K of its live places: every
    /// place read in one go ([`Self::read_many`]), then one write a new
    /// server for all its pages. Row by row, a rebuild was two round
    /// trips a row (measured: 219 MiB in 12 s over sockets). At most
    /// [`Self::ec_rebuild_batch`] rows. None when a server was lost on the
    /// way. The caller holds the write gate alone; the rows' locks are
    /// held throughout, as a decode holds one.
    pub(super) fn ec_rebuild_rows(
        &self,
        rows: &[u64],
        gone: &[usize],
        to: &[usize],
    ) -> Result<Option<u64>, BackendError> {
        let ec = self.ec();
        let (k, m) = (ec.data, ec.parity);
        let stride = k.max(gone.len());
        assert!(rows.len() <= self.ec_rebuild_batch(gone.len()));
        let mut locks = [0usize; MAX_BATCH];
        for (l, &row) in locks.iter_mut().zip(rows) {
            *l = ec.lock_index(row);
        }
        let _held = self.lock_rows(&mut locks[..rows.len()]);
        let mut work = ec.codec.work();
        let Parts {
            coder,
            row: rowbuf,
            parity,
            batch,
            ..
        } = work.parts();
        // Row r's places read go to its slots r * stride + q; the live
        // places, a leaving one's included (it still answers), the data
        // pages first: with every one of them, nothing is decoded.
        let mut targets = [(0usize, 0u64, 0usize); MANY];
        let mut place_of = [[0usize; MAX_EC_DATA]; MAX_BATCH];
        let mut n = 0;
        for (r, &row) in rows.iter().enumerate() {
            let servers = self.ec_servers(row);
            let mut q = 0;
            for (j, &s) in servers[..k + m].iter().enumerate() {
                if q < k && !self.is_down(s) {
                    targets[n] = (s, ec.page_of(row, j), r * stride + q);
                    place_of[r][q] = j;
                    n += 1;
                    q += 1;
                }
            }
            if q < k {
                return Err(self.row_lost(row, &servers[..k + m]));
            }
        }
        let mut known = [false; BATCH_PAGES];
        if !self.read_many(&mut targets[..n], batch, &mut known)? {
            return Ok(None);
        }
        for (r, &row) in rows.iter().enumerate() {
            let servers = self.ec_servers(row);
            let mut shards: [Option<&[u8]>; MAX_PLACES] = [None; MAX_PLACES];
            for (q, &j) in place_of[r][..k].iter().enumerate() {
                let slot = r * stride + q;
                debug_assert!(known[slot], "read_many answered every target or false");
                shards[j] = Some(nth(batch, slot));
            }
            coder
                .decode(&shards[..k + m], rowbuf)
                .map_err(|e| self.row_lost_or(row, &servers[..k + m], e))?;
            if gone.iter().any(|&j| j >= k) {
                let refs = pages_of(rowbuf, k);
                coder
                    .encode(&refs[..k], parity)
                    .map_err(|e| self.row_lost_or(row, &servers[..k + m], e))?;
            }
            // The row's places read are spent: its rebuilt pages take
            // their slots.
            for (g, &j) in gone.iter().enumerate() {
                let bytes = if j < k {
                    nth(rowbuf, j)
                } else {
                    nth(parity, j - k)
                };
                nth_mut(batch, r * stride + g).copy_from_slice(bytes);
                ec.record(ec.page_of(row, j), bytes);
            }
        }
        for (g, (&j, &s)) in gone.iter().zip(to).enumerate() {
            let mut list = [0u64; MAX_BATCH];
            let mut bytes: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
            for (r, &row) in rows.iter().enumerate() {
                list[r] = ec.page_of(row, j);
                bytes[r] = nth(batch, r * stride + g);
            }
            let w = self.write_copy(s, &list[..rows.len()], &bytes[..rows.len()]);
            if self.ec_io(s, w)?.is_none() {
                return Ok(None);
            }
        }
        Ok(Some((rows.len() * gone.len()) as u64))
    }

    /// Whether `row` holds content on the servers: any of its pages is
    /// stored (the others are zeros there, see the module comment).
    pub(super) fn ec_row_stored(&self, row: u64, stored: &dyn Fn(u64) -> bool) -> bool {
        let k = self.ec().data as u64;
        (row * k..row * k + k).any(stored)
    }

    /// The rows of stripe unit `unit`.
    pub(super) fn ec_unit_rows(&self, unit: u64) -> std::ops::Range<u64> {
        let rows = Erasure::rows(self.ec().data, self.ec().parity_base);
        (unit * self.stripe).min(rows)..((unit + 1) * self.stripe).min(rows)
    }
}

/// The first `k` pages of `buf`, as slices.
fn pages_of(buf: &[u8], k: usize) -> [&[u8]; MAX_EC_DATA] {
    let mut out: [&[u8]; MAX_EC_DATA] = [&[]; MAX_EC_DATA];
    for (i, o) in out.iter_mut().enumerate().take(k) {
        *o = nth(buf, i);
    }
    out
}

/// The row's places whose bytes are in `old`, as the codec takes them.
fn shards_of<'a>(old: &'a [u8], known: &[bool]) -> [Option<&'a [u8]>; MAX_PLACES] {
    let mut out = [None; MAX_PLACES];
    for (j, &k) in known.iter().enumerate() {
        if k {
            out[j] = Some(nth(old, j));
        }
    }
    out
}
