//! Load latency by pointer chasing (multichase's method).
//!
//! The working set is a random cyclic chain through its 64-byte lines: each
//! line holds the address of the next. One load depends on the previous, so
//! out-of-order execution cannot overlap them and no prefetcher can guess the
//! next line. The loop is unrolled 16 times and its result goes through an
//! `asm` sink, so the compiler can neither drop nor merge loads. Each size is
//! warmed up (one pass over the chain), then timed `repeats` times for about
//! `target_ms` each; the median is reported. Timer: `clock_gettime
//! (CLOCK_MONOTONIC)` through `std::time::Instant`.
//!
//! Large working sets include TLB misses with 4 KiB pages; `PageMode::Thp`
//! and `PageMode::Huge` take most of them away, so both can be compared.

use crate::levels::Point;
use crate::ProbeError;
use serde::{Deserialize, Serialize};
use std::time::Instant;

pub const LINE: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PageMode {
    /// 4 KiB pages (transparent huge pages refused with MADV_NOHUGEPAGE).
    #[serde(rename = "4k")]
    Small,
    /// Transparent huge pages asked for with MADV_HUGEPAGE.
    Thp,
    /// Reserved huge pages (MAP_HUGETLB); needs vm.nr_hugepages.
    Huge,
}

impl std::str::FromStr for PageMode {
    type Err = String;
    fn from_str(s: &str) -> Result<PageMode, String> {
        match s {
            "4k" | "4K" => Ok(PageMode::Small),
            "thp" => Ok(PageMode::Thp),
            "huge" => Ok(PageMode::Huge),
            _ => Err(format!("{s:?} is not a page mode; use 4k, thp or huge")),
        }
    }
}

impl std::fmt::Display for PageMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PageMode::Small => "4k",
            PageMode::Thp => "thp",
            PageMode::Huge => "huge",
        })
    }
}

/// Memory for a measurement, unmapped on drop.
pub struct Buffer(farmem_sys::mem::Mapping);

impl Buffer {
    pub fn new(bytes: usize, mode: PageMode) -> Result<Buffer, ProbeError> {
        use farmem_sys::mem::{Mapping, Pages};
        let pages = match mode {
            PageMode::Small => Pages::Small,
            PageMode::Thp => Pages::Thp,
            PageMode::Huge => Pages::Huge,
        };
        Mapping::with_pages(bytes, pages).map(Buffer).map_err(|e| {
            if mode == PageMode::Huge {
                ProbeError::NoHugePages
            } else {
                ProbeError::Map {
                    bytes: bytes as u64,
                    source: e,
                }
            }
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A small, fast, seedable generator for the chain order.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Link the first `bytes` of `buf` into one random cycle through all its
/// lines; returns the start.
pub fn build_chain(buf: &Buffer, bytes: usize, seed: u64) -> *const usize {
    let n = (bytes / LINE).max(1);
    // Line indices in 32 bits (half the memory): buffers up to 256 GiB.
    let lines = u32::try_from(n).expect("a chased buffer of at most 256 GiB");
    let mut order: Vec<u32> = (0..lines).collect();
    let mut rng = XorShift(seed | 1);
    for i in (1..n).rev() {
        let j = farmem_sys::usize_from(rng.next() % (i as u64 + 1));
        order.swap(i, j);
    }
    let base = buf.as_ptr() as usize;
    for k in 0..n {
        let from = base + order[k] as usize * LINE;
        let to = base + order[(k + 1) % n] as usize * LINE;
        // SAFETY: both lines lie inside the buffer (order holds line indices < n
        // and n * LINE <= bytes <= buffer length); the word is aligned.
        unsafe { (from as *mut usize).write(to) };
    }
    (base + order[0] as usize * LINE) as *const usize
}

/// Follow the chain `loads` times (rounded up to 16); returns where it ended.
#[inline(never)]
pub fn chase(start: *const usize, loads: u64) -> *const usize {
    let mut p = start;
    for _ in 0..loads.div_ceil(16) {
        // SAFETY: every link of the chain points at another link in the buffer.
        unsafe {
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
            p = *p as *const usize;
        }
    }
    // SAFETY: an empty asm block that "uses" p: the loads must happen.
    unsafe { core::arch::asm!("/* {0} */", in(reg) p, options(nostack, preserves_flags)) };
    p
}

/// Parameters of a latency sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Params {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub pages: PageMode,
    pub repeats: u32,
    pub target_ms: u64,
    pub stride_bytes: u64,
    pub timer: String,
}

impl Params {
    pub fn new(max_bytes: u64, pages: PageMode) -> Params {
        Params {
            min_bytes: 4096,
            max_bytes,
            pages,
            repeats: 5,
            target_ms: 20,
            stride_bytes: LINE as u64,
            timer: "clock_gettime(CLOCK_MONOTONIC)".to_string(),
        }
    }

    /// Working-set sizes: powers of two and the points halfway between.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut b = self.min_bytes.max(4096).next_power_of_two();
        while b <= self.max_bytes {
            v.push(b);
            if b * 3 / 2 <= self.max_bytes {
                v.push(b * 3 / 2);
            }
            b *= 2;
        }
        v
    }
}

/// The seed of the chain [`measure`] builds over `bytes`: the loaded
/// probe chases the same chain.
pub fn chain_seed(bytes: usize) -> u64 {
    0x9E37_79B9_7F4A_7C15 ^ bytes as u64
}

/// Median latency of one working-set size, ns per load.
pub fn measure(buf: &Buffer, bytes: usize, p: &Params) -> f64 {
    let start = build_chain(buf, bytes, chain_seed(bytes));
    let lines = (bytes / LINE) as u64;
    // Warm up: one pass over the chain (at least 64K loads), and calibrate.
    let t = Instant::now();
    let warm = lines.max(1 << 16);
    let mut q = chase(start, warm);
    let per_load = t.elapsed().as_secs_f64() / warm as f64;
    // A non-negative duration ratio; the cast saturates, then clamped.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let loads = ((p.target_ms as f64 / 1e3 / per_load.max(1e-10)) as u64).clamp(1 << 14, 1 << 32);
    let mut samples = Vec::with_capacity(p.repeats as usize);
    for _ in 0..p.repeats {
        let t = Instant::now();
        q = chase(q, loads);
        samples.push(t.elapsed().as_nanos() as f64 / loads.div_ceil(16).saturating_mul(16) as f64);
    }
    crate::median(&mut samples)
}

/// The whole sweep, calling `progress(done, total)` after each size.
pub fn sweep(p: &Params, mut progress: impl FnMut(usize, usize)) -> Result<Vec<Point>, ProbeError> {
    let sizes = p.sizes();
    if sizes.is_empty() {
        return Err(ProbeError::Invalid(format!(
            "--max {} is below the smallest working set (4K)",
            p.max_bytes
        )));
    }
    let buf = Buffer::new(farmem_sys::usize_from(*sizes.last().unwrap()), p.pages)?;
    let mut out = Vec::with_capacity(sizes.len());
    for (i, &b) in sizes.iter().enumerate() {
        out.push(Point {
            bytes: b,
            ns: measure(&buf, farmem_sys::usize_from(b), p),
        });
        progress(i + 1, sizes.len());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_is_one_cycle_through_every_line() {
        let buf = Buffer::new(64 << 10, PageMode::Small).unwrap();
        let n = (64 << 10) / LINE;
        let start = build_chain(&buf, 64 << 10, 7);
        let mut seen = vec![false; n];
        let mut p = start;
        for _ in 0..n {
            let idx = (p as usize - buf.as_ptr() as usize) / LINE;
            assert!(!seen[idx], "line {idx} visited twice");
            seen[idx] = true;
            // SAFETY: p is a link of the chain.
            p = unsafe { *p } as *const usize;
        }
        assert_eq!(p, start, "the chain closes after n loads");
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn sizes_cover_the_range() {
        let s = Params::new(1 << 20, PageMode::Small).sizes();
        assert_eq!(s.first(), Some(&4096));
        assert_eq!(s.last(), Some(&(1 << 20)));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn l1_is_faster_than_a_large_working_set() {
        let p = Params {
            repeats: 3,
            target_ms: 5,
            ..Params::new(64 << 20, PageMode::Small)
        };
        let buf = Buffer::new(64 << 20, PageMode::Small).unwrap();
        let small = measure(&buf, 8 << 10, &p);
        let large = measure(&buf, 64 << 20, &p);
        assert!(
            small > 0.1 && large > 3.0 * small,
            "8K {small} ns, 64M {large} ns"
        );
    }
}
