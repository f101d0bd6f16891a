//! Memory on node X, threads on node Y, for every X and Y (seed 000): a
//! workload timed under each cell of [`crate::plan::xy_plan`], the slowdown
//! of every cell against local memory for the same CPUs, and where the
//! memory landed. Results are typed: the built-in memory-write workload runs
//! in a thread of this process under the cell's placement (no worker
//! process whose text is read back); only foreign programs (hackbench,
//! memcslap, a user's command) are read from their output.

use crate::plan::{Cell, MemPolicy, Placement};
use crate::run::run_for;
use crate::topology::Topology;
use crate::{verify, NumaError};
use farmem_probe::machine::Machine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What runs in every cell.
#[derive(Clone, Debug)]
pub enum XyWorkload {
    /// mmap `size` bytes, write 4 bytes in every 64-byte line, `passes`
    /// times: pass 1 includes the page faults, later passes do not.
    Memwrite { size: usize, passes: u32 },
    /// hackbench (Debian rt-tests): scheduler and IPC traffic.
    Hackbench,
    /// memcached under the placement, memcslap on the same CPUs.
    Memslap,
    /// Any command, timed by the wall clock.
    Command(Vec<String>),
}

impl XyWorkload {
    /// The built-in workloads: name and what it is.
    pub const BUILT_IN: [(&'static str, &'static str); 3] = [
        (
            "memwrite",
            "mmap SIZE, write 4 bytes in every 64-byte line, P passes",
        ),
        (
            "hackbench",
            "hackbench (Debian rt-tests): scheduler and IPC traffic",
        ),
        ("memslap", "memcached driven by memcslap, both on node Y"),
    ];

    /// A built-in workload by name; memwrite over `size` bytes, `passes`
    /// times.
    pub fn built_in(name: &str, size: u64, passes: u32) -> Result<XyWorkload, NumaError> {
        match name {
            "memwrite" => Ok(XyWorkload::Memwrite {
                size: usize::try_from(size)
                    .map_err(|_| NumaError::Workload("--size is beyond this machine".into()))?,
                passes,
            }),
            "hackbench" => Ok(XyWorkload::Hackbench),
            "memslap" => Ok(XyWorkload::Memslap),
            _ => {
                let names: Vec<&str> = XyWorkload::BUILT_IN.iter().map(|(n, _)| *n).collect();
                Err(NumaError::Workload(format!(
                    "{name:?} is not a built-in workload: {}",
                    names.join(", ")
                )))
            }
        }
    }

    /// Its name in tables and JSON.
    pub fn describe(&self) -> String {
        match self {
            XyWorkload::Memwrite { .. } => "memwrite".into(),
            XyWorkload::Hackbench => "hackbench".into(),
            XyWorkload::Memslap => "memslap".into(),
            XyWorkload::Command(c) => c.join(" "),
        }
    }
}

/// One cell, over its runs.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct XyCell {
    pub mem_node: usize,
    pub cpu_node: usize,
    pub numactl: String,
    /// The headline time: pass 1 for memwrite, else the workload's own time.
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub seconds: f64,
    /// memwrite: median of passes 2..P.
    pub later_pass_seconds: Option<f64>,
    /// Against (Y, Y): local memory for the same CPUs.
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub slowdown_pct: f64,
    pub later_slowdown_pct: Option<f64>,
    /// Where the memory was seen (bytes by node), in the last run.
    pub by_node: BTreeMap<usize, u64>,
    /// The headline time of every run.
    pub runs: Vec<f64>,
}

/// A whole X×Y run, as `farmem numa xy --json` writes it.
#[derive(Serialize, Deserialize, Debug)]
pub struct XyReport {
    pub machine: Machine,
    pub topology: Topology,
    pub params: XyParams,
    pub cells: Vec<XyCell>,
    /// Set on a machine of one node, where every cell is the same.
    pub note: Option<String>,
}

/// The run's parameters in the report.
#[derive(Serialize, Deserialize, Debug)]
pub struct XyParams {
    pub workload: String,
    pub runs: u32,
    /// memwrite's passes and region.
    pub passes: Option<u32>,
    pub size_bytes: Option<usize>,
    /// How each cell's runs are summed up.
    pub statistic: String,
}

/// [`run`] on `topology`'s machine, with what the report needs beside.
pub fn report(
    topology: Topology,
    cells: &[Cell],
    w: &XyWorkload,
    runs: u32,
    progress: impl FnMut(),
) -> Result<XyReport, NumaError> {
    let cells = run(cells, w, runs, progress)?;
    let (passes, size_bytes) = match w {
        XyWorkload::Memwrite { size, passes } => (Some(*passes), Some(*size)),
        _ => (None, None),
    };
    Ok(XyReport {
        machine: Machine::detect(),
        note: topology.one_node_note(),
        topology,
        params: XyParams {
            workload: w.describe(),
            runs,
            passes,
            size_bytes,
            statistic: "median".to_string(),
        },
        cells,
    })
}

/// One run of a cell.
struct Sample {
    seconds: f64,
    later: Option<f64>,
    by_node: BTreeMap<usize, u64>,
}

/// The median of `v` (not empty).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Run `w` `runs` times in every cell, calling `progress` after each run.
pub fn run(
    cells: &[Cell],
    w: &XyWorkload,
    runs: u32,
    mut progress: impl FnMut(),
) -> Result<Vec<XyCell>, NumaError> {
    if runs == 0 {
        return Err(NumaError::Workload("--runs must be at least 1".into()));
    }
    if let XyWorkload::Memwrite { size, passes } = w {
        if *passes == 0 || *size < 4096 {
            return Err(NumaError::Workload(
                "--passes must be at least 1 and --size at least 4K".into(),
            ));
        }
    }
    let mut out: Vec<XyCell> = Vec::new();
    for c in cells {
        let mut head = Vec::new();
        let mut later = Vec::new();
        let mut by_node = BTreeMap::new();
        for _ in 0..runs {
            let s = run_one(w, &c.placement)?;
            progress();
            head.push(s.seconds);
            later.extend(s.later);
            by_node = s.by_node;
        }
        out.push(XyCell {
            mem_node: c.mem_node,
            cpu_node: c.cpu_node,
            numactl: c.placement.numactl_args(),
            seconds: median(&mut head.clone()),
            later_pass_seconds: (!later.is_empty()).then(|| median(&mut later)),
            slowdown_pct: 0.0,
            later_slowdown_pct: None,
            by_node,
            runs: head,
        });
    }
    slowdowns(&mut out);
    Ok(out)
}

/// Each cell's slowdown against the local cell of its CPU node, (Y, Y).
fn slowdowns(cells: &mut [XyCell]) {
    let local: BTreeMap<usize, (f64, Option<f64>)> = cells
        .iter()
        .filter(|c| c.mem_node == c.cpu_node)
        .map(|c| (c.cpu_node, (c.seconds, c.later_pass_seconds)))
        .collect();
    for c in cells {
        if let Some(&(s, l)) = local.get(&c.cpu_node) {
            c.slowdown_pct = (c.seconds / s - 1.0) * 100.0;
            c.later_slowdown_pct = c
                .later_pass_seconds
                .zip(l)
                .map(|(a, b)| (a / b - 1.0) * 100.0);
        }
    }
}

fn run_one(w: &XyWorkload, p: &Placement) -> Result<Sample, NumaError> {
    match w {
        XyWorkload::Memwrite { size, passes } => std::thread::scope(|s| {
            s.spawn(|| {
                p.apply().map_err(|e| {
                    NumaError::Workload(format!("cannot apply {}: {e}", p.numactl_args()))
                })?;
                memwrite(*size, *passes)
            })
            .join()
            .unwrap_or_else(|_| Err(NumaError::Workload("the memwrite thread panicked".into())))
        }),
        XyWorkload::Command(cmd) => {
            let o = run_for(cmd, p, None)?;
            if !o.status.success() {
                return Err(NumaError::Workload(format!(
                    "{} failed under {}: {}",
                    cmd[0],
                    p.numactl_args(),
                    o.status
                )));
            }
            Ok(Sample {
                seconds: o.wall_s,
                later: None,
                by_node: o.by_node,
            })
        }
        XyWorkload::Hackbench => {
            let cmd: Vec<String> = ["hackbench", "-g", "10", "-l", "1000"]
                .map(String::from)
                .into();
            let o = run_for(&cmd, p, None).map_err(|e| {
                NumaError::Workload(format!(
                    "{e} (hackbench is installed by scripts/setup.sh: Debian rt-tests)"
                ))
            })?;
            let t = number_after(&o.lines, "Time:")
                .ok_or_else(|| NumaError::Workload("hackbench printed no Time:".into()))?;
            Ok(Sample {
                seconds: t,
                later: None,
                by_node: o.by_node,
            })
        }
        XyWorkload::Memslap => memslap(p),
    }
}

/// The memory-write workload in the calling thread, which runs under the
/// cell's placement: per-pass times, then where its pages are.
fn memwrite(size: usize, passes: u32) -> Result<Sample, NumaError> {
    let buf = farmem_sys::mem::Mapping::with_pages(size, farmem_sys::mem::Pages::Small)
        .map_err(|e| NumaError::Workload(format!("cannot map {size} bytes: {e}")))?;
    let lines = buf.len() / 64;
    let p = buf.as_ptr().cast::<u32>();
    let mut times = Vec::new();
    for pass in 1..=passes {
        let t = Instant::now();
        for i in 0..lines {
            // The line's index (its low 32 bits: any pattern will do) and the pass.
            #[allow(clippy::cast_possible_truncation)]
            let word = (i as u32) ^ pass;
            // SAFETY: i * 16 u32s = i * 64 bytes < len: inside the mapping,
            // which this thread alone uses.
            unsafe { p.add(i * 16).write_volatile(word) };
        }
        times.push(t.elapsed().as_secs_f64());
    }
    // Every 16th page, asked of the kernel (move_pages), scaled to bytes.
    let samples = (buf.len() / 4096).div_ceil(16);
    let census = crate::matrix::pages_by_node(buf.as_ptr() as usize, buf.len(), samples);
    let per = (buf.len() / farmem_sys::usize_from(census.values().sum::<u64>().max(1))) as u64;
    let by_node = census
        .into_iter()
        .filter_map(|(n, c)| Some((usize::try_from(n).ok()?, c * per)))
        .collect();
    let mut later = times[1..].to_vec();
    Ok(Sample {
        seconds: times[0],
        later: (!later.is_empty()).then(|| median(&mut later)),
        by_node,
    })
}

/// The number after `key` in the first line that has it ("Time: 0.5").
fn number_after(lines: &[(f64, String)], key: &str) -> Option<f64> {
    lines.iter().find_map(|(_, l)| {
        let i = l.find(key)?;
        l[i + key.len()..]
            .split_whitespace()
            .next()?
            .trim_end_matches(['s', '.'])
            .parse()
            .ok()
    })
}

/// memcached under the placement, and memcslap with the same CPUs (seed 000
/// ran both on one node); memcslap's total time.
fn memslap(p: &Placement) -> Result<Sample, NumaError> {
    let port = 20000 + u16::try_from(std::process::id() % 20000).expect("below 20000");
    let mut server = std::process::Command::new("memcached");
    server.args([
        "-u",
        "root",
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "2",
        "-m",
        "256",
    ]);
    let sp = p.clone();
    // SAFETY: the closure makes only raw syscalls and allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut server, move || sp.apply());
    }
    let mut child = server.spawn().map_err(|e| {
        NumaError::Workload(format!(
            "cannot start memcached ({e}); scripts/setup.sh installs it (Debian memcached)"
        ))
    })?;
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(&addr).is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(NumaError::Workload(format!(
                "memcached did not start on {addr}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = Placement {
        name: "client".into(),
        mem: MemPolicy::Default,
        cpu_nodes: p.cpu_nodes.clone(),
        cpus: p.cpus.clone(),
    };
    let cmd: Vec<String> = [
        "memcslap".to_string(),
        format!("--servers={addr}"),
        "--concurrency=4".into(),
        "--execute-number=20000".into(),
    ]
    .into();
    let o = run_for(&cmd, &client, None);
    let by_node = verify::sample(child.id());
    let _ = child.kill();
    let _ = child.wait();
    let o = o.map_err(|e| {
        NumaError::Workload(format!(
            "{e} (memcslap is installed by scripts/setup.sh: Debian libmemcached-tools)"
        ))
    })?;
    let t = number_after(&o.lines, "Time total:")
        .ok_or_else(|| NumaError::Workload("memcslap printed no Time total:".into()))?;
    Ok(Sample {
        seconds: t,
        later: None,
        by_node,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::xy_plan;
    use crate::topology::Topology;

    #[test]
    fn built_in_workloads_by_name() {
        for (name, _) in XyWorkload::BUILT_IN {
            let w = XyWorkload::built_in(name, 1 << 20, 2).unwrap();
            assert_eq!(w.describe(), name);
        }
        assert!(matches!(
            XyWorkload::built_in("memwrite", 8192, 3).unwrap(),
            XyWorkload::Memwrite {
                size: 8192,
                passes: 3
            }
        ));
        let e = XyWorkload::built_in("stream", 1, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("stream") && e.contains("memwrite"), "{e}");
    }

    fn cell(mem: usize, cpu: usize, s: f64, later: Option<f64>) -> XyCell {
        XyCell {
            mem_node: mem,
            cpu_node: cpu,
            numactl: String::new(),
            seconds: s,
            later_pass_seconds: later,
            slowdown_pct: 0.0,
            later_slowdown_pct: None,
            by_node: BTreeMap::new(),
            runs: vec![s],
        }
    }

    /// Each cell against (Y, Y), by hand.
    #[test]
    fn slowdown_is_against_local_memory_for_the_same_cpus() {
        let mut c = vec![
            cell(0, 0, 1.0, Some(0.5)),
            cell(1, 0, 1.5, Some(0.75)),
            cell(0, 1, 2.4, None),
            cell(1, 1, 2.0, None),
        ];
        slowdowns(&mut c);
        let got: Vec<f64> = c.iter().map(|c| c.slowdown_pct.round()).collect();
        assert_eq!(got, [0.0, 50.0, 20.0, 0.0]);
        assert_eq!(c[1].later_slowdown_pct.map(f64::round), Some(50.0));
        assert_eq!(c[2].later_slowdown_pct, None);
    }

    #[test]
    fn numbers_after_a_key() {
        let lines = vec![(0.1, "Running".into()), (0.2, "Time: 0.512".into())];
        assert_eq!(number_after(&lines, "Time:"), Some(0.512));
        assert_eq!(number_after(&lines, "Total:"), None);
    }

    /// On this machine: memwrite in every cell, typed, its pages on the
    /// node the cell binds.
    #[test]
    fn memwrite_runs_in_every_cell_with_its_pages_on_node_x() {
        let t = Topology::read(std::path::Path::new("/sys")).unwrap();
        let cells = xy_plan(&t).unwrap();
        let w = XyWorkload::Memwrite {
            size: 8 << 20,
            passes: 3,
        };
        let mut steps = 0;
        let got = run(&cells, &w, 2, || steps += 1).unwrap();
        assert_eq!(steps, 2 * cells.len());
        for c in &got {
            assert!(c.seconds > 0.0 && c.later_pass_seconds.is_some_and(|s| s > 0.0));
            assert_eq!(c.runs.len(), 2);
            assert_eq!(c.by_node.keys().copied().collect::<Vec<_>>(), [c.mem_node]);
            assert_eq!(c.by_node.values().sum::<u64>(), 8 << 20);
        }
        assert!(run(&cells, &w, 0, || {}).is_err());
    }
}
