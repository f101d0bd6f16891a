//! A result file read back into its own type. Which kind a JSON document
//! is comes from its top-level keys; then the whole of it is deserialized
//! into that kind's type, so a field renamed or missing is an error naming
//! it, never a blank column.

use crate::bench::BenchDoc;
use crate::ReportError;
use farmem_numa::matrix::MatrixReport;
use farmem_numa::policies::PolicyReport;
use farmem_numa::xy::XyReport;
use farmem_probe::machine::Machine;
use farmem_probe::suite::Report as ProbeReport;
use serde_json::Value;
use std::path::Path;

/// What a JSON result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Probe,
    Bench,
    NumaXy,
    NumaPolicies,
    NumaMatrix,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Probe => "probe",
            Kind::Bench => "bench",
            Kind::NumaXy => "numa xy",
            Kind::NumaPolicies => "numa policies",
            Kind::NumaMatrix => "numa matrix",
        }
    }
}

/// One result, typed by its kind.
#[derive(Debug)]
pub enum Doc {
    Probe(Box<ProbeReport>),
    Bench(Box<BenchDoc>),
    Xy(Box<XyReport>),
    Policies(Box<PolicyReport>),
    Matrix(Box<MatrixReport>),
}

/// Which result `v` is, or None for JSON farmem did not write.
fn kind(v: &Value) -> Option<Kind> {
    if v.get("matrix").is_some() {
        return Some(Kind::NumaMatrix);
    }
    if v.get("cells").is_some() {
        return Some(Kind::NumaXy);
    }
    if let Some(r) = v.get("results").and_then(|r| r.as_array()) {
        if r.first().is_some_and(|x| x.get("policy").is_some()) {
            return Some(Kind::NumaPolicies);
        }
        if r.first().is_some_and(|x| x.get("system").is_some()) {
            return Some(Kind::Bench);
        }
    }
    [
        "curve",
        "ladder",
        "far",
        "bandwidth",
        "faults",
        "loaded",
        "far_loaded",
    ]
    .iter()
    .any(|k| v.get(*k).is_some())
    .then_some(Kind::Probe)
}

impl Doc {
    /// `v` read into its kind's type.
    pub fn from_value(v: Value) -> Result<Doc, ReportError> {
        let k = kind(&v).ok_or_else(|| {
            ReportError::Input("not a probe, numa or bench result (write them with --json)".into())
        })?;
        let typed = |e: serde_json::Error| {
            ReportError::Input(format!(
                "a {} result that does not read back ({e}); was it written by another version of farmem?",
                k.name()
            ))
        };
        Ok(match k {
            Kind::Probe => Doc::Probe(serde_json::from_value(v).map_err(typed)?),
            Kind::Bench => Doc::Bench(serde_json::from_value(v).map_err(typed)?),
            Kind::NumaXy => Doc::Xy(serde_json::from_value(v).map_err(typed)?),
            Kind::NumaPolicies => Doc::Policies(serde_json::from_value(v).map_err(typed)?),
            Kind::NumaMatrix => Doc::Matrix(serde_json::from_value(v).map_err(typed)?),
        })
    }

    pub fn kind(&self) -> Kind {
        match self {
            Doc::Probe(_) => Kind::Probe,
            Doc::Bench(_) => Kind::Bench,
            Doc::Xy(_) => Kind::NumaXy,
            Doc::Policies(_) => Kind::NumaPolicies,
            Doc::Matrix(_) => Kind::NumaMatrix,
        }
    }

    /// The machine it was measured on.
    pub fn machine(&self) -> Option<&Machine> {
        match self {
            Doc::Probe(r) => r.machine.as_ref(),
            Doc::Bench(r) => Some(&r.machine),
            Doc::Xy(r) => Some(&r.machine),
            Doc::Policies(r) => Some(&r.machine),
            Doc::Matrix(r) => Some(&r.machine),
        }
    }
}

/// A result file (`farmem probe|numa|bench ... --json`), read into its
/// type; errors name the file.
pub fn read_result(path: &Path) -> Result<Doc, ReportError> {
    let input = |why: String| ReportError::Input(format!("{}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| input(e.to_string()))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| input(format!("not JSON from `farmem ... --json` ({e})")))?;
    Doc::from_value(v).map_err(|e| input(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_files_are_read_or_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("farmem-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let probe = file("probe.json", r#"{"curve": [], "machine": {}}"#);
        assert_eq!(read_result(&probe).unwrap().kind(), Kind::Probe);
        for (p, why) in [
            (file("text.json", "tier size"), "not JSON"),
            (
                file("other.json", r#"{"a": 1}"#),
                "not a probe, numa or bench",
            ),
            (
                file(
                    "renamed.json",
                    r#"{"curve": [{"bytes": 4096, "nanos": 1.0}]}"#,
                ),
                "a probe result that does not read back",
            ),
            (dir.join("missing.json"), "missing.json"),
        ] {
            let e = read_result(&p).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(&*p.to_string_lossy()), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every result committed under bench/results reads back into its type.
    #[test]
    fn every_committed_result_reads_back() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
        let mut files = Vec::new();
        let mut dirs = vec![root];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "json") {
                    files.push(p);
                }
            }
        }
        let mut read = 0;
        for p in &files {
            let text = std::fs::read_to_string(p).unwrap();
            // A few files are other tools' output (an empty capture): only
            // farmem's results are checked.
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if kind(&v).is_none() {
                continue;
            }
            if let Err(e) = Doc::from_value(v) {
                panic!("{}: {e}", p.display());
            }
            read += 1;
        }
        assert!(read >= 30, "only {read} results found under bench/results");
    }
}
