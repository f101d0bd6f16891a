//! A numa matrix result (`farmem numa matrix --json`): the two grids as
//! text, CSV, warnings, the two heat maps and the report's section.

use crate::plot::{HeatCells, Heatmap, HeatmapPair};
use crate::table::{grid, Table};
use crate::words::machine_header;
use crate::ReportError;
use farmem_numa::matrix::{MatrixCell, MatrixReport};
use std::fmt::Write;
use std::path::Path;

type Result<T> = std::result::Result<T, ReportError>;

/// `farmem numa matrix`'s two grids: latency, then bandwidth.
pub fn text(r: &MatrixReport) -> String {
    let mut s = machine_header(Some(&r.machine));
    let ids: Vec<usize> = r.nodes.iter().map(|n| n.id).collect();
    for (what, unit, get) in [
        (
            "idle latency",
            "ns",
            (|c: &MatrixCell| c.latency_ns) as fn(&MatrixCell) -> f64,
        ),
        ("read bandwidth, every CPU of the CPU node", "GB/s", |c| {
            c.read_gbps
        }),
    ] {
        let t = grid(
            &ids,
            "CPU \\ mem",
            |_, n| format!("node {n}"),
            |x, y| {
                r.matrix
                    .iter()
                    .find(|c| c.mem_node == x && c.cpu_node == y)
                    .map(|c| format!("{:.2}", get(c)))
            },
        );
        let _ = write!(
            s,
            "\n{what} ({unit}): rows are the CPUs' node, columns the memory's node\n{}",
            t.text("")
        );
    }
    s
}

pub fn csv(r: &MatrixReport) -> Vec<Table> {
    let mut t = Table::new(&["mem_node", "cpu_node", "latency_ns", "read_gbps", "threads"]);
    for c in &r.matrix {
        t.row(&[
            c.mem_node.to_string(),
            c.cpu_node.to_string(),
            format!("{:.2}", c.latency_ns),
            format!("{:.3}", c.read_gbps),
            c.threads.to_string(),
        ]);
    }
    vec![t]
}

/// Cells whose sampled pages are not all on the bound node, as warnings.
pub fn warnings(r: &MatrixReport) -> Vec<String> {
    r.matrix
        .iter()
        .filter(|c| c.pages_off_node() > 0)
        .map(|c| {
            format!(
                "X={} Y={}: {} of {} sampled pages are not on node {} ({:?}); the node may be full",
                c.mem_node,
                c.cpu_node,
                c.pages_off_node(),
                c.pages_by_node.values().sum::<u64>(),
                c.mem_node,
                c.pages_by_node
            )
        })
        .collect()
}

/// The matrix as heat-map cells: latency, then bandwidth, each shaded by
/// how much worse it is than the CPU node's own memory.
fn heat_cells(results: &[MatrixCell]) -> (HeatCells, HeatCells) {
    let local = |y: usize, f: fn(&MatrixCell) -> f64| {
        results
            .iter()
            .find(|r| r.mem_node == y && r.cpu_node == y)
            .map_or(f64::NAN, f)
    };
    let lat = results
        .iter()
        .map(|r| {
            let l = local(r.cpu_node, |c| c.latency_ns);
            (
                r.mem_node,
                r.cpu_node,
                format!("{:.1} ns", r.latency_ns),
                (r.latency_ns / l - 1.0) * 100.0,
            )
        })
        .collect();
    let bw = results
        .iter()
        .map(|r| {
            let l = local(r.cpu_node, |c| c.read_gbps);
            (
                r.mem_node,
                r.cpu_node,
                format!("{:.2} GB/s", r.read_gbps),
                (l / r.read_gbps - 1.0) * 100.0,
            )
        })
        .collect();
    (lat, bw)
}

/// The matrix's two heat maps (latency, bandwidth), handed to `f`.
fn figure<R>(r: &MatrixReport, f: impl FnOnce(&HeatmapPair) -> Result<R>) -> Result<R> {
    let ids: Vec<usize> = r.nodes.iter().map(|n| n.id).collect();
    let ids = &ids[..];
    let (lat, bw) = heat_cells(&r.matrix);
    f(&HeatmapPair(
        Heatmap {
            ids,
            cells: &lat,
            title: "idle latency (ns per dependent load)",
        },
        Heatmap {
            ids,
            cells: &bw,
            title: "read bandwidth, all CPUs of node Y (GB/s)",
        },
    ))
}

/// `farmem numa matrix --plot FILE`: latency and bandwidth heat maps side
/// by side.
pub fn write_figure(path: &Path, r: &MatrixReport) -> Result<()> {
    figure(r, |f| crate::plot::write(path, f))
}

/// `farmem numa matrix`: one table, and the two heat maps.
pub fn section(r: &MatrixReport, out: &mut String) -> Result<()> {
    let cells = &r.matrix;
    out.push_str("<h2>numa matrix: idle latency and read bandwidth</h2><table class=sortable><thead><tr><th>X (memory)</th><th>Y (CPUs)</th><th>latency (ns)</th><th>read GB/s</th><th>threads</th></tr></thead><tbody>");
    for c in cells {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td></tr>",
            c.mem_node, c.cpu_node, c.latency_ns, c.read_gbps, c.threads
        );
    }
    out.push_str("</tbody></table>");
    out.push_str(&figure(r, |f| crate::plot::svg_string(f))?);
    Ok(())
}
