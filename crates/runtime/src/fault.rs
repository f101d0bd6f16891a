//! The fault path, run in the faulting thread's SIGBUS handler: claim the
//! page, take room in the budget, fetch the page and its prefetch window
//! in one batch (evicting while the request travels where the free reserve
//! has room, before it otherwise), install them with `UFFDIO_COPY`, and hand
//! them to the replacement queues. No other thread is woken: on this class of
//! machine a wake-up costs ~100 µs, a whole fault ~5–20 µs.

use crate::cost::Phase;
use crate::install::ZERO;
use crate::page::{self, next, Event, State};
use crate::readahead::Plan;
use crate::replacement::{page_u32, Aux as _, Fetched};
use crate::slots::{Slot, Token};
use crate::sync::Backoff;
use crate::trace::{self, Kind};
use crate::{cell_of, Runtime, MAX_BATCH};
use farmem_sys::msg::MsgBuf;
use farmem_sys::now_ns;
use farmem_sys::uffd::CopyOutcome;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;

/// A demand fault's window: the pages claimed (the demand page first, the
/// rest ascending), and how many pages of its stream it covered, claimed or
/// passed over as resident.
struct Window {
    pages: [usize; MAX_BATCH],
    n: usize,
    span: usize,
}

impl Runtime {
    /// Resolve a fault at `addr` in the calling thread.
    ///
    /// Hazard: a page is only ever changed by the thread that moved it into an
    /// owned state (Fetching, MakingDirty, Evicting). Example interleaving
    /// without that rule: thread A takes a write fault on a Clean page and is
    /// about to clear write protection; thread B evicts the page (it is clean,
    /// so it is simply zapped) and thread C faults it back in, write-protected.
    /// A's late "clear write protection" would now make C's fresh page writable
    /// while it is marked Clean: its next write would never be written back.
    /// With MakingDirty, B cannot start evicting until A has finished.
    pub(crate) fn handle_fault(&self, addr: usize, write: bool) {
        let span = self.span();
        self.resolve_fault(addr, write);
        self.charge(span, Phase::Fault);
    }

    /// [`Runtime::handle_fault`]'s work, untimed.
    fn resolve_fault(&self, addr: usize, write: bool) {
        let p = (addr - self.arena.base()) / PAGE_SIZE;
        let t0 = now_ns();
        let backoff = Backoff::new();
        let mut in_flight = false;
        loop {
            let w = self.arena.table().load(p);
            if !w.has(page::ALLOCATED) {
                let mut m = MsgBuf::new();
                let _ = writeln!(
                    m,
                    "farmem: access to far memory at {addr:#x}, which is not allocated (use after fm_free, or out of bounds)"
                );
                farmem_sys::fatal(m.as_bytes());
            }
            match w.state() {
                State::Absent => {
                    let claim = next(w, Event::Claim { prefetch: false });
                    if claim.is_err() && w.has(page::HIDDEN) {
                        // Only farmem's own touch, or a thread racing the
                        // program's own mprotect(PROT_NONE), gets here: the
                        // kernel stops the program's accesses before
                        // userfaultfd sees them.
                        let mut m = MsgBuf::new();
                        let _ = writeln!(
                            m,
                            "farmem: access to far memory at {addr:#x} while the program makes it inaccessible (mprotect PROT_NONE)"
                        );
                        farmem_sys::fatal(m.as_bytes());
                    }
                    if let Ok(n) = claim {
                        if self.arena.table().cas(p, w, n) {
                            let kind = if write {
                                Kind::FaultWrite
                            } else {
                                Kind::FaultRead
                            };
                            if w.has(page::HELD) {
                                self.trace(kind, p, trace::FAULT_FROM_HOLD);
                                self.unhold(p, n, write);
                            } else {
                                let cell = cell_of(addr);
                                self.trace_at(kind, p, 0, cell);
                                self.fetch(p, cell, write);
                            }
                            self.observe.stats().faults.add(1);
                            self.observe.stats().fault_ns.record(now_ns() - t0);
                            return;
                        }
                    }
                }
                State::Clean if write => {
                    if let Ok(n) = next(w, Event::WriteFault) {
                        if self.arena.table().cas(p, w, n) {
                            self.trace(Kind::WriteHit, p, 0);
                            if w.has(page::PREFETCHED) {
                                self.count_used(&[p]);
                            }
                            self.make_dirty(p);
                            return;
                        }
                    }
                }
                // Resolved by another thread meanwhile: retry the access.
                State::Clean | State::Dirty => {
                    if in_flight {
                        // The program waited for a pipelined prefetch: the
                        // page it faulted on is used. Left marked, a trigger
                        // was credited only when a later window of the same
                        // stream walked back over it, so a stream that broke
                        // after it (resident pages kept from a previous
                        // sweep, as in CG) counted it wasted, and its
                        // region's score shrank every window to a probe.
                        self.credit_used(p);
                        self.observe.stats().faults.add(1);
                        self.observe.stats().fault_ns.record(now_ns() - t0);
                    } else {
                        self.observe.stats().spurious.add(1);
                    }
                    return;
                }
                // Requested by an asynchronous prefetch: request the stream's
                // next window, then receive this one ourselves.
                State::Fetching if w.has(page::IN_FLIGHT) => {
                    if !in_flight {
                        in_flight = true;
                        self.trace(Kind::PrefetchWait, p, 0);
                        let span = self.span();
                        self.continue_stream(p, write);
                        self.charge(span, Phase::Plan);
                    }
                    if !self.unpark(p) {
                        let span = self.span();
                        if let Err(e) = self.backend.progress(p as u64) {
                            self.fatal_backend("fetch", p, &e);
                        }
                        self.charge(span, Phase::Fetch);
                    }
                }
                // Another thread owns the page: wait for it.
                State::Fetching | State::MakingDirty | State::Evicting => backoff.snooze(),
            }
        }
    }

    /// Fetch and install demand page `p` (already Fetching, owned by us) and
    /// whatever of its prefetch window can be claimed: plan the window,
    /// claim it, make room, read it, install it, and for a proven forward
    /// stream request the next window ahead.
    pub(crate) fn fetch(&self, p: usize, cell: u8, write: bool) {
        let timed = self.span();
        let plan = self.plan_prefetch(p, cell, self.arena.table().load(p));
        let span = self.window_span(p, &plan);
        let win = self.claim_window(p, &plan, span);
        self.charge(timed, Phase::Plan);
        let n = win.n;
        // With room to spare the request goes out first and the evictions
        // it makes necessary are done while it is on the wire.
        let spare = self.budget.try_take(n);
        if !spare {
            self.make_room(n);
        }
        let slot = self.streams.slots().acquire();
        let (src, fetched, refilled) = self.read_window(&win, &slot, spare);
        // Every page write-protected (clean) unless the fault was a write. A
        // write fault starts (or continues) a write stream: its prefetched
        // pages are installed writable and dirty too, sparing each one a
        // write-protect fault (a sequential writer would take one per page).
        // The cost, when they are not written after all, is a write-back.
        // So does a read where a write stream expects its next fault (a
        // read-modify-write sweep reading ahead of its writes; `dirty`).
        let dirty = write || (plan.stride == 1 && self.writable_ahead(p, p + win.span, n));
        self.install(
            &win.pages[..n],
            &src[..n],
            slot.buf(),
            dirty,
            plan.stream.is_some(),
        );
        drop(slot);
        if spare && !refilled {
            // Nothing was on the wire to hide it behind (a zero-filled
            // window, or a backend that reads synchronously).
            self.refill();
        }
        self.observe.stats().pages_fetched.add(fetched as u64);
        self.observe
            .stats()
            .pages_zero_filled
            .add((n - fetched) as u64);
        self.observe.stats().prefetched.add(n as u64 - 1);
        // A confirmed forward stream whose window was claimed whole: request
        // the next window now, to arrive while the program works on this one.
        if plan.pipeline && win.span == span {
            let timed = self.span();
            let issued = self.pipeline_ahead(p + span, span, write);
            if let (true, Some(i)) = (issued > 0, plan.stream) {
                self.streams.planner().moved(i, (p + span) as i64, issued);
            }
            self.charge(timed, Phase::Plan);
        }
    }

    /// How many pages of its stream `plan`'s window may span. A forward
    /// stream's ends where its connection's run ends, so that the pipelined
    /// windows after it start aligned and can be whole (one asynchronous
    /// request stays on one connection).
    fn window_span(&self, p: usize, plan: &Plan) -> usize {
        let mut want = plan.pages;
        if plan.stride == 1 && plan.stream.is_some() {
            let run = farmem_sys::usize_from(self.backend.route_run(p as u64));
            if run >= 4 && run < want {
                want = run;
            }
        }
        want
    }

    /// Claim the window of the fault at `p`: up to `span` pages of its
    /// stream from `p` on, the absent ones claimed and resident ones passed
    /// over. A loop larger than the budget keeps scattered pages of its last
    /// sweep resident, and a window that stopped at the first of them
    /// fetched a page or two per fault (NPB CG: 670k faults for 1.1M pages
    /// brought in). A page in any other state ends the window there.
    fn claim_window(&self, p: usize, plan: &Plan, span: usize) -> Window {
        let mut win = Window {
            pages: [0; MAX_BATCH],
            n: 1,
            span: 1,
        };
        win.pages[0] = p;
        while win.span < span {
            // Negative or past the arena: the window ends.
            let Ok(q) = usize::try_from(plan.walk.page(win.span as i64)) else {
                break;
            };
            if q >= self.arena.npages() {
                break;
            }
            let w = self.arena.table().load(q);
            if matches!(w.state(), State::Clean | State::Dirty) {
                win.span += 1;
                continue;
            }
            let claimed = w.state() == State::Absent
                && !w.has(page::ADV_RANDOM)
                && next(w, Event::Claim { prefetch: true })
                    .is_ok_and(|nw| self.arena.table().cas(q, w, nw));
            if !claimed {
                break;
            }
            self.trace(Kind::Prefetch, q, plan.why as u8);
            win.pages[win.n] = q;
            win.n += 1;
            win.span += 1;
        }
        if let (Some(i), true) = (plan.stream, win.span < plan.pages) {
            // The window ended early: the stream's next fault comes sooner.
            self.streams.planner().window_ended(i, plan.walk, win.span);
        }
        if plan.walk.backward() {
            // Ascending order lets the pages be fetched and installed in runs.
            win.pages[1..win.n].reverse();
        }
        win
    }

    /// Read the pages of `win` that the backend holds into `slot`, in one
    /// batch; the others (never written back) are zero-filled at install.
    /// Returns each page's source for [`Runtime::install`], how many were
    /// read, and whether the free reserve was refilled while the read was on
    /// the wire (`spare`: room was taken without evicting).
    fn read_window(
        &self,
        win: &Window,
        slot: &Slot,
        spare: bool,
    ) -> ([usize; MAX_BATCH], usize, bool) {
        let mut remote = [0u64; MAX_BATCH];
        let mut src = [ZERO; MAX_BATCH];
        let mut r = 0;
        for (i, &q) in win.pages[..win.n].iter().enumerate() {
            if self.arena.table().load(q).has(page::ON_SERVER) {
                remote[r] = q as u64;
                src[i] = r;
                r += 1;
            }
        }
        if r == 0 {
            return (src, 0, false);
        }
        let refilled = spare && self.read_overlapped(&remote[..r], slot);
        if !refilled {
            let timed = self.span();
            // SAFETY: the slot's buffer (MAX_BATCH pages) is ours while we
            // hold its guard, and nothing else reads or writes it meanwhile.
            let buf = unsafe { std::slice::from_raw_parts_mut(slot.buf(), r * PAGE_SIZE) };
            if let Err(e) = self.backend.read(&remote[..r], buf) {
                self.fatal_backend("fetch", win.pages[0], &e);
            }
            self.charge(timed, Phase::Fetch);
        }
        (src, r, refilled)
    }

    /// Reinstall held page `p` (Fetching, owned by us; `w` its word) from its
    /// slot in the hold: the program reused it on its way out, and the
    /// queues learn that as a refault, without the network. No prefetch.
    fn unhold(&self, p: usize, w: page::PageWord, write: bool) {
        let slot = self.arena.table().aux(page_u32(p));
        self.make_room(1);
        let dirty = write || w.has(page::HELD_DIRTY);
        let timed = self.span();
        // SAFETY: the slot holds this page's content and belongs to it until
        // given back below (recycling passes over pages that are not Absent);
        // the destination page is in the registered arena and owned by us.
        let res = unsafe {
            self.arena.uffd().copy(
                self.addr_of(p),
                self.budget.hold().buf(slot),
                PAGE_SIZE,
                !dirty,
            )
        };
        if !matches!(res, Ok(CopyOutcome::Done)) {
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: cannot reinstall far page {:#x} from the hold: {:?}",
                self.addr_of(p),
                res
            );
            farmem_sys::fatal(m.as_bytes());
        }
        let stamp = self.budget.hold().give_back(slot);
        self.charge(timed, Phase::Install);
        let timed = self.span();
        self.arena.table().must(p, Event::Installed { dirty });
        self.credit_used(p);
        {
            // A refault, judged by its real distance like one from the
            // backend: a hot page's is short, and it is protected.
            let mut queues = self.budget.queues();
            let w = self.arena.table().load(p);
            self.admit(&mut queues, p, w, Some(stamp), Fetched::Alone);
        }
        self.observe.stats().hold_reused.add(1);
        self.charge(timed, Phase::Admit);
    }

    /// Evict until `spare` pages of the budget are free again (one batch at
    /// most), so that the next fault finds room and can send its request at
    /// once. Returns how many pages were evicted.
    pub(crate) fn refill(&self) -> usize {
        let free = self.budget.free();
        if free >= self.budget.spare() {
            return 0;
        }
        let want = (self.budget.spare() - free).max(self.budget.round());
        self.evict(want)
    }

    /// Read `pages` (held by the backend, room already reserved) into
    /// `slot`'s buffer without waiting, evict to refill the free
    /// reserve while the reply is on the wire, then wait for the reply.
    /// Returns false, having sent nothing, where the backend cannot read
    /// without waiting (UCX, a file, pages on more than one connection):
    /// the caller reads synchronously.
    ///
    /// Hazard: the reply may be received by any thread that drains the
    /// connection, including this one inside the eviction (a write-back on
    /// the same connection that must first make room). That thread fills
    /// the slot and marks it arrived; the slot stays ours throughout, and
    /// nothing else reads or writes its buffer. Example: thread A sends its
    /// read on connection 0 and starts evicting; thread B faults on a
    /// parked page of connection 0, drains it, receives A's reply into A's
    /// slot and marks it arrived; A, done evicting, sees the mark and
    /// installs without touching the socket.
    fn read_overlapped(&self, pages: &[u64], slot: &Slot) -> bool {
        let consecutive = pages.windows(2).all(|w| w[1] == w[0] + 1);
        if !consecutive || pages.len() as u64 > self.backend.route_run(pages[0]) {
            return false;
        }
        let timed = self.span();
        slot.expect();
        let token =
            Token::demand(slot.index(), pages.len(), farmem_sys::usize_from(pages[0])).pack();
        // SAFETY: the slot's buffer (MAX_BATCH pages, at least pages.len())
        // is ours until we release the slot, after the reply has arrived;
        // nothing else touches it until then.
        match unsafe { self.backend.read_async(pages, slot.buf(), token) } {
            Ok(true) => {}
            Ok(false) => {
                self.charge(timed, Phase::Fetch);
                return false;
            }
            Err(e) => self.fatal_backend("fetch", farmem_sys::usize_from(pages[0]), &e),
        }
        let evicted = self.refill();
        self.observe.stats().evicted_overlapped.add(evicted as u64);
        while !slot.has_arrived() {
            if let Err(e) = self.backend.progress(pages[0]) {
                self.fatal_backend("fetch", farmem_sys::usize_from(pages[0]), &e);
            }
        }
        self.charge(timed, Phase::Fetch);
        true
    }

    /// Take room for `n` pages in the local budget, evicting as needed.
    pub(crate) fn make_room(&self, n: usize) {
        let start = now_ns();
        let backoff = Backoff::new();
        loop {
            if self.budget.try_take(n) {
                return;
            }
            let want = n.max(self.budget.round());
            if self.evict(want) == 0 {
                // Pages of requests in flight count against the budget but
                // cannot be evicted until they are installed: receive them.
                let timed = self.span();
                if let Err(e) = self.backend.progress_all() {
                    self.fatal_backend("prefetch", 0, &e);
                }
                self.charge(timed, Phase::Fetch);
                self.unpark_all();
                backoff.snooze();
                if now_ns() - start > self.cfg.timeout_ms * 1_000_000 {
                    let mut m = MsgBuf::new();
                    let _ = writeln!(
                        m,
                        "farmem: no room in the local budget ({} pages): all resident far pages are pinned or in use. \
                         Raise FARMEM_LOCAL or pin less.",
                        self.budget.pages()
                    );
                    farmem_sys::fatal(m.as_bytes());
                }
            }
        }
    }
}
