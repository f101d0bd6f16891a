//! A probe result's section of the HTML report.

use super::ns;
use crate::words::esc;
use crate::words::machine_line;
use crate::ReportError;
use farmem_probe::suite::Report as ProbeReport;
use farmem_sys::format_size;
use std::fmt::Write as _;

type Result<T> = std::result::Result<T, ReportError>;

/// The probe section of the report.
pub fn section(r: &ProbeReport, out: &mut String) -> Result<()> {
    let what: Vec<&str> = [
        (r.ladder.is_some(), "the whole ladder"),
        (r.curve.is_some(), "latency"),
        (r.bandwidth.is_some(), "bandwidth"),
        (r.faults.is_some(), "page faults"),
        (r.far.is_some(), "far tiers"),
        (r.loaded.is_some(), "loaded latency"),
        (r.far_loaded.is_some(), "the far tier under load"),
    ]
    .iter()
    .filter(|(has, _)| *has)
    .map(|(_, w)| *w)
    .collect();
    let _ = writeln!(out, "<h2>probe: {}</h2>", esc(&what.join(", ")));
    if let Some(l) = &r.ladder {
        out.push_str(
            "<table class=sortable><thead><tr><th>tier</th><th>size</th><th>latency</th><th>read GB/s</th></tr></thead><tbody>",
        );
        for x in l {
            let lat = ns(x.latency_ns);
            let _ = write!(
                out,
                "<tr><td class=l>{}</td><td>{}</td><td>{lat}</td><td>{:.2}</td></tr>",
                esc(&x.tier),
                if x.bytes == 0 {
                    "-".into()
                } else {
                    format_size(x.bytes)
                },
                x.read_gbps
            );
        }
        out.push_str("</tbody></table>");
    }
    if r.curve.is_some() || r.far.is_some() {
        let title = r.machine.as_ref().map(machine_line).unwrap_or_default();
        out.push_str(&crate::plot::svg_string(&super::figure::Probe {
            curve: r.curve.as_deref(),
            levels: r.levels.as_deref(),
            far: r.far.as_deref(),
            title: &title,
        })?);
    }
    loaded(r, out)
}

/// Loaded latency: a table per mix, the far tier under load, and the plot.
fn loaded(r: &ProbeReport, out: &mut String) -> Result<()> {
    let curves = r.loaded.as_ref().map(|l| &l.curves[..]);
    let far = r.far_loaded.as_deref();
    if let Some(cs) = curves {
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
    if let Some(fs) = far {
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
        out.push_str(&crate::plot::svg_string(&super::figure::Loaded {
            curves,
            far,
            title: "loaded latency: one thread chases, the others stream",
        })?);
    }
    Ok(())
}
