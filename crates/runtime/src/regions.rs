//! The region allocator: page ranges of the arena handed out by `alloc`,
//! first fit over a free list, the top given back on free.

use crate::fork::is_forked_child;
use crate::page::{self, PageWord};
use crate::replacement::{page_u32, Aux as _};
use crate::sync::Backoff;
use crate::trace;
use crate::{config, Runtime, RuntimeError};
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// The arena's page ranges: live allocations, free ranges below `top`, and
/// never-used space from `top` up. Pure bookkeeping (no page is touched), so
/// it is property-tested and fuzzed against a model (`fuzz/`).
///
/// Invariants: live and free ranges are disjoint and lie below `top`;
/// together they cover `[0, top)`; no two free ranges touch (they are
/// merged), and none ends at `top` (it is given back).
#[derive(Default, Debug)]
pub struct Regions {
    /// Free page ranges below `top`: start -> length.
    free: BTreeMap<usize, usize>,
    /// Live allocations: start page -> pages.
    live: HashMap<usize, usize>,
    top: usize,
}

impl Regions {
    /// First fit: the lowest free range of at least `pages`, split, else
    /// fresh space at the top if `top + pages <= limit`. None: no room.
    pub fn take(&mut self, pages: usize, limit: usize) -> Option<usize> {
        debug_assert!(pages > 0);
        let fit = self
            .free
            .iter()
            .find(|(_, &len)| len >= pages)
            .map(|(&s, &l)| (s, l));
        let start = match fit {
            Some((s, l)) => {
                self.free.remove(&s);
                if l > pages {
                    self.free.insert(s + pages, l - pages);
                }
                s
            }
            None => {
                if self.top.checked_add(pages).is_none_or(|end| end > limit) {
                    return None;
                }
                self.top += pages;
                self.top - pages
            }
        };
        self.live.insert(start, pages);
        Some(start)
    }

    /// The pages of the live allocation starting at `start`.
    pub fn pages_of(&self, start: usize) -> Option<usize> {
        self.live.get(&start).copied()
    }

    /// The live allocation holding page `p`, as (start, pages). A scan: it
    /// serves a program's own `mmap(MAP_FIXED)` and `mprotect` calls, which
    /// are few.
    pub fn containing(&self, p: usize) -> Option<(usize, usize)> {
        self.live
            .iter()
            .map(|(&s, &n)| (s, n))
            .find(|&(s, n)| s <= p && p < s + n)
    }

    /// End the live allocation at `start`, merging it with free neighbours
    /// and giving the top back. Returns its pages; None if nothing is live
    /// there (a double free loses the race here, not the free list).
    pub fn give(&mut self, start: usize) -> Option<usize> {
        let pages = self.live.remove(&start)?;
        let mut s = start;
        let mut len = pages;
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                len += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(s + len)) {
            len += nl;
        }
        if s + len == self.top {
            self.top = s;
        } else {
            self.free.insert(s, len);
        }
        Some(pages)
    }

    /// Pages not allocated, out of `limit`.
    pub fn free_pages(&self, limit: usize) -> usize {
        self.free.values().sum::<usize>() + (limit - self.top)
    }

    /// The live allocations, (start, pages), in no order.
    pub fn live(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.live.iter().map(|(&s, &p)| (s, p))
    }

    /// The free ranges below the top, (start, pages), in order.
    pub fn free_ranges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.free.iter().map(|(&s, &p)| (s, p))
    }

    pub fn top(&self) -> usize {
        self.top
    }
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
            match r.take(pages, self.arena.npages()) {
                Some(s) => s,
                None => {
                    let free = r.free_pages(self.arena.npages());
                    return Err(RuntimeError::OutOfSpace {
                        want: config::format_size(size as u64),
                        free: config::format_size((free * PAGE_SIZE) as u64),
                        arena: config::format_size(self.cfg.arena_bytes),
                    });
                }
            }
        };
        // Off the fault path: whatever the backend needs to hold these
        // pages later (UCX chunks and their keys) is set up now.
        if let Err(e) = self.backend.prepare(start as u64, pages as u64) {
            let mut r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            r.give(start);
            return Err(e.into());
        }
        for p in start..start + pages {
            self.arena
                .table()
                .word(p)
                .fetch_or(page::ALLOCATED, Ordering::AcqRel);
        }
        Ok(self.addr_of(start) as *mut u8)
    }

    /// Size in bytes (whole pages) of the live allocation starting at `ptr`.
    pub fn alloc_size(&self, ptr: *const u8) -> Option<usize> {
        let addr = ptr as usize;
        if !self.contains(addr) {
            return None;
        }
        let start = (addr - self.arena.base()) / PAGE_SIZE;
        let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        r.live.get(&start).map(|&pages| pages * PAGE_SIZE)
    }

    /// Discard the whole pages of `[addr, addr+len)`, which must lie in one
    /// allocation (a partial `munmap` in the `farmem run` shim): their content
    /// is dropped and any later access stops the program, as for unmapped
    /// memory. The allocation's address range is reclaimed when it is freed.
    pub fn discard(&self, addr: usize, len: usize) -> Result<(), RuntimeError> {
        let (first, last) = self.pages_within(addr, len)?;
        let lo = (addr - self.arena.base()).div_ceil(PAGE_SIZE).max(first);
        let hi = ((addr + len - self.arena.base()) / PAGE_SIZE).min(last + 1);
        if lo < hi && !is_forked_child() {
            self.release_pages(lo, hi - lo);
            // What the program mapped there itself goes, as `munmap` would
            // have it; the address range stays the arena's.
            self.restore(lo, hi - lo)?;
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
            // Pages under the program's PROT_NONE stay hidden (see
            // `remap`): a chunk at a time, noted before it is released.
            const CHUNK: usize = 4096;
            let mut chunk = first;
            while chunk <= last {
                let end = (chunk + CHUNK - 1).min(last);
                let mut hidden = [0u64; CHUNK / 64];
                for p in chunk..=end {
                    if self.arena.table().load(p).has(page::HIDDEN) {
                        hidden[(p - chunk) / 64] |= 1 << ((p - chunk) % 64);
                    }
                }
                self.release_pages(chunk, end - chunk + 1);
                for p in chunk..=end {
                    let h = hidden[(p - chunk) / 64] & (1 << ((p - chunk) % 64)) != 0;
                    let bits = page::ALLOCATED | if h { page::HIDDEN } else { 0 };
                    self.arena.table().word(p).fetch_or(bits, Ordering::AcqRel);
                }
                chunk = end + 1;
            }
        }
        Ok(())
    }

    /// Free an allocation made by `alloc`.
    pub fn free(&self, ptr: *mut u8) -> Result<(), RuntimeError> {
        let addr = ptr as usize;
        if !self.contains(addr) || !(addr - self.arena.base()).is_multiple_of(PAGE_SIZE) {
            return Err(RuntimeError::InvalidPointer(addr));
        }
        let start = (addr - self.arena.base()) / PAGE_SIZE;
        let pages = {
            let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            r.pages_of(start)
                .ok_or(RuntimeError::InvalidPointer(addr))?
        };
        if !is_forked_child() {
            self.release_pages(start, pages);
            self.restore(start, pages)?;
        }
        // Two frees of one pointer at once both get here; the second finds
        // nothing live and is refused.
        let mut r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        r.give(start).ok_or(RuntimeError::InvalidPointer(addr))?;
        Ok(())
    }

    /// Page `p`'s word once no other thread owns it: a request in flight is
    /// completed here, an eviction or fetch by another thread waited out.
    /// The caller blocks signals (an in-flight reply may be ours to drain).
    pub(crate) fn settle(&self, p: usize) -> PageWord {
        let backoff = Backoff::new();
        loop {
            let w = self.arena.table().load(p);
            if w.has(page::IN_FLIGHT) {
                if !self.unpark(p) {
                    if let Err(e) = self.backend.progress(p as u64) {
                        self.fatal_backend("fetch", p, &e);
                    }
                }
                continue;
            }
            if w.state().is_owned() {
                backoff.snooze();
                continue;
            }
            return w;
        }
    }

    /// Return pages `[start, start+n)` to the never-allocated state: unmapped,
    /// page-table words zero, backend copies freed.
    pub(crate) fn release_pages(&self, start: usize, n: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        let mut resident_freed = 0;
        let mut stale = 0;
        let mut on_server = false;
        for p in start..start + n {
            loop {
                let w = self.settle(p);
                if self.arena.table().cas(p, w, PageWord(0)) {
                    // Its entry goes with the retain below; counted out only
                    // then, so the rings never hold more than the count allows.
                    stale += usize::from(w.has(page::STALE));
                    if w.state().is_resident() {
                        resident_freed += 1;
                    }
                    if w.has(page::HELD) {
                        // Its slot (in the aux word while HELD) is free again;
                        // the aux word is cleared below.
                        self.budget
                            .hold()
                            .give_back(self.arena.table().aux(page_u32(p)));
                    }
                    on_server |= w.has(page::ON_SERVER);
                    break;
                }
            }
        }
        // Drop the freed pages from the replacement queues before their budget
        // is released, so the queues never hold more entries than the budget;
        // a reused page starts with no refault history.
        self.budget
            .queues()
            .retain(|q| !(start..start + n).contains(&(q as usize)));
        self.budget.unstale(stale);
        for p in start..start + n {
            self.arena.table().set_aux(page_u32(p), 0);
        }
        // The policy trace learns that these pages died (the replay must not
        // keep them, and MIN must count a later use as a new page).
        if let Some(t) = self.observe.tracer() {
            for first in (start..start + n).step_by(trace::RELEASE_MAX) {
                let k = (start + n - first).min(trace::RELEASE_MAX);
                // In range: 1 <= k <= RELEASE_MAX = 256.
                #[allow(clippy::cast_possible_truncation)]
                t.record(trace::Kind::Released, first, (k - 1) as u8);
            }
        }
        // A write stream over freed pages would bring the next allocation's
        // windows in writable on the old one's credit.
        self.streams.writes().forget(start, start + n);
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
        self.budget.release(resident_freed);
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
        let first = (addr - self.arena.base()) / PAGE_SIZE;
        let last = (addr + len - 1 - self.arena.base()) / PAGE_SIZE;
        for p in [first, last] {
            if !self.arena.table().load(p).has(page::ALLOCATED) {
                return Err(bad);
            }
        }
        Ok((first, last))
    }
}

/// A reference model of [`Regions`], for its property test and its fuzz
/// target: live allocations as a `BTreeMap` of intervals, and first fit
/// worked out from scratch on every step.
pub mod model {
    use super::Regions;
    use std::collections::BTreeMap;

    /// One step: allocate `pages` (1..), or free the live allocation at
    /// position `which` (modulo the number live).
    #[derive(Debug, Clone, Copy)]
    pub enum Op {
        Alloc(usize),
        Free(usize),
    }

    /// Decode fuzzer bytes into steps: 3 bytes each.
    pub fn ops_from_bytes(b: &[u8]) -> Vec<Op> {
        b.chunks_exact(3)
            .map(|c| {
                let v = usize::from(u16::from_le_bytes([c[1], c[2]]));
                if c[0] & 1 == 0 {
                    Op::Alloc(v % 300 + 1)
                } else {
                    Op::Free(v)
                }
            })
            .collect()
    }

    /// Run `ops` on a fresh [`Regions`] of `limit` pages and on the model;
    /// panic on the first difference or broken invariant.
    pub fn check(ops: &[Op], limit: usize) {
        let mut r = Regions::default();
        let mut m: BTreeMap<usize, usize> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Alloc(pages) => {
                    let top = m.last_key_value().map_or(0, |(s, l)| s + l);
                    // The lowest gap below the top that fits, else the top.
                    let mut at = 0;
                    let mut want = None;
                    for (&s, &l) in &m {
                        if s - at >= pages {
                            want = Some(at);
                            break;
                        }
                        at = s + l;
                    }
                    let want = want.or((top + pages <= limit).then_some(top));
                    let got = r.take(pages, limit);
                    assert_eq!(got, want, "step {i}: alloc {pages}");
                    if let Some(s) = got {
                        m.insert(s, pages);
                    }
                }
                Op::Free(which) => {
                    if m.is_empty() {
                        assert_eq!(r.give(0), None, "step {i}: nothing is live");
                        continue;
                    }
                    let (&s, &l) = m.iter().nth(which % m.len()).expect("in range");
                    assert_eq!(r.give(s), Some(l), "step {i}: free {s}");
                    assert_eq!(r.give(s), None, "step {i}: double free of {s}");
                    m.remove(&s);
                }
            }
            // The invariants: the top is the end of the last allocation;
            // the free ranges are exactly the gaps below it.
            let top = m.last_key_value().map_or(0, |(s, l)| s + l);
            assert_eq!(r.top(), top, "step {i}: top");
            let mut gaps = Vec::new();
            let mut at = 0;
            for (&s, &l) in &m {
                if s > at {
                    gaps.push((at, s - at));
                }
                at = s + l;
            }
            assert_eq!(
                r.free_ranges().collect::<Vec<_>>(),
                gaps,
                "step {i}: free list"
            );
            let mut live: Vec<_> = r.live().collect();
            live.sort_unstable();
            assert_eq!(live, m.iter().map(|(&s, &l)| (s, l)).collect::<Vec<_>>());
            assert_eq!(
                r.free_pages(limit),
                limit - m.values().sum::<usize>(),
                "step {i}: free pages"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::model::{check, Op};
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1usize..300).prop_map(Op::Alloc),
            any::<usize>().prop_map(Op::Free),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn regions_match_the_model(ops in prop::collection::vec(op(), 0..200), limit in 1usize..5000) {
            check(&ops, limit);
        }
    }
}
