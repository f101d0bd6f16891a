//! The one-host page path as an attacker and as `ps` see it: while a
//! program pages through memory files (under a plain `farmem run`, and
//! through a `farmem serve` on a Unix socket), neither the program nor its
//! server listens on any network socket, no SysV segment or `/dev/shm` file
//! appears that another user could attach, and the program's resident
//! memory stays within its budget.

use crate::common::programs::*;
use crate::common::*;
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every process descended from `root`, `root` included.
fn tree(root: i32) -> Vec<i32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok());
        if let Some(pp) = ppid {
            parent.push((pid, pp));
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    out
}

/// Socket inodes open in process `pid`.
fn socket_inodes(pid: i32) -> HashSet<u64> {
    let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    d.flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Inodes of the network sockets listening (TCP) or bound (UDP) on this host.
fn network_listeners() -> HashSet<u64> {
    let mut out = HashSet::new();
    for (file, listen_state) in [
        ("/proc/net/tcp", Some("0A")),
        ("/proc/net/tcp6", Some("0A")),
        ("/proc/net/udp", None),
        ("/proc/net/udp6", None),
    ] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && listen_state.is_none_or(|s| f[3] == s) {
                if let Ok(inode) = f[9].parse::<u64>() {
                    out.insert(inode);
                }
            }
        }
    }
    out
}

/// SysV segments that process `pid` made or last attached.
fn sysv_segments_of(pid: i32) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string("/proc/sysvipc/shm") else {
        return Vec::new();
    };
    // key shmid perms size cpid lpid ...
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 5 && (f[4] == pid.to_string() || f[5] == pid.to_string())
        })
        .map(str::to_string)
        .collect()
}

/// Whether a user other than the owner could open `path`: some folder on
/// the way that only its owner may enter (farmem's own `/dev/shm/farmem-UID`
/// for `farmem stat`) keeps it private; otherwise its group or other bits.
fn attachable_by_others(path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let p = std::path::Path::new(path);
    for dir in p.ancestors().skip(1) {
        if dir == std::path::Path::new("/dev/shm") {
            break;
        }
        if std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o011 == 0) {
            return false;
        }
    }
    std::fs::metadata(p).map_or(true, |m| m.permissions().mode() & 0o066 != 0)
}

/// `/dev/shm` files process `pid` holds open or mapped that another user
/// could open.
fn dev_shm_of(pid: i32) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.find("/dev/shm/").map(|i| l[i..].to_string()))
        .collect();
    if let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        out.extend(
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|l| l.to_string_lossy().into_owned())
                .filter(|l| l.starts_with("/dev/shm/")),
        );
    }
    out.retain(|p| attachable_by_others(p));
    out
}

/// Watch a running `farmem run` (and the processes `extra`) until it
/// exits: the network sockets its processes listened on, the SysV segments
/// they made or attached, and the `/dev/shm` files they held.
fn watch(mut child: std::process::Child, extra: &[i32]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut listening = Vec::new();
    let mut segs = Vec::new();
    let mut files = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        let listeners = network_listeners();
        let mut pids = tree(i32::try_from(child.id()).unwrap());
        pids.extend_from_slice(extra);
        for pid in pids {
            for inode in socket_inodes(pid) {
                if listeners.contains(&inode) {
                    listening.push(format!("pid {pid} socket {inode}"));
                }
            }
            segs.extend(sysv_segments_of(pid));
            files.extend(dev_shm_of(pid));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("memfd (one-sided"),
        "not on the memory-file path:\n{err}"
    );
    listening.dedup();
    segs.dedup();
    files.dedup();
    (listening, segs, files)
}

fn memwrite(local: &str, servers: Option<&str>) -> std::process::Child {
    let mut c = farmem();
    c.args(["run", "--local", local, "--stats"]);
    if let Some(s) = servers {
        c.args(["--servers", s]);
    }
    c.arg("--")
        .arg(target_dir().join("workloads/memwrite"))
        .args(["--size", "256", "--passes", "6"])
        .env_remove("FARMEM_TRANSPORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn nothing_listens_and_nothing_another_user_could_attach_appears() {
    let _g = serial();
    // A plain `farmem run` (its embedded server).
    let (listening, segs, files) = watch(memwrite("16M", None), &[]);
    assert!(listening.is_empty(), "listening: {listening:?}");
    assert!(segs.is_empty(), "SysV segments: {segs:?}");
    assert!(files.is_empty(), "/dev/shm files appeared: {files:?}");
    // Through a `farmem serve` on a Unix socket.
    let name = format!("farmem-one-host-{}", std::process::id());
    let mut server = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args([
            "serve",
            "--listen",
            &format!("unix:@{name}"),
            "--capacity",
            "1G",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = first_line(&mut server);
    let spid = i32::try_from(server.id()).unwrap();
    let (listening, segs, files) = watch(memwrite("16M", Some(&format!("unix:@{name}"))), &[spid]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(listening.is_empty(), "listening: {listening:?}");
    assert!(segs.is_empty(), "SysV segments: {segs:?}");
    assert!(files.is_empty(), "/dev/shm files appeared: {files:?}");
}

/// A `farmem serve` on this host reached over TCP, with a shared secret:
/// the session's pages still move through memory files, taken at the
/// server's side door (an abstract Unix socket whose name only the sealed
/// TCP session learns), and the program listens on nothing.
#[test]
fn a_same_host_server_over_tcp_hands_out_memory_files_at_its_side_door() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-side-door-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    assert!(farmem()
        .args(["secret", "init", "--path"])
        .arg(&secret)
        .status()
        .unwrap()
        .success());
    let serve = Serve::start_with_secret("1G", &secret, &[]);
    let program = {
        let mut c = farmem();
        c.args([
            "run",
            "--local",
            "16M",
            "--stats",
            "--servers",
            &serve.addr,
            "--",
        ])
        .arg(target_dir().join("workloads/memwrite"))
        .args(["--size", "256", "--passes", "6"])
        .env_remove("FARMEM_TRANSPORT")
        .env("FARMEM_SECRET_FILE", &secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let (listening, segs, files) = watch(program, &[]);
    assert!(listening.is_empty(), "listening: {listening:?}");
    assert!(segs.is_empty(), "SysV segments: {segs:?}");
    assert!(files.is_empty(), "/dev/shm files appeared: {files:?}");
    // Under FARMEM_TRANSPORT=memfd too, where a server without a door
    // would stop the program.
    let o = farmem()
        .args(["run", "--local", "16M", "--servers", &serve.addr, "--"])
        .arg(target_dir().join("workloads/memwrite"))
        .args(["--size", "64", "--passes", "2"])
        .env("FARMEM_TRANSPORT", "memfd")
        .env("FARMEM_SECRET_FILE", &secret)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(dir).ok();
}

/// The program's peak resident memory (`VmHWM`, what `ps`, `top` and
/// `/usr/bin/time` report) stays near its budget: its far pages are read
/// and written through descriptors, never mapped into it.
#[test]
fn resident_memory_stays_within_the_budget() {
    let _g = serial();
    let mut c = farmem();
    let exe = target_dir().join("workloads/memwrite");
    c.args(["run", "--local", "32M", "--"])
        .arg(&exe)
        .args(["--size", "256", "--passes", "4"])
        .env_remove("FARMEM_TRANSPORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let root = i32::try_from(child.id()).unwrap();
    let mut peak_kb = 0u64;
    while child.try_wait().unwrap().is_none() {
        for pid in tree(root) {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            if !status.contains("Name:\tmemwrite") {
                continue;
            }
            if let Some(kb) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
            {
                peak_kb = peak_kb.max(kb);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(peak_kb > 0, "the program's VmHWM was never read");
    // 32 MiB of budget plus the program, its libraries and farmem's own
    // tables: well under the 256 MiB it wrote.
    assert!(
        peak_kb < 96 * 1024,
        "peak RSS {} MiB for a 32 MiB budget over 256 MiB",
        peak_kb / 1024
    );
}
