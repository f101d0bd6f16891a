//! `farmem report`: probe, numa and bench results (their `--json` output),
//! each read back into its own type, in one self-contained HTML page with
//! inline SVG figures (`farmem_report::html`), bench results as text
//! tables, or one result's figure drawn again (`--plot`).

use anyhow::{Context, Result};
use farmem_report::{bench, html::write_html, read_result, Doc};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// JSON files written by `farmem probe|numa|bench ... --json`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// The HTML page to write.
    #[arg(short, long, required_unless_present_any = ["text", "plot"])]
    output: Option<PathBuf>,
    /// Print bench results as text tables instead.
    #[arg(long)]
    text: bool,
    /// Draw one result's figure again from its JSON (*.svg or *.png), as
    /// the command that measured it draws it with --plot.
    #[arg(long, value_name = "FILE", conflicts_with = "text")]
    plot: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    let mut docs = Vec::new();
    for p in &a.results {
        docs.push((p.clone(), read_result(p)?));
    }
    if let Some(fig) = &a.plot {
        farmem_report::plot::check_path(Some(fig))?;
        let [(p, d)] = &docs[..] else {
            anyhow::bail!(
                "--plot draws one result's figure: give one JSON file (got {})",
                docs.len()
            );
        };
        match d {
            Doc::Probe(r) => farmem_report::probe::figure::write(fig, r),
            Doc::Bench(b) => bench::figure::write(fig, b),
            Doc::Xy(r) => farmem_report::xy::write_figure(fig, r),
            Doc::Policies(r) => farmem_report::policies::write_figure(fig, r),
            Doc::Matrix(r) => farmem_report::matrix::write_figure(fig, r),
        }
        .with_context(|| format!("drawing {}", p.display()))?;
        eprintln!("farmem report: drew {}", fig.display());
        if a.output.is_none() {
            return Ok(());
        }
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
