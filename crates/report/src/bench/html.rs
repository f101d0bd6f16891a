//! A bench result's section of the HTML report, and the summary of every
//! bench result at the top of the page.

use super::{cell_text, failure, relative, short, BenchDoc};
use crate::words::esc;
use crate::ReportError;
use farmem_bench::RunResult;
use farmem_sys::format_size;
use std::fmt::Write as _;

type Result<T> = std::result::Result<T, ReportError>;

/// One row per (workload, expansion): farmem, the best system, and farmem
/// against each baseline.
pub fn summary(benches: &[&BenchDoc], out: &mut String) {
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
                .results
                .iter()
                .filter(|c| c.system != "local" && c.expansion == e)
                .filter_map(|c| relative(c).map(|r| (c, r)))
                .min_by(|x, y| x.1.total_cmp(&y.1));
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{e}×</td><td>{}</td><td>{}</td>",
                esc(&b.title()),
                fm.map_or("-".into(), |c| esc(&cell_text(c))),
                best.map_or("none ran".into(), |(c, r)| format!(
                    "{} ({r:.2}×)",
                    esc(&c.system)
                )),
            );
            for s in &baselines {
                let cell = match (fm, b.at(s, e)) {
                    (_, None) => "-".to_string(),
                    (Some(f), Some(o)) => match (relative(f), relative(o)) {
                        (Some(fr), Some(or)) if fr <= or => {
                            format!("<span class=good>{:.2}× faster</span>", or / fr)
                        }
                        (Some(fr), Some(or)) => {
                            format!("<span class=bad>{:.2}× slower</span>", fr / or)
                        }
                        (Some(_), None) => format!(
                            "<span class=good>{s} {}</span>",
                            esc(&failure(o).unwrap_or_default())
                        ),
                        (None, _) => format!(
                            "<span class=bad>farmem {}</span>",
                            esc(&failure(f).unwrap_or_default())
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

/// The bench section of the report: the runtime table and figure, why
/// cells are missing, then farmem's traffic and statistics.
pub fn section(b: &BenchDoc, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "<h2>bench: {}</h2><p class=m>{} threads, median of {} run(s)</p>",
        esc(&b.title()),
        b.params.threads,
        b.params.runs
    );
    runtime_table(b, out);
    let cells = super::figure::cells(b);
    if cells.iter().any(|c| c.system != "local") {
        out.push_str(&crate::plot::svg_string(&super::figure::Bench {
            title: &format!("{}: runtime relative to all-local", b.title()),
            cells: &cells,
        })?);
    }
    for c in b.results.iter() {
        let Some(why) = &c.unavailable else { continue };
        let _ = writeln!(
            out,
            "<p class=m>{} at {}×: {}</p>",
            esc(&c.system),
            c.expansion,
            esc(why)
        );
    }
    let fm: Vec<&RunResult> = b.results.iter().filter(|c| c.system == "farmem").collect();
    traffic_table(&fm, out);
    stats_table(&fm, out);
    Ok(())
}

/// A row per system, a column per expansion: runtime relative to
/// all-local.
fn runtime_table(b: &BenchDoc, out: &mut String) {
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
                Some(c) if c.unavailable.is_some() => {
                    let _ = write!(
                        out,
                        "<td class=fail title=\"{}\">{}</td>",
                        esc(c.unavailable.as_deref().unwrap_or("")),
                        esc(&cell_text(c))
                    );
                }
                Some(c) => {
                    let _ = write!(out, "<td>{}</td>", esc(&cell_text(c)));
                }
                None => out.push_str("<td>-</td>"),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table><p class=m>Runtime relative to all-local; in brackets the workload's own metric.</p>");
}

/// Bytes farmem moved in the timed region against the least any pager
/// must move, a row per expansion (none when no run reported them).
fn traffic_table(fm: &[&RunResult], out: &mut String) {
    if fm.iter().any(|c| c.timed_fetched_bytes.is_some()) {
        out.push_str("<h3>farmem's far traffic in the timed region</h3><table class=sortable><thead><tr><th>expansion</th><th>local budget</th><th>fetched</th><th>written back</th><th>moved</th><th>least possible</th><th>moved / least</th></tr></thead><tbody>");
        for c in fm {
            let moved = c
                .timed_fetched_bytes
                .zip(c.timed_written_back_bytes)
                .map(|(a, b)| a + b);
            let bound = c
                .bound_fetched_bytes
                .zip(c.bound_written_back_bytes)
                .map(|(a, b)| a + b);
            let ratio = match (moved, bound) {
                (Some(m), Some(b)) if b > 0 => format!("{:.2}×", m as f64 / b as f64),
                _ => "-".into(),
            };
            let _ = write!(
                out,
                "<tr><td>{}×</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ratio}</td></tr>",
                c.expansion,
                format_size(c.local_budget_bytes),
                size_or_dash(c.timed_fetched_bytes),
                size_or_dash(c.timed_written_back_bytes),
                size_or_dash(moved),
                size_or_dash(bound),
            );
        }
        out.push_str("</tbody></table><p class=m>\"Least possible\" is the traffic any paging policy must move at this budget, from the workload's access pattern; \"-\" where no simple bound holds.</p>");
    }
}

/// farmem's whole-process statistics, one column per expansion.
fn stats_table(fm: &[&RunResult], out: &mut String) {
    let stats: Vec<(f64, Vec<(String, String)>)> = fm
        .iter()
        .filter_map(|c| {
            c.farmem_stats
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(|s| (c.expansion, stat_rows(s)))
        })
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
}
