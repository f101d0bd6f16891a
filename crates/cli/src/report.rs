//! `farmem report`: probe, numa and bench results (their `--json` output)
//! in one self-contained HTML page with inline SVG plots.

use anyhow::{bail, Context, Result};
use farmem_probe::far::Tier;
use farmem_probe::levels::{Level, Point};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// JSON files written by `farmem probe|numa|bench ... --json`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// The HTML page to write.
    #[arg(short, long, required_unless_present = "text")]
    output: Option<PathBuf>,
    /// Print bench results as text tables instead.
    #[arg(long)]
    text: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Probe,
    Bench,
    NumaXy,
    NumaPolicies,
}

fn kind(v: &Value) -> Option<Kind> {
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
    ["curve", "ladder", "far", "bandwidth", "faults"]
        .iter()
        .any(|k| v.get(*k).is_some())
        .then_some(Kind::Probe)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Run a plot function into a temporary SVG file and return its text.
fn svg(f: impl FnOnce(&std::path::Path) -> Result<()>) -> Result<String> {
    let p = std::env::temp_dir().join(format!(
        "farmem-report-{}-{}.svg",
        std::process::id(),
        farmem_sys::now_ns()
    ));
    f(&p)?;
    let s = std::fs::read_to_string(&p)?;
    let _ = std::fs::remove_file(&p);
    Ok(s)
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

/// A bench result as a text table: runtime relative to local per system and
/// expansion.
pub fn bench_table(v: &Value) -> String {
    let mut s = String::new();
    let p = &v["params"];
    let _ = writeln!(
        s,
        "workload {} over {} bytes, {} threads ({})",
        p["workload"].as_str().unwrap_or("?"),
        p["size_bytes"],
        p["threads"],
        machine_line(v)
    );
    let res = v["results"].as_array().cloned().unwrap_or_default();
    if let Some(l) = res.iter().find(|r| r["system"] == "local") {
        let _ = writeln!(
            s,
            "all-local: {:.3} s, {:.1} {}",
            f(&l["seconds"]),
            f(&l["metric"]),
            l["unit"].as_str().unwrap_or("")
        );
    }
    let mut exps: Vec<f64> = res
        .iter()
        .filter(|r| r["system"] != "local")
        .map(|r| f(&r["expansion"]))
        .collect();
    exps.sort_by(|a, b| a.total_cmp(b));
    exps.dedup();
    let _ = write!(s, "{:<10}", "system");
    for e in &exps {
        let _ = write!(s, "{:>24}", format!("{e}x"));
    }
    s.push('\n');
    let mut systems: Vec<String> = res
        .iter()
        .filter(|r| r["system"] != "local")
        .map(|r| r["system"].as_str().unwrap_or("").to_string())
        .collect();
    systems.dedup();
    for sys in systems {
        let _ = write!(s, "{sys:<10}");
        for e in &exps {
            let r = res
                .iter()
                .find(|r| r["system"] == sys.as_str() && f(&r["expansion"]) == *e);
            let cell = match r {
                Some(r) if r.get("unavailable").is_some() => {
                    let u = r["unavailable"].as_str().unwrap_or("");
                    if u.contains("OOM") {
                        "OOM-killed".into()
                    } else if u.contains("timed out") {
                        format!("> {} s", u.split_whitespace().nth(3).unwrap_or("?"))
                    } else {
                        "unavailable".into()
                    }
                }
                Some(r) => format!(
                    "{:.2}x ({:.1} {})",
                    f(&r["relative_runtime"]),
                    f(&r["metric"]),
                    r["unit"].as_str().unwrap_or("")
                ),
                None => "-".into(),
            };
            let _ = write!(s, "{cell:>24}");
        }
        s.push('\n');
    }
    s
}

fn bench_html(v: &Value, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "<h2>bench: {}</h2><p class=m>{}</p><pre>{}</pre>",
        esc(v["params"]["workload"].as_str().unwrap_or("?")),
        esc(&machine_line(v)),
        esc(&bench_table(v))
    );
    let res = v["results"].as_array().cloned().unwrap_or_default();
    let mut systems: Vec<String> = res
        .iter()
        .filter(|r| r["system"] != "local")
        .map(|r| r["system"].as_str().unwrap_or("").to_string())
        .collect();
    systems.dedup();
    let lines: Vec<(String, Vec<(f64, f64)>)> = systems
        .iter()
        .map(|s| {
            let pts = res
                .iter()
                .filter(|r| r["system"] == s.as_str() && f(&r["relative_runtime"]).is_finite())
                .map(|r| (f(&r["expansion"]), f(&r["relative_runtime"])))
                .collect();
            (s.clone(), pts)
        })
        .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
        .collect();
    if !lines.is_empty() {
        out.push_str(&svg(|p| {
            crate::plot::series(
                p,
                &lines,
                "runtime relative to all-local against expansion",
                "runtime / local",
            )
        })?);
    }
    for r in &res {
        if let Some(st) = r
            .get("farmem_stats")
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
        {
            let _ = writeln!(
                out,
                "<details><summary>farmem statistics at {}x</summary><pre>{}</pre></details>",
                r["expansion"],
                esc(st)
            );
        }
    }
    Ok(())
}

fn probe_html(v: &Value, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "<h2>probe</h2><p class=m>{}</p>",
        esc(&machine_line(v))
    );
    if let Some(l) = v["ladder"].as_array() {
        out.push_str(
            "<table><tr><th>tier</th><th>size</th><th>latency</th><th>read GB/s</th></tr>",
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
                "<tr><td>{}</td><td>{}</td><td>{lat}</td><td>{:.2}</td></tr>",
                esc(r["tier"].as_str().unwrap_or("")),
                r["bytes"],
                f(&r["read_gbps"])
            );
        }
        out.push_str("</table>");
    }
    // The probe's own types read back its JSON.
    let curve: Option<Vec<Point>> = serde_json::from_value(v["curve"].clone()).ok();
    let levels: Option<Vec<Level>> = serde_json::from_value(v["levels"].clone()).ok();
    let far: Option<Vec<Tier>> = serde_json::from_value(v["far"].clone()).ok();
    if curve.is_some() || far.is_some() {
        let title = machine_line(v);
        out.push_str(&svg(|p| {
            crate::plot::probe(
                p,
                curve.as_deref(),
                levels.as_deref(),
                far.as_deref(),
                &title,
            )
        })?);
    }
    Ok(())
}

fn numa_html(v: &Value, k: Kind, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "<h2>numa {}</h2><p class=m>{}</p>",
        if k == Kind::NumaXy {
            "X×Y"
        } else {
            "policies"
        },
        esc(&machine_line(v))
    );
    if let Some(n) = v["note"].as_str() {
        let _ = writeln!(out, "<p><i>{}</i></p>", esc(n));
    }
    if k == Kind::NumaXy {
        let cells = v["cells"].as_array().cloned().unwrap_or_default();
        out.push_str("<table><tr><th>X (memory)</th><th>Y (threads)</th><th>seconds</th><th>vs local</th></tr>");
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
        out.push_str("</table>");
        let ids: Vec<usize> = v["topology"]["nodes"]
            .as_array()
            .map(|n| {
                n.iter()
                    .filter_map(|x| x["id"].as_u64().map(|i| i as usize))
                    .collect()
            })
            .unwrap_or_default();
        let pts: Vec<(usize, usize, f64, f64)> = cells
            .iter()
            .map(|c| {
                (
                    c["mem_node"].as_u64().unwrap_or(0) as usize,
                    c["cpu_node"].as_u64().unwrap_or(0) as usize,
                    f(&c["seconds"]),
                    f(&c["slowdown_pct"]),
                )
            })
            .collect();
        out.push_str(&svg(|p| {
            crate::plot::heatmap(p, &ids, &pts, "slowdown against local memory (X = Y)")
        })?);
    } else {
        out.push_str(
            "<table><tr><th>policy</th><th>seconds</th><th>mean rate</th><th>vs default</th></tr>",
        );
        for r in v["results"].as_array().cloned().unwrap_or_default() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{:.3}</td><td>{}</td><td>{:+.1}%</td></tr>",
                esc(r["policy"].as_str().unwrap_or("")),
                f(&r["seconds"]),
                r["mean_rate"],
                f(&r["change_pct"])
            );
        }
        out.push_str("</table>");
    }
    Ok(())
}

pub fn run(a: Args) -> Result<()> {
    let mut docs = Vec::new();
    for p in &a.results {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON from `farmem ... --json`", p.display()))?;
        let Some(k) = kind(&v) else {
            bail!(
                "{}: not a probe, numa or bench result (write them with --json)",
                p.display()
            );
        };
        docs.push((p.clone(), k, v));
    }
    if a.text {
        for (p, k, v) in &docs {
            if *k == Kind::Bench {
                print!("{}", bench_table(v));
            } else {
                eprintln!(
                    "farmem report --text: {} is not a bench result; skipped",
                    p.display()
                );
            }
        }
        return Ok(());
    }
    let mut body = String::new();
    for (p, k, v) in docs {
        let _ = writeln!(
            body,
            "<section><p class=src>{}</p>",
            esc(&p.display().to_string())
        );
        match k {
            Kind::Bench => bench_html(&v, &mut body)?,
            Kind::Probe => probe_html(&v, &mut body)?,
            k => numa_html(&v, k, &mut body)?,
        }
        body.push_str("</section>\n");
    }
    let html = format!(
        "<!doctype html><html><head><meta charset=utf-8><title>farmem report</title><style>\
         body{{font-family:sans-serif;max-width:1080px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}\
         th{{background:#f4f4f4}}pre{{background:#f8f8f8;padding:1em;overflow:auto}}.m,.src{{color:#666;font-size:90%}}\
         section{{border-top:2px solid #eee;margin-top:2em}}</style></head><body><h1>farmem report</h1>\n{body}</body></html>\n"
    );
    let out = a
        .output
        .context("-o FILE is required for the HTML report")?;
    std::fs::write(&out, html).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("farmem report: wrote {}", out.display());
    Ok(())
}
