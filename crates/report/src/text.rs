//! Every result as people read it in a terminal, and as CSV: one pair of
//! functions per kind of result (probe, bench, numa xy, policies, matrix).
//! The text is for reading; the CSV keeps full precision, one table per
//! kind of row.

use crate::html::bench_table;
use crate::table::{dash, opt, Table};
use farmem_bench::worst::WorstCase;
use farmem_bench::Report as BenchReport;
use farmem_numa::matrix::{MatrixCell, MatrixReport};
use farmem_numa::policies::PolicyReport;
use farmem_numa::verify;
use farmem_numa::xy::{XyCell, XyReport};
use farmem_probe::machine::Machine;
use farmem_probe::suite::Report as ProbeReport;
use farmem_sys::format_size;
use std::fmt::Write;

fn ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else {
        format!("{ns:.1} ns")
    }
}

fn machine_line(m: Option<&Machine>) -> String {
    m.map(|m| format!("machine: {}\n", m.summary()))
        .unwrap_or_default()
}

/// `farmem probe`'s tables.
pub fn probe(r: &ProbeReport) -> String {
    let mut s = machine_line(r.machine.as_ref());
    if let Some(l) = &r.ladder {
        let mut t = Table::new(&["tier", "size", "latency", "read GB/s"]);
        for x in l {
            let size = if x.bytes == 0 {
                "-".into()
            } else {
                format_size(x.bytes)
            };
            t.row(&[
                x.tier.clone(),
                size,
                ns(x.latency_ns),
                format!("{:.2}", x.read_gbps),
            ]);
        }
        let _ = write!(s, "\n{}", t.text(""));
        s.push_str("(caches/DRAM: pointer-chase latency, 1-thread read bandwidth at half the level's size; far tiers: see `farmem probe far`)\n");
    } else {
        if let Some(c) = &r.curve {
            let pages = r
                .params
                .as_ref()
                .and_then(|p| p["pages"].as_str())
                .unwrap_or_default();
            let mut t = Table::new(&["working set", "latency"]);
            for p in c {
                t.row(&[format_size(p.bytes), ns(p.ns)]);
            }
            let _ = write!(
                s,
                "\nload latency by pointer chasing ({pages} pages, median of repeats):\n{}",
                t.text("  ")
            );
        }
        if let Some(l) = &r.levels {
            let mut t = Table::new(&["level", "up to", "latency"]);
            for x in l {
                t.row(&[x.name.clone(), format_size(x.bytes), ns(x.ns)]);
            }
            let _ = write!(s, "\ndetected levels:\n{}", t.text("  "));
        }
    }
    if let Some(b) = &r.bandwidth {
        let mut t = Table::new(&["threads", "read", "write", "copy", "triad"]);
        let mut threads: Vec<usize> = b.iter().map(|x| x.threads).collect();
        threads.dedup();
        for n in threads {
            let mut row = vec![n.to_string()];
            for k in ["read", "write", "copy", "triad"] {
                let g = b.iter().find(|x| x.threads == n && x.kernel == k);
                row.push(dash(g.map(|x| format!("{:.2}", x.gbps))));
            }
            t.row(&row);
        }
        let _ = write!(
            s,
            "\nbandwidth (GB/s, best of repeats, {} per array):\n{}",
            format_size(b.first().map_or(0, |x| x.bytes_per_array)),
            t.text("  ")
        );
    }
    if let Some(f) = &r.faults {
        let mut t = Table::new(&["fault", "p50 µs", "p99 µs", "samples"]);
        for x in f {
            t.row(&[
                x.kind.to_string(),
                format!("{:.2}", x.p50_us),
                format!("{:.2}", x.p99_us),
                x.samples.to_string(),
            ]);
        }
        let _ = write!(s, "\nfault costs:\n{}", t.text("  "));
    }
    for tier in r.far.iter().flatten() {
        let mut t = Table::new(&["transfer", "read MB/s", "write MB/s"]);
        for c in &tier.curve {
            t.row(&[
                format_size(c.transfer_bytes),
                format!("{:.0}", c.read_mbps),
                format!("{:.0}", c.write_mbps),
            ]);
        }
        let _ = write!(
            s,
            "\n{} — {}\n  one-page read round trip: p50 {:.1} µs, p99 {:.1} µs\n{}",
            tier.name,
            tier.description,
            tier.rtt.p50_us,
            tier.rtt.p99_us,
            t.text("  ")
        );
    }
    if let Some(l) = &r.loaded {
        s.push_str(
            "\nloaded latency: one thread chases, the others draw bandwidth (counted in software)\n",
        );
        // MLC's layout: one block per mix.
        for c in &l.curves {
            let mut t = Table::new(&["delay", "delay (ns)", "bandwidth MB/s", "latency (ns)"]);
            for p in &c.points {
                t.row(&[
                    p.delay.map_or("idle".into(), |d| d.to_string()),
                    dash(p.delay_ns.map(|n| format!("{n:.0}"))),
                    format!("{:.0}", p.bandwidth_mbps),
                    format!("{:.1}", p.latency_ns),
                ]);
            }
            let _ = write!(s, "\nmix {}:\n{}", c.mix, t.text("  "));
        }
    }
    if let Some(f) = &r.far_loaded {
        let mut t = Table::new(&[
            "streams",
            "gap (µs)",
            "bandwidth MB/s",
            "p50 (µs)",
            "p99 (µs)",
        ]);
        for p in f {
            t.row(&[
                p.streams.to_string(),
                dash(p.gap_us),
                format!("{:.0}", p.bandwidth_mbps),
                format!("{:.1}", p.p50_us),
                format!("{:.1}", p.p99_us),
            ]);
        }
        let _ = write!(
            s,
            "\nfar tier under load: one-page reads while other threads stream 256 KiB reads\n{}",
            t.text("  ")
        );
    }
    s
}

/// `farmem probe --csv`: the ladder alone when there is one, else a table
/// per kind of measurement.
pub fn probe_csv(r: &ProbeReport) -> Vec<Table> {
    if let Some(l) = &r.ladder {
        let mut t = Table::new(&["tier", "bytes", "latency_ns", "read_gbps"]);
        for x in l {
            t.row(&[
                x.tier.clone(),
                x.bytes.to_string(),
                format!("{:.2}", x.latency_ns),
                format!("{:.3}", x.read_gbps),
            ]);
        }
        return vec![t];
    }
    let mut out = Vec::new();
    if let Some(curve) = &r.curve {
        let mut t = Table::new(&["bytes", "ns"]);
        for p in curve {
            t.row(&[p.bytes.to_string(), format!("{:.3}", p.ns)]);
        }
        out.push(t);
    }
    if let Some(b) = &r.bandwidth {
        let mut t = Table::new(&["kernel", "threads", "gbps"]);
        for x in b {
            t.row(&[
                x.kernel.to_string(),
                x.threads.to_string(),
                format!("{:.3}", x.gbps),
            ]);
        }
        out.push(t);
    }
    if let Some(f) = &r.faults {
        let mut t = Table::new(&["kind", "p50_us", "p99_us", "samples"]);
        for x in f {
            t.row(&[
                x.kind.to_string(),
                format!("{:.3}", x.p50_us),
                format!("{:.3}", x.p99_us),
                x.samples.to_string(),
            ]);
        }
        out.push(t);
    }
    if let Some(l) = &r.loaded {
        let mut t = Table::new(&["mix", "delay", "delay_ns", "bandwidth_mbps", "latency_ns"]);
        for c in &l.curves {
            for p in &c.points {
                t.row(&[
                    c.mix.clone(),
                    opt(p.delay),
                    opt(p.delay_ns.map(|n| format!("{n:.1}"))),
                    format!("{:.1}", p.bandwidth_mbps),
                    format!("{:.2}", p.latency_ns),
                ]);
            }
        }
        out.push(t);
    }
    if let Some(f) = &r.far_loaded {
        let mut t = Table::new(&[
            "streams",
            "gap_us",
            "bandwidth_mbps",
            "p50_us",
            "p99_us",
            "samples",
        ]);
        for p in f {
            t.row(&[
                p.streams.to_string(),
                opt(p.gap_us),
                format!("{:.1}", p.bandwidth_mbps),
                format!("{:.2}", p.p50_us),
                format!("{:.2}", p.p99_us),
                p.samples.to_string(),
            ]);
        }
        out.push(t);
    }
    if let Some(tiers) = &r.far {
        let mut t = Table::new(&["tier", "transfer_bytes", "read_mbps", "write_mbps"]);
        for tier in tiers {
            for x in &tier.curve {
                t.row(&[
                    tier.name.clone(),
                    x.transfer_bytes.to_string(),
                    format!("{:.1}", x.read_mbps),
                    format!("{:.1}", x.write_mbps),
                ]);
            }
        }
        out.push(t);
    }
    out
}

/// `farmem bench --json`: the machine, the parameters and every cell.
pub fn bench_json(r: &BenchReport, machine: &Machine) -> serde_json::Value {
    serde_json::json!({ "machine": machine, "params": r.params, "results": r.results })
}

/// `farmem bench`'s table (the one `farmem report --text` prints), then
/// what the cells do not show: failures, spreads and bytes moved.
pub fn bench(r: &BenchReport, machine: &Machine) -> String {
    let mut s = bench_table(&bench_json(r, machine));
    let _ = writeln!(
        s,
        "command: {} over {} {}; median of {} run(s)",
        r.command.join(" "),
        format_size(r.size),
        if r.footprint_measured {
            "of footprint (its peak resident memory all-local)"
        } else {
            "of data"
        },
        r.runs
    );
    s.push_str(
        "(runtime relative to all-local: 1.00x is as fast; in brackets the workload's own metric)\n",
    );
    for c in &r.results {
        if let Some(why) = &c.unavailable {
            let _ = writeln!(s, "{} at {}x: unavailable: {why}", c.system, c.expansion);
        }
    }
    if r.runs > 1 {
        for c in r.results.iter().filter(|c| c.seconds.is_finite()) {
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
    for c in &r.results {
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
        if let (Some(t), Some(ceil)) = (c.bound_seconds, r.ceiling) {
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
pub fn bench_csv(r: &BenchReport) -> Vec<Table> {
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
    for c in &r.results {
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

/// A grid of `ids` × `ids`: rows `row_name(y)`, columns `col_name(x)`, the
/// cell of (x, y) from `cell`.
fn grid(
    ids: &[usize],
    corner: &str,
    name: impl Fn(&str, usize) -> String,
    cell: impl Fn(usize, usize) -> Option<String>,
) -> Table {
    let mut header = vec![corner.to_string()];
    header.extend(ids.iter().map(|x| name("col", *x)));
    let mut t = Table::new(&header);
    for y in ids {
        let mut row = vec![name("row", *y)];
        row.extend(ids.iter().map(|x| dash(cell(*x, *y))));
        t.row(&row);
    }
    t
}

fn note(s: &mut String, note: Option<&str>) {
    if let Some(n) = note {
        let _ = write!(s, "\n{n}\n");
    }
}

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
pub fn xy(r: &XyReport) -> String {
    let mut s = machine_line(Some(&r.machine));
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

pub fn xy_csv(r: &XyReport) -> Vec<Table> {
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

/// `farmem numa policies`' table.
pub fn policies(r: &PolicyReport) -> String {
    let mut s = machine_line(Some(&r.machine));
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

pub fn policies_csv(r: &PolicyReport) -> Vec<Table> {
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

/// `farmem numa matrix`'s two grids: latency, then bandwidth.
pub fn matrix(r: &MatrixReport) -> String {
    let mut s = machine_line(Some(&r.machine));
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

pub fn matrix_csv(r: &MatrixReport) -> Vec<Table> {
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
pub fn matrix_warnings(r: &MatrixReport) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_has_a_row_and_a_column_per_node() {
        let t = grid(
            &[0, 1],
            "X \\ Y",
            |k, n| format!("{k}{n}"),
            |x, y| (x != y).then(|| format!("{x}{y}")),
        );
        assert_eq!(
            t.text(""),
            "X \\ Y  col0  col1\nrow0      -    10\nrow1     01     -\n"
        );
    }
}
