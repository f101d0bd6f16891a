//! Prefetch: per-stream windows that grow with use. A stream is a run of
//! faults at a constant stride; its window doubles each time the program
//! reaches the page just past it, up to FARMEM_PREFETCH pages.
//!
//! Forward streams are pipelined: besides the window fetched with the demand
//! page, the *next* window is requested at once without waiting
//! ([`Backend::read_async`](crate::backend::Backend::read_async)), so the
//! network works while the program computes on the current one. Reads of
//! prefetched pages raise no fault, so the trigger for the window after that
//! is the first page of the one in flight: the program faults there (the page
//! is Fetching, IN_FLIGHT), issues the next request, and then completes the
//! one in flight by draining its connection — no thread is ever woken, and
//! any thread can complete any request.

use crate::cost::Phase;
use crate::page::{self, next, Event, PageWord, State};
use crate::readahead::{self, Hint, Plan};
use crate::replacement::{page_u32, Aux as _};
use crate::slots::Token;
use crate::trace::{Kind, Why};
use crate::Runtime;
use crate::MAX_BATCH;
use farmem_sys::PAGE_SIZE;

impl Runtime {
    /// Plan the prefetch window for a demand fault at cell `cell` of page
    /// `p` (see [`crate::readahead`]), and count the previous window of the
    /// stream it continues as used.
    pub(crate) fn plan_prefetch(&self, p: usize, cell: u8, w: PageWord) -> Plan {
        let hint = if w.has(page::ADV_RANDOM) {
            Hint::Random
        } else if w.has(page::ADV_SEQUENTIAL) {
            Hint::Sequential
        } else {
            Hint::None
        };
        // The queues' lock only for a page evicted unused.
        let refetch = w.has(page::WASTED) && {
            let now = self.budget.queues().clock();
            let gone = now.wrapping_sub(self.arena.table().aux(page_u32(p)));
            readahead::wasted_lately(gone, self.budget.pages())
        };
        let plan = self
            .streams
            .planner()
            .plan(p as u64, cell, hint, refetch, |q| {
                let q = farmem_sys::usize_from(q);
                q < self.arena.npages() && self.arena.table().load(q).state().is_resident()
            });
        if plan.caught {
            self.observe.stats().streams_caught.add(1);
        }
        if let Some((walk, k)) = plan.used {
            let mut used = [0usize; MAX_BATCH];
            let mut n = 0;
            for j in 0..k.min(MAX_BATCH) as i64 {
                // Negative positions are outside the arena.
                let q = usize::try_from(walk.page(j));
                if let Ok(q) = q {
                    if q < self.arena.npages()
                        && self
                            .arena
                            .table()
                            .transition(q, Event::PrefetchUsed)
                            .is_ok()
                    {
                        used[n] = q;
                        n += 1;
                    }
                }
            }
            self.count_used(&used[..n]);
        }
        plan
    }

    /// Page `p` was seen used: counted as a used prefetch if it was
    /// prefetched and not counted yet.
    pub(crate) fn credit_used(&self, p: usize) {
        if self
            .arena
            .table()
            .transition(p, Event::PrefetchUsed)
            .is_ok()
        {
            self.count_used(&[p]);
        }
    }

    /// Prefetched pages `pages` were seen used: statistics, trace and the
    /// planner's region scores.
    pub(crate) fn count_used(&self, pages: &[usize]) {
        if pages.is_empty() {
            return;
        }
        self.observe.stats().prefetch_used.add(pages.len() as u64);
        let mut pl = self.streams.planner();
        for &q in pages {
            pl.on_used(q as u64);
            self.trace(Kind::PrefetchUsed, q, 0);
        }
    }

    /// The program reached `q`, the first page of a window in flight: if a
    /// forward stream expected it, count its previous window as used and
    /// request the next one.
    pub(crate) fn continue_stream(&self, q: usize, write: bool) {
        let maxw = (self.cfg.prefetch_pages as usize).min(MAX_BATCH);
        let Some((i, win)) = self.streams.planner().stream_at(q as i64) else {
            return;
        };
        // The stream ran through the resident pages before `q`: its windows'
        // pages among them are used. Pages its windows passed over (resident
        // from before) are passed over here too; the walk ends at the first
        // page that is not resident.
        let mut used = [0usize; MAX_BATCH];
        let mut n = 0;
        for k in 1..=MAX_BATCH.min(q) {
            let w = self.arena.table().load(q - k);
            if !w.state().is_resident() {
                break;
            }
            if w.has(page::PREFETCHED)
                && self
                    .arena
                    .table()
                    .transition(q - k, Event::PrefetchUsed)
                    .is_ok()
            {
                used[n] = q - k;
                n += 1;
            }
        }
        self.count_used(&used[..n]);
        let start = q + win;
        let want = self.streams.planner().limited(i, (win * 2).min(maxw));
        let issued = self.pipeline_ahead(start, want, write);
        // Without a window ahead, the stream's next fault is at `start`.
        self.streams
            .planner()
            .moved(i, start as i64, issued.max(win));
    }

    /// Request the window of a forward stream that starts at `start` ahead
    /// of the program: up to `want` pages, as the region's record allows.
    /// Returns how many were requested.
    pub(crate) fn pipeline_ahead(&self, start: usize, want: usize, write: bool) -> usize {
        let want = self.streams.planner().pipeline_window(start as u64, want);
        if want > 1 {
            self.prefetch_async(start, want, write)
        } else {
            0
        }
    }

    /// Request up to `want` pages from `start` on, without waiting: the
    /// consecutive pages that are absent, held by the backend, on one
    /// connection and not advised RANDOM. `write`: a write stream's pages are
    /// installed writable and dirty (sparing a write-protect fault each).
    /// Returns how many were requested.
    pub(crate) fn prefetch_async(&self, start: usize, want: usize, write: bool) -> usize {
        let slot = match self.streams.slots().try_acquire_async() {
            Some(s) => s,
            None => {
                // Held by triggers of streams the program left, perhaps.
                self.unpark_all();
                match self.streams.slots().try_acquire_async() {
                    Some(s) => s,
                    None => return 0,
                }
            }
        };
        let run = farmem_sys::usize_from(self.backend.route_run(start as u64)).min(want);
        let mut list = [0u64; MAX_BATCH];
        let mut k = 0;
        while k < run && start + k < self.arena.npages() {
            let q = start + k;
            let w = self.arena.table().load(q);
            let ok = w.state() == State::Absent
                && w.has(page::ON_SERVER)
                && !w.has(page::ADV_RANDOM)
                && next(w, Event::ClaimAsync).is_ok_and(|nw| self.arena.table().cas(q, w, nw));
            if !ok {
                break;
            }
            list[k] = q as u64;
            self.trace(Kind::Prefetch, q, Why::Pipelined as u8);
            k += 1;
        }
        if k == 0 {
            return 0;
        }
        // As a demand fetch does: the request first, then the evictions it
        // makes necessary, so that the window is on the wire sooner.
        let spare = self.budget.try_take(k);
        if !spare {
            self.make_room(k);
        }
        // Where a write stream expects its next fault, the window comes in
        // writable, as a demand window does (`dirty`).
        let write = write || self.writable_ahead(start, start + k, k);
        let buf = slot.buf();
        // From here the slot belongs to the request: its completion parks
        // the first page there, and whoever unparks it gives the slot back.
        let token = Token::window(slot.sent(), k, start, write).pack();
        let timed = self.span();
        // SAFETY: the slot's buffer (MAX_BATCH pages) belongs to this request until
        // its first page is unparked; nothing else writes it meanwhile.
        match unsafe { self.backend.read_async(&list[..k], buf, token) } {
            Ok(true) => {}
            Ok(false) => {
                // SAFETY: as above; the read fills k pages of the slot now.
                let dst = unsafe { std::slice::from_raw_parts_mut(buf, k * PAGE_SIZE) };
                if let Err(e) = self.backend.read(&list[..k], dst) {
                    self.fatal_backend("prefetch", start, &e);
                }
                self.finish_async(token);
            }
            Err(e) => self.fatal_backend("prefetch", start, &e),
        }
        self.charge(timed, Phase::Fetch);
        if spare {
            self.refill();
        }
        self.observe.stats().prefetched.add(k as u64);
        self.observe.stats().prefetch_async.add(k as u64);
        k
    }

    /// Install the pages of a completed asynchronous read (called by the
    /// thread that received it, whichever that is) — all but the first.
    ///
    /// The first page is the stream's trigger: reads of installed pages raise
    /// no fault, so if it were installed too, a window that arrived before the
    /// program got there would leave nothing to request the next one, and
    /// the stream would start over from one page. It stays IN_FLIGHT, *parked*
    /// in its slot, until the program faults on it ([`Runtime::unpark`]): a
    /// fault without any waiting, which requests the next window.
    pub(crate) fn finish_async(&self, token: u64) {
        let t = Token::unpack(token);
        if t.demand {
            // A demand read: its faulting thread installs it.
            self.streams.slots().arrive(t.slot);
            return;
        }
        if t.pages > 1 {
            self.install_from_slot(t.slot, 1, t.first + 1, t.pages - 1, t.dirty);
        }
        self.streams.slots().park(t);
    }

    /// Install page `p` if it is a parked trigger. Returns false if it is not
    /// (its request is still on the wire, or another thread took it).
    pub(crate) fn unpark(&self, p: usize) -> bool {
        let Some((slot, t)) = self.streams.slots().take_parked(|t| t.first == p) else {
            return false;
        };
        self.install_from_slot(slot.index(), 0, t.first, 1, t.dirty);
        true
    }

    /// Install every parked trigger: under budget pressure, or when every
    /// asynchronous slot is held by streams the program left.
    pub(crate) fn unpark_all(&self) {
        while let Some((slot, t)) = self.streams.slots().take_parked(|_| true) {
            self.install_from_slot(slot.index(), 0, t.first, 1, t.dirty);
        }
    }

    /// Install `k` pages at `first` from page `offset` of slot `slot` (a
    /// pipelined window, received by whichever thread drained it).
    fn install_from_slot(&self, slot: usize, offset: usize, first: usize, k: usize, dirty: bool) {
        let pages: [usize; MAX_BATCH] = std::array::from_fn(|i| first + i);
        let src: [usize; MAX_BATCH] = std::array::from_fn(|i| offset + i);
        self.install(
            &pages[..k],
            &src[..k],
            self.streams.slots().buf(slot),
            dirty,
            true,
        );
        self.observe.stats().pages_fetched.add(k as u64);
    }
}

/// The backend's completion function: install a finished asynchronous read.
pub(crate) fn complete_async(token: u64) {
    if let Some(rt) = crate::get() {
        rt.finish_async(token);
    }
}
