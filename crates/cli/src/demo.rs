//! `farmem demo`: the quick start's main job.
//!
//! By default a seed's workload, DLM's 7-point stencil (wavefront temporal
//! blocking), over data 4x the local budget: all-local, farmem and Linux
//! swap side by side through the `farmem bench` harness, every point
//! checked against a naive sweep, with the bytes moved against the least
//! any policy must move.
//!
//! `--random`: the worst case instead. Nuzura's writemem/reread (write 8
//! bytes in every 64-byte line, then read them back and check) and a random
//! read-modify-write pass, on far memory served by the embedded loopback
//! server, then on plain local memory; times side by side.

use anyhow::{bail, Result};
use farmem_runtime::config::{format_size, Config};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Data size; the local budget is SIZE / EXPANSION.
    #[arg(long, default_value = "1G", value_parser = crate::size_arg)]
    size: u64,
    /// Expansion ratio: how many times the data exceeds local memory.
    #[arg(long, default_value_t = 4.0)]
    expansion: f64,
    /// OpenMP threads for the stencil (default: every CPU but one, which is
    /// left to the memory server; on a cluster it runs on another node).
    #[arg(long, conflicts_with = "random")]
    threads: Option<usize>,
    /// The worst case instead: writemem/reread and random read-modify-write
    /// updates, against all-local only.
    #[arg(long)]
    random: bool,
    /// Random read-modify-write updates (with --random).
    #[arg(long, default_value_t = 2_000_000, requires = "random")]
    updates: u64,
}

/// The stencil through the bench harness.
fn seed_workload(a: &Args) -> Result<()> {
    #[derive(clap::Parser)]
    struct Bench {
        #[command(flatten)]
        args: crate::bench::Args,
    }
    let threads = a
        .threads
        .unwrap_or(farmem_sys::online_cpus().saturating_sub(1).max(1));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    println!(
        "farmem demo: DLM's 7-point stencil (seed 003), {} of grids at {}x their local budget, {threads} thread(s);\n\
         all-local, farmem and Linux swap side by side, every point checked against a naive sweep.\n\
         DLM reached 57-78% of local speed at 4x. (`farmem demo --random` shows the worst case instead.)\n",
        format_size(a.size),
        a.expansion
    );
    let argv = [
        "bench".to_string(),
        "stencil7".into(),
        "--variant".into(),
        "wavefront".into(),
        "--size".into(),
        a.size.to_string(),
        "--expansion".into(),
        a.expansion.to_string(),
        "--systems".into(),
        "local,farmem,swap".into(),
        "--threads".into(),
        threads.to_string(),
        "--timeout".into(),
        "300".into(),
    ];
    let b = <Bench as clap::Parser>::try_parse_from(argv)?;
    crate::bench::run(b.args)
}

const LINE: usize = 64;

/// Pass timings for one memory kind.
struct Passes {
    write: f64,
    reread: f64,
    random: f64,
    errors: u64,
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

/// The workload over `n` bytes at `p`, which must read as zero.
fn workload(p: *mut u8, n: usize, updates: u64) -> Passes {
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
        let i = (xorshift(&mut x) % lines as u64) as usize;
        // SAFETY: in bounds.
        unsafe { at(i).write_volatile(at(i).read_volatile().wrapping_add(2)) };
    }
    let random = t.elapsed().as_secs_f64();
    // Check the random pass by replaying it on a compact count array.
    let mut adds = vec![0u32; lines];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..updates {
        adds[(xorshift(&mut x) % lines as u64) as usize] += 1;
    }
    for (i, &a) in adds.iter().enumerate() {
        // SAFETY: in bounds.
        if unsafe { at(i).read_volatile() } != val(i).wrapping_add(2 * a as u64) {
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

pub fn run(a: Args) -> Result<()> {
    if !(1.0..=64.0).contains(&a.expansion) {
        bail!("--expansion {} is out of range; use 1 to 64", a.expansion);
    }
    if !a.random {
        return seed_workload(&a);
    }
    let size = (a.size as usize).next_multiple_of(4096);
    let local = ((size as f64 / a.expansion) as u64).next_multiple_of(4096);
    if size < 16 << 20 {
        bail!("--size must be at least 16M");
    }
    let cfg = Config::from_env()?.with("LOCAL", &local.max(1 << 20).to_string())?;
    let rt = farmem_runtime::init(cfg)?;
    println!(
        "farmem demo: {} of data, {} local budget ({}x), far pages on the {}",
        format_size(size as u64),
        format_size(rt.budget_bytes()),
        a.expansion,
        rt.backend_description()
    );

    // All-local reference first, then release it before the far run.
    let local_mem = farmem_sys::mem::Mapping::anonymous(size, false)?;
    let l = workload(local_mem.as_ptr(), size, a.updates);
    drop(local_mem);
    let far = rt.alloc(size)?;
    let f = workload(far, size, a.updates);
    let stats = rt.snapshot();
    rt.free(far)?;

    let gbps = |secs: f64| size as f64 / LINE as f64 * 8.0 / secs / 1e9;
    let mbps = |secs: f64| size as f64 / secs / 1e6;
    println!();
    println!(
        "{:<28} {:>12} {:>12} {:>10}",
        "pass", "all-local", "farmem", "farmem/local"
    );
    for (name, lt, ft) in [
        ("write 8B per 64B line", l.write, f.write),
        ("reread and check", l.reread, f.reread),
        ("random read-modify-write", l.random, f.random),
    ] {
        println!("{name:<28} {:>10.3} s {:>10.3} s {:>9.2}x", lt, ft, ft / lt);
    }
    let (lt, ft) = (l.write + l.reread + l.random, f.write + f.reread + f.random);
    println!(
        "{:<28} {:>10.3} s {:>10.3} s {:>9.2}x",
        "total",
        lt,
        ft,
        ft / lt
    );
    println!(
        "\nregion sweep rate (bytes of region covered per second): write {:.0} MB/s, reread {:.0} MB/s on farmem \
         ({:.2} / {:.2} GB/s of payload words)",
        mbps(f.write),
        mbps(f.reread),
        gbps(f.write),
        gbps(f.reread)
    );
    println!();
    print!("{}", stats.render());
    if l.errors + f.errors > 0 {
        bail!(
            "result check FAILED: {} wrong words on far memory, {} on local",
            f.errors,
            l.errors
        );
    }
    println!("\nresult check: OK (every word verified, local and far)");
    Ok(())
}
