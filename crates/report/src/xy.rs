//! A numa X×Y result (`farmem numa xy --json`): text, CSV, the heat map and
//! the report's section.

use crate::plot::{time_and_slowdown, HeatCells, Heatmap};
use crate::table::{grid, note, opt, Table};
use crate::words::esc;
use crate::words::machine_header;
use crate::ReportError;
use farmem_numa::verify;
use farmem_numa::xy::{XyCell, XyReport};
use std::fmt::Write;
use std::path::Path;

type Result<T> = std::result::Result<T, ReportError>;

/// Every X×Y cell's placement, one line each (`--dry-run`).
pub fn plan(cells: &[farmem_numa::plan::Cell]) -> String {
    let mut s = String::new();
    for c in cells {
        let cpus = c.placement.cpus.as_deref().unwrap_or(&[]);
        let _ = writeln!(
            s,
            "X={} Y={}: {}  (CPUs {})",
            c.mem_node,
            c.cpu_node,
            c.placement.numactl_args(),
            farmem_numa::topology::format_list(cpus)
        );
    }
    s
}

/// `farmem numa xy`'s tables: time and slowdown in every cell, then where
/// the memory was.
pub fn text(r: &XyReport) -> String {
    let mut s = machine_header(Some(&r.machine));
    let _ = writeln!(
        s,
        "workload: {}; median of {} runs; rows: memory on node X, columns: threads on node Y",
        r.params.workload, r.params.runs
    );
    let ids = r.topology.ids();
    let table = |title: &str, get: &dyn Fn(&XyCell) -> Option<(f64, f64)>| {
        let t = grid(
            &ids,
            "X \\ Y",
            |k, n| format!("{}={n}", if k == "row" { "X" } else { "Y" }),
            |y, x| {
                let c = r.cells.iter().find(|c| c.mem_node == x && c.cpu_node == y);
                c.and_then(get)
                    .map(|(secs, d)| format!("{secs:.4} s ({d:+.1}%)"))
            },
        );
        format!("\n{title}\n{}", t.text(""))
    };
    let first = if r.params.passes.is_some() {
        "pass 1 (includes page faults)"
    } else {
        "time"
    };
    s.push_str(&table(first, &|c| Some((c.seconds, c.slowdown_pct))));
    if r.cells.iter().any(|c| c.later_pass_seconds.is_some()) {
        s.push_str(&table("passes 2.. (median)", &|c| {
            c.later_pass_seconds.zip(c.later_slowdown_pct)
        }));
    }
    s.push_str("\nwhere the memory was:\n");
    for c in &r.cells {
        let _ = writeln!(
            s,
            "  X={} Y={} ({}): {}",
            c.mem_node,
            c.cpu_node,
            c.numactl,
            verify::render(&c.by_node)
        );
    }
    note(&mut s, r.note.as_deref());
    s
}

pub fn csv(r: &XyReport) -> Vec<Table> {
    let mut t = Table::new(&[
        "mem_node",
        "cpu_node",
        "seconds",
        "slowdown_pct",
        "later_pass_seconds",
        "later_slowdown_pct",
    ]);
    for c in &r.cells {
        t.row(&[
            c.mem_node.to_string(),
            c.cpu_node.to_string(),
            format!("{:.6}", c.seconds),
            format!("{:.2}", c.slowdown_pct),
            opt(c.later_pass_seconds.map(|v| format!("{v:.6}"))),
            opt(c.later_slowdown_pct.map(|v| format!("{v:.2}"))),
        ]);
    }
    vec![t]
}

/// `farmem numa xy --plot FILE`: a heat map of time and slowdown, memory
/// node against CPU node.
pub fn write_figure(path: &Path, r: &XyReport) -> Result<()> {
    let title = format!("{}: time, and slowdown vs local (X = Y)", r.params.workload);
    crate::plot::write(
        path,
        &Heatmap {
            ids: &r.topology.ids(),
            cells: &heat_cells(r),
            title: &title,
        },
    )
}

/// Each cell labelled with its time and slowdown, shaded by the slowdown.
fn heat_cells(r: &XyReport) -> HeatCells {
    r.cells
        .iter()
        .map(|c| {
            (
                c.mem_node,
                c.cpu_node,
                time_and_slowdown(c.seconds, c.slowdown_pct),
                c.slowdown_pct,
            )
        })
        .collect()
}

/// The X×Y section of the report.
pub fn section(r: &XyReport, out: &mut String) -> Result<()> {
    out.push_str("<h2>numa X×Y</h2>\n");
    if let Some(n) = &r.note {
        let _ = writeln!(out, "<p><i>{}</i></p>", esc(n));
    }
    out.push_str("<table class=sortable><thead><tr><th>X (memory)</th><th>Y (threads)</th><th>seconds</th><th>vs local</th></tr></thead><tbody>");
    for c in &r.cells {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{:.4}</td><td>{:+.1}%</td></tr>",
            c.mem_node, c.cpu_node, c.seconds, c.slowdown_pct
        );
    }
    out.push_str("</tbody></table>");
    out.push_str(&crate::plot::svg_string(&Heatmap {
        ids: &r.topology.ids(),
        cells: &heat_cells(r),
        title: "time, and slowdown against local memory (X = Y)",
    })?);
    Ok(())
}
