//! `farmem numa`: NUMA topology, placement plans and placement checks.
//!
//! - [`topology`]: nodes, their CPUs, memory and distances, from a sysfs root
//!   (the real `/sys`, or a fixture tree in tests).
//! - [`plan`]: placements in numactl's terms and the plans built from them:
//!   the X×Y matrix (memory on node X, threads on node Y; seed 000) and the
//!   policy comparison (seed 003).
//! - [`verify`]: where a process's pages actually are (`numa_maps`).
//! - [`run`]: running a command under a placement.
//! - [`matrix`]: a measurement run under every (memory node, CPU node)
//!   placement, and where its pages landed.
//! - [`xy`]: a workload timed in every cell of the X×Y plan, with its
//!   slowdown against local memory (typed results).
//! - [`policies`]: a command under every policy, its rate over time.

pub mod matrix;
pub mod plan;
pub mod policies;
pub mod run;
pub mod topology;
pub mod verify;
pub mod xy;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum NumaError {
    #[error("cannot read the NUMA topology under {root}: {why}")]
    Topology { root: String, why: String },
    #[error("{0:?} is not a CPU or node list (write e.g. 0-3,8,10-11)")]
    BadList(String),
    #[error("node {node} does not exist (this machine has nodes {have})")]
    NoSuchNode { node: usize, have: String },
    #[error("cannot start {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("{0}")]
    Workload(String),
}
