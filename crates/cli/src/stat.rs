//! `farmem stat`: the live counters of running farmem programs, as `vmstat`
//! shows the kernel's. Each program publishes its counters in a small
//! shared file (`farmem_runtime::publish`); this reads them, and every rate
//! or interval quantile is the difference of two readings.

use anyhow::{bail, Result};
use farmem_runtime::config::format_size;
use farmem_runtime::publish::{self, PublishError, Reader, Sample};
use farmem_runtime::stats::quantile_of;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Only this process (default: every farmem program of this user).
    pid: Option<u32>,
    /// Refresh every SECONDS (default 1) until interrupted or --count.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    watch: Option<f64>,
    /// Stop after N samples (with no --watch, one a second).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Print one JSON object a sample, one a line, instead of the table.
    #[arg(long)]
    json: bool,
}

/// One program over one interval.
#[derive(Serialize)]
struct Row {
    pid: u32,
    command: String,
    /// "running", or "ended" for the sample that saw it exit.
    state: &'static str,
    /// Seconds the rates below are over (the first sample: since start).
    interval_s: f64,
    faults_per_s: f64,
    fetched_mb_per_s: f64,
    written_back_mb_per_s: f64,
    resident_bytes: u64,
    budget_bytes: u64,
    /// Prefetched pages used and wasted in the interval.
    prefetch_used: u64,
    prefetch_wasted: u64,
    /// Fault latency over the interval (bucket upper edges), µs; null
    /// with no fault in it.
    fault_p50_us: Option<f64>,
    fault_p99_us: Option<f64>,
    transport: String,
    backend: String,
    replicas: u32,
    servers: Vec<Server>,
    /// Stored pages holding fewer live copies than `replicas` (a lost
    /// server's, until repair gives them back their copies).
    pages_short: u64,
    /// Whether a repair pass is running now.
    repairing: bool,
    /// Pages copied by repair so far, and the last pass's length.
    pages_repaired: u64,
    last_repair_ms: Option<u64>,
    /// Page writes that reached fewer than `replicas` servers.
    short_writes: u64,
    /// The counters since the program started, as `--stats` prints them.
    totals: Totals,
}

#[derive(Serialize)]
struct Server {
    name: String,
    up: bool,
}

#[derive(Serialize)]
struct Totals {
    faults: u64,
    wp_faults: u64,
    bytes_fetched: u64,
    bytes_written_back: u64,
    evictions: u64,
    /// Eviction's write-protect calls (those of a single page, and of
    /// those the holes between two dirty pages) and unmap calls: each a
    /// TLB shootdown.
    protect_calls: u64,
    protect_lone: u64,
    protect_hole: u64,
    unmap_calls: u64,
    /// Pages moved out into the bin of recycled pages and moved back in,
    /// and the moves (each a TLB shootdown too).
    recycled_out: u64,
    recycled_in: u64,
    move_out_calls: u64,
    move_in_calls: u64,
    moves_misreported: u64,
    prefetched: u64,
    prefetch_used: u64,
    prefetch_wasted: u64,
    spurious_faults: u64,
}

#[derive(Serialize)]
struct Frame<'a> {
    time_unix_ms: u64,
    programs: &'a [Row],
    /// Programs whose counters this build cannot read, and why.
    unreadable: &'a [Unreadable],
}

#[derive(Serialize)]
struct Unreadable {
    pid: u32,
    why: String,
}

fn row(before: Option<&(Sample, Instant)>, now: &Sample, at: Instant, ended: bool) -> Row {
    let (b, secs, latency) = match before {
        Some((b, t)) => (
            Some(&b.snapshot),
            at.duration_since(*t).as_secs_f64(),
            publish::interval(&now.latency, &b.latency).to_vec(),
        ),
        // The first sample: since the program started.
        None => (
            None,
            publish::unix_ms().saturating_sub(now.started_unix_ms) as f64 / 1000.0,
            now.latency.clone(),
        ),
    };
    let s = &now.snapshot;
    let d = |f: fn(&farmem_runtime::stats::Snapshot) -> u64| f(s) - b.map_or(0, f).min(f(s));
    let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
    let us = |q: f64| {
        let v = quantile_of(&latency, q);
        (latency.iter().any(|&c| c > 0)).then(|| v as f64 / 1000.0)
    };
    Row {
        pid: now.pid,
        command: now.command.clone(),
        state: if ended { "ended" } else { "running" },
        interval_s: secs,
        faults_per_s: per_s(d(|x| x.faults)),
        fetched_mb_per_s: per_s(d(|x| x.bytes_fetched)) / 1e6,
        written_back_mb_per_s: per_s(d(|x| x.bytes_written_back)) / 1e6,
        resident_bytes: s.resident_bytes,
        budget_bytes: s.budget_bytes,
        prefetch_used: d(|x| x.prefetch_used),
        prefetch_wasted: d(|x| x.prefetch_wasted),
        fault_p50_us: us(0.5),
        fault_p99_us: us(0.99),
        transport: now.transport.clone(),
        backend: now.backend.clone(),
        replicas: now.replicas,
        servers: now
            .servers
            .iter()
            .map(|(name, down)| Server {
                name: name.clone(),
                up: !down,
            })
            .collect(),
        pages_short: now.repair.pages_short,
        repairing: now.repair.running,
        pages_repaired: now.repair.pages_repaired,
        last_repair_ms: (now.repair.passes > 0).then_some(now.repair.last_ms),
        short_writes: now.short_writes,
        totals: Totals {
            faults: s.faults,
            wp_faults: s.wp_faults,
            bytes_fetched: s.bytes_fetched,
            bytes_written_back: s.bytes_written_back,
            evictions: s.evictions,
            protect_calls: s.protect_calls,
            protect_lone: s.protect_lone,
            protect_hole: s.protect_hole,
            unmap_calls: s.unmap_calls,
            recycled_out: s.recycled_out,
            recycled_in: s.recycled_in,
            move_out_calls: s.move_out_calls,
            move_in_calls: s.move_in_calls,
            moves_misreported: s.moves_misreported,
            prefetched: s.prefetched,
            prefetch_used: s.prefetch_used,
            prefetch_wasted: s.prefetch_wasted,
            spurious_faults: s.spurious_faults,
        },
    }
}

const HEADER: &str = "    PID  faults/s   in MB/s  out MB/s  resident / budget  prefetch used/wasted  p50 µs  p99 µs  servers      COMMAND";

fn text(r: &Row) -> String {
    let lat = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.1}"));
    let servers = if r.servers.is_empty() {
        r.transport.clone()
    } else {
        let up = r.servers.iter().filter(|s| s.up).count();
        let mut s = format!("{up}/{} up", r.servers.len());
        if r.repairing {
            s += &format!(", repairing ({} pages short)", r.pages_short);
        } else if r.pages_short > 0 {
            s += &format!(", {} pages short", r.pages_short);
        } else if r.last_repair_ms.is_some() {
            s += ", repaired";
        }
        s
    };
    let mut cmd = r.command.clone();
    if cmd.chars().count() > 40 {
        cmd = cmd.chars().take(39).collect::<String>() + "…";
    }
    let line = format!(
        "{:>7} {:>9.0} {:>9.1} {:>9.1} {:>8} / {:<8} {:>9} / {:<9} {:>7} {:>7}  {:<12} {}",
        r.pid,
        r.faults_per_s,
        r.fetched_mb_per_s,
        r.written_back_mb_per_s,
        format_size(r.resident_bytes),
        format_size(r.budget_bytes),
        r.prefetch_used,
        r.prefetch_wasted,
        lat(r.fault_p50_us),
        lat(r.fault_p99_us),
        servers,
        cmd
    );
    if r.state == "ended" {
        format!("{line}  (ended)")
    } else {
        line
    }
}

/// The programs watched: each one's reader, and its last sample with when
/// it was taken.
type Seen = BTreeMap<u32, (Reader, Option<(Sample, Instant)>)>;

/// Where the programs publish, or why there is no such place.
type Dir = std::result::Result<PathBuf, PublishError>;

pub fn run(a: Args) -> Result<()> {
    if let Some(w) = a.watch {
        if !(w.is_finite() && (0.1..=86_400.0).contains(&w)) {
            bail!("--watch {w}: give 0.1 to 86400 seconds between samples");
        }
    }
    if a.count == Some(0) {
        bail!("--count 0: give the number of samples to print, at least 1");
    }
    let mut dir = publish::dir(false);
    let mut seen: Seen = BTreeMap::new();
    if let Some(pid) = a.pid {
        seen.insert(pid, (open_one(&dir, pid)?, None));
    }
    let every = Duration::from_secs_f64(a.watch.unwrap_or(1.0));
    let samples = a
        .count
        .unwrap_or(if a.watch.is_some() { u64::MAX } else { 1 });
    let tty = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    for n in 0..samples {
        if n > 0 {
            std::thread::sleep(every);
        }
        // New programs join; a program already seen keeps its reader (and
        // its mapping: an ended one's last counters are still there).
        let mut unreadable = Vec::new();
        if a.pid.is_none() {
            // Looked up again each time: the first program may make it.
            dir = publish::dir(false);
        }
        if let (Ok(d), None) = (&dir, a.pid) {
            unreadable = join(d, &mut seen);
        }
        let rows = sample(&mut seen);
        if a.json {
            let f = Frame {
                time_unix_ms: publish::unix_ms(),
                programs: &rows,
                unreadable: &unreadable,
            };
            writeln!(out, "{}", serde_json::to_string(&f)?)?;
        } else {
            if tty && a.watch.is_some() {
                // Refresh in place: home, clear.
                write!(out, "\x1b[H\x1b[2J")?;
            }
            table(&mut out, &dir, &rows, &unreadable)?;
        }
        out.flush()?;
        // The one program asked for has ended (its last row said so):
        // nothing more to watch.
        if a.pid.is_some() && seen.is_empty() {
            break;
        }
    }
    Ok(())
}

/// The one program asked for: its reader, or a clear reason why there is
/// none.
fn open_one(dir: &Dir, pid: u32) -> Result<Reader> {
    let path = dir.as_ref().ok().map(|d| publish::path_of(d, pid));
    match path.as_deref().filter(|p| p.exists()) {
        Some(p) => {
            let r = Reader::open(p)?;
            if !r.alive() {
                bail!("process {pid} has ended");
            }
            Ok(r)
        }
        None => {
            let shown = dir.as_ref().map_or_else(
                |e| format!("no statistics directory: {e}"),
                |d| format!("nothing published in {}", d.display()),
            );
            if publish::start_ticks(pid).is_none() {
                bail!("no process {pid} is running");
            }
            bail!(
                "process {pid} is not a farmem program of this user ({shown}); start it with `farmem run`, or give the pid of one that is"
            );
        }
    }
}

/// Adds the programs published in `d` that are not watched yet; returns
/// those whose counters cannot be read.
fn join(d: &Path, seen: &mut Seen) -> Vec<Unreadable> {
    let (readers, bad) = publish::list(d);
    for r in readers {
        seen.entry(r.pid).or_insert((r, None));
    }
    bad.into_iter()
        .map(|(pid, e)| Unreadable {
            pid,
            why: e.to_string(),
        })
        .collect()
}

/// A row per watched program since its last sample; a program that has
/// ended gets its last row and is watched no more.
fn sample(seen: &mut Seen) -> Vec<Row> {
    let at = Instant::now();
    let mut rows = Vec::new();
    let mut gone = Vec::new();
    for (pid, (reader, before)) in seen.iter_mut() {
        let ended = !reader.alive();
        let now = reader.sample();
        rows.push(row(before.as_ref(), &now, at, ended));
        *before = Some((now, at));
        if ended {
            gone.push(*pid);
        }
    }
    for pid in gone {
        seen.remove(&pid);
    }
    rows
}

/// One sample as the table (or why there is nothing to show).
fn table(out: &mut impl Write, dir: &Dir, rows: &[Row], unreadable: &[Unreadable]) -> Result<()> {
    for u in unreadable {
        writeln!(
            out,
            "{:>7}  cannot be shown: {} (use the farmem that started it)",
            u.pid, u.why
        )?;
    }
    if rows.is_empty() && unreadable.is_empty() {
        match dir {
            Ok(d) => writeln!(
                out,
                "no farmem programs of this user are running (none published in {})",
                d.display()
            )?,
            Err(e) => writeln!(out, "no farmem programs of this user are running ({e})")?,
        }
    } else {
        writeln!(out, "{HEADER}")?;
        for r in rows {
            writeln!(out, "{}", text(r))?;
        }
    }
    Ok(())
}
