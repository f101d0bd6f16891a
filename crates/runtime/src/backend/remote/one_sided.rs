//! The remote backend's one-sided page paths (UCX, and sealed memory files
//! on one host): chunk grants on the control connection, page reads and
//! writes through the path, and what a failure there means for replicas (a
//! lost server is failed over as on sockets).

use super::memfd::MemfdPages;
use super::reply::{check_reply, frame_u32, recv_blob};
use super::ucx::UcxPages;
use super::RemoteBackend;
use crate::backend::{Backend, BackendError, Failure, OneSided, Pipelined, MAX_BATCH};
use farmem_wire::{self as wire, Frame, Header, Op, Reply, HEADER_LEN};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

/// A one-sided path whose chunks this backend can ask its servers for.
pub(super) trait Grant: OneSided {
    /// Make sure chunk `c` is granted on server `s`, asking it through
    /// `backend`'s control connection if not yet.
    fn grant(&self, backend: &RemoteBackend, s: usize, c: u64) -> Result<(), BackendError>;
}

impl Grant for UcxPages {
    fn grant(&self, backend: &RemoteBackend, s: usize, c: u64) -> Result<(), BackendError> {
        let name = &backend.servers[s].name;
        self.ensure(s, c, name, || backend.ucx_grant_on(s, c))
    }
}

impl Grant for MemfdPages {
    fn grant(&self, backend: &RemoteBackend, s: usize, c: u64) -> Result<(), BackendError> {
        let name = &backend.servers[s].name;
        self.ensure(s, c, name, || backend.memfd_grant_on(s, c))
    }
}

impl RemoteBackend {
    /// Grant the chunks of pages `[first, first+n)` on every server that
    /// holds a copy of one of them (pages sit at their own number's offset).
    pub(super) fn grant_range(
        &self,
        ucx: &impl Grant,
        first: u64,
        n: u64,
    ) -> Result<(), BackendError> {
        let end = first.saturating_add(n);
        let mut p = first;
        while p < end {
            // One route and one chunk up to the next stripe or chunk edge.
            let chunk_end = (p / wire::CHUNK_PAGES + 1) * wire::CHUNK_PAGES;
            // (A coded row's consecutive pages are on different servers.)
            let run = if self.ec.is_some() {
                1
            } else {
                self.route_run(p)
            };
            let step_end = (p + run).min(chunk_end).min(end);
            self.grant_page(ucx, p)?;
            p = step_end;
        }
        Ok(())
    }

    /// Grant `page`'s chunk on every live server holding a copy of it.
    fn grant_page(&self, ucx: &impl Grant, page: u64) -> Result<(), BackendError> {
        for k in 0..self.replicas {
            let (s, _) = self.route(page, k);
            if self.is_down(s) || ucx.granted(s, page) {
                continue;
            }
            let c = page / wire::CHUNK_PAGES;
            match ucx.grant(self, s, c) {
                Err(e) if self.lost(&e) => self.fail_over(s, &e)?,
                other => other?,
            }
        }
        Ok(())
    }

    /// Pages reached without an allocation first (the probe's and the
    /// bench's direct use of a backend): grant their chunks now. The
    /// runtime's pages were granted at allocation, so on the fault path
    /// this is one atomic load per copy and nothing else.
    fn grant_pages(&self, ucx: &impl Grant, pages: &[u64]) -> Result<(), BackendError> {
        for &p in pages {
            self.grant_page(ucx, p)?;
        }
        Ok(())
    }

    /// Ask server `s` for chunk `c` of this session's UCX pool.
    pub(super) fn ucx_grant_on(&self, s: usize, c: u64) -> Result<(u64, Vec<u8>), BackendError> {
        let server = &self.servers[s];
        let mut conn = self.acquire(s, 0);
        self.drain(server, &mut conn)?;
        let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
        conn.link
            .send(&[&Frame::UcxChunk { chunk: c }.encode(tag)], self.wait)
            .map_err(|e| server.io(e))?;
        let mut payload = [0u8; 8 + wire::MAX_UCX_BLOB];
        let n = recv_blob(
            server,
            &*conn.link,
            Op::UcxChunkOk,
            tag,
            &mut payload,
            self.wait,
        )?;
        let h = Header::new(Op::UcxChunkOk, tag, 0, frame_u32(n));
        match wire::decode_reply(&h, &payload[..n]) {
            Ok(Reply::UcxChunkOk { base, rkey }) => Ok((base, rkey.to_vec())),
            other => Err(server.protocol(format!("a UcxChunkOk that does not decode: {other:?}"))),
        }
    }

    /// Ask server `s` for chunk `c` of this session's memory files: the
    /// descriptor it passed with its reply, and the chunk's pages as it
    /// says (both checked by [`MemfdPages::ensure`]).
    pub(super) fn memfd_grant_on(&self, s: usize, c: u64) -> Result<(OwnedFd, u64), BackendError> {
        let server = &self.servers[s];
        // The side door of a TCP server on this host, else the first
        // connection (a Unix socket).
        let mut conn = Self::hold(server.memfd_conn());
        self.drain(server, &mut conn)?;
        let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
        let io_err = |e| server.io(e);
        conn.link
            .send(&[&Frame::MemfdChunk { chunk: c }.encode(tag)], self.wait)
            .map_err(io_err)?;
        // The descriptor travels with the reply's first byte; anything
        // but the reply asked for closes it (it is owned from here on).
        let mut hb = [0u8; HEADER_LEN];
        let fd = conn
            .link
            .recv_exact_with_fd(&mut hb, self.wait)
            .map_err(io_err)?;
        let h = Header::decode(&hb).map_err(|e| server.protocol(e.to_string()))?;
        check_reply(
            server,
            &*conn.link,
            &h,
            Op::MemfdChunkOk,
            tag,
            16,
            self.wait,
        )?;
        let mut payload = [0u8; 16];
        conn.link
            .recv_exact(&mut payload, self.wait)
            .map_err(io_err)?;
        let bad = |why: String| BackendError::Protocol {
            server: server.name.clone(),
            why,
        };
        match wire::decode_reply(&h, &payload) {
            Ok(Reply::MemfdChunkOk { chunk, pages }) if chunk == c => {
                let fd = fd
                    .ok_or_else(|| bad(format!("it granted chunk {c} and passed no descriptor")))?;
                Ok((fd, pages))
            }
            other => Err(bad(format!(
                "a MemfdChunkOk for chunk {c} that does not match: {other:?}"
            ))),
        }
    }

    /// Mark servers whose control connection closed as down (UCX over
    /// shared memory sees no error of its own when a server dies).
    pub(super) fn check_control(&self) -> Result<(), BackendError> {
        for (s, server) in self.servers.iter().enumerate() {
            if !self.is_down(s) && server.conns[0].link.closed() {
                let e = server.io(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "its control connection closed",
                ));
                if !self.lost(&e) {
                    return Err(e);
                }
                self.fail_over(s, &e)?;
            }
        }
        Ok(())
    }

    /// A UCX failure as the backend's error, and whether it means the
    /// server is lost (then it is failed over and the batch retried).
    pub(super) fn ucx_failure(&self, f: Failure) -> Result<(), BackendError> {
        let e = self.servers[f.server].io(io::Error::other(f.why));
        if !self.lost(&e) {
            return Err(e);
        }
        self.fail_over(f.server, &e)
    }

    pub(super) fn one_sided_read(
        &self,
        ucx: &impl Grant,
        pages: &[u64],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        self.grant_pages(ucx, pages)?;
        loop {
            let mut from = [0usize; MAX_BATCH];
            for (i, &p) in pages.iter().enumerate() {
                let Some((s, _)) = self.live_route(p) else {
                    return Err(BackendError::Io {
                        server: self.holder(p),
                        source: io::Error::other(
                            "every server holding a copy of this page is down",
                        ),
                    });
                };
                from[i] = s;
            }
            match ucx.read(pages, &from[..pages.len()], buf) {
                Ok(()) => return Ok(()),
                Err(f) => self.ucx_failure(f)?,
            }
        }
    }

    pub(super) fn one_sided_write(
        &self,
        ucx: &impl Grant,
        pages: &[u64],
        data: &[&[u8]],
    ) -> Result<(), BackendError> {
        self.grant_pages(ucx, pages)?;
        self.check_control()?;
        loop {
            let mut to = [[None; crate::config::MAX_REPLICAS]; MAX_BATCH];
            for (i, &p) in pages.iter().enumerate() {
                let mut n = 0;
                for k in 0..self.replicas {
                    let (s, _) = self.route(p, k);
                    if !self.is_down(s) {
                        to[i][n] = Some(s);
                        n += 1;
                    }
                }
                if n == 0 {
                    return Err(BackendError::Io {
                        server: self.holder(p),
                        source: io::Error::other(
                            "every server holding a copy of this page is down",
                        ),
                    });
                }
            }
            match ucx.write(pages, data, &to[..pages.len()]) {
                Ok(()) => {
                    let short = to[..pages.len()]
                        .iter()
                        .filter(|t| t.iter().flatten().count() < self.replicas)
                        .count();
                    self.count_short(short as u64);
                    return Ok(());
                }
                Err(f) => self.ucx_failure(f)?,
            }
        }
    }
}

impl RemoteBackend {
    /// Read `pages` from server `s` alone (repair's source copy), granting
    /// their chunks there first.
    pub(super) fn one_sided_read_on(
        &self,
        ucx: &impl Grant,
        s: usize,
        pages: &[u64],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        self.grant_on(ucx, s, pages)?;
        let from = [s; MAX_BATCH];
        ucx.read(pages, &from[..pages.len()], buf)
            .map_err(|f| self.servers[f.server].io(io::Error::other(f.why)))
    }

    /// Write `pages` to server `s` alone (repair's new copy), granting their
    /// chunks there first; complete at the server on return.
    pub(super) fn one_sided_write_on(
        &self,
        ucx: &impl Grant,
        s: usize,
        pages: &[u64],
        data: &[&[u8]],
    ) -> Result<(), BackendError> {
        self.grant_on(ucx, s, pages)?;
        let mut to = [[None; crate::config::MAX_REPLICAS]; MAX_BATCH];
        for t in &mut to[..pages.len()] {
            t[0] = Some(s);
        }
        ucx.write(pages, data, &to[..pages.len()])
            .map_err(|f| self.servers[f.server].io(io::Error::other(f.why)))
    }

    /// Grant the chunks of `pages` on server `s` (a server that did not hold
    /// them before: repair's new copy).
    fn grant_on(&self, ucx: &impl Grant, s: usize, pages: &[u64]) -> Result<(), BackendError> {
        for &p in pages {
            if !ucx.granted(s, p) {
                ucx.grant(self, s, p / wire::CHUNK_PAGES)?;
            }
        }
        Ok(())
    }
}
