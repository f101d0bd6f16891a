//! Placements in numactl's terms, and the plans built from them.

use crate::topology::{format_list, parse_list, Topology};
use crate::NumaError;
use serde::{Deserialize, Serialize};

/// Where memory goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", content = "nodes", rename_all = "lowercase")]
pub enum MemPolicy {
    /// The kernel's default (first touch: the node of the CPU that faults).
    Default,
    /// Only these nodes (`--membind`).
    Bind(Vec<usize>),
    /// Round-robin over these nodes (`--interleave`).
    Interleave(Vec<usize>),
    /// This node first, others when it is full (`--preferred`).
    Preferred(usize),
    /// The node of the CPU that faults, strictly (`--localalloc`).
    Local,
}

/// A memory policy and an optional CPU set, applied to a child before exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub name: String,
    pub mem: MemPolicy,
    /// Nodes whose CPUs the program may run on (`--cpunodebind`).
    pub cpu_nodes: Option<Vec<usize>>,
    /// The CPUs that means.
    pub cpus: Option<Vec<usize>>,
}

impl Placement {
    pub fn default_policy() -> Placement {
        Placement {
            name: "default".into(),
            mem: MemPolicy::Default,
            cpu_nodes: None,
            cpus: None,
        }
    }

    /// Build from numactl-style flags, checked against `topo`. Each value is
    /// a node list ("0", "0-1", "all").
    pub fn from_flags(
        topo: &Topology,
        membind: Option<&str>,
        cpunodebind: Option<&str>,
        interleave: Option<&str>,
        localalloc: bool,
        preferred: Option<usize>,
    ) -> Result<Placement, NumaError> {
        let mems = [
            membind.is_some(),
            interleave.is_some(),
            localalloc,
            preferred.is_some(),
        ];
        if mems.iter().filter(|&&b| b).count() > 1 {
            return Err(NumaError::Workload(
                "--membind, --interleave, --localalloc and --preferred are exclusive; give one"
                    .into(),
            ));
        }
        let nodes = |s: &str| -> Result<Vec<usize>, NumaError> {
            let v = if s == "all" {
                topo.ids()
            } else {
                parse_list(s)?
            };
            for &n in &v {
                topo.node(n)?;
            }
            Ok(v)
        };
        let mem = if let Some(s) = membind {
            MemPolicy::Bind(nodes(s)?)
        } else if let Some(s) = interleave {
            MemPolicy::Interleave(nodes(s)?)
        } else if let Some(n) = preferred {
            topo.node(n)?;
            MemPolicy::Preferred(n)
        } else if localalloc {
            MemPolicy::Local
        } else {
            MemPolicy::Default
        };
        let mut p = Placement {
            name: String::new(),
            mem,
            cpu_nodes: None,
            cpus: None,
        };
        if let Some(s) = cpunodebind {
            p = p.with_cpu_nodes(topo, &nodes(s)?)?;
        }
        p.name = p.numactl_args();
        Ok(p)
    }

    /// Also bind the CPUs to `nodes`' CPUs.
    pub fn with_cpu_nodes(
        mut self,
        topo: &Topology,
        nodes: &[usize],
    ) -> Result<Placement, NumaError> {
        let mut cpus = Vec::new();
        for &n in nodes {
            cpus.extend(&topo.node(n)?.cpus);
        }
        cpus.sort_unstable();
        self.cpu_nodes = Some(nodes.to_vec());
        self.cpus = Some(cpus);
        Ok(self)
    }

    /// The same placement as numactl flags (for people and reports).
    pub fn numactl_args(&self) -> String {
        let mut v = Vec::new();
        match &self.mem {
            MemPolicy::Default => {}
            MemPolicy::Bind(n) => v.push(format!("--membind={}", format_list(n))),
            MemPolicy::Interleave(n) => v.push(format!("--interleave={}", format_list(n))),
            MemPolicy::Preferred(n) => v.push(format!("--preferred={n}")),
            MemPolicy::Local => v.push("--localalloc".into()),
        }
        if let Some(n) = &self.cpu_nodes {
            v.push(format!("--cpunodebind={}", format_list(n)));
        }
        if v.is_empty() {
            "default".into()
        } else {
            v.join(" ")
        }
    }

    /// Apply to the calling thread. Only raw syscalls and no allocation, so
    /// it is safe between fork and exec.
    pub fn apply(&self) -> std::io::Result<()> {
        use farmem_sys::numa::*;
        match &self.mem {
            MemPolicy::Default => set_mempolicy(MPOL_DEFAULT, &[])?,
            MemPolicy::Bind(n) => set_mempolicy(MPOL_BIND, n)?,
            MemPolicy::Interleave(n) => set_mempolicy(MPOL_INTERLEAVE, n)?,
            MemPolicy::Preferred(n) => set_mempolicy(MPOL_PREFERRED, std::slice::from_ref(n))?,
            MemPolicy::Local => set_mempolicy(MPOL_LOCAL, &[])?,
        }
        if let Some(c) = &self.cpus {
            set_affinity(c)?;
        }
        Ok(())
    }
}

/// One cell of the X×Y matrix: memory on node `x`, threads on node `y`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub mem_node: usize,
    pub cpu_node: usize,
    pub placement: Placement,
}

/// Every (X, Y) pair, X outer: seed 000's "type XY" runs.
pub fn xy_plan(topo: &Topology) -> Result<Vec<Cell>, NumaError> {
    let mut out = Vec::new();
    for x in topo.ids() {
        for y in topo.ids() {
            let mut p = Placement {
                name: String::new(),
                mem: MemPolicy::Bind(vec![x]),
                cpu_nodes: None,
                cpus: None,
            }
            .with_cpu_nodes(topo, &[y])?;
            p.name = p.numactl_args();
            out.push(Cell {
                mem_node: x,
                cpu_node: y,
                placement: p,
            });
        }
    }
    Ok(out)
}

/// Seed 003's comparison: default, bound to each node (CPUs and memory),
/// localalloc, interleave over all nodes, and preferred each node.
pub fn policy_plan(topo: &Topology) -> Result<Vec<Placement>, NumaError> {
    let ids = topo.ids();
    let mut out = vec![Placement::default_policy()];
    for &n in &ids {
        let mut p = Placement {
            name: String::new(),
            mem: MemPolicy::Bind(vec![n]),
            cpu_nodes: None,
            cpus: None,
        }
        .with_cpu_nodes(topo, &[n])?;
        p.name = p.numactl_args();
        out.push(p);
    }
    for mem in [MemPolicy::Local, MemPolicy::Interleave(ids.clone())] {
        let mut p = Placement {
            name: String::new(),
            mem,
            cpu_nodes: None,
            cpus: None,
        };
        p.name = p.numactl_args();
        out.push(p);
    }
    for &n in &ids {
        let mut p = Placement {
            name: String::new(),
            mem: MemPolicy::Preferred(n),
            cpu_nodes: None,
            cpus: None,
        };
        p.name = p.numactl_args();
        out.push(p);
    }
    Ok(out)
}
