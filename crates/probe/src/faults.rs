//! Page-fault costs: native first touch (4 KiB and THP), re-touch of present
//! pages, and every kind of far-memory fault through the runtime.

use crate::chase::{Buffer, PageMode};
use crate::{quantile, ProbeError};
use farmem_runtime::{Advice, Runtime};
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultCost {
    pub kind: String,
    pub samples: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Bytes one fault brings in (4096, or 2 MiB for THP).
    pub bytes: u64,
}

fn cost(kind: &str, mut v: Vec<f64>, bytes: u64) -> FaultCost {
    FaultCost {
        kind: kind.into(),
        samples: v.len(),
        p50_us: quantile(&mut v, 0.5),
        p99_us: quantile(&mut v, 0.99),
        bytes,
    }
}

/// Time one access to each page address in `addrs` (µs each).
fn touch_each(addrs: impl Iterator<Item = usize>, write: bool) -> Vec<f64> {
    addrs
        .map(|a| {
            let t = Instant::now();
            // SAFETY: every address is inside a live mapping of the caller.
            unsafe {
                if write {
                    std::ptr::write_volatile(a as *mut u8, 1);
                } else {
                    std::ptr::read_volatile(a as *const u8);
                }
            }
            t.elapsed().as_nanos() as f64 / 1e3
        })
        .collect()
}

/// A deterministic shuffle of 0..n.
fn shuffled(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, farmem_sys::usize_from(x % (i as u64 + 1)));
    }
    v
}

/// Native fault costs: first touch of 4 KiB pages, first touch of THP
/// (2 MiB per fault), and re-touch of present pages (TLB miss only).
pub fn native(samples: usize) -> Result<Vec<FaultCost>, ProbeError> {
    let mut out = Vec::new();
    let small = Buffer::new(samples * 4096, PageMode::Small)?;
    let base = small.as_ptr() as usize;
    let order = shuffled(samples);
    out.push(cost(
        "first touch, 4 KiB page",
        touch_each(order.iter().map(|&i| base + i * 4096), true),
        4096,
    ));
    out.push(cost(
        "re-touch, present 4 KiB page",
        touch_each(order.iter().map(|&i| base + i * 4096), false),
        4096,
    ));
    let huge_n = (samples / 64).clamp(16, 256);
    let thp = Buffer::new(huge_n << 21, PageMode::Thp)?;
    let tb = thp.as_ptr() as usize;
    out.push(cost(
        "first touch, THP (2 MiB)",
        touch_each((0..huge_n).map(|i| tb + (i << 21)), true),
        2 << 20,
    ));
    Ok(out)
}

/// Far-memory fault costs through the runtime: a never-written page (zero
/// fill, no network), a fetch from the backend, and the first write to a
/// clean resident page (write-protect fault). Prefetch is off (FM_ADV_RANDOM)
/// so each access is one fault.
pub fn far(rt: &Runtime, samples: usize) -> Result<Vec<FaultCost>, ProbeError> {
    let bytes = samples * 4096;
    if farmem_sys::usize_from(rt.budget_bytes()) < bytes {
        return Err(ProbeError::Invalid(format!(
            "the local budget ({}) must hold the {samples} sample pages; raise FARMEM_LOCAL",
            farmem_runtime::config::format_size(rt.budget_bytes())
        )));
    }
    let p = rt.alloc(bytes)? as usize;
    rt.advise(p, bytes, Advice::Random)?;
    let order = shuffled(samples);
    let mut out = vec![cost(
        "far: zero-fill (never written)",
        touch_each(order.iter().map(|&i| p + i * 4096), true),
        4096,
    )];
    rt.advise(p, bytes, Advice::DontNeed)?;
    out.push(cost(
        "far: fetch from backend (read)",
        touch_each(order.iter().map(|&i| p + i * 4096), false),
        4096,
    ));
    out.push(cost(
        "far: first write to a clean page",
        touch_each(order.iter().map(|&i| p + i * 4096), true),
        4096,
    ));
    rt.free(p as *mut u8)?;
    Ok(out)
}
