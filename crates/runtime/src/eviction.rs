//! Eviction: victims chosen by the replacement policy ([`crate::replacement`]),
//! dirty ones written back, all of them unmapped in batches.

use crate::page::{self, next, Event, PageWord, State};
use crate::replacement::{page_u32, Aux as _, Take};
use crate::signals::MsgBuf;
use crate::trace;
use crate::{runs, Runtime, MAXB};
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

impl Runtime {
    /// Evict up to `k` resident, unpinned pages chosen by the replacement
    /// policy. Returns how many.
    pub(crate) fn evict(&self, k: usize) -> usize {
        let mut victims = [0u32; MAXB];
        let mut was = [PageWord(0); MAXB];
        let k = k.min(MAXB);
        let mut taken = 0;
        let (n, stamp) = self.queues.lock().evict(&mut victims[..k], |q| {
            let w = self.load(q as usize);
            if !w.state().is_resident() {
                // Not resident: the queues' invariant says this cannot be.
                return Take::Drop;
            }
            // READ_MOSTLY clean pages and prefetched pages not yet used get
            // one more pass (see `page::next`).
            if self.transition(q as usize, Event::SecondChance).is_ok() {
                return Take::Keep;
            }
            match next(w, Event::EvictStart) {
                Ok(nw) if self.cas(q as usize, w, nw) => {
                    // The policy lists victims in the order they are taken.
                    was[taken] = w;
                    taken += 1;
                    Take::Taken
                }
                // Pinned, being made dirty, or changed just now: keep it.
                _ => Take::Keep,
            }
        });
        for &v in &victims[..n] {
            self.set_aux(v, stamp);
        }
        if n > 0 {
            let mut vs = [0usize; MAXB];
            let mut ws = [PageWord(0); MAXB];
            for i in 0..n {
                vs[i] = victims[i] as usize;
                ws[i] = was[i];
            }
            self.finish_eviction(&vs[..n], &ws[..n]);
        }
        n
    }

    /// Write back the dirty victims, unmap all of them, and mark them Absent.
    /// The victims are Evicting (owned by this thread) and out of the ring.
    pub(crate) fn finish_eviction(&self, victims: &[usize], was: &[PageWord]) {
        let mut wb_pages = [0u64; MAXB];
        let mut wb_data: [&[u8]; MAXB] = [&[]; MAXB];
        let mut m = 0;
        for (i, &q) in victims.iter().enumerate() {
            if page::needs_writeback(was[i].state()) {
                wb_pages[m] = q as u64;
                m += 1;
            }
        }
        // Write-protect the dirty victims first (one ioctl per run of
        // consecutive pages: each ioctl flushes TLBs on every CPU), so that no
        // write can slip in between the copy we send and the unmap; writers
        // now fault and wait for the eviction to finish.
        for r in runs(m, |j| wb_pages[j] == wb_pages[j - 1] + 1) {
            if let Err(e) = self.uffd.write_protect(
                self.addr_of(farmem_sys::usize_from(wb_pages[r.start])),
                r.len() * PAGE_SIZE,
                true,
            ) {
                let mut mb = MsgBuf::new();
                let _ = writeln!(
                    mb,
                    "farmem: cannot write-protect far pages for eviction: {e}"
                );
                farmem_sys::fatal(mb.as_bytes());
            }
        }
        for (k, &q) in wb_pages[..m].iter().enumerate() {
            // SAFETY: the page is mapped (Evicting pages stay mapped until the
            // zap below) and write-protected, so nothing changes it while the
            // slice lives.
            wb_data[k] = unsafe {
                std::slice::from_raw_parts(
                    self.addr_of(farmem_sys::usize_from(q)) as *const u8,
                    PAGE_SIZE,
                )
            };
            self.record_sum(farmem_sys::usize_from(q), wb_data[k]);
        }
        if m > 0 {
            if let Err(e) = self.backend.write(&wb_pages[..m], &wb_data[..m]) {
                self.fatal_backend("write back", farmem_sys::usize_from(wb_pages[0]), &e);
            }
        }
        // Zap consecutive runs with one madvise each.
        let mut sorted = [0usize; MAXB];
        sorted[..victims.len()].copy_from_slice(victims);
        sorted[..victims.len()].sort_unstable();
        for run in runs(victims.len(), |j| sorted[j] == sorted[j - 1] + 1) {
            // SAFETY: these pages are owned by this eviction; readers that touch
            // them now fault and wait for the Absent state.
            let r = unsafe {
                farmem_sys::mem::madvise(
                    self.addr_of(sorted[run.start]) as *mut u8,
                    run.len() * PAGE_SIZE,
                    libc::MADV_DONTNEED,
                )
            };
            if let Err(e) = r {
                let mut mb = MsgBuf::new();
                let _ = writeln!(mb, "farmem: cannot unmap evicted far pages: {e}");
                farmem_sys::fatal(mb.as_bytes());
            }
        }
        let mut wasted = 0;
        for (i, &q) in victims.iter().enumerate() {
            let unused = was[i].has(page::PREFETCHED);
            let wb = page::needs_writeback(was[i].state());
            if self.tracer.is_some() {
                let detail = u8::from(wb) * trace::EVICT_WRITTEN_BACK
                    + u8::from(unused) * trace::EVICT_UNUSED_PREFETCH;
                self.trace(trace::Kind::Evict, q, detail);
            }
            wasted += usize::from(unused);
            self.must(
                q,
                Event::Evicted {
                    written_back: page::needs_writeback(was[i].state()),
                },
            );
        }
        if wasted > 0 {
            self.stats.prefetch_wasted.add(wasted as u64);
            let mut pl = self.planner.lock();
            for (i, &q) in victims.iter().enumerate() {
                if was[i].has(page::PREFETCHED) {
                    pl.on_wasted(q as u64);
                }
            }
        }
        self.resident.fetch_sub(victims.len(), Ordering::AcqRel);
        self.stats.evictions.add(victims.len() as u64);
        self.stats.pages_written_back.add(m as u64);
    }

    /// Evict every resident, unpinned page of `[first, last]` now.
    pub(crate) fn evict_range(&self, first: usize, last: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        // Take every resident page first (they are Evicting, owned by us)...
        let mut victims = Vec::new();
        for p in first..=last {
            let w = self.load(p);
            if w.state().is_resident() {
                if let Ok(nw) = next(w, Event::EvictStart) {
                    if self.cas(p, w, nw) {
                        victims.push((p, w));
                    }
                }
            }
        }
        if victims.is_empty() {
            return;
        }
        // ...drop them from the eviction order in one pass, before any of
        // them can become Absent and be faulted back in (which would push it
        // again and leave two entries for one page)...
        {
            let mut queues = self.queues.lock();
            queues.retain(|q| {
                let q = q as usize;
                !((first..=last).contains(&q) && self.load(q).state() == State::Evicting)
            });
            for &(p, _) in &victims {
                queues.stamp(page_u32(p), self);
            }
        }
        // ...then write back and unmap them in batches.
        for chunk in victims.chunks(MAXB) {
            let mut vs = [0usize; MAXB];
            let mut was = [PageWord(0); MAXB];
            for (i, &(p, w)) in chunk.iter().enumerate() {
                vs[i] = p;
                was[i] = w;
            }
            self.finish_eviction(&vs[..chunk.len()], &was[..chunk.len()]);
        }
    }
}
