//! One-host page I/O through sealed memory files: each memory server makes
//! one file per chunk of the session's pages and passes its descriptor over
//! the session's Unix socket. A demand fetch is a `pread` from the chunk
//! into the fetch slot, a write-back a `pwrite` (or `pwritev` over a run)
//! from the page itself: one copy each way, no server CPU, no wake-up, and
//! nothing mapped here, so the program's resident memory stays within its
//! budget.
//!
//! Why descriptors: the kernel decides who touches a page, and only a
//! process holding the descriptor can. No address, key or listening port
//! is involved, so no other peer can reach this program's memory or the
//! server's through this path.
//!
//! What the client checks (every server is hostile until proven
//! otherwise): a descriptor must be a memory file sealed against growing
//! and shrinking, of exactly its chunk's length; the chunk size is the
//! protocol's constant; page offsets are computed here, never taken from
//! the server. A chunk descriptor outlives its server: a killed server is
//! found by its control connection closing (checked before each
//! write-back), as on UCX, or with copies by the repair thread's look at
//! every server four times a second (`leave.rs`).
//!
//! Ordering: a `pwrite` is complete in the file when it returns, so a read
//! issued after it (from any thread) sees its bytes; no flush is needed.

use crate::backend::{BackendError, Failure, OneSided};
use crate::config::MAX_REPLICAS;
use farmem_sys::PAGE_SIZE;
use farmem_wire::CHUNK_PAGES;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

/// Most pages in one read or write.
const MAX_BATCH: usize = super::MAX_BATCH;

/// One server's chunk files, by chunk.
type Chunks = Box<[OnceLock<OwnedFd>]>;

/// The memory-file side of the remote backend.
pub(crate) struct MemfdPages {
    /// Per server (room for those that may join), per chunk: the chunk's
    /// file once granted. A server's table is made at its first grant.
    servers: Box<[OnceLock<Chunks>]>,
    nchunks: usize,
    grants: Mutex<()>,
    max_pages: u64,
}

impl MemfdPages {
    /// Files of up to `nservers` servers, for `max_pages` pages.
    pub(crate) fn new(nservers: usize, max_pages: u64) -> MemfdPages {
        MemfdPages {
            servers: (0..nservers).map(|_| OnceLock::new()).collect(),
            nchunks: farmem_sys::usize_from(max_pages.div_ceil(CHUNK_PAGES)),
            grants: Mutex::new(()),
            max_pages,
        }
    }

    /// Pages in chunk `c` (the last one may be shorter).
    fn pages_in(&self, c: u64) -> u64 {
        CHUNK_PAGES.min(self.max_pages - c * CHUNK_PAGES)
    }

    /// Server `s` has left: give its chunks' memory back to the host now.
    /// The descriptors stay open (a page of a left server is never read),
    /// and without this they would keep that memory for the program's
    /// whole life after the server has exited.
    pub(crate) fn release(&self, s: usize) {
        let files = self.servers.get(s).and_then(OnceLock::get);
        for f in files.into_iter().flatten().filter_map(OnceLock::get) {
            let _ = farmem_sys::fs::punch_hole(f.as_raw_fd(), 0, CHUNK_PAGES * PAGE_SIZE as u64);
        }
    }

    fn file(&self, s: usize, page: u64) -> Option<&OwnedFd> {
        let c = farmem_sys::usize_from(page / CHUNK_PAGES);
        self.servers.get(s)?.get()?.get(c)?.get()
    }

    /// Make sure chunk `c` of server `s` is granted: `grant` asks the server
    /// (a control round trip) and returns the descriptor it passed and the
    /// chunk's length in pages as it says. Both are checked here.
    pub(crate) fn ensure(
        &self,
        s: usize,
        c: u64,
        server: &str,
        grant: impl FnOnce() -> Result<(OwnedFd, u64), BackendError>,
    ) -> Result<(), BackendError> {
        let beyond = |what: String| BackendError::Protocol {
            server: server.into(),
            why: format!("{what} is beyond the session (a farmem bug)"),
        };
        let table = self
            .servers
            .get(s)
            .ok_or_else(|| beyond(format!("server {s}")))?
            .get_or_init(|| (0..self.nchunks).map(|_| OnceLock::new()).collect());
        let slot = table
            .get(farmem_sys::usize_from(c))
            .ok_or_else(|| beyond(format!("chunk {c}")))?;
        if slot.get().is_some() {
            return Ok(());
        }
        let _g = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        if slot.get().is_some() {
            return Ok(());
        }
        let (fd, pages) = grant()?;
        let want = self.pages_in(c);
        let bad = |why: String| BackendError::Protocol {
            server: server.into(),
            why,
        };
        if pages != want {
            return Err(bad(format!(
                "it granted chunk {c} as {pages} pages; that chunk of this session is {want}"
            )));
        }
        farmem_sys::memfd::check_chunk(fd.as_raw_fd(), want * PAGE_SIZE as u64).map_err(|e| {
            bad(format!(
                "the descriptor it passed for chunk {c} is refused: {e}"
            ))
        })?;
        let _ = slot.set(fd);
        Ok(())
    }

    /// Offset of `page` in its chunk's file.
    fn offset(page: u64) -> u64 {
        (page % CHUNK_PAGES) * PAGE_SIZE as u64
    }

    /// One copy of a write: page i to server `server_of(i)`, if any; a run
    /// of consecutive pages of one chunk on one server is one `pwritev`.
    fn write_copy(
        &self,
        pages: &[u64],
        data: &[&[u8]],
        server_of: impl Fn(usize) -> Option<usize>,
    ) -> Result<(), Failure> {
        let mut i = 0;
        while i < pages.len() {
            let Some(s) = server_of(i) else {
                i += 1;
                continue;
            };
            let p = pages[i];
            let mut k = 1;
            while i + k < pages.len()
                && k < farmem_sys::net::MAX_IOV
                && pages[i + k] == p + k as u64
                && server_of(i + k) == Some(s)
                && !(p + k as u64).is_multiple_of(CHUNK_PAGES)
            {
                k += 1;
            }
            let fd = self.file(s, p).ok_or_else(|| never_granted(s, p))?;
            let r = if k == 1 {
                farmem_sys::fs::pwrite_full(fd.as_raw_fd(), data[i], Self::offset(p))
            } else {
                farmem_sys::fs::pwritev_full(fd.as_raw_fd(), &data[i..i + k], Self::offset(p))
            };
            r.map_err(|e| Failure {
                server: s,
                why: format!("writing page {p} to its chunk file failed: {e}"),
            })?;
            i += k;
        }
        Ok(())
    }
}

impl OneSided for MemfdPages {
    /// Whether `page`'s chunk is granted on server `s`.
    fn granted(&self, s: usize, page: u64) -> bool {
        self.file(s, page).is_some()
    }

    /// Read `pages` into `buf` (page i at `i * PAGE_SIZE`), page i from
    /// server `from[i]`; a run of consecutive pages of one chunk and server
    /// is one `pread`.
    fn read(&self, pages: &[u64], from: &[usize], buf: &mut [u8]) -> Result<(), Failure> {
        let mut i = 0;
        while i < pages.len() {
            let (p, s) = (pages[i], from[i]);
            let mut k = 1;
            while i + k < pages.len()
                && pages[i + k] == p + k as u64
                && from[i + k] == s
                && !(p + k as u64).is_multiple_of(CHUNK_PAGES)
            {
                k += 1;
            }
            let fd = self.file(s, p).ok_or_else(|| never_granted(s, p))?;
            let dst = &mut buf[i * PAGE_SIZE..(i + k) * PAGE_SIZE];
            match farmem_sys::fs::pread_full(fd.as_raw_fd(), dst, Self::offset(p)) {
                Ok(n) if n == dst.len() => {}
                Ok(n) => {
                    return Err(Failure {
                        server: s,
                        why: format!("its chunk file ended {n} bytes into a read of page {p}"),
                    })
                }
                Err(e) => {
                    return Err(Failure {
                        server: s,
                        why: format!("reading page {p} from its chunk file failed: {e}"),
                    })
                }
            }
            i += k;
        }
        Ok(())
    }

    /// Write `data[i]` as `pages[i]` to every server in `to[i]` (its live
    /// copies; `None` past the last): complete in the files when this
    /// returns Ok.
    fn write(
        &self,
        pages: &[u64],
        data: &[&[u8]],
        to: &[[Option<usize>; MAX_REPLICAS]],
    ) -> Result<(), Failure> {
        debug_assert!(pages.len() <= MAX_BATCH);
        (0..MAX_REPLICAS).try_for_each(|copy| self.write_copy(pages, data, |i| to[i][copy]))
    }
}

fn never_granted(s: usize, p: u64) -> Failure {
    Failure {
        server: s,
        why: format!("page {p} is in a chunk never granted (a farmem bug)"),
    }
}
