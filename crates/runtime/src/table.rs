//! The page table: one atomic word per far page (see [`crate::page`]), and
//! the auxiliary word the replacement policy keeps per page.

use crate::backend::BackendError;
use crate::page::{self, next, Event, PageWord};
use crate::replacement::Aux;
use crate::Runtime;
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};

impl Runtime {
    pub(crate) fn word(&self, p: usize) -> &AtomicU32 {
        debug_assert!(p < self.npages);
        // SAFETY: p < npages and meta holds npages aligned u32 words for the
        // runtime's whole (static) life; AtomicU32 has u32's layout.
        unsafe { &*self.meta.as_ptr().cast::<AtomicU32>().add(p) }
    }

    fn aux_word(&self, p: usize) -> &AtomicU32 {
        debug_assert!(p < self.npages);
        // SAFETY: as for `word`: aux holds npages aligned u32 words for the
        // runtime's static life.
        unsafe { &*self.aux.as_ptr().cast::<AtomicU32>().add(p) }
    }

    fn sum_word(&self, p: usize) -> &AtomicU32 {
        debug_assert!(p < self.npages);
        // SAFETY: as for `word`: sums holds npages aligned u32 words for the
        // runtime's static life.
        unsafe { &*self.sums.as_ptr().cast::<AtomicU32>().add(p) }
    }

    /// Record the checksum of page `p`'s contents as written back. The page
    /// is Evicting and write-protected, so `data` is what the backend gets;
    /// the state change to Absent that follows publishes the sum to any
    /// later fetch.
    pub(crate) fn record_sum(&self, p: usize, data: &[u8]) {
        if self.cfg.checksum {
            self.sum_word(p)
                .store(crc32c::crc32c(data), Ordering::Relaxed);
        }
    }

    /// Check that `data`, fetched for page `p`, is what was written back.
    /// A page that differs is never installed: with another copy left
    /// (replicas), the server that sent it is dropped and the page read
    /// again from the next copy; otherwise the program stops, naming the
    /// server and the page.
    pub(crate) fn verify_sum(&self, p: usize, data: &mut [u8]) {
        if !self.cfg.checksum {
            return;
        }
        let want = self.sum_word(p).load(Ordering::Relaxed);
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

    pub(crate) fn load(&self, p: usize) -> PageWord {
        PageWord(self.word(p).load(Ordering::Acquire))
    }

    pub(crate) fn cas(&self, p: usize, old: PageWord, new: PageWord) -> bool {
        self.word(p)
            .compare_exchange(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Apply `ev` atomically (retrying over concurrent pin changes); returns
    /// the word before the change.
    pub(crate) fn transition(&self, p: usize, ev: Event) -> Result<PageWord, page::BadTransition> {
        let mut w = self.load(p);
        loop {
            let n = next(w, ev)?;
            match self
                .word(p)
                .compare_exchange_weak(w.0, n.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(w),
                Err(cur) => w = PageWord(cur),
            }
        }
    }

    /// A transition the caller owns and that cannot fail unless an invariant
    /// is broken; stop rather than continue with a corrupt page table.
    pub(crate) fn must(&self, p: usize, ev: Event) {
        if let Err(e) = self.transition(p, ev) {
            let mut m = MsgBuf::new();
            let _ = writeln!(m, "farmem: internal error on far page {p}: {e}");
            farmem_sys::fatal(m.as_bytes());
        }
    }

    pub(crate) fn addr_of(&self, p: usize) -> usize {
        self.base + p * PAGE_SIZE
    }

    pub(crate) fn fatal_backend(&self, what: &str, page: usize, e: &BackendError) -> ! {
        let mut m = MsgBuf::new();
        let _ = write!(
            m,
            "farmem: cannot {what} far page at {:#x} ({}): {e}\nfarmem: stopping the program: continuing would give it wrong data.\n",
            self.addr_of(page),
            self.backend.holder(page as u64),
        );
        farmem_sys::fatal(m.as_bytes())
    }
}

impl Aux for Runtime {
    fn aux(&self, p: u32) -> u32 {
        self.aux_word(p as usize).load(Ordering::Relaxed)
    }
    fn set_aux(&self, p: u32, v: u32) {
        self.aux_word(p as usize).store(v, Ordering::Relaxed)
    }
}
