//! `farmem report`: probe, numa and bench results (their `--json` output),
//! each read back into its own type, in one self-contained HTML page with
//! inline SVG figures (`farmem_report::html`), or bench results as text
//! tables.

use anyhow::{Context, Result};
use farmem_report::{bench, html::write_html, read_result, Doc};
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
        docs.push((p.clone(), read_result(p)?));
    }
    if a.text {
        for (p, d) in &docs {
            if let Doc::Bench(b) = d {
                print!("{}", bench::table(b));
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
    write_html(&docs, &out)?;
    eprintln!("farmem report: wrote {}", out.display());
    Ok(())
}
