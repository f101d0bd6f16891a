//! Where a process's memory actually is, from `/proc/PID/numa_maps`.

use std::collections::BTreeMap;

/// Sum the `N<node>=<pages>` fields of a numa_maps text, in bytes per node
/// (each line's pages have that line's `kernelpagesize_kB`).
pub fn parse_numa_maps(text: &str) -> BTreeMap<usize, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let page_kb: u64 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB=")?.parse().ok())
            .unwrap_or(4);
        for w in line.split_whitespace() {
            let Some(rest) = w.strip_prefix('N') else {
                continue;
            };
            let Some((node, pages)) = rest.split_once('=') else {
                continue;
            };
            if let (Ok(node), Ok(pages)) = (node.parse::<usize>(), pages.parse::<u64>()) {
                *out.entry(node).or_insert(0) += pages * page_kb * 1024;
            }
        }
    }
    out
}

/// A process's memory by node now (empty if it is gone).
pub fn sample(pid: u32) -> BTreeMap<usize, u64> {
    std::fs::read_to_string(format!("/proc/{pid}/numa_maps"))
        .map(|t| parse_numa_maps(&t))
        .unwrap_or_default()
}

/// "N0 120M (75%), N1 40M (25%)".
pub fn render(by_node: &BTreeMap<usize, u64>) -> String {
    let total: u64 = by_node.values().sum();
    if total == 0 {
        return "no pages seen".into();
    }
    by_node
        .iter()
        .map(|(n, b)| {
            format!(
                "N{n} {:.0}M ({:.0}%)",
                *b as f64 / (1 << 20) as f64,
                *b as f64 * 100.0 / total as f64
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_pages_per_node_with_page_sizes() {
        let t = "7f0000000000 default anon=10 dirty=10 N0=6 N1=4 kernelpagesize_kB=4\n\
                 7f1000000000 bind:1 anon=2 N1=2 kernelpagesize_kB=2048\n\
                 7ffd00000000 default stack anon=3 N0=3 kernelpagesize_kB=4\n";
        let m = parse_numa_maps(t);
        assert_eq!(m[&0], 9 * 4096);
        assert_eq!(m[&1], 4 * 4096 + 2 * 2048 * 1024);
        assert!(render(&m).contains("N1"));
    }
}
