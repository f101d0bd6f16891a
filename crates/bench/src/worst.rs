//! The worst case for paging (`farmem demo --random`): Nuzura's
//! writemem/reread (write 8 bytes in every 64-byte line, then read them back
//! and check) and a random read-modify-write pass, in this process, on far
//! memory from the runtime and on plain local memory, every word checked.

use crate::BenchError;
use farmem_runtime::config::Config;
use farmem_runtime::stats::Snapshot;
use std::time::Instant;

const LINE: usize = 64;

/// One memory kind's pass times, seconds, and the words that came back
/// wrong.
#[derive(Debug, Clone, Copy)]
pub struct Passes {
    pub write: f64,
    pub reread: f64,
    pub random: f64,
    pub errors: u64,
}

impl Passes {
    pub fn total(&self) -> f64 {
        self.write + self.reread + self.random
    }
}

/// Both runs, and what the far one cost.
#[derive(Debug)]
pub struct WorstCase {
    pub size: usize,
    pub budget: u64,
    pub backend: String,
    pub local: Passes,
    pub far: Passes,
    pub stats: Snapshot,
}

fn val(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A line chosen at random: `x` is a random 64-bit word.
fn line_of(x: u64, lines: usize) -> usize {
    // In range: the remainder is below `lines`, a usize.
    #[allow(clippy::cast_possible_truncation)]
    let i = (x % lines as u64) as usize;
    i
}

/// The passes over `n` bytes at `p`, which must read as zero.
fn passes(p: *mut u8, n: usize, updates: u64) -> Passes {
    let lines = n / LINE;
    let at = |i: usize| -> *mut u64 {
        // SAFETY: i < lines, so the word is inside [p, p+n).
        unsafe { p.add(i * LINE).cast::<u64>() }
    };
    let t = Instant::now();
    for i in 0..lines {
        // SAFETY: in bounds (above); the region is ours.
        unsafe { at(i).write_volatile(val(i)) };
    }
    let write = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut errors = 0;
    for i in 0..lines {
        // SAFETY: in bounds.
        if unsafe { at(i).read_volatile() } != val(i) {
            errors += 1;
        }
    }
    let reread = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..updates {
        let i = line_of(xorshift(&mut x), lines);
        // SAFETY: in bounds.
        unsafe { at(i).write_volatile(at(i).read_volatile().wrapping_add(2)) };
    }
    let random = t.elapsed().as_secs_f64();
    // Check the random pass by replaying it on a compact count array.
    let mut adds = vec![0u64; lines];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..updates {
        adds[line_of(xorshift(&mut x), lines)] += 1;
    }
    for (i, &a) in adds.iter().enumerate() {
        // SAFETY: in bounds.
        if unsafe { at(i).read_volatile() } != val(i).wrapping_add(2 * a) {
            errors += 1;
        }
    }
    Passes {
        write,
        reread,
        random,
        errors,
    }
}

/// `size` bytes (at least 16M) with a local budget of `size / expansion`
/// (1 to 64), `updates` random updates: all-local first, then far memory
/// from the runtime `cfg` starts (its budget replaced). `started` hears
/// the region's size, the budget and the backend once the runtime runs.
pub fn run(
    cfg: Config,
    size: u64,
    expansion: f64,
    updates: u64,
    started: impl FnOnce(usize, u64, &str),
) -> Result<WorstCase, BenchError> {
    if !(1.0..=64.0).contains(&expansion) {
        return Err(BenchError::Invalid(format!(
            "--expansion {expansion} is out of range; use 1 to 64"
        )));
    }
    if size < 16 << 20 {
        return Err(BenchError::Invalid("--size must be at least 16M".into()));
    }
    let size = usize::try_from(size)
        .map_err(|_| BenchError::Invalid("--size is beyond this machine".into()))?
        .next_multiple_of(4096);
    // At most `size`: expansion is at least 1.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let local = ((size as f64 / expansion) as u64).next_multiple_of(4096);
    let invalid = |e: farmem_runtime::config::ConfigError| BenchError::Invalid(e.to_string());
    let cfg = cfg
        .with("LOCAL", &local.max(1 << 20).to_string())
        .map_err(invalid)?;
    let rt = farmem_runtime::init(cfg).map_err(|e| BenchError::Failed(e.to_string()))?;
    let failed = |e: farmem_runtime::RuntimeError| BenchError::Failed(e.to_string());
    let (budget, backend) = (rt.budget_bytes(), rt.backend_description());
    started(size, budget, &backend);
    // All-local first, released before the far run.
    let mem = farmem_sys::mem::Mapping::anonymous(size, false)
        .map_err(BenchError::setup("mapping the all-local region"))?;
    let local = passes(mem.as_ptr(), size, updates);
    drop(mem);
    let far = rt.alloc(size).map_err(failed)?;
    let far_passes = passes(far, size, updates);
    let stats = rt.snapshot();
    rt.free(far).map_err(failed)?;
    Ok(WorstCase {
        size,
        budget,
        backend,
        local,
        far: far_passes,
        stats,
    })
}
