//! `farmem report`: probe, numa and bench results (their `--json` output)
//! in one self-contained HTML page with inline SVG plots
//! (`farmem_report::html`), or bench results as text tables.

use anyhow::{Context, Result};
use farmem_report::html::{bench_table, read_result, write_html, Kind};
use serde_json::Value;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// JSON files written by `farmem probe|numa|bench ... --json`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// The HTML page to write.
    #[arg(short, long, required_unless_present = "text")]
    output: Option<PathBuf>,
    /// Print bench results as text tables instead.
    #[arg(long)]
    text: bool,
}

pub fn run(a: Args) -> Result<()> {
    let mut docs = Vec::new();
    for p in &a.results {
        let (k, v) = read_result(p)?;
        docs.push((p.clone(), k, v));
    }
    if a.text {
        for (p, k, v) in &docs {
            if *k == Kind::Bench {
                print!("{}", bench_table(v));
            } else {
                eprintln!(
                    "farmem report --text: {} is not a bench result; skipped",
                    p.display()
                );
            }
        }
        return Ok(());
    }
    let out = a
        .output
        .context("-o FILE is required for the HTML report")?;
    let docs: Vec<(PathBuf, Value)> = docs.into_iter().map(|(p, _, v)| (p, v)).collect();
    write_html(&docs, &out)?;
    eprintln!("farmem report: wrote {}", out.display());
    Ok(())
}
