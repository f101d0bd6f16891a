//! `farmem probe`: every memory tier measured the same way, from L1 to
//! another machine's RAM, with the machine and the parameters recorded.
//!
//! - [`chase`]: load latency by pointer chasing (multichase's method).
//! - [`levels`]: cache levels found in a latency curve.
//! - [`bandwidth`]: read, write, copy, triad; 1..N threads.
//! - [`faults`]: page-fault costs, native and through the far-memory runtime.
//! - [`far`]: far tiers (memory servers, SSD file): one-page round trip and
//!   throughput by transfer size (Nuzura's Fig. 3 curve).
//! - [`machine`]: what the numbers were measured on.
//! - [`loaded`]: latency under load, and the far tier under load.
//! - [`suite`]: a whole `farmem probe` run and the ladder that sums it up.

pub mod bandwidth;
pub mod chase;
pub mod far;
pub mod faults;
pub mod json;
pub mod levels;
pub mod loaded;
pub mod machine;
pub mod suite;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("cannot map {bytes} bytes for the measurement: {source}")]
    Map { bytes: u64, source: std::io::Error },
    #[error("no huge pages are reserved: reserve some with `echo N > /proc/sys/vm/nr_hugepages` (as root), or use --pages 4k or thp")]
    NoHugePages,
    #[error("invalid parameter: {0}")]
    Invalid(String),
    #[error(transparent)]
    Runtime(#[from] farmem_runtime::RuntimeError),
    #[error(transparent)]
    Backend(#[from] farmem_runtime::backend::BackendError),
    #[error(transparent)]
    Config(#[from] farmem_runtime::ConfigError),
}

/// The median of a non-empty sample set (sorts it).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Quantile `q` of samples (sorts them).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    // A fraction of the last index; the cast saturates, then clamped.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = ((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1);
    v[i]
}
