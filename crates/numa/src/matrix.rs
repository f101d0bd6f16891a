//! Idle latency and bandwidth for every (memory node, CPU node) pair, like
//! Intel MLC's `--latency_matrix` and `--bandwidth_matrix`: the X×Y plan of
//! [`crate::plan::xy_plan`], each cell measured in a thread of its own that
//! first applies the cell's placement (memory bound to node X, CPUs of node
//! Y). The measurement itself is the caller's (the probe's pointer chase and
//! read bandwidth); this module owns where it runs, and checks where its
//! memory landed.

use crate::plan::Cell;
use crate::NumaError;
use std::collections::BTreeMap;

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
                vec![node as i32],
                "{by:?}"
            );
        }
    }
}
