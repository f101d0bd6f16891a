//! What runs ahead of and behind the program: the prefetch planner, the
//! fetch slots pages land in, and the write streams over clean pages.

use crate::dirty::WriteStreams;
use crate::readahead::Planner;
use crate::slots::Slots;
use crate::sync::SpinLock;

pub(crate) struct Streams {
    pub(crate) slots: Slots,
    /// What to prefetch: see [`crate::readahead`].
    pub(crate) planner: SpinLock<Planner>,
    /// Write streams over clean pages: see [`crate::dirty`].
    pub(crate) writes: WriteStreams,
}
