//! Memory a program keeps local outside far memory, watched by `farmem run`.
//!
//! farmem pages what a program allocates or maps through the C library in
//! pieces of at least `FARMEM_THRESHOLD`. Memory mapped at a fixed address
//! outside its own reservations, taken by a private allocator that makes
//! raw system calls, or held in small pieces stays local, and a budget the
//! user set would be exceeded silently. So `farmem run` watches its
//! program (and the program's children) from outside, at a low rate and
//! never in the program: each second it reads each process's
//! `/proc/PID/smaps` and sums the private resident pages of its private
//! mappings outside the arena (the arena's mappings are the ones
//! userfaultfd watches, `um` in `VmFlags`). When that and the far pages
//! resident (the process's published board) pass the budget by more than
//! [`margin`], it says so once per process, naming the largest mappings.
//! The peak is what `--stats` shows.
//!
//! Reading `smaps` walks the page tables of every mapping, the arena's
//! resident pages too: 20 ms at 217 MiB resident and 70-90 ms at 6 GiB here,
//! in the kernel, holding the program's mapping lock for reading. So the
//! watch paces itself ([`pace`]): after a look that took `t` it waits at
//! least [`SHARE`] times `t`, so that it never takes more than 2% of a CPU
//! from the program however large the budget (at 6 GiB, looking once a
//! second, it took 8.2%).

use farmem_runtime::publish;
use farmem_sys::units::format_size;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the program is looked at (the first look comes sooner), at
/// most.
pub const INTERVAL: Duration = Duration::from_secs(1);
const FIRST: Duration = Duration::from_millis(200);
/// A look is followed by a wait of at least this many times its length.
pub const SHARE: u32 = 50;

/// The wait after a look that took `took`: [`INTERVAL`], or longer when the
/// look was slow (see the module comment).
pub fn pace(took: Duration) -> Duration {
    INTERVAL.max(took.saturating_mul(SHARE))
}

/// How far past the budget local memory may go before `farmem run` says
/// so: a quarter of the budget, at least 128 MiB (a managed runtime's own
/// code, metadata and thread stacks, the C library's small allocations,
/// farmem's buffers).
pub fn margin(budget: u64) -> u64 {
    (budget / 4).max(128 << 20)
}

/// The most local memory outside far memory seen in one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peak {
    pub pid: u32,
    pub command: String,
    pub bytes: u64,
    /// The longest wait between two looks ([`pace`]).
    pub longest_wait: Duration,
}

/// The watch over a running program; [`Watch::finish`] ends it.
pub struct Watch {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<Option<Peak>>>,
}

impl Watch {
    /// Watch process `root` and its descendants against `budget` bytes.
    pub fn start(root: u32, budget: u64) -> Watch {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("farmem-watch".into())
            .spawn(move || watch(root, budget, &s))
            .ok();
        Watch { stop, thread }
    }

    /// Stop watching; the largest outside memory seen, if any was.
    pub fn finish(mut self) -> Option<Peak> {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        self.thread.take().and_then(|t| t.join().ok()).flatten()
    }
}

fn watch(root: u32, budget: u64, stop: &(Mutex<bool>, Condvar)) -> Option<Peak> {
    let mut peak: Option<Peak> = None;
    let mut warned: Vec<u32> = Vec::new();
    let mut boards: HashMap<u32, publish::Reader> = HashMap::new();
    let dir = publish::dir(false).ok();
    let mut wait = FIRST;
    let mut longest_wait = INTERVAL;
    loop {
        {
            let (lock, cv) = stop;
            let g = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (g, _) = cv
                .wait_timeout_while(g, wait, |stopped| !*stopped)
                .unwrap_or_else(|p| p.into_inner());
            if *g {
                return peak.map(|p| Peak { longest_wait, ..p });
            }
        }
        let began = std::time::Instant::now();
        for pid in tree(root) {
            if comm(pid).as_deref() == Some("farmem") {
                // A memory server the job started: its memory is far memory.
                continue;
            }
            let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
                continue;
            };
            let maps = parse_smaps(&text);
            let outside = local_outside(&maps);
            let far = dir
                .as_ref()
                .and_then(|d| board(&mut boards, d, pid))
                .map_or(0, |r| r.sample().snapshot.resident_bytes);
            if peak.as_ref().is_none_or(|p| outside > p.bytes) {
                peak = Some(Peak {
                    pid,
                    command: command(pid),
                    bytes: outside,
                    longest_wait,
                });
            }
            if far + outside > budget + margin(budget) && !warned.contains(&pid) {
                warned.push(pid);
                farmem_sys::write_stderr(warning(pid, budget, outside, &maps).as_bytes());
            }
        }
        wait = pace(began.elapsed());
        longest_wait = longest_wait.max(wait);
    }
}

/// The board of `pid`, opened once it exists.
fn board<'a>(
    boards: &'a mut HashMap<u32, publish::Reader>,
    dir: &std::path::Path,
    pid: u32,
) -> Option<&'a publish::Reader> {
    match boards.entry(pid) {
        std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
        std::collections::hash_map::Entry::Vacant(e) => {
            Some(e.insert(publish::Reader::open(&publish::path_of(dir, pid)).ok()?))
        }
    }
}

/// `root` and every process below it.
fn tree(root: u32) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let mut p = t.path();
            p.push("children");
            if let Ok(s) = std::fs::read_to_string(&p) {
                out.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
    }
    out
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

fn command(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            let s: Vec<String> = b
                .split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            s.join(" ")
        })
        .unwrap_or_default()
}

/// Bytes resident and private in the private mappings outside the arena.
/// Shared mappings are left out: a memory server on the same host lends
/// its store through shared memory (UCX's shared-memory transports), and
/// those pages, which only this process touches, would count as its own.
pub fn local_outside(maps: &[Mapping]) -> u64 {
    maps.iter()
        .filter(|m| !m.far && m.perms.as_bytes().get(3) == Some(&b'p'))
        .map(|m| m.private)
        .sum()
}

fn kb(v: &str) -> Option<u64> {
    v.trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()
        .map(|k| k << 10)
}

/// One mapping of `/proc/PID/smaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    /// The file, `[heap]`, `[stack]`, ..., or empty for anonymous memory.
    pub name: String,
    /// Resident bytes private to the process.
    pub private: u64,
    /// Watched by userfaultfd (`VmFlags` has `um`): farmem's arena.
    pub far: bool,
}

/// Parse `/proc/PID/smaps` text.
pub fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                let perms = f.next().unwrap_or("").to_string();
                let name = f.nth(3).map(str::to_string).unwrap_or_default();
                out.push(Mapping {
                    start,
                    end,
                    perms,
                    name,
                    private: 0,
                    far: false,
                });
                continue;
            }
        }
        let Some(m) = out.last_mut() else { continue };
        if let Some(v) = line
            .strip_prefix("Private_Clean:")
            .or_else(|| line.strip_prefix("Private_Dirty:"))
        {
            m.private += kb(v).unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("VmFlags:") {
            m.far = v.split_whitespace().any(|f| f == "um");
        }
    }
    out
}

/// The largest mappings outside far memory, as a phrase: "512M anonymous
/// at 0x7f..., 40M `[heap]`, 20M /usr/lib/libjvm.so".
pub fn largest_outside(maps: &[Mapping], n: usize) -> String {
    let mut local: Vec<&Mapping> = maps
        .iter()
        .filter(|m| !m.far && m.private > 0 && m.perms.as_bytes().get(3) == Some(&b'p'))
        .collect();
    local.sort_by_key(|m| std::cmp::Reverse(m.private));
    let parts: Vec<String> = local
        .iter()
        .take(n)
        .map(|m| {
            let what = if m.name.is_empty() {
                format!(
                    "anonymous {} at {:#x} ({})",
                    format_size(m.end - m.start),
                    m.start,
                    m.perms
                )
            } else {
                m.name.clone()
            };
            format!("{} in {what}", format_size(m.private))
        })
        .collect();
    parts.join(", ")
}

fn warning(pid: u32, budget: u64, outside: u64, maps: &[Mapping]) -> String {
    let largest = largest_outside(maps, 3);
    let name = comm(pid).unwrap_or_else(|| "?".into());
    format!(
        "farmem: pid {pid} ({name}) keeps {} of local memory outside far memory, past its {} \
         budget by more than {}; largest: {largest}. farmem pages what a program allocates or \
         maps through the C library in pieces of at least FARMEM_THRESHOLD; memory mapped at \
         fixed addresses of its own, taken by a private allocator's raw system calls, or held \
         in small pieces stays local. Lower --threshold, or leave the machine room for it.\n",
        format_size(outside),
        format_size(budget),
        format_size(margin(budget)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_look_slows_the_watch_to_its_share_of_a_cpu() {
        // A quick look (a small program): once a second.
        assert_eq!(pace(Duration::ZERO), INTERVAL);
        assert_eq!(pace(Duration::from_millis(20)), INTERVAL);
        // 90 ms (6 GiB resident here): 4.5 s, so the looks stay at 2%.
        assert_eq!(pace(Duration::from_millis(90)), Duration::from_millis(4500));
        let took = Duration::from_millis(700);
        assert!(took.as_secs_f64() / (took + pace(took)).as_secs_f64() <= 1.0 / f64::from(SHARE));
        // Absurd lengths do not overflow.
        assert!(pace(Duration::MAX) >= INTERVAL);
    }

    const SMAPS: &str = "\
55d0c0000000-55d0c2000000 rw-p 00000000 00:00 0                          [heap]
Size:              32768 kB
Rss:               30000 kB
Private_Clean:         0 kB
Private_Dirty:     30000 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 
Size:            1048576 kB
Rss:              524288 kB
Private_Dirty:    524288 kB
VmFlags: rd wr mr mw me nr sd um uw
7f1000000000-7f1020000000 rw-p 00000000 00:00 0 
Size:             524288 kB
Rss:              400000 kB
Private_Clean:       100 kB
Private_Dirty:    399900 kB
VmFlags: rd wr mr mw me ac sd
7f2000000000-7f2001000000 r-xp 00001000 08:01 1234                       /usr/lib/libjvm.so
Size:              16384 kB
Rss:               12000 kB
Shared_Clean:      12000 kB
VmFlags: rd ex mr mw me sd
";

    #[test]
    fn smaps_mappings_are_read_and_the_arena_told_apart() {
        let m = parse_smaps(SMAPS);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].name, "[heap]");
        assert_eq!(m[0].private, 30000 << 10);
        assert_eq!(m[2].private, 400000 << 10);
        assert_eq!(m[3].private, 0);
        assert!(m[1].far && !m[0].far && !m[2].far);
        assert_eq!(m[2].name, "");
        assert_eq!(m[3].name, "/usr/lib/libjvm.so");
        assert_eq!(m[3].perms, "r-xp");
    }

    #[test]
    fn the_largest_local_mappings_are_named_far_ones_never() {
        let s = largest_outside(&parse_smaps(SMAPS), 2);
        assert!(
            s.starts_with("390.6M in anonymous 512M at 0x7f1000000000 (rw-p)"),
            "{s}"
        );
        assert!(s.contains("29.3M in [heap]"), "{s}");
        assert!(!s.contains("0x7f0000000000"), "{s}");
        assert!(!s.contains("libjvm"), "{s}");
    }

    #[test]
    fn the_margin_is_a_quarter_of_the_budget_and_at_least_128m() {
        assert_eq!(margin(256 << 20), 128 << 20);
        assert_eq!(margin(4 << 30), 1 << 30);
    }

    #[test]
    fn this_process_is_watched_with_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let t = tree(me);
        assert_eq!(t[0], me);
        assert!(t.contains(&child.id()), "{t:?}");
        let text = std::fs::read_to_string(format!("/proc/{me}/smaps")).unwrap();
        assert!(local_outside(&parse_smaps(&text)) > 0);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
