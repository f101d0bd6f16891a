//! `farmem bench`: the seeds' workloads, or any program, at every
//! memory-expansion ratio, on farmem and on what a user has today (Linux
//! swap, zram, a file mapping on the SSD), in one run, against all-local.
//!
//! For expansion E the local budget is SIZE/E: farmem gets `--local SIZE/E`;
//! the kernel baselines run the same program in a memory cgroup limited to
//! SIZE/E plus a fixed allowance for the process itself (program text, small
//! allocations, page tables), so both see the same memory for the data.
//!
//! Modules: `systems` (the baselines as types that set a kernel facility up
//! and tear it down on drop), `workload` (the built-in programs' command
//! lines), `bound` (the least traffic any policy must move, and the far
//! tier's ceiling), `harness` (the expansion loop), `worst` (the paging
//! worst case `farmem demo --random` runs in-process). Each cell's program runs
//! under `farmem_sys::child`'s runner, as `farmem numa`'s do.

pub mod bound;
pub mod harness;
pub mod systems;
pub mod workload;
pub mod worst;

pub use harness::{run, Params, Progress, Recorded, Report, RunResult};
pub use systems::System;
pub use workload::Workload;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    /// A parameter out of range; the message says which and what to give.
    #[error("{0}")]
    Invalid(String),
    /// Setting a baseline up failed (needs root, a module, free space).
    #[error("{what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Unavailable(String),
    /// The program ran but did not finish as it should.
    #[error("{0}")]
    Failed(String),
    #[error("interrupted; everything set up was removed")]
    Interrupted,
    #[error("{cmd} on {system} at {expansion}x computed a WRONG result: {line}")]
    WrongResult {
        cmd: String,
        system: &'static str,
        expansion: f64,
        line: String,
    },
    #[error("measuring the far tier's bandwidth ceiling: {0}")]
    Ceiling(String),
}

impl BenchError {
    fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
        let what = what.into();
        move |source| BenchError::Setup { what, source }
    }
}

/// Why a cell has no figure, in a few words for tables and plots; the full
/// reason is printed below the table and kept in the JSON.
pub fn failure_words(why: &str) -> String {
    if why.contains("OOM") {
        "OOM-killed".into()
    } else if let Some(t) = why.strip_prefix("timed out after ") {
        format!("timed out (> {t})")
    } else if let Some(at) = why.find("(signal: ") {
        let sig = why[at + 9..].split(' ').next().unwrap_or("?");
        format!("killed (signal {sig})")
    } else if why.contains("failed") {
        "failed".into()
    } else {
        "unavailable".into()
    }
}

/// The value of `key=` in a workload's `result` or `timed` line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}
