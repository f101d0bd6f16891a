//! `farmem bench`: its arguments, and the table, JSON, CSV and plot of what
//! the harness (`farmem_bench`) measured.

use crate::output::{opt, Csv, Output};
use anyhow::{Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use farmem_bench::workload::Options;
use farmem_bench::{failure_words, Progress, Report, RunResult, System, Workload};
use farmem_probe::machine::Machine;
use farmem_report::html::short;
use farmem_runtime::config::{format_size, parse_size};
use std::sync::atomic::{AtomicBool, Ordering};

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

/// This result as a cell of the bench plot.
pub fn cell(r: &RunResult) -> farmem_report::plot::BenchCell {
    farmem_report::plot::BenchCell {
        system: r.system.clone(),
        expansion: r.expansion,
        relative: Some(r.relative_runtime).filter(|r| r.is_finite()),
        failure: r.unavailable.as_deref().map(failure_words),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

/// The progress bar, fed by the harness.
struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn start(&mut self, runs: u64) {
        self.0.set_length(runs);
    }
    fn doing(&mut self, what: &str) {
        self.0.set_message(what.to_string());
    }
    fn step(&mut self) {
        self.0.inc(1);
    }
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
        workloads_dir: exe.with_file_name("workloads"),
        farmem: exe,
    };
    farmem_sys::signal::on_signal(libc::SIGINT, on_signal);
    farmem_sys::signal::on_signal(libc::SIGTERM, on_signal);
    let mut bar = Bar(crate::progress::bar(0, ""));
    let r = farmem_bench::run(&p, &mut bar, &STOP);
    bar.0.finish_and_clear();
    print(&a, &r?)
}

/// The table (or JSON, or CSV) and the plot.
fn print(a: &Args, r: &Report) -> Result<()> {
    let results = &r.results;
    let ceiling = r.ceiling;
    let cells: Vec<_> = results.iter().map(cell).collect();
    a.out.draw(&farmem_report::plot::Bench {
        title: &format!(
            "{} {}: runtime relative to all-local",
            r.workload,
            format_size(r.size)
        ),
        cells: &cells,
    })?;
    let json = || {
        Ok(
            serde_json::json!({ "machine": Machine::detect(), "params": r.params, "results": results }),
        )
    };
    let csv = || {
        let mut c = Csv::new(&[
            "system",
            "expansion",
            "local_budget_bytes",
            "seconds",
            "seconds_min",
            "seconds_max",
            "metric",
            "unit",
            "relative_runtime",
            "check",
            "timed_fetched_bytes",
            "timed_written_back_bytes",
        ]);
        for r in results {
            c.row(&[
                r.system.clone(),
                r.expansion.to_string(),
                r.local_budget_bytes.to_string(),
                format!("{:.4}", r.seconds),
                format!("{:.4}", r.seconds_min),
                format!("{:.4}", r.seconds_max),
                format!("{:.4}", r.metric),
                r.unit.clone(),
                format!("{:.4}", r.relative_runtime),
                r.check.clone(),
                opt(r.timed_fetched_bytes),
                opt(r.timed_written_back_bytes),
            ]);
        }
        c
    };
    if a.out.print(json, csv)? {
        return Ok(());
    }
    println!("machine: {}", Machine::detect().summary());
    println!(
        "workload: {} over {} {}, {} threads, median of {} run(s)",
        r.command.join(" "),
        format_size(r.size),
        if r.footprint_measured {
            "of footprint (its peak resident memory all-local)"
        } else {
            "of data"
        },
        r.threads,
        r.runs
    );
    if let Some(l) = results.iter().find(|r| r.system == "local") {
        println!(
            "all-local: {:.3} s, {} {}",
            l.seconds,
            short(l.metric),
            l.unit
        );
    }
    print!("\n{:<10}", "system");
    for e in &r.expansions {
        print!(" {:>23}", format!("{e}x"));
    }
    println!();
    for s in r.systems.iter().filter(|s| **s != System::Local) {
        print!("{:<10}", s.name());
        for e in &r.expansions {
            let r = results
                .iter()
                .find(|r| r.system == s.name() && r.expansion == *e);
            let cell = match r {
                Some(RunResult {
                    unavailable: Some(why),
                    ..
                }) => failure_words(why),
                Some(r) => format!(
                    "{:.2}x ({} {})",
                    r.relative_runtime,
                    short(r.metric),
                    r.unit
                ),
                None => "-".into(),
            };
            print!(" {cell:>23}");
        }
        println!();
    }
    println!(
        "(runtime relative to all-local: 1.00x is as fast; in brackets the workload's own metric)"
    );
    for r in results.iter().filter(|r| r.unavailable.is_some()) {
        println!(
            "{} at {}x: unavailable: {}",
            r.system,
            r.expansion,
            r.unavailable.as_deref().unwrap_or("")
        );
    }
    if r.runs > 1 {
        for r in results.iter().filter(|r| r.seconds.is_finite()) {
            println!(
                "{} at {}x: median {:.3} s, min {:.3} s, max {:.3} s over {} runs",
                r.system,
                r.expansion,
                r.seconds,
                r.seconds_min,
                r.seconds_max,
                r.runs.len()
            );
        }
    }
    for r in results {
        if let (Some(f), Some(w)) = (r.timed_fetched_bytes, r.timed_written_back_bytes) {
            let against = |moved: u64, least: Option<u64>| match least {
                Some(0) => format!("{} (least any policy moves: 0)", format_size(moved)),
                Some(l) => format!(
                    "{} ({:.2}x the {} any policy must move)",
                    format_size(moved),
                    moved as f64 / l as f64,
                    format_size(l)
                ),
                None => format_size(moved),
            };
            println!(
                "farmem at {}x, timed region only: fetched {}, written back {}",
                r.expansion,
                against(f, r.bound_fetched_bytes),
                against(w, r.bound_written_back_bytes)
            );
            if let (Some(t), Some(c)) = (r.bound_seconds, ceiling) {
                println!(
                    "  at the far ceiling ({:.0} MB/s read, {:.0} MB/s write) that least traffic takes {t:.3} s; the cell took {:.3} s ({:.1}x that)",
                    c.read_mbps,
                    c.write_mbps,
                    r.seconds,
                    r.seconds / t.max(1e-9)
                );
            }
        }
    }
    Ok(())
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
