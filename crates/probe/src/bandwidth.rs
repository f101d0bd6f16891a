//! Memory bandwidth, STREAM-style: read (sum), write (fill), copy (b = a) and
//! triad (a = b + s·c) over arrays far larger than the caches, with 1..N
//! threads each working on a contiguous slice. Bytes counted as STREAM does
//! (read 8, write 8, copy 16, triad 24 bytes per element; no write-allocate
//! traffic). Best of `repeats` runs, as STREAM reports.

use crate::chase::{Buffer, PageMode};
use crate::ProbeError;
use serde::{Deserialize, Serialize};
use std::sync::Barrier;
use std::time::Instant;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Result {
    pub kernel: String,
    pub threads: usize,
    pub bytes_per_array: u64,
    pub gbps: f64,
}

pub const KERNELS: [&str; 4] = ["read", "write", "copy", "triad"];

fn bytes_per_elem(k: &str) -> f64 {
    match k {
        "read" | "write" => 8.0,
        "copy" => 16.0,
        _ => 24.0,
    }
}

/// Run kernel `k` over elements [lo, hi) of the three arrays.
fn kernel(k: &str, a: *mut f64, b: *mut f64, c: *mut f64, lo: usize, hi: usize) {
    // SAFETY: each thread gets a disjoint [lo, hi) inside the arrays, which
    // live for the whole measurement.
    let (a, b, c) = unsafe {
        (
            std::slice::from_raw_parts_mut(a.add(lo), hi - lo),
            std::slice::from_raw_parts_mut(b.add(lo), hi - lo),
            std::slice::from_raw_parts_mut(c.add(lo), hi - lo),
        )
    };
    match k {
        "read" => {
            // Integer sums vectorise; float sums would be serialised.
            // SAFETY: f64 and u64 have the same size and alignment.
            let w: &[u64] = unsafe { std::slice::from_raw_parts(a.as_ptr().cast(), a.len()) };
            let s = w.iter().fold(0u64, |s, &x| s.wrapping_add(x));
            std::hint::black_box(s);
        }
        "write" => a.fill(1.5),
        "copy" => b.copy_from_slice(a),
        _ => {
            for i in 0..a.len() {
                a[i] = b[i] + 3.0 * c[i];
            }
        }
    }
    std::hint::black_box(a.as_ptr());
}

/// Measure every kernel for each thread count in `threads`.
pub fn measure(
    bytes_per_array: usize,
    threads: &[usize],
    repeats: u32,
    mut progress: impl FnMut(),
) -> std::result::Result<Vec<Result>, ProbeError> {
    if threads.is_empty() || threads.contains(&0) {
        return Err(ProbeError::Invalid(
            "thread counts must be at least 1".into(),
        ));
    }
    let n = bytes_per_array / 8;
    let bufs = [
        Buffer::new(n * 8, PageMode::Thp)?,
        Buffer::new(n * 8, PageMode::Thp)?,
        Buffer::new(n * 8, PageMode::Thp)?,
    ];
    let (a, b, c) = (
        bufs[0].as_ptr().cast::<f64>(),
        bufs[1].as_ptr().cast::<f64>(),
        bufs[2].as_ptr().cast::<f64>(),
    );
    // Fault everything in before timing.
    for p in [a, b, c] {
        // SAFETY: each buffer holds n f64s.
        unsafe { std::slice::from_raw_parts_mut(p, n) }.fill(1.0);
    }
    let mut out = Vec::new();
    for &t in threads {
        for k in KERNELS {
            let mut best = f64::MAX;
            for _ in 0..repeats {
                // Each worker times itself from the common start; the run
                // lasts from the first start to the last end. (Timing from the
                // main thread is wrong when it is descheduled while the
                // workers run, which happens with more threads than CPUs.)
                let barrier = Barrier::new(t);
                let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..t)
                        .map(|i| {
                            let (lo, hi) = (n * i / t, n * (i + 1) / t);
                            let (a, b, c) = (a as usize, b as usize, c as usize);
                            let barrier = &barrier;
                            s.spawn(move || {
                                barrier.wait();
                                let t0 = Instant::now();
                                kernel(k, a as *mut f64, b as *mut f64, c as *mut f64, lo, hi);
                                (t0, Instant::now())
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("bandwidth worker"))
                        .collect()
                });
                let start = spans
                    .iter()
                    .map(|s| s.0)
                    .min()
                    .expect("at least one thread");
                let end = spans
                    .iter()
                    .map(|s| s.1)
                    .max()
                    .expect("at least one thread");
                best = best.min((end - start).as_secs_f64());
            }
            out.push(Result {
                kernel: k.to_string(),
                threads: t,
                bytes_per_array: (n * 8) as u64,
                gbps: n as f64 * bytes_per_elem(k) / best / 1e9,
            });
            progress();
        }
    }
    Ok(out)
}

/// Single-thread read bandwidth at a working set of `bytes` (for the ladder:
/// bandwidth of the level that holds it). Best of `repeats` passes.
pub fn read_at(bytes: usize, repeats: u32) -> std::result::Result<f64, ProbeError> {
    let buf = Buffer::new(bytes, PageMode::Thp)?;
    let n = bytes / 8;
    // SAFETY: the buffer holds n u64s.
    let w = unsafe { std::slice::from_raw_parts_mut(buf.as_ptr().cast::<u64>(), n) };
    w.fill(1);
    let passes = ((256 << 20) / bytes.max(1)).clamp(1, 1 << 16);
    let mut best = f64::MAX;
    for _ in 0..repeats {
        let t = Instant::now();
        for _ in 0..passes {
            let s = w.iter().fold(0u64, |s, &x| s.wrapping_add(x));
            std::hint::black_box(s);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((bytes * passes) as f64 / best / 1e9)
}
