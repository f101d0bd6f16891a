//! Fetch slots: page-sized buffers that replies are received into before
//! they are installed, one slot per fetch at a time. A demand fetch holds a
//! [`Slot`] for the length of its fault; an asynchronous read holds an
//! [`AsyncSlot`] until its request is sent, and from then on the slot
//! belongs to the request: its completion parks the window's first page
//! there, and whoever unparks it ([`Slots::take_parked`]) gets the guard
//! back. Either guard gives its slot back when dropped.

use crate::sync::Backoff;
use crate::MAX_BATCH;
use farmem_sys::mem::Mapping;
use farmem_sys::PAGE_SIZE;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

pub(crate) const FETCH_SLOTS: usize = 64;
/// A slot's busy flag, alone on its cache line.
#[repr(align(64))]
#[derive(Default)]
struct Flag(AtomicBool);

/// Marks a parked slot entry (a token may be 0: slot 0, page 0).
const PARKED: u64 = 1 << 62;

/// What an asynchronous read tells its completion, carried by the backend
/// as one `u64` ([`Token::pack`]): the slot its pages land in, how many,
/// the first, and whether it is a demand read (its faulting thread installs
/// it) or a prefetched window (installed dirty or clean).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) slot: usize,
    pub(crate) pages: usize,
    pub(crate) first: usize,
    pub(crate) demand: bool,
    pub(crate) dirty: bool,
}

/// The first page: 39 bits (the arena has at most 2^38 pages).
const FIRST_MASK: u64 = (1 << 39) - 1;
const DEMAND: u64 = 1 << 61;
const DIRTY: u64 = 1 << 63;

impl Token {
    /// A prefetched window of `pages` from `first`, into slot `slot`.
    pub(crate) fn window(slot: usize, pages: usize, first: usize, dirty: bool) -> Token {
        Token {
            slot,
            pages,
            first,
            demand: false,
            dirty,
        }
    }

    /// A demand read of `pages` from `first`, into slot `slot`.
    pub(crate) fn demand(slot: usize, pages: usize, first: usize) -> Token {
        Token {
            slot,
            pages,
            first,
            demand: true,
            dirty: false,
        }
    }

    /// slot (8 bits) | pages (8 bits) | first (39 bits) | demand (bit 61) |
    /// dirty (bit 63); bit 62 is left to mark a parked entry.
    pub(crate) fn pack(self) -> u64 {
        debug_assert!(self.slot < 256 && self.pages < 256);
        self.slot as u64
            | ((self.pages as u64) << 8)
            | (((self.first as u64) & FIRST_MASK) << 16)
            | if self.demand { DEMAND } else { 0 }
            | if self.dirty { DIRTY } else { 0 }
    }

    pub(crate) fn unpack(t: u64) -> Token {
        let field = |shift: u32, mask: u64| farmem_sys::usize_from((t >> shift) & mask);
        Token {
            slot: field(0, 0xFF),
            pages: field(8, 0xFF),
            first: field(16, FIRST_MASK),
            demand: t & DEMAND != 0,
            dirty: t & DIRTY != 0,
        }
    }
}

pub(crate) struct Slots {
    map: Mapping,
    busy: Vec<Flag>,
    /// Slots held by asynchronous reads. At most half, so that a demand
    /// fault (which waits for a slot) never waits on requests in flight that
    /// only a later drain would complete.
    in_flight: AtomicUsize,
    /// Per slot: the token of a read whose first page is parked there
    /// (see `Runtime::finish_async`), or 0.
    parked: Vec<AtomicU64>,
    /// Per slot: a demand read sent without waiting has arrived (see
    /// `Runtime::read_overlapped`).
    arrived: Vec<AtomicBool>,
}

/// A demand fetch's slot, given back when dropped.
pub(crate) struct Slot<'a> {
    slots: &'a Slots,
    i: usize,
}

/// An asynchronous read's slot, given back when dropped unless its request
/// was sent ([`AsyncSlot::sent`]).
pub(crate) struct AsyncSlot<'a> {
    slots: &'a Slots,
    i: usize,
}

impl Slots {
    pub(crate) fn new() -> io::Result<Slots> {
        Ok(Slots {
            map: Mapping::anonymous(Slots::bytes(), true)?,
            busy: (0..FETCH_SLOTS).map(|_| Flag::default()).collect(),
            in_flight: AtomicUsize::new(0),
            parked: (0..FETCH_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            arrived: (0..FETCH_SLOTS).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// The size of the slots' mapping.
    pub(crate) fn bytes() -> usize {
        FETCH_SLOTS * MAX_BATCH * PAGE_SIZE
    }

    /// The start of the slots' mapping (for a backend to register).
    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// A free slot, waiting for one if all are taken.
    pub(crate) fn acquire(&self) -> Slot<'_> {
        // Each thread starts at its own slot, and each flag has its own
        // cache line: two threads faulting at once then take their slots
        // without fighting over a line (one line for all 64 flags, and a
        // `gettid` call per fault to pick the start, were 0.6% and 0.3% of
        // GAPBS BFS's CPU at a quarter; docs/benchmarks.md).
        let start = crate::counter::thread_number();
        let backoff = Backoff::new();
        loop {
            for i in 0..self.busy.len() {
                let k = (start + i) % self.busy.len();
                if self.busy[k]
                    .0
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Slot { slots: self, i: k };
                }
            }
            backoff.snooze();
        }
    }

    /// A free slot, or None at once when all are taken or half are held by
    /// asynchronous reads (for prefetches that are worth doing only if they
    /// cost no waiting).
    pub(crate) fn try_acquire_async(&self) -> Option<AsyncSlot<'_>> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.busy.len() / 2 {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let k = (0..self.busy.len()).find(|&k| {
            self.busy[k]
                .0
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        if k.is_none() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        k.map(|i| AsyncSlot { slots: self, i })
    }

    /// Start of slot i's buffer of MAX_BATCH pages.
    pub(crate) fn buf(&self, i: usize) -> *mut u8 {
        self.map.as_ptr().wrapping_add(i * MAX_BATCH * PAGE_SIZE)
    }

    /// The completed read `t` parks its first page in its slot.
    pub(crate) fn park(&self, t: Token) {
        self.parked[t.slot].store(t.pack() | PARKED, Ordering::Release);
    }

    /// Take the first parked read that satisfies `which`: its slot's guard
    /// (dropping it gives the slot back) and its token.
    pub(crate) fn take_parked(
        &self,
        which: impl Fn(&Token) -> bool,
    ) -> Option<(AsyncSlot<'_>, Token)> {
        for (i, e) in self.parked.iter().enumerate() {
            let t = e.load(Ordering::Acquire);
            if t == 0 {
                continue;
            }
            let token = Token::unpack(t & !PARKED);
            if which(&token)
                && e.compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return Some((AsyncSlot { slots: self, i }, token));
            }
        }
        None
    }

    /// Slot `i`'s demand read has landed in its buffer (called by whichever
    /// thread received it).
    pub(crate) fn arrive(&self, i: usize) {
        self.arrived[i].store(true, Ordering::Release);
    }
}

impl Slot<'_> {
    pub(crate) fn index(&self) -> usize {
        self.i
    }

    /// The slot's buffer of MAX_BATCH pages.
    pub(crate) fn buf(&self) -> *mut u8 {
        self.slots.buf(self.i)
    }

    /// A demand read sent without waiting is on its way into this slot: not
    /// arrived yet.
    pub(crate) fn expect(&self) {
        self.slots.arrived[self.i].store(false, Ordering::Relaxed);
    }

    pub(crate) fn has_arrived(&self) -> bool {
        self.slots.arrived[self.i].load(Ordering::Acquire)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.busy[self.i].0.store(false, Ordering::Release);
    }
}

impl AsyncSlot<'_> {
    pub(crate) fn index(&self) -> usize {
        self.i
    }

    pub(crate) fn buf(&self) -> *mut u8 {
        self.slots.buf(self.i)
    }

    /// Its request is on the wire: the slot now belongs to the request until
    /// its first page is unparked. Returns the slot's index.
    pub(crate) fn sent(self) -> usize {
        let i = self.i;
        std::mem::forget(self);
        i
    }
}

impl Drop for AsyncSlot<'_> {
    fn drop(&mut self) {
        self.slots.busy[self.i].0.store(false, Ordering::Release);
        self.slots.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_roundtrip() {
        for t in [
            Token::window(0, 1, 0, false),
            Token::window(63, 64, (1 << 38) - 1, true),
            Token::demand(5, 3, 12345),
        ] {
            assert_eq!(Token::unpack(t.pack()), t);
            assert_eq!(t.pack() & PARKED, 0, "bit 62 stays free for parking");
        }
    }

    #[test]
    fn guards_give_their_slots_back() {
        let s = Slots::new().unwrap();
        let held: Vec<_> = (0..FETCH_SLOTS).map(|_| s.acquire()).collect();
        assert!(s.try_acquire_async().is_none(), "every slot is held");
        drop(held);
        // Asynchronous reads may hold half the slots, and no more.
        let a: Vec<_> = (0..FETCH_SLOTS / 2)
            .map(|_| s.try_acquire_async().unwrap())
            .collect();
        assert!(s.try_acquire_async().is_none());
        drop(a);
        // A sent request keeps its slot until its parked page is taken.
        let sent = s.try_acquire_async().unwrap();
        let i = sent.index();
        let i = {
            assert_eq!(sent.sent(), i);
            i
        };
        let window = Token::window(i, 2, 7, false);
        s.park(window);
        assert!(s.take_parked(|t| t.first == 8).is_none());
        let (g, t) = s.take_parked(|t| t.first == 7).unwrap();
        assert_eq!((g.index(), t), (i, window));
        assert!(s.busy[i].0.load(Ordering::Acquire));
        drop(g);
        assert!(!s.busy[i].0.load(Ordering::Acquire));
        assert_eq!(s.in_flight.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_demand_slot_says_when_its_read_arrived() {
        let s = Slots::new().unwrap();
        let g = s.acquire();
        g.expect();
        assert!(!g.has_arrived());
        s.arrive(g.index());
        assert!(g.has_arrived());
    }
}
