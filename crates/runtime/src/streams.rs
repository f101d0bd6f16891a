//! What runs ahead of and behind the program: the prefetch planner, the
//! fetch slots pages land in, and the write streams over clean pages.

use crate::dirty::WriteStreams;
use crate::readahead::Planner;
use crate::slots::Slots;
use crate::sync::{SpinGuard, SpinLock};

pub(crate) struct Streams {
    slots: Slots,
    /// What to prefetch: see [`crate::readahead`].
    planner: SpinLock<Planner>,
    /// Write streams over clean pages: see [`crate::dirty`].
    writes: WriteStreams,
}

impl Streams {
    pub(crate) fn new(slots: Slots, planner: Planner) -> Streams {
        Streams {
            slots,
            planner: SpinLock::new(planner),
            writes: WriteStreams::new(),
        }
    }

    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The prefetch planner, locked.
    pub(crate) fn planner(&self) -> SpinGuard<'_, Planner> {
        self.planner.lock()
    }

    pub(crate) fn writes(&self) -> &WriteStreams {
        &self.writes
    }
}
