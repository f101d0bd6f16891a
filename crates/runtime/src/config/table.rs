//! Every `FARMEM_*` setting, declared once: its field, default, documented
//! default and meaning, `farmem run` flag, parser, printed form and getter.
//! [`settings!`] makes the `Config` struct, its `Default`, [`OPTIONS`], the
//! getters, the parser's dispatch and [`Config::values`] from this table, so
//! adding a setting is one entry here.

use super::parse::{self, parse_log_level};
use super::show::{self, copy};
use super::{
    FileDirect, Integrity, RawSyscalls, Redundancy, RunFlag, Servers, Transport, MAX_ARENA,
    MAX_BATCH, MAX_REPLICAS,
};
use farmem_wire::ServerAddr;
use std::path::{Path, PathBuf};

settings! {
    /// Local-memory budget for resident far pages, bytes.
    "LOCAL" => local_bytes: u64 = (farmem_sys::phys_memory() / 2).max(1 << 20);
        documented "half of physical memory", "Local-memory budget for resident far pages. At least `1M`, at most the machine's physical memory. Resident far pages never exceed it (see docs/design.md for the fixed metadata besides).";
        flag Some(RunFlag {
            long: "--local",
            help: "Local-memory budget for far pages, e.g. 256M",
            switch: false,
        });
        parse parse::local;
        show show::size;
        get local_bytes -> u64 = copy;
    /// Memory servers (pages are striped across them), a rendezvous
    /// directory to take them from, or neither: the embedded server.
    "SERVERS" => servers: Servers = Servers::Embedded;
        documented "(none)", "Comma-separated memory servers: `host:port` (a name or an address; IPv6 in brackets, `[::1]:7070`; port 0 is refused), or `unix:/path` / `unix:@name` for a server on this machine (names of at most 107 bytes). Pages are striped across them. The same parser reads `farmem serve --listen` (where port 0 means any free port). Or `@DIR`: the servers of the newest job in the rendezvous directory DIR (started as `farmem serve --rendezvous DIR` by mpirun or srun; see the README), in rank order, once every rank has published and answers, waiting up to `FARMEM_RENDEZVOUS_TIMEOUT`.";
        flag Some(RunFlag {
            long: "--servers",
            help: "Memory servers, host:port[,host:port...], or @DIR for the servers that `farmem serve --rendezvous DIR` published",
            switch: false,
        });
        parse parse::servers;
        show Servers::show;
        get servers -> &[ServerAddr] = Servers::list;
    /// How long to wait for the rendezvous, seconds.
    "RENDEZVOUS_TIMEOUT" => rendezvous_timeout_s: u64 = 120;
        documented "`120`", "Seconds to wait for every server rank of `FARMEM_SERVERS=@DIR` to publish and answer (1–86400). When it runs out, the program stops with a message naming the ranks still missing and any stale entries passed over.";
        flag None;
        parse |v| parse::int(v, 1, 86_400);
        show show::plain;
        get rendezvous_timeout_s -> u64 = copy;
    /// The shared secret's file for TCP servers (else the default file, if
    /// it exists).
    "SECRET_FILE" => secret_file: Option<PathBuf> = None;
        documented "`~/.config/farmem/secret` if it exists", "The shared secret for memory servers reached over TCP: a file of 16–4096 random bytes that no other user may read (mode 0600), written by `farmem secret init`. The client and each server prove to each other that they hold it (HMAC-SHA256 challenge–response; the secret never crosses the wire). A file named here must exist and be usable. Without one, TCP connections are not authenticated. Unix sockets need no secret: only this machine reaches them, and each side checks the other's user instead (`SO_PEERCRED`: a server must run as this program's user or root). Page data is not encrypted.";
        flag None;
        parse |v| parse::path(v, "empty path; name the secret file (`farmem secret init` writes one)");
        show |p: &Option<PathBuf>| show::path_or(p, "(default)");
        get secret_file -> Option<&Path> = Option::as_deref;
    /// `farmem serve`'s log level: one of [`super::LOG_LEVELS`].
    "LOG" => log: &'static str = "info";
        documented "`info`", "How much `farmem serve` logs on stderr: `error`, `warn`, `info` (sessions opened and closed, refusals), `debug` (every connection and client error), `trace` or `off`. One line per event, naming the server, the peer and the session; `--log-format json` writes one JSON object per line for collectors. `--log-level` overrides it. A server that `farmem run` starts for a program logs only warnings, into the program's stderr.";
        flag None;
        parse parse_log_level;
        show |l: &&str| l.to_string();
        get log -> &'static str = copy;
    /// A file (SSD) backend instead of servers.
    "FILE" => file: Option<PathBuf> = None;
        documented "(none)", "Keep far pages in this file (an SSD) instead of on servers. It is created and truncated. Exclusive with `FARMEM_SERVERS`.";
        flag Some(RunFlag {
            long: "--file",
            help: "Keep far pages in this file (an SSD) instead",
            switch: false,
        });
        parse |v| parse::path(v, "empty path");
        show |p: &Option<PathBuf>| show::path_or(p, "(none)");
        get file -> Option<&Path> = Option::as_deref;
    /// Whether the file backend uses `O_DIRECT`.
    "FILE_DIRECT" => file_direct: FileDirect = FileDirect::Auto;
        documented "`auto`", "`1`: open the file with `O_DIRECT` (fail if unsupported); `0`: buffered; `auto`: `O_DIRECT` when the filesystem allows it.";
        flag None;
        parse parse::file_direct;
        show show::file_direct;
        get file_direct -> FileDirect = copy;
    /// How pages move to and from memory servers.
    "TRANSPORT" => transport: Transport = Transport::Auto;
        documented "`auto`", "How pages move to and from memory servers. `memfd`: one-sided through sealed memory files on this host: each server makes one file per 64 MiB chunk and passes its descriptor to this program (`SCM_RIGHTS`) over a Unix socket (its own, or for a server reached over TCP at an address of this host, its side door: an abstract socket whose random name only the session learns), which reads and writes pages with `pread` and `pwrite`; the kernel, not a key, decides who touches a page, nothing listens, and nothing is mapped into the program. `ucx`: one-sided reads and writes through UCX (`libucp`), offered only by a server on TCP to a client that passed the shared-secret handshake; across hosts only over RDMA verbs, whose keys the NIC enforces; on one host UCX's posix shared memory serves as a test path. `socket`: every page is a request the server answers over the TCP or Unix connection. `auto`: memory files when every server is on this host (the embedded server is) and offers them, UCX when this host has an RDMA device (`/sys/class/infiniband`) and every server offers it, sockets otherwise. UCX's TCP transport is never used: it emulates one-sided operations with messages and serves any address a peer names, whatever the key. Under `farmem run`, a program with its own allocator (tcmalloc, jemalloc) uses sockets under `auto`, and `ucx` is refused for it with one line: far memory starts inside that allocator's lock, where UCX's set-up would wait for it. With `memfd` or `ucx`, a server that cannot stops the program with one line naming it; nothing falls back silently. The handshake and control messages stay on the socket either way.";
        flag Some(RunFlag {
            long: "--transport",
            help: "How pages move: auto, socket or ucx (one-sided, through UCX)",
            switch: false,
        });
        parse parse::transport;
        show show::transport;
        get transport -> Transport = copy;
    /// Copies of every far page, on different servers.
    "REPLICAS" => replicas: usize = 1;
        documented "`1`", "Copies of every far page, each on a different server of `FARMEM_SERVERS` (1–3, at most the number of servers). With 2, a server that dies (an I/O error, or no reply within `FARMEM_TIMEOUT_MS`) is marked down with one warning line, and its pages are read from their other copy; the program finishes with every byte right, and the statistics say which servers were lost and how many page writes kept fewer copies. With 1, a lost server stops the program with a message naming it. Each write-back goes to every copy and waits for every copy's acknowledgement before the page leaves local memory: the network carries `REPLICAS` times the written bytes.";
        flag Some(RunFlag {
            long: "--replicas",
            help: "Copies of every far page, on different servers: with 2, the program survives the loss of a server",
            switch: false,
        });
        parse |v| parse::int(v, 1, MAX_REPLICAS as u64);
        show show::plain;
        get replicas -> usize = copy;
    /// How far pages survive lost servers: copies or erasure coding.
    "REDUNDANCY" => redundancy: Option<Redundancy> = None;
        documented "`replicas:1` (as `FARMEM_REPLICAS`)", "How far pages survive lost memory servers. `replicas:N`: N copies of every page, as `FARMEM_REPLICAS=N` (set one or the other). `ec:K+M`: Reed-Solomon erasure coding: every K consecutive far pages form a row, and the row gets M parity pages; the K + M pages of a row are on K + M different servers, so any M servers may be lost and every byte is still read back (a page whose server is lost is decoded from any K of the row's others), while the servers hold (K + M) / K times the data instead of N times. K is 2–12 and M 1–4, and the session needs at least K + M servers. A page read is one server's page while its server lives; a write-back sends the row's parity along (the whole row when write-back covers it, otherwise the page's old bytes and the row's parity are read first and the parity updated from the change: 1 + M reads). A lost or leaving (`--drain`) server's pages are rebuilt in the background on a server outside their row, so that needs more than K + M servers; a server that joins takes only such pages, no share of the others. Every page a row operation reads is checked against a CRC32C of what was written there, and a server that sends a wrong one is taken as lost (docs/design.md, Erasure coding).";
        flag Some(RunFlag {
            long: "--redundancy",
            help: "How far pages survive lost servers: replicas:N, or ec:K+M (Reed-Solomon over K+M servers)",
            switch: false,
        });
        parse parse::redundancy;
        show show::redundancy;
        get redundancy_setting -> Option<Redundancy> = copy;
    /// Keep and check a CRC32C per far page.
    "CHECKSUM" => checksum: bool = true;
        documented "`1`", "`1`: keep a CRC32C of every page written to far memory (4 bytes per far page, beside the page table) and check it on every fetch; a page that comes back different stops the program with a message naming the server and the page, and is never installed. `0`: no checksums.";
        flag None;
        parse parse::boolean;
        show show::flag;
        get checksum -> bool = copy;
    /// What each far page's check value is.
    "INTEGRITY" => integrity: Integrity = Integrity::Crc32c;
        documented "`crc32c`", "What `FARMEM_CHECKSUM` keeps per far page. `crc32c`: a CRC32C (4 bytes a page), which catches corruption by a server, its memory or the network, but not a server that forges a page on purpose. `mac`: a keyed MAC, the BLAKE3 keyed hash of the page under a key drawn from the kernel at start that never leaves this process, 64 bits kept (8 bytes a page): a server, or anyone who can write its memory, cannot forge a page, swap two, or hand back an old version without the program stopping (or, with replicas, the page being read from another copy). For a network the operator does not trust. Costs more per page than CRC32C (docs/benchmarks.md).";
        flag None;
        parse parse::integrity;
        show show::integrity;
        get integrity -> Integrity = copy;
    /// Print statistics on stderr at exit.
    "STATS" => stats_at_exit: bool = false;
        documented "`0`", "`1`: print the statistics table on stderr at exit.";
        flag Some(RunFlag {
            long: "--stats",
            help: "Print far-memory statistics when the program exits",
            switch: true,
        });
        parse parse::boolean;
        show show::flag;
        get stats_at_exit -> bool = copy;
    /// Time each part of the page path.
    "BREAKDOWN" => breakdown: bool = false;
        documented "`0`", "`1`: time each part of the page path (fault handling, prefetch planning, fetch, checksum, install, and eviction by its parts) and print, with `--stats`, each part's own time per page moved. Adds two clock reads per part: 0.2–0.4 µs a fault here (faultlat p50, on against off); off, it costs one branch per part.";
        flag None;
        parse parse::boolean;
        show show::flag;
        get breakdown -> bool = copy;
    /// Write the policy trace here.
    "TRACE" => trace: Option<PathBuf> = None;
        documented "(none)", "Write the policy trace to this file: every fault, prefetch, use of a prefetched page, eviction and range given back (freed), 8 bytes each (about 8 bytes per page moved). `%p` in the name becomes the process id: without it, every process of a job that uses far memory writes the same file and the last one to start wins. `farmem trace FILE` reads it: what prefetch brought and wasted, and the bytes fetched against Belady's MIN and LRU at the same budget.";
        flag Some(RunFlag {
            long: "--trace",
            help: "Write the policy trace to this file (read it with farmem trace)",
            switch: false,
        });
        parse |v| parse::path(v, "empty path; name the file to write the trace to");
        show |p: &Option<PathBuf>| show::path_or(p, "(none)");
        get trace -> Option<&Path> = Option::as_deref;
    /// Virtual address space reserved for far allocations, bytes.
    "ARENA" => arena_bytes: u64 = (4 * farmem_sys::phys_memory()).max(64 << 30).next_multiple_of(1 << 30).min(MAX_ARENA);
        documented "4× physical memory, at least `64G`, at most `16T`", "Virtual address space reserved for far allocations: the most far memory a process can have allocated at once. Costs no memory until used. Between `16M` and `16T` (the replacement queues number pages in 32 bits).";
        flag None;
        parse parse::arena;
        show show::size;
        get arena_bytes -> u64 = copy;
    /// Largest prefetch window, pages (0 turns prefetch off).
    "PREFETCH" => prefetch_pages: u32 = 64;
        documented "`64`", "Largest prefetch window, in pages (0–64; 0 or 1 turns prefetch off).";
        flag None;
        parse |v| parse::int(v, 0, MAX_BATCH as u64);
        show show::plain;
        get prefetch_pages -> u32 = copy;
    /// Percent of the budget kept as the hold.
    "HOLD" => hold_percent: u32 = 0;
        documented "`0`", "Percent of `FARMEM_LOCAL` (0–50) kept as the hold: pages evicted from probation stay there, unmapped but local, before they leave for good, so that a page the program still uses comes back without the network and is judged by its refault distance (a software accessed bit for pages on their way out; see docs/design.md). Off by default: on GAPBS BFS it halved the bytes fetched but made the run slower on this class of machine, where a local bounce through the hold costs about as much as a far fetch (docs/benchmarks.md). Try `6` where the far tier is slow.";
        flag None;
        parse |v| parse::int(v, 0, 50);
        show show::plain;
        get hold_percent -> u32 = copy;
    /// Pages evicted per eviction round.
    "EVICT_BATCH" => evict_batch: Option<u32> = None;
        documented "`auto`", "Victims an eviction round chooses, at least (1–128), or `auto`: a 64th of the budget, between 32 and 128. A round, whatever its size, costs one unmap call (a TLB shootdown) and its dirty runs one write-protect or move each, so larger rounds make fewer calls; pages evicted ahead of need are pages a loop could have kept, so small budgets keep rounds small. A round leaves as much room again for the blocks of `FARMEM_EVICT_BLOCK`.";
        flag None;
        parse parse::evict_batch;
        show show::evict_batch;
        get evict_batch -> Option<u32> = copy;
    /// Lone dirty victims take their block's dirty pages along.
    "EVICT_BLOCK" => evict_block: bool = true;
        documented "`1`", "`1`: a dirty victim that is the only one of its aligned block of 16 pages takes the block's other dirty pages (two at least) out with it, so that one write-protect call, and one TLB shootdown, covers them all instead of one each. This is what scattered writers pay most for (a graph build at a quarter of its footprint). Streams evict in runs and take few blocks (NPB MG at half: 1–2% more bytes); a victim amid a loop's kept pages takes none. Off while `FARMEM_HOLD` is above 0. Where the pages around a scattered writer's victims are still in use, the blocks cost more than they save: GAPBS BFS `-g 20` at half its footprint fetched twice the bytes with them (`--stats` counts the pages that left with a block and came back soon). `0`: every victim is chosen by the replacement policy alone.";
        flag None;
        parse parse::boolean;
        show show::flag;
        get evict_block -> bool = copy;
    /// Evicted pages are moved out and reused by writable installs.
    "RECYCLE" => recycle: bool = true;
        documented "`1`", "`1`: where the kernel moves pages (`UFFDIO_MOVE`, Linux 6.8), evicted pages are moved out of the arena into a small bin (128 pages per 32 MiB of budget, at most 256 pages, none under 32 MiB, taken from the budget) and written back from there, instead of being write-protected, copied and unmapped; windows installed writable take them back (their data copied in, the pages moved in) instead of `UFFDIO_COPY`'s allocation and copy. Clean installs still copy: a page moved in is writable. A move the kernel refuses for good (a range the program changed) turns the bin off; a busy page is evicted the old way. `0`: every page is installed by copy and evicted by unmap.";
        flag None;
        parse parse::boolean;
        show show::flag;
        get recycle -> bool = copy;
    /// Free pages kept in the budget, so evictions overlap fetches.
    "RESERVE" => reserve_pages: u32 = 64;
        documented "`64`", "Pages (0–64) kept free in the local budget, at most 1/16 of it, so that a fault sends its request at once and evicts while the reply is on the wire, instead of evicting first and then waiting. `0`: evict only when a fault finds no room, before its request (the behaviour before this setting).";
        flag None;
        parse |v| parse::int(v, 0, MAX_BATCH as u64);
        show show::plain;
        get reserve_pages -> u32 = copy;
    /// Spin before blocking on a reply, microseconds.
    "SPIN_US" => spin_us: u64 = 200;
        documented "`200`", "How long a faulting thread spins for a server's reply before it blocks in `poll` (0–1000000). Spinning avoids a ~100 µs wake-up on an idle CPU.";
        flag None;
        parse |v| parse::int(v, 0, 1_000_000);
        show show::plain;
        get spin_us -> u64 = copy;
    /// Give up on a server after this long, milliseconds.
    "TIMEOUT_MS" => timeout_ms: u64 = 10_000;
        documented "`10000`", "How long to wait for a server before stopping the program with a message (10–3600000).";
        flag None;
        parse |v| parse::int(v, 10, 3_600_000);
        show show::plain;
        get timeout_ms -> u64 = copy;
    /// Connections per server. One per CPU by default: every page has one
    /// connection (see backend/remote), so random faults keep every
    /// connection's server thread busy; more threads than CPUs spinning for
    /// requests slowed a random fault from 9.8 to 12.5 µs on 2 CPUs.
    "CONNS" => conns: usize = farmem_sys::online_cpus().clamp(2, 16);
        documented "CPUs (2–16)", "Connections per server (1–64). Each stripe unit travels on one of them (so a refault queues behind its own write-back); more let more threads fault at once, but each busy connection keeps a server thread spinning. On the 2-CPU test machine a single faulting thread saw random faults of 9.8 µs with `1`, 10.6 µs with `2` and 12.5 µs with `3`; two threads faulting at once were best with `2`.";
        flag None;
        parse |v| parse::int(v, 1, 64);
        show show::plain;
        get conns -> usize = copy;
    /// Pages per stripe unit across servers.
    "STRIPE" => stripe_pages: u64 = 64;
        documented "`64`", "Pages per stripe unit across servers and their connections. A pipelined prefetch window stops at a stripe boundary.";
        flag None;
        parse |v| parse::int(v, 1, 1 << 20);
        show show::plain;
        get stripe_pages -> u64 = copy;
    /// Capacity of the embedded loopback server, bytes.
    "EMBEDDED_CAPACITY" => embedded_capacity: u64 = farmem_sys::phys_memory() / 4 * 3;
        documented "¾ of physical memory", "Capacity of the memory server farmem starts itself when neither `FARMEM_SERVERS` nor `FARMEM_FILE` is set. That server is the `farmem` program (`farmem serve --listen-fd 3 --parent PID`) in a child process, found next to `libfarmem.so` (or the executable), in `../bin` from there, or on `PATH`; if there is none, the first far allocation fails with a message saying so. The child gets the environment without `LD_PRELOAD` and `FARMEM_*`.";
        flag None;
        parse parse::embedded_capacity;
        show show::size;
        get embedded_capacity -> u64 = copy;
    /// Allocations at least this large go to far memory (used by `farmem run`).
    "THRESHOLD" => threshold: u64 = 1 << 20;
        documented "`1M`", "Smallest allocation, or address-space reservation (`mmap(PROT_NONE, MAP_NORESERVE)`: a JVM's heap), that goes to far memory under `farmem run`. Must not be 0.";
        flag Some(RunFlag {
            long: "--threshold",
            help: "Allocations at least this large go far; default 1M",
            switch: false,
        });
        parse parse::threshold;
        show show::size;
        get threshold -> u64 = copy;
    /// System calls made without the C library.
    "RAW_SYSCALLS" => raw_syscalls: RawSyscalls = RawSyscalls::Dispatch;
        documented "`dispatch`", "System calls a program makes without the C library (liburing, libaio, inline assembly). `dispatch`: syscall user dispatch sends them through farmem's table of system-call buffers, so a far buffer among them works, and `io_uring_setup` answers ENOSYS. `allow`: they run unchecked, and one that meets a non-resident far page fails with EFAULT. See docs/design.md, \"System calls on far memory\".";
        flag None;
        parse parse::raw_syscalls;
        show show::raw_syscalls;
        get raw_syscalls -> RawSyscalls = copy;
}
