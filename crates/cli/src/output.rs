//! The output options every measuring subcommand shares (`--json`, `--csv`,
//! `--plot FILE`) and the one way they are printed: JSON or CSV on stdout
//! when asked for, else the text tables (each result kind's module in
//! `farmem_report`); the figure beside any of them.

use anyhow::Result;
use farmem_report::table::{self, Table};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct Output {
    /// Print everything measured as one JSON object on stdout (the machine,
    /// the parameters and every result), instead of the table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print one CSV row per result instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// Also draw the command's figure (described in its help) to FILE:
    /// *.svg or *.png.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

impl Output {
    /// Refuse a plot file of an unknown kind before anything runs.
    pub fn check(&self) -> Result<()> {
        Ok(farmem_report::plot::check_path(self.plot.as_deref())?)
    }

    /// Draw the figure to the `--plot` file with `draw`, when one was
    /// asked for.
    pub fn figure(
        &self,
        draw: impl FnOnce(&Path) -> Result<(), farmem_report::ReportError>,
    ) -> Result<()> {
        match self.plot.as_deref() {
            Some(p) => Ok(draw(p)?),
            None => Ok(()),
        }
    }

    /// Print `json` as JSON, or the tables `csv` makes as CSV, or the text
    /// `text` makes: only the one asked for is built.
    pub fn print(
        &self,
        json: &impl Serialize,
        csv: impl FnOnce() -> Vec<Table>,
        text: impl FnOnce() -> String,
    ) -> Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(json)?);
        } else if self.csv {
            print!("{}", table::csv(&csv()));
        } else {
            print!("{}", text());
        }
        Ok(())
    }
}
