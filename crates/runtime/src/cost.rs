//! Where a page's time goes (`FARMEM_BREAKDOWN=1`): each part of the page
//! path is timed where it runs, and its *own* time (less the parts timed
//! inside it) is added to its [`Phase`]. The parts nest: a demand fetch's
//! wait may evict, an asynchronous reply may be installed by the thread
//! that drains it, an eviction writes back. Own time keeps every
//! nanosecond in exactly one phase, so the phases add up to the time spent
//! in farmem, and divided by the pages moved they are the per-page cost.
//!
//! Off by default: each timed part then costs one predictable branch. On,
//! two clock reads (~25 ns each here) per part, about ten parts per fault.

use crate::counter::Counter;
use crate::Runtime;
use farmem_sys::now_ns;
use std::cell::Cell;

/// A part of the page path. The order is the one `--stats` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Phase {
    /// The fault handler's own work: the page's state machine, counters,
    /// the trace, choosing what to do.
    Fault,
    /// Planning and claiming the prefetch window.
    Plan,
    /// Reading pages from the backend: requests sent, replies waited for
    /// and received (a memory-file read, a UCX get, a socket round trip).
    Fetch,
    /// Checking received pages against their checksums.
    Verify,
    /// Mapping pages into the program (`UFFDIO_COPY`).
    Install,
    /// Marking installed pages resident and admitting them to the
    /// replacement queues.
    Admit,
    /// A write fault on a clean page: making it (and its write stream)
    /// writable.
    MakeDirty,
    /// Choosing victims in the replacement queues.
    EvictChoose,
    /// Write-protecting dirty victims before their copy is taken.
    EvictProtect,
    /// Checksumming and sending dirty victims to the backend.
    EvictWriteBack,
    /// Copying victims into the hold.
    EvictHold,
    /// Unmapping victims (`MADV_DONTNEED`, with its TLB shootdown).
    EvictUnmap,
    /// Marking victims absent and the budget's bookkeeping.
    EvictRetire,
}

impl Phase {
    pub const COUNT: usize = 13;
    pub const ALL: [Phase; Phase::COUNT] = [
        Phase::Fault,
        Phase::Plan,
        Phase::Fetch,
        Phase::Verify,
        Phase::Install,
        Phase::Admit,
        Phase::MakeDirty,
        Phase::EvictChoose,
        Phase::EvictProtect,
        Phase::EvictWriteBack,
        Phase::EvictHold,
        Phase::EvictUnmap,
        Phase::EvictRetire,
    ];

    /// Its name in `--stats` and in benchmark tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Fault => "fault handler (own)",
            Phase::Plan => "plan + claim window",
            Phase::Fetch => "fetch",
            Phase::Verify => "verify checksums",
            Phase::Install => "install (UFFDIO_COPY)",
            Phase::Admit => "admit to queues",
            Phase::MakeDirty => "write fault on clean",
            Phase::EvictChoose => "evict: choose",
            Phase::EvictProtect => "evict: write-protect",
            Phase::EvictWriteBack => "evict: write back",
            Phase::EvictHold => "evict: into the hold",
            Phase::EvictUnmap => "evict: unmap",
            Phase::EvictRetire => "evict: retire",
        }
    }

    /// Whether the time is paid for pages going out (per page evicted)
    /// rather than coming in (per page installed).
    pub fn outgoing(self) -> bool {
        (self as usize) >= Phase::EvictChoose as usize
    }
}

/// Nanoseconds per phase. `repr(C)`: published with the other counters.
#[repr(C)]
#[derive(Default)]
pub struct Phases {
    ns: [Counter; Phase::COUNT],
}

impl Phases {
    pub fn get(&self) -> [u64; Phase::COUNT] {
        std::array::from_fn(|i| self.ns[i].get())
    }
}

thread_local! {
    // Nanoseconds this thread has charged to any phase. A part's own time
    // is its elapsed time less what was charged while it ran.
    // Const-initialised with no destructor: safe in the signal handler.
    static CHARGED: Cell<u64> = const { Cell::new(0) };
}

/// A timed part in progress (see [`Runtime::span`]).
#[must_use = "a span is charged by Runtime::charge"]
pub(crate) struct Span {
    start: u64,
    charged: u64,
}

impl Runtime {
    /// Start timing a part of the page path; end it with
    /// [`Runtime::charge`]. Free when the breakdown is off.
    #[inline]
    pub(crate) fn span(&self) -> Span {
        if !self.cfg.breakdown {
            return Span {
                start: 0,
                charged: 0,
            };
        }
        Span {
            start: now_ns(),
            charged: CHARGED.get(),
        }
    }

    /// Add the own time of `span` (its elapsed time less the spans charged
    /// inside it) to `phase`.
    #[inline]
    pub(crate) fn charge(&self, span: Span, phase: Phase) {
        if !self.cfg.breakdown {
            return;
        }
        let inside = CHARGED.get().wrapping_sub(span.charged);
        let own = (now_ns() - span.start).saturating_sub(inside);
        self.observe.stats().phases.ns[phase as usize].add(own);
        CHARGED.set(CHARGED.get().wrapping_add(own));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_listed_once_in_order() {
        for (i, p) in Phase::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
        }
        assert!(!Phase::Admit.outgoing());
        assert!(Phase::EvictChoose.outgoing());
        assert!(Phase::EvictRetire.outgoing());
    }
}
