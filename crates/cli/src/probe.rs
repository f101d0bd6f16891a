//! `farmem probe`: the memory ladder, from L1 to another machine's RAM.

use crate::output::{opt, Csv, Output};
use crate::progress::bar;
use anyhow::{bail, Context, Result};
use farmem_probe::chase::{PageMode, Params};
use farmem_probe::levels::{self, Level, Point};
use farmem_probe::machine::Machine;
use farmem_probe::{bandwidth, far, faults};
use farmem_runtime::backend::{Backend, FileBackend, RemoteBackend};
use farmem_runtime::config::{format_size, Config, FileDirect};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum What {
    /// Everything, summarised as one ladder.
    All,
    /// Load latency by pointer chasing, cache levels detected.
    Latency,
    /// Read, write, copy, triad bandwidth, 1..N threads.
    Bandwidth,
    /// Page-fault costs: native and far memory.
    Faults,
    /// Far tiers: one-page round trip, throughput by transfer size.
    Far,
    /// Latency under load: one thread chases while the others draw
    /// bandwidth in read/write mixes at calibrated delays; and the far
    /// tier's one-page latency while other threads stream from it.
    Loaded,
}

#[derive(clap::Args)]
pub struct Args {
    /// What to measure.
    #[arg(value_enum, default_value_t = What::All)]
    what: What,
    /// Largest working set of the latency sweep.
    #[arg(long, default_value = "1G", value_parser = crate::size_arg)]
    max: u64,
    /// Pages for latency and bandwidth buffers: 4k, thp or huge.
    #[arg(long, default_value = "4k")]
    pages: PageMode,
    /// Thread counts for bandwidth, e.g. 1,2 (default: 1 and every CPU).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Memory servers to measure, host:port,... or @DIR (a rendezvous
    /// directory); default: the embedded loopback server. Given more than
    /// once, each set is a far tier of its own (e.g. 1, 2 and 4 servers
    /// side by side on one plot).
    #[arg(long)]
    servers: Vec<String>,
    /// SSD file to measure as a far tier (default for `all`: /var/tmp).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Fewer repeats and smaller sizes (a smoke run).
    #[arg(long)]
    quick: bool,
    /// The figure: latency against working set, and far throughput against
    /// transfer size (with `loaded`: latency against bandwidth drawn).
    #[command(flatten)]
    out: Output,
    /// Traffic mixes for `loaded`, R:W with -nt for non-temporal stores
    /// (default: 1:0,3:1,2:1,1:1,3:1-nt,2:1-nt,1:1-nt).
    #[arg(long, value_delimiter = ',')]
    mix: Vec<farmem_probe::loaded::Mix>,
    /// Also write everything measured as one HTML page (`farmem report`).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

#[derive(Serialize, serde::Deserialize)]
struct LoadedReport {
    /// What each delay (spins per line) costs here, ns.
    calibration_ns: Vec<f64>,
    curves: Vec<farmem_probe::loaded::Curve>,
}

#[derive(Serialize)]
struct Rung {
    tier: String,
    bytes: u64,
    latency_ns: f64,
    read_gbps: f64,
    note: String,
}

#[derive(Serialize, Default)]
struct Report {
    #[serde(skip_serializing_if = "Option::is_none")]
    machine: Option<Machine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    curve: Option<Vec<Point>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    levels: Option<Vec<Level>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bandwidth: Option<Vec<bandwidth::Result>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    faults: Option<Vec<faults::FaultCost>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    far: Option<Vec<far::Tier>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ladder: Option<Vec<Rung>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loaded: Option<LoadedReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    far_loaded: Option<Vec<farmem_probe::loaded::FarPoint>>,
}

pub fn run(a: Args) -> Result<()> {
    if a.max < 4096 {
        bail!("--max must be at least 4K");
    }
    if a.threads.contains(&0) {
        bail!("--threads values must be at least 1");
    }
    a.out.check()?;
    let machine = Machine::detect();
    let mut r = Report {
        machine: Some(machine.clone()),
        ..Report::default()
    };
    let want = |w: What| a.what == What::All || a.what == w;
    let max = if a.quick { a.max.min(256 << 20) } else { a.max };
    let mut params = serde_json::json!({ "what": format!("{:?}", a.what).to_lowercase(), "pages": a.pages.to_string(), "quick": a.quick });

    if want(What::Latency) {
        let mut p = Params::new(max, a.pages);
        if a.quick {
            p.repeats = 3;
            p.target_ms = 5;
        }
        let b = bar(p.sizes().len() as u64, "latency");
        let curve = farmem_probe::chase::sweep(&p, |d, _| b.set_position(d as u64))?;
        b.finish_and_clear();
        r.levels = Some(levels::detect(&curve, machine.known()));
        r.curve = Some(curve);
        params["latency"] = serde_json::to_value(&p)?;
    }
    if want(What::Bandwidth) {
        let threads = if a.threads.is_empty() {
            let mut t = vec![1, machine.cpus];
            t.dedup();
            t
        } else {
            a.threads.clone()
        };
        // Each array well beyond the last-level cache (4x even when quick).
        let llc = machine.llc_bytes().unwrap_or(32 << 20);
        let per_array = if a.quick {
            (llc * 4).max(64 << 20)
        } else {
            (llc * 8).clamp(128 << 20, 512 << 20)
        };
        let repeats = if a.quick { 2 } else { 5 };
        let b = bar(
            (threads.len() * bandwidth::KERNELS.len()) as u64,
            "bandwidth",
        );
        r.bandwidth = Some(bandwidth::measure(
            per_array as usize,
            &threads,
            repeats,
            || b.inc(1),
        )?);
        b.finish_and_clear();
        params["bandwidth"] = serde_json::json!({ "bytes_per_array": per_array, "threads": threads, "repeats": repeats, "statistic": "best" });
    }

    // Far memory: the runtime (for fault costs) and the backends.
    let samples = if a.quick { 500 } else { 5000 };
    let needs_far = want(What::Faults) || want(What::Far) || want(What::Loaded);
    let mut cfg = Config::from_env()?;
    // Each --servers set, resolved (an @DIR waited for); the fault probe
    // uses the first.
    let mut sets = Vec::new();
    for s in &a.servers {
        let (c, _) = cfg.with("SERVERS", s)?.resolved()?;
        sets.push(c.servers().to_vec());
    }
    if let Some(first) = sets.first() {
        cfg = cfg.with_servers(first);
    }
    if needs_far {
        let room = cfg
            .local_bytes()
            .max((samples as u64 * 4096 * 2).next_multiple_of(1 << 20));
        cfg = cfg.with("LOCAL", &room.to_string())?;
    }
    if want(What::Faults) {
        let mut costs = faults::native(samples)?;
        let rt =
            farmem_runtime::init(cfg.clone()).context("starting far memory for the fault probe")?;
        costs.extend(faults::far(rt, samples)?);
        r.faults = Some(costs);
        params["faults"] = serde_json::json!({ "samples": samples, "far_backend": rt.backend_description(), "prefetch": "off (FM_ADV_RANDOM)" });
    }
    if want(What::Far) {
        let set = if a.quick { 16 << 20 } else { 64 << 20 };
        let min = if a.quick { 8 << 20 } else { 64 << 20 };
        let rtt_n = if a.quick { 300 } else { 3000 };
        let mut tiers = Vec::new();
        let b = bar(
            (far::transfer_sizes().len() + 1) as u64 * (sets.len().max(1) as u64 + 1),
            "far",
        );
        let bcfg = cfg.with("CONNS", "1")?;
        if sets.is_empty() {
            let server = farmem_runtime::spawn_embedded_server(cfg.embedded_capacity())?;
            let remote = RemoteBackend::connect(&bcfg, &[server.addr], (set / 4096) as u64 * 2)?;
            tiers.push(far::measure(
                "far memory (embedded server)",
                &remote as &dyn Backend,
                set,
                rtt_n,
                min,
                || b.inc(1),
            )?);
        }
        for servers in &sets {
            let remote = RemoteBackend::connect(&bcfg, servers, (set / 4096) as u64 * 2)?;
            let n = servers.len();
            tiers.push(far::measure(
                &format!("far memory ({n} server{})", if n == 1 { "" } else { "s" }),
                &remote as &dyn Backend,
                set,
                rtt_n,
                min,
                || b.inc(1),
            )?);
        }
        let file = a.file.clone().or_else(|| {
            (a.what == What::All).then(|| PathBuf::from("/var/tmp/farmem-probe.pages"))
        });
        if let Some(path) = file {
            let fb = FileBackend::open(&path, FileDirect::Auto)?;
            tiers.push(far::measure(
                "SSD file",
                &fb as &dyn Backend,
                set,
                rtt_n,
                min,
                || b.inc(1),
            )?);
            drop(fb);
            if a.file.is_none() {
                let _ = std::fs::remove_file(&path);
            }
        }
        b.finish_and_clear();
        r.far = Some(tiers);
        params["far"] = serde_json::json!({ "set_bytes": set, "rtt_samples": rtt_n, "min_bytes_per_size": min, "request_limit_bytes": farmem_runtime::backend::MAX_PAGES_PER_CALL * 4096 });
    }
    if want(What::Loaded) {
        loaded(&a, &machine, &cfg, &mut r, &mut params)?;
    }
    if a.what == What::All {
        r.ladder = Some(ladder(&r, &machine, a.quick)?);
    }
    r.params = Some(params);

    if let Some(p) = a.out.plot_path() {
        if a.what == What::Loaded {
            farmem_report::plot::write(
                p,
                &farmem_report::plot::Loaded {
                    curves: r.loaded.as_ref().map(|l| &l.curves[..]),
                    far: r.far_loaded.as_deref(),
                    title: "loaded latency: one thread chases, the others stream",
                },
            )?;
        } else {
            farmem_report::plot::write(
                p,
                &farmem_report::plot::Probe {
                    curve: r.curve.as_deref(),
                    levels: r.levels.as_deref(),
                    far: r.far.as_deref(),
                    title: &machine.summary(),
                },
            )?;
        }
    }
    if let Some(path) = &a.report {
        let v = serde_json::to_value(&r)?;
        farmem_report::html::write_html(&[(PathBuf::from("farmem probe"), v)], path)?;
        eprintln!("farmem report: wrote {}", path.display());
    }
    if !a.out.print(|| Ok(serde_json::to_value(&r)?), || csv(&r))? {
        print_human(&r, &machine);
        print_loaded(&r);
    }
    Ok(())
}

/// `farmem probe loaded`: the DRAM curves, then the far tier under load.
fn loaded(
    a: &Args,
    machine: &Machine,
    cfg: &Config,
    r: &mut Report,
    params: &mut serde_json::Value,
) -> Result<()> {
    use farmem_probe::loaded::{self as ld, Mix};
    let mixes = if a.mix.is_empty() {
        Mix::defaults()
    } else {
        a.mix.clone()
    };
    let mixes: Vec<Mix> = if ld::has_non_temporal() {
        mixes
    } else if a.mix.iter().any(|m| m.non_temporal) {
        bail!("--mix: non-temporal stores (-nt) are measured on x86_64 only");
    } else {
        mixes.into_iter().filter(|m| !m.non_temporal).collect()
    };
    // The chased buffer well beyond the last-level cache, as for DRAM in
    // `farmem probe latency`; each traffic thread streams its own.
    let llc = machine.llc_bytes().unwrap_or(32 << 20) as usize;
    let phys = machine.memory_bytes as usize;
    let quick = a.quick || a.what == What::All;
    let chase_bytes = if a.quick {
        (llc * 2).clamp(64 << 20, 256 << 20)
    } else {
        (llc * 4).clamp(256 << 20, 1 << 30)
    }
    .min(phys / 8);
    let p = ld::Params {
        chase_bytes,
        traffic_bytes: (llc * 2).clamp(64 << 20, 512 << 20).min(phys / 16),
        traffic_threads: machine.cpus.saturating_sub(1).max(1),
        delays: ld::delays(quick),
        window_ms: if a.quick { 60 } else { 200 },
        repeats: 3,
        pages: a.pages,
    };
    let b = bar((1 + mixes.len() * p.delays.len()) as u64, "loaded");
    let (cal, curves) = ld::sweep(&p, &mixes, || b.inc(1))?;
    b.finish_and_clear();
    r.loaded = Some(LoadedReport {
        calibration_ns: cal,
        curves,
    });
    params["loaded"] = serde_json::to_value(&p)?;

    // The far tier: the first --servers set, else the embedded server.
    let streams = machine.cpus.saturating_sub(1).max(1);
    let bcfg = cfg.with("CONNS", &(streams + 1).min(64).to_string())?;
    let set: usize = if a.quick { 16 << 20 } else { 64 << 20 };
    let _server;
    let servers = if cfg.servers().is_empty() {
        let s = farmem_runtime::spawn_embedded_server(cfg.embedded_capacity())?;
        let addr = s.addr.clone();
        _server = s;
        vec![addr]
    } else {
        cfg.servers().to_vec()
    };
    let remote = RemoteBackend::connect(&bcfg, &servers, (set / 4096) as u64)?;
    let gaps = ld::far_gaps(quick);
    let b = bar(gaps.len() as u64 + 1, "far loaded");
    let window = std::time::Duration::from_millis(if quick { 150 } else { 400 });
    r.far_loaded = Some(ld::far_loaded(
        &remote as &dyn Backend,
        set / 4096,
        streams,
        &gaps,
        window,
        || b.inc(1),
    )?);
    b.finish_and_clear();
    params["far_loaded"] = serde_json::json!({ "servers": remote.describe(), "streams": streams, "transfer_bytes": 256 << 10, "gaps_us": gaps, "window_ms": window.as_millis() as u64, "set_bytes": set });
    Ok(())
}

/// One row per tier: caches and DRAM from the latency levels (read bandwidth
/// measured at half the level's size, one thread), far tiers from the far
/// probe (latency = a fault fetching one page, when measured; else the
/// backend round trip).
fn ladder(r: &Report, m: &Machine, quick: bool) -> Result<Vec<Rung>> {
    let mut out = Vec::new();
    for l in r.levels.iter().flatten() {
        let ws = if l.name == "DRAM" {
            256 << 20
        } else {
            (l.bytes / 2).max(4096)
        };
        out.push(Rung {
            tier: l.name.clone(),
            bytes: if l.name == "DRAM" {
                m.memory_bytes
            } else {
                l.bytes
            },
            latency_ns: l.ns,
            read_gbps: bandwidth::read_at(ws as usize, if quick { 2 } else { 5 })?,
            note: format!(
                "read bandwidth at a {} working set, 1 thread",
                format_size(ws)
            ),
        });
    }
    let fetch = r
        .faults
        .iter()
        .flatten()
        .find(|f| f.kind.starts_with("far: fetch"))
        .map(|f| f.p50_us);
    for t in r.far.iter().flatten() {
        let best = t.curve.iter().map(|c| c.read_mbps).fold(0.0, f64::max);
        let is_server = !t.name.starts_with("SSD");
        let lat_us = if is_server {
            fetch.unwrap_or(t.rtt.p50_us)
        } else {
            t.rtt.p50_us
        };
        out.push(Rung {
            tier: t.name.clone(),
            bytes: 0,
            latency_ns: lat_us * 1e3,
            read_gbps: best / 1e3,
            note: if is_server && fetch.is_some() {
                "latency: a far fault fetching one page (p50); bandwidth: best transfer size".into()
            } else {
                "latency: one-page read round trip (p50); bandwidth: best transfer size".into()
            },
        });
    }
    Ok(out)
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else {
        format!("{ns:.1} ns")
    }
}

fn print_human(r: &Report, m: &Machine) {
    println!("machine: {}", m.summary());
    if let Some(l) = &r.ladder {
        println!(
            "\n{:<30} {:>10} {:>12} {:>12}",
            "tier", "size", "latency", "read GB/s"
        );
        for x in l {
            let size = if x.bytes == 0 {
                "-".to_string()
            } else {
                format_size(x.bytes)
            };
            println!(
                "{:<30} {:>10} {:>12} {:>12.2}",
                x.tier,
                size,
                fmt_ns(x.latency_ns),
                x.read_gbps
            );
        }
        println!("(caches/DRAM: pointer-chase latency, 1-thread read bandwidth at half the level's size; far tiers: see `farmem probe far`)");
    }
    if a_some(&r.curve) && r.ladder.is_none() {
        let pages = r
            .params
            .as_ref()
            .and_then(|p| p["pages"].as_str().map(String::from))
            .unwrap_or_default();
        println!("\nload latency by pointer chasing ({pages} pages, median of repeats):");
        for p in r.curve.iter().flatten() {
            println!("  {:>8}  {:>9}", format_size(p.bytes), fmt_ns(p.ns));
        }
    }
    if let Some(l) = &r.levels {
        if r.ladder.is_none() {
            println!("\ndetected levels:");
            for x in l {
                println!(
                    "  {:<5} up to {:>8}  {:>9}",
                    x.name,
                    format_size(x.bytes),
                    fmt_ns(x.ns)
                );
            }
        }
    }
    if let Some(b) = &r.bandwidth {
        println!(
            "\nbandwidth (GB/s, best of repeats, {} per array):",
            format_size(b.first().map(|x| x.bytes_per_array).unwrap_or(0))
        );
        println!(
            "  {:>7} {:>9} {:>9} {:>9} {:>9}",
            "threads", "read", "write", "copy", "triad"
        );
        let mut ts: Vec<usize> = b.iter().map(|x| x.threads).collect();
        ts.dedup();
        for t in ts {
            let g = |k: &str| {
                b.iter()
                    .find(|x| x.threads == t && x.kernel == k)
                    .map(|x| x.gbps)
                    .unwrap_or(f64::NAN)
            };
            println!(
                "  {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                t,
                g("read"),
                g("write"),
                g("copy"),
                g("triad")
            );
        }
    }
    if let Some(f) = &r.faults {
        println!("\nfault costs:");
        for x in f {
            println!(
                "  {:<36} p50 {:>8.2} µs  p99 {:>8.2} µs  ({} samples)",
                x.kind, x.p50_us, x.p99_us, x.samples
            );
        }
    }
    if let Some(t) = &r.far {
        for tier in t {
            println!("\n{} — {}", tier.name, tier.description);
            println!(
                "  one-page read round trip: p50 {:.1} µs, p99 {:.1} µs",
                tier.rtt.p50_us, tier.rtt.p99_us
            );
            println!(
                "  {:>9} {:>12} {:>12}",
                "transfer", "read MB/s", "write MB/s"
            );
            for c in &tier.curve {
                println!(
                    "  {:>9} {:>12.0} {:>12.0}",
                    format_size(c.transfer_bytes),
                    c.read_mbps,
                    c.write_mbps
                );
            }
        }
    }
}

/// The loaded-latency tables, MLC's layout: one block per mix.
fn print_loaded(r: &Report) {
    if let Some(l) = &r.loaded {
        println!(
            "\nloaded latency: one thread chases, the others draw bandwidth (counted in software)"
        );
        for c in &l.curves {
            println!("\nmix {}:", c.mix);
            println!(
                "  {:>8} {:>12} {:>14} {:>14}",
                "delay", "delay (ns)", "bandwidth MB/s", "latency (ns)"
            );
            for p in &c.points {
                let d = p.delay.map_or("idle".into(), |d| d.to_string());
                let dn = p.delay_ns.map_or("-".into(), |n| format!("{n:.0}"));
                println!(
                    "  {d:>8} {dn:>12} {:>14.0} {:>14.1}",
                    p.bandwidth_mbps, p.latency_ns
                );
            }
        }
    }
    if let Some(f) = &r.far_loaded {
        println!("\nfar tier under load: one-page reads while other threads stream 256 KiB reads");
        println!(
            "  {:>8} {:>10} {:>14} {:>10} {:>10}",
            "streams", "gap (µs)", "bandwidth MB/s", "p50 (µs)", "p99 (µs)"
        );
        for p in f {
            let g = p.gap_us.map_or("-".into(), |g| g.to_string());
            println!(
                "  {:>8} {g:>10} {:>14.0} {:>10.1} {:>10.1}",
                p.streams, p.bandwidth_mbps, p.p50_us, p.p99_us
            );
        }
    }
}

fn a_some<T>(o: &Option<T>) -> bool {
    o.is_some()
}

fn csv(r: &Report) -> Csv {
    let mut c = Csv::default();
    if let Some(l) = &r.ladder {
        c.row(&["tier", "bytes", "latency_ns", "read_gbps"]);
        for x in l {
            c.row(&[
                x.tier.to_string(),
                x.bytes.to_string(),
                format!("{:.2}", x.latency_ns),
                format!("{:.3}", x.read_gbps),
            ]);
        }
        return c;
    }
    if let Some(curve) = &r.curve {
        c.row(&["bytes", "ns"]);
        for p in curve {
            c.row(&[p.bytes.to_string(), format!("{:.3}", p.ns)]);
        }
    }
    if let Some(b) = &r.bandwidth {
        c.row(&["kernel", "threads", "gbps"]);
        for x in b {
            c.row(&[
                x.kernel.to_string(),
                x.threads.to_string(),
                format!("{:.3}", x.gbps),
            ]);
        }
    }
    if let Some(f) = &r.faults {
        c.row(&["kind", "p50_us", "p99_us", "samples"]);
        for x in f {
            c.row(&[
                x.kind.to_string(),
                format!("{:.3}", x.p50_us),
                format!("{:.3}", x.p99_us),
                x.samples.to_string(),
            ]);
        }
    }
    if let Some(l) = &r.loaded {
        c.row(&["mix", "delay", "delay_ns", "bandwidth_mbps", "latency_ns"]);
        for curve in &l.curves {
            for p in &curve.points {
                c.row(&[
                    curve.mix.to_string(),
                    opt(p.delay),
                    opt(p.delay_ns.map(|n| format!("{n:.1}"))),
                    format!("{:.1}", p.bandwidth_mbps),
                    format!("{:.2}", p.latency_ns),
                ]);
            }
        }
    }
    if let Some(f) = &r.far_loaded {
        c.row(&[
            "streams",
            "gap_us",
            "bandwidth_mbps",
            "p50_us",
            "p99_us",
            "samples",
        ]);
        for p in f {
            c.row(&[
                p.streams.to_string(),
                opt(p.gap_us),
                format!("{:.1}", p.bandwidth_mbps),
                format!("{:.2}", p.p50_us),
                format!("{:.2}", p.p99_us),
                p.samples.to_string(),
            ]);
        }
    }
    if let Some(t) = &r.far {
        c.row(&["tier", "transfer_bytes", "read_mbps", "write_mbps"]);
        for tier in t {
            for x in &tier.curve {
                c.row(&[
                    tier.name.clone(),
                    x.transfer_bytes.to_string(),
                    format!("{:.1}", x.read_mbps),
                    format!("{:.1}", x.write_mbps),
                ]);
            }
        }
    }
    c
}
