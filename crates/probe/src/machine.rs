//! The machine a result was measured on, read from /proc and sysfs.

use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Cache {
    pub level: u32,
    /// "Data", "Instruction" or "Unified".
    pub kind: String,
    pub bytes: u64,
    /// CPUs sharing this cache, as the kernel lists them.
    pub shared_cpus: String,
}

/// Fields a result file lacks (an older farmem's) read back as defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub caches: Vec<Cache>,
    pub numa_nodes: usize,
    pub memory_bytes: u64,
    pub kernel: String,
    /// /sys/kernel/mm/transparent_hugepage/enabled, the selected mode.
    pub thp: String,
    pub hugepages_reserved: u64,
}

fn read(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Parse sizes as sysfs writes them: "48K", "1024K", "32768K", "2M".
pub fn parse_sysfs_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1024),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// Caches of cpu0 from `root`/devices/system/cpu/cpu0/cache.
pub fn caches(sys_root: &Path) -> Vec<Cache> {
    let dir = sys_root.join("devices/system/cpu/cpu0/cache");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    let mut names: Vec<_> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("level").exists())
        .collect();
    names.sort();
    for p in names {
        let (Some(level), Some(kind), Some(size)) = (
            read(p.join("level")),
            read(p.join("type")),
            read(p.join("size")),
        ) else {
            continue;
        };
        let (Ok(level), Some(bytes)) = (level.parse(), parse_sysfs_size(&size)) else {
            continue;
        };
        out.push(Cache {
            level,
            kind,
            bytes,
            shared_cpus: read(p.join("shared_cpu_list")).unwrap_or_default(),
        });
    }
    out
}

impl Machine {
    pub fn detect() -> Machine {
        let sys = Path::new("/sys");
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let numa_nodes = std::fs::read_dir(sys.join("devices/system/node"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                    })
                    .count()
            })
            .unwrap_or(1)
            .max(1);
        let thp = read(sys.join("kernel/mm/transparent_hugepage/enabled"))
            .and_then(|s| {
                s.split_whitespace()
                    .find(|w| w.starts_with('['))
                    .map(|w| w.trim_matches(['[', ']']).to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = farmem_sys::process::kernel_release();
        Machine {
            cpu_model,
            cpus: farmem_sys::online_cpus(),
            caches: caches(sys),
            numa_nodes,
            memory_bytes: farmem_sys::phys_memory(),
            kernel,
            thp,
            hugepages_reserved: read("/proc/sys/vm/nr_hugepages")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        }
    }

    /// Size of the largest data or unified cache (the last level), if known.
    pub fn llc_bytes(&self) -> Option<u64> {
        self.known().caches.last().copied()
    }

    /// What level detection may rely on: the data (or unified) cache size
    /// of each level, L1 first.
    pub fn known(&self) -> crate::levels::Known {
        let mut levels: Vec<u32> = self
            .caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .map(|c| c.level)
            .collect();
        levels.sort_unstable();
        levels.dedup();
        let caches = levels
            .iter()
            .filter_map(|&l| {
                self.caches
                    .iter()
                    .filter(|c| c.level == l && c.kind != "Instruction")
                    .map(|c| c.bytes)
                    .max()
            })
            .collect();
        crate::levels::Known { caches }
    }

    /// One line for human output.
    pub fn summary(&self) -> String {
        let caches: Vec<String> = self
            .caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .map(|c| {
                format!(
                    "L{} {}",
                    c.level,
                    farmem_runtime::config::format_size(c.bytes)
                )
            })
            .collect();
        format!(
            "{} | {} CPUs | {} | {} NUMA node{} | {} RAM | Linux {} | THP {}",
            self.cpu_model,
            self.cpus,
            caches.join(", "),
            self.numa_nodes,
            if self.numa_nodes == 1 { "" } else { "s" },
            farmem_runtime::config::format_size(self.memory_bytes),
            self.kernel,
            self.thp
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_sizes() {
        assert_eq!(parse_sysfs_size("48K"), Some(48 << 10));
        assert_eq!(parse_sysfs_size("32768K"), Some(32 << 20));
        assert_eq!(parse_sysfs_size("2M"), Some(2 << 20));
        assert_eq!(parse_sysfs_size("512"), Some(512));
        assert_eq!(parse_sysfs_size("x"), None);
    }

    #[test]
    fn reads_a_fixture_cache_tree() {
        let root = std::env::temp_dir().join(format!("farmem-sysfs-{}", std::process::id()));
        for (i, (lvl, kind, size)) in [
            (1, "Data", "32K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "512K"),
        ]
        .iter()
        .enumerate()
        {
            let d = root.join(format!("devices/system/cpu/cpu0/cache/index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("level"), format!("{lvl}\n")).unwrap();
            std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
        }
        let c = caches(&root);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].bytes, 512 << 10);
        std::fs::remove_dir_all(root).ok();
    }
}
