//! A numa policies result (`farmem numa policies --json`): text, CSV, the
//! rate over time and the report's section.

use crate::plot::Series;
use crate::table::{dash, note, opt, Table};
use crate::words::esc;
use crate::words::machine_header;
use crate::ReportError;
use farmem_numa::policies::PolicyReport;
use farmem_numa::verify;
use std::fmt::Write;
use std::path::Path;

type Result<T> = std::result::Result<T, ReportError>;

/// `farmem numa policies`' table.
pub fn text(r: &PolicyReport) -> String {
    let mut s = machine_header(Some(&r.machine));
    let _ = writeln!(s, "command: {}\n", r.params.cmd.join(" "));
    let mut t = Table::new(&[
        "policy",
        "seconds",
        "mean rate",
        "vs default",
        "memory seen on",
    ]);
    for p in &r.results {
        t.row(&[
            p.policy.clone(),
            format!("{:.3}", p.seconds),
            dash(p.mean_rate.map(|m| format!("{m:.1}"))),
            format!("{:.1}%", p.change_pct),
            verify::render(&p.by_node),
        ]);
    }
    s.push_str(&t.text(""));
    s.push_str(
        "(vs default: positive is better — a higher mean rate, or less time when no --rate-regex)\n",
    );
    note(&mut s, r.note.as_deref());
    s
}

pub fn csv(r: &PolicyReport) -> Vec<Table> {
    let mut t = Table::new(&["policy", "seconds", "mean_rate", "change_pct"]);
    for p in &r.results {
        t.row(&[
            p.policy.clone(),
            format!("{:.4}", p.seconds),
            opt(p.mean_rate.map(|m| format!("{m:.3}"))),
            format!("{:.2}", p.change_pct),
        ]);
    }
    vec![t]
}

/// `farmem numa policies --plot FILE`: the rate over time, a line per
/// policy.
pub fn write_figure(path: &Path, r: &PolicyReport) -> Result<()> {
    let lines = lines(r);
    crate::plot::write(
        path,
        &Series {
            lines: &lines,
            title: "the command's rate over time by NUMA policy",
            x_desc: "time since start (s)",
            y_desc: "rate (the number --rate-regex takes)",
        },
    )
}

/// Each policy's rate samples, for policies that have some.
fn lines(r: &PolicyReport) -> Vec<(String, Vec<(f64, f64)>)> {
    r.results
        .iter()
        .filter(|p| !p.series.is_empty())
        .map(|p| (p.policy.clone(), p.series.clone()))
        .collect()
}

/// The policies section of the report.
pub fn section(r: &PolicyReport, out: &mut String) -> Result<()> {
    out.push_str("<h2>numa policies</h2>\n");
    if let Some(n) = &r.note {
        let _ = writeln!(out, "<p><i>{}</i></p>", esc(n));
    }
    out.push_str(
        "<table class=sortable><thead><tr><th>policy</th><th>seconds</th><th>mean rate</th><th>vs default</th></tr></thead><tbody>",
    );
    for p in &r.results {
        let _ = write!(
            out,
            "<tr><td class=l>{}</td><td>{:.3}</td><td>{}</td><td>{:+.1}%</td></tr>",
            esc(&p.policy),
            p.seconds,
            dash(p.mean_rate),
            p.change_pct
        );
    }
    out.push_str("</tbody></table>");
    let lines = lines(r);
    if !lines.is_empty() {
        out.push_str(&crate::plot::svg_string(&Series {
            lines: &lines,
            title: "the command's rate over time by NUMA policy",
            x_desc: "time since start (s)",
            y_desc: "rate (the number --rate-regex takes)",
        })?);
    }
    Ok(())
}
