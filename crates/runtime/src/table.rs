//! The page table: one atomic word per far page (see [`crate::page`]), and
//! the auxiliary word the replacement policy keeps per page (an eviction
//! stamp, or a page's slot in the hold).

use crate::page::{self, next, Event, PageWord};
use crate::replacement::Aux;
use farmem_sys::mem::Mapping;
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

pub(crate) struct PageTable {
    meta: Mapping,
    aux: Mapping,
    npages: usize,
}

impl PageTable {
    /// Words for `npages` pages, all zero (never allocated).
    pub(crate) fn new(npages: usize) -> io::Result<PageTable> {
        let bytes = (npages * 4).next_multiple_of(PAGE_SIZE);
        Ok(PageTable {
            meta: Mapping::anonymous(bytes, true)?,
            aux: Mapping::anonymous(bytes, true)?,
            npages,
        })
    }

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

    /// Clear page `p`'s [`page::STALE`] mark; whether it was set.
    pub(crate) fn clear_stale(&self, p: usize) -> bool {
        self.word(p).fetch_and(!page::STALE, Ordering::AcqRel) & page::STALE != 0
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
}

impl Aux for PageTable {
    fn aux(&self, p: u32) -> u32 {
        self.aux_word(p as usize).load(Ordering::Relaxed)
    }
    fn set_aux(&self, p: u32, v: u32) {
        self.aux_word(p as usize).store(v, Ordering::Relaxed)
    }
}
