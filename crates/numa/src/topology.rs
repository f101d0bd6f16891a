//! NUMA topology from sysfs (`ROOT/devices/system/node`), like `numactl -H`.

use crate::NumaError;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Node {
    pub id: usize,
    pub cpus: Vec<usize>,
    pub mem_total: u64,
    pub mem_free: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// `distances[i][j]`: the kernel's relative distance from node i to j.
    pub distances: Vec<Vec<u32>>,
}

/// Parse a kernel list: "0-7,16-23" → [0..=7, 16..=23].
pub fn parse_list(s: &str) -> Result<Vec<usize>, NumaError> {
    let bad = || NumaError::BadList(s.to_string());
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b || b - a > 1 << 16 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Format a list back in the kernel's compressed form.
pub fn format_list(v: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

fn meminfo_field(text: &str, field: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            // "Node 0 MemTotal:  123 kB"
            let (_, _, name, val) = (w.next()?, w.next()?, w.next()?, w.next()?);
            (name.trim_end_matches(':') == field).then(|| val.parse::<u64>().ok())?
        })
        .unwrap_or(0)
        * 1024
}

impl Topology {
    /// Read the topology under `root` (normally "/sys").
    pub fn read(root: &Path) -> Result<Topology, NumaError> {
        let dir = root.join("devices/system/node");
        let err = |why: String| NumaError::Topology {
            root: root.display().to_string(),
            why,
        };
        let online = std::fs::read_to_string(dir.join("online"))
            .map_err(|e| err(format!("node/online: {e}")))?;
        let ids = parse_list(&online)?;
        if ids.is_empty() {
            return Err(err("no node is online".into()));
        }
        let mut nodes = Vec::new();
        let mut distances = Vec::new();
        for &id in &ids {
            let nd = dir.join(format!("node{id}"));
            let cpus = parse_list(
                &std::fs::read_to_string(nd.join("cpulist"))
                    .map_err(|e| err(format!("node{id}/cpulist: {e}")))?,
            )?;
            let mi = std::fs::read_to_string(nd.join("meminfo")).unwrap_or_default();
            let dist: Vec<u32> = std::fs::read_to_string(nd.join("distance"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            nodes.push(Node {
                id,
                cpus,
                mem_total: meminfo_field(&mi, "MemTotal"),
                mem_free: meminfo_field(&mi, "MemFree"),
            });
            distances.push(dist);
        }
        Ok(Topology { nodes, distances })
    }

    pub fn node(&self, id: usize) -> Result<&Node, NumaError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| NumaError::NoSuchNode {
                node: id,
                have: format_list(&self.ids()),
            })
    }

    /// What a table of this machine's cells means when it has one node.
    pub fn one_node_note(&self) -> Option<String> {
        (self.nodes.len() == 1).then(|| {
            "note: this machine has one NUMA node, so every placement puts memory on node 0 and threads on the same \
             CPUs; the matrix is 1x1 and the policies collapse into one (differences are run-to-run noise)."
                .to_string()
        })
    }

    pub fn ids(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// `numactl -H`-style text.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let mut s = format!(
            "available: {} node{} ({})\n",
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" },
            format_list(&self.ids())
        );
        for n in &self.nodes {
            let _ = writeln!(s, "node {} cpus: {}", n.id, format_list(&n.cpus));
            let _ = writeln!(s, "node {} size: {:.1} GiB", n.id, gib(n.mem_total));
            let _ = writeln!(s, "node {} free: {:.1} GiB", n.id, gib(n.mem_free));
        }
        let _ = write!(s, "node distances:\nnode ");
        for n in &self.nodes {
            let _ = write!(s, "{:>4}", n.id);
        }
        s.push('\n');
        for (n, row) in self.nodes.iter().zip(&self.distances) {
            let _ = write!(s, "{:>4}:", n.id);
            for d in row {
                let _ = write!(s, "{d:>4}");
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(
            parse_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("x").is_err());
        assert_eq!(parse_list("").unwrap(), Vec::<usize>::new());
    }
}
