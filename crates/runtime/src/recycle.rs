//! Recycled pages: evicted pages kept as the next installs' pages.
//!
//! Installing a page with `UFFDIO_COPY` makes the kernel allocate, charge and
//! copy a page; unmapping it frees and uncharges it. `UFFDIO_MOVE` (Linux
//! 6.8) instead moves a page between two mappings: no allocation, no free,
//! and atomically against writers. So evicted pages are moved out of the
//! arena into the *bin* (a small mapping beside it, registered with the same
//! userfaultfd), written back from there, and kept; a window installed
//! writable takes them back: its received data is copied into them and they
//! are moved in. `bench/kernel/uffd-install-cost.c`: in and out, 0.17 µs a
//! page against 0.92 for copy and unmap in runs of 64 (0.49 against 1.22
//! with a second thread, whose CPU every move's TLB flush reaches).
//!
//! Only *writable* installs take recycled pages: a moved-in page is
//! writable, and write-protecting it afterwards would leave a window in
//! which another thread's write is not seen (docs/design.md, dirty
//! tracking), so clean installs keep `UFFDIO_COPY`. A dirty victim moved out
//! needs no write-protect: the move is the one call (and TLB flush) its run
//! costs, as the write-protect was, and it is not unmapped again.
//!
//! The bin is a few chunks of [`CHUNK`] pages, each a stack: its first
//! `full` pages are present (recycled pages), the rest are empty page table
//! entries, so that a run always moves to or from consecutive pages. A
//! thread takes a whole chunk (a try-lock: it never waits, and falls back to
//! copy and unmap when every chunk is busy, full or empty), so what it moved
//! out stays put while it writes it back. The bin's pages are local memory
//! and are taken from the budget, as the hold's are.

use crate::config::MAX_EVICT_BATCH;
use crate::Runtime;
use farmem_sys::mem::Mapping;
use farmem_sys::uffd::{Moved, Uffd};
use farmem_sys::PAGE_SIZE;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Pages per chunk: the victims an eviction round chooses at most, so that
/// a round can move out whole into an empty chunk; or an install window.
pub(crate) const CHUNK: usize = MAX_EVICT_BATCH;
/// Most chunks (1 MiB): two threads each find one to move a round out
/// and a window in. More only hold more pages out of the budget: with six
/// NPB MG class B at half its footprint recycled 16% more pages but fetched
/// 1.8% more bytes and ran no faster; with two it fetched no more than
/// without the bin. How many a node with dozens of faulting threads needs
/// is not measured.
const MAX_CHUNKS: usize = 2;
/// Budget pages per chunk of the bin: at most 1/64 of the budget (1.6%),
/// none under 32 MiB. Every page the bin holds is one the program cannot
/// keep: a bin of 1/16 of the budget cost GAPBS BFS `-g 19` at a quarter of
/// its footprint 8% more faults, and NPB CG class W at 70% 17% more bytes
/// (a loop just larger than the budget feels every page of it); one chunk
/// of 128 at BFS's 35 MiB, 1.5% more faults than none in one pair of runs.
/// Without it a single-threaded write stream at a 32 MiB budget paid 15–50%
/// more a page (`page_cost`: it is what makes streams cheap).
const BUDGET_PER_CHUNK: usize = 64 * CHUNK;
/// Fewest pages worth one move into the arena. With two threads a move
/// flushes the other CPU's TLB (8–9 µs here, docs/benchmarks.md) and saves
/// about 0.6 µs a page against `UFFDIO_COPY`: shorter runs are copied.
pub(crate) const MIN_MOVE_IN: usize = 16;

/// How many chunks a budget of `budget` pages gives the bin (0: none).
pub(crate) fn chunks_for(budget: usize) -> usize {
    (budget / BUDGET_PER_CHUNK).min(MAX_CHUNKS)
}

pub(crate) struct Bin {
    map: Mapping,
    chunks: Box<[Chunk]>,
    /// Cleared for good when a move fails for a reason that will not pass
    /// (the kernel refuses the mappings): every later try would fail too.
    on: AtomicBool,
}

struct Chunk {
    busy: AtomicBool,
    /// Present pages from the chunk's start. Written only by the thread
    /// holding `busy`; read by others as a hint when choosing a chunk.
    full: AtomicUsize,
}

/// A chunk taken by one thread; given back when dropped.
pub(crate) struct Taken<'a> {
    bin: &'a Bin,
    i: usize,
    full: usize,
}

impl Bin {
    /// A bin of `chunks` chunks registered with `uffd` (as the arena is, so
    /// that the kernel lets pages move between them). None with no chunks.
    pub(crate) fn new(uffd: &Uffd, chunks: usize, mode: u64) -> io::Result<Option<Bin>> {
        if chunks == 0 {
            return Ok(None);
        }
        let map = Mapping::anonymous(chunks * CHUNK * PAGE_SIZE, true)?;
        // SAFETY: the bin is ours; a huge page could not be moved a page at a time.
        let _ = unsafe { farmem_sys::mem::madvise(map.as_ptr(), map.len(), libc::MADV_NOHUGEPAGE) };
        uffd.register(map.as_ptr() as usize, map.len(), mode)?;
        let chunks = (0..chunks)
            .map(|_| Chunk {
                busy: AtomicBool::new(false),
                full: AtomicUsize::new(0),
            })
            .collect();
        Ok(Some(Bin {
            map,
            chunks,
            on: AtomicBool::new(true),
        }))
    }

    /// Whether `addr` is in the bin.
    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.map.contains(addr)
    }

    /// The bin's first page (for tests: absent until a move fills it).
    #[cfg(test)]
    pub(crate) fn first_page(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// Pages of local memory the bin may hold.
    pub(crate) fn pages(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Stop using the bin (a move failed in a way that will not pass).
    pub(crate) fn turn_off(&self) {
        self.on.store(false, Ordering::Relaxed);
    }

    /// A free chunk with room for `n` more pages (the fullest such: empty
    /// chunks are kept for whole batches), or None.
    pub(crate) fn with_room(&self, n: usize) -> Option<Taken<'_>> {
        self.take(|full| CHUNK - full >= n, |full| full)
    }

    /// A free chunk holding at least `min` recycled pages, or None: of those
    /// holding `want` or more the one holding fewest, which a run then
    /// empties for a whole batch to move out into; else the fullest.
    pub(crate) fn with_pages(&self, min: usize, want: usize) -> Option<Taken<'_>> {
        self.take(
            |full| full >= min,
            |full| if full >= want { 2 * CHUNK - full } else { full },
        )
    }

    /// Take the free chunk that `fits` and ranks highest by `rank`.
    fn take(
        &self,
        fits: impl Fn(usize) -> bool,
        rank: impl Fn(usize) -> usize,
    ) -> Option<Taken<'_>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let mut order = [0usize; MAX_CHUNKS];
        let mut n = 0;
        for (i, c) in self.chunks.iter().enumerate() {
            let full = c.full.load(Ordering::Relaxed);
            if !c.busy.load(Ordering::Relaxed) && fits(full) {
                order[n] = i;
                n += 1;
            }
        }
        order[..n].sort_unstable_by_key(|&i| {
            std::cmp::Reverse(rank(self.chunks[i].full.load(Ordering::Relaxed)))
        });
        for &i in &order[..n] {
            let c = &self.chunks[i];
            if c.busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // Ours now: `full` changes only under `busy`.
                let full = c.full.load(Ordering::Relaxed);
                if fits(full) {
                    return Some(Taken { bin: self, i, full });
                }
                c.busy.store(false, Ordering::Release);
            }
        }
        None
    }
}

impl Taken<'_> {
    /// Present pages from the chunk's start.
    pub(crate) fn full(&self) -> usize {
        self.full
    }

    /// Address of the chunk's page `j`.
    pub(crate) fn page(&self, j: usize) -> usize {
        debug_assert!(j < CHUNK);
        self.bin.map.as_ptr() as usize + (self.i * CHUNK + j) * PAGE_SIZE
    }

    /// `n` pages were moved in after the present ones.
    pub(crate) fn filled(&mut self, n: usize) {
        debug_assert!(self.full + n <= CHUNK);
        self.full += n;
    }

    /// The last `n` present pages were moved out.
    pub(crate) fn emptied(&mut self, n: usize) {
        debug_assert!(n <= self.full);
        self.full -= n;
    }

    /// Empty the chunk (after a move that left a gap among its present
    /// pages: unmap them all).
    pub(crate) fn discard(&mut self) {
        let len = self.full * PAGE_SIZE;
        if len > 0 {
            // SAFETY: the chunk's pages are the bin's, which no reference
            // points into, and this thread holds the chunk.
            let _ = unsafe {
                farmem_sys::mem::madvise(self.page(0) as *mut u8, len, libc::MADV_DONTNEED)
            };
        }
        self.full = 0;
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let c = &self.bin.chunks[self.i];
        c.full.store(self.full, Ordering::Relaxed);
        c.busy.store(false, Ordering::Release);
    }
}

/// Victims moved into the bin: each page and the bin address its content
/// went to, in address order.
pub(crate) struct Recycled {
    pages: [usize; CHUNK],
    at: [usize; CHUNK],
    n: usize,
}

impl Default for Recycled {
    fn default() -> Recycled {
        Recycled {
            pages: [0; CHUNK],
            at: [0; CHUNK],
            n: 0,
        }
    }
}

impl Recycled {
    /// Page `q` went to `at`; pages come in ascending order.
    pub(crate) fn push(&mut self, q: usize, at: usize) {
        debug_assert!(self.n == 0 || self.pages[self.n - 1] < q);
        self.pages[self.n] = q;
        self.at[self.n] = at;
        self.n += 1;
    }

    /// Where page `q` went, if it moved.
    pub(crate) fn find(&self, q: usize) -> Option<usize> {
        self.pages[..self.n]
            .binary_search(&q)
            .ok()
            .map(|i| self.at[i])
    }

    pub(crate) fn contains(&self, q: usize) -> bool {
        self.find(q).is_some()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }
}

impl Runtime {
    /// Install the first pages of a run of `n` pages from `first` (owned by
    /// the caller, absent) writable, from recycled pages: page j's content
    /// from `from + j * PAGE_SIZE`, or zeroes where `from` is None. Returns
    /// how many were installed (none when the bin has too few pages or the
    /// move fails); the caller installs the rest.
    pub(crate) fn install_recycled(
        &self,
        first: usize,
        n: usize,
        from: Option<*const u8>,
    ) -> usize {
        let Some(bin) = self.bin.as_ref() else {
            return 0;
        };
        if n < MIN_MOVE_IN {
            return 0;
        }
        let Some(mut chunk) = bin.with_pages(MIN_MOVE_IN, n) else {
            return 0;
        };
        let k = n.min(chunk.full());
        let at = chunk.full() - k;
        for j in 0..k {
            let dst = chunk.page(at + j) as *mut u8;
            // SAFETY: the chunk's first `full` pages are present bin pages,
            // and this thread holds the chunk; `from` holds the run's pages
            // (the caller's slot buffer), which nothing writes meanwhile.
            unsafe {
                match from {
                    Some(f) => std::ptr::copy_nonoverlapping(f.add(j * PAGE_SIZE), dst, PAGE_SIZE),
                    None => std::ptr::write_bytes(dst, 0, PAGE_SIZE),
                }
            }
        }
        // SAFETY: the destination pages are in the registered arena, absent
        // and owned by the caller (Fetching); the source pages are the
        // chunk's, present and ours; no reference points into either.
        let res = unsafe {
            self.arena
                .uffd()
                .move_pages(self.addr_of(first), chunk.page(at), k * PAGE_SIZE)
        };
        let moved = self.moved(bin, res);
        if moved == k {
            chunk.emptied(k);
        } else if moved > 0 {
            // The chunk's present pages now have a gap: start it afresh.
            chunk.discard();
        }
        if moved > 0 {
            let stats = self.observe.stats();
            stats.move_in_calls.add(1);
            stats.recycled_in.add(moved as u64);
        }
        moved
    }

    /// Whether `addr` is a page of the bin (none without one).
    pub(crate) fn in_bin(&self, addr: usize) -> bool {
        self.bin.as_ref().is_some_and(|b| b.contains(addr))
    }

    /// Pages a move moved, by its result. A move that failed leaves the
    /// caller to go on the old way: a page that was busy (pinned for I/O,
    /// or shared since a `fork`) may move another time; any other refusal
    /// would come again, so the bin is turned off.
    pub(crate) fn moved(&self, bin: &Bin, res: io::Result<Moved>) -> usize {
        match res {
            Ok(m) => {
                if m.misreported {
                    self.observe.stats().moves_misreported.add(1);
                }
                m.bytes / PAGE_SIZE
            }
            Err(e) => {
                if !matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) {
                    bin.turn_off();
                }
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bin_is_a_small_share_of_the_budget() {
        assert_eq!(chunks_for(8191), 0);
        assert_eq!(chunks_for(8192), 1);
        assert_eq!(chunks_for(1 << 20), MAX_CHUNKS);
        for b in [1024, 8192, 8960, 16384, 27776, 55552, 1 << 20] {
            assert!(chunks_for(b) * CHUNK * 64 <= b, "{b}");
        }
    }
}
