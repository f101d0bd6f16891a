//! Configuration: from `FARMEM_*` environment variables or an `fm_init`
//! string of `key=value` words. Every value is validated; an error names the
//! variable, the bad value and what is expected. docs/configuration.md is the
//! reference for each variable.

use farmem_wire::ServerAddr;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{name}={value:?}: {why}")]
    Invalid {
        name: String,
        value: String,
        why: String,
    },
    #[error("unknown setting {0:?}; known: {known}", known = known_names())]
    Unknown(String),
    #[error("FARMEM_SERVERS and FARMEM_FILE are both set; choose one backend")]
    TwoBackends,
    #[error("FARMEM_SERVERS=@{dir}: {why}")]
    Rendezvous { dir: String, why: String },
}

/// One `FARMEM_*` setting as users see it: its name without the prefix,
/// its default and its meaning as documented, and the `farmem run` flag that
/// sets it, if any. The table in docs/configuration.md is this table
/// (`farmem config --markdown` prints it; a test checks they agree), the
/// parser refuses any other name, and `farmem run` maps its flags through it.
#[derive(Debug, Clone, Copy)]
pub struct OptionDoc {
    pub key: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
    pub run_flag: Option<RunFlag>,
}

/// The `farmem run` flag of a setting: the CLI builds its flags from these.
#[derive(Debug, Clone, Copy)]
pub struct RunFlag {
    pub long: &'static str,
    /// The flag's one-line help.
    pub help: &'static str,
    /// A flag without a value, which sets the variable to `1`.
    pub switch: bool,
}

/// Every variable farmem reads.
pub const OPTIONS: &[OptionDoc] = &[
    OptionDoc {
        key: "LOCAL",
        default: "half of physical memory",
        meaning: "Local-memory budget for resident far pages. At least `1M`, at most the machine's physical memory. Resident far pages never exceed it (see docs/design.md for the fixed metadata besides).",
        run_flag: Some(RunFlag {
            long: "--local",
            help: "Local-memory budget for far pages, e.g. 256M",
            switch: false,
        }),
    },
    OptionDoc {
        key: "SERVERS",
        default: "(none)",
        meaning: "Comma-separated memory servers: `host:port` (a name or an address; IPv6 in brackets, `[::1]:7070`; port 0 is refused), or `unix:/path` / `unix:@name` for a server on this machine (names of at most 107 bytes). Pages are striped across them. The same parser reads `farmem serve --listen` (where port 0 means any free port). Or `@DIR`: the servers of the newest job in the rendezvous directory DIR (started as `farmem serve --rendezvous DIR` by mpirun or srun; see the README), in rank order, once every rank has published and answers, waiting up to `FARMEM_RENDEZVOUS_TIMEOUT`.",
        run_flag: Some(RunFlag {
            long: "--servers",
            help: "Memory servers, host:port[,host:port...], or @DIR for the servers that `farmem serve --rendezvous DIR` published",
            switch: false,
        }),
    },
    OptionDoc {
        key: "RENDEZVOUS_TIMEOUT",
        default: "`120`",
        meaning: "Seconds to wait for every server rank of `FARMEM_SERVERS=@DIR` to publish and answer (1–86400). When it runs out, the program stops with a message naming the ranks still missing and any stale entries passed over.",
        run_flag: None,
    },
    OptionDoc {
        key: "SECRET_FILE",
        default: "`~/.config/farmem/secret` if it exists",
        meaning: "The shared secret for memory servers reached over TCP: a file of 16–4096 random bytes that no other user may read (mode 0600), written by `farmem secret init`. The client and each server prove to each other that they hold it (HMAC-SHA256 challenge–response; the secret never crosses the wire). A file named here must exist and be usable. Without one, TCP connections are not authenticated. Unix sockets never are: only this machine reaches them. Page data is not encrypted.",
        run_flag: None,
    },
    OptionDoc {
        key: "LOG",
        default: "`info`",
        meaning: "How much `farmem serve` logs on stderr: `error`, `warn`, `info` (sessions opened and closed, refusals), `debug` (every connection and client error), `trace` or `off`. One line per event, naming the server, the peer and the session; `--log-format json` writes one JSON object per line for collectors. `--log-level` overrides it. A server that `farmem run` starts for a program logs only warnings, into the program's stderr.",
        run_flag: None,
    },
    OptionDoc {
        key: "FILE",
        default: "(none)",
        meaning: "Keep far pages in this file (an SSD) instead of on servers. It is created and truncated. Exclusive with `FARMEM_SERVERS`.",
        run_flag: Some(RunFlag {
            long: "--file",
            help: "Keep far pages in this file (an SSD) instead",
            switch: false,
        }),
    },
    OptionDoc {
        key: "FILE_DIRECT",
        default: "`auto`",
        meaning: "`1`: open the file with `O_DIRECT` (fail if unsupported); `0`: buffered; `auto`: `O_DIRECT` when the filesystem allows it.",
        run_flag: None,
    },
    OptionDoc {
        key: "TRANSPORT",
        default: "`auto`",
        meaning: "How pages move to and from memory servers. `ucx`: one-sided reads and writes through UCX (`libucp`): the server's CPU does no work per page over shared memory (same host) or RDMA (verbs); over UCX's TCP transport the server's progress thread emulates them. `socket`: every page is a request the server answers over the TCP or Unix connection. `auto`: UCX when it loads here, the server offers it, and the server is on this host (a Unix socket or a loopback address) or this host has an RDMA device (`/sys/class/infiniband`); sockets otherwise. UCX's TCP transport is not picked by `auto`: it measured faster than farmem's sockets on an emulated 10 Gbit/s link (docs/benchmarks.md), but it emulates one-sided operations with messages the server's CPU must answer, and it may allocate memory inside the fault handler when its buffer pools grow, which can deadlock a program that faults while holding its allocator's lock; choose it with `ucx` (and `UCX_TLS=tcp`). Under `farmem run`, a program with its own allocator (tcmalloc, jemalloc) uses sockets under `auto`, and `ucx` is refused for it with one line: far memory starts inside that allocator's lock, where UCX's set-up would wait for it. With `ucx`, a missing `libucp` or a server without UCX stops the program with one line naming it; nothing falls back silently. The handshake and control messages stay on the socket either way.",
        run_flag: Some(RunFlag {
            long: "--transport",
            help: "How pages move: auto, socket or ucx (one-sided, through UCX)",
            switch: false,
        }),
    },
    OptionDoc {
        key: "REPLICAS",
        default: "`1`",
        meaning: "Copies of every far page, each on a different server of `FARMEM_SERVERS` (1–3, at most the number of servers). With 2, a server that dies (an I/O error, or no reply within `FARMEM_TIMEOUT_MS`) is marked down with one warning line, and its pages are read from their other copy; the program finishes with every byte right, and the statistics say which servers were lost and how many page writes kept fewer copies. With 1, a lost server stops the program with a message naming it. Each write-back goes to every copy and waits for every copy's acknowledgement before the page leaves local memory: the network carries `REPLICAS` times the written bytes.",
        run_flag: Some(RunFlag {
            long: "--replicas",
            help: "Copies of every far page, on different servers: with 2, the program survives the loss of a server",
            switch: false,
        }),
    },
    OptionDoc {
        key: "CHECKSUM",
        default: "`1`",
        meaning: "`1`: keep a CRC32C of every page written to far memory (4 bytes per far page, beside the page table) and check it on every fetch; a page that comes back different stops the program with a message naming the server and the page, and is never installed. `0`: no checksums.",
        run_flag: None,
    },
    OptionDoc {
        key: "STATS",
        default: "`0`",
        meaning: "`1`: print the statistics table on stderr at exit.",
        run_flag: Some(RunFlag {
            long: "--stats",
            help: "Print far-memory statistics when the program exits",
            switch: true,
        }),
    },
    OptionDoc {
        key: "TRACE",
        default: "(none)",
        meaning: "Write the policy trace to this file: every fault, prefetch, use of a prefetched page and eviction, 8 bytes each (about 8 bytes per page moved). `%p` in the name becomes the process id: without it, every process of a job that uses far memory writes the same file and the last one to start wins. `farmem trace FILE` reads it: what prefetch brought and wasted, and the bytes fetched against Belady's MIN at the same budget.",
        run_flag: Some(RunFlag {
            long: "--trace",
            help: "Write the policy trace to this file (read it with farmem trace)",
            switch: false,
        }),
    },
    OptionDoc {
        key: "ARENA",
        default: "4× physical memory, at least `64G`, at most `16T`",
        meaning: "Virtual address space reserved for far allocations: the most far memory a process can have allocated at once. Costs no memory until used. Between `16M` and `16T` (the replacement queues number pages in 32 bits).",
        run_flag: None,
    },
    OptionDoc {
        key: "PREFETCH",
        default: "`64`",
        meaning: "Largest prefetch window, in pages (0–64; 0 or 1 turns prefetch off).",
        run_flag: None,
    },
    OptionDoc {
        key: "HOLD",
        default: "`0`",
        meaning: "Percent of `FARMEM_LOCAL` (0–50) kept as the hold: pages evicted from probation stay there, unmapped but local, before they leave for good, so that a page the program still uses comes back without the network and is judged by its refault distance (a software accessed bit for pages on their way out; see docs/design.md). Off by default: on GAPBS BFS it halved the bytes fetched but made the run slower on this class of machine, where a local bounce through the hold costs about as much as a far fetch (docs/benchmarks.md). Try `6` where the far tier is slow.",
        run_flag: None,
    },
    OptionDoc {
        key: "EVICT_BATCH",
        default: "`32`",
        meaning: "Pages evicted per round, at least (1–64).",
        run_flag: None,
    },
    OptionDoc {
        key: "SPIN_US",
        default: "`200`",
        meaning: "How long a faulting thread spins for a server's reply before it blocks in `poll` (0–1000000). Spinning avoids a ~100 µs wake-up on an idle CPU.",
        run_flag: None,
    },
    OptionDoc {
        key: "TIMEOUT_MS",
        default: "`10000`",
        meaning: "How long to wait for a server before stopping the program with a message (10–3600000).",
        run_flag: None,
    },
    OptionDoc {
        key: "CONNS",
        default: "CPUs (2–16)",
        meaning: "Connections per server (1–64). Each stripe unit travels on one of them (so a refault queues behind its own write-back); more let more threads fault at once, but each busy connection keeps a server thread spinning. On the 2-CPU test machine a single faulting thread saw random faults of 9.8 µs with `1`, 10.6 µs with `2` and 12.5 µs with `3`; two threads faulting at once were best with `2`.",
        run_flag: None,
    },
    OptionDoc {
        key: "STRIPE",
        default: "`64`",
        meaning: "Pages per stripe unit across servers and their connections. A pipelined prefetch window stops at a stripe boundary.",
        run_flag: None,
    },
    OptionDoc {
        key: "EMBEDDED_CAPACITY",
        default: "¾ of physical memory",
        meaning: "Capacity of the memory server farmem starts itself when neither `FARMEM_SERVERS` nor `FARMEM_FILE` is set. That server is the `farmem` program (`farmem serve --listen-fd 3 --parent PID`) in a child process, found next to `libfarmem.so` (or the executable), in `../bin` from there, or on `PATH`; if there is none, the first far allocation fails with a message saying so. The child gets the environment without `LD_PRELOAD` and `FARMEM_*`.",
        run_flag: None,
    },
    OptionDoc {
        key: "THRESHOLD",
        default: "`1M`",
        meaning: "Smallest allocation that goes to far memory under `farmem run`. Must not be 0.",
        run_flag: Some(RunFlag {
            long: "--threshold",
            help: "Allocations at least this large go far; default 1M",
            switch: false,
        }),
    },
    OptionDoc {
        key: "RAW_SYSCALLS",
        default: "`dispatch`",
        meaning: "System calls a program makes without the C library (liburing, libaio, inline assembly). `dispatch`: syscall user dispatch sends them through farmem's table of system-call buffers, so a far buffer among them works, and `io_uring_setup` answers ENOSYS. `allow`: they run unchecked, and one that meets a non-resident far page fails with EFAULT. See docs/design.md, \"System calls on far memory\".",
        run_flag: None,
    },
];

/// The table of [`OPTIONS`] as docs/configuration.md shows it.
pub fn options_markdown() -> String {
    let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for o in OPTIONS {
        out.push_str(&format!(
            "| `FARMEM_{}` | {} | {} |\n",
            o.key, o.default, o.meaning
        ));
    }
    out
}

fn known_names() -> String {
    OPTIONS.iter().map(|o| o.key).collect::<Vec<_>>().join(", ")
}

/// What happens to system calls a program makes without the C library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawSyscalls {
    /// Syscall user dispatch sends them through farmem's table (default).
    Dispatch,
    /// They run unchecked (a far buffer among them fails with EFAULT).
    Allow,
}

/// `FARMEM_TRANSPORT`: how pages move to and from memory servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Auto,
    Socket,
    Ucx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileDirect {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Local-memory budget for resident far pages, bytes.
    pub(crate) local_bytes: u64,
    /// Memory servers; pages are striped across them.
    pub(crate) servers: Vec<ServerAddr>,
    /// A rendezvous directory (`@DIR`) to take the servers from; `servers`
    /// is empty until [`Config::resolved`] fills it.
    pub(crate) rendezvous: Option<PathBuf>,
    /// How long to wait for the rendezvous, seconds.
    pub(crate) rendezvous_timeout_s: u64,
    /// A file (SSD) backend instead of servers.
    pub(crate) file: Option<PathBuf>,
    /// The shared secret's file for TCP servers (else the default file, if
    /// it exists).
    pub(crate) secret_file: Option<PathBuf>,
    /// `farmem serve`'s log level (see [`LOG_LEVELS`]).
    pub(crate) log: &'static str,
    pub(crate) file_direct: FileDirect,
    /// How pages move to and from memory servers.
    pub(crate) transport: Transport,
    /// Print statistics on stderr at exit.
    pub(crate) stats_at_exit: bool,
    /// Write the policy trace here.
    pub(crate) trace: Option<PathBuf>,
    /// Keep and check a CRC32C per far page.
    pub(crate) checksum: bool,
    /// Copies of every far page, on different servers.
    pub(crate) replicas: usize,
    /// Virtual address space reserved for far allocations, bytes.
    pub(crate) arena_bytes: u64,
    /// Largest prefetch window, pages (0 turns prefetch off).
    pub(crate) prefetch_pages: u32,
    /// Pages evicted per eviction round.
    pub(crate) evict_batch: u32,
    /// Percent of the budget kept as the hold.
    pub(crate) hold_percent: u32,
    /// Spin before blocking on a reply, microseconds.
    pub(crate) spin_us: u64,
    /// Give up on a server after this long, milliseconds.
    pub(crate) timeout_ms: u64,
    /// Connections per server.
    pub(crate) conns: usize,
    /// Pages per stripe unit across servers.
    pub(crate) stripe_pages: u64,
    /// Capacity of the embedded loopback server, bytes.
    pub(crate) embedded_capacity: u64,
    /// Allocations at least this large go to far memory (used by `farmem run`).
    pub(crate) threshold: u64,
    /// System calls made without the C library (`FARMEM_RAW_SYSCALLS`).
    pub(crate) raw_syscalls: RawSyscalls,
}

/// Reading a configuration. Its fields are private to the runtime: a
/// `Config` is validated when it is parsed ([`Config::from_env`],
/// [`Config::from_str_config`]) and nothing changes it afterwards; a caller
/// that needs a different value derives a new, validated one with
/// [`Config::with`].
impl Config {
    /// Local-memory budget for resident far pages, bytes.
    pub fn local_bytes(&self) -> u64 {
        self.local_bytes
    }

    /// Memory servers; pages are striped across them.
    pub fn servers(&self) -> &[ServerAddr] {
        &self.servers
    }

    /// A rendezvous directory (`@DIR`) to take the servers from; `servers`
    /// is empty until [`Config::resolved`] fills it.
    pub fn rendezvous(&self) -> Option<&Path> {
        self.rendezvous.as_deref()
    }

    /// How long to wait for the rendezvous, seconds.
    pub fn rendezvous_timeout_s(&self) -> u64 {
        self.rendezvous_timeout_s
    }

    /// A file (SSD) backend instead of servers.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The shared secret's file for TCP servers (else the default file, if
    /// it exists).
    pub fn secret_file(&self) -> Option<&Path> {
        self.secret_file.as_deref()
    }

    pub fn trace(&self) -> Option<&Path> {
        self.trace.as_deref()
    }

    /// `farmem serve`'s log level: one of [`LOG_LEVELS`].
    pub fn log(&self) -> &'static str {
        self.log
    }

    pub fn file_direct(&self) -> FileDirect {
        self.file_direct
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The same settings with `FARMEM_TRANSPORT` replaced (the preload
    /// shim's choice where UCX cannot be set up safely).
    pub fn with_transport(mut self, t: Transport) -> Config {
        self.transport = t;
        self
    }

    /// Print statistics on stderr at exit.
    pub fn stats_at_exit(&self) -> bool {
        self.stats_at_exit
    }

    /// Keep and check a CRC32C per far page.
    pub fn checksum(&self) -> bool {
        self.checksum
    }

    /// Copies of every far page, on different servers.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Virtual address space reserved for far allocations, bytes.
    pub fn arena_bytes(&self) -> u64 {
        self.arena_bytes
    }

    /// Largest prefetch window, pages (0 turns prefetch off).
    pub fn prefetch_pages(&self) -> u32 {
        self.prefetch_pages
    }

    /// Pages evicted per eviction round.
    pub fn evict_batch(&self) -> u32 {
        self.evict_batch
    }

    /// Spin before blocking on a reply, microseconds.
    pub fn spin_us(&self) -> u64 {
        self.spin_us
    }

    /// Give up on a server after this long, milliseconds.
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// Connections per server.
    pub fn conns(&self) -> usize {
        self.conns
    }

    /// Pages per stripe unit across servers.
    pub fn stripe_pages(&self) -> u64 {
        self.stripe_pages
    }

    /// Capacity of the embedded loopback server, bytes.
    pub fn embedded_capacity(&self) -> u64 {
        self.embedded_capacity
    }

    /// Allocations at least this large go to far memory (used by `farmem run`).
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// System calls made without the C library (`FARMEM_RAW_SYSCALLS`).
    pub fn raw_syscalls(&self) -> RawSyscalls {
        self.raw_syscalls
    }
}

pub const MAX_BATCH: u32 = 64;
/// Most copies of a far page (`FARMEM_REPLICAS`).
pub const MAX_REPLICAS: usize = 3;

/// The largest `FARMEM_ARENA`: 2^32 pages of 4 KiB. The replacement queues
/// and the per-page aux words number pages in 32 bits, so no page of the
/// arena may need more.
pub const MAX_ARENA: u64 = (1 << 32) * 4096;

/// The log levels `FARMEM_LOG` and `farmem serve --log-level` take, least
/// to most.
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// A log level by name (any case), as one of [`LOG_LEVELS`].
pub fn parse_log_level(v: &str) -> Result<&'static str, String> {
    let v = v.trim().to_ascii_lowercase();
    LOG_LEVELS
        .iter()
        .find(|l| **l == v)
        .copied()
        .ok_or_else(|| format!("expected one of {}", LOG_LEVELS.join(", ")))
}

impl Default for Config {
    fn default() -> Config {
        let phys = farmem_sys::phys_memory();
        let cpus = farmem_sys::online_cpus();
        Config {
            local_bytes: (phys / 2).max(1 << 20),
            servers: Vec::new(),
            rendezvous: None,
            rendezvous_timeout_s: 120,
            file: None,
            secret_file: None,
            log: "info",
            file_direct: FileDirect::Auto,
            transport: Transport::Auto,
            stats_at_exit: false,
            trace: None,
            checksum: true,
            replicas: 1,
            arena_bytes: (4 * phys)
                .max(64 << 30)
                .next_multiple_of(1 << 30)
                .min(MAX_ARENA),
            prefetch_pages: 64,
            evict_batch: 32,
            hold_percent: 0,
            spin_us: 200,
            timeout_ms: 10_000,
            // One per CPU: every page has one connection (see backend/remote),
            // so random faults keep every connection's server thread busy;
            // more threads than CPUs spinning for requests slowed a random
            // fault from 9.8 to 12.5 µs on 2 CPUs.
            conns: cpus.clamp(2, 16),
            stripe_pages: 64,
            embedded_capacity: phys / 4 * 3,
            threshold: 1 << 20,
            raw_syscalls: RawSyscalls::Dispatch,
        }
    }
}

pub use farmem_sys::units::{format_size, parse_size};

fn invalid(name: &str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name: format!("FARMEM_{name}"),
        value: value.into(),
        why: why.into(),
    }
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(invalid(name, v, "expected 1 or 0")),
    }
}

/// A whole number in `lo..=hi`, as the field's type `T` (which holds `hi`).
fn parse_int<T: TryFrom<u64>>(name: &str, v: &str, lo: u64, hi: u64) -> Result<T, ConfigError> {
    let n: u64 = v
        .trim()
        .parse()
        .map_err(|_| invalid(name, v, format!("expected a whole number in {lo}..={hi}")))?;
    if n < lo || n > hi {
        return Err(invalid(name, v, format!("must be in {lo}..={hi}")));
    }
    T::try_from(n).map_err(|_| invalid(name, v, format!("must be in {lo}..={hi}")))
}

fn parse_servers(v: &str) -> Result<Vec<ServerAddr>, ConfigError> {
    let list = ServerAddr::parse_list(v).map_err(|e| invalid("SERVERS", v, e.to_string()))?;
    if let Some(a) = list.iter().find(|a| !a.is_connectable()) {
        return Err(invalid(
            "SERVERS",
            v,
            format!("{a} has port 0, which a client cannot connect to; give the port the server printed"),
        ));
    }
    Ok(list)
}

impl Config {
    /// This configuration with one setting changed (`name` without the
    /// `FARMEM_` prefix, any case), validated as parsing validates it: the
    /// value, then the whole.
    pub fn with(&self, name: &str, value: &str) -> Result<Config, ConfigError> {
        let mut c = self.clone();
        c.set(name, value)?;
        c.check()?;
        Ok(c)
    }

    /// This configuration with `servers` (addresses already parsed, so
    /// valid) instead of its own servers or rendezvous.
    pub fn with_servers(&self, servers: &[ServerAddr]) -> Config {
        Config {
            servers: servers.to_vec(),
            rendezvous: None,
            ..self.clone()
        }
    }

    /// Apply one setting (`name` without the `FARMEM_` prefix, any case).
    fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let key = name.to_ascii_uppercase();
        let v = value;
        let size = |n: &str| parse_size(v).map_err(|why| invalid(n, v, why));
        match key.as_str() {
            "LOCAL" => {
                let b = size("LOCAL")?;
                if b < 1 << 20 {
                    return Err(invalid("LOCAL", v, "the local budget must be at least 1M"));
                }
                let phys = farmem_sys::phys_memory();
                if b > phys {
                    return Err(invalid(
                        "LOCAL",
                        v,
                        format!(
                            "larger than this machine's physical memory ({}); use a smaller budget",
                            format_size(phys)
                        ),
                    ));
                }
                self.local_bytes = b;
            }
            "SERVERS" => match v.trim().strip_prefix('@') {
                Some(dir) => {
                    if dir.is_empty() || dir.contains(',') {
                        return Err(invalid(
                            "SERVERS",
                            v,
                            "@DIR names one rendezvous directory and nothing else (e.g. @/shared/job42)",
                        ));
                    }
                    self.rendezvous = Some(PathBuf::from(dir));
                    self.servers.clear();
                }
                None => {
                    self.servers = parse_servers(v)?;
                    self.rendezvous = None;
                }
            },
            "RENDEZVOUS_TIMEOUT" => {
                self.rendezvous_timeout_s = parse_int("RENDEZVOUS_TIMEOUT", v, 1, 86_400)?
            }
            "FILE" => {
                if v.trim().is_empty() {
                    return Err(invalid("FILE", v, "empty path"));
                }
                self.file = Some(PathBuf::from(v));
            }
            "SECRET_FILE" => {
                if v.trim().is_empty() {
                    return Err(invalid(
                        "SECRET_FILE",
                        v,
                        "empty path; name the secret file (`farmem secret init` writes one)",
                    ));
                }
                self.secret_file = Some(PathBuf::from(v));
            }
            "LOG" => self.log = parse_log_level(v).map_err(|why| invalid("LOG", v, &why))?,
            "FILE_DIRECT" => {
                self.file_direct = match v.trim().to_ascii_lowercase().as_str() {
                    "auto" => FileDirect::Auto,
                    "1" | "on" | "true" => FileDirect::On,
                    "0" | "off" | "false" => FileDirect::Off,
                    _ => return Err(invalid("FILE_DIRECT", v, "expected auto, 1 or 0")),
                }
            }
            "TRANSPORT" => {
                self.transport = match v.trim().to_ascii_lowercase().as_str() {
                    "auto" => Transport::Auto,
                    "socket" => Transport::Socket,
                    "ucx" => Transport::Ucx,
                    _ => return Err(invalid("TRANSPORT", v, "expected auto, socket or ucx")),
                }
            }
            "STATS" => self.stats_at_exit = parse_bool("STATS", v)?,
            "TRACE" => {
                if v.trim().is_empty() {
                    return Err(invalid(
                        "TRACE",
                        v,
                        "empty path; name the file to write the trace to",
                    ));
                }
                self.trace = Some(PathBuf::from(v));
            }
            "CHECKSUM" => self.checksum = parse_bool("CHECKSUM", v)?,
            "REPLICAS" => self.replicas = parse_int("REPLICAS", v, 1, MAX_REPLICAS as u64)?,
            "ARENA" => {
                let b = size("ARENA")?;
                if !(1 << 24..=MAX_ARENA).contains(&b) {
                    return Err(invalid("ARENA", v, "must be between 16M and 16T"));
                }
                self.arena_bytes = b.next_multiple_of(1 << 21);
            }
            "PREFETCH" => self.prefetch_pages = parse_int("PREFETCH", v, 0, MAX_BATCH.into())?,
            "EVICT_BATCH" => self.evict_batch = parse_int("EVICT_BATCH", v, 1, MAX_BATCH.into())?,
            "HOLD" => self.hold_percent = parse_int("HOLD", v, 0, 50)?,
            "SPIN_US" => self.spin_us = parse_int("SPIN_US", v, 0, 1_000_000)?,
            "TIMEOUT_MS" => self.timeout_ms = parse_int("TIMEOUT_MS", v, 10, 3_600_000)?,
            "CONNS" => self.conns = parse_int("CONNS", v, 1, 64)?,
            "STRIPE" => self.stripe_pages = parse_int("STRIPE", v, 1, 1 << 20)?,
            "EMBEDDED_CAPACITY" => {
                let b = size("EMBEDDED_CAPACITY")?;
                if b < 1 << 20 {
                    return Err(invalid("EMBEDDED_CAPACITY", v, "must be at least 1M"));
                }
                self.embedded_capacity = b;
            }
            "THRESHOLD" => {
                let b = size("THRESHOLD")?;
                if b == 0 {
                    return Err(invalid(
                        "THRESHOLD",
                        v,
                        "a threshold of 0 would send every allocation to far memory; use at least 4K",
                    ));
                }
                self.threshold = b;
            }
            "RAW_SYSCALLS" => {
                self.raw_syscalls =
                    match v {
                        "dispatch" => RawSyscalls::Dispatch,
                        "allow" => RawSyscalls::Allow,
                        _ => return Err(invalid(
                            "RAW_SYSCALLS",
                            v,
                            "use \"dispatch\" (system calls made without the C library go through \
                             farmem's table; the default) or \"allow\" (they run unchecked)",
                        )),
                    }
            }
            _ => return Err(ConfigError::Unknown(format!("FARMEM_{key}"))),
        }
        Ok(())
    }

    fn check(&self) -> Result<(), ConfigError> {
        if (!self.servers.is_empty() || self.rendezvous.is_some()) && self.file.is_some() {
            return Err(ConfigError::TwoBackends);
        }
        if self.local_bytes >= self.arena_bytes {
            return Err(invalid(
                "LOCAL",
                &format_size(self.local_bytes),
                format!(
                    "the budget must be smaller than FARMEM_ARENA ({})",
                    format_size(self.arena_bytes)
                ),
            ));
        }
        Ok(())
    }

    /// Read every `FARMEM_*` variable from `vars` (the environment).
    pub fn from_vars<I, K, V>(vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut c = Config::default();
        for (k, v) in vars {
            if let Some(name) = k.as_ref().strip_prefix("FARMEM_") {
                c.set(name, v.as_ref())?;
            }
        }
        c.check()?;
        Ok(c)
    }

    /// Each option's value here, as `FARMEM_` would spell it, in the order
    /// of [`OPTIONS`] (what `farmem config` prints).
    pub fn values(&self) -> Vec<(&'static str, String)> {
        // Exact, in the largest unit that divides it: parses back the same.
        let size = |b: u64| {
            for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
                if b != 0 && b.trailing_zeros() >= shift {
                    return format!("{}{unit}", b >> shift);
                }
            }
            b.to_string()
        };
        OPTIONS
            .iter()
            .map(|o| {
                let v = match o.key {
                    "LOCAL" => size(self.local_bytes),
                    "SERVERS" if self.rendezvous.is_some() => self
                        .rendezvous
                        .as_ref()
                        .map_or(String::new(), |d| format!("@{}", d.display())),
                    "SERVERS" if self.servers.is_empty() => "(embedded)".into(),
                    "RENDEZVOUS_TIMEOUT" => self.rendezvous_timeout_s.to_string(),
                    "SERVERS" => self
                        .servers
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    "FILE" => self
                        .file
                        .as_ref()
                        .map_or("(none)".into(), |p| p.display().to_string()),
                    "SECRET_FILE" => self
                        .secret_file
                        .as_ref()
                        .map_or("(default)".into(), |p| p.display().to_string()),
                    "LOG" => self.log.into(),
                    "FILE_DIRECT" => match self.file_direct {
                        FileDirect::Auto => "auto",
                        FileDirect::On => "1",
                        FileDirect::Off => "0",
                    }
                    .into(),
                    "TRANSPORT" => match self.transport {
                        Transport::Auto => "auto",
                        Transport::Socket => "socket",
                        Transport::Ucx => "ucx",
                    }
                    .into(),
                    "STATS" => u8::from(self.stats_at_exit).to_string(),
                    "TRACE" => self
                        .trace
                        .as_ref()
                        .map_or("(none)".into(), |p| p.display().to_string()),
                    "CHECKSUM" => u8::from(self.checksum).to_string(),
                    "REPLICAS" => self.replicas.to_string(),
                    "ARENA" => size(self.arena_bytes),
                    "PREFETCH" => self.prefetch_pages.to_string(),
                    "EVICT_BATCH" => self.evict_batch.to_string(),
                    "HOLD" => self.hold_percent.to_string(),
                    "SPIN_US" => self.spin_us.to_string(),
                    "TIMEOUT_MS" => self.timeout_ms.to_string(),
                    "CONNS" => self.conns.to_string(),
                    "STRIPE" => self.stripe_pages.to_string(),
                    "EMBEDDED_CAPACITY" => size(self.embedded_capacity),
                    "THRESHOLD" => size(self.threshold),
                    "RAW_SYSCALLS" => match self.raw_syscalls {
                        RawSyscalls::Dispatch => "dispatch",
                        RawSyscalls::Allow => "allow",
                    }
                    .into(),
                    other => format!("(no value for {other})"),
                };
                (o.key, v)
            })
            .collect()
    }

    /// This configuration with an `@DIR` rendezvous replaced by the servers
    /// published there, waiting for them (see `farmem_rendezvous::wait`),
    /// and what was found; unchanged, and `None`, when no rendezvous was
    /// asked for.
    pub fn resolved(&self) -> Result<(Config, Option<farmem_rendezvous::Found>), ConfigError> {
        let Some(dir) = &self.rendezvous else {
            return Ok((self.clone(), None));
        };
        let timeout = std::time::Duration::from_secs(self.rendezvous_timeout_s);
        let found = farmem_rendezvous::wait(dir, timeout).map_err(|e| ConfigError::Rendezvous {
            dir: dir.display().to_string(),
            why: e.to_string(),
        })?;
        Ok((self.with_servers(&found.servers), Some(found)))
    }

    /// Read this process's `FARMEM_*` variables.
    ///
    /// The environment is read and validated once per process; later calls
    /// (the `farmem run` shim's constructor, its first far allocation, the C
    /// API) get the same result.
    pub fn from_env() -> Result<Config, ConfigError> {
        static PARSED: std::sync::OnceLock<Result<Config, ConfigError>> =
            std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                Config::from_vars(
                    std::env::vars_os()
                        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
                )
            })
            .clone()
    }

    /// Parse an `fm_init` string: whitespace-separated `key=value` words,
    /// keys as the variables without `FARMEM_` (e.g. `local=256M servers=h:1,h:2`).
    /// Environment variables are not read.
    pub fn from_str_config(s: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for word in s.split_whitespace() {
            let (k, v) = word.split_once('=').ok_or_else(|| ConfigError::Invalid {
                name: word.into(),
                value: String::new(),
                why: "expected key=value".into(),
            })?;
            c.set(k, v)?;
        }
        c.check()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A derived configuration is validated as a parsed one is, value and
    /// whole; the original is untouched either way.
    #[test]
    fn with_validates_and_leaves_the_original_alone() {
        let c = Config::from_vars([("FARMEM_LOCAL", "64M")]).unwrap();
        let d = c.with("conns", "3").unwrap();
        assert_eq!((c.conns(), d.conns()), (Config::default().conns(), 3));
        assert_eq!(d.local_bytes(), 64 << 20);
        assert!(matches!(
            c.with("CONNS", "0"),
            Err(ConfigError::Invalid { .. })
        ));
        // A value fine alone, wrong with the rest: a file beside servers.
        let s = c.with("SERVERS", "127.0.0.1:7000").unwrap();
        assert!(matches!(
            s.with("FILE", "/var/tmp/x"),
            Err(ConfigError::TwoBackends)
        ));
        assert_eq!(c.local_bytes(), 64 << 20);
        // Servers given as parsed addresses replace a rendezvous.
        let r = c.with("SERVERS", "@/tmp/farmem-rv").unwrap();
        assert!(r.rendezvous().is_some());
        let w = r.with_servers(s.servers());
        assert_eq!((w.rendezvous(), w.servers()), (None, s.servers()));
        // Without a rendezvous, resolving is the identity.
        let (same, found) = s.resolved().unwrap();
        assert!(found.is_none());
        assert_eq!(same, s);
    }

    /// docs/configuration.md shows exactly this table: a new option cannot
    /// ship undocumented, nor a removed one stay, nor a default drift.
    #[test]
    fn the_documented_table_is_the_options_table() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/configuration.md"
        ))
        .unwrap();
        assert!(
            doc.contains(&options_markdown()),
            "docs/configuration.md's table differs from config::OPTIONS; \
             paste the output of `farmem config --markdown` into it"
        );
    }

    /// `values` names every option, and each value it prints parses back
    /// to the same configuration.
    #[test]
    fn printed_values_parse_back() {
        let c = Config::from_vars([
            ("FARMEM_LOCAL", "300M"),
            ("FARMEM_SERVERS", "h1:7070,unix:@x"),
            ("FARMEM_PREFETCH", "8"),
            ("FARMEM_RAW_SYSCALLS", "allow"),
        ])
        .unwrap();
        let vals = c.values();
        assert_eq!(vals.len(), OPTIONS.len());
        assert!(vals.iter().all(|(_, v)| !v.starts_with("(no value")));
        let mut back = Config::default();
        for (k, v) in &vals {
            if !v.starts_with('(') {
                back.set(k, v).unwrap();
            }
        }
        assert_eq!(back, c);
    }

    /// Every option in the table is one the parser accepts (its default
    /// spelled as the user would write it is not checked: some are prose).
    #[test]
    fn every_listed_option_is_parsed() {
        for o in OPTIONS {
            let e = Config::default().set(o.key, "\u{1}not-a-value");
            assert!(
                !matches!(e, Err(ConfigError::Unknown(_))),
                "{} is listed but not parsed",
                o.key
            );
        }
        assert!(matches!(
            Config::default().set("NOPE", "1"),
            Err(ConfigError::Unknown(_))
        ));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert!(parse_size("").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("-1G").is_err());
        assert_eq!(format_size(256 << 20), "256M");
    }

    #[test]
    fn env_is_validated() {
        let ok = Config::from_vars([
            ("FARMEM_LOCAL", "64M"),
            ("FARMEM_SERVERS", "127.0.0.1:7000,localhost:7001"),
        ])
        .unwrap();
        assert_eq!(ok.local_bytes, 64 << 20);
        assert_eq!(ok.servers.len(), 2);
        let e = Config::from_vars([("FARMEM_LOCAL", "lots")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("FARMEM_LOCAL") && e.contains("256M"), "{e}");
        let e = Config::from_vars([("FARMEM_LOCAL", "100T")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("physical memory"), "{e}");
        assert!(Config::from_vars([("FARMEM_SERVERS", "nohost")]).is_err());
        assert!(Config::from_vars([("FARMEM_SERVERS", "h:0")]).is_err());
        assert!(Config::from_vars([("FARMEM_LOCALL", "1G")])
            .unwrap_err()
            .to_string()
            .contains("unknown"));
        assert!(Config::from_vars([("FARMEM_THRESHOLD", "0")]).is_err());
        assert!(Config::from_vars([("FARMEM_RAW_SYSCALLS", "sometimes")]).is_err());
        assert_eq!(
            Config::from_vars([("FARMEM_RAW_SYSCALLS", "allow")])
                .unwrap()
                .raw_syscalls,
            RawSyscalls::Allow
        );
        assert!(Config::from_vars([("FARMEM_PREFETCH", "65")]).is_err());
        // The queues number pages in 32 bits: no arena beyond 2^32 pages.
        assert_eq!(
            Config::from_vars([("FARMEM_ARENA", "16T")])
                .unwrap()
                .arena_bytes,
            MAX_ARENA
        );
        let e = Config::from_vars([("FARMEM_ARENA", "17T")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("FARMEM_ARENA") && e.contains("16T"), "{e}");
        assert!(Config::default().arena_bytes <= MAX_ARENA);
        assert_eq!(
            Config::from_vars([("FARMEM_SERVERS", "h:1"), ("FARMEM_FILE", "/tmp/x")]),
            Err(ConfigError::TwoBackends)
        );
        // Other variables are none of farmem's business.
        assert!(Config::from_vars([("HOME", "/root")]).is_ok());
    }

    #[test]
    fn init_string() {
        let c = Config::from_str_config("local=8M prefetch=0 stats=1").unwrap();
        assert_eq!(
            (c.local_bytes, c.prefetch_pages, c.stats_at_exit),
            (8 << 20, 0, true)
        );
        assert!(Config::from_str_config("local").is_err());
    }
}
