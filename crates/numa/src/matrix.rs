//! Idle latency and bandwidth for every (memory node, CPU node) pair, like
//! Intel MLC's `--latency_matrix` and `--bandwidth_matrix`: the X×Y plan of
//! [`crate::plan::xy_plan`], each cell measured in a thread of its own that
//! first applies the cell's placement (memory bound to node X, CPUs of node
//! Y). [`measure`] runs the probe's pointer chase and read bandwidth in
//! every cell; [`run_cells`] runs any measurement so, and
//! [`pages_by_node`] checks where its memory landed.

use crate::plan::Cell;
use crate::topology::Node;
use crate::NumaError;
use farmem_probe::machine::Machine;
use farmem_probe::{bandwidth, chase};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One (memory node, CPU node) pair of the matrix.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct MatrixCell {
    pub mem_node: usize,
    pub cpu_node: usize,
    pub numactl: String,
    /// Idle pointer-chase latency, ns per load (median of repeats).
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub latency_ns: f64,
    /// Read bandwidth with every CPU of the CPU node, GB/s (best run).
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub read_gbps: f64,
    pub threads: usize,
    /// Sampled pages of the chased buffer, by the node they landed on.
    pub pages_by_node: BTreeMap<i32, u64>,
}

impl MatrixCell {
    /// Sampled pages that are not on the bound node (the node was full, or
    /// the policy did not hold).
    pub fn pages_off_node(&self) -> u64 {
        self.pages_by_node
            .iter()
            .filter(|(n, _)| usize::try_from(**n).ok() != Some(self.mem_node))
            .map(|(_, c)| c)
            .sum()
    }
}

/// How the matrix measures each cell.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct MatrixParams {
    /// The chase's working set, bytes.
    pub latency_bytes: usize,
    /// Each bandwidth array: half the chase's set.
    pub bandwidth_bytes_per_array: usize,
    pub latency: chase::Params,
    /// Bandwidth runs per cell; the best counts.
    pub bandwidth_repeats: u32,
    pub bandwidth_statistic: String,
}

impl MatrixParams {
    /// A chase of `size` bytes; `quick` takes fewer repeats.
    pub fn new(size: usize, quick: bool) -> MatrixParams {
        let mut latency = chase::Params::new(size as u64, chase::PageMode::Small);
        if quick {
            latency.repeats = 3;
            latency.target_ms = 10;
        }
        MatrixParams {
            latency_bytes: size,
            bandwidth_bytes_per_array: size / 2,
            latency,
            bandwidth_repeats: if quick { 2 } else { 5 },
            bandwidth_statistic: "best".to_string(),
        }
    }

    /// `size`, checked against `machine`, or the default: 4x the last-level
    /// cache (2x when `quick`), 256M to 1G (64M to 256M), at most an eighth
    /// of memory.
    pub fn for_machine(
        size: Option<u64>,
        quick: bool,
        machine: &Machine,
    ) -> Result<MatrixParams, NumaError> {
        let llc = machine.llc_bytes().unwrap_or(32 << 20);
        let size = match size {
            Some(s) if s < 1 << 20 => {
                return Err(NumaError::Workload("--size must be at least 1M".into()))
            }
            Some(s) if s > machine.memory_bytes / 4 => {
                return Err(NumaError::Workload(format!(
                    "--size {} is more than a quarter of this machine's memory",
                    farmem_sys::format_size(s)
                )))
            }
            Some(s) => s,
            None if quick => (llc * 2).clamp(64 << 20, 256 << 20),
            None => (llc * 4).clamp(256 << 20, 1 << 30),
        }
        .min(machine.memory_bytes / 8);
        let size = usize::try_from(size)
            .map_err(|_| NumaError::Workload("--size is beyond this machine".into()))?;
        Ok(MatrixParams::new(size, quick))
    }
}

/// A whole matrix run, as `farmem numa matrix --json` writes it.
#[derive(Serialize, Deserialize, Debug)]
pub struct MatrixReport {
    pub machine: Machine,
    pub nodes: Vec<Node>,
    pub params: MatrixParams,
    pub matrix: Vec<MatrixCell>,
}

/// [`measure`] every cell of `cells` on `machine`, whose nodes are `nodes`.
pub fn report(
    machine: Machine,
    nodes: Vec<Node>,
    cells: &[Cell],
    params: MatrixParams,
    progress: impl FnMut(),
) -> Result<MatrixReport, NumaError> {
    let matrix = measure(cells, &params, progress)?;
    Ok(MatrixReport {
        machine,
        nodes,
        params,
        matrix,
    })
}

/// Idle latency and read bandwidth in every cell, each in a thread under
/// the cell's placement: the chase buffer is first touched under the
/// memory policy, and the bandwidth threads inherit it with the CPU set.
pub fn measure(
    cells: &[Cell],
    p: &MatrixParams,
    progress: impl FnMut(),
) -> Result<Vec<MatrixCell>, NumaError> {
    let size = p.latency_bytes;
    run_cells(cells, progress, |c| {
        let err = |e: farmem_probe::ProbeError| NumaError::Workload(e.to_string());
        let buf = chase::Buffer::new(size, chase::PageMode::Small).map_err(err)?;
        let latency_ns = chase::measure(&buf, size, &p.latency);
        let pages_by_node = pages_by_node(buf.as_ptr() as usize, size, 256);
        drop(buf);
        let threads = c.placement.cpus.as_ref().map_or(1, |v| v.len().max(1));
        let bw =
            bandwidth::measure(size / 2, &[threads], p.bandwidth_repeats, || {}).map_err(err)?;
        let read_gbps = bw
            .iter()
            .find(|r| r.kernel == "read")
            .map_or(0.0, |r| r.gbps);
        Ok(MatrixCell {
            mem_node: c.mem_node,
            cpu_node: c.cpu_node,
            numactl: c.placement.numactl_args(),
            latency_ns,
            read_gbps,
            threads,
            pages_by_node,
        })
    })
}

/// Run `measure` once per cell, in a new thread under the cell's placement
/// (threads it starts inherit both the memory policy and the CPU set).
/// Stops at the first error.
pub fn run_cells<T: Send>(
    cells: &[Cell],
    mut progress: impl FnMut(),
    measure: impl Fn(&Cell) -> Result<T, NumaError> + Sync,
) -> Result<Vec<T>, NumaError> {
    let mut out = Vec::with_capacity(cells.len());
    for c in cells {
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                c.placement.apply().map_err(|e| {
                    NumaError::Workload(format!("cannot apply {}: {e}", c.placement.numactl_args()))
                })?;
                measure(c)
            })
            .join()
            .unwrap_or_else(|_| {
                Err(NumaError::Workload(
                    "a matrix cell's thread panicked".into(),
                ))
            })
        })?;
        out.push(r);
        progress();
    }
    Ok(out)
}

/// Where the pages of `[addr, addr + len)` are, by node, sampling at most
/// `samples` pages spread over the range (`move_pages` as a query).
pub fn pages_by_node(addr: usize, len: usize, samples: usize) -> BTreeMap<i32, u64> {
    let pages = (len / 4096).max(1);
    let step = (pages / samples.max(1)).max(1);
    let addrs: Vec<usize> = (0..pages).step_by(step).map(|p| addr + p * 4096).collect();
    let mut by = BTreeMap::new();
    if let Ok(nodes) = farmem_sys::numa::page_nodes(&addrs) {
        for n in nodes {
            *by.entry(n).or_insert(0) += 1;
        }
    }
    by
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::xy_plan;
    use crate::topology::Topology;

    fn fixture(name: &str) -> Topology {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name);
        Topology::read(&root).unwrap()
    }

    /// The matrix plan of the fixture machines: every pair once, memory
    /// bound to X and the CPUs those of Y.
    #[test]
    fn matrix_plan_of_the_fixture_machines() {
        for (name, nodes) in [("sysfs-2node", 2), ("sysfs-4node", 4)] {
            let t = fixture(name);
            let cells = xy_plan(&t).unwrap();
            assert_eq!(cells.len(), nodes * nodes, "{name}");
            for c in &cells {
                assert_eq!(
                    c.placement.mem,
                    crate::plan::MemPolicy::Bind(vec![c.mem_node])
                );
                assert_eq!(
                    c.placement.cpus.as_deref(),
                    Some(&t.node(c.cpu_node).unwrap().cpus[..])
                );
            }
            let mut pairs: Vec<_> = cells.iter().map(|c| (c.mem_node, c.cpu_node)).collect();
            pairs.dedup();
            assert_eq!(pairs.len(), nodes * nodes);
        }
    }

    /// On this machine: the matrix measured for real, quick: a latency and
    /// a bandwidth in every cell, its pages on the bound node.
    #[test]
    fn measure_every_cell_quick() {
        let t = Topology::read(std::path::Path::new("/sys")).unwrap();
        let cells = xy_plan(&t).unwrap();
        let mut steps = 0;
        let got = measure(&cells, &MatrixParams::new(8 << 20, true), || steps += 1).unwrap();
        assert_eq!(steps, cells.len());
        for c in &got {
            assert!(c.latency_ns > 0.5 && c.latency_ns < 10_000.0, "{c:?}");
            assert!(c.read_gbps > 0.1, "{c:?}");
            assert_eq!(c.pages_off_node(), 0, "{c:?}");
        }
    }

    /// On this machine: each cell runs under its placement, and the pages
    /// it touches land on the node it binds.
    #[test]
    fn cells_run_under_their_placement() {
        let t = Topology::read(std::path::Path::new("/sys")).unwrap();
        let cells = xy_plan(&t).unwrap();
        let got = run_cells(
            &cells,
            || {},
            |c| {
                let v = vec![1u8; 8 << 20];
                let by = pages_by_node(v.as_ptr() as usize, v.len(), 64);
                Ok((c.mem_node, by))
            },
        )
        .unwrap();
        for (node, by) in got {
            assert_eq!(
                by.keys().copied().collect::<Vec<_>>(),
                vec![i32::try_from(node).unwrap()],
                "{by:?}"
            );
        }
    }
}
