//! What the program's far memory shows the world: the counters, the board
//! `farmem stat` reads them from, and the policy trace when asked for.

use crate::publish::Board;
use crate::stats::Stats;
use crate::trace::Tracer;

pub(crate) struct Observe {
    /// The counters; they live on `board`.
    stats: &'static Stats,
    /// The counters as `farmem stat` sees them (see [`crate::publish`]).
    board: Board,
    /// `FARMEM_TRACE`: the policy trace, when asked for.
    tracer: Option<Tracer>,
}

impl Observe {
    pub(crate) fn new(stats: &'static Stats, board: Board, tracer: Option<Tracer>) -> Observe {
        Observe {
            stats,
            board,
            tracer,
        }
    }

    pub(crate) fn stats(&self) -> &'static Stats {
        self.stats
    }

    pub(crate) fn board(&self) -> &Board {
        &self.board
    }

    pub(crate) fn tracer(&self) -> Option<&Tracer> {
        self.tracer.as_ref()
    }
}
