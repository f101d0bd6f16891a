//! The hold: a software accessed bit for pages on their way out.
//!
//! This kernel gives user space no access bits, so a page read again and
//! again while resident looks, to the replacement queues, exactly like one
//! never touched after it came in: both leave probation in turn, and the
//! reused one comes back only by a far refault. The hold catches that reuse
//! cheaply. An evicted page is not dropped at once: its content is copied
//! into a small local pool and it is unmapped (Absent with the HELD flag).
//! If the program touches it while it is held, the fault reinstalls it from
//! the pool (a local copy, no network) and the queues learn it was reused:
//! it goes to the protected queue. Only when its slot is needed is a held
//! page evicted for good (written back then, if dirty).
//!
//! It is DAMON's sampling idea, applied where the decision is made: the pages
//! sampled are exactly the ones about to leave. The pool is `FARMEM_HOLD`
//! percent of the budget, taken from it (held pages are local memory).
//!
//! Slots are recycled in clock order (a hand over the slots): close to the
//! order pages entered, without a queue that reinstalled pages would leave
//! holes in.

use crate::sync::SpinLock;
use farmem_sys::mem::Mapping;
use farmem_sys::PAGE_SIZE;
use std::io;

pub(crate) struct Hold {
    map: Mapping,
    slots: usize,
    inner: SpinLock<Inner>,
}

struct Inner {
    /// Per slot: the page held there + 1, or 0 when free.
    owner: Vec<u32>,
    /// Per slot: the eviction clock when its page left the queues, so that a
    /// reuse in the hold is judged by its real refault distance.
    stamp: Vec<u32>,
    free: Vec<u32>,
    hand: usize,
}

impl Hold {
    /// A hold of `slots` pages (0: no hold).
    pub(crate) fn new(slots: usize) -> io::Result<Hold> {
        let map = Mapping::anonymous(slots.max(1) * PAGE_SIZE, true)?;
        let slots_u32 = u32::try_from(slots).unwrap_or(u32::MAX);
        Ok(Hold {
            map,
            slots,
            inner: SpinLock::new(Inner {
                owner: vec![0; slots],
                stamp: vec![0; slots],
                free: (0..slots_u32).rev().collect(),
                hand: 0,
            }),
        })
    }

    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Slot `i`'s page of memory.
    pub(crate) fn buf(&self, i: u32) -> *mut u8 {
        self.map
            .as_ptr()
            .wrapping_add(farmem_sys::usize_from(u64::from(i)) * PAGE_SIZE)
    }

    pub(crate) fn free_slots(&self) -> usize {
        self.inner.lock().free.len()
    }

    /// A free slot for page `p`, which left the queues at eviction clock
    /// `stamp`, or None when the hold is full.
    pub(crate) fn take(&self, p: u32, stamp: u32) -> Option<u32> {
        let mut h = self.inner.lock();
        let i = h.free.pop()?;
        h.owner[i as usize] = p.wrapping_add(1);
        h.stamp[i as usize] = stamp;
        Some(i)
    }

    /// Return slot `i` to the free list; its page's eviction stamp.
    pub(crate) fn give_back(&self, i: u32) -> u32 {
        let mut h = self.inner.lock();
        if h.owner[i as usize] != 0 {
            h.owner[i as usize] = 0;
            h.free.push(i);
        }
        h.stamp[i as usize]
    }

    /// The next occupied slot at the clock hand, and its page (the next to
    /// leave the hold); the hand moves past it. The caller checks the page is
    /// still held there.
    pub(crate) fn next_out(&self) -> Option<(u32, u32)> {
        let mut h = self.inner.lock();
        let n = h.owner.len();
        for _ in 0..n {
            let i = h.hand;
            h.hand = (h.hand + 1) % n;
            let o = h.owner[i];
            if o != 0 {
                return Some((u32::try_from(i).unwrap_or(u32::MAX), o - 1));
            }
        }
        None
    }
}
