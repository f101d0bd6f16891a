//! Eviction: victims chosen by the replacement policy ([`crate::replacement`]),
//! dirty ones written back, all of them unmapped in batches.

use crate::config::{MAX_EVICT_BATCH, MAX_ROUND};
use crate::cost::Phase;
use crate::page::{self, next, Event, PageWord, State};
use crate::recycle::{Recycled, Taken, CHUNK, MIN_MOVE_IN};
use crate::replacement::{page_u32, Aux as _, Take, BLOCK};
use crate::trace;
use crate::{runs, Runtime, MAX_BATCH};
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;

/// Pages per aligned block whose dirty pages leave with a lone dirty victim
/// ([`Runtime::take_neighbours`]): 64 bytes of the page table.
const NEIGHBOURHOOD: usize = 16;
/// Dirty neighbours a lone victim needs for its block to come along: with
/// fewer, the span saves too few write-protect calls for the pages it
/// evicts early.
const MIN_NEIGHBOURS: usize = 2;

impl Runtime {
    /// Evict up to `k` resident, unpinned pages chosen by the replacement
    /// policy. Returns how many.
    pub(crate) fn evict(&self, k: usize) -> usize {
        let timed = self.span();
        // The queues' choice: at most MAX_EVICT_BATCH; `vs` below has room
        // for the blocks that come along.
        let mut victims = [0u32; MAX_EVICT_BATCH];
        let mut was = [PageWord(0); MAX_EVICT_BATCH];
        let asked = k.min(MAX_EVICT_BATCH);
        let k = self.budget.victims_to_choose(asked);
        let mut taken = 0;
        let mut main_victim = [false; MAX_EVICT_BATCH];
        let mut queues = self.budget.queues();
        let (n, stamp) = queues.evict(&mut victims[..k], |q, from_main, kept_near| {
            let w = self.arena.table().load(q as usize);
            if !w.state().is_resident() {
                // The entry of a page evicted out of its turn (STALE),
                // which has not come back since.
                if self.arena.table().clear_stale(q as usize) {
                    self.budget.unstale(1);
                }
                return Take::Drop;
            }
            // READ_MOSTLY clean pages and prefetched pages not yet used get
            // one more pass (see `page::next`).
            if self
                .arena
                .table()
                .transition(q as usize, Event::SecondChance)
                .is_ok()
            {
                return Take::Keep;
            }
            if !from_main && w.state() == State::Dirty && self.keeps_dirty(q as usize, kept_near) {
                return Take::Promote;
            }
            match next(w, Event::EvictStart) {
                Ok(nw) if self.arena.table().cas(q as usize, w, nw) => {
                    // The policy lists victims in the order they are taken.
                    was[taken] = w;
                    main_victim[taken] = from_main;
                    taken += 1;
                    Take::Taken
                }
                // Pinned, being made dirty, or changed just now: keep it.
                _ => Take::Keep,
            }
        });
        // A victim where main keeps most of the surrounding 64 pages is at
        // the edge of a loop's kept set (NPB MG): its neighbours are likely
        // kept pages, and taking them along cost MG 17% more bytes. A
        // scattered writer's main pages are spread thin (GAPBS: about 14 in
        // 64 at a quarter), so its blocks still come along.
        let blocks = self.cfg.evict_block && self.budget.hold().slots() == 0;
        let mut near_kept = [false; MAX_EVICT_BATCH];
        if blocks {
            for i in 0..n {
                near_kept[i] = usize::from(queues.kept_near(victims[i])) > BLOCK / 2;
            }
        }
        drop(queues);
        if n > 0 {
            let mut vs = [0usize; MAX_ROUND];
            let mut ws = [PageWord(0); MAX_ROUND];
            for i in 0..n {
                vs[i] = victims[i] as usize;
                ws[i] = was[i];
            }
            if self.budget.hold().slots() > 0 {
                // Pages leaving main proved themselves once (a refault put
                // them there); the hold is for those the queues have not
                // seen reused: holding main's too made hot pages bounce
                // through it (measured on BFS: docs/benchmarks.md).
                let mut direct = [0usize; MAX_EVICT_BATCH];
                let mut direct_was = [PageWord(0); MAX_EVICT_BATCH];
                let mut held = [0usize; MAX_EVICT_BATCH];
                let mut held_was = [PageWord(0); MAX_EVICT_BATCH];
                let (mut d, mut h) = (0, 0);
                for i in 0..n {
                    if main_victim[i] {
                        self.arena.table().set_aux(victims[i], stamp);
                        direct[d] = vs[i];
                        direct_was[d] = ws[i];
                        d += 1;
                    } else {
                        held[h] = vs[i];
                        held_was[h] = ws[i];
                        h += 1;
                    }
                }
                if d > 0 {
                    self.finish_eviction(&direct[..d], &direct_was[..d]);
                }
                if h > 0 {
                    self.to_hold(&held[..h], &held_was[..h], stamp);
                }
            } else {
                for &v in &victims[..n] {
                    self.arena.table().set_aux(v, stamp);
                }
                let mut reserved = [0usize; MAX_ROUND];
                let (total, r) = if blocks {
                    self.take_neighbours(
                        &mut vs,
                        &mut ws,
                        &near_kept,
                        (n, asked),
                        stamp,
                        &mut reserved,
                    )
                } else {
                    (n, 0)
                };
                self.budget.chose(n, total - n);
                if total > n {
                    self.observe
                        .stats()
                        .evicted_with_block
                        .add((total - n) as u64);
                }
                self.evict_spanning(&vs[..total], &ws[..total], &reserved[..r]);
                self.charge(timed, Phase::EvictChoose);
                return total;
            }
        }
        self.charge(timed, Phase::EvictChoose);
        n
    }

    /// Whether page `p`'s left and right neighbours are resident and dirty.
    /// Their words are read without owning them, so the answer may be out of
    /// date as soon as it is given: it may steer a choice or a count, never
    /// what is written.
    fn dirty_neighbours(&self, p: usize) -> (bool, bool) {
        let dirty = |q: usize| self.arena.table().load(q).state() == State::Dirty;
        (
            p > 0 && dirty(p - 1),
            p + 1 < self.arena.npages() && dirty(p + 1),
        )
    }

    /// Whether dirty probation page `p`, whose block keeps `kept_near` main
    /// pages, stays resident in main instead of leaving
    /// ([`crate::replacement::keeps_dirty`]). Its neighbours' words are read
    /// without owning them: a neighbour that changes state just after costs
    /// at worst one page kept or evicted against the rule, never a write.
    fn keeps_dirty(&self, p: usize, kept_near: u16) -> bool {
        if kept_near <= crate::replacement::DIRTY_KEPT {
            return false;
        }
        let (left, right) = self.dirty_neighbours(p);
        crate::replacement::keeps_dirty(kept_near, left, right)
    }

    /// Beside each lone dirty victim (the only victim of its block of
    /// [`NEIGHBOURHOOD`] pages, and not `near_kept`), take the block's other
    /// dirty, unpinned pages that are not prefetched-and-unused as victims
    /// too, and reserve its absent ones, so that one
    /// write-protect call (one TLB shootdown) covers what would have cost one
    /// each. `vs[..n]`, `ws[..n]` are the victims chosen by the queues; the
    /// neighbours are appended (marked STALE: their queue entries stay) and
    /// the reserved pages written to `reserved`. Returns the victims' count
    /// and the reserved pages' count.
    ///
    /// Scattered writers (GAPBS's graph build at a quarter of its footprint)
    /// leave their victims one to a run, and the write-protect was 37% of
    /// farmem's time there; a lone dirty victim's block held 7.6 other dirty
    /// resident pages on average (BFS `-g 19` at a quarter,
    /// docs/benchmarks.md). Without hit information the neighbours are as
    /// likely to be used again as the victim. A stream's victims mostly come
    /// in runs; where one is lone at the edge of a loop's kept set, its
    /// block is left alone (`near_kept`), and a stream's prefetched pages,
    /// not yet reached, are never taken.
    fn take_neighbours(
        &self,
        vs: &mut [usize; MAX_ROUND],
        ws: &mut [PageWord; MAX_ROUND],
        near_kept: &[bool],
        (n, asked): (usize, usize),
        stamp: u32,
        reserved: &mut [usize; MAX_ROUND],
    ) -> (usize, usize) {
        let table = self.arena.table();
        let (mut total, mut r) = (n, 0);
        // No more dirty pages than a batch of `asked` victims like these
        // would hold: the neighbours are all dirty, and a fault that evicts
        // a dirtier batch waits longer for it (faultlat's two threads at 4×
        // with half the pages dirty: p99 173–240 µs against 101–142 µs
        // without the blocks). Where every victim is dirty (a scattered
        // writer) the batch is all dirty either way, and only room limits
        // it; the first such batches teach `victims_to_choose` to ask for
        // fewer, which leaves room for blocks in mixed batches too.
        let mut dirty_now = ws[..n].iter().filter(|w| w.state() == State::Dirty).count();
        let dirty_cap = if dirty_now == n {
            MAX_ROUND
        } else {
            (asked * dirty_now).div_ceil(n.max(1))
        };
        let npages = self.arena.npages();
        let takeable = |w: PageWord| {
            w.state() == State::Dirty && w.pins() == 0 && !w.has(page::STALE | page::PREFETCHED)
        };
        for i in 0..n {
            if ws[i].state() != State::Dirty || near_kept[i] {
                continue;
            }
            let first = vs[i] - vs[i] % NEIGHBOURHOOD;
            let block = first..(first + NEIGHBOURHOOD).min(npages);
            let lone = vs[..n]
                .iter()
                .enumerate()
                .all(|(j, u)| j == i || !block.contains(u));
            if !lone {
                continue;
            }
            // The block's words share a cache line or two: counting first is cheap.
            let dirty = block
                .clone()
                .filter(|&q| q != vs[i] && takeable(table.load(q)))
                .count();
            if dirty < MIN_NEIGHBOURS {
                continue;
            }
            if total + dirty > MAX_ROUND
                || r + NEIGHBOURHOOD > MAX_ROUND
                || dirty_now + dirty > dirty_cap
            {
                break;
            }
            dirty_now += dirty;
            for q in block {
                if q == vs[i] || total == MAX_ROUND {
                    continue;
                }
                let w = table.load(q);
                if takeable(w) {
                    if !self.budget.try_stale() {
                        continue;
                    }
                    match next(w, Event::EvictNeighbour) {
                        Ok(nw) if table.cas(q, w, nw) => {
                            vs[total] = q;
                            ws[total] = w;
                            total += 1;
                            table.set_aux(page_u32(q), stamp);
                        }
                        _ => self.budget.unstale(1),
                    }
                } else if w.state() == State::Absent {
                    if let Ok(nw) = next(w, Event::Reserve) {
                        if table.cas(q, w, nw) {
                            reserved[r] = q;
                            r += 1;
                        }
                    }
                }
            }
        }
        (total, r)
    }

    /// Move victims (Evicting, owned, out of the queues) into the hold: copy
    /// each into a slot and unmap it, leaving it Absent and HELD. Slots are
    /// made free first by evicting the pages longest held for good; victims
    /// that still find none are evicted for good at once.
    fn to_hold(&self, victims: &[usize], was: &[PageWord], stamp: u32) {
        let timed = self.span();
        self.move_to_hold(victims, was, stamp);
        self.charge(timed, Phase::EvictHold);
    }

    /// [`Runtime::to_hold`]'s work, untimed.
    fn move_to_hold(&self, victims: &[usize], was: &[PageWord], stamp: u32) {
        let mut short = victims
            .len()
            .saturating_sub(self.budget.hold().free_slots());
        // A round may hold more victims than one recycling takes.
        while short > 0 {
            let freed = self.recycle_hold(short);
            if freed == 0 {
                break;
            }
            short = short.saturating_sub(freed);
        }
        // A round that goes to the hold takes no blocks: MAX_EVICT_BATCH
        // victims at most.
        let mut slot = [u32::MAX; MAX_EVICT_BATCH];
        let mut gone = [0usize; MAX_EVICT_BATCH];
        let mut gone_was = [PageWord(0); MAX_EVICT_BATCH];
        let mut g = 0;
        for (i, &q) in victims.iter().enumerate() {
            match self.budget.hold().take(page_u32(q), stamp) {
                Some(s) => slot[i] = s,
                None => {
                    self.arena.table().set_aux(page_u32(q), stamp);
                    gone[g] = q;
                    gone_was[g] = was[i];
                    g += 1;
                }
            }
        }
        if g > 0 {
            self.finish_eviction(&gone[..g], &gone_was[..g]);
        }
        let mut held = [0usize; MAX_EVICT_BATCH];
        let mut held_was = [PageWord(0); MAX_EVICT_BATCH];
        let mut held_slot = [0u32; MAX_EVICT_BATCH];
        let mut h = 0;
        for (i, &q) in victims.iter().enumerate() {
            if slot[i] != u32::MAX {
                held[h] = q;
                held_was[h] = was[i];
                held_slot[h] = slot[i];
                h += 1;
            }
        }
        if h == 0 {
            return;
        }
        // Dirty pages stop changing before they are copied (writers fault
        // and wait; see `finish_eviction`).
        let mut dirty = [0usize; MAX_EVICT_BATCH];
        let m = dirty_in_order(&held[..h], &held_was[..h], &mut dirty);
        self.protect_dirty(&dirty[..m]);
        for i in 0..h {
            // SAFETY: the page is mapped (Evicting pages stay mapped until
            // the zap below) and either clean or write-protected, so nothing
            // changes it during the copy; the slot was just taken for it and
            // nothing else touches it until it is given back.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.addr_of(held[i]) as *const u8,
                    self.budget.hold().buf(held_slot[i]),
                    PAGE_SIZE,
                );
            }
        }
        self.zap(&held[..h]);
        for i in 0..h {
            // While HELD, the aux word holds the slot (the eviction stamp is
            // given when the page leaves the hold for good).
            self.arena.table().set_aux(page_u32(held[i]), held_slot[i]);
            self.arena.table().must(
                held[i],
                Event::Held {
                    dirty: page::needs_writeback(held_was[i].state()),
                },
            );
        }
        self.budget.release(h);
        self.observe.stats().held.add(h as u64);
    }

    /// Evict up to `k` pages from the hold for good (in clock order; at most
    /// [`MAX_BATCH`] a call), writing back those whose held content is newer
    /// than the backend's. Returns how many left.
    ///
    /// Hazard: the slot's owner is read under the hold's lock, the page word
    /// after it. Example interleaving: this thread reads slot 5 → page P;
    /// thread B faults on P, reinstalls it and gives slot 5 back; thread C
    /// holds page Q in slot 5. P's word is now resident (or HELD in another
    /// slot), so the check below (Absent, HELD, aux == 5) fails and P is
    /// passed over; Q keeps its place. Only the compare-and-swap into
    /// Evicting makes the page and its slot ours: B's claim and ours cannot
    /// both succeed.
    pub(crate) fn recycle_hold(&self, k: usize) -> usize {
        let k = k.min(MAX_BATCH);
        let mut pages = [0u64; MAX_BATCH];
        let mut slots = [0u32; MAX_BATCH];
        let mut was = [PageWord(0); MAX_BATCH];
        let mut n = 0;
        // Each slot is looked at once at most: pages being reinstalled or
        // pinned are passed over.
        for _ in 0..self.budget.hold().slots() {
            if n == k {
                break;
            }
            let Some((s, p)) = self.budget.hold().next_out() else {
                break;
            };
            let q = farmem_sys::usize_from(u64::from(p));
            let w = self.arena.table().load(q);
            let ours =
                w.state() == State::Absent && w.has(page::HELD) && self.arena.table().aux(p) == s;
            if ours && next(w, Event::EvictStart).is_ok_and(|nw| self.arena.table().cas(q, w, nw)) {
                pages[n] = u64::from(p);
                slots[n] = s;
                was[n] = w;
                n += 1;
            }
        }
        if n == 0 {
            return 0;
        }
        let timed = self.span();
        let mut wb_pages = [0u64; MAX_BATCH];
        let mut wb_data: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        let mut m = 0;
        for i in 0..n {
            if was[i].has(page::HELD_DIRTY) {
                // SAFETY: the slot holds this page's content and is ours
                // (the page is Evicting, owned) until given back below.
                let data = unsafe {
                    std::slice::from_raw_parts(self.budget.hold().buf(slots[i]), PAGE_SIZE)
                };
                self.arena
                    .sums()
                    .record(farmem_sys::usize_from(pages[i]), data);
                wb_pages[m] = pages[i];
                wb_data[m] = data;
                m += 1;
            }
        }
        if m > 0 {
            if let Err(e) = self.backend.write(&wb_pages[..m], &wb_data[..m]) {
                self.fatal_backend("write back", farmem_sys::usize_from(wb_pages[0]), &e);
            }
        }
        self.charge(timed, Phase::EvictWriteBack);
        {
            let queues = self.budget.queues();
            for &q in &pages[..n] {
                queues.stamp(page_u32(farmem_sys::usize_from(q)), self.arena.table());
            }
        }
        let mut qs = [0usize; MAX_BATCH];
        for (q, &p) in qs.iter_mut().zip(&pages[..n]) {
            *q = farmem_sys::usize_from(p);
        }
        self.retire(&qs[..n], &was[..n], |w| w.has(page::HELD_DIRTY));
        for &s in &slots[..n] {
            self.budget.hold().give_back(s);
        }
        self.observe.stats().pages_written_back.add(m as u64);
        n
    }

    /// Mark evicted pages (owned, unmapped or out of the hold) Absent, each
    /// written back or not by its old word, trace them, and count the
    /// prefetched ones never seen used as wasted.
    fn retire(&self, victims: &[usize], was: &[PageWord], written_back: impl Fn(PageWord) -> bool) {
        let mut wasted = 0;
        for (i, &q) in victims.iter().enumerate() {
            let unused = was[i].has(page::PREFETCHED);
            let wb = written_back(was[i]);
            if self.observe.tracer().is_some() {
                let detail = u8::from(wb) * trace::EVICT_WRITTEN_BACK
                    + u8::from(unused) * trace::EVICT_UNUSED_PREFETCH;
                self.trace(trace::Kind::Evict, q, detail);
            }
            wasted += usize::from(unused);
            self.arena
                .table()
                .must(q, Event::Evicted { written_back: wb });
        }
        if wasted > 0 {
            self.observe.stats().prefetch_wasted.add(wasted as u64);
            let mut pl = self.streams.planner();
            for (i, &q) in victims.iter().enumerate() {
                if was[i].has(page::PREFETCHED) {
                    pl.on_wasted(q as u64);
                }
            }
        }
        self.observe.stats().evictions.add(victims.len() as u64);
    }

    /// Write-protect `dirty` (victims in address order, from
    /// [`dirty_in_order`]; one ioctl per run of consecutive pages: each
    /// flushes TLBs on every CPU), so that no write slips in between the
    /// copy taken of them and the unmap; writers fault and wait for the
    /// eviction to finish.
    fn protect_dirty(&self, dirty: &[usize]) {
        let timed = self.span();
        for r in runs(dirty.len(), |j| dirty[j] == dirty[j - 1] + 1) {
            self.protect_run(dirty[r.start], r.len());
        }
        self.charge(timed, Phase::EvictProtect);
    }

    /// Write-protect `n` pages from `first` (one ioctl, one TLB shootdown);
    /// a failure stops the program, as a write could otherwise be lost.
    fn protect_run(&self, first: usize, n: usize) {
        let stats = self.observe.stats();
        stats.protect_calls.add(1);
        if n == 1 {
            stats.protect_lone.add(1);
            if self.dirty_neighbours(first) == (true, true) {
                stats.protect_hole.add(1);
            }
        }
        if let Err(e) = self
            .arena
            .uffd()
            .write_protect(self.addr_of(first), n * PAGE_SIZE, true)
        {
            let mut mb = MsgBuf::new();
            let _ = writeln!(
                mb,
                "farmem: cannot write-protect far pages for eviction: {e}"
            );
            farmem_sys::fatal(mb.as_bytes());
        }
    }

    /// Write-protect the dirty ones of `victims` (by `was`), one call per
    /// span of pages this thread owns (victims, clean ones too, and the
    /// `reserved` absent pages) from a dirty page to the last dirty page
    /// before a page it does not own. Protecting an absent or clean page
    /// changes nothing: the span costs one TLB shootdown.
    fn protect_spans(&self, victims: &[usize], was: &[PageWord], reserved: &[usize]) {
        let timed = self.span();
        // (page, dirty), in address order.
        let mut owned = [(0usize, false); 2 * MAX_ROUND];
        let mut o = 0;
        for (&q, w) in victims.iter().zip(was) {
            owned[o] = (q, page::needs_writeback(w.state()));
            o += 1;
        }
        for &q in reserved {
            owned[o] = (q, false);
            o += 1;
        }
        let owned = &mut owned[..o];
        owned.sort_unstable();
        for run in runs(o, |j| owned[j].0 == owned[j - 1].0 + 1) {
            let span = &owned[run];
            let (Some(a), Some(b)) = (
                span.iter().position(|e| e.1),
                span.iter().rposition(|e| e.1),
            ) else {
                continue;
            };
            self.protect_run(span[a].0, b - a + 1);
        }
        self.charge(timed, Phase::EvictProtect);
    }

    /// Unmap `victims` (owned by this eviction): all their runs in one
    /// call, so that the batch costs one TLB shootdown, not one per run
    /// (victims of random access are scattered: a run is a page).
    fn zap(&self, victims: &[usize]) {
        let timed = self.span();
        let mut sorted = [0usize; MAX_ROUND];
        sorted[..victims.len()].copy_from_slice(victims);
        sorted[..victims.len()].sort_unstable();
        let mut ranges = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_ROUND];
        let mut n = 0;
        for run in runs(victims.len(), |j| sorted[j] == sorted[j - 1] + 1) {
            ranges[n] = libc::iovec {
                iov_base: self.addr_of(sorted[run.start]) as *mut libc::c_void,
                iov_len: run.len() * PAGE_SIZE,
            };
            n += 1;
        }
        // SAFETY: these pages are owned by this eviction; readers that touch
        // them now fault and wait for the Absent state.
        match unsafe { farmem_sys::mem::discard(&ranges[..n]) } {
            Ok(calls) => self.observe.stats().unmap_calls.add(calls as u64),
            Err(e) => {
                let mut mb = MsgBuf::new();
                let _ = writeln!(mb, "farmem: cannot unmap evicted far pages: {e}");
                farmem_sys::fatal(mb.as_bytes());
            }
        }
        self.charge(timed, Phase::EvictUnmap);
    }

    /// Write back the dirty victims, unmap all of them, and mark them Absent.
    /// The victims are Evicting (owned by this thread) and out of the ring.
    pub(crate) fn finish_eviction(&self, victims: &[usize], was: &[PageWord]) {
        self.evict_spanning(victims, was, &[]);
    }

    /// [`Runtime::finish_eviction`], where the write-protect runs may also
    /// span `reserved` pages (absent, held in Evicting by this thread; see
    /// [`Runtime::take_neighbours`]), which are let go once it is done.
    ///
    /// Hazard: a span may only cover pages this thread owns. Example
    /// interleaving were an absent page in a span not reserved: this thread
    /// reads page Q Absent and protects [P, R] around it; meanwhile thread B
    /// claims Q, installs it writable (Dirty) and returns to the program,
    /// or pins it for a `read` into it; the protect reaches Q's new entry
    /// after B's install. Q is now Dirty and write-protected: the program's
    /// next write faults on a Dirty page, which the fault path takes as
    /// resolved and retries forever, and the kernel's write for the `read`
    /// fails with EFAULT. Reserved, Q makes B wait until the protect is done.
    fn evict_spanning(&self, victims: &[usize], was: &[PageWord], reserved: &[usize]) {
        let retire = self.span();
        // Victims moved into the bin (address, and where they went), and the
        // rest, which are write-protected, copied and unmapped in place.
        let mut out = Recycled::default();
        let mut chunk = None;
        if reserved.is_empty() {
            chunk = self.move_out(victims, was, &mut out);
        }
        let mut rest = [0usize; MAX_ROUND];
        let mut rest_was = [PageWord(0); MAX_ROUND];
        let mut r = 0;
        for (&q, &w) in victims.iter().zip(was) {
            if !out.contains(q) {
                rest[r] = q;
                rest_was[r] = w;
                r += 1;
            }
        }
        let mut dirty = [0usize; MAX_ROUND];
        let m = dirty_in_order(&rest[..r], &rest_was[..r], &mut dirty);
        if reserved.is_empty() {
            self.protect_dirty(&dirty[..m]);
        } else {
            self.protect_spans(victims, was, reserved);
            for &q in reserved {
                self.arena.table().must(q, Event::Unreserve);
            }
        }
        let timed = self.span();
        // Written back in address order, moved or not: runs make fewer writes.
        let k = if out.is_empty() {
            m
        } else {
            dirty_in_order(victims, was, &mut dirty)
        };
        let mut wb_pages = [0u64; MAX_ROUND];
        let mut wb_data: [&[u8]; MAX_ROUND] = [&[]; MAX_ROUND];
        for (i, &q) in dirty[..k].iter().enumerate() {
            let at = out.find(q).unwrap_or_else(|| self.addr_of(q));
            wb_pages[i] = q as u64;
            // SAFETY: the page is mapped and nothing writes it while the
            // slice lives: in the bin, in a chunk this thread holds (`chunk`,
            // dropped below); in the arena, Evicting (mapped until the zap
            // below) and write-protected.
            wb_data[i] = unsafe { std::slice::from_raw_parts(at as *const u8, PAGE_SIZE) };
            self.arena.sums().record(q, wb_data[i]);
        }
        // A round may hold more than a backend call takes.
        for (pages, data) in wb_pages[..k]
            .chunks(MAX_BATCH)
            .zip(wb_data[..k].chunks(MAX_BATCH))
        {
            if let Err(e) = self.backend.write(pages, data) {
                self.fatal_backend("write back", farmem_sys::usize_from(pages[0]), &e);
            }
        }
        drop(chunk);
        self.charge(timed, Phase::EvictWriteBack);
        if r > 0 {
            self.zap(&rest[..r]);
        }
        self.retire(victims, was, |w| page::needs_writeback(w.state()));
        self.budget.release(victims.len());
        self.observe.stats().pages_written_back.add(k as u64);
        self.charge(retire, Phase::EvictRetire);
    }

    /// Move victims out of the arena into a chunk of the bin (see
    /// [`crate::recycle`]), run by run, where that costs no more calls (each
    /// a TLB flush) than write-protect and unmap would: all of them when
    /// they fit a chunk and their runs are no more than the dirty ones'
    /// plus the one unmap call,
    /// else the dirty ones, whose move replaces their write-protect. Records
    /// what moved in `out`; returns the chunk, held until their write-back
    /// is done. A move that fails, and runs that do not fit the chunk, are
    /// left to the caller.
    ///
    /// Hazard: the chunk must stay taken until the write-back has read the
    /// moved pages. Example interleaving were it given back at once: this
    /// thread moves dirty page P into chunk slot 5 and releases the chunk;
    /// thread B takes it for a writable install, copies its window's data
    /// into slot 5 and moves it into the arena; this thread then writes
    /// slot 5 back as P: the backend holds B's data for P, and P's writes
    /// are lost. A writer of P during the move is safe either way: its store
    /// lands before the move (and travels with the page) or faults on the
    /// emptied entry, finds P Evicting and waits until it is Absent.
    fn move_out(
        &self,
        victims: &[usize],
        was: &[PageWord],
        out: &mut Recycled,
    ) -> Option<Taken<'_>> {
        let bin = self.bin.as_ref()?;
        let n = victims.len();
        let mut all = [0usize; MAX_ROUND];
        all[..n].copy_from_slice(victims);
        all[..n].sort_unstable();
        let all_runs = runs(n, |j| all[j] == all[j - 1] + 1).count();
        let mut dirty = [0usize; MAX_ROUND];
        let m = dirty_in_order(victims, was, &mut dirty);
        let dirty_runs = runs(m, |j| dirty[j] == dirty[j - 1] + 1).count();
        let pick: &[usize] = if all_runs <= dirty_runs + usize::from(m < n) && n <= CHUNK {
            &all[..n]
        } else {
            &dirty[..m]
        };
        if pick.is_empty() {
            return None;
        }
        // A round's pages may outnumber a chunk's room: a run that does not
        // fit moves as far as the chunk goes, if that is `MIN_MOVE_IN` pages
        // or more (its rest is write-protected: a call more, but the pages
        // moved are recycled and not unmapped); shorter runs that do not fit
        // are write-protected whole. Rounds of 128 into chunks of 128 (NPB MG
        // class B at half): 8–10% fewer shootdowns than moving only runs that
        // fit whole.
        let mut chunk = bin.with_room(pick.len().min(CHUNK))?;
        let timed = self.span();
        let stats = self.observe.stats();
        for run in runs(pick.len(), |j| pick[j] == pick[j - 1] + 1) {
            let at = chunk.full();
            let fits = run.len().min(CHUNK - at);
            if fits < run.len().min(MIN_MOVE_IN) {
                continue;
            }
            let run = run.start..run.start + fits;
            // SAFETY: the run's pages are victims this thread owns
            // (Evicting), mapped and in the arena; the chunk's pages from
            // `at` are empty and ours; no reference points into either.
            let res = unsafe {
                self.arena.uffd().move_pages(
                    chunk.page(at),
                    self.addr_of(pick[run.start]),
                    run.len() * PAGE_SIZE,
                )
            };
            let moved = self.moved(bin, res);
            if moved > 0 {
                stats.move_out_calls.add(1);
                stats.recycled_out.add(moved as u64);
            }
            for j in 0..moved {
                out.push(pick[run.start + j], chunk.page(at + j));
            }
            chunk.filled(moved);
            if moved < run.len() {
                break;
            }
        }
        self.charge(timed, Phase::EvictProtect);
        Some(chunk)
    }

    /// Evict every resident, unpinned page of `[first, last]` now.
    pub(crate) fn evict_range(&self, first: usize, last: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        // Take every resident page first (they are Evicting, owned by us)...
        let mut victims = Vec::new();
        for p in first..=last {
            let w = self.arena.table().load(p);
            if w.state().is_resident() {
                if let Ok(nw) = next(w, Event::EvictStart) {
                    if self.arena.table().cas(p, w, nw) {
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
            let mut queues = self.budget.queues();
            queues.retain(|q| {
                let q = q as usize;
                let gone = (first..=last).contains(&q)
                    && !self.arena.table().load(q).state().is_resident();
                // Ours (Evicting), or left by a page evicted out of its turn.
                if gone && self.arena.table().clear_stale(q) {
                    self.budget.unstale(1);
                }
                !gone
            });
            for &(p, _) in &victims {
                queues.stamp(page_u32(p), self.arena.table());
            }
        }
        // ...then write back and unmap them in batches.
        for chunk in victims.chunks(MAX_EVICT_BATCH) {
            let mut vs = [0usize; MAX_ROUND];
            let mut was = [PageWord(0); MAX_ROUND];
            for (i, &(p, w)) in chunk.iter().enumerate() {
                vs[i] = p;
                was[i] = w;
            }
            self.finish_eviction(&vs[..chunk.len()], &was[..chunk.len()]);
        }
    }
}

/// The dirty ones of `victims` (by their words before eviction, `was`) into
/// `out`, in address order; how many. Victims come in the queues' order,
/// where the windows of several streams (two threads, several arrays)
/// interleave: in address order they form fewer runs, so fewer
/// write-protect calls and writes (NPB MG class B at half, two threads: 18%
/// fewer; docs/benchmarks.md).
fn dirty_in_order(victims: &[usize], was: &[PageWord], out: &mut [usize]) -> usize {
    let mut m = 0;
    for (&q, w) in victims.iter().zip(was) {
        if page::needs_writeback(w.state()) {
            out[m] = q;
            m += 1;
        }
    }
    out[..m].sort_unstable();
    m
}
