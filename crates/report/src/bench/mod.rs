//! A bench result (`farmem bench --json`): its typed document, the text
//! table (`farmem bench`, `farmem report --text`), CSV, the figure
//! ([`figure`]) and the report's section ([`html`]).

pub mod figure;
pub mod html;

use crate::table::{opt, Table};
use farmem_bench::worst::WorstCase;
use farmem_bench::{Recorded, Report as BenchReport, RunResult};
use farmem_probe::machine::Machine;
use farmem_sys::format_size;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// A bench result as `farmem bench --json` writes it and `farmem report`
/// reads it back.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct BenchDoc {
    pub machine: Machine,
    pub params: Recorded,
    pub results: Vec<RunResult>,
}

impl BenchDoc {
    pub fn new(r: &BenchReport, machine: &Machine) -> BenchDoc {
        BenchDoc {
            machine: machine.clone(),
            params: r.params.clone(),
            results: r.results.clone(),
        }
    }

    /// "qsort 256M".
    pub fn title(&self) -> String {
        format!(
            "{} {}",
            self.params.workload,
            format_size(self.params.size_bytes)
        )
    }

    fn local(&self) -> Option<&RunResult> {
        self.results.iter().find(|c| c.system == "local")
    }

    fn expansions(&self) -> Vec<f64> {
        crate::plot::ratios(
            self.results
                .iter()
                .map(|c| (c.system.as_str(), c.expansion)),
        )
    }

    fn systems(&self) -> Vec<&str> {
        crate::plot::systems(self.results.iter().map(|c| c.system.as_str()))
    }

    fn at(&self, system: &str, e: f64) -> Option<&RunResult> {
        self.results
            .iter()
            .find(|c| c.system == system && c.expansion == e)
    }
}

/// The document as JSON (`farmem bench --json`).
pub fn json(d: &BenchDoc) -> serde_json::Value {
    // A document of plain fields always serializes.
    serde_json::to_value(d).unwrap_or(serde_json::Value::Null)
}

/// A cell's runtime over all-local, where it ran.
fn relative(c: &RunResult) -> Option<f64> {
    Some(c.relative_runtime).filter(|x| x.is_finite())
}

/// Why a cell did not run, in a few words.
fn failure(c: &RunResult) -> Option<String> {
    c.unavailable.as_deref().map(farmem_bench::failure_words)
}

/// The cell as table text: "2.18× (12.3 MB/s)" or why it failed.
fn cell_text(c: &RunResult) -> String {
    match (relative(c), failure(c)) {
        (_, Some(w)) => w,
        (Some(r), None) => format!("{r:.2}× ({} {})", short(c.metric), c.unit),
        (None, None) => "-".into(),
    }
}

/// A metric short enough for a table cell: 3 significant digits.
pub fn short(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v != 0.0 && !(0.01..1e6).contains(&v.abs()) {
        format!("{v:.2e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Runtime relative to local per system and expansion: the table
/// `farmem report --text` prints.
pub fn table(d: &BenchDoc) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "workload {}, {} threads ({})",
        d.title(),
        d.params.threads,
        crate::words::machine_line(&d.machine)
    );
    if let Some(l) = d.local() {
        let _ = writeln!(
            s,
            "all-local: {:.3} s, {} {}",
            l.seconds,
            short(l.metric),
            l.unit
        );
    }
    let exps = d.expansions();
    let rows: Vec<(&str, Vec<String>)> = d
        .systems()
        .into_iter()
        .map(|sys| {
            let cells = exps
                .iter()
                .map(|e| d.at(sys, *e).map_or("-".into(), cell_text))
                .collect();
            (sys, cells)
        })
        .collect();
    // Every column as wide as its widest cell, two spaces apart.
    let width = rows
        .iter()
        .flat_map(|(_, c)| c.iter().map(|t| t.chars().count()))
        .max()
        .unwrap_or(0)
        .max(6);
    let _ = write!(s, "{:<10}", "system");
    for e in &exps {
        let _ = write!(s, "  {:>width$}", format!("{e}x"));
    }
    s.push('\n');
    for (sys, cells) in rows {
        let _ = write!(s, "{sys:<10}");
        for c in cells {
            let _ = write!(s, "  {c:>width$}");
        }
        s.push('\n');
    }
    s
}

/// `farmem bench`'s table, then what the cells do not show: failures,
/// spreads and bytes moved.
pub fn text(d: &BenchDoc) -> String {
    let mut s = table(d);
    let p = &d.params;
    let _ = writeln!(
        s,
        "command: {} over {} {}; median of {} run(s)",
        p.command.join(" "),
        format_size(p.size_bytes),
        if p.footprint_measured {
            "of footprint (its peak resident memory all-local)"
        } else {
            "of data"
        },
        p.runs
    );
    s.push_str(
        "(runtime relative to all-local: 1.00x is as fast; in brackets the workload's own metric)\n",
    );
    // One line per system and reason, listing the ratios it held for: a
    // baseline that needs root is said once, not once per ratio.
    let mut said: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for c in &d.results {
        if let Some(why) = &c.unavailable {
            let at = format!("{}x", c.expansion);
            match said
                .iter_mut()
                .find(|(sys, w, _)| *sys == c.system && *w == why)
            {
                Some((_, _, ratios)) => ratios.push(at),
                None => said.push((&c.system, why, vec![at])),
            }
        }
    }
    for (system, why, ratios) in said {
        let _ = writeln!(s, "{system} at {}: unavailable: {why}", ratios.join(", "));
    }
    if p.runs > 1 {
        for c in d.results.iter().filter(|c| c.seconds.is_finite()) {
            let _ = writeln!(
                s,
                "{} at {}x: median {:.3} s, min {:.3} s, max {:.3} s over {} runs",
                c.system,
                c.expansion,
                c.seconds,
                c.seconds_min,
                c.seconds_max,
                c.runs.len()
            );
        }
    }
    let against = |moved: u64, least: Option<u64>| match least {
        Some(0) => format!("{} (least any policy moves: 0)", format_size(moved)),
        Some(l) => format!(
            "{} ({:.2}x the {} any policy must move)",
            format_size(moved),
            moved as f64 / l as f64,
            format_size(l)
        ),
        None => format_size(moved),
    };
    for c in &d.results {
        let (Some(f), Some(w)) = (c.timed_fetched_bytes, c.timed_written_back_bytes) else {
            continue;
        };
        let _ = writeln!(
            s,
            "farmem at {}x, timed region only: fetched {}, written back {}",
            c.expansion,
            against(f, c.bound_fetched_bytes),
            against(w, c.bound_written_back_bytes)
        );
        if let (Some(t), Some(ceil)) = (c.bound_seconds, p.far_ceiling) {
            let _ = writeln!(
                s,
                "  at the far ceiling ({:.0} MB/s read, {:.0} MB/s write) that least traffic takes {t:.3} s; the cell took {:.3} s ({:.1}x that)",
                ceil.read_mbps,
                ceil.write_mbps,
                c.seconds,
                c.seconds / t.max(1e-9)
            );
        }
    }
    s
}

/// `farmem bench --csv`: one row a cell.
pub fn csv(d: &BenchDoc) -> Vec<Table> {
    let mut t = Table::new(&[
        "system",
        "expansion",
        "local_budget_bytes",
        "seconds",
        "seconds_min",
        "seconds_max",
        "metric",
        "unit",
        "relative_runtime",
        "check",
        "timed_fetched_bytes",
        "timed_written_back_bytes",
    ]);
    for c in &d.results {
        t.row(&[
            c.system.clone(),
            c.expansion.to_string(),
            c.local_budget_bytes.to_string(),
            format!("{:.4}", c.seconds),
            format!("{:.4}", c.seconds_min),
            format!("{:.4}", c.seconds_max),
            format!("{:.4}", c.metric),
            c.unit.clone(),
            format!("{:.4}", c.relative_runtime),
            c.check.clone(),
            opt(c.timed_fetched_bytes),
            opt(c.timed_written_back_bytes),
        ]);
    }
    vec![t]
}

/// `farmem demo --random`: both runs' passes side by side, the sweep
/// rates, and what the far run cost.
pub fn worst_case(w: &WorstCase) -> String {
    let mut t = Table::new(&["pass", "all-local", "farmem", "farmem/local"]);
    let (l, f) = (&w.local, &w.far);
    for (name, lt, ft) in [
        ("write 8B per 64B line", l.write, f.write),
        ("reread and check", l.reread, f.reread),
        ("random read-modify-write", l.random, f.random),
        ("total", l.total(), f.total()),
    ] {
        t.row(&[
            name.to_string(),
            format!("{lt:.3} s"),
            format!("{ft:.3} s"),
            format!("{:.2}x", ft / lt),
        ]);
    }
    let bytes = w.size as f64;
    // 8 payload bytes in every 64-byte line.
    let gbps = |secs: f64| bytes / 8.0 / secs / 1e9;
    format!(
        "\n{}\nregion sweep rate (bytes of region covered per second): write {:.0} MB/s, reread {:.0} MB/s on farmem \
         ({:.2} / {:.2} GB/s of payload words)\n\n{}",
        t.text(""),
        bytes / f.write / 1e6,
        bytes / f.reread / 1e6,
        gbps(f.write),
        gbps(f.reread),
        w.stats.render()
    )
}

#[cfg(test)]
mod tests;
