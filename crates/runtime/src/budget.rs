//! The local budget: how many pages may be resident, which ones are, in
//! what order they leave, and the hold they pass through on their way out.

use crate::hold::Hold;
use crate::replacement::Queues;
use crate::sync::SpinLock;
use std::sync::atomic::AtomicUsize;

pub(crate) struct Budget {
    /// Pages that may be resident at once, the hold aside.
    pub(crate) pages: usize,
    /// Pages kept free in the budget (`FARMEM_RESERVE`, at most 1/16 of
    /// it): see `Runtime::refill`.
    pub(crate) spare: usize,
    /// Pages resident or reserved for an install in progress. Never exceeds
    /// `pages`: a fault reserves before it installs (see `reserve`). It
    /// lives on the published board.
    pub(crate) resident: &'static AtomicUsize,
    pub(crate) pinned: AtomicUsize,
    /// The replacement queues. Together they hold exactly the pages whose
    /// state is Clean, MakingDirty or Dirty (so never more than `pages`).
    pub(crate) queues: SpinLock<Queues>,
    /// Pages on their way out, still local: see [`crate::hold`].
    pub(crate) hold: Hold,
}
