//! The output options every measuring subcommand shares (`--json`, `--csv`,
//! `--plot FILE`) and the one way they are printed: JSON or CSV on stdout
//! when asked for, else the subcommand's own table; the figure beside any
//! of them.

use anyhow::Result;
use farmem_report::plot::Figure;
use std::fmt::Display;
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

/// CSV text: a header, then rows (a report of several kinds of result has
/// a header before each kind's rows); a field with a comma, quote or line
/// break is quoted.
#[derive(Default)]
pub struct Csv(String);

impl Csv {
    pub fn new(header: &[&str]) -> Csv {
        let mut c = Csv(String::new());
        c.row(header);
        c
    }

    pub fn row<T: Display>(&mut self, fields: &[T]) {
        let fields: Vec<String> = fields.iter().map(|f| quote(&f.to_string())).collect();
        self.0.push_str(&fields.join(","));
        self.0.push('\n');
    }
}

fn quote(f: &str) -> String {
    if f.contains([',', '"', '\n']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_string()
    }
}

/// An optional figure as a CSV field (empty when absent).
pub fn opt<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl Output {
    /// Refuse a plot file of an unknown kind before anything runs.
    pub fn check(&self) -> Result<()> {
        Ok(farmem_report::plot::check_path(self.plot.as_deref())?)
    }

    /// Where to draw the figure, when asked.
    pub fn plot_path(&self) -> Option<&Path> {
        self.plot.as_deref()
    }

    /// Draw `fig` when a plot was asked for.
    pub fn draw(&self, fig: &impl Figure) -> Result<()> {
        match self.plot_path() {
            Some(p) => Ok(farmem_report::plot::write(p, fig)?),
            None => Ok(()),
        }
    }

    /// Print the JSON or the CSV when one was asked for, and say whether it
    /// was (if not, the caller prints its table). Only the one asked for
    /// is built.
    pub fn print(
        &self,
        json: impl FnOnce() -> Result<serde_json::Value>,
        csv: impl FnOnce() -> Csv,
    ) -> Result<bool> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(&json()?)?);
            Ok(true)
        } else if self.csv {
            print!("{}", csv().0);
            Ok(true)
        } else {
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_what_needs_it() {
        let mut c = Csv::new(&["policy", "seconds"]);
        c.row(&["--membind=0", "1.5"]);
        c.row(&["a,b", "say \"x\""]);
        assert_eq!(
            c.0,
            "policy,seconds\n--membind=0,1.5\n\"a,b\",\"say \"\"x\"\"\"\n"
        );
        assert_eq!(opt(Some(3)), "3");
        assert_eq!(opt(None::<u64>), "");
    }
}
