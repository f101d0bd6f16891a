//! End-to-end page checksums (`FARMEM_CHECKSUM`): the CRC32C of each far
//! page as it was written back, checked at every fetch. A page whose
//! contents differ is never installed: it is read again from another copy
//! where replicas are kept, or the program stops, naming the server.

use crate::Runtime;
use farmem_sys::mem::Mapping;
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Per page: the CRC32C of its contents on the backend.
pub(crate) struct Sums {
    words: Mapping,
    npages: usize,
    on: bool,
}

impl Sums {
    /// Room for `npages` sums; `on`: whether they are kept at all.
    pub(crate) fn new(npages: usize, on: bool) -> io::Result<Sums> {
        let bytes = (npages * 4).next_multiple_of(PAGE_SIZE);
        Ok(Sums {
            words: Mapping::anonymous(bytes, true)?,
            npages,
            on,
        })
    }

    fn word(&self, p: usize) -> &AtomicU32 {
        debug_assert!(p < self.npages);
        // SAFETY: p < npages and the mapping holds npages aligned u32 words
        // for the runtime's whole (static) life; AtomicU32 has u32's layout.
        unsafe { &*self.words.as_ptr().cast::<AtomicU32>().add(p) }
    }

    /// Record the checksum of page `p`'s contents as written back. The page
    /// is Evicting and write-protected, so `data` is what the backend gets;
    /// the state change to Absent that follows publishes the sum to any
    /// later fetch.
    pub(crate) fn record(&self, p: usize, data: &[u8]) {
        if self.on {
            self.word(p).store(crc32c::crc32c(data), Ordering::Relaxed);
        }
    }
}

impl Runtime {
    /// Check that `data`, fetched for page `p`, is what was written back.
    /// With another copy left (replicas), the server that sent a page that
    /// differs is dropped and the page read again from the next copy;
    /// otherwise the program stops, naming the server and the page.
    pub(crate) fn verify_sum(&self, p: usize, data: &mut [u8]) {
        if !self.sums.on {
            return;
        }
        let want = self.sums.word(p).load(Ordering::Relaxed);
        let mut got = crc32c::crc32c(data);
        while got != want && self.backend.distrust(p as u64) {
            if let Err(e) = self.backend.read(&[p as u64], data) {
                self.fatal_backend("fetch", p, &e);
            }
            got = crc32c::crc32c(data);
        }
        if got != want {
            let mut m = MsgBuf::new();
            let _ = write!(
                m,
                "farmem: far page at {:#x} came back from {} with the wrong contents (CRC32C {got:#010x}, written as {want:#010x}): the server, its memory or the network corrupted it\nfarmem: stopping the program: the page was not installed, and continuing would give it wrong data.\n",
                self.addr_of(p),
                self.backend.holder(p as u64),
            );
            farmem_sys::fatal(m.as_bytes());
        }
    }
}
