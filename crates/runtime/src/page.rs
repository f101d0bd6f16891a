//! The page lifecycle as an explicit state machine.
//!
//! Every far page has one 32-bit word in the page table (4 bytes of local
//! memory per far page). Its low 3 bits are the [`State`]; flags and a pin
//! count share the rest:
//!
//! ```text
//!  bits 0-2  state          Absent | Fetching | Clean | MakingDirty | Dirty | Evicting
//!  bit  3    ON_SERVER      the backend holds this page's latest evicted content
//!  bit  4    PREFETCHED     fetched ahead of demand and not yet seen used
//!  bit  5    ALLOCATED      inside a live fm_alloc region
//!  bits 6-8  advice         SEQUENTIAL, RANDOM, READ_MOSTLY
//!  bit  9    SECOND_CHANCE  a READ_MOSTLY or prefetched page already passed over
//!                           once by eviction
//!  bit 10    IN_FLIGHT      Fetching by an asynchronous prefetch: any thread may
//!                           complete it by draining the page's connection
//!  bit 11    HELD           Absent, but its content is in the local hold (see
//!                           `hold.rs`): a fault reinstalls it without the network
//!  bit 12    HELD_DIRTY     the held content is newer than the backend's
//!  bit 13    HIDDEN         under the program's PROT_NONE (see below)
//!  bit 14    STALE          evicted with a dirty neighbour, out of its turn: its
//!                           entry in the replacement queues is still there
//!  bit 15    WASTED         Absent or Fetching: last evicted while still
//!                           PREFETCHED (brought in ahead, never seen used)
//!  bits 16-31 pins          > 0: never evicted (FM_ADV_PIN, or a system call in flight)
//! ```
//!
//! ```text
//!            claim (fault / prefetch)          installed{dirty}
//!   Absent ──────────────────────────▶ Fetching ─────────────────▶ Clean / Dirty
//!     ▲                                                              │      ▲
//!     │ evicted{written_back}                       wp fault (write) │      │ made dirty
//!     │                                                              ▼      │
//!   Evicting ◀──────────── evict start (pins == 0) ───────── Clean/Dirty  MakingDirty
//! ```
//!
//! Fetching, MakingDirty and Evicting are *owned* states: the thread whose
//! compare-and-swap entered one is the only one that issues the ioctls for that
//! page and the only one that leaves the state. Every other thread that meets
//! an owned state waits. That ownership is what makes the kernel operations on
//! a page (copy in, write-protect off, write-protect on + zap) never interleave.

use thiserror::Error;

pub const STATE_MASK: u32 = 0b111;
pub const ON_SERVER: u32 = 1 << 3;
pub const PREFETCHED: u32 = 1 << 4;
pub const ALLOCATED: u32 = 1 << 5;
pub const ADV_SEQUENTIAL: u32 = 1 << 6;
pub const ADV_RANDOM: u32 = 1 << 7;
pub const ADV_READ_MOSTLY: u32 = 1 << 8;
pub const SECOND_CHANCE: u32 = 1 << 9;
pub const IN_FLIGHT: u32 = 1 << 10;
pub const HELD: u32 = 1 << 11;
pub const HELD_DIRTY: u32 = 1 << 12;
/// Under a protection the program set that forbids reading (`PROT_NONE`,
/// see `remap`): never claimed or pinned, so never installed where neither
/// the program nor eviction (which copies a page out by its address) could
/// read it. Eviction and the hold go on as usual.
pub const HIDDEN: u32 = 1 << 13;
/// Evicted beside a dirty victim of its block (`eviction.rs`), out of its
/// turn: the page's entry in the replacement queues was left where it was.
/// Whichever comes first under the queues' lock, the page's next admission
/// or the queues reaching that entry, clears the mark; the entry then serves
/// the readmitted page, or is dropped.
pub const STALE: u32 = 1 << 14;
/// The page was last evicted while still PREFETCHED: a stream's window
/// left before its stream got there. Kept until the page is installed
/// again, so that the fault that brings it back can say so to the
/// prefetch planner (`readahead`).
pub const WASTED: u32 = 1 << 15;
pub const ADVICE_MASK: u32 = ADV_SEQUENTIAL | ADV_RANDOM | ADV_READ_MOSTLY;
pub const PIN_SHIFT: u32 = 16;
pub const PIN_ONE: u32 = 1 << PIN_SHIFT;
pub const PIN_MAX: u32 = 0xFFFF;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum State {
    /// Not mapped. Content is on the backend (ON_SERVER) or all zero.
    Absent = 0,
    /// Being fetched and installed by its owner.
    Fetching = 1,
    /// Mapped write-protected; equal to the backend copy (or zero).
    Clean = 2,
    /// Owner is removing write protection after the first write.
    MakingDirty = 3,
    /// Mapped writable; newer than the backend copy.
    Dirty = 4,
    /// Owner is writing it back (if dirty) and unmapping it.
    Evicting = 5,
}

impl State {
    fn from_bits(b: u32) -> State {
        match b & STATE_MASK {
            0 => State::Absent,
            1 => State::Fetching,
            2 => State::Clean,
            3 => State::MakingDirty,
            4 => State::Dirty,
            _ => State::Evicting,
        }
    }

    /// States in which the page is mapped and its content is valid.
    pub fn is_resident(self) -> bool {
        matches!(self, State::Clean | State::MakingDirty | State::Dirty)
    }

    /// States owned by one thread; others must wait.
    pub fn is_owned(self) -> bool {
        matches!(self, State::Fetching | State::MakingDirty | State::Evicting)
    }
}

/// One page-table word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageWord(pub u32);

impl PageWord {
    pub fn state(self) -> State {
        State::from_bits(self.0)
    }
    pub fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }
    pub fn pins(self) -> u32 {
        self.0 >> PIN_SHIFT
    }
    fn with_state(self, s: State) -> PageWord {
        PageWord((self.0 & !STATE_MASK) | s as u32)
    }
}

/// What happens to a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A thread takes an Absent page to fetch it (demand fault or prefetch).
    Claim {
        prefetch: bool,
    },
    /// A thread takes an Absent page for an asynchronous prefetch: the reply
    /// is installed by whichever thread next drains the connection, so the
    /// page is owned by that request rather than by a thread.
    ClaimAsync,
    /// The owner installed the page; `dirty` when it was mapped writable.
    Installed {
        dirty: bool,
    },
    /// A write hit a Clean (write-protected) page; the thread takes it.
    WriteFault,
    /// The owner removed write protection.
    MadeDirty,
    /// An evictor takes a resident, unpinned page.
    EvictStart,
    /// An evictor takes a resident, unpinned page beside a dirty victim of
    /// its block, leaving its queue entry behind (see [`STALE`]).
    EvictNeighbour,
    /// An evictor holds an absent page (never one in the hold) while it
    /// write-protects a span of victims around it, so that no other thread
    /// installs the page inside that span.
    Reserve,
    /// The evictor lets a reserved page go, unchanged.
    Unreserve,
    /// The owner unmapped the page; `written_back` when it sent the content.
    Evicted {
        written_back: bool,
    },
    /// The owner unmapped the page and kept its content in the hold; `dirty`
    /// when that content is newer than the backend's.
    Held {
        dirty: bool,
    },
    /// The prefetched page was seen used.
    PrefetchUsed,
    /// Eviction passed over a READ_MOSTLY clean page, or a prefetched page
    /// not yet seen used, once.
    SecondChance,
    Pin,
    Unpin,
}

#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[error("page transition {event:?} is not allowed from {from:?}")]
pub struct BadTransition {
    pub from: State,
    pub event: Event,
}

/// The transition function: the only place that decides page states.
pub fn next(w: PageWord, event: Event) -> Result<PageWord, BadTransition> {
    let bad = Err(BadTransition {
        from: w.state(),
        event,
    });
    if !w.has(ALLOCATED) {
        return bad;
    }
    if w.has(HIDDEN) && matches!(event, Event::Claim { .. } | Event::ClaimAsync | Event::Pin) {
        return bad;
    }
    Ok(match (w.state(), event) {
        // A held page's content is only in the hold: a prefetch would fetch
        // the backend's (older, or no) copy over it.
        (State::Absent, Event::Claim { prefetch: true } | Event::ClaimAsync) if w.has(HELD) => {
            return bad
        }
        (State::Absent, Event::Claim { prefetch }) => {
            let w = w.with_state(State::Fetching);
            if prefetch {
                PageWord(w.0 | PREFETCHED)
            } else {
                w
            }
        }
        (State::Absent, Event::ClaimAsync) => {
            PageWord(w.0 | PREFETCHED | IN_FLIGHT).with_state(State::Fetching)
        }
        // A prefetched page installed writable (a write stream's window)
        // stays PREFETCHED: writes to it raise no fault, so only its stream
        // going past it shows it used, as for a read stream's pages.
        // A page reinstalled from the hold with newer content than the
        // backend's must come back Dirty, or its next eviction would drop it.
        (State::Fetching, Event::Installed { dirty: false }) if w.has(HELD_DIRTY) => return bad,
        (State::Fetching, Event::Installed { dirty }) => {
            PageWord(w.0 & !(IN_FLIGHT | HELD | HELD_DIRTY | WASTED)).with_state(if dirty {
                State::Dirty
            } else {
                State::Clean
            })
        }
        (State::Clean, Event::WriteFault) => {
            PageWord(w.0 & !PREFETCHED).with_state(State::MakingDirty)
        }
        (State::MakingDirty, Event::MadeDirty) => w.with_state(State::Dirty),
        (State::Clean | State::Dirty, Event::EvictStart) if w.pins() == 0 => {
            w.with_state(State::Evicting)
        }
        (State::Clean | State::Dirty, Event::EvictNeighbour) if w.pins() == 0 && !w.has(STALE) => {
            PageWord(w.0 | STALE).with_state(State::Evicting)
        }
        (State::Absent, Event::Reserve) if !w.has(HELD) => w.with_state(State::Evicting),
        (State::Evicting, Event::Unreserve) if !w.has(HELD) => w.with_state(State::Absent),
        // Out of the hold for good.
        (State::Absent, Event::EvictStart) if w.pins() == 0 && w.has(HELD) => {
            w.with_state(State::Evicting)
        }
        // A held page that was dirty must be written back on its way out.
        (
            State::Evicting,
            Event::Evicted {
                written_back: false,
            },
        ) if w.has(HELD_DIRTY) => return bad,
        (State::Evicting, Event::Evicted { written_back }) => {
            let server = if written_back { ON_SERVER } else { 0 };
            let wasted = if w.has(PREFETCHED) { WASTED } else { 0 };
            PageWord((w.0 | server | wasted) & !(PREFETCHED | SECOND_CHANCE | HELD | HELD_DIRTY))
                .with_state(State::Absent)
        }
        (State::Evicting, Event::Held { dirty }) if !w.has(HELD) => {
            let d = if dirty { HELD_DIRTY } else { 0 };
            PageWord((w.0 | HELD | d) & !SECOND_CHANCE).with_state(State::Absent)
        }
        (_, Event::PrefetchUsed) if w.has(PREFETCHED) => PageWord(w.0 & !PREFETCHED),
        (State::Clean, Event::SecondChance) if w.has(ADV_READ_MOSTLY) && !w.has(SECOND_CHANCE) => {
            PageWord(w.0 | SECOND_CHANCE)
        }
        // A prefetched page not yet seen used: its stream is probably still
        // on its way to it (a program with many streams).
        (State::Clean | State::Dirty, Event::SecondChance)
            if w.has(PREFETCHED) && !w.has(SECOND_CHANCE) =>
        {
            PageWord(w.0 | SECOND_CHANCE)
        }
        (_, Event::Pin) if w.pins() < PIN_MAX => PageWord(w.0 + PIN_ONE),
        (_, Event::Unpin) if w.pins() > 0 => PageWord(w.0 - PIN_ONE),
        _ => return bad,
    })
}

/// Whether evicting from state `s` must write the page back.
pub fn needs_writeback(s: State) -> bool {
    s == State::Dirty
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One of each event, for the tests that try every event on any word.
    const EVENTS: [Event; 15] = [
        Event::Claim { prefetch: true },
        Event::Installed { dirty: false },
        Event::WriteFault,
        Event::MadeDirty,
        Event::EvictStart,
        Event::Evicted { written_back: true },
        Event::PrefetchUsed,
        Event::SecondChance,
        Event::Pin,
        Event::Unpin,
        Event::ClaimAsync,
        Event::Held { dirty: true },
        Event::EvictNeighbour,
        Event::Reserve,
        Event::Unreserve,
    ];

    fn fresh() -> PageWord {
        PageWord(ALLOCATED)
    }

    #[test]
    fn fetch_write_evict_cycle() {
        let w = next(fresh(), Event::Claim { prefetch: false }).unwrap();
        let w = next(w, Event::Installed { dirty: false }).unwrap();
        assert_eq!(w.state(), State::Clean);
        let w = next(w, Event::WriteFault).unwrap();
        let w = next(w, Event::MadeDirty).unwrap();
        assert!(needs_writeback(w.state()));
        let w = next(w, Event::EvictStart).unwrap();
        let w = next(w, Event::Evicted { written_back: true }).unwrap();
        assert_eq!(w.state(), State::Absent);
        assert!(w.has(ON_SERVER));
    }

    #[test]
    fn pinned_pages_are_not_evicted() {
        let w = next(fresh(), Event::Claim { prefetch: false }).unwrap();
        let w = next(w, Event::Installed { dirty: true }).unwrap();
        let w = next(w, Event::Pin).unwrap();
        assert!(next(w, Event::EvictStart).is_err());
        let w = next(w, Event::Unpin).unwrap();
        assert!(next(w, Event::EvictStart).is_ok());
    }

    /// A hidden page (the program's PROT_NONE) is never brought in or
    /// pinned, but a resident one still leaves, its content written back.
    #[test]
    fn hidden_pages_leave_but_never_come_in() {
        let hidden = PageWord(ALLOCATED | HIDDEN);
        for e in [
            Event::Claim { prefetch: false },
            Event::Claim { prefetch: true },
            Event::ClaimAsync,
            Event::Pin,
        ] {
            assert!(next(hidden, e).is_err(), "{e:?}");
        }
        let w = next(fresh(), Event::Claim { prefetch: false }).unwrap();
        let w = next(w, Event::Installed { dirty: true }).unwrap();
        let w = PageWord(w.0 | HIDDEN);
        let w = next(w, Event::EvictStart).unwrap();
        let w = next(w, Event::Evicted { written_back: true }).unwrap();
        assert!(w.has(ON_SERVER) && w.has(HIDDEN) && w.state() == State::Absent);
    }

    #[test]
    fn unallocated_pages_take_no_event() {
        assert!(next(PageWord(0), Event::Claim { prefetch: false }).is_err());
    }

    /// The model: where the newest content of one page lives.
    #[derive(Debug, Clone)]
    struct Model {
        latest: u64,
        mapped: Option<u64>,
        held: Option<u64>,
        server: Option<u64>,
        writable: bool,
        pins: u32,
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Read,
        Write,
        Evict,
        Pin,
        Unpin,
        Prefetch,
        AsyncPrefetch,
        /// Evict into the hold.
        Hold,
        /// Evict a held page for good.
        Recycle,
        /// Evict beside a dirty victim of the block (marked STALE).
        Neighbour,
        /// Hold an absent page while a span around it is write-protected.
        Reserve,
        /// The page's next admission (or its queue entry's drop) clears STALE.
        ClearStale,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Read),
            Just(Op::Write),
            Just(Op::Evict),
            Just(Op::Pin),
            Just(Op::Unpin),
            Just(Op::Prefetch),
            Just(Op::AsyncPrefetch),
            Just(Op::Hold),
            Just(Op::Recycle),
            Just(Op::Neighbour),
            Just(Op::Reserve),
            Just(Op::ClearStale)
        ]
    }

    proptest! {
        /// Drive the real state machine the way the runtime does (fault,
        /// install, write-protect fault, evict with write-back only from
        /// Dirty) while a model tracks content versions. Every read must
        /// see the newest version: no lost write, no stale or zero page.
        #[test]
        fn no_lost_write_no_stale_read(ops in proptest::collection::vec(op(), 1..200)) {
            let mut w = fresh();
            let mut m = Model { latest: 0, mapped: None, held: None, server: None, writable: false, pins: 0 };
            for op in ops {
                match op {
                    Op::Read | Op::Write | Op::Prefetch | Op::AsyncPrefetch => {
                        let is_write = matches!(op, Op::Write);
                        if w.state() == State::Absent && w.has(HELD) {
                            if matches!(op, Op::Prefetch | Op::AsyncPrefetch) {
                                // Refused: the content is only in the hold.
                                prop_assert!(next(w, Event::Claim { prefetch: true }).is_err(), "prefetch claimed a held page");
                                prop_assert!(next(w, Event::ClaimAsync).is_err());
                                continue;
                            }
                            let held_dirty = w.has(HELD_DIRTY);
                            w = next(w, Event::Claim { prefetch: false }).unwrap();
                            m.mapped = m.held.take();
                            // The runtime installs writable if the fault wrote or the held copy was dirty.
                            let dirty = is_write || held_dirty;
                            w = next(w, Event::Installed { dirty }).unwrap();
                            m.writable = dirty;
                        } else if w.state() == State::Absent {
                            w = if matches!(op, Op::AsyncPrefetch) {
                                let f = next(w, Event::ClaimAsync).unwrap();
                                prop_assert!(f.has(IN_FLIGHT));
                                f
                            } else {
                                next(w, Event::Claim { prefetch: matches!(op, Op::Prefetch) }).unwrap()
                            };
                            // Fetch: from the server if ON_SERVER, else zeros (version 0).
                            let content = if w.has(ON_SERVER) { m.server.expect("ON_SERVER without server copy") } else { 0 };
                            m.mapped = Some(content);
                            w = next(w, Event::Installed { dirty: is_write }).unwrap();
                            m.writable = is_write;
                        } else if is_write && w.state() == State::Clean {
                            w = next(w, Event::WriteFault).unwrap();
                            w = next(w, Event::MadeDirty).unwrap();
                            m.writable = true;
                        }
                        prop_assert!(!w.has(IN_FLIGHT));
                        if matches!(op, Op::Prefetch | Op::AsyncPrefetch) { continue; }
                        prop_assert_eq!(m.mapped, Some(m.latest), "read saw stale data");
                        if is_write {
                            prop_assert!(m.writable && w.state() == State::Dirty);
                            m.latest += 1;
                            m.mapped = Some(m.latest);
                        }
                    }
                    Op::Evict | Op::Neighbour if w.has(HELD) => {}
                    Op::Evict | Op::Neighbour => match next(w, if matches!(op, Op::Evict) { Event::EvictStart } else { Event::EvictNeighbour }) {
                        Ok(ev) => {
                            prop_assert_eq!(m.pins, 0);
                            let wb = needs_writeback(w.state());
                            if wb { m.server = m.mapped; }
                            w = next(ev, Event::Evicted { written_back: wb }).unwrap();
                            m.mapped = None;
                            m.writable = false;
                            // After eviction the newest content must be recoverable.
                            let recoverable = if w.has(ON_SERVER) { m.server } else { Some(0) };
                            prop_assert_eq!(recoverable, Some(m.latest), "eviction lost a write");
                        }
                        Err(_) => prop_assert!(m.pins > 0 || !w.state().is_resident() || (matches!(op, Op::Neighbour) && w.has(STALE))),
                    },
                    Op::Reserve => match next(w, Event::Reserve) {
                        Ok(r) => {
                            prop_assert!(w.state() == State::Absent && !w.has(HELD));
                            // Nobody claims (a fault, a prefetch, a pinned touch) or evicts a reserved page.
                            prop_assert!(next(r, Event::Claim { prefetch: false }).is_err(), "a reserved page was claimed");
                            prop_assert!(next(r, Event::Claim { prefetch: true }).is_err(), "a reserved page was prefetched");
                            prop_assert!(next(r, Event::ClaimAsync).is_err());
                            prop_assert!(next(r, Event::EvictStart).is_err());
                            prop_assert!(next(r, Event::EvictNeighbour).is_err());
                            prop_assert!(next(r, Event::Reserve).is_err());
                            let back = next(r, Event::Unreserve).unwrap();
                            prop_assert_eq!(back, w, "a reservation changed the page");
                        }
                        Err(_) => prop_assert!(w.state() != State::Absent || w.has(HELD)),
                    },
                    Op::ClearStale => { w = PageWord(w.0 & !STALE); }
                    Op::Hold => match next(w, Event::EvictStart) {
                        Ok(ev) if w.state().is_resident() => {
                            prop_assert_eq!(m.pins, 0);
                            w = next(ev, Event::Held { dirty: w.state() == State::Dirty }).unwrap();
                            m.held = m.mapped.take();
                            m.writable = false;
                            prop_assert_eq!(m.held, Some(m.latest), "the hold lost a write");
                        }
                        Ok(_) => {}
                        Err(_) => prop_assert!(m.pins > 0 || !w.state().is_resident()),
                    },
                    Op::Recycle => {
                        if !w.has(HELD) { continue; }
                        match next(w, Event::EvictStart) {
                            Ok(ev) => {
                                let wb = w.has(HELD_DIRTY);
                                prop_assert!(next(ev, Event::Evicted { written_back: false }).is_err() || !wb, "a dirty held page left unwritten");
                                if wb { m.server = m.held; }
                                m.held = None;
                                w = next(ev, Event::Evicted { written_back: wb }).unwrap();
                                let recoverable = if w.has(ON_SERVER) { m.server } else { Some(0) };
                                prop_assert_eq!(recoverable, Some(m.latest), "recycling the hold lost a write");
                            }
                            Err(_) => prop_assert!(m.pins > 0),
                        }
                    }
                    Op::Pin => { w = next(w, Event::Pin).unwrap(); m.pins += 1; }
                    Op::Unpin => {
                        if m.pins > 0 { w = next(w, Event::Unpin).unwrap(); m.pins -= 1; }
                        else { prop_assert!(next(w, Event::Unpin).is_err()); }
                    }
                }
                prop_assert_eq!(w.pins(), m.pins);
            }
        }

        /// WASTED is set by the eviction of a page still PREFETCHED (never
        /// seen used), cleared by its next install, and kept by every other
        /// event: the fault that brings the page back reads it.
        #[test]
        fn wasted_marks_a_prefetched_page_evicted_unused(bits in any::<u32>(), ev in 0usize..15) {
            let w = PageWord(bits | ALLOCATED);
            let events = EVENTS;
            if let Ok(n) = next(w, events[ev]) {
                match events[ev] {
                    Event::Evicted { .. } => {
                        prop_assert_eq!(n.has(WASTED), w.has(PREFETCHED) || w.has(WASTED));
                    }
                    Event::Installed { .. } => prop_assert!(!n.has(WASTED)),
                    _ => prop_assert_eq!(n.has(WASTED), w.has(WASTED)),
                }
            }
        }

        /// No event ever changes the ALLOCATED bit or the advice bits.
        #[test]
        fn events_keep_allocation_and_advice(bits in any::<u32>(), ev in 0usize..15) {
            let w = PageWord(bits | ALLOCATED);
            let events = EVENTS;
            if let Ok(n) = next(w, events[ev]) {
                prop_assert!(n.has(ALLOCATED));
                prop_assert_eq!(n.0 & ADVICE_MASK, w.0 & ADVICE_MASK);
            }
        }
    }
}
