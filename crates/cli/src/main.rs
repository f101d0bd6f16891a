//! The `farmem` command. Thin: argument parsing and output; the work is in
//! the library crates.

mod bench;
mod config;
mod demo;
mod doctor;
mod installed;
mod join;
mod logging;
mod numa;
mod output;

mod probe;
mod progress;
mod report;
mod run;
mod secret;
mod serve;
mod stat;
mod trace;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "farmem",
    version,
    about = "Measure every memory tier, and extend memory onto far tiers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a memory server that holds other machines' pages.
    Serve(serve::Args),
    /// Run a workload 4x larger than its local budget on far memory, check it,
    /// and compare its time with all-local memory.
    Demo(demo::Args),
    /// Run an unmodified program with its large allocations in far memory.
    Run(run::Args),
    /// Live counters of running farmem programs (this user's): faults/s,
    /// MB/s in and out, resident, prefetch, fault latency, servers.
    Stat(stat::Args),
    /// Add memory servers to a running program's session (one keeping two
    /// or three copies): each takes its share of the copies.
    Join(join::Args),
    /// Measure every memory tier: latency ladder, bandwidth, faults, far tiers.
    Probe(probe::Args),
    /// The seeds' workloads at every expansion ratio: farmem against Linux
    /// swap, zram and an SSD file mapping, relative to all-local.
    Bench(bench::Args),
    /// Put probe, numa and bench results (--json) into one HTML page.
    Report(report::Args),
    /// NUMA: topology, the X x Y placement matrix, policy comparison, placement.
    #[command(subcommand)]
    Numa(numa::Cmd),
    /// The shared secret for servers on other machines: init, check.
    #[command(subcommand)]
    Secret(secret::Cmd),
    /// The FARMEM_* settings this environment gives (validated), or with
    /// --markdown the documented table of every setting.
    Config(config::Args),
    /// What this user on this machine can use (userfaultfd, memory files,
    /// UCX, batched unmap, the kernel baselines), and why not where not.
    Doctor(doctor::Args),
    /// Explain a policy trace (farmem run --trace): prefetch used and wasted,
    /// and pages fetched against Belady's MIN at the same budget.
    Trace(trace::Args),
}

fn main() {
    let cli = Cli::parse();
    // Commands that print end quietly when their reader goes away
    // (`farmem config | head`), as Unix tools do. Not `serve`, whose status
    // lines must never stop it, nor `run`, which hands the terminal to the
    // program.
    if !matches!(cli.cmd, Cmd::Serve(_) | Cmd::Run(_)) {
        farmem_sys::signal::set_default(libc::SIGPIPE);
    }
    let r: Result<()> = match cli.cmd {
        Cmd::Serve(a) => serve::run(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Stat(a) => stat::run(a),
        Cmd::Join(a) => join::run(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::Numa(c) => numa::run(c),
        Cmd::Config(a) => config::run(a),
        Cmd::Secret(c) => secret::run(c),
        Cmd::Trace(a) => trace::run(a),
        Cmd::Doctor(a) => doctor::run(a),
    };
    if let Err(e) = r {
        // The chain, without causes that a message already quotes.
        let mut msg = String::new();
        for cause in e.chain() {
            let c = cause.to_string();
            if !msg.contains(&c) {
                if !msg.is_empty() {
                    msg.push_str(": ");
                }
                msg.push_str(&c);
            }
        }
        eprintln!("farmem: error: {msg}");
        std::process::exit(1);
    }
}

/// clap value parser for sizes such as 256M or 2G.
pub fn size_arg(s: &str) -> Result<u64, String> {
    farmem_runtime::config::parse_size(s)
}
