//! The one-host page path: a session's pages in sealed memory files, one
//! per chunk, whose descriptors the server passes to the session's client
//! over its Unix socket (`SCM_RIGHTS`). The client then reads and writes
//! pages with `pread` and `pwrite`; this server's CPU takes no part.
//!
//! Why descriptors and not UCX on one host: a UCX remote key is not a
//! capability (over transports that emulate RMA, UCX serves any address a
//! peer names), and UCX's shared memory is SysV segments any group member
//! may attach. A memory file is reachable only through a descriptor, which
//! only the kernel hands out: here, only to a peer on this server's Unix
//! socket whose `SO_PEERCRED` uid the server accepts, after its Hello.
//!
//! The server never maps a chunk. Capacity and `--session-quota` are
//! reserved per chunk before the file is made (a session at its quota costs
//! the server nothing; `crate::capacity`), and given back if making it
//! fails. Where the client's memory cgroup is not the server's, the file's
//! memory is allocated when it is made, so that the server's cgroup pays
//! for it, never the client's ([`MemfdPool::new`]). When the session
//! closes, every chunk's memory is punched out, so a client that keeps its
//! descriptor holds nothing this server paid for.

use crate::capacity::{Refused, Reservation};
use farmem_wire::{CHUNK_PAGES, PAGE_SIZE};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

struct Chunk {
    fd: OwnedFd,
    pages: u64,
}

/// A session's chunks of sealed memory files (sparse: only those granted).
pub(crate) struct MemfdPool {
    chunks: Mutex<BTreeMap<u64, Chunk>>,
    max_pages: u64,
    /// Pages of the chunks granted (what capacity is charged).
    charged: AtomicU64,
    /// Whether this server allocates the files' memory itself: where its
    /// memory cgroup is not the client's (see [`MemfdPool::new`]).
    allocate: bool,
}

/// Why a chunk was not granted.
pub(crate) enum GrantError {
    OutOfRange(String),
    Capacity(Refused),
    System(String),
}

impl MemfdPool {
    /// A pool for a session whose client's memory cgroup is this server's
    /// (`same_cgroup`) or not. A memory file's page is charged to the
    /// cgroup of the process that allocates it: left as holes, pages would
    /// be charged to the client when it writes them, and a program in a job
    /// step limited below its footprint would be killed for the memory its
    /// server holds. So where the cgroups differ (or cannot be told), the
    /// server allocates each chunk's memory when it makes the file, and
    /// keeps it allocated through a Free. Where they are the same (the
    /// embedded server, a server beside the program in one cgroup), either
    /// way charges the same cgroup, and the pages stay holes until written.
    pub(crate) fn new(max_pages: u64, same_cgroup: bool) -> MemfdPool {
        MemfdPool {
            chunks: Mutex::new(BTreeMap::new()),
            max_pages,
            charged: AtomicU64::new(0),
            allocate: !same_cgroup,
        }
    }

    /// Pages charged to this session's chunks.
    pub(crate) fn charged(&self) -> u64 {
        self.charged.load(Ordering::Acquire)
    }

    /// Grant chunk `c`: a new descriptor for its memory file (made now, or
    /// already) and its length in pages. `reserve(pages)` reserves the
    /// server's capacity and the session's quota before the file is made,
    /// or says why not; the reservation goes back if the file cannot be
    /// made.
    pub(crate) fn grant<'r>(
        &self,
        c: u64,
        reserve: impl FnOnce(u64) -> Result<Reservation<'r>, Refused>,
    ) -> Result<(OwnedFd, u64), GrantError> {
        let nchunks = self.max_pages.div_ceil(CHUNK_PAGES);
        if c >= nchunks {
            return Err(GrantError::OutOfRange(format!(
                "chunk {c} is beyond the session's {} pages ({nchunks} chunks)",
                self.max_pages
            )));
        }
        let dup = |ch: &Chunk| {
            ch.fd
                .try_clone()
                .map(|fd| (fd, ch.pages))
                .map_err(|e| GrantError::System(format!("cannot duplicate a descriptor: {e}")))
        };
        let mut chunks = crate::lock(&self.chunks);
        if let Some(ch) = chunks.get(&c) {
            return dup(ch);
        }
        let pages = CHUNK_PAGES.min(self.max_pages - c * CHUNK_PAGES);
        let reservation = reserve(pages).map_err(GrantError::Capacity)?;
        let made = farmem_sys::memfd::create_sealed(
            c"farmem-chunk",
            pages * PAGE_SIZE as u64,
            self.allocate,
        );
        let fd = match made {
            Ok(fd) => fd,
            Err(e) => {
                drop(reservation);
                return Err(GrantError::System(format!(
                    "cannot make a memory file for a chunk: {e}"
                )));
            }
        };
        self.charged.fetch_add(pages, Ordering::AcqRel);
        reservation.keep_all();
        let ch = chunks.entry(c).or_insert(Chunk { fd, pages });
        dup(ch)
    }

    /// A client's Free of pages `[start, start+n)`: their bytes are gone.
    /// Where this server allocates the memory ([`MemfdPool::new`]), it is
    /// allocated again (zeros, still the server's); otherwise it goes back
    /// to the system.
    pub(crate) fn discard(&self, start: u64, n: u64) {
        let chunks = crate::lock(&self.chunks);
        let end = start.saturating_add(n).min(self.max_pages);
        for (&c, ch) in chunks.range(start / CHUNK_PAGES..end.div_ceil(CHUNK_PAGES)) {
            let lo = start.max(c * CHUNK_PAGES) - c * CHUNK_PAGES;
            let hi = end.min(c * CHUNK_PAGES + ch.pages) - c * CHUNK_PAGES;
            if hi > lo {
                let (off, len) = (lo * PAGE_SIZE as u64, (hi - lo) * PAGE_SIZE as u64);
                let fd = ch.fd.as_raw_fd();
                let _ = farmem_sys::fs::punch_hole(fd, off, len).and_then(|()| {
                    if self.allocate {
                        farmem_sys::fs::allocate_range(fd, off, len)
                    } else {
                        Ok(())
                    }
                });
            }
        }
    }

    /// The session is closed: a client may still hold the descriptors, but
    /// not the memory. Called before the session's charge is given back, so
    /// that capacity never counts as free memory still held in a chunk (the
    /// store itself may outlive the close by a connection thread's `Arc`).
    pub(crate) fn release_all(&self) {
        let chunks = crate::lock(&self.chunks);
        for ch in chunks.values() {
            let _ = farmem_sys::fs::punch_hole(ch.fd.as_raw_fd(), 0, ch.pages * PAGE_SIZE as u64);
        }
    }
}

impl Drop for MemfdPool {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::Capacity;
    use std::os::unix::fs::{FileExt, MetadataExt};

    fn file(fd: &OwnedFd) -> std::fs::File {
        std::fs::File::from(fd.try_clone().unwrap())
    }

    /// For a client of another memory cgroup the server allocates a chunk
    /// whole when it grants it, and a Free zeroes pages without leaving
    /// holes (which the client's writes would fill, charged to it).
    #[test]
    fn a_client_of_another_cgroup_finds_its_chunk_allocated_by_the_server() {
        let cap = Capacity::new(u64::MAX, 0);
        let pool = MemfdPool::new(CHUNK_PAGES, false);
        let (fd, pages) = pool.grant(0, |p| cap.reserve(0, p)).ok().unwrap();
        assert_eq!(cap.used(), pages, "the chunk stays charged");
        let whole = pages * PAGE_SIZE as u64;
        assert_eq!(file(&fd).metadata().unwrap().blocks() * 512, whole);
        file(&fd).write_all_at(&[7u8; 4096], 4096).unwrap();
        pool.discard(1, 1);
        let mut page = [1u8; 4096];
        file(&fd).read_exact_at(&mut page, 4096).unwrap();
        assert!(page.iter().all(|&b| b == 0), "a freed page kept its bytes");
        assert_eq!(file(&fd).metadata().unwrap().blocks() * 512, whole);
        // The same cgroup: holes until written.
        let pool = MemfdPool::new(CHUNK_PAGES, true);
        let (fd, _) = pool.grant(0, |p| cap.reserve(0, p)).ok().unwrap();
        assert_eq!(file(&fd).metadata().unwrap().blocks(), 0);
    }
}
