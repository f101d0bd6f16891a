//! Rendezvous of memory servers through a shared directory.
//!
//! A job launcher (`mpirun`, `srun`, a Slurm heterogeneous job) starts
//! `farmem serve --rendezvous DIR` on N nodes. Each server finds its rank and
//! the job's size in the launcher's environment ([`Launch::detect`]), binds,
//! and publishes one file, `DIR/rank-R.json`, written under a temporary name
//! and renamed into place so that a reader sees all of it or none
//! ([`publish`]). A client given `@DIR` ([`wait`]) waits until every rank of
//! the newest job has published and answers, then stripes over them in rank
//! order. farmem links no MPI: the launcher's environment variables and a
//! shared filesystem are all it needs.
//!
//! Stale entries: a job that ended without removing its files (a killed
//! server never runs its clean-up) leaves them behind. Each entry names its
//! job, so entries of an earlier job are told apart from the current one's;
//! and a complete job whose servers do not accept connections is not used,
//! so the client goes on waiting for the job that is starting.

mod entry;
mod launch;
mod wait;

pub use entry::{advertised, node_address, publish, Entry, Published};
pub use launch::Launch;
pub use wait::{wait, Found};

use std::io;
use std::path::PathBuf;
use thiserror::Error;

/// The `format` field of every entry.
pub const FORMAT: &str = "farmem-rendezvous-1";
/// Most ranks in one job.
pub const MAX_SIZE: u32 = 65_536;
/// Longest job identifier.
pub(crate) const MAX_JOB_LEN: usize = 128;

#[derive(Debug, Error)]
pub enum RendezvousError {
    #[error("cannot tell this server's rank: {0}")]
    NoRank(String),
    #[error("{what} {given:?}: {why}")]
    Invalid {
        what: &'static str,
        given: String,
        why: String,
    },
    #[error("cannot write the rendezvous directory {dir}: {source}; give a directory that every server rank can write, on a filesystem the client can read (a shared home or scratch directory)")]
    Publish { dir: PathBuf, source: io::Error },
    #[error("cannot read the rendezvous directory {dir}: {source}")]
    Read { dir: PathBuf, source: io::Error },
    #[error("no address of this node to publish: {0}; name one with --listen ADDR:0")]
    NoAddress(String),
    #[error("{0}")]
    Timeout(String),
}

#[cfg(test)]
mod tests;
