//! `farmem probe`: the memory ladder, from L1 to another machine's RAM.

use anyhow::{bail, Context, Result};
use farmem_probe::chase::{PageMode, Params};
use farmem_probe::levels::{self, Level, Point};
use farmem_probe::machine::Machine;
use farmem_probe::{bandwidth, far, faults};
use farmem_runtime::backend::{Backend, FileBackend, RemoteBackend};
use farmem_runtime::config::{format_size, Config, FileDirect};
use indicatif::{ProgressBar, ProgressStyle};
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
    /// One JSON object on stdout.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV on stdout.
    #[arg(long)]
    csv: bool,
    /// Plot latency against working set, and far throughput against transfer
    /// size, to FILE (*.svg or *.png).
    #[arg(long)]
    plot: Option<PathBuf>,
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
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}

pub fn run(a: Args) -> Result<()> {
    if a.max < 4096 {
        bail!("--max must be at least 4K");
    }
    if a.threads.contains(&0) {
        bail!("--threads values must be at least 1");
    }
    crate::plot::check_path(a.plot.as_deref())?;
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
    let needs_far = want(What::Faults) || want(What::Far);
    let mut cfg = Config::from_env()?;
    // Each --servers set, resolved (an @DIR waited for); the fault probe
    // uses the first.
    let mut sets = Vec::new();
    for s in &a.servers {
        let mut c = cfg.clone();
        c.set("SERVERS", s)?;
        c.resolve_servers()?;
        sets.push(c.servers);
    }
    if let Some(first) = sets.first() {
        cfg.servers = first.clone();
    }
    if needs_far {
        let room = cfg
            .local_bytes
            .max((samples as u64 * 4096 * 2).next_multiple_of(1 << 20));
        cfg.set("LOCAL", &room.to_string())?;
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
        let mut bcfg = cfg.clone();
        bcfg.set("CONNS", "1")?;
        if sets.is_empty() {
            let server = farmem_runtime::spawn_embedded_server(cfg.embedded_capacity)?;
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
    if a.what == What::All {
        r.ladder = Some(ladder(&r, &machine, a.quick)?);
    }
    r.params = Some(params);

    if let Some(p) = &a.plot {
        crate::plot::write(
            p,
            &crate::plot::Probe {
                curve: r.curve.as_deref(),
                levels: r.levels.as_deref(),
                far: r.far.as_deref(),
                title: &machine.summary(),
            },
        )?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if a.csv {
        print_csv(&r);
    } else {
        print_human(&r, &machine);
    }
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

fn a_some<T>(o: &Option<T>) -> bool {
    o.is_some()
}

fn print_csv(r: &Report) {
    if let Some(l) = &r.ladder {
        println!("tier,bytes,latency_ns,read_gbps");
        for x in l {
            println!(
                "{},{},{:.2},{:.3}",
                x.tier, x.bytes, x.latency_ns, x.read_gbps
            );
        }
        return;
    }
    if let Some(c) = &r.curve {
        println!("bytes,ns");
        for p in c {
            println!("{},{:.3}", p.bytes, p.ns);
        }
    }
    if let Some(b) = &r.bandwidth {
        println!("kernel,threads,gbps");
        for x in b {
            println!("{},{},{:.3}", x.kernel, x.threads, x.gbps);
        }
    }
    if let Some(f) = &r.faults {
        println!("kind,p50_us,p99_us,samples");
        for x in f {
            println!(
                "\"{}\",{:.3},{:.3},{}",
                x.kind, x.p50_us, x.p99_us, x.samples
            );
        }
    }
    if let Some(t) = &r.far {
        println!("tier,transfer_bytes,read_mbps,write_mbps");
        for tier in t {
            for c in &tier.curve {
                println!(
                    "\"{}\",{},{:.1},{:.1}",
                    tier.name, c.transfer_bytes, c.read_mbps, c.write_mbps
                );
            }
        }
    }
}
