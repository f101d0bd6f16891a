//! The expansion loop: every system at every expansion, `runs` times a
//! cell, all-local first as the reference.

use crate::bound::{shape_of, traffic_bound, Ceiling};
use crate::systems::{Cgroup, DataFile, SwapArea, System};
use crate::workload::{self, Options, Workload, VARIANTS};
use crate::{field, BenchError};
use farmem_runtime::config::format_size;
use farmem_sys::child::{self, Cut};
use serde::{Deserialize, Serialize};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What to run: the CLI's arguments, validated by [`run`].
#[derive(Clone, Debug)]
pub struct Params {
    /// A built-in workload, or None for `cmd`.
    pub workload: Option<Workload>,
    /// Any program (with `workload` None).
    pub cmd: Vec<String>,
    /// A built-in workload's data size (512 MiB when None); a program's
    /// footprint is measured instead.
    pub size: Option<u64>,
    pub expansions: Vec<f64>,
    pub systems: Vec<System>,
    /// OpenMP threads (every CPU when None).
    pub threads: Option<usize>,
    pub runs: u32,
    pub options: Options,
    pub timeout_s: u64,
    /// Tiny data and ratios up to 2: the harness end to end in seconds.
    pub quick: bool,
    /// A figure of merit in a program's output.
    pub metric_regex: Option<String>,
    /// Where the built-in workloads' binaries are.
    pub workloads_dir: PathBuf,
    /// The farmem binary that runs the farmem cells (`farmem run`).
    pub farmem: PathBuf,
}

impl Params {
    /// `farmem demo`: DLM's 7-point stencil (seed 002, wavefront temporal
    /// blocking) over `size` of grids at `expansion`, all-local, farmem and
    /// Linux swap, `threads` threads, every point checked against a naive
    /// sweep; `farmem` is the binary, its workloads beside it.
    pub fn seed_demo(size: u64, expansion: f64, threads: usize, farmem: PathBuf) -> Params {
        Params {
            workload: Some(Workload::Stencil7),
            cmd: Vec::new(),
            size: Some(size),
            expansions: vec![expansion],
            systems: vec![System::Local, System::Farmem, System::Swap],
            threads: Some(threads),
            runs: 1,
            options: Options {
                variant: Some("wavefront".into()),
                hints: false,
                classic: false,
            },
            timeout_s: 300,
            quick: false,
            metric_regex: None,
            workloads_dir: farmem.with_file_name("workloads"),
            farmem,
        }
    }
}

/// What the harness tells its caller as it goes (a progress bar).
pub trait Progress {
    /// The number of runs ahead.
    fn start(&mut self, runs: u64);
    /// What runs now.
    fn doing(&mut self, what: &str);
    /// One run done.
    fn step(&mut self);
}

/// One (system, expansion) cell.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct RunResult {
    pub system: String,
    pub expansion: f64,
    #[serde(default)]
    pub local_budget_bytes: u64,
    /// Median seconds (the workload's own timing of its kernel).
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub seconds: f64,
    /// The fastest and slowest of the runs: the spread around the median.
    #[serde(
        default = "farmem_probe::json::nan",
        deserialize_with = "farmem_probe::json::nan_if_null"
    )]
    pub seconds_min: f64,
    #[serde(
        default = "farmem_probe::json::nan",
        deserialize_with = "farmem_probe::json::nan_if_null"
    )]
    pub seconds_max: f64,
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub metric: f64,
    pub unit: String,
    /// seconds / local seconds (1.0 = as fast as all-local).
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub relative_runtime: f64,
    #[serde(default)]
    pub check: String,
    #[serde(default)]
    pub runs: Vec<f64>,
    /// Why a system could not run, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// farmem's statistics table for the last run (farmem only), for the
    /// whole process: set-up and result check included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub farmem_stats: Option<String>,
    /// Bytes fetched and written back during the workload's timed region
    /// alone (last run; farmem only; from the workload's `timed` line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_fetched_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_written_back_bytes: Option<u64>,
    /// The least any paging policy must fetch and write back in the timed
    /// region at this budget, from the workload's access pattern (see
    /// [`traffic_bound`]); absent for a program after `--`, whose access
    /// pattern is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_fetched_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_written_back_bytes: Option<u64>,
    /// How long that least traffic takes at the far tier's measured
    /// ceiling (see [`Ceiling`]): no policy finishes the cell faster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_seconds: Option<f64>,
    #[serde(default)]
    pub result_line: String,
}

/// A run's parameters as `farmem bench --json` records them, and
/// `farmem report` reads them back. Fields added after the first results
/// were written default when absent.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Recorded {
    pub workload: String,
    /// Data size, or a program's measured footprint.
    pub size_bytes: u64,
    pub expansion: Vec<f64>,
    pub threads: usize,
    pub runs: u32,
    /// How each cell's runs are summed up.
    #[serde(default)]
    pub statistic: String,
    /// stencil7's variant.
    #[serde(default)]
    pub variant: String,
    #[serde(default)]
    pub hints: bool,
    #[serde(default)]
    pub classic: bool,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub cgroup_allowance_bytes: u64,
    #[serde(default)]
    pub swap_device_bytes: u64,
    #[serde(default)]
    pub footprint_measured: bool,
    #[serde(default)]
    pub metric_regex: Option<String>,
    #[serde(default)]
    pub far_ceiling: Option<Ceiling>,
}

/// Everything one `farmem bench` measured.
#[derive(Debug)]
pub struct Report {
    /// The workload's name ("custom" for a program).
    pub workload: String,
    /// Data size, or a program's measured footprint.
    pub size: u64,
    pub expansions: Vec<f64>,
    /// The systems asked for (local may be absent).
    pub systems: Vec<System>,
    pub threads: usize,
    pub runs: u32,
    pub command: Vec<String>,
    /// True when `size` is a program's measured footprint.
    pub footprint_measured: bool,
    pub ceiling: Option<Ceiling>,
    /// The parameters as the JSON output records them.
    pub params: Recorded,
    pub results: Vec<RunResult>,
}

/// The workload process itself (libc, libgomp, stack: about 2 MiB RSS) is
/// not data; farmem does not count it either.
const CGROUP_ALLOWANCE: u64 = 4 << 20;

/// A finished run, as the harness reads it.
struct Outcome {
    line: String,
    /// The workload's `timed ...` line: far traffic of its timed region.
    timed: Option<String>,
    stderr: String,
    /// Peak resident memory of the process, bytes.
    max_rss: u64,
}

/// How a run's output is read: a built-in workload prints its own `result`
/// line; any other program is timed by the wall clock, and its figure of
/// merit (if asked for) taken from its output.
enum Reading<'a> {
    Builtin,
    Custom { metric: Option<&'a regex::Regex> },
}

/// Run `cmd`, optionally inside `cg`, with a timeout; returns its result line.
fn run_once(
    cmd: &[String],
    env: &[(String, String)],
    cg: Option<&Cgroup>,
    limits: &child::Limits<'_>,
    reading: &Reading<'_>,
) -> Result<Outcome, BenchError> {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(cg) = cg {
        let procs = cg.procs.clone();
        // SAFETY: only raw syscalls on a path prepared before fork, and a
        // stack buffer: nothing allocates between fork and exec.
        unsafe {
            c.pre_exec(move || farmem_sys::process::enter_cgroup(&procs));
        }
    }
    let f = child::run(&mut c, limits, |_| {})
        .map_err(|e| BenchError::Failed(format!("{} failed (could not start: {e})", cmd[0])))?;
    match f.cut {
        Some(Cut::Stopped) => return Err(BenchError::Interrupted),
        Some(Cut::TimedOut) => {
            return Err(BenchError::Failed(format!(
                "timed out after {} s",
                limits.timeout.unwrap_or_default().as_secs()
            )))
        }
        None => {}
    }
    let stdout = f.stdout_text();
    let line = match reading {
        Reading::Builtin => f.line("result ").map(String::from),
        Reading::Custom { metric } => {
            let (m, unit) = match metric {
                Some(re) => match custom_metric(re, &stdout) {
                    Some(m) => (m, "(regex)"),
                    None if f.status.success() => {
                        return Err(BenchError::Failed(format!(
                            "{} printed nothing that --metric-regex {:?} matches as a number",
                            cmd[0],
                            re.as_str()
                        )))
                    }
                    None => (f64::NAN, "(regex)"),
                },
                None => (f.wall_s, "s"),
            };
            Some(format!(
                "result workload=custom seconds={:.4} metric={m:.4} unit={unit} check=-",
                f.wall_s
            ))
        }
    };
    let timed = f.line("timed ").map(String::from);
    match line {
        Some(line) if f.status.success() => Ok(Outcome {
            line,
            timed,
            stderr: f.stderr,
            max_rss: f.max_rss,
        }),
        _ if cg.is_some() && f.signal() == Some(libc::SIGKILL) => Err(BenchError::Failed(
            "killed by the kernel's OOM killer at the cgroup memory limit (the baseline could not run in this budget)".into(),
        )),
        _ => Err(BenchError::Failed(format!(
            "{} failed ({}): {}",
            cmd[0],
            f.status,
            f.stderr.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
        ))),
    }
}

/// The figure of merit in `out`: the last match of `re`, its first group
/// if it has one, read as a number.
pub fn custom_metric(re: &regex::Regex, out: &str) -> Option<f64> {
    let c = re.captures_iter(out).last()?;
    let m = c.get(1).or_else(|| c.get(0))?;
    m.as_str().trim().parse().ok()
}

/// A number from the last run's `timed` line.
fn timed_field(last: &Option<Outcome>, key: &str) -> Option<u64> {
    field(last.as_ref()?.timed.as_deref()?, key)?.parse().ok()
}

/// Check `p` and settle what `quick` changes: (size, expansions, timeout).
fn validate(p: &Params) -> Result<(u64, Vec<f64>, u64), BenchError> {
    let bad = |m: &str| Err(BenchError::Invalid(m.into()));
    let custom = p.workload.is_none();
    if custom == p.cmd.is_empty() {
        return bad("give a built-in workload or a program after --, not both or neither");
    }
    if custom && p.size.is_some() {
        return bad("--size is for the built-in workloads; with -- CMD the footprint is measured (the peak resident memory of an all-local run)");
    }
    if !custom && p.metric_regex.is_some() {
        return bad(
            "--metric-regex is for a program after --; a built-in workload reports its own metric",
        );
    }
    let mut size = p.size.unwrap_or(512 << 20);
    let mut exps = p.expansions.clone();
    let mut timeout_s = p.timeout_s;
    if p.quick {
        size = size.min(16 << 20);
        exps.retain(|&e| e <= 2.0);
        if exps.is_empty() {
            exps = vec![1.0, 2.0];
        }
        timeout_s = timeout_s.min(60);
    }
    if size < 4 << 20 {
        return bad("--size must be at least 4M");
    }
    if timeout_s == 0 {
        return bad("--timeout must be at least 1 second");
    }
    if exps.is_empty() || exps.iter().any(|&e| !(1.0..=64.0).contains(&e)) {
        return bad("--expansion values must be between 1 and 64");
    }
    if p.systems.is_empty() {
        return bad("--systems: name at least one of local, farmem, swap, zram, ssd-mmap");
    }
    if p.runs == 0 {
        return bad("--runs must be at least 1");
    }
    if p.threads == Some(0) {
        return bad("--threads must be at least 1");
    }
    let o = &p.options;
    if custom && (o.variant.is_some() || o.hints || o.classic) {
        return bad("--variant, --hints and --classic are for the built-in workloads, not a program after --");
    }
    if o.classic && p.workload != Some(Workload::Himeno) {
        return bad("--classic is himeno's (its published constant coefficients)");
    }
    if !VARIANTS.contains(&o.variant()) {
        return bad("--variant must be naive, spatial, temporal or wavefront");
    }
    let phys = farmem_sys::phys_memory();
    if size > phys / 2 {
        return Err(BenchError::Invalid(format!(
            "--size {} is more than half of this machine's memory ({}); the local reference must fit",
            format_size(size),
            format_size(phys)
        )));
    }
    Ok((size, exps, timeout_s))
}

/// Run every cell of `p`. `stop` turning true (the caller's SIGINT or
/// SIGTERM) ends the run in progress and returns `Interrupted`, with
/// everything set up removed.
pub fn run(
    p: &Params,
    progress: &mut dyn Progress,
    stop: &AtomicBool,
) -> Result<Report, BenchError> {
    let (size, exps, timeout_s) = validate(p)?;
    let metric_re = p
        .metric_regex
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| {
            BenchError::Invalid(format!(
                "--metric-regex is not a valid regular expression: {e}"
            ))
        })?;
    let mut cells = Cells::new(p, size, timeout_s, metric_re.as_ref(), stop)?;
    let total = p
        .systems
        .iter()
        .map(|s| if *s == System::Local { 1 } else { exps.len() })
        .sum::<usize>() as u64
        * u64::from(p.runs);
    progress.start(total);

    // The far tier's ceiling, for the time the least traffic takes.
    if p.systems.contains(&System::Farmem) && !cells.custom {
        progress.doing("far ceiling");
        cells.ceiling = Some(Ceiling::measure(p.quick)?);
    }
    let results = cells.all(&exps, progress, stop)?;
    Ok(cells.report(exps, results))
}

/// What every cell of one run shares, and what the all-local reference
/// settles for the cells after it (a program's footprint, the local time).
struct Cells<'a> {
    p: &'a Params,
    /// A program after `--`, not a built-in workload.
    custom: bool,
    cmd: Vec<String>,
    reading: Reading<'a>,
    env: Vec<(String, String)>,
    threads: usize,
    farmem: String,
    limits: child::Limits<'a>,
    ceiling: Option<Ceiling>,
    /// Data size; a program's is its footprint, once all-local has run.
    size: u64,
    /// All-local's median seconds, once it has run.
    local_secs: Option<f64>,
}

/// One cell's runs: the seconds of each, the last one's output, and why
/// the cell stopped early, if it did.
struct Runs {
    seconds: Vec<f64>,
    last: Option<Outcome>,
    unavailable: Option<String>,
}

impl Runs {
    /// The median seconds (NaN when no run finished).
    fn median(&self) -> f64 {
        if self.seconds.is_empty() {
            f64::NAN
        } else {
            farmem_probe::median(&mut self.seconds.clone())
        }
    }
}

impl<'a> Cells<'a> {
    fn new(
        p: &'a Params,
        size: u64,
        timeout_s: u64,
        metric_re: Option<&'a regex::Regex>,
        stop: &'a AtomicBool,
    ) -> Result<Cells<'a>, BenchError> {
        let (cmd, reading) = match p.workload {
            Some(w) => (
                workload::command(&p.workloads_dir, w, size, &p.options)?,
                Reading::Builtin,
            ),
            None => (p.cmd.clone(), Reading::Custom { metric: metric_re }),
        };
        let threads = p.threads.unwrap_or(farmem_sys::online_cpus());
        Ok(Cells {
            p,
            custom: p.workload.is_none(),
            cmd,
            reading,
            env: vec![("OMP_NUM_THREADS".to_string(), threads.to_string())],
            threads,
            farmem: p.farmem.display().to_string(),
            limits: child::Limits {
                timeout: Some(Duration::from_secs(timeout_s)),
                stop: Some(stop),
                ..child::Limits::default()
            },
            ceiling: None,
            size,
            local_secs: None,
        })
    }

    /// Every (system, expansion) cell, all-local first as the reference.
    fn all(
        &mut self,
        exps: &[f64],
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<Vec<RunResult>, BenchError> {
        let mut results: Vec<RunResult> = Vec::new();
        let mut systems = self.p.systems.clone();
        if self.custom && !systems.contains(&System::Local) {
            // The all-local run measures the footprint every budget comes from.
            systems.push(System::Local);
        }
        // The reference first.
        systems.sort_by_key(|s| *s != System::Local);
        systems.dedup();
        for sys in systems {
            let es: &[f64] = if sys == System::Local { &[1.0] } else { exps };
            for &e in es {
                if stop.load(Ordering::Acquire) {
                    return Err(BenchError::Interrupted);
                }
                results.push(self.cell(sys, e, progress)?);
            }
        }
        Ok(results)
    }

    /// One cell: its runs, and what they add up to.
    fn cell(
        &mut self,
        sys: System,
        e: f64,
        progress: &mut dyn Progress,
    ) -> Result<RunResult, BenchError> {
        // A positive size over a positive expansion; the cast saturates.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let budget = ((self.size as f64 / e) as u64)
            .next_multiple_of(1 << 20)
            .max(1 << 20);
        progress.doing(&format!("{} {e}x", sys.name()));
        let runs = self.runs(sys, budget, progress)?;
        let line = runs
            .last
            .as_ref()
            .map(|o| o.line.clone())
            .unwrap_or_default();
        if sys == System::Local {
            self.reference(&runs)?;
        }
        let check = field(&line, "check").unwrap_or("-").to_string();
        if check == "FAILED" {
            return Err(BenchError::WrongResult {
                cmd: self.cmd[0].clone(),
                system: sys.name(),
                expansion: e,
                line,
            });
        }
        Ok(self.result(sys, e, budget, runs, line, check))
    }

    /// `p.runs` runs of one cell; the first failure ends the cell (it is
    /// recorded as the reason), an interruption the whole run.
    fn runs(
        &self,
        sys: System,
        budget: u64,
        progress: &mut dyn Progress,
    ) -> Result<Runs, BenchError> {
        let mut runs = Runs {
            seconds: Vec::new(),
            last: None,
            unavailable: None,
        };
        for _ in 0..self.p.runs {
            let attempt = self.attempt(sys, budget);
            progress.step();
            match attempt {
                Ok(o) => {
                    runs.seconds.push(
                        field(&o.line, "seconds")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(f64::NAN),
                    );
                    runs.last = Some(o);
                }
                Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
                Err(e) => {
                    runs.unavailable = Some(e.to_string());
                    break;
                }
            }
        }
        Ok(runs)
    }

    /// One run on `sys`: the system is set up for it and torn down (on
    /// drop) when it ends.
    fn attempt(&self, sys: System, budget: u64) -> Result<Outcome, BenchError> {
        let (cmd, env, limits, reading) = (&self.cmd, &self.env, &self.limits, &self.reading);
        match sys {
            System::Local => run_once(cmd, env, None, limits, reading),
            System::Farmem => {
                let mut c = vec![
                    self.farmem.clone(),
                    "run".into(),
                    "--local".into(),
                    budget.to_string(),
                    "--stats".into(),
                    "--".into(),
                ];
                c.extend(cmd.iter().cloned());
                run_once(&c, env, None, limits, reading)
            }
            System::Swap | System::Zram => {
                // 3x SIZE: room for the data and the workload's own temporaries
                // (glibc's qsort is a merge sort with an equal-sized buffer).
                let _area = if sys == System::Swap {
                    SwapArea::file(self.size * 3)?
                } else {
                    SwapArea::zram(self.size * 3)?
                };
                let cg = Cgroup::new(budget + CGROUP_ALLOWANCE)?;
                run_once(cmd, env, Some(&cg), limits, reading)
            }
            System::SsdMmap if self.custom => Err(BenchError::Unavailable(
                "only for the built-in workloads, whose arrays can be mapped from a file (FARMEM_BENCH_FILE); a program's own memory cannot".into(),
            )),
            System::SsdMmap => {
                let f = DataFile::new();
                let cg = Cgroup::new(budget + CGROUP_ALLOWANCE)?;
                let mut env2 = env.clone();
                env2.push(("FARMEM_BENCH_FILE".into(), f.0.display().to_string()));
                run_once(cmd, &env2, Some(&cg), limits, reading)
            }
        }
    }

    /// What the all-local cell settles: the time every other cell is
    /// compared to and, for a program, the footprint.
    fn reference(&mut self, runs: &Runs) -> Result<(), BenchError> {
        self.local_secs = Some(runs.median());
        if self.custom {
            // The footprint: the peak resident memory of the last
            // all-local run. Every budget is a share of it.
            let rss = runs.last.as_ref().map_or(0, |o| o.max_rss);
            if rss == 0 {
                return Err(BenchError::Failed(format!(
                    "{} did not run all-local ({}); nothing to compare against",
                    self.cmd[0],
                    runs.unavailable.as_deref().unwrap_or("no result")
                )));
            }
            self.size = rss.next_multiple_of(1 << 20);
        }
        Ok(())
    }

    /// A cell's row, from its runs and its last run's `result` line.
    fn result(
        &self,
        sys: System,
        e: f64,
        budget: u64,
        runs: Runs,
        line: String,
        check: String,
    ) -> RunResult {
        let seconds = runs.median();
        let finite = || runs.seconds.iter().copied().filter(|v| v.is_finite());
        let bound = (sys == System::Farmem)
            .then(|| {
                let shape = shape_of(self.p.workload?, self.size, &self.p.options, &line)?;
                Some(traffic_bound(&shape, budget))
            })
            .flatten();
        let last = &runs.last;
        RunResult {
            system: sys.name().into(),
            expansion: e,
            local_budget_bytes: if sys == System::Local {
                self.size
            } else {
                budget
            },
            seconds,
            seconds_min: finite().fold(f64::NAN, f64::min),
            seconds_max: finite().fold(f64::NAN, f64::max),
            metric: field(&line, "metric")
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN),
            unit: field(&line, "unit").unwrap_or("-").to_string(),
            relative_runtime: self.local_secs.map_or(f64::NAN, |l| seconds / l),
            check,
            runs: runs.seconds,
            unavailable: runs.unavailable,
            farmem_stats: (sys == System::Farmem)
                .then(|| {
                    last.as_ref().map(|o| {
                        o.stderr
                            .lines()
                            .skip_while(|l| !l.starts_with("farmem stats"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                })
                .flatten(),
            timed_fetched_bytes: timed_field(last, "fetched_bytes"),
            timed_written_back_bytes: timed_field(last, "written_back_bytes"),
            bound_fetched_bytes: bound.map(|b| b.fetched),
            bound_written_back_bytes: bound.map(|b| b.written_back),
            bound_seconds: bound.zip(self.ceiling).map(|(b, c)| c.seconds(&b)),
            result_line: line,
        }
    }

    /// The whole run, its parameters as the JSON output records them.
    fn report(self, exps: Vec<f64>, results: Vec<RunResult>) -> Report {
        let p = self.p;
        let wname = p.workload.map_or("custom", Workload::name).to_string();
        let params = Recorded {
            workload: wname.clone(),
            size_bytes: self.size,
            expansion: exps.clone(),
            threads: self.threads,
            runs: p.runs,
            statistic: "median".to_string(),
            variant: p.options.variant().to_string(),
            hints: p.options.hints,
            classic: p.options.classic,
            command: self.cmd.clone(),
            cgroup_allowance_bytes: CGROUP_ALLOWANCE,
            swap_device_bytes: self.size * 3,
            footprint_measured: self.custom,
            metric_regex: p.metric_regex.clone(),
            far_ceiling: self.ceiling,
        };
        Report {
            workload: wname,
            size: self.size,
            expansions: exps,
            systems: p.systems.clone(),
            threads: self.threads,
            runs: p.runs,
            command: self.cmd,
            footprint_measured: self.custom,
            ceiling: self.ceiling,
            params,
            results,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            workload: Some(Workload::Qsort),
            cmd: vec![],
            size: Some(64 << 20),
            expansions: vec![2.0],
            systems: vec![System::Local, System::Farmem],
            threads: None,
            runs: 1,
            options: Options::default(),
            timeout_s: 10,
            quick: false,
            metric_regex: None,
            workloads_dir: PathBuf::from("/nonexistent"),
            farmem: PathBuf::from("/nonexistent"),
        }
    }

    fn invalid(p: Params) -> String {
        match validate(&p) {
            Err(BenchError::Invalid(m)) => m,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn every_bad_parameter_is_named() {
        assert!(validate(&params()).is_ok());
        assert!(invalid(Params {
            runs: 0,
            ..params()
        })
        .contains("--runs"));
        assert!(invalid(Params {
            timeout_s: 0,
            ..params()
        })
        .contains("--timeout"));
        assert!(invalid(Params {
            size: Some(1 << 20),
            ..params()
        })
        .contains("--size"));
        assert!(invalid(Params {
            expansions: vec![0.5],
            ..params()
        })
        .contains("--expansion"));
        assert!(invalid(Params {
            threads: Some(0),
            ..params()
        })
        .contains("--threads"));
        assert!(invalid(Params {
            systems: vec![],
            ..params()
        })
        .contains("--systems"));
        let mut o = params();
        o.options.variant = Some("diagonal".into());
        assert!(invalid(o).contains("--variant"));
        let mut o = params();
        o.options.classic = true;
        assert!(invalid(o).contains("--classic"));
        let custom = Params {
            workload: None,
            cmd: vec!["true".into()],
            ..params()
        };
        assert!(invalid(custom.clone()).contains("--size"));
        assert!(validate(&Params {
            size: None,
            ..custom
        })
        .is_ok());
        assert!(invalid(Params {
            metric_regex: Some("x".into()),
            ..params()
        })
        .contains("--metric-regex"));
    }

    #[test]
    fn quick_shrinks_the_run() {
        let (size, exps, timeout) = validate(&Params {
            quick: true,
            size: Some(1 << 30),
            expansions: vec![1.0, 4.0, 8.0],
            timeout_s: 600,
            ..params()
        })
        .unwrap();
        assert_eq!((size, exps, timeout), (16 << 20, vec![1.0], 60));
    }

    #[test]
    fn the_metric_is_the_last_match_first_group() {
        let re = regex::Regex::new(r"rate=([0-9.]+)").unwrap();
        assert_eq!(custom_metric(&re, "rate=1.5\nrate=2.5\n"), Some(2.5));
        assert_eq!(custom_metric(&re, "nothing"), None);
        let whole = regex::Regex::new(r"[0-9]+").unwrap();
        assert_eq!(custom_metric(&whole, "took 42 s"), Some(42.0));
    }
}
