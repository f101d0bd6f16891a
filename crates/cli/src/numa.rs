//! `farmem numa`: topology, the X×Y placement matrix, policy comparison, and
//! numactl-style placement of any command.

use crate::output::Output;
use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use farmem_numa::matrix::MatrixParams;
use farmem_numa::plan::{policy_plan, xy_plan, Placement};
use farmem_numa::run::run_for;
use farmem_numa::topology::Topology;
use farmem_numa::verify;
use farmem_numa::xy::XyWorkload;
use farmem_probe::machine::Machine;
use farmem_report::{matrix, policies, xy};
use farmem_runtime::config::format_size;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Nodes, their CPUs, memory and the distance table (like numactl -H).
    Topology(TopoArgs),
    /// Run a command under a placement given with numactl's flags, and report
    /// where its memory landed.
    Exec(ExecArgs),
    /// Memory on node X, threads on node Y, for every X and Y (the "type XY"
    /// runs of Okayama Univ.'s NUMA evaluation).
    Xy(XyArgs),
    /// One command under every policy, throughput over time (as the numactl
    /// policy study of a REST server does).
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

fn workload_parser() -> impl TypedValueParser<Value = String> {
    let values = XyWorkload::BUILT_IN.map(|(name, help)| PossibleValue::new(name).help(help));
    PossibleValuesParser::new(values)
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
    /// Region of the memory-write workload (the Okayama NUMA evaluation used 32M).
    #[arg(long, default_value = "32M", value_parser = crate::size_arg)]
    size: u64,
    #[arg(long, value_parser = workload_parser(), default_value = "memwrite")]
    workload: String,
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

fn matrix(a: MatrixArgs) -> Result<()> {
    a.out.check()?;
    let t = a.plan.topology()?;
    let cells = xy_plan(&t)?;
    let machine = Machine::detect();
    let mp = MatrixParams::for_machine(a.size, a.quick, &machine)?;
    if a.plan.dry_run {
        println!(
            "latency: a {} pointer chase; bandwidth: every CPU of node Y reading an array of {}",
            format_size(mp.latency_bytes as u64),
            format_size(mp.bandwidth_bytes_per_array as u64)
        );
        print!("{}", xy::plan(&cells));
        return Ok(());
    }
    a.plan.only_this_machine()?;
    let b = crate::progress::bar(cells.len() as u64, "matrix");
    let r = farmem_numa::matrix::report(machine, t.nodes.clone(), &cells, mp, || b.inc(1));
    b.finish_and_clear();
    let r = r?;
    for w in matrix::warnings(&r) {
        eprintln!("farmem numa matrix: {w}");
    }
    a.out.figure(|p| matrix::write_figure(p, &r))?;
    a.out.print(&r, || matrix::csv(&r), || matrix::text(&r))
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

fn topology(a: TopoArgs) -> Result<()> {
    let t = Topology::read(&a.sysfs)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&t)?);
    } else {
        print!("{}", t.render());
        if let Some(n) = t.one_node_note() {
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
        print!("{}", xy::plan(&cells));
        return Ok(());
    }
    a.plan.only_this_machine()?;
    let w = if !a.cmd.is_empty() {
        XyWorkload::Command(a.cmd.clone())
    } else {
        XyWorkload::built_in(&a.workload, a.size, a.passes)?
    };
    let b = crate::progress::bar(cells.len() as u64 * u64::from(a.runs), "X×Y");
    let r = farmem_numa::xy::report(t, &cells, &w, a.runs, || b.inc(1));
    b.finish_and_clear();
    let r = r?;
    a.out.figure(|p| xy::write_figure(p, &r))?;
    a.out.print(&r, || xy::csv(&r), || xy::text(&r))
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
    let r = farmem_numa::policies::report(t, &plan, &a.cmd, a.duration, re.as_ref(), || b.inc(1));
    b.finish_and_clear();
    let r = r?;
    a.out.figure(|p| policies::write_figure(p, &r))?;
    a.out.print(&r, || policies::csv(&r), || policies::text(&r))
}
