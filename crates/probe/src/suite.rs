//! `farmem probe`'s whole run: which measurements, with what parameters
//! (quick or full), the far tiers to measure, and the ladder that sums them
//! up, from L1 to another machine's RAM. The CLI turns its arguments into
//! [`Params`], calls [`run`] and prints the [`Report`].

use crate::chase::{self, PageMode};
use crate::levels::{self, Level, Point};
use crate::loaded::Mix;
use crate::machine::Machine;
use crate::{bandwidth, far, faults, ProbeError};
use farmem_runtime::backend::{Backend, FileBackend, RemoteBackend};
use farmem_runtime::config::{format_size, Config, FileDirect};
use farmem_runtime::EmbeddedServer;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What to measure.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum What {
    /// Everything, summarised as one ladder.
    All,
    Latency,
    Bandwidth,
    Faults,
    Far,
    Loaded,
}

impl What {
    pub const ALL: [What; 6] = [
        What::All,
        What::Latency,
        What::Bandwidth,
        What::Faults,
        What::Far,
        What::Loaded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            What::All => "all",
            What::Latency => "latency",
            What::Bandwidth => "bandwidth",
            What::Faults => "faults",
            What::Far => "far",
            What::Loaded => "loaded",
        }
    }

    /// What it measures, in a line (the CLI's help).
    pub fn help(self) -> &'static str {
        match self {
            What::All => "Everything, summarised as one ladder",
            What::Latency => "Load latency by pointer chasing, cache levels detected",
            What::Bandwidth => "Read, write, copy, triad bandwidth, 1..N threads",
            What::Faults => "Page-fault costs: native and far memory",
            What::Far => "Far tiers: one-page round trip, throughput by transfer size",
            What::Loaded => {
                "Latency under load: one thread chases while the others draw bandwidth in \
                 read/write mixes at calibrated delays; and the far tier's one-page latency \
                 while other threads stream from it"
            }
        }
    }
}

impl std::str::FromStr for What {
    type Err = String;

    fn from_str(s: &str) -> Result<What, String> {
        What::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = What::ALL.iter().map(|w| w.name()).collect();
                format!("{s:?} is not one of: {}", names.join(", "))
            })
    }
}

/// A probe run's parameters.
#[derive(Clone, Debug)]
pub struct Params {
    pub what: What,
    /// Largest working set of the latency sweep.
    pub max: u64,
    pub pages: PageMode,
    /// Thread counts for bandwidth (1 and every CPU when empty).
    pub threads: Vec<usize>,
    /// Server sets (`host:port,...` or `@DIR`), each a far tier of its own
    /// (the embedded server when empty).
    pub servers: Vec<String>,
    /// An SSD file to measure as a far tier (a temporary one in /var/tmp
    /// for `All`).
    pub file: Option<PathBuf>,
    /// Fewer repeats and smaller sizes.
    pub quick: bool,
    /// Traffic mixes for `Loaded` (the defaults when empty).
    pub mixes: Vec<Mix>,
}

/// What the run tells its caller as it goes (a progress bar per phase).
pub trait Progress {
    /// A phase of `steps` steps begins.
    fn phase(&mut self, name: &str, steps: u64);
    /// `done` steps of the phase are done.
    fn set(&mut self, done: u64);
    fn step(&mut self);
    fn end(&mut self);
}

#[derive(Serialize, Deserialize, Debug)]
pub struct LoadedReport {
    /// What each delay (spins per line) costs here, ns.
    pub calibration_ns: Vec<f64>,
    pub curves: Vec<crate::loaded::Curve>,
}

/// What a probe run was asked, as `--json` records it, with each part's
/// own settings beside (read by people, not by farmem).
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Recorded {
    /// `latency`, `bandwidth`, `faults`, `far`, `loaded`, `all`, ...
    pub what: String,
    /// `4k`, `2m` or `thp`.
    pub pages: String,
    #[serde(default)]
    pub quick: bool,
    /// Each part's settings by part name.
    #[serde(flatten)]
    pub parts: serde_json::Map<String, serde_json::Value>,
}

impl Recorded {
    fn set(&mut self, part: &str, v: serde_json::Value) {
        self.parts.insert(part.to_string(), v);
    }
}

/// One tier of the ladder.
#[derive(Serialize, Deserialize, Debug)]
pub struct Rung {
    pub tier: String,
    pub bytes: u64,
    pub latency_ns: f64,
    pub read_gbps: f64,
    pub note: String,
}

/// Everything a probe run measured, as `--json` writes it.
#[derive(Serialize, Deserialize, Default, Debug)]
pub struct Report {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Recorded>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curve: Option<Vec<Point>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub levels: Option<Vec<Level>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Vec<bandwidth::Result>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<Vec<faults::FaultCost>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub far: Option<Vec<far::Tier>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ladder: Option<Vec<Rung>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded: Option<LoadedReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub far_loaded: Option<Vec<crate::loaded::FarPoint>>,
}

/// A parameter record for the JSON; these types always serialize.
fn json(v: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Measure what `a` asks for on `machine`, telling `progress` as it goes.
pub fn run(
    a: &Params,
    machine: &Machine,
    progress: &mut dyn Progress,
) -> Result<Report, ProbeError> {
    if a.max < 4096 {
        return Err(ProbeError::Invalid("--max must be at least 4K".into()));
    }
    if a.threads.contains(&0) {
        return Err(ProbeError::Invalid(
            "--threads values must be at least 1".into(),
        ));
    }
    let mut r = Report {
        machine: Some(machine.clone()),
        ..Report::default()
    };
    let want = |w: What| a.what == What::All || a.what == w;
    let mut params = Recorded {
        what: a.what.name().to_string(),
        pages: a.pages.to_string(),
        quick: a.quick,
        parts: serde_json::Map::new(),
    };

    if want(What::Latency) {
        measure_latency(a, machine, &mut r, &mut params, progress)?;
    }
    if want(What::Bandwidth) {
        measure_bandwidth(a, machine, &mut r, &mut params, progress)?;
    }

    // Far memory: the runtime (for fault costs) and the backends.
    let samples = if a.quick { 500 } else { 5000 };
    let needs_far = want(What::Faults) || want(What::Far) || want(What::Loaded);
    let (cfg, sets) = far_config(a, needs_far, samples)?;
    if want(What::Faults) {
        let mut costs = faults::native(samples)?;
        let rt = farmem_runtime::init(cfg.clone())?;
        costs.extend(faults::far(rt, samples)?);
        r.faults = Some(costs);
        params.set("faults", serde_json::json!({ "samples": samples, "far_backend": rt.backend_description(), "prefetch": "off (FM_ADV_RANDOM)" }));
    }
    if want(What::Far) {
        measure_far(a, &cfg, &sets, &mut r, &mut params, progress)?;
    }
    if want(What::Loaded) {
        loaded(a, machine, &cfg, &mut r, &mut params, progress)?;
    }
    if a.what == What::All {
        r.ladder = Some(ladder(&r, machine, a.quick)?);
    }
    r.params = Some(params);
    Ok(r)
}

/// `farmem probe latency`: the pointer-chase curve and the cache levels
/// found in it.
fn measure_latency(
    a: &Params,
    machine: &Machine,
    r: &mut Report,
    params: &mut Recorded,
    progress: &mut dyn Progress,
) -> Result<(), ProbeError> {
    let max = if a.quick { a.max.min(256 << 20) } else { a.max };
    let mut p = chase::Params::new(max, a.pages);
    if a.quick {
        p.repeats = 3;
        p.target_ms = 5;
    }
    progress.phase("latency", p.sizes().len() as u64);
    let curve = chase::sweep(&p, |d, _| progress.set(d as u64))?;
    progress.end();
    r.levels = Some(levels::detect(&curve, &machine.known()));
    r.curve = Some(curve);
    params.set("latency", json(&p));
    Ok(())
}

/// `farmem probe bandwidth`: each kernel at each thread count.
fn measure_bandwidth(
    a: &Params,
    machine: &Machine,
    r: &mut Report,
    params: &mut Recorded,
    progress: &mut dyn Progress,
) -> Result<(), ProbeError> {
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
    progress.phase(
        "bandwidth",
        (threads.len() * bandwidth::KERNELS.len()) as u64,
    );
    r.bandwidth = Some(bandwidth::measure(
        farmem_sys::usize_from(per_array),
        &threads,
        repeats,
        || progress.step(),
    )?);
    progress.end();
    params.set("bandwidth", serde_json::json!({ "bytes_per_array": per_array, "threads": threads, "repeats": repeats, "statistic": "best" }));
    Ok(())
}

/// The runtime's configuration for the far measurements, and each
/// --servers set resolved (an @DIR waited for; its configuration holds
/// the list); the fault probe uses the first. With `needs_far`, local
/// memory is raised to hold `samples` pages twice over.
fn far_config(
    a: &Params,
    needs_far: bool,
    samples: usize,
) -> Result<(Config, Vec<Config>), ProbeError> {
    let mut cfg = Config::from_env()?;
    let mut sets = Vec::new();
    for s in &a.servers {
        let (c, _) = cfg.with("SERVERS", s)?.resolved()?;
        sets.push(c);
    }
    if let Some(first) = sets.first() {
        cfg = cfg.with_servers(first.servers());
    }
    if needs_far {
        let room = cfg
            .local_bytes()
            .max((samples as u64 * 4096 * 2).next_multiple_of(1 << 20));
        cfg = cfg.with("LOCAL", &room.to_string())?;
    }
    Ok((cfg, sets))
}

/// A far tier `farmem probe far` measures.
enum Spec {
    Embedded,
    /// The i-th server set.
    Servers(usize),
    File(PathBuf),
}

/// `farmem probe far`: each far tier's round trip and throughput by
/// transfer size.
fn measure_far(
    a: &Params,
    cfg: &Config,
    sets: &[Config],
    r: &mut Report,
    params: &mut Recorded,
    progress: &mut dyn Progress,
) -> Result<(), ProbeError> {
    let set = if a.quick { 16 << 20 } else { 64 << 20 };
    let min = if a.quick { 8 << 20 } else { 64 << 20 };
    let rtt_n = if a.quick { 300 } else { 3000 };
    progress.phase(
        "far",
        (far::transfer_sizes().len() + 1) as u64 * (sets.len().max(1) as u64 + 1),
    );
    // One tier at a time, each opened, measured and closed before the
    // next: a server given in several sets holds one session at a time.
    let mut specs: Vec<Spec> = (0..sets.len()).map(Spec::Servers).collect();
    if specs.is_empty() {
        specs.push(Spec::Embedded);
    }
    let file = a
        .file
        .clone()
        .or_else(|| (a.what == What::All).then(|| PathBuf::from("/var/tmp/farmem-probe.pages")));
    specs.extend(file.map(Spec::File));
    let bcfg = cfg.with("CONNS", "1")?;
    let pages = (set / 4096) as u64 * 2;
    let mut tiers = Vec::new();
    for spec in specs {
        let open = open_tier(&spec, cfg, &bcfg, sets, pages)?;
        let tier = far::measure(&open.name, open.backend.as_ref(), set, rtt_n, min, || {
            progress.step()
        });
        drop(open);
        // A file of our own goes, measured or not.
        if let (Spec::File(path), None) = (&spec, &a.file) {
            let _ = std::fs::remove_file(path);
        }
        tiers.push(tier?);
    }
    progress.end();
    r.far = Some(tiers);
    params.set("far", serde_json::json!({ "set_bytes": set, "rtt_samples": rtt_n, "min_bytes_per_size": min, "request_limit_bytes": farmem_runtime::config::MAX_BATCH * 4096 }));
    Ok(())
}

/// A far tier opened to be measured. Fields drop in order: the backend
/// before the embedded server it talks to.
struct OpenTier {
    name: String,
    backend: Box<dyn Backend>,
    // Held only to be dropped: the backend's peer.
    _server: Option<EmbeddedServer>,
}

fn open_tier(
    spec: &Spec,
    cfg: &Config,
    bcfg: &Config,
    sets: &[Config],
    pages: u64,
) -> Result<OpenTier, ProbeError> {
    Ok(match spec {
        Spec::Embedded => {
            let s = farmem_runtime::spawn_embedded_server(cfg.embedded_capacity())?;
            let remote = RemoteBackend::connect(bcfg, std::slice::from_ref(&s.addr), pages)?;
            OpenTier {
                name: "far memory (embedded server)".into(),
                backend: Box::new(remote),
                _server: Some(s),
            }
        }
        Spec::Servers(i) => {
            let list = sets[*i].servers();
            let n = list.len();
            OpenTier {
                name: format!("far memory ({n} server{})", if n == 1 { "" } else { "s" }),
                backend: Box::new(RemoteBackend::connect(bcfg, list, pages)?),
                _server: None,
            }
        }
        Spec::File(path) => OpenTier {
            name: "SSD file".into(),
            backend: Box::new(FileBackend::open(path, FileDirect::Auto)?),
            _server: None,
        },
    })
}

/// `farmem probe loaded`: the DRAM curves, then the far tier under load.
fn loaded(
    a: &Params,
    machine: &Machine,
    cfg: &Config,
    r: &mut Report,
    params: &mut Recorded,
    progress: &mut dyn Progress,
) -> Result<(), ProbeError> {
    use crate::loaded::{self as ld, Mix};
    let mixes = if a.mixes.is_empty() {
        Mix::defaults()
    } else {
        a.mixes.clone()
    };
    let mixes: Vec<Mix> = if ld::has_non_temporal() {
        mixes
    } else if a.mixes.iter().any(|m| m.non_temporal) {
        return Err(ProbeError::Invalid(
            "--mix: non-temporal stores (-nt) are measured on x86_64 only".into(),
        ));
    } else {
        mixes.into_iter().filter(|m| !m.non_temporal).collect()
    };
    // The chased buffer well beyond the last-level cache, as for DRAM in
    // `farmem probe latency`; each traffic thread streams its own.
    let llc = farmem_sys::usize_from(machine.llc_bytes().unwrap_or(32 << 20));
    let phys = farmem_sys::usize_from(machine.memory_bytes);
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
    progress.phase("loaded", (1 + mixes.len() * p.delays.len()) as u64);
    let (cal, curves) = ld::sweep(&p, &mixes, || progress.step())?;
    progress.end();
    r.loaded = Some(LoadedReport {
        calibration_ns: cal,
        curves,
    });
    params.set("loaded", json(&p));

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
    progress.phase("far loaded", gaps.len() as u64 + 1);
    let window = std::time::Duration::from_millis(if quick { 150 } else { 400 });
    r.far_loaded = Some(ld::far_loaded(
        &remote as &dyn Backend,
        set / 4096,
        streams,
        &gaps,
        window,
        || progress.step(),
    )?);
    progress.end();
    params.set("far_loaded", serde_json::json!({ "servers": remote.describe(), "streams": streams, "transfer_bytes": 256 << 10, "gaps_us": gaps, "window_ms": u64::try_from(window.as_millis()).unwrap_or(u64::MAX), "set_bytes": set }));
    Ok(())
}

/// One row per tier: caches and DRAM from the latency levels (read bandwidth
/// measured at half the level's size, one thread), far tiers from the far
/// probe (latency = a fault fetching one page, when measured; else the
/// backend round trip).
fn ladder(r: &Report, m: &Machine, quick: bool) -> Result<Vec<Rung>, ProbeError> {
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
            read_gbps: bandwidth::read_at(farmem_sys::usize_from(ws), if quick { 2 } else { 5 })?,
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
