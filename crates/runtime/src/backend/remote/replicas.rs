//! Copies on several servers: losing a server (one warning line, its owed
//! replies salvaged from the other copies) and running a step on every
//! live copy (see the hazards in the module comment of `remote`).

use super::conn::{Owed, MAX_PENDING};
use super::RemoteBackend;
use crate::backend::{Backend, BackendError, MAX_BATCH};
use farmem_sys::PAGE_SIZE;

impl RemoteBackend {
    pub(super) fn lost(&self, e: &BackendError) -> bool {
        self.redundant() && matches!(e, BackendError::Io { .. } | BackendError::Protocol { .. })
    }

    /// its connections still owed. Called with no connection held.
    pub(super) fn fail_over(&self, s: usize, e: &BackendError) -> Result<(), BackendError> {
        self.mark_lost(s, e);
        self.salvage(s)
    }

    /// Server `s` is lost, for `e`: marked down, with one warning line the
    /// first time. What it still owes is salvaged later ([`Self::salvage`],
    /// by whoever drains its connections next).
    pub(super) fn mark_lost(&self, s: usize, e: &BackendError) {
        if self.mark_down(s) {
            use std::fmt::Write as _;
            let mut m = farmem_sys::msg::MsgBuf::new();
            let name = &self.servers[s].name;
            let _ = match e {
                BackendError::Io { source, .. } => write!(
                    m,
                    "farmem: warning: memory server {name} is down ({source})"
                ),
                BackendError::Protocol { why, .. } => {
                    write!(
                        m,
                        "farmem: warning: memory server {name} is down (a bad reply: {why})"
                    )
                }
                other => write!(m, "farmem: warning: memory server {name} is down ({other})"),
            };
            let _ = writeln!(
                m,
                "; its pages are {}",
                if self.ec.is_some() {
                    "decoded from their rows' other pages"
                } else {
                    "served from their other copies"
                }
            );
            farmem_sys::write_stderr(m.as_bytes());
        }
    }

    /// Empty the queues of lost server `s`: every owed asynchronous read
    /// read again from the page's next live copy (or decoded) into its
    /// buffer and completed, every owed acknowledgement counted short.
    /// Called with no connection held, and no row lock (`erasure.rs`).
    fn salvage(&self, s: usize) -> Result<(), BackendError> {
        for c in 0..self.servers[s].conns.len() {
            let mut owed = [Owed::Ack { tag: 0, pages: 0 }; MAX_PENDING];
            let mut n = 0;
            let mut conn = self.acquire(s, c);
            while let Some(o) = conn.pending().pop() {
                owed[n] = o;
                n += 1;
            }
            drop(conn);
            for o in &owed[..n] {
                match *o {
                    Owed::Ack { pages, .. } => {
                        self.count_short(u64::from(pages));
                    }
                    Owed::Read {
                        first,
                        pages,
                        buf,
                        token,
                        ..
                    } => {
                        let mut list = [0u64; MAX_BATCH];
                        for (i, p) in list[..pages as usize].iter_mut().enumerate() {
                            *p = first + i as u64;
                        }
                        // SAFETY: `read_async`'s caller keeps `buf` valid and
                        // untouched for `pages` pages until this completion.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(buf, pages as usize * PAGE_SIZE)
                        };
                        self.read(&list[..pages as usize], dst)?;
                        if let Some(done) = self.complete.get() {
                            done(token);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Run `f` on each route of copy `k` of `pages` whose server is live;
    /// the positions where it returned true come back marked. A server
    /// lost there is failed over once the round is done (its positions stay
    /// unmarked); any other error ends the round.
    pub(super) fn on_copy(
        &self,
        pages: &[u64],
        k: usize,
        mut f: impl FnMut((usize, usize), &[usize]) -> Result<bool, BackendError>,
    ) -> Result<[bool; MAX_BATCH], BackendError> {
        let mut done = [false; MAX_BATCH];
        let mut lost = None;
        self.per_route(
            pages,
            |p| self.route(p, k),
            |r, idx| {
                if self.is_down(r.0) {
                    return Ok(());
                }
                match f(r, idx) {
                    Ok(ok) => {
                        for &i in idx {
                            done[i] = ok;
                        }
                        Ok(())
                    }
                    Err(e) if self.lost(&e) => {
                        lost = Some((r.0, e));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            },
        )?;
        if let Some((s, e)) = lost {
            self.fail_over(s, &e)?;
        }
        Ok(done)
    }
}
