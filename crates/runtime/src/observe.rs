//! What the program's far memory shows the world: the counters, the board
//! `farmem stat` reads them from, and the policy trace when asked for.

use crate::publish::Board;
use crate::stats::Stats;
use crate::trace::Tracer;

pub(crate) struct Observe {
    /// The counters; they live on `board`.
    pub(crate) stats: &'static Stats,
    /// The counters as `farmem stat` sees them (see [`crate::publish`]).
    pub(crate) board: Board,
    /// `FARMEM_TRACE`: the policy trace, when asked for.
    pub(crate) tracer: Option<Tracer>,
}
