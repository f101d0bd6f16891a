//! A session's pages: one flat array indexed by page number.
//!
//! The client declares `max_pages` at Hello, so the store reserves
//! `max_pages * 4096` bytes of address space with `MAP_NORESERVE` (the kernel
//! backs a page only when it is first written, so a 96 GiB session that
//! stores 1 GiB costs 1 GiB) and a presence bitmap the same way. Page `p`
//! lives at `base + p * 4096`: no map, no slot allocator, and a Read reply is
//! gathered straight from there into the socket.
//!
//! HAZARD: connection threads of one session touch the store in parallel,
//! with no lock, and only through raw pointers handed to the kernel (no Rust
//! reference into the page bytes is ever made). Three kinds of overlap:
//!
//! 1. Two requests for the same page on different connections of a session
//!    (Read+Write, Write+Write). The farmem client never sends these: a page
//!    is owned by one thread while it is fetched or evicted. A client that
//!    does gets torn bytes for that page and nothing worse: every access is
//!    the kernel copying between a socket and this session's own mapping,
//!    which stays mapped while any connection holds the session (`Arc`).
//!
//! 2. Free racing a Read or Write on another connection. Without care:
//!    ```text
//!    conn A: Read [7]    bit 7 set: present
//!    conn B: Free 0..16  clears bit 7, madvise(DONTNEED) on page 7
//!    conn A:             sendmsg(page 7) -> the kernel sends zeros
//!    ```
//!    and the client gets zeros for a page it wrote, which the protocol
//!    promises never to do; a Write would likewise lose data if the madvise
//!    fell between its receive and its bit set. So every Read and Write holds
//!    the session's gate shared ([`Store::access`], one atomic add, no
//!    waiting on other Reads or Writes) from its presence check until its
//!    last byte is sent or received, and Free holds it exclusively
//!    ([`Store::exclusive`]): it waits for those in flight and new ones wait
//!    for it. A Read racing Free returns the old bytes (it ran first) or
//!    NotFound (Free ran first). A Free can thus wait on a Read's send; only
//!    connections of its own session, and the socket buffers hold a batch.
//!
//! 3. Sessions: each has its own mappings, and page numbers are checked
//!    against its `max_pages` before any address is formed, so no request
//!    reaches another session's memory.
//!
//! Capacity: a bit goes 0 -> 1 only in [`Access::mark_present`] and 1 -> 0
//! only in [`Exclusive::remove_range`] (which no Write overlaps), each with an
//! atomic read-modify-write whose old value says how many pages changed, so
//! [`Store::len`] and the server's `Capacity` stay exact whatever the
//! interleaving.

use farmem_sys::mem::{madvise, Mapping};
use farmem_sys::net::RawBuf;
use farmem_wire::PAGE_SIZE;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

/// A page number (below the session's `max_pages`, at most 2^40) as an
/// index: it fits `usize` on the 64-bit targets farmem builds for.
fn index(page: u64) -> usize {
    usize::try_from(page).expect("page numbers fit usize on 64-bit targets")
}

/// Set in `gate` while a Free owns the store.
const FREEING: u64 = 1 << 63;

#[derive(Debug, Error)]
pub(crate) enum StoreError {
    #[error("cannot reserve address space for a session of {pages} pages: {source}; connect with a smaller arena (FARMEM_ARENA)")]
    Mmap { pages: u64, source: io::Error },
}

pub(crate) struct Store {
    data: Mapping,
    /// One bit per page, in `AtomicU64` words: set = present.
    bits: Mapping,
    max_pages: u64,
    /// Pages present.
    present: AtomicU64,
    /// One past the highest page ever marked present: bounds Free's scan.
    high: AtomicU64,
    /// Reads and Writes in flight, plus [`FREEING`].
    gate: AtomicU64,
    /// The session's one-sided pages, once it asked for UCX.
    pub(crate) pool: std::sync::OnceLock<crate::ucx::Pool>,
    /// The session's pages in sealed memory files, once it asked for them.
    pub(crate) memfd: std::sync::OnceLock<crate::memfd::MemfdPool>,
}

impl Store {
    pub(crate) fn new(max_pages: u64) -> Result<Store, StoreError> {
        let mmap_err = |source| StoreError::Mmap {
            pages: max_pages,
            source,
        };
        let too_big = || mmap_err(io::Error::from(io::ErrorKind::OutOfMemory));
        let data_len = usize::try_from(max_pages)
            .ok()
            .and_then(|n| n.checked_mul(PAGE_SIZE))
            .ok_or_else(too_big)?;
        let bits_len = usize::try_from(max_pages.div_ceil(64) * 8)
            .map_err(|_| too_big())?
            .next_multiple_of(PAGE_SIZE);
        Ok(Store {
            data: Mapping::anonymous(data_len, true).map_err(mmap_err)?,
            bits: Mapping::anonymous(bits_len, true).map_err(mmap_err)?,
            max_pages,
            present: AtomicU64::new(0),
            high: AtomicU64::new(0),
            gate: AtomicU64::new(0),
            pool: std::sync::OnceLock::new(),
            memfd: std::sync::OnceLock::new(),
        })
    }

    pub(crate) fn max_pages(&self) -> u64 {
        self.max_pages
    }

    /// Pages present.
    pub(crate) fn len(&self) -> u64 {
        self.present.load(Ordering::Acquire)
    }

    /// Pages this session is charged for: those stored here, and the
    /// chunks of its one-sided pages (UCX or memory files).
    pub(crate) fn charged(&self) -> u64 {
        self.len()
            + self.pool.get().map_or(0, |p| p.charged())
            + self.memfd.get().map_or(0, |p| p.charged())
    }

    /// Enter for a Read or Write: shared with other Reads and Writes, waits
    /// only while a Free runs.
    pub(crate) fn access(&self) -> Access<'_> {
        loop {
            if self.gate.fetch_add(1, Ordering::Acquire) & FREEING == 0 {
                return Access(self);
            }
            self.gate.fetch_sub(1, Ordering::Release);
            wait_until(|| self.gate.load(Ordering::Relaxed) & FREEING == 0);
        }
    }

    /// Enter for a Free: waits for Reads and Writes in flight, keeps new
    /// ones out (they wait in [`Store::access`]) and other Frees too.
    pub(crate) fn exclusive(&self) -> Exclusive<'_> {
        while self.gate.fetch_or(FREEING, Ordering::Acquire) & FREEING != 0 {
            wait_until(|| self.gate.load(Ordering::Relaxed) & FREEING == 0);
        }
        wait_until(|| self.gate.load(Ordering::Acquire) == FREEING);
        Exclusive(self)
    }

    fn word(&self, page: u64) -> &AtomicU64 {
        assert!(page < self.max_pages, "page {page} beyond the store");
        let i = (page / 64) as usize;
        // SAFETY: the bitmap mapping holds ceil(max_pages/64) words (checked
        // just above), is page-aligned so every word is 8-aligned, starts
        // zeroed (a valid AtomicU64), is only ever accessed atomically, and
        // lives as long as `self`.
        unsafe { &*self.bits.as_ptr().cast::<AtomicU64>().add(i) }
    }

    fn is_present(&self, page: u64) -> bool {
        self.word(page).load(Ordering::Acquire) & (1 << (page % 64)) != 0
    }

    /// Where page `page`'s bytes live.
    fn page_ptr(&self, page: u64) -> *mut u8 {
        assert!(page < self.max_pages, "page {page} beyond the store");
        // In bounds: page < max_pages and the mapping is max_pages pages.
        self.data.as_ptr().wrapping_add(index(page) * PAGE_SIZE)
    }

    /// Return `[first, end)` (pages) to the kernel.
    fn discard(&self, first: u64, end: u64) {
        // SAFETY: the range lies inside the data mapping (end <= max_pages),
        // and no Rust reference into the page bytes ever exists (they are
        // only reached through raw pointers given to the kernel); who may be
        // using them at the same time is the callers' concern (module doc).
        let r = unsafe {
            madvise(
                self.page_ptr(first),
                index(end - first) * PAGE_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        // Only invalid arguments make it fail; the pages would merely stay resident.
        debug_assert!(r.is_ok(), "madvise(DONTNEED): {r:?}");
    }
}

/// Spin briefly, then yield, then nap: a Free and a Read on the same session
/// rarely meet, and when they do the other side finishes within one send.
fn wait_until(ready: impl Fn() -> bool) {
    let backoff = crossbeam_utils::Backoff::new();
    while !ready() {
        if backoff.is_completed() {
            std::thread::sleep(std::time::Duration::from_micros(50));
        } else {
            backoff.snooze();
        }
    }
}

/// A Read or Write in flight (see [`Store::access`]).
pub(crate) struct Access<'a>(&'a Store);

impl Drop for Access<'_> {
    fn drop(&mut self) {
        self.0.gate.fetch_sub(1, Ordering::Release);
    }
}

impl Access<'_> {
    /// The first page of `pages` never written (or freed since).
    pub(crate) fn first_absent(&self, mut pages: impl Iterator<Item = u64>) -> Option<u64> {
        pages.find(|&p| !self.0.is_present(p))
    }

    /// Page `page`'s bytes, for the kernel to send from or receive into.
    /// Stays valid while this access lasts (no Free can discard it).
    pub(crate) fn page(&self, page: u64) -> RawBuf {
        RawBuf {
            ptr: self.0.page_ptr(page),
            len: PAGE_SIZE,
        }
    }

    /// How many of `pages` (sorted, no duplicates) are absent.
    pub(crate) fn count_absent(&self, pages: &[u64]) -> u64 {
        pages.iter().filter(|&&p| !self.0.is_present(p)).count() as u64
    }

    /// Mark `pages` (sorted, no duplicates) present once their bytes are in
    /// place; returns how many were absent before.
    pub(crate) fn mark_present(&self, pages: &[u64]) -> u64 {
        let mut added = 0;
        let mut i = 0;
        // One atomic per bitmap word: a batch of neighbours is 1-2 words.
        while i < pages.len() {
            let w = pages[i] / 64;
            let mut mask = 0u64;
            while i < pages.len() && pages[i] / 64 == w {
                mask |= 1 << (pages[i] % 64);
                i += 1;
            }
            let old = self.0.word(w * 64).fetch_or(mask, Ordering::Release);
            added += u64::from((mask & !old).count_ones());
        }
        if let Some(&last) = pages.last() {
            self.0.high.fetch_max(last + 1, Ordering::Relaxed);
        }
        self.0.present.fetch_add(added, Ordering::AcqRel);
        added
    }

    /// After a Write was cut off: give back the memory of those of `pages`
    /// still absent (their bytes may be half-received; nobody can read
    /// them). Check-then-discard is racy only against a Write of the same
    /// page on another connection (hazard 1), which may then read as zeros.
    pub(crate) fn discard_absent(&self, pages: &[u64]) {
        for &p in pages {
            if !self.0.is_present(p) {
                self.0.discard(p, p + 1);
            }
        }
    }
}

/// A Free owning the store (see [`Store::exclusive`]).
pub(crate) struct Exclusive<'a>(&'a Store);

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.0.gate.fetch_and(!FREEING, Ordering::Release);
    }
}

impl Exclusive<'_> {
    /// Remove pages `[start, start+n)` and return their memory to the kernel;
    /// returns how many were present.
    pub(crate) fn remove_range(&self, start: u64, n: u64) -> u64 {
        let s = self.0;
        let end = start
            .saturating_add(n)
            .min(s.max_pages)
            .min(s.high.load(Ordering::Relaxed));
        if start >= end {
            return 0;
        }
        let mut removed = 0;
        let (mut first, mut last) = (u64::MAX, 0);
        let mut w = start / 64;
        while w * 64 < end {
            let lo = (w * 64).max(start) - w * 64;
            let hi = (w * 64 + 64).min(end) - w * 64;
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            let word = s.word(w * 64);
            // Skip the write (and dirtying the bitmap) where nothing is set.
            if word.load(Ordering::Relaxed) & mask != 0 {
                let gone = word.fetch_and(!mask, Ordering::AcqRel) & mask;
                if gone != 0 {
                    removed += u64::from(gone.count_ones());
                    first = first.min(w * 64 + u64::from(gone.trailing_zeros()));
                    last = w * 64 + 63 - u64::from(gone.leading_zeros());
                }
            }
            w += 1;
        }
        if removed > 0 {
            // One call for the whole span: the absent pages inside it hold
            // nothing anyone can read, and a span is far cheaper than many
            // calls (~0.15 µs vs ~1-5 µs a page).
            s.discard(first, last + 1);
            s.present.fetch_sub(removed, Ordering::AcqRel);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The bitmap against a set, over random writes and frees that straddle
    /// word boundaries (a xorshift keeps this free of dependencies).
    #[test]
    fn presence_matches_a_model() {
        let max = 1000u64;
        let s = Store::new(max).unwrap();
        let mut model = BTreeSet::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            if rnd(3) > 0 {
                let base = rnd(max);
                let mut pages: Vec<u64> = (0..rnd(70) + 1)
                    .map(|_| (base + rnd(130)).min(max - 1))
                    .collect();
                pages.sort_unstable();
                pages.dedup();
                let a = s.access();
                let new = pages.iter().filter(|p| !model.contains(*p)).count() as u64;
                assert_eq!(a.count_absent(&pages), new);
                for &p in &pages {
                    // SAFETY: the page is inside the mapping; nothing else
                    // touches the store in this test.
                    unsafe { a.page(p).ptr.write(p.to_le_bytes()[0]) };
                }
                assert_eq!(a.mark_present(&pages), new);
                model.extend(pages);
            } else {
                let (start, n) = (rnd(max + 10), rnd(300));
                let gone: Vec<u64> = model
                    .range(start..start.saturating_add(n))
                    .copied()
                    .collect();
                assert_eq!(s.exclusive().remove_range(start, n), gone.len() as u64);
                for p in gone {
                    model.remove(&p);
                }
            }
            assert_eq!(s.len(), model.len() as u64);
        }
        let a = s.access();
        for p in 0..max {
            assert_eq!(
                a.first_absent(std::iter::once(p)).is_none(),
                model.contains(&p)
            );
            if model.contains(&p) {
                // SAFETY: as above.
                let first = unsafe { a.page(p).ptr.read() };
                assert_eq!(first, p.to_le_bytes()[0], "page {p}");
            }
        }
    }

    #[test]
    fn freed_pages_read_back_as_zero_memory() {
        let s = Store::new(64).unwrap();
        let a = s.access();
        // SAFETY: page 3 is inside the mapping; the test is single-threaded.
        unsafe { a.page(3).ptr.write(0xAB) };
        a.mark_present(&[3]);
        drop(a);
        assert_eq!(s.exclusive().remove_range(0, 64), 1);
        // SAFETY: as above.
        let byte = unsafe { s.access().page(3).ptr.read() };
        assert_eq!(byte, 0, "memory returned");
    }

    #[test]
    fn free_waits_for_reads_in_flight() {
        let s = Store::new(64).unwrap();
        s.access().mark_present(&[1]);
        let a = s.access();
        std::thread::scope(|t| {
            let h = t.spawn(|| s.exclusive().remove_range(0, 64));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!h.is_finished(), "Free ran while a Read was in flight");
            assert!(a.first_absent(std::iter::once(1)).is_none());
            drop(a);
            assert_eq!(h.join().unwrap(), 1);
        });
        assert!(s.access().first_absent(std::iter::once(1)).is_some());
    }

    #[test]
    fn address_space_too_large_is_an_error() {
        assert!(matches!(
            Store::new(farmem_wire::MAX_PAGES),
            Err(StoreError::Mmap { .. })
        ));
    }
}
