//! A probe result (`farmem probe --json`): text tables, CSV, the figure
//! ([`figure`]) and the report's section ([`html`]).

pub mod figure;
pub mod html;

use crate::table::{dash, opt, Table};
use crate::words::machine_header;
use farmem_probe::suite::Report as ProbeReport;
use farmem_sys::format_size;
use std::fmt::Write;

/// A latency as people read it.
pub fn ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else {
        format!("{ns:.1} ns")
    }
}

/// `farmem probe`'s tables: the ladder when there is one (else the
/// latency curve and its levels), then each other measurement present.
pub fn text(r: &ProbeReport) -> String {
    let mut s = machine_header(r.machine.as_ref());
    if r.ladder.is_some() {
        ladder_text(&mut s, r);
    } else {
        latency_text(&mut s, r);
    }
    bandwidth_text(&mut s, r);
    faults_text(&mut s, r);
    far_text(&mut s, r);
    loaded_text(&mut s, r);
    far_loaded_text(&mut s, r);
    s
}

/// The ladder: one row per tier, caches to far memory.
fn ladder_text(s: &mut String, r: &ProbeReport) {
    let Some(l) = &r.ladder else { return };
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
}

/// The pointer-chase curve and the levels detected in it.
fn latency_text(s: &mut String, r: &ProbeReport) {
    if let Some(c) = &r.curve {
        let pages = r.params.as_ref().map_or("", |p| p.pages.as_str());
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

/// Bandwidth: a row per thread count, a column per kernel.
fn bandwidth_text(s: &mut String, r: &ProbeReport) {
    let Some(b) = &r.bandwidth else { return };
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

/// Fault costs, native and far.
fn faults_text(s: &mut String, r: &ProbeReport) {
    let Some(f) = &r.faults else { return };
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

/// Each far tier: its round trip and throughput by transfer size.
fn far_text(s: &mut String, r: &ProbeReport) {
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
}

/// Loaded latency, one block per traffic mix.
fn loaded_text(s: &mut String, r: &ProbeReport) {
    let Some(l) = &r.loaded else { return };
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

/// The far tier's one-page latency while other threads stream from it.
fn far_loaded_text(s: &mut String, r: &ProbeReport) {
    let Some(f) = &r.far_loaded else { return };
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

/// `farmem probe --csv`: the ladder alone when there is one, else a table
/// per kind of measurement.
pub fn csv(r: &ProbeReport) -> Vec<Table> {
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
