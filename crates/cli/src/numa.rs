//! `farmem numa`: topology, the X×Y placement matrix, policy comparison, and
//! numactl-style placement of any command.

use crate::output::{opt, Csv, Output};
use anyhow::{bail, Context, Result};
use farmem_numa::matrix::{MatrixCell, MatrixParams};
use farmem_numa::plan::{policy_plan, xy_plan, Placement};
use farmem_numa::run::run_for;
use farmem_numa::topology::Topology;
use farmem_numa::verify;
use farmem_numa::xy::{XyCell, XyWorkload};
use farmem_probe::machine::Machine;
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Nodes, their CPUs, memory and the distance table (like numactl -H).
    Topology(TopoArgs),
    /// Run a command under a placement given with numactl's flags, and report
    /// where its memory landed.
    Exec(ExecArgs),
    /// Memory on node X, threads on node Y, for every X and Y (seed 000).
    Xy(XyArgs),
    /// One command under every policy, throughput over time (seed 003).
    Policies(PolicyArgs),
    /// Idle latency and read bandwidth for every (memory node, CPU node)
    /// pair, like MLC's --latency_matrix and --bandwidth_matrix.
    Matrix(MatrixArgs),
}

#[derive(clap::Args)]
pub struct TopoArgs {
    /// Read the topology from this sysfs root instead of /sys.
    #[arg(long, default_value = "/sys")]
    sysfs: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct Flags {
    /// Allocate only on these nodes (e.g. 0 or 0-1 or all).
    #[arg(long)]
    membind: Option<String>,
    /// Run only on these nodes' CPUs.
    #[arg(long)]
    cpunodebind: Option<String>,
    /// Interleave memory over these nodes.
    #[arg(long)]
    interleave: Option<String>,
    /// Allocate on the node of the CPU that faults.
    #[arg(long)]
    localalloc: bool,
    /// Prefer this node for memory.
    #[arg(long)]
    preferred: Option<usize>,
}

#[derive(clap::Args)]
pub struct ExecArgs {
    #[command(flatten)]
    flags: Flags,
    #[arg(required = true, last = true)]
    cmd: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Built in: mmap SIZE, write 4 bytes in every 64-byte line, P passes.
    Memwrite,
    /// hackbench (Debian rt-tests): scheduler and IPC traffic.
    Hackbench,
    /// memcached driven by memcslap, both on node Y.
    Memslap,
}

/// Where the plan comes from, and whether to only print it.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Read the topology from this sysfs root (with --dry-run: plan only).
    #[arg(long, default_value = "/sys")]
    sysfs: PathBuf,
    /// Print the plan (every cell's placement, or every policy) without
    /// running anything.
    #[arg(long)]
    dry_run: bool,
}

impl PlanArgs {
    /// The topology the plan is made for.
    fn topology(&self) -> Result<Topology> {
        Ok(Topology::read(&self.sysfs)?)
    }

    /// Measuring needs this machine's topology, not a fixture's.
    fn only_this_machine(&self) -> Result<()> {
        if self.sysfs != std::path::Path::new("/sys") {
            bail!("--sysfs other than /sys describes another machine: use it with --dry-run");
        }
        Ok(())
    }
}

#[derive(clap::Args)]
pub struct XyArgs {
    /// Runs per cell; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Passes of the memory-write workload (pass 1 pays the page faults).
    #[arg(long, default_value_t = 5)]
    passes: u32,
    /// Region of the memory-write workload (seed 000: 32M).
    #[arg(long, default_value = "32M", value_parser = crate::size_arg)]
    size: u64,
    #[arg(long, value_enum, default_value_t = Workload::Memwrite)]
    workload: Workload,
    #[command(flatten)]
    plan: PlanArgs,
    /// The figure: a heat map of time and slowdown, memory node against
    /// CPU node.
    #[command(flatten)]
    out: Output,
    /// A command to run in each cell instead of the workload (timed by wall clock).
    #[arg(last = true)]
    cmd: Vec<String>,
}

#[derive(clap::Args)]
pub struct MatrixArgs {
    /// Working set of the latency chase (default: 4x the last-level cache,
    /// 256M to 1G), and of each bandwidth array.
    #[arg(long, value_parser = crate::size_arg)]
    size: Option<u64>,
    /// Smaller sets and fewer repeats (a smoke run).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    plan: PlanArgs,
    /// The figure: latency and bandwidth heat maps side by side.
    #[command(flatten)]
    out: Output,
}

/// Every X×Y cell's placement, one line each (`--dry-run`).
fn print_plan(cells: &[farmem_numa::plan::Cell]) {
    for c in cells {
        println!(
            "X={} Y={}: {}  (CPUs {})",
            c.mem_node,
            c.cpu_node,
            c.placement.numactl_args(),
            farmem_numa::topology::format_list(c.placement.cpus.as_deref().unwrap_or(&[]))
        );
    }
}

fn matrix(a: MatrixArgs) -> Result<()> {
    a.out.check()?;
    let t = a.plan.topology()?;
    let cells = xy_plan(&t)?;
    let machine = Machine::detect();
    let llc = machine.llc_bytes().unwrap_or(32 << 20);
    let size = match a.size {
        Some(s) if s < 1 << 20 => bail!("--size must be at least 1M"),
        Some(s) if s > machine.memory_bytes / 4 => bail!(
            "--size {} is more than a quarter of this machine's memory",
            farmem_runtime::config::format_size(s)
        ),
        Some(s) => s,
        None if a.quick => (llc * 2).clamp(64 << 20, 256 << 20),
        None => (llc * 4).clamp(256 << 20, 1 << 30),
    }
    .min(machine.memory_bytes / 8) as usize;
    if a.plan.dry_run {
        println!(
            "latency: a {} pointer chase; bandwidth: every CPU of node Y reading an array of {}",
            farmem_runtime::config::format_size(size as u64),
            farmem_runtime::config::format_size(size as u64 / 2)
        );
        print_plan(&cells);
        return Ok(());
    }
    a.plan.only_this_machine()?;
    let mp = MatrixParams::new(size, a.quick);
    let b = crate::progress::bar(cells.len() as u64, "matrix");
    let results = farmem_numa::matrix::measure(&cells, &mp, || b.inc(1));
    b.finish_and_clear();
    let results = results?;
    for r in results.iter().filter(|r| r.pages_off_node() > 0) {
        eprintln!(
            "farmem numa matrix: X={} Y={}: {} of {} sampled pages are not on node {} ({:?}); the node may be full",
            r.mem_node,
            r.cpu_node,
            r.pages_off_node(),
            r.pages_by_node.values().sum::<u64>(),
            r.mem_node,
            r.pages_by_node
        );
    }
    let ids = t.ids();
    if let Some(p) = a.out.plot_path() {
        farmem_report::plot::matrix_figure(&ids, &results, |f| farmem_report::plot::write(p, f))?;
    }
    let json = || {
        Ok(serde_json::json!({
            "machine": machine,
            "nodes": t.nodes,
            "params": { "latency_bytes": size, "bandwidth_bytes_per_array": size / 2, "latency": mp.latency, "bandwidth_repeats": mp.bandwidth_repeats, "bandwidth_statistic": "best" },
            "matrix": results,
        }))
    };
    let csv = || {
        let mut c = Csv::new(&["mem_node", "cpu_node", "latency_ns", "read_gbps", "threads"]);
        for r in &results {
            c.row(&[
                r.mem_node.to_string(),
                r.cpu_node.to_string(),
                format!("{:.2}", r.latency_ns),
                format!("{:.3}", r.read_gbps),
                r.threads.to_string(),
            ]);
        }
        c
    };
    if a.out.print(json, csv)? {
        return Ok(());
    }
    println!("machine: {}", machine.summary());
    for (what, unit, get) in [
        (
            "idle latency",
            "ns",
            (|r: &MatrixCell| r.latency_ns) as fn(&MatrixCell) -> f64,
        ),
        ("read bandwidth, every CPU of the CPU node", "GB/s", |r| {
            r.read_gbps
        }),
    ] {
        println!("\n{what} ({unit}): rows are the CPUs' node, columns the memory's node");
        print!("{:>10}", "CPU \\ mem");
        for x in &ids {
            print!(" {:>10}", format!("node {x}"));
        }
        println!();
        for y in &ids {
            print!("{:>10}", format!("node {y}"));
            for x in &ids {
                match results
                    .iter()
                    .find(|r| r.mem_node == *x && r.cpu_node == *y)
                {
                    Some(r) => print!(" {:>10.2}", get(r)),
                    None => print!(" {:>10}", "-"),
                }
            }
            println!();
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct PolicyArgs {
    /// Stop the command after this many seconds (for servers, load loops).
    #[arg(long)]
    duration: Option<f64>,
    /// Throughput from the command's output: the first capture group (or the
    /// whole match) of each matching line is one sample.
    #[arg(long)]
    rate_regex: Option<String>,
    #[command(flatten)]
    plan: PlanArgs,
    /// The figure: the rate over time, one line per policy.
    #[command(flatten)]
    out: Output,
    #[arg(required = true, last = true)]
    cmd: Vec<String>,
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Topology(a) => topology(a),
        Cmd::Exec(a) => exec(a),
        Cmd::Xy(a) => xy(a),
        Cmd::Policies(a) => policies(a),
        Cmd::Matrix(a) => matrix(a),
    }
}

fn one_node_note(t: &Topology) -> Option<String> {
    (t.nodes.len() == 1).then(|| {
        "note: this machine has one NUMA node, so every placement puts memory on node 0 and threads on the same \
         CPUs; the matrix is 1x1 and the policies collapse into one (differences are run-to-run noise)."
            .to_string()
    })
}

fn topology(a: TopoArgs) -> Result<()> {
    let t = Topology::read(&a.sysfs)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&t)?);
    } else {
        print!("{}", t.render());
        if let Some(n) = one_node_note(&t) {
            println!("{n}");
        }
    }
    Ok(())
}

fn exec(a: ExecArgs) -> Result<()> {
    let t = Topology::read(std::path::Path::new("/sys"))?;
    let f = &a.flags;
    let p = Placement::from_flags(
        &t,
        f.membind.as_deref(),
        f.cpunodebind.as_deref(),
        f.interleave.as_deref(),
        f.localalloc,
        f.preferred,
    )?;
    let out = run_for(&a.cmd, &p, None)?;
    for (_, l) in &out.lines {
        println!("{l}");
    }
    eprintln!(
        "farmem numa: {} under {}: {:.3} s; memory seen on {}",
        a.cmd[0],
        p.numactl_args(),
        out.wall_s,
        verify::render(&out.by_node)
    );
    std::process::exit(out.status.code().unwrap_or(1));
}

fn xy(a: XyArgs) -> Result<()> {
    a.out.check()?;
    let t = a.plan.topology()?;
    let cells = xy_plan(&t)?;
    if a.plan.dry_run {
        print_plan(&cells);
        return Ok(());
    }
    a.plan.only_this_machine()?;
    let w = if !a.cmd.is_empty() {
        XyWorkload::Command(a.cmd.clone())
    } else {
        match a.workload {
            Workload::Memwrite => XyWorkload::Memwrite {
                size: usize::try_from(a.size).context("--size is beyond this machine")?,
                passes: a.passes,
            },
            Workload::Hackbench => XyWorkload::Hackbench,
            Workload::Memslap => XyWorkload::Memslap,
        }
    };
    let b = crate::progress::bar(cells.len() as u64 * u64::from(a.runs), "X×Y");
    let results = farmem_numa::xy::run(&cells, &w, a.runs, || b.inc(1));
    b.finish_and_clear();
    let results = results?;
    let workload = w.describe();
    let heat: Vec<_> = results
        .iter()
        .map(|r| {
            (
                r.mem_node,
                r.cpu_node,
                farmem_report::plot::time_and_slowdown(r.seconds, r.slowdown_pct),
                r.slowdown_pct,
            )
        })
        .collect();
    a.out.draw(&farmem_report::plot::Heatmap {
        ids: &t.ids(),
        cells: &heat,
        title: &format!("{workload}: time, and slowdown vs local (X = Y)"),
    })?;
    let json = || {
        Ok(serde_json::json!({
            "machine": Machine::detect(),
            "topology": t,
            "params": { "workload": workload, "runs": a.runs, "passes": a.passes, "size_bytes": a.size, "statistic": "median" },
            "cells": results,
            "note": one_node_note(&t),
        }))
    };
    let csv = || {
        let mut c = Csv::new(&[
            "mem_node",
            "cpu_node",
            "seconds",
            "slowdown_pct",
            "later_pass_seconds",
            "later_slowdown_pct",
        ]);
        for r in &results {
            c.row(&[
                r.mem_node.to_string(),
                r.cpu_node.to_string(),
                format!("{:.6}", r.seconds),
                format!("{:.2}", r.slowdown_pct),
                opt(r.later_pass_seconds.map(|v| format!("{v:.6}"))),
                opt(r.later_slowdown_pct.map(|v| format!("{v:.2}"))),
            ]);
        }
        c
    };
    if a.out.print(json, csv)? {
        return Ok(());
    }
    println!("machine: {}", Machine::detect().summary());
    println!("workload: {workload}; median of {} runs; rows: memory on node X, columns: threads on node Y", a.runs);
    let ids = t.ids();
    let table = |title: &str, get: &dyn Fn(&XyCell) -> Option<(f64, f64)>| {
        println!("\n{title}");
        print!("{:>8}", "X \\ Y");
        for y in &ids {
            print!("{:>20}", format!("Y={y}"));
        }
        println!();
        for x in &ids {
            print!("{:>8}", format!("X={x}"));
            for y in &ids {
                let r = results
                    .iter()
                    .find(|r| r.mem_node == *x && r.cpu_node == *y);
                match r.and_then(get) {
                    Some((s, d)) => print!("{:>20}", format!("{:.4} s ({:+.1}%)", s, d)),
                    None => print!("{:>20}", "-"),
                }
            }
            println!();
        }
    };
    let first = if matches!(w, XyWorkload::Memwrite { .. }) {
        "pass 1 (includes page faults)"
    } else {
        "time"
    };
    table(first, &|r| Some((r.seconds, r.slowdown_pct)));
    if results.iter().any(|r| r.later_pass_seconds.is_some()) {
        table("passes 2.. (median)", &|r| {
            r.later_pass_seconds.zip(r.later_slowdown_pct)
        });
    }
    println!("\nwhere the memory was:");
    for r in &results {
        println!(
            "  X={} Y={} ({}): {}",
            r.mem_node,
            r.cpu_node,
            r.numactl,
            verify::render(&r.by_node)
        );
    }
    if let Some(n) = one_node_note(&t) {
        println!("\n{n}");
    }
    Ok(())
}

fn policies(a: PolicyArgs) -> Result<()> {
    a.out.check()?;
    let re = a
        .rate_regex
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--rate-regex is not a valid regular expression")?;
    let t = a.plan.topology()?;
    let plan = policy_plan(&t)?;
    if a.plan.dry_run {
        for p in &plan {
            println!("{}", p.numactl_args());
        }
        return Ok(());
    }
    a.plan.only_this_machine()?;
    let b = crate::progress::bar(plan.len() as u64, "policies");
    let results = farmem_numa::policies::run(&plan, &a.cmd, a.duration, re.as_ref(), || b.inc(1));
    b.finish_and_clear();
    let results = results?;
    let lines: Vec<(String, Vec<(f64, f64)>)> = results
        .iter()
        .map(|r| (r.policy.clone(), r.series.clone()))
        .collect();
    a.out.draw(&farmem_report::plot::Series {
        lines: &lines,
        title: "the command's rate over time by NUMA policy",
        x_desc: "time since start (s)",
        y_desc: "rate (the number --rate-regex takes)",
    })?;
    let json = || {
        Ok(serde_json::json!({
            "machine": Machine::detect(),
            "topology": t,
            "params": { "cmd": a.cmd, "duration": a.duration, "rate_regex": a.rate_regex },
            "results": results,
            "note": one_node_note(&t),
        }))
    };
    let csv = || {
        let mut c = Csv::new(&["policy", "seconds", "mean_rate", "change_pct"]);
        for r in &results {
            c.row(&[
                r.policy.clone(),
                format!("{:.4}", r.seconds),
                opt(r.mean_rate.map(|m| format!("{m:.3}"))),
                format!("{:.2}", r.change_pct),
            ]);
        }
        c
    };
    if a.out.print(json, csv)? {
        return Ok(());
    }
    println!("machine: {}", Machine::detect().summary());
    println!("command: {}", a.cmd.join(" "));
    println!(
        "\n{:<34} {:>10} {:>12} {:>12}  memory seen on",
        "policy", "seconds", "mean rate", "vs default"
    );
    for r in &results {
        println!(
            "{:<34} {:>10.3} {:>12} {:>11.1}%  {}",
            r.policy,
            r.seconds,
            r.mean_rate
                .map(|m| format!("{m:.1}"))
                .unwrap_or_else(|| "-".into()),
            r.change_pct,
            verify::render(&r.by_node)
        );
    }
    println!(
        "(vs default: positive is better — a higher mean rate, or less time when no --rate-regex)"
    );
    if let Some(n) = one_node_note(&t) {
        println!("\n{n}");
    }
    Ok(())
}
