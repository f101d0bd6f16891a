//! A program's own address-space calls on far memory it reserved.
//!
//! A managed runtime does not ask `malloc` for its heap. The JVM reserves
//! the heap with `mmap(PROT_NONE, MAP_NORESERVE)`, commits pieces of it with
//! `mmap(MAP_FIXED)` or `mprotect`, uncommits them with `mmap(MAP_FIXED,
//! PROT_NONE)` or `madvise`, guards a page with `mprotect(PROT_NONE)`, and
//! maps files and executable code at fixed addresses inside reservations.
//! The `farmem run` shim makes such reservations in the arena and brings
//! each of these calls here:
//! - [`Runtime::recommit`]: fresh zero pages, far, with the protection asked
//!   (an anonymous private `MAP_FIXED` mapping that is at most read-write);
//! - [`Runtime::protect`]: `mprotect`, content kept. A protection that
//!   forbids reading makes the pages HIDDEN (see [`crate::page`]): those
//!   resident leave, and no fault, prefetch or pin brings them in until the
//!   program can read them again, since eviction copies a page out by its
//!   address;
//! - [`Runtime::lend`]: anything farmem cannot page (a file, shared memory,
//!   executable code) is lent to the kernel: its pages leave far memory and
//!   the kernel maps the range as asked;
//! - [`Runtime::make_executable`]: `mprotect` with `PROT_EXEC` (a JIT's
//!   code): the same, content kept. Code never runs from far memory, whose
//!   copy on a server is outside this process's protection;
//! - `Runtime::restore`: a freed, unmapped or recommitted range that had
//!   either is made arena memory again (read-write, registered).
//!
//! The kernel's protection is the program's: a `PROT_NONE` page faults with
//! SIGSEGV before userfaultfd sees it, so the JVM's handlers (implicit null
//! checks on a heap's guard page) get what they expect.

use crate::fork::is_forked_child;
use crate::page;
use crate::{Runtime, RuntimeError};
use farmem_sys::PAGE_SIZE;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How a range of the arena differs from plain arena memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Altered {
    /// Far pages under a protection other than read-write.
    Protected,
    /// The kernel's: mapped by the program, not registered, not far.
    Lent,
}

/// The ranges the program altered, and whether there are any, so that the
/// common case (none) costs one load and no lock.
#[derive(Default)]
pub(crate) struct AlteredSet {
    ranges: Mutex<AlteredRanges>,
    any: AtomicBool,
}

impl AlteredSet {
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Change the ranges; `any` follows before the lock is given back.
    pub(crate) fn edit<R>(&self, f: impl FnOnce(&mut AlteredRanges) -> R) -> R {
        let mut ranges = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(&mut ranges);
        self.any.store(!ranges.is_empty(), Ordering::Release);
        out
    }

    pub(crate) fn read<R>(&self, f: impl FnOnce(&AlteredRanges) -> R) -> R {
        f(&self.ranges.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Disjoint page ranges `[start, end)` and how each is altered. Pure
/// bookkeeping, property-tested against a page-by-page model.
#[derive(Debug, Default)]
pub struct AlteredRanges {
    map: BTreeMap<usize, (usize, Altered)>,
}

impl AlteredRanges {
    /// Take `[start, end)` out, returning the parts that were in, clipped,
    /// in order.
    pub fn remove(&mut self, start: usize, end: usize) -> Vec<(usize, usize, Altered)> {
        let mut out = Vec::new();
        if start >= end {
            return out;
        }
        // The range that starts before `start` may reach into it.
        let first = self
            .map
            .range(..start)
            .next_back()
            .map(|(&s, &v)| (s, v))
            .filter(|&(_, (e, _))| e > start);
        let inside: Vec<(usize, (usize, Altered))> =
            self.map.range(start..end).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, kind)) in first.into_iter().chain(inside) {
            self.map.remove(&s);
            if s < start {
                self.map.insert(s, (start, kind));
            }
            if e > end {
                self.map.insert(end, (e, kind));
            }
            out.push((s.max(start), e.min(end), kind));
        }
        out
    }

    /// Mark `[start, end)` as `kind`, replacing what it overlaps.
    pub fn insert(&mut self, start: usize, end: usize, kind: Altered) {
        if start >= end {
            return;
        }
        self.remove(start, end);
        self.map.insert(start, (end, kind));
    }

    /// Whether every page of `[start, end)` is `kind`.
    pub fn covers(&self, start: usize, end: usize, kind: Altered) -> bool {
        let mut at = start;
        if let Some((_, &(e, k))) = self.map.range(..=start).next_back() {
            if e > start && k == kind {
                at = e;
            }
        }
        while at < end {
            match self.map.get(&at) {
                Some(&(e, k)) if k == kind => at = e,
                _ => return false,
            }
        }
        true
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The parts of `[start, end)` not marked `kind`, in order.
    pub fn gaps(&self, start: usize, end: usize, kind: Altered) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut at = start;
        let first = self.map.range(..start).next_back().map(|(&s, &v)| (s, v));
        let inside = self.map.range(start..end).map(|(&s, &v)| (s, v));
        for (s, (e, k)) in first.into_iter().chain(inside) {
            if k != kind || e <= at {
                continue;
            }
            if s > at {
                out.push((at, s.min(end)));
            }
            at = e.max(at);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

impl Runtime {
    /// The pages `[first, last]` of `[addr, addr+len)`, which must lie in one
    /// live allocation and be page-aligned (as the kernel demands of these
    /// calls).
    pub(crate) fn pages_within(
        &self,
        addr: usize,
        len: usize,
    ) -> Result<(usize, usize), RuntimeError> {
        let bad = RuntimeError::InvalidRange { addr, len };
        let end = addr
            .checked_add(len)
            .ok_or(RuntimeError::InvalidRange { addr, len })?;
        if len == 0
            || !addr.is_multiple_of(PAGE_SIZE)
            || !self.contains(addr)
            || !self.contains(end - 1)
        {
            return Err(bad);
        }
        let first = (addr - self.arena.base()) / PAGE_SIZE;
        let last = (end - 1 - self.arena.base()) / PAGE_SIZE;
        let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        match r.containing(first) {
            Some((s, n)) if last < s + n => Ok((first, last)),
            _ => Err(bad),
        }
    }

    /// `mmap(addr, len, prot, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS)` with
    /// `prot` at most read-write, inside a far allocation: the pages start
    /// again as zero, far, under `prot` (a JVM commit or uncommit).
    pub fn recommit(&self, addr: usize, len: usize, prot: i32) -> Result<(), RuntimeError> {
        self.check_not_forked()?;
        let (first, last) = self.pages_within(addr, len)?;
        let n = last - first + 1;
        self.release_pages(first, n);
        self.restore(first, n)?;
        for p in first..=last {
            self.arena
                .table()
                .word(p)
                .fetch_or(page::ALLOCATED, Ordering::AcqRel);
        }
        if prot == RW {
            return Ok(());
        }
        // Fresh pages, none resident: protecting them only marks them.
        self.protect(addr, len, prot)
    }

    /// `mprotect` inside a far allocation: content is kept. A protection
    /// that forbids reading hides the pages first (see `Runtime::hide`).
    ///
    /// Hazard: the pages are hidden before the kernel protects them, so a
    /// thread that touches one in between finds it HIDDEN and Absent, and
    /// the fault path stops the program (a page it may not claim). The
    /// native program races there too (its access may or may not fault);
    /// the JVM protects only pages no thread uses.
    pub fn protect(&self, addr: usize, len: usize, prot: i32) -> Result<(), RuntimeError> {
        self.check_not_forked()?;
        let (first, last) = self.pages_within(addr, len)?;
        if prot & libc::PROT_READ == 0 {
            self.hide(first, last);
        } else {
            for p in first..=last {
                self.arena
                    .table()
                    .word(p)
                    .fetch_and(!page::HIDDEN, Ordering::AcqRel);
            }
        }
        let n = last - first + 1;
        self.altered.edit(|altered| {
            // A lent part keeps being the kernel's: only its protection changes.
            let lent = altered.remove(first, first + n);
            if prot != RW {
                altered.insert(first, first + n, Altered::Protected);
            }
            for (s, e, kind) in lent {
                if kind == Altered::Lent {
                    altered.insert(s, e, Altered::Lent);
                }
            }
        });
        // SAFETY: the pages are the program's own far allocation, which it
        // asks to protect; resident pages it can no longer read have left.
        unsafe { farmem_sys::mem::mprotect(self.addr_of(first) as *mut u8, n * PAGE_SIZE, prot) }
            .map_err(|e| RuntimeError::Remap("change the protection of", e))
    }

    /// Mark pages `[first, last]` HIDDEN (nothing brings them in again) and
    /// send out those resident, content kept. A prefetch that claimed one
    /// before the mark is waited out first, so none is installed after.
    fn hide(&self, first: usize, last: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        for p in first..=last {
            let _ =
                self.arena
                    .table()
                    .word(p)
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                        (w & page::ALLOCATED != 0).then_some(w | page::HIDDEN)
                    });
        }
        for p in first..=last {
            self.settle(p);
        }
        self.evict_range(first, last);
    }

    /// A `MAP_FIXED` mapping farmem cannot page (a file, shared memory,
    /// executable code) over part of a far allocation: its far pages are
    /// dropped and the range is the kernel's until `Runtime::restore`
    /// takes it back. The caller makes the mapping.
    pub fn lend(&self, addr: usize, len: usize) -> Result<(), RuntimeError> {
        self.check_not_forked()?;
        let (first, last) = self.pages_within(addr, len)?;
        let n = last - first + 1;
        self.release_pages(first, n);
        self.altered
            .edit(|altered| altered.insert(first, first + n, Altered::Lent));
        Ok(())
    }

    /// `mprotect(addr, len, prot)` with `PROT_EXEC` inside a far allocation:
    /// executable code stays local. Each part of the range not yet lent is
    /// read in once, leaves far memory and becomes the kernel's (a fresh
    /// anonymous mapping, not registered with userfaultfd) holding the same
    /// bytes, as `lend` makes a file or code mapped over far memory; then
    /// the whole range gets `prot`. It stays the kernel's until it is
    /// freed, unmapped or recommitted (`Runtime::restore`).
    ///
    /// Hazard: between the copy out and the copy back, the part is neither
    /// far nor mapped with its content, so a thread that writes it then
    /// loses the write, and one that touches it while its far pages are
    /// released finds a page it may not claim (the fault path stops the
    /// program). A program changes its code's protection only when no
    /// thread uses the code (a JIT writes, then flips to read+exec); the
    /// native program races there as well.
    pub fn make_executable(&self, addr: usize, len: usize, prot: i32) -> Result<(), RuntimeError> {
        self.check_not_forked()?;
        let (first, last) = self.pages_within(addr, len)?;
        let parts = self
            .altered
            .read(|altered| altered.gaps(first, last + 1, Altered::Lent));
        for (s, e) in parts {
            self.make_local(s, e)?;
        }
        let n = last - first + 1;
        // SAFETY: the range is the program's own allocation, now all lent
        // to the kernel; the protection is the program's to choose.
        unsafe { farmem_sys::mem::mprotect(self.addr_of(first) as *mut u8, n * PAGE_SIZE, prot) }
            .map_err(|e| RuntimeError::Remap("change the protection of", e))
    }

    /// Pages `[s, e)`, far, become the kernel's with their content.
    fn make_local(&self, s: usize, e: usize) -> Result<(), RuntimeError> {
        let (a, len) = (self.addr_of(s), (e - s) * PAGE_SIZE);
        // Readable, so that the content can be copied out by address (a
        // page the program hid comes back).
        self.protect(a, len, libc::PROT_READ)?;
        let copy = farmem_sys::mem::Mapping::anonymous(len, false)
            .map_err(|e| RuntimeError::Remap("copy out", e))?;
        // Only pages with content: one never written reads as zero, as the
        // fresh mapping does, and is not fetched.
        let with_content: Vec<usize> = (s..e)
            .filter(|&p| {
                let w = self.arena.table().load(p);
                w.state() != page::State::Absent || w.has(page::ON_SERVER) || w.has(page::HELD)
            })
            .collect();
        for &p in &with_content {
            let off = (p - s) * PAGE_SIZE;
            // SAFETY: page p is the program's far memory, readable (just
            // above); reading it faults it in once. `copy` is a fresh
            // mapping of `len` bytes that nothing else uses.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (a + off) as *const u8,
                    copy.as_ptr().add(off),
                    PAGE_SIZE,
                )
            };
        }
        self.release_pages(s, e - s);
        // SAFETY: the range is in the arena, which farmem owns, and its far
        // pages were just released: nothing of farmem's lives there. The
        // new mapping is not registered with userfaultfd: the kernel's.
        unsafe { farmem_sys::mem::remap_anonymous(a, len) }
            .map_err(|e| RuntimeError::Remap("lend", e))?;
        for &p in &with_content {
            let off = (p - s) * PAGE_SIZE;
            // SAFETY: both are live mappings of `len` bytes, read-write,
            // and distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    copy.as_ptr().add(off),
                    (a + off) as *mut u8,
                    PAGE_SIZE,
                )
            };
        }
        self.altered
            .edit(|altered| altered.insert(s, e, Altered::Lent));
        Ok(())
    }

    /// Whether all of `[addr, addr+len)` is lent to the kernel (calls on it
    /// go to the kernel as they are).
    pub fn is_lent(&self, addr: usize, len: usize) -> bool {
        if !self.altered.any() || len == 0 || !self.contains(addr) {
            return false;
        }
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        if !self.contains(end - 1) {
            return false;
        }
        let first = (addr - self.arena.base()) / PAGE_SIZE;
        let last = (end - 1 - self.arena.base()) / PAGE_SIZE;
        self.altered
            .read(|altered| altered.covers(first, last + 1, Altered::Lent))
    }

    /// Make the altered parts of pages `[first, first+n)` plain arena memory
    /// again: fresh, read-write, registered with userfaultfd. Their far
    /// pages must have been released.
    pub(crate) fn restore(&self, first: usize, n: usize) -> Result<(), RuntimeError> {
        if !self.altered.any() || is_forked_child() {
            return Ok(());
        }
        let parts = self
            .altered
            .edit(|altered| altered.remove(first, first + n));
        for (s, e, _) in parts {
            let (addr, len) = (self.addr_of(s), (e - s) * PAGE_SIZE);
            // SAFETY: the range is in the arena, which farmem owns, and its
            // far pages were released by the caller: nothing lives there.
            unsafe { farmem_sys::mem::remap_anonymous(addr, len) }
                .map_err(|e| RuntimeError::Remap("take back", e))?;
            // SAFETY: as above; the arena never uses transparent huge pages.
            let _ =
                unsafe { farmem_sys::mem::madvise(addr as *mut u8, len, libc::MADV_NOHUGEPAGE) };
            self.arena
                .uffd()
                .register(
                    addr,
                    len,
                    farmem_sys::uffd::UFFDIO_REGISTER_MODE_MISSING
                        | farmem_sys::uffd::UFFDIO_REGISTER_MODE_WP,
                )
                .map_err(|e| RuntimeError::Remap("register again", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind(k: bool) -> Altered {
        if k {
            Altered::Lent
        } else {
            Altered::Protected
        }
    }

    proptest! {
        /// Inserts and removes agree with a page-by-page model, and what a
        /// removal returns is exactly what the model held there.
        #[test]
        fn altered_ranges_match_a_page_model(
            ops in proptest::collection::vec((0usize..64, 1usize..16, any::<bool>(), any::<bool>()), 1..60)
        ) {
            let mut r = AlteredRanges::default();
            let mut model: [Option<Altered>; 80] = [None; 80];
            for (start, len, insert, k) in ops {
                let end = start + len;
                if insert {
                    r.insert(start, end, kind(k));
                    for m in &mut model[start..end] { *m = Some(kind(k)); }
                } else {
                    let got = r.remove(start, end);
                    let mut pages = [None; 80];
                    for (s, e, k) in got {
                        prop_assert!(start <= s && e <= end && s < e);
                        for p in &mut pages[s..e] { prop_assert!(p.is_none()); *p = Some(k); }
                    }
                    prop_assert_eq!(&pages[start..end], &model[start..end]);
                    for m in &mut model[start..end] { *m = None; }
                }
                for a in 0..80 {
                    for b in a + 1..(a + 6).min(80) {
                        for k in [Altered::Lent, Altered::Protected] {
                            prop_assert_eq!(r.covers(a, b, k), model[a..b].iter().all(|m| *m == Some(k)));
                            // The gaps are exactly the pages not `k`, as
                            // maximal runs.
                            let mut want: Vec<(usize, usize)> = Vec::new();
                            for (p, m) in model.iter().enumerate().take(b).skip(a) {
                                if *m != Some(k) {
                                    match want.last_mut() {
                                        Some(last) if last.1 == p => last.1 = p + 1,
                                        _ => want.push((p, p + 1)),
                                    }
                                }
                            }
                            prop_assert_eq!(r.gaps(a, b, k), want);
                        }
                    }
                }
                prop_assert_eq!(r.is_empty(), model.iter().all(Option::is_none));
            }
        }
    }
}
