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

use anyhow::{bail, Context, Result};
use farmem_runtime::config::{format_size, Config};

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
    let threads = a
        .threads
        .unwrap_or(farmem_sys::online_cpus().saturating_sub(1).max(1));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    println!(
        "farmem demo: the 7-point stencil of DLM (Distributed Large Memory, Oura, Midorikawa and Kai, Seikei Univ.; its Fig. 2.2-2.4), {} of grids at {}x their local budget, {threads} thread(s);\n\
         all-local, farmem and Linux swap side by side, every point checked against a naive sweep.\n\
         DLM reached 57-78% of local speed at 4x. (`farmem demo --random` shows the worst case instead.)\n",
        format_size(a.size),
        a.expansion
    );
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let p = farmem_bench::Params::seed_demo(a.size, a.expansion, threads, exe);
    crate::bench::report(&p, &Default::default())
}

pub fn run(a: Args) -> Result<()> {
    if !(1.0..=64.0).contains(&a.expansion) {
        bail!("--expansion {} is out of range; use 1 to 64", a.expansion);
    }
    if !a.random {
        return seed_workload(&a);
    }
    let started = |size: usize, budget, backend: &str| {
        println!(
            "farmem demo: {} of data, {} local budget ({}x), far pages on the {backend}",
            format_size(size as u64),
            format_size(budget),
            a.expansion,
        );
    };
    let w = farmem_bench::worst::run(Config::from_env()?, a.size, a.expansion, a.updates, started)?;
    print!("{}", farmem_report::bench::worst_case(&w));
    if w.local.errors + w.far.errors > 0 {
        bail!(
            "result check FAILED: {} wrong words on far memory, {} on local",
            w.far.errors,
            w.local.errors
        );
    }
    println!("\nresult check: OK (every word verified, local and far)");
    Ok(())
}
