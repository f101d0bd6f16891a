//! The region allocator: page ranges of the arena handed out by `alloc`,
//! first fit over a free list, the top given back on free.

use crate::page::{self, PageWord};
use crate::replacement::Aux as _;
use crate::signals::is_forked_child;
use crate::signals::MsgBuf;
use crate::{config, wait, Runtime, RuntimeError};
use farmem_sys::PAGE_SIZE;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

#[derive(Default)]
pub(crate) struct Regions {
    /// Free page ranges below `top`: start -> length.
    free: BTreeMap<usize, usize>,
    /// Live allocations: start page -> pages.
    live: HashMap<usize, usize>,
    top: usize,
}

impl Runtime {
    pub(crate) fn check_not_forked(&self) -> Result<(), RuntimeError> {
        if is_forked_child() {
            Err(RuntimeError::Forked)
        } else {
            Ok(())
        }
    }

    /// Allocate `size` bytes of far memory: page-aligned, reading as zero.
    pub fn alloc(&self, size: usize) -> Result<*mut u8, RuntimeError> {
        self.check_not_forked()?;
        if size == 0 {
            return Err(RuntimeError::ZeroSize);
        }
        let pages = size.div_ceil(PAGE_SIZE);
        let start = {
            let mut r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            let fit = r
                .free
                .iter()
                .find(|(_, &len)| len >= pages)
                .map(|(&s, &l)| (s, l));
            let start = match fit {
                Some((s, l)) => {
                    r.free.remove(&s);
                    if l > pages {
                        r.free.insert(s + pages, l - pages);
                    }
                    s
                }
                None => {
                    if r.top + pages > self.npages {
                        let free: usize = r.free.values().sum::<usize>() + (self.npages - r.top);
                        return Err(RuntimeError::OutOfSpace {
                            want: config::format_size(size as u64),
                            free: config::format_size((free * PAGE_SIZE) as u64),
                            arena: config::format_size(self.cfg.arena_bytes),
                        });
                    }
                    r.top += pages;
                    r.top - pages
                }
            };
            r.live.insert(start, pages);
            start
        };
        for p in start..start + pages {
            self.word(p).fetch_or(page::ALLOCATED, Ordering::AcqRel);
        }
        Ok(self.addr_of(start) as *mut u8)
    }

    /// Size in bytes (whole pages) of the live allocation starting at `ptr`.
    pub fn alloc_size(&self, ptr: *const u8) -> Option<usize> {
        let addr = ptr as usize;
        if !self.contains(addr) {
            return None;
        }
        let start = (addr - self.base) / PAGE_SIZE;
        let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        r.live.get(&start).map(|&pages| pages * PAGE_SIZE)
    }

    /// Discard the whole pages of `[addr, addr+len)`, which must lie in one
    /// allocation (a partial `munmap` in the `farmem run` shim): their content
    /// is dropped and any later access stops the program, as for unmapped
    /// memory. The allocation's address range is reclaimed when it is freed.
    pub fn discard(&self, addr: usize, len: usize) -> Result<(), RuntimeError> {
        let (first, last) = self.range_of(addr, len)?;
        let lo = (addr - self.base).div_ceil(PAGE_SIZE).max(first);
        let hi = ((addr + len - self.base) / PAGE_SIZE).min(last + 1);
        if lo < hi && !is_forked_child() {
            self.release_pages(lo, hi - lo);
        }
        Ok(())
    }

    /// `madvise(MADV_DONTNEED)` on far memory: the pages covering
    /// `[addr, addr+len)` (which must lie in one allocation) drop their
    /// content, local and far, and read as zero afterwards, as anonymous
    /// memory does. Allocators rely on that (jemalloc counts purged pages as
    /// zeroed).
    pub fn zero(&self, addr: usize, len: usize) -> Result<(), RuntimeError> {
        let (first, last) = self.range_of(addr, len)?;
        if !is_forked_child() {
            self.release_pages(first, last - first + 1);
            for p in first..=last {
                self.word(p).fetch_or(page::ALLOCATED, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Free an allocation made by `alloc`.
    pub fn free(&self, ptr: *mut u8) -> Result<(), RuntimeError> {
        let addr = ptr as usize;
        if !self.contains(addr) || !(addr - self.base).is_multiple_of(PAGE_SIZE) {
            return Err(RuntimeError::InvalidPointer(addr));
        }
        let start = (addr - self.base) / PAGE_SIZE;
        let pages = {
            let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            *r.live
                .get(&start)
                .ok_or(RuntimeError::InvalidPointer(addr))?
        };
        if !is_forked_child() {
            self.release_pages(start, pages);
        }
        let mut r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        r.live.remove(&start);
        // Coalesce with free neighbours; give the top back.
        let mut s = start;
        let mut len = pages;
        if let Some((&ps, &pl)) = r.free.range(..s).next_back() {
            if ps + pl == s {
                r.free.remove(&ps);
                s = ps;
                len += pl;
            }
        }
        if let Some(nl) = r.free.remove(&(s + len)) {
            len += nl;
        }
        if s + len == r.top {
            r.top = s;
        } else {
            r.free.insert(s, len);
        }
        Ok(())
    }

    /// Return pages `[start, start+n)` to the never-allocated state: unmapped,
    /// page-table words zero, backend copies freed.
    pub(crate) fn release_pages(&self, start: usize, n: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        let mut resident_freed = 0;
        let mut on_server = false;
        let mut waits = 0u32;
        for p in start..start + n {
            loop {
                let w = self.load(p);
                // Owned by another thread (a prefetch or an eviction): let it
                // finish; a request in flight we can complete ourselves.
                if w.has(page::IN_FLIGHT) {
                    if !self.unpark(p) {
                        if let Err(e) = self.backend.progress(p as u64) {
                            self.fatal_backend("fetch", p, &e);
                        }
                    }
                    continue;
                }
                if w.state().is_owned() {
                    wait(&mut waits);
                    continue;
                }
                if self.cas(p, w, PageWord(0)) {
                    if w.state().is_resident() {
                        resident_freed += 1;
                    }
                    on_server |= w.has(page::ON_SERVER);
                    break;
                }
            }
        }
        // Drop the freed pages from the replacement queues before their budget
        // is released, so the queues never hold more entries than the budget;
        // a reused page starts with no refault history.
        self.queues
            .lock()
            .retain(|q| !(start..start + n).contains(&(q as usize)));
        for p in start..start + n {
            self.set_aux(p as u32, 0);
        }
        // SAFETY: the range belongs to the allocation being freed; its pages
        // are no longer reachable through the page table.
        let r = unsafe {
            farmem_sys::mem::madvise(
                self.addr_of(start) as *mut u8,
                n * PAGE_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        if let Err(e) = r {
            // Left mapped, the old bytes would be read by whoever reuses the
            // range instead of zeros or their own data.
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: cannot unmap freed far pages at {:#x} (+{} pages): {e}",
                self.addr_of(start),
                n
            );
            farmem_sys::fatal(m.as_bytes());
        }
        self.resident.fetch_sub(resident_freed, Ordering::AcqRel);
        if on_server {
            if let Err(e) = self.backend.free(start as u64, n as u64) {
                // Only capacity on the server is lost; the program's data is fine.
                eprintln!("farmem: warning: could not release far pages on the backend: {e}");
            }
        }
    }

    /// The page range of one live allocation containing `[addr, addr+len)`.
    pub(crate) fn range_of(&self, addr: usize, len: usize) -> Result<(usize, usize), RuntimeError> {
        let bad = RuntimeError::InvalidRange { addr, len };
        if len == 0 || !self.contains(addr) || !self.contains(addr + len - 1) {
            return Err(bad);
        }
        let first = (addr - self.base) / PAGE_SIZE;
        let last = (addr + len - 1 - self.base) / PAGE_SIZE;
        for p in [first, last] {
            if !self.load(p).has(page::ALLOCATED) {
                return Err(bad);
            }
        }
        Ok((first, last))
    }
}
