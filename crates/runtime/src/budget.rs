//! The local budget: how many pages may be resident, how many are (or are
//! reserved for an install in progress), how many system calls hold
//! pinned, in what order pages leave (the replacement queues), and the
//! hold they pass through on their way out.
//!
//! Its counts change only through the methods here, which keep
//! `resident <= pages` (room is reserved before a page is installed) and
//! pins within [`Budget::pin_limit`].

use crate::hold::Hold;
use crate::replacement::Queues;
use crate::sync::{SpinGuard, SpinLock};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct Budget {
    /// Pages that may be resident at once, the hold aside.
    pages: usize,
    /// Pages kept free (`FARMEM_RESERVE`, at most 1/16 of `pages`): see
    /// `Runtime::refill`.
    spare: usize,
    /// Victims an eviction round chooses at least (`FARMEM_EVICT_BATCH`,
    /// see [`crate::config::eviction_round`]).
    round: usize,
    /// Pages resident or reserved for an install in progress. It lives on
    /// the published board.
    resident: &'static AtomicUsize,
    /// Pages pinned by `FM_ADV_PIN` and by system calls on far buffers.
    pinned: AtomicUsize,
    /// The replacement queues. Together they hold the pages whose state is
    /// Clean, MakingDirty or Dirty (never more than `pages`), plus one entry
    /// for each page marked STALE (never more than `stale_cap`).
    queues: SpinLock<Queues>,
    /// Pages marked STALE (`page::STALE`): entries left in the queues.
    stale: AtomicUsize,
    stale_cap: usize,
    /// Pages evicted with a block per victim the queues chose, ×16, over
    /// recent batches: the queues are asked for fewer victims when blocks
    /// come along, so a batch stays about as large as asked.
    along: AtomicUsize,
    /// Pages on their way out, still local: see [`crate::hold`].
    hold: Hold,
}

impl Budget {
    pub(crate) fn new(
        pages: usize,
        spare: usize,
        round: usize,
        resident: &'static AtomicUsize,
        queues: Queues,
        hold: Hold,
    ) -> Budget {
        Budget {
            pages,
            spare,
            round,
            resident,
            pinned: AtomicUsize::new(0),
            queues: SpinLock::new(queues),
            stale: AtomicUsize::new(0),
            stale_cap: crate::replacement::stale_cap(pages),
            along: AtomicUsize::new(0),
            hold,
        }
    }

    /// Count one more page marked STALE, if the queues have room for its
    /// entry; the caller marks it, or gives the count back with
    /// [`Budget::unstale`].
    pub(crate) fn try_stale(&self) -> bool {
        let mut cur = self.stale.load(Ordering::Acquire);
        while cur < self.stale_cap {
            match self.stale.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
        false
    }

    /// How many victims to ask the queues for, for a batch of `k` pages.
    pub(crate) fn victims_to_choose(&self, k: usize) -> usize {
        (k * 16 / (16 + self.along.load(Ordering::Relaxed))).max(1)
    }

    /// A batch: the queues chose `chosen` victims, `along` more came with
    /// their blocks. A moving average (racy updates only blur it).
    pub(crate) fn chose(&self, chosen: usize, along: usize) {
        if let Some(per_victim) = (along * 16).checked_div(chosen) {
            let now = self.along.load(Ordering::Relaxed);
            let next = (now * 3 + per_victim) / 4;
            // Unchanged (no blocks, none lately): no write to a line every
            // evicting thread reads.
            if next != now {
                self.along.store(next, Ordering::Relaxed);
            }
        }
    }

    /// Pages marked STALE now.
    pub(crate) fn stale(&self) -> usize {
        self.stale.load(Ordering::Acquire)
    }

    /// `n` pages' STALE marks were cleared, and their entries are gone or
    /// serve them again.
    pub(crate) fn unstale(&self, n: usize) {
        self.stale.fetch_sub(n, Ordering::AcqRel);
    }

    pub(crate) fn pages(&self) -> usize {
        self.pages
    }

    pub(crate) fn spare(&self) -> usize {
        self.spare
    }

    /// Victims an eviction round chooses at least.
    pub(crate) fn round(&self) -> usize {
        self.round
    }

    pub(crate) fn resident(&self) -> usize {
        self.resident.load(Ordering::Acquire)
    }

    /// Pages the budget has room for now.
    pub(crate) fn free(&self) -> usize {
        self.pages.saturating_sub(self.resident())
    }

    /// Take room for `n` pages if the budget has it (`Runtime::make_room`
    /// evicts until it does).
    pub(crate) fn try_take(&self, n: usize) -> bool {
        let mut r = self.resident.load(Ordering::Acquire);
        while r + n <= self.pages {
            match self
                .resident
                .compare_exchange_weak(r, r + n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => r = now,
            }
        }
        false
    }

    /// `n` pages left (evicted, freed, or gone to the hold).
    pub(crate) fn release(&self, n: usize) {
        self.resident.fetch_sub(n, Ordering::AcqRel);
    }

    /// The replacement queues, locked.
    pub(crate) fn queues(&self) -> SpinGuard<'_, Queues> {
        self.queues.lock()
    }

    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Most pages all pins together may hold: pins beyond it would leave
    /// `reserve` nothing to evict.
    pub(crate) fn pin_limit(&self) -> usize {
        self.pages * 3 / 4
    }

    /// Pin `n` more pages if that stays within the limit, or if nothing is
    /// pinned (one system call's buffer may always go ahead).
    pub(crate) fn try_pin(&self, n: usize) -> bool {
        let limit = self.pin_limit();
        loop {
            let cur = self.pinned.load(Ordering::Acquire);
            if cur + n > limit && cur != 0 {
                return false;
            }
            if self
                .pinned
                .compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// Pin `n` more pages unless the total would pass the limit.
    pub(crate) fn pin_within_limit(&self, n: usize) -> bool {
        let pinned = self.pinned.fetch_add(n, Ordering::AcqRel) + n;
        if pinned > self.pin_limit() {
            self.pinned.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    pub(crate) fn unpin(&self, n: usize) {
        self.pinned.fetch_sub(n, Ordering::AcqRel);
    }
}
