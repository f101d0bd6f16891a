//! `farmem bench`: its arguments, and the table, JSON, CSV and plot of what
//! the harness (`farmem_bench`) measured.

use crate::output::Output;
use anyhow::{Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use farmem_bench::workload::Options;
use farmem_bench::{System, Workload};
use farmem_probe::machine::Machine;
use farmem_report::bench;
use farmem_runtime::config::parse_size;

fn workload_parser() -> impl TypedValueParser<Value = Workload> {
    PossibleValuesParser::new(Workload::ALL.map(Workload::name))
        .map(|s| s.parse::<Workload>().expect("one of the listed names"))
}

#[derive(clap::Args)]
pub struct Args {
    /// A built-in workload; or give any program after `--` instead.
    #[arg(value_parser = workload_parser(), required_unless_present = "cmd")]
    workload: Option<Workload>,
    /// Data size of a built-in workload (its arrays), e.g. 1G; default 512M.
    /// With `-- CMD` the footprint is measured instead.
    #[arg(long)]
    size: Option<String>,
    /// Expansion ratios E (data / local memory), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,1.67,2,4,6,8")]
    expansion: Vec<f64>,
    /// Systems to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "local,farmem,swap,zram,ssd-mmap"
    )]
    systems: Vec<System>,
    /// OpenMP threads for the workload.
    #[arg(long)]
    threads: Option<usize>,
    /// Runs per (system, expansion); the median is reported, with the
    /// fastest and slowest run beside it.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// stencil7 variant: naive, spatial, temporal (the default; overlapped
    /// blocks) or wavefront (no redundant halo work).
    #[arg(long)]
    variant: Option<String>,
    /// himeno: pass farmem hints (fm_advise) from the program.
    #[arg(long)]
    hints: bool,
    /// himeno: the published constant coefficients instead of the perturbed
    /// default (whose pages are not same-filled, so compression wins nothing
    /// it should not).
    #[arg(long)]
    classic: bool,
    /// Give up on one run after this many seconds (swap can be very slow).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Tiny data and few ratios: checks the harness end to end in seconds.
    #[arg(long)]
    quick: bool,
    /// JSON: machine, parameters, every cell with its runs; CSV: one row a
    /// cell; the figure: runtime relative to all-local against expansion,
    /// one line per system.
    #[command(flatten)]
    out: Output,
    /// With `-- CMD`: a regular expression over CMD's output whose first
    /// group (or whole match; the last match counts) is its figure of merit.
    /// Without it the metric is wall time. Runtime ratios use wall time.
    #[arg(long, requires = "cmd")]
    metric_regex: Option<String>,
    /// Any program, run as the workload: all-local first (its peak resident
    /// memory is the footprint), then every system with footprint/E local.
    #[arg(last = true, conflicts_with = "workload")]
    cmd: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
    a.out.check()?;
    let size = a
        .size
        .as_deref()
        .map(|s| parse_size(s).map_err(|e| anyhow::anyhow!("--size {s}: {e}")))
        .transpose()?;
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let p = farmem_bench::Params {
        workload: a.workload,
        cmd: a.cmd.clone(),
        size,
        expansions: a.expansion.clone(),
        systems: a.systems.clone(),
        threads: a.threads,
        runs: a.runs,
        options: Options {
            variant: a.variant.clone(),
            hints: a.hints,
            classic: a.classic,
        },
        timeout_s: a.timeout,
        quick: a.quick,
        metric_regex: a.metric_regex.clone(),
        workloads_dir: crate::installed::beside(&exe, "workloads"),
        farmem: exe,
    };
    report(&p, &a.out)
}

/// Run the harness on `p` and print what it measured through `out`.
pub fn report(p: &farmem_bench::Params, out: &Output) -> Result<()> {
    let stop = farmem_sys::signal::interrupt_flag();
    let r = farmem_bench::run(p, &mut crate::progress::Bars::default(), stop)?;
    let d = bench::BenchDoc::new(&r, &Machine::detect());
    out.figure(|p| bench::figure::write(p, &d))?;
    out.print(&bench::json(&d), || bench::csv(&d), || bench::text(&d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, clap::Error> {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: Args,
        }
        let argv = std::iter::once("bench").chain(v.iter().copied());
        <P as clap::Parser>::try_parse_from(argv).map(|p| p.a)
    }

    #[test]
    fn workloads_and_systems_parse_by_name() {
        let a = args(&["bfs", "--systems", "local,zram"]).unwrap();
        assert_eq!(a.workload, Some(Workload::Bfs));
        assert_eq!(a.systems, [System::Local, System::Zram]);
        let e = args(&["sort"]).err().expect("not a workload").to_string();
        assert!(e.contains("possible values") && e.contains("qsort"), "{e}");
        assert!(args(&["qsort", "--systems", "ram"]).is_err());
        let a = args(&["--", "sort", "-S", "1G"]).unwrap();
        assert_eq!(a.workload, None);
        assert_eq!(a.cmd, ["sort", "-S", "1G"]);
    }
}
