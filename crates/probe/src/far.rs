//! Far tiers measured directly through a backend: one-page round trip, and
//! read and write throughput by transfer size, 4 KiB to 4 MiB (Nuzura's
//! Fig. 3). A transfer is one `Backend::read`/`write` call of that size.
//! A transfer larger than 256 KiB (the runtime's batch limit) is issued as
//! consecutive requests of at most 256 KiB, all in flight at once, as the
//! runtime's pipelined prefetch issues them: striped over several servers,
//! they are served in parallel. (Writes never wait for their
//! acknowledgement; reads are started asynchronously and then awaited.)

use crate::chase::{Buffer, PageMode};
use crate::{quantile, ProbeError};
use farmem_runtime::backend::Backend;
use farmem_runtime::config::MAX_BATCH;
use serde::{Deserialize, Serialize};
use std::time::Instant;

const PAGE: usize = farmem_sys::PAGE_SIZE;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rtt {
    pub samples: usize,
    pub p50_us: f64,
    pub p99_us: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    pub transfer_bytes: u64,
    pub read_mbps: f64,
    pub write_mbps: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tier {
    pub name: String,
    pub description: String,
    pub rtt: Rtt,
    pub curve: Vec<Throughput>,
}

/// Transfer sizes measured: 4 KiB, 8 KiB, … 4 MiB.
pub fn transfer_sizes() -> Vec<usize> {
    (0..=10).map(|k| PAGE << k).collect()
}

fn io(
    b: &dyn Backend,
    first: u64,
    pages: usize,
    buf: &mut [u8],
    write: bool,
) -> Result<(), ProbeError> {
    let mut done = 0;
    let mut started = false;
    while done < pages {
        let at = first + done as u64;
        let n = (pages - done)
            .min(MAX_BATCH)
            .min(usize::try_from(b.route_run(at)).unwrap_or(usize::MAX));
        let list: Vec<u64> = (0..n as u64).map(|k| at + k).collect();
        let chunk = &mut buf[done * PAGE..(done + n) * PAGE];
        if write {
            let slices: Vec<&[u8]> = chunk.chunks(PAGE).collect();
            b.write(&list, &slices)?;
        } else if n < pages
            // SAFETY: `chunk` is part of `buf`, which the caller holds and
            // nothing touches until `progress_all` below has received
            // every reply (the backend has no completion function here).
            && unsafe { b.read_async(&list, chunk.as_mut_ptr(), 0)? }
        {
            started = true;
        } else {
            b.read(&list, chunk)?;
        }
        done += n;
    }
    if started {
        b.progress_all()?;
    }
    Ok(())
}

/// Write pages `0..set_pages` once, so that every read finds data.
pub(crate) fn fill(b: &dyn Backend, set_pages: usize) -> Result<(), ProbeError> {
    let map = Buffer::new(MAX_BATCH * PAGE, PageMode::Small)?;
    // SAFETY: the mapping is ours, of that length, alive for this function.
    let buf = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
    buf.fill(0xA5);
    let mut p = 0;
    while p < set_pages {
        let n = (set_pages - p).min(MAX_BATCH);
        io(b, p as u64, n, buf, true)?;
        p += n;
    }
    Ok(())
}

/// Read and write throughput at one transfer size over the first
/// `set_pages` pages: at least `min_bytes` and 0.2 s each way.
fn throughput_at(
    b: &dyn Backend,
    size: usize,
    set_pages: usize,
    min_bytes: usize,
) -> Result<Throughput, ProbeError> {
    let map = Buffer::new(size, PageMode::Small)?;
    // SAFETY: the mapping is ours, of that length, alive for this function.
    let big = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
    big.fill(0x5A);
    let pages = size / PAGE;
    let mut rate = [0.0f64; 2];
    for (k, write) in [false, true].into_iter().enumerate() {
        let t = Instant::now();
        let mut moved = 0usize;
        let mut next = 0usize;
        while moved < min_bytes || t.elapsed().as_secs_f64() < 0.2 {
            if next + pages > set_pages {
                next = 0;
            }
            io(b, next as u64, pages, &mut big[..size], write)?;
            next += pages;
            moved += size;
        }
        rate[k] = moved as f64 / t.elapsed().as_secs_f64() / 1e6;
    }
    Ok(Throughput {
        transfer_bytes: size as u64,
        read_mbps: rate[0],
        write_mbps: rate[1],
    })
}

/// The far tier's bandwidth ceiling: read and write throughput with 4 MiB
/// transfers (the largest, pipelined), over a set of `set_bytes`.
pub fn ceiling(
    b: &dyn Backend,
    set_bytes: usize,
    min_bytes: usize,
) -> Result<Throughput, ProbeError> {
    let set_pages = set_bytes / PAGE;
    fill(b, set_pages)?;
    throughput_at(b, 4 << 20, set_pages, min_bytes)
}

/// Measure one backend. `set_bytes` of pages are written first and used for
/// every read; each size moves at least `min_bytes` and runs at least 0.2 s.
pub fn measure(
    name: &str,
    b: &dyn Backend,
    set_bytes: usize,
    rtt_samples: usize,
    min_bytes: usize,
    mut progress: impl FnMut(),
) -> Result<Tier, ProbeError> {
    let set_pages = set_bytes / PAGE;
    // Page-aligned buffers: a file backend with O_DIRECT requires them.
    let buf_map = Buffer::new(MAX_BATCH * PAGE, PageMode::Small)?;
    // SAFETY: the mapping is ours, of that length, alive for this function.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf_map.as_ptr(), buf_map.len()) };
    fill(b, set_pages)?;
    // One-page round trips at pseudo-random pages of the set.
    let mut lat = Vec::with_capacity(rtt_samples);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..rtt_samples {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let t = Instant::now();
        b.read(&[x % set_pages as u64], &mut buf[..PAGE])?;
        lat.push(t.elapsed().as_nanos() as f64 / 1e3);
    }
    progress();
    let rtt = Rtt {
        samples: rtt_samples,
        p50_us: quantile(&mut lat, 0.5),
        p99_us: quantile(&mut lat, 0.99),
    };
    let mut curve = Vec::new();
    for size in transfer_sizes() {
        curve.push(throughput_at(b, size, set_pages, min_bytes)?);
        progress();
    }
    Ok(Tier {
        name: name.into(),
        description: b.describe(),
        rtt,
        curve,
    })
}
