//! Servers leaving on purpose (`farmem serve --drain`, stopped): each
//! server's Stats reply says whether it is draining, and the repair thread
//! asks every live server a few times a second. A leaving server is still
//! read from, but no longer a place for copies: repair moves every unit's
//! copy off it (see `repair.rs`), and once none is left there the server is
//! released: marked down, its connections closed (its session ends, and it
//! exits), its memory files' pages given back.
//!
//! Hazard: a page written between the pass's bound and the release, to a
//! unit past the bound whose starting copies are the leaving server L and
//! a live T, has copies on L and T: after the release, one. Its unit still
//! names L, now down, so the next pass (which the release's loss starts,
//! with a new bound) gives it its second copy from T. A page that reached
//! L alone (T already lost) is a short write; the release waits, under
//! the write gate, until no short write has happened since the pass began,
//! so such a page is always moved before L goes.

use super::reply::{check_reply, read_header};
use super::{PagePath, RemoteBackend};
use crate::backend::BackendError;
use crate::sync::lock;
use farmem_wire::{self as wire, Frame, Op, Reply, ServerStats};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

impl RemoteBackend {
    pub(super) fn is_leaving(&self, s: usize) -> bool {
        self.servers[s].leaving.load(Ordering::Acquire)
    }

    /// Ask every live server whether it is leaving, and look for lost ones
    /// back at their address (see `join.rs`); true when one began leaving
    /// or joined. A server that does not answer is failed over, as on any
    /// request.
    pub(super) fn watch(&self) -> Result<bool, BackendError> {
        let mut began = false;
        for s in 0..self.servers.len() {
            if self.is_down(s) || self.is_leaving(s) {
                continue;
            }
            match self.server_stats(s) {
                Ok(st) if st.draining => {
                    self.servers[s].leaving.store(true, Ordering::Release);
                    let mut m = farmem_sys::msg::MsgBuf::new();
                    let _ = writeln!(
                        m,
                        "farmem: memory server {} is leaving (stopped with --drain); its pages move to the other servers",
                        self.servers[s].name
                    );
                    farmem_sys::write_stderr(m.as_bytes());
                    began = true;
                }
                Ok(_) => {}
                Err(e) if self.lost(&e) => self.fail_over(s, &e)?,
                Err(e) => return Err(e),
            }
        }
        if began {
            // A change of membership, like a loss: the repair thread's cue.
            self.losses.fetch_add(1, Ordering::AcqRel);
        }
        // A server lost or gone may be back (restarted at its address).
        let joined = (0..self.servers.len()).any(|s| self.is_down(s)) && self.try_rejoin()?;
        Ok(began || joined)
    }

    /// Server `s`'s figures, asked on its control connection.
    fn server_stats(&self, s: usize) -> Result<ServerStats, BackendError> {
        let server = &self.servers[s];
        let mut conn = Self::hold(server.memfd_conn());
        self.drain(server, &mut conn)?;
        let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
        conn.link
            .send(&[&Frame::Stats.encode(tag)], self.wait)
            .map_err(|e| server.io(e))?;
        let h = read_header(server, &*conn.link, self.wait)?;
        check_reply(server, &*conn.link, &h, Op::StatsOk, tag, 40, self.wait)?;
        let mut payload = [0u8; 40];
        conn.link
            .recv_exact(&mut payload, self.wait)
            .map_err(|e| server.io(e))?;
        match wire::decode_reply(&h, &payload) {
            Ok(Reply::StatsOk(st)) => Ok(st),
            other => Err(server.protocol(format!("a StatsOk that does not decode: {other:?}"))),
        }
    }

    /// After a pass that left no page short (`short_at_start`: the short
    /// writes when it began): release every leaving server, under the
    /// write gate, unless a write has reached fewer copies since (see the
    /// module comment; the next pass tries again).
    pub(super) fn release_leaving(&self, short_at_start: u64) {
        let leaving: Vec<usize> = (0..self.servers.len())
            .filter(|&s| self.is_leaving(s) && !self.is_down(s))
            .collect();
        if leaving.is_empty() {
            return;
        }
        let _alone = self.writes_held_off();
        if self.short_writes() != short_at_start {
            return;
        }
        for s in leaving {
            let server = &self.servers[s];
            // Nothing is routed to it from here on; a request in flight on
            // a connection closed below fails and is failed over.
            self.mark_down(s);
            for c in server.conns.iter().chain(server.side.as_ref()) {
                c.link.shutdown();
            }
            lock(&self.released).push(s);
            let mut m = farmem_sys::msg::MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: memory server {} has left; its pages are on the other servers",
                server.name
            );
            farmem_sys::write_stderr(m.as_bytes());
        }
    }

    /// Give back the memory-file pages of servers released before the pass
    /// that just ended: a read routed to one before its release has long
    /// finished (and would fail its checksum and be read again if not).
    pub(super) fn punch_released(&self, upto: usize) {
        if let PagePath::Memfd(m) = &self.path {
            let released = lock(&self.released);
            for &s in &released[..upto.min(released.len())] {
                m.release(s);
            }
        }
    }

    /// Servers released so far.
    pub(super) fn released_count(&self) -> usize {
        lock(&self.released).len()
    }
}
