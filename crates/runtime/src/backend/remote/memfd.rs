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
//!
//! Writers of one file wait for each other: shmem takes the file's lock for
//! every write, so two threads writing pages of one chunk go one at a time
//! (3.0–3.3 µs a page each, against 1.5 µs into two files;
//! `bench/kernel/memfd-write-contention.c`). A write-back therefore first
//! writes the runs whose chunk no other thread of this process is writing,
//! and only then the rest. The flag that says so is a hint, never a lock:
//! the kernel serializes the writes, so a run is written whatever the flag
//! says, and nothing ever waits on it (a fault taken inside a write-back, in
//! a signal handler, could otherwise wait on itself).

use crate::backend::{BackendError, Failure, OneSided};
use crate::config::MAX_REPLICAS;
use farmem_sys::PAGE_SIZE;
use farmem_wire::CHUNK_PAGES;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Most pages in one read or write.
const MAX_BATCH: usize = super::MAX_BATCH;

/// One server's chunk files, by chunk.
type Chunks = Box<[Chunk]>;

/// A chunk's file once granted, and whether a thread here is writing it.
#[derive(Default)]
struct Chunk {
    fd: OnceLock<OwnedFd>,
    writing: AtomicBool,
}

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
        for f in files.into_iter().flatten().filter_map(|c| c.fd.get()) {
            let _ = farmem_sys::fs::punch_hole(f.as_raw_fd(), 0, CHUNK_PAGES * PAGE_SIZE as u64);
        }
    }

    fn chunk(&self, s: usize, page: u64) -> Option<&Chunk> {
        let c = farmem_sys::usize_from(page / CHUNK_PAGES);
        self.servers.get(s)?.get()?.get(c)
    }

    fn file(&self, s: usize, page: u64) -> Option<&OwnedFd> {
        self.chunk(s, page)?.fd.get()
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
            .get_or_init(|| (0..self.nchunks).map(|_| Chunk::default()).collect());
        let slot = &table
            .get(farmem_sys::usize_from(c))
            .ok_or_else(|| beyond(format!("chunk {c}")))?
            .fd;
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
    /// Runs into a chunk another thread is writing go last (see the module
    /// comment), so a page must not appear twice in one write: its older
    /// bytes could land last.
    fn write_copy(
        &self,
        pages: &[u64],
        data: &[&[u8]],
        server_of: impl Fn(usize) -> Option<usize>,
    ) -> Result<(), Failure> {
        debug_assert!(
            pages
                .iter()
                .enumerate()
                .all(|(i, p)| !pages[..i].contains(p)),
            "a page twice in one write"
        );
        let mut later = [(0usize, 0usize, 0usize); MAX_BATCH];
        let mut n_later = 0;
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
            let chunk = self.chunk(s, p).ok_or_else(|| never_granted(s, p))?;
            let free = chunk
                .writing
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
            if free {
                let r = self.write_run(s, &pages[i..i + k], &data[i..i + k]);
                chunk.writing.store(false, Ordering::Release);
                r?;
            } else if n_later < later.len() {
                later[n_later] = (i, k, s);
                n_later += 1;
            } else {
                self.write_run(s, &pages[i..i + k], &data[i..i + k])?;
            }
            i += k;
        }
        for &(i, k, s) in &later[..n_later] {
            self.write_run(s, &pages[i..i + k], &data[i..i + k])?;
        }
        Ok(())
    }

    /// Write one run of consecutive pages of one chunk to server `s`.
    fn write_run(&self, s: usize, pages: &[u64], data: &[&[u8]]) -> Result<(), Failure> {
        let p = pages[0];
        let fd = self.file(s, p).ok_or_else(|| never_granted(s, p))?;
        let r = if pages.len() == 1 {
            farmem_sys::fs::pwrite_full(fd.as_raw_fd(), data[0], Self::offset(p))
        } else {
            farmem_sys::fs::pwritev_full(fd.as_raw_fd(), data, Self::offset(p))
        };
        r.map_err(|e| Failure {
            server: s,
            why: format!("writing page {p} to its chunk file failed: {e}"),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Two granted chunks of one server, the second one short.
    fn two_chunks() -> MemfdPages {
        let m = MemfdPages::new(1, CHUNK_PAGES + 64);
        for c in 0..2 {
            let pages = m.pages_in(c);
            m.ensure(0, c, "test", || {
                let fd =
                    farmem_sys::memfd::create_sealed(c"chunk", pages * PAGE_SIZE as u64, false)
                        .expect("memfd");
                Ok((fd, pages))
            })
            .expect("grant");
        }
        m
    }

    fn page_of(byte: u8) -> Vec<u8> {
        vec![byte; PAGE_SIZE]
    }

    /// Every page to server 0 only.
    fn to_server_0(n: usize) -> Vec<[Option<usize>; MAX_REPLICAS]> {
        let mut to = [None; MAX_REPLICAS];
        to[0] = Some(0);
        vec![to; n]
    }

    fn write(m: &MemfdPages, pages: &[u64], data: &[Vec<u8>]) -> Result<(), String> {
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        m.write(pages, &refs, &to_server_0(pages.len()))
            .map_err(|f| f.why)
    }

    fn read_back(m: &MemfdPages, pages: &[u64]) -> Vec<u8> {
        let mut buf = vec![0u8; pages.len() * PAGE_SIZE];
        if let Err(f) = m.read(pages, &vec![0; pages.len()], &mut buf) {
            panic!("read: {}", f.why);
        }
        buf
    }

    #[test]
    fn runs_into_a_chunk_being_written_all_land_and_its_flag_is_left_alone() {
        let m = two_chunks();
        // Another thread is writing chunk 0: its runs wait for the end of
        // the batch, and are written all the same.
        let busy = m.chunk(0, 0).expect("chunk 0");
        busy.writing.store(true, Ordering::Relaxed);
        let pages = [3, 4, CHUNK_PAGES + 1, 9, CHUNK_PAGES + 2];
        let data: Vec<Vec<u8>> = (1..=5u8).map(page_of).collect();
        write(&m, &pages, &data).expect("write");
        let got = read_back(&m, &pages);
        for (i, d) in data.iter().enumerate() {
            assert_eq!(
                &got[i * PAGE_SIZE..(i + 1) * PAGE_SIZE],
                d.as_slice(),
                "page {}",
                pages[i]
            );
        }
        // The other thread's flag is left as it was; this write's own is released.
        assert!(busy.writing.load(Ordering::Relaxed));
        assert!(!m
            .chunk(0, CHUNK_PAGES)
            .expect("chunk 1")
            .writing
            .load(Ordering::Relaxed));
    }

    #[test]
    fn a_failed_write_releases_its_chunk() {
        let m = two_chunks();
        // Page 64 of the short chunk is past its end: the run fails.
        let bad = [CHUNK_PAGES + 63, CHUNK_PAGES + 64];
        assert!(write(&m, &bad, &[page_of(1), page_of(2)]).is_err());
        assert!(!m
            .chunk(0, CHUNK_PAGES)
            .expect("chunk 1")
            .writing
            .load(Ordering::Relaxed));
    }

    /// Thread `t`'s batch in round `round`: pages of its parity (each page
    /// has one writer), scattered over both chunks.
    fn batch(t: u64, round: u64) -> Vec<u64> {
        (0..16u64)
            .map(|i| {
                let x = round * 37 + i * 101;
                if i % 2 == 0 {
                    (x % 512) * 2 + t
                } else {
                    CHUNK_PAGES + (x % 32) * 2 + t
                }
            })
            .collect()
    }

    /// The byte page `p` is filled with in round `r`: a page's rounds differ.
    fn content(p: u64, r: u64) -> u8 {
        u8::try_from((p + r) % 251).expect("under 251")
    }

    #[test]
    fn two_threads_writing_one_chunk_lose_no_page() {
        let m = Arc::new(two_chunks());
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let pages = batch(t, round);
                        let data: Vec<Vec<u8>> =
                            pages.iter().map(|&p| page_of(content(p, round))).collect();
                        write(&m, &pages, &data).expect("write");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        // Each page must hold what its writer wrote last.
        let mut last = std::collections::BTreeMap::new();
        for t in 0..2 {
            for r in 0..200 {
                for p in batch(t, r) {
                    last.insert(p, r);
                }
            }
        }
        assert!(last.len() > 500);
        for (p, r) in last {
            let got = read_back(&m, &[p]);
            let want = content(p, r);
            assert!(
                got.iter().all(|&b| b == want),
                "page {p} does not hold what round {r} wrote last"
            );
        }
        for c in [0, CHUNK_PAGES] {
            let chunk = m.chunk(0, c).expect("chunk");
            assert!(!chunk.writing.load(Ordering::Relaxed));
        }
    }
}
