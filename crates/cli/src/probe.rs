//! `farmem probe`: the memory ladder, from L1 to another machine's RAM.

use crate::output::{opt, Csv, Output};
use crate::progress::bar;
use anyhow::Result;
use farmem_probe::chase::PageMode;
use farmem_probe::machine::Machine;
use farmem_probe::suite::{self, Params, Progress, Report};
use farmem_runtime::config::format_size;
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

/// The progress bars, one per phase, fed by the probe.
struct Bars(Option<indicatif::ProgressBar>);

impl Progress for Bars {
    fn phase(&mut self, name: &str, steps: u64) {
        self.0 = Some(bar(steps, name));
    }
    fn set(&mut self, done: u64) {
        if let Some(b) = &self.0 {
            b.set_position(done);
        }
    }
    fn step(&mut self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }
    fn end(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    a.out.check()?;
    let machine = Machine::detect();
    let p = Params {
        what: match a.what {
            What::All => suite::What::All,
            What::Latency => suite::What::Latency,
            What::Bandwidth => suite::What::Bandwidth,
            What::Faults => suite::What::Faults,
            What::Far => suite::What::Far,
            What::Loaded => suite::What::Loaded,
        },
        max: a.max,
        pages: a.pages,
        threads: a.threads.clone(),
        servers: a.servers.clone(),
        file: a.file.clone(),
        quick: a.quick,
        mixes: a.mix.clone(),
    };
    let mut bars = Bars(None);
    let r = suite::run(&p, &machine, &mut bars);
    bars.end();
    let r = r?;

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
