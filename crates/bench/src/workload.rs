//! The built-in workloads (`workloads/*.c`, built next to farmem) and the
//! command line each runs with at a data size.

use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Memwrite,
    Stencil7,
    Himeno,
    Qsort,
    Pagerank,
    /// Breadth-first search (bottom-up) over pagerank's R-MAT graph.
    Bfs,
    Chase,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::Memwrite,
        Workload::Stencil7,
        Workload::Himeno,
        Workload::Qsort,
        Workload::Pagerank,
        Workload::Bfs,
        Workload::Chase,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Memwrite => "memwrite",
            Workload::Stencil7 => "stencil7",
            Workload::Himeno => "himeno",
            Workload::Qsort => "qsort",
            Workload::Pagerank => "pagerank",
            Workload::Bfs => "bfs",
            Workload::Chase => "chase",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!("{s:?} is not a workload; use {}", names.join(", "))
            })
    }
}

/// The stencil7 variants, naive first.
pub const VARIANTS: [&str; 4] = ["naive", "spatial", "temporal", "wavefront"];

/// A built-in workload's own options.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Options {
    /// stencil7's variant (temporal when None).
    pub variant: Option<String>,
    /// himeno: farmem hints (fm_advise) from the program.
    pub hints: bool,
    /// himeno: the published constant coefficients.
    pub classic: bool,
}

impl Options {
    /// The stencil7 variant asked for.
    pub fn variant(&self) -> &str {
        self.variant.as_deref().unwrap_or("temporal")
    }
}

/// The workload binary `name` in `dir`.
fn binary(dir: &Path, name: &str) -> Result<String, BenchError> {
    let p: PathBuf = dir.join(name);
    if !p.exists() {
        return Err(BenchError::Unavailable(format!(
            "{} is missing: build the workloads with `make -C workloads` (scripts/setup.sh does)",
            p.display()
        )));
    }
    Ok(p.display().to_string())
}

/// The command line of `w` over `size` bytes of data, from the binaries in
/// `dir`.
pub fn command(dir: &Path, w: Workload, size: u64, o: &Options) -> Result<Vec<String>, BenchError> {
    let s = size.to_string();
    let mb = (size >> 20).max(1).to_string();
    let bin = binary(dir, w.name())?;
    Ok(match w {
        Workload::Memwrite => vec![
            bin,
            "--size".into(),
            mb,
            "--passes".into(),
            "3".into(),
            "--alloc".into(),
            "mmap".into(),
        ],
        Workload::Stencil7 => vec![bin, s, o.variant().into(), "8".into(), "4".into()],
        Workload::Himeno => {
            let mut v = vec![bin, s, "10".into()];
            if o.hints {
                v.push("--hints".into());
            }
            if o.classic {
                v.push("--classic".into());
            }
            v
        }
        Workload::Qsort => vec![bin, s],
        // 5 iterations: each streams the edges once and reads the rank
        // arrays at random (the hot set; hot_bytes= in its result line).
        Workload::Pagerank => vec![bin, s, "5".into()],
        // From vertex 0, a popular source: most of the graph is reached.
        Workload::Bfs => vec![bin, s],
        // Random loads over the whole set: a fixed count, about one per 32 bytes.
        Workload::Chase => vec![
            bin,
            s,
            "4k".into(),
            (size / 32).clamp(1 << 18, 1 << 23).to_string(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_bad_one_lists_them() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        let e = "sort".parse::<Workload>().unwrap_err();
        assert!(e.contains("qsort") && e.contains("chase"), "{e}");
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let e = command(
            Path::new("/nonexistent"),
            Workload::Qsort,
            1 << 20,
            &Options::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("make -C workloads"), "{e}");
    }

    #[test]
    fn command_lines() {
        let dir = std::env::temp_dir().join(format!("farmem-bench-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for w in Workload::ALL {
            std::fs::write(dir.join(w.name()), "").unwrap();
        }
        let o = Options {
            variant: Some("wavefront".into()),
            hints: true,
            classic: true,
        };
        let c = command(&dir, Workload::Stencil7, 64 << 20, &o).unwrap();
        assert_eq!(&c[1..], ["67108864", "wavefront", "8", "4"]);
        let c = command(&dir, Workload::Himeno, 64 << 20, &o).unwrap();
        assert_eq!(&c[1..], ["67108864", "10", "--hints", "--classic"]);
        let c = command(&dir, Workload::Memwrite, 64 << 20, &o).unwrap();
        assert_eq!(&c[1..3], ["--size", "64"]);
        let c = command(&dir, Workload::Chase, 64 << 20, &o).unwrap();
        assert_eq!(c[3], (2u64 << 20).to_string());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
