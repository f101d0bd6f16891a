//! Probe, numa and bench results (their `--json` output) in one
//! self-contained HTML page with inline SVG plots, and bench results as
//! text tables.

use crate::ReportError;
use farmem_probe::far::Tier;
use farmem_probe::levels::{Level, Point};
use farmem_sys::format_size;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, ReportError>;

/// What a JSON result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Probe,
    Bench,
    NumaXy,
    NumaPolicies,
    NumaMatrix,
}

/// Which result `v` is, or None for JSON farmem did not write.
pub fn kind(v: &Value) -> Option<Kind> {
    if v.get("matrix").is_some() {
        return Some(Kind::NumaMatrix);
    }
    if v.get("cells").is_some() {
        return Some(Kind::NumaXy);
    }
    if let Some(r) = v.get("results").and_then(|r| r.as_array()) {
        if r.first().is_some_and(|x| x.get("policy").is_some()) {
            return Some(Kind::NumaPolicies);
        }
        if r.first().is_some_and(|x| x.get("system").is_some()) {
            return Some(Kind::Bench);
        }
    }
    [
        "curve",
        "ladder",
        "far",
        "bandwidth",
        "faults",
        "loaded",
        "far_loaded",
    ]
    .iter()
    .any(|k| v.get(*k).is_some())
    .then_some(Kind::Probe)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn machine_line(v: &Value) -> String {
    let m = &v["machine"];
    format!(
        "{} · {} CPUs · {} NUMA node(s) · Linux {} · THP {}",
        m["cpu_model"].as_str().unwrap_or("?"),
        m["cpus"],
        m["numa_nodes"],
        m["kernel"].as_str().unwrap_or("?"),
        m["thp"].as_str().unwrap_or("?")
    )
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn bytes(v: &Value) -> Option<u64> {
    v.as_u64()
}

/// One cell of a bench result, read back from its JSON.
struct Cell {
    system: String,
    expansion: f64,
    budget: Option<u64>,
    seconds: f64,
    relative: Option<f64>,
    metric: f64,
    unit: String,
    /// The full reason a run failed, as the bench recorded it.
    why: Option<String>,
    stats: Option<String>,
    fetched: Option<u64>,
    written: Option<u64>,
    bound_fetched: Option<u64>,
    bound_written: Option<u64>,
}

impl Cell {
    fn from_json(r: &Value) -> Cell {
        Cell {
            system: r["system"].as_str().unwrap_or("?").to_string(),
            expansion: f(&r["expansion"]),
            budget: bytes(&r["local_budget_bytes"]),
            seconds: f(&r["seconds"]),
            relative: Some(f(&r["relative_runtime"])).filter(|x| x.is_finite()),
            metric: f(&r["metric"]),
            unit: r["unit"].as_str().unwrap_or("").to_string(),
            why: r["unavailable"].as_str().map(str::to_string),
            stats: r["farmem_stats"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            fetched: bytes(&r["timed_fetched_bytes"]),
            written: bytes(&r["timed_written_back_bytes"]),
            bound_fetched: bytes(&r["bound_fetched_bytes"]),
            bound_written: bytes(&r["bound_written_back_bytes"]),
        }
    }

    fn failure(&self) -> Option<String> {
        self.why.as_deref().map(farmem_bench::failure_words)
    }

    /// The cell as table text: "2.18× (12.3 MB/s)" or why it failed.
    fn text(&self) -> String {
        match (&self.relative, self.failure()) {
            (_, Some(w)) => w,
            (Some(r), None) => format!("{r:.2}× ({} {})", short(self.metric), self.unit),
            (None, None) => "-".into(),
        }
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

/// A bench result: its workload and its cells.
struct Bench {
    workload: String,
    size: Option<u64>,
    threads: Value,
    runs: Value,
    cells: Vec<Cell>,
}

impl Bench {
    fn from_json(v: &Value) -> Bench {
        let p = &v["params"];
        Bench {
            workload: p["workload"].as_str().unwrap_or("?").to_string(),
            size: bytes(&p["size_bytes"]),
            threads: p["threads"].clone(),
            runs: p["runs"].clone(),
            cells: v["results"]
                .as_array()
                .map(|r| r.iter().map(Cell::from_json).collect())
                .unwrap_or_default(),
        }
    }

    fn title(&self) -> String {
        match self.size {
            Some(s) => format!("{} {}", self.workload, format_size(s)),
            None => self.workload.clone(),
        }
    }

    fn local(&self) -> Option<&Cell> {
        self.cells.iter().find(|c| c.system == "local")
    }

    fn expansions(&self) -> Vec<f64> {
        crate::plot::ratios(self.cells.iter().map(|c| (c.system.as_str(), c.expansion)))
    }

    fn systems(&self) -> Vec<&str> {
        crate::plot::systems(self.cells.iter().map(|c| c.system.as_str()))
    }

    fn at(&self, system: &str, e: f64) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.system == system && c.expansion == e)
    }
}

/// A bench result as a text table: runtime relative to local per system and
/// expansion (`farmem report --text`).
pub fn bench_table(v: &Value) -> String {
    let b = Bench::from_json(v);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "workload {}, {} threads ({})",
        b.title(),
        b.threads,
        machine_line(v)
    );
    if let Some(l) = b.local() {
        let _ = writeln!(
            s,
            "all-local: {:.3} s, {} {}",
            l.seconds,
            short(l.metric),
            l.unit
        );
    }
    let exps = b.expansions();
    let rows: Vec<(&str, Vec<String>)> = b
        .systems()
        .into_iter()
        .map(|sys| {
            let cells = exps
                .iter()
                .map(|e| b.at(sys, *e).map_or("-".into(), Cell::text))
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

/// One row per (workload, expansion): farmem, the best system, and farmem
/// against each baseline.
fn summary_html(benches: &[Bench], out: &mut String) {
    if benches.is_empty() {
        return;
    }
    let mut baselines: Vec<&str> = Vec::new();
    for b in benches {
        for s in b.systems() {
            if s != "farmem" && !baselines.contains(&s) {
                baselines.push(s);
            }
        }
    }
    out.push_str("<section id=summary><h2>Summary</h2><table class=sortable><thead><tr><th>workload</th><th>expansion</th><th>farmem</th><th>best system</th>");
    for s in &baselines {
        let _ = write!(out, "<th>farmem vs {}</th>", esc(s));
    }
    out.push_str("</tr></thead><tbody>");
    for b in benches {
        for e in b.expansions() {
            let fm = b.at("farmem", e);
            let best = b
                .cells
                .iter()
                .filter(|c| c.system != "local" && c.expansion == e)
                .filter_map(|c| c.relative.map(|r| (c, r)))
                .min_by(|x, y| x.1.total_cmp(&y.1));
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{e}×</td><td>{}</td><td>{}</td>",
                esc(&b.title()),
                fm.map_or("-".into(), |c| esc(&c.text())),
                best.map_or("none ran".into(), |(c, r)| format!(
                    "{} ({r:.2}×)",
                    esc(&c.system)
                )),
            );
            for s in &baselines {
                let cell = match (fm, b.at(s, e)) {
                    (_, None) => "-".to_string(),
                    (Some(f), Some(o)) => match (f.relative, o.relative) {
                        (Some(fr), Some(or)) if fr <= or => {
                            format!("<span class=good>{:.2}× faster</span>", or / fr)
                        }
                        (Some(fr), Some(or)) => {
                            format!("<span class=bad>{:.2}× slower</span>", fr / or)
                        }
                        (Some(_), None) => format!(
                            "<span class=good>{s} {}</span>",
                            esc(&o.failure().unwrap_or_default())
                        ),
                        (None, _) => format!(
                            "<span class=bad>farmem {}</span>",
                            esc(&f.failure().unwrap_or_default())
                        ),
                    },
                    (None, Some(_)) => "farmem not run".into(),
                };
                let _ = write!(out, "<td>{cell}</td>");
            }
            out.push_str("</tr>");
        }
    }
    out.push_str("</tbody></table><p class=m>Runtime relative to all-local at each memory expansion (footprint / local memory); lower is better.</p></section>\n");
}

/// The farmem statistics block (`farmem run --stats`) as key/value pairs.
fn stat_rows(block: &str) -> Vec<(String, String)> {
    block
        .lines()
        .skip_while(|l| !l.starts_with("farmem stats"))
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            let at = l.find("  ")?;
            Some((l[..at].trim().to_string(), l[at..].trim().to_string()))
        })
        .collect()
}

fn size_or_dash(b: Option<u64>) -> String {
    b.map_or("-".into(), format_size)
}

fn bench_html(b: &Bench, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "<h2>bench: {}</h2><p class=m>{} threads, median of {} run(s)</p>",
        esc(&b.title()),
        b.threads,
        b.runs
    );
    let exps = b.expansions();
    out.push_str("<table class=sortable><thead><tr><th>system</th>");
    for e in &exps {
        let _ = write!(out, "<th>{e}×</th>");
    }
    out.push_str("</tr></thead><tbody>");
    if let Some(l) = b.local() {
        let _ = write!(
            out,
            "<tr><td>all-local</td><td colspan={}>{:.3} s ({} {}) = 1.00×</td></tr>",
            exps.len().max(1),
            l.seconds,
            short(l.metric),
            esc(&l.unit)
        );
    }
    for sys in b.systems() {
        let _ = write!(out, "<tr><td>{}</td>", esc(sys));
        for e in &exps {
            match b.at(sys, *e) {
                Some(c) if c.why.is_some() => {
                    let _ = write!(
                        out,
                        "<td class=fail title=\"{}\">{}</td>",
                        esc(c.why.as_deref().unwrap_or("")),
                        esc(&c.text())
                    );
                }
                Some(c) => {
                    let _ = write!(out, "<td>{}</td>", esc(&c.text()));
                }
                None => out.push_str("<td>-</td>"),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table><p class=m>Runtime relative to all-local; in brackets the workload's own metric.</p>");
    let cells: Vec<crate::plot::BenchCell> = b
        .cells
        .iter()
        .map(|c| crate::plot::BenchCell {
            system: c.system.clone(),
            expansion: c.expansion,
            relative: c.relative,
            failure: c.failure(),
        })
        .collect();
    if cells.iter().any(|c| c.system != "local") {
        out.push_str(&crate::plot::svg_string(&crate::plot::Bench {
            title: &format!("{}: runtime relative to all-local", b.title()),
            cells: &cells,
        })?);
    }
    for c in b.cells.iter().filter(|c| c.why.is_some()) {
        let _ = writeln!(
            out,
            "<p class=m>{} at {}×: {}</p>",
            esc(&c.system),
            c.expansion,
            esc(c.why.as_deref().unwrap_or(""))
        );
    }
    // Bytes moved in the timed region against the least any pager must move.
    let fm: Vec<&Cell> = b.cells.iter().filter(|c| c.system == "farmem").collect();
    if fm.iter().any(|c| c.fetched.is_some()) {
        out.push_str("<h3>farmem's far traffic in the timed region</h3><table class=sortable><thead><tr><th>expansion</th><th>local budget</th><th>fetched</th><th>written back</th><th>moved</th><th>least possible</th><th>moved / least</th></tr></thead><tbody>");
        for c in &fm {
            let moved = c.fetched.zip(c.written).map(|(a, b)| a + b);
            let bound = c.bound_fetched.zip(c.bound_written).map(|(a, b)| a + b);
            let ratio = match (moved, bound) {
                (Some(m), Some(b)) if b > 0 => format!("{:.2}×", m as f64 / b as f64),
                _ => "-".into(),
            };
            let _ = write!(
                out,
                "<tr><td>{}×</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ratio}</td></tr>",
                c.expansion,
                size_or_dash(c.budget),
                size_or_dash(c.fetched),
                size_or_dash(c.written),
                size_or_dash(moved),
                size_or_dash(bound),
            );
        }
        out.push_str("</tbody></table><p class=m>\"Least possible\" is the traffic any paging policy must move at this budget, from the workload's access pattern; \"-\" where no simple bound holds.</p>");
    }
    // The whole-process statistics, one column per expansion.
    let stats: Vec<(f64, Vec<(String, String)>)> = fm
        .iter()
        .filter_map(|c| c.stats.as_deref().map(|s| (c.expansion, stat_rows(s))))
        .filter(|(_, r)| !r.is_empty())
        .collect();
    if let Some((_, first)) = stats.first() {
        out.push_str("<h3>farmem statistics (whole process, last run)</h3><table><thead><tr><th>statistic</th>");
        for (e, _) in &stats {
            let _ = write!(out, "<th>{e}×</th>");
        }
        out.push_str("</tr></thead><tbody>");
        for (k, (key, _)) in first.iter().enumerate() {
            let _ = write!(out, "<tr><td class=l>{}</td>", esc(key));
            for (_, rows) in &stats {
                let val = rows.get(k).filter(|r| r.0 == *key).map_or("-", |r| &r.1);
                let _ = write!(out, "<td>{}</td>", esc(val));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
    }
    Ok(())
}

fn probe_html(v: &Value, out: &mut String) -> Result<()> {
    let what: Vec<&str> = [
        ("ladder", "the whole ladder"),
        ("curve", "latency"),
        ("bandwidth", "bandwidth"),
        ("faults", "page faults"),
        ("far", "far tiers"),
        ("loaded", "loaded latency"),
        ("far_loaded", "the far tier under load"),
    ]
    .iter()
    .filter(|(k, _)| !v[*k].is_null())
    .map(|(_, w)| *w)
    .collect();
    let _ = writeln!(out, "<h2>probe: {}</h2>", esc(&what.join(", ")));
    if let Some(l) = v["ladder"].as_array() {
        out.push_str(
            "<table class=sortable><thead><tr><th>tier</th><th>size</th><th>latency</th><th>read GB/s</th></tr></thead><tbody>",
        );
        for r in l {
            let ns = f(&r["latency_ns"]);
            let lat = if ns >= 1000.0 {
                format!("{:.1} µs", ns / 1000.0)
            } else {
                format!("{ns:.1} ns")
            };
            let _ = write!(
                out,
                "<tr><td class=l>{}</td><td>{}</td><td>{lat}</td><td>{:.2}</td></tr>",
                esc(r["tier"].as_str().unwrap_or("")),
                r["bytes"].as_u64().map_or("-".into(), format_size),
                f(&r["read_gbps"])
            );
        }
        out.push_str("</tbody></table>");
    }
    // The probe's own types read back its JSON.
    let curve: Option<Vec<Point>> = serde_json::from_value(v["curve"].clone()).ok();
    let levels: Option<Vec<Level>> = serde_json::from_value(v["levels"].clone()).ok();
    let far: Option<Vec<Tier>> = serde_json::from_value(v["far"].clone()).ok();
    if curve.is_some() || far.is_some() {
        let title = machine_line(v);
        out.push_str(&crate::plot::svg_string(&crate::plot::Probe {
            curve: curve.as_deref(),
            levels: levels.as_deref(),
            far: far.as_deref(),
            title: &title,
        })?);
    }
    loaded_html(v, out)
}

/// Loaded latency: a table per mix, the far tier under load, and the plot.
fn loaded_html(v: &Value, out: &mut String) -> Result<()> {
    use farmem_probe::loaded::{Curve, FarPoint};
    let curves: Option<Vec<Curve>> = serde_json::from_value(v["loaded"]["curves"].clone()).ok();
    let far: Option<Vec<FarPoint>> = serde_json::from_value(v["far_loaded"].clone()).ok();
    if let Some(cs) = &curves {
        out.push_str("<h3>loaded latency</h3><p class=m>One thread chases pointers; the others draw bandwidth in each read:write mix (-nt: non-temporal stores), with a calibrated delay after each line. Bandwidth is counted in software.</p>");
        out.push_str("<table class=sortable><thead><tr><th>mix</th><th>delay</th><th>delay (ns)</th><th>bandwidth MB/s</th><th>latency (ns)</th></tr></thead><tbody>");
        for c in cs {
            for p in &c.points {
                let _ = write!(
                    out,
                    "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.1}</td></tr>",
                    esc(&c.mix),
                    p.delay.map_or("idle".into(), |d| d.to_string()),
                    p.delay_ns.map_or("-".into(), |n| format!("{n:.0}")),
                    p.bandwidth_mbps,
                    p.latency_ns
                );
            }
        }
        out.push_str("</tbody></table>");
    }
    if let Some(fs) = &far {
        out.push_str("<h3>the far tier under load</h3><table class=sortable><thead><tr><th>streams</th><th>gap (µs)</th><th>bandwidth MB/s</th><th>p50 (µs)</th><th>p99 (µs)</th></tr></thead><tbody>");
        for p in fs {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.1}</td><td>{:.1}</td></tr>",
                p.streams,
                p.gap_us.map_or("-".into(), |g| g.to_string()),
                p.bandwidth_mbps,
                p.p50_us,
                p.p99_us
            );
        }
        out.push_str("</tbody></table>");
    }
    if curves.is_some() || far.is_some() {
        out.push_str(&crate::plot::svg_string(&crate::plot::Loaded {
            curves: curves.as_deref(),
            far: far.as_deref(),
            title: "loaded latency: one thread chases, the others stream",
        })?);
    }
    Ok(())
}

/// `farmem numa matrix`: one table, and the two heat maps.
fn matrix_html(v: &Value, out: &mut String) -> Result<()> {
    let cells: Vec<farmem_numa::matrix::MatrixCell> = serde_json::from_value(v["matrix"].clone())
        .map_err(|e| {
        ReportError::Input(format!(
            "a numa matrix result whose cells do not read back: {e}"
        ))
    })?;
    out.push_str("<h2>numa matrix: idle latency and read bandwidth</h2><table class=sortable><thead><tr><th>X (memory)</th><th>Y (CPUs)</th><th>latency (ns)</th><th>read GB/s</th><th>threads</th></tr></thead><tbody>");
    for c in &cells {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td></tr>",
            c.mem_node, c.cpu_node, c.latency_ns, c.read_gbps, c.threads
        );
    }
    out.push_str("</tbody></table>");
    let mut ids: Vec<usize> = cells.iter().map(|c| c.mem_node).collect();
    ids.sort_unstable();
    ids.dedup();
    out.push_str(&crate::plot::matrix_figure(&ids, &cells, |f| {
        crate::plot::svg_string(f)
    })?);
    Ok(())
}

fn numa_html(v: &Value, k: Kind, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "<h2>numa {}</h2>",
        if k == Kind::NumaXy {
            "X×Y"
        } else {
            "policies"
        },
    );
    if let Some(n) = v["note"].as_str() {
        let _ = writeln!(out, "<p><i>{}</i></p>", esc(n));
    }
    if k == Kind::NumaXy {
        let cells = v["cells"].as_array().cloned().unwrap_or_default();
        out.push_str("<table class=sortable><thead><tr><th>X (memory)</th><th>Y (threads)</th><th>seconds</th><th>vs local</th></tr></thead><tbody>");
        for c in &cells {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.4}</td><td>{:+.1}%</td></tr>",
                c["mem_node"],
                c["cpu_node"],
                f(&c["seconds"]),
                f(&c["slowdown_pct"])
            );
        }
        out.push_str("</tbody></table>");
        let ids: Vec<usize> = v["topology"]["nodes"]
            .as_array()
            .map(|n| {
                n.iter()
                    .filter_map(|x| x["id"].as_u64().and_then(|i| usize::try_from(i).ok()))
                    .collect()
            })
            .unwrap_or_default();
        // A node number too large for usize saturates, and matches no node.
        let node = |n: &Value| {
            n.as_u64()
                .map_or(0, |i| usize::try_from(i).unwrap_or(usize::MAX))
        };
        let pts: Vec<(usize, usize, String, f64)> = cells
            .iter()
            .map(|c| {
                (
                    node(&c["mem_node"]),
                    node(&c["cpu_node"]),
                    crate::plot::time_and_slowdown(f(&c["seconds"]), f(&c["slowdown_pct"])),
                    f(&c["slowdown_pct"]),
                )
            })
            .collect();
        out.push_str(&crate::plot::svg_string(&crate::plot::Heatmap {
            ids: &ids,
            cells: &pts,
            title: "time, and slowdown against local memory (X = Y)",
        })?);
    } else {
        out.push_str(
            "<table class=sortable><thead><tr><th>policy</th><th>seconds</th><th>mean rate</th><th>vs default</th></tr></thead><tbody>",
        );
        let res = v["results"].as_array().cloned().unwrap_or_default();
        for r in &res {
            let _ = write!(
                out,
                "<tr><td class=l>{}</td><td>{:.3}</td><td>{}</td><td>{:+.1}%</td></tr>",
                esc(r["policy"].as_str().unwrap_or("")),
                f(&r["seconds"]),
                r["mean_rate"],
                f(&r["change_pct"])
            );
        }
        out.push_str("</tbody></table>");
        let lines: Vec<(String, Vec<(f64, f64)>)> = res
            .iter()
            .map(|r| {
                let pts = r["series"]
                    .as_array()
                    .map(|s| s.iter().map(|p| (f(&p[0]), f(&p[1]))).collect())
                    .unwrap_or_default();
                (r["policy"].as_str().unwrap_or("").to_string(), pts)
            })
            .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
            .collect();
        if !lines.is_empty() {
            out.push_str(&crate::plot::svg_string(&crate::plot::Series {
                lines: &lines,
                title: "the command's rate over time by NUMA policy",
                x_desc: "time since start (s)",
                y_desc: "rate (the number --rate-regex takes)",
            })?);
        }
    }
    Ok(())
}

/// Click a column's header to sort the table by it (numbers as numbers).
const SORT_JS: &str = "document.querySelectorAll('table.sortable th').forEach(function(th){th.style.cursor='pointer';th.title='click to sort';th.onclick=function(){var t=th.closest('table'),b=t.tBodies[0],i=th.cellIndex,d=th.dataset.d=th.dataset.d=='1'?'-1':'1';var k=function(r){var c=r.cells[i];var s=c?c.textContent:'';var n=parseFloat(s);return isNaN(n)?s:n;};Array.from(b.rows).sort(function(x,y){var a=k(x),c=k(y);return (a<c?-1:a>c?1:0)*d;}).forEach(function(r){b.appendChild(r);});};});";

/// A result file (`farmem probe|numa|bench ... --json`) and its kind.
pub fn read_result(path: &Path) -> Result<(Kind, Value)> {
    let input = |why: String| ReportError::Input(format!("{}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| input(e.to_string()))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| input(format!("not JSON from `farmem ... --json` ({e})")))?;
    match kind(&v) {
        Some(k) => Ok((k, v)),
        None => Err(input(
            "not a probe, numa or bench result (write them with --json)".into(),
        )),
    }
}

/// Write results (each with the file or command it came from) as one
/// offline HTML page.
pub fn write_html(results: &[(PathBuf, Value)], out: &Path) -> Result<()> {
    let mut docs = Vec::new();
    for (p, v) in results {
        let k = kind(v).ok_or_else(|| {
            ReportError::Input(format!(
                "{}: not a probe, numa or bench result (write them with --json)",
                p.display()
            ))
        })?;
        docs.push((p.clone(), k, v.clone()));
    }
    // The machine once, at the top; a section measured elsewhere says so.
    let machine = docs.first().map(|d| machine_line(&d.2)).unwrap_or_default();
    let benches: Vec<Bench> = docs
        .iter()
        .filter(|d| d.1 == Kind::Bench)
        .map(|d| Bench::from_json(&d.2))
        .collect();
    let mut body = String::new();
    let _ = writeln!(body, "<p class=machine>Machine: {}</p>", esc(&machine));
    summary_html(&benches, &mut body);
    let mut bi = benches.iter();
    for (p, k, v) in &docs {
        let _ = writeln!(
            body,
            "<section><p class=src>{}</p>",
            esc(&p.display().to_string())
        );
        let m = machine_line(v);
        if m != machine {
            let _ = writeln!(body, "<p class=machine>Measured on: {}</p>", esc(&m));
        }
        match k {
            Kind::Bench => {
                let b = bi
                    .next()
                    .ok_or_else(|| ReportError::Input("bench results counted twice".into()))?;
                bench_html(b, &mut body)?
            }
            Kind::Probe => probe_html(v, &mut body)?,
            Kind::NumaMatrix => matrix_html(v, &mut body)?,
            k => numa_html(v, *k, &mut body)?,
        }
        body.push_str("</section>\n");
    }
    let html = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>farmem report</title><style>\
         body{{font-family:'DejaVu Sans',sans-serif;max-width:1080px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}\
         td.l,td:first-child{{text-align:left}}th{{background:#f4f4f4}}td.fail{{color:#b00;font-weight:bold}}\
         .good{{color:#060}}.bad{{color:#b00}}.m,.src{{color:#666;font-size:90%}}.machine{{font-size:95%}}\
         svg{{display:block;max-width:100%;height:auto;margin:1em 0}}\
         section{{border-top:2px solid #eee;margin-top:2em}}</style></head><body><h1>farmem report</h1>\n{body}\
         <script>{SORT_JS}</script></body></html>\n"
    );
    std::fs::write(out, html).map_err(|e| ReportError::Write {
        path: out.display().to_string(),
        why: e.to_string(),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests;
