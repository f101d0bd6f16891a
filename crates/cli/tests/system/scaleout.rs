//! Scale-out: servers that `mpirun` starts on other hosts publish themselves
//! in a rendezvous directory, and clients given `@DIR` find them.
//!
//! The multi-host test builds real hosts on this machine: network
//! namespaces joined by veth pairs to a bridge (scripts/netns-hosts.sh), one
//! client and three servers, each with its own address. Open MPI starts the
//! servers from the client host through a hostfile, as on a cluster; its rsh
//! agent enters a host's namespace instead of ssh-ing to it. Traffic goes
//! only to those namespaces' addresses.

use crate::common::programs::serial;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The launcher variables a test must not inherit (a CI job run by mpirun
/// or srun would otherwise hand its own rank to every server).
const LAUNCHER_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
];

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fm-scaleout-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_file(&d);
    d
}

/// A `farmem serve` on loopback that publishes itself as `rank` of `size`
/// in job `job`; killed (SIGKILL, so its entry stays) on drop.
struct Rank(Child);

impl Rank {
    fn start(dir: &Path, job: &str, rank: u32, size: u32) -> Rank {
        let mut cmd = farmem();
        cmd.args(["serve", "--capacity", "128M", "--listen", "127.0.0.1:0"])
            .arg("--rendezvous")
            .arg(dir)
            .args(["--job", job, "--rank", &rank.to_string()])
            .args(["--size", &size.to_string()])
            .stdout(Stdio::piped());
        for v in LAUNCHER_VARS {
            cmd.env_remove(v);
        }
        let mut child = cmd.spawn().unwrap();
        let banner = first_line(&mut child);
        assert!(banner.contains("listening on"), "{banner}");
        // The entry is written after the banner: wait for it.
        let file = dir.join(format!("rank-{rank}.json"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&file).is_ok_and(|t| t.contains(&format!("\"{job}\"")))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        Rank(child)
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `farmem run --servers @DIR -- true` with a short rendezvous timeout.
fn run_at(dir: &Path, timeout_s: &str) -> Output {
    farmem()
        .args(["run", "--local", "8M"])
        .arg("--servers")
        .arg(format!("@{}", dir.display()))
        .args(["--", "true"])
        .env("FARMEM_RENDEZVOUS_TIMEOUT", timeout_s)
        .output()
        .unwrap()
}

#[test]
fn a_rank_that_never_publishes_times_out_naming_it() {
    let _g = serial();
    let dir = tmp("missing");
    let _r0 = Rank::start(&dir, "j1", 0, 2);
    let t = Instant::now();
    let o = run_at(&dir, "1");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("has 1 of 2 ranks") && err.contains("missing rank 1"),
        "{err}"
    );
    assert!(err.contains("FARMEM_RENDEZVOUS_TIMEOUT"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stale_entry_from_an_earlier_job_is_detected_and_not_used() {
    let _g = serial();
    let dir = tmp("stale");
    // An earlier job of two ranks, killed: both entries stay behind.
    drop((
        Rank::start(&dir, "old", 0, 2),
        Rank::start(&dir, "old", 1, 2),
    ));
    assert!(dir.join("rank-1.json").exists());
    let o = run_at(&dir, "1");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("does not answer") && err.contains("stale"),
        "the dead job must not be used: {err}"
    );
    // The new job has one rank: the old rank 1 is passed over, by name.
    let _new = Rank::start(&dir, "new", 0, 1);
    let exe = build_c("integrity_omp");
    let o = Command::new(exe)
        .arg("32")
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", format!("@{}", dir.display()))
        .env("FARMEM_RENDEZVOUS_TIMEOUT", "10")
        .env("FARMEM_STATS", "1")
        .env("OMP_NUM_THREADS", "2")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && out.contains("mismatches=0"),
        "{out}\n{err}"
    );
    assert!(
        err.contains("passed over rank-1.json: job \"old\""),
        "the stale entry is named: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_rendezvous_directory_is_refused() {
    // A path that is a file, not a directory.
    let file = tmp("file");
    std::fs::write(&file, "not a directory").unwrap();
    let o = farmem()
        .args(["serve", "--capacity", "16M", "--listen", "127.0.0.1:0"])
        .arg("--rendezvous")
        .arg(&file)
        .args(["--rank", "0", "--size", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("cannot write the rendezvous directory"),
        "{err}"
    );
    let _ = std::fs::remove_file(&file);

    // A directory this user may not write: root's, for user nobody.
    let is_root = farmem_sys_uid() == 0;
    let setpriv = Path::new("/usr/bin/setpriv");
    if !is_root || !setpriv.exists() {
        skip(
            "an_unwritable_rendezvous_directory_is_refused",
            "the permission case needs root and setpriv (util-linux)",
        );
        return;
    }
    let dir = tmp("ro");
    std::fs::create_dir_all(&dir).unwrap();
    // The binary where nobody may run it: a checkout may be private to root.
    let bin = tmp("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("farmem");
    std::fs::copy(env!("CARGO_BIN_EXE_farmem"), &exe).unwrap();
    for (p, mode) in [(&bin, 0o755), (&exe, 0o755)] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    let nobody = |args: &[&str]| {
        Command::new(setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args(args)
            .env("HOME", "/nonexistent")
            .output()
            .unwrap()
    };
    let v = nobody(&["--version"]);
    assert!(
        v.status.success(),
        "user nobody cannot run a copy of farmem in {}: {}",
        bin.display(),
        String::from_utf8_lossy(&v.stderr)
    );
    let d = dir.display().to_string();
    let o = nobody(&[
        "serve",
        "--capacity",
        "16M",
        "--listen",
        "127.0.0.1:0",
        "--rendezvous",
        &d,
        "--rank",
        "0",
        "--size",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("cannot write the rendezvous directory") && err.contains("ermission denied"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&bin);
}

fn farmem_sys_uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

#[test]
fn rendezvous_arguments_are_validated() {
    let dir = tmp("args");
    let serve = |extra: &[&str]| {
        let mut cmd = farmem();
        cmd.args(["serve", "--capacity", "16M", "--listen", "127.0.0.1:0"])
            .arg("--rendezvous")
            .arg(&dir)
            .args(extra);
        for v in LAUNCHER_VARS {
            cmd.env_remove(v);
        }
        let o = cmd.output().unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = serve(&[]);
    assert!(
        e.contains("--rank R --size N") && e.contains("mpirun"),
        "{e}"
    );
    let e = serve(&["--rank", "2", "--size", "2"]);
    assert!(e.contains("from 0 to 1"), "{e}");
    let e = serve(&["--rank", "0", "--size", "1", "--job", "a b"]);
    assert!(e.contains("job identifier"), "{e}");
    // The launcher's own variables are read, and checked.
    let o = farmem()
        .args(["serve", "--capacity", "16M", "--listen", "127.0.0.1:0"])
        .arg("--rendezvous")
        .arg(&dir)
        .env("OMPI_COMM_WORLD_RANK", "x")
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("OMPI_COMM_WORLD_RANK=x"), "{e}");
    for (var, val, says) in [
        ("FARMEM_SERVERS", "@", "rendezvous directory"),
        ("FARMEM_SERVERS", "@/a,b:1", "rendezvous directory"),
        ("FARMEM_RENDEZVOUS_TIMEOUT", "0", "1..=86400"),
    ] {
        let o = farmem()
            .args(["run", "--", "true"])
            .env(var, val)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(says), "{var}={val}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The emulated hosts of one test; torn down on drop, whatever happened.
struct Hosts {
    name: String,
    script: PathBuf,
    mpirun: Option<Child>,
}

impl Hosts {
    fn up(servers: u32) -> Hosts {
        let name = format!("fmt{}", std::process::id() % 100_000);
        let script = repo().join("scripts/netns-hosts.sh");
        let o = Command::new("bash")
            .arg(&script)
            .args(["up", &name, &servers.to_string()])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "netns-hosts.sh up: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Hosts {
            name,
            script,
            mpirun: None,
        }
    }

    fn agent(&self) -> String {
        let o = Command::new("bash")
            .arg(&self.script)
            .args(["agent", &self.name])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// A command run on the client host.
    fn on_client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &format!("{}-c", self.name)])
            .arg(program);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Some(m) = &mut self.mpirun {
            let _ = m.kill();
            let _ = m.wait();
        }
        let _ = Command::new("bash")
            .arg(&self.script)
            .args(["down", &self.name])
            .status();
    }
}

fn can_make_hosts() -> Result<(), String> {
    if farmem_sys_uid() != 0 {
        return Err("needs root for network namespaces".into());
    }
    for tool in ["ip", "tc", "mpirun"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).exists()))
            .unwrap_or(false);
        if !found {
            return Err(format!(
                "needs {tool} (scripts/setup.sh installs iproute2 and openmpi-bin)"
            ));
        }
    }
    Ok(())
}

#[test]
fn mpirun_starts_servers_on_three_hosts_and_openmp_runs_across_them_at_8x() {
    if let Err(why) = can_make_hosts() {
        skip(
            "mpirun_starts_servers_on_three_hosts_and_openmp_runs_across_them_at_8x",
            &why,
        );
        return;
    }
    let _g = serial();
    let mut hosts = Hosts::up(3);
    let dir = tmp("mpi");
    let secret = tmp("secret");
    new_secret(&secret);
    let hostfile = tmp("hostfile");
    std::fs::write(
        &hostfile,
        "10.77.0.11 slots=1\n10.77.0.12 slots=1\n10.77.0.13 slots=1\n",
    )
    .unwrap();
    let mut mpirun = hosts.on_client("mpirun");
    mpirun
        .args(["--allow-run-as-root", "--oversubscribe"])
        .args(["--mca", "plm_rsh_agent", &hosts.agent()])
        .arg("--hostfile")
        .arg(&hostfile)
        .args(["-np", "3"])
        .arg(env!("CARGO_BIN_EXE_farmem"))
        .args(["serve", "--capacity", "128M", "--rendezvous"])
        .arg(&dir)
        .arg("--secret-file")
        .arg(&secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in LAUNCHER_VARS {
        mpirun.env_remove(v);
    }
    hosts.mpirun = Some(mpirun.spawn().unwrap());

    // The OpenMP integrity program, through the C API, finds the servers
    // itself: 64 MiB on an 8 MiB budget.
    let exe = build_c("integrity_omp");
    let o = hosts
        .on_client(&exe)
        .arg("64")
        .env("FARMEM_LOCAL", "8M")
        .env("FARMEM_SERVERS", format!("@{}", dir.display()))
        .env("FARMEM_SECRET_FILE", &secret)
        .env("FARMEM_RENDEZVOUS_TIMEOUT", "60")
        .env("FARMEM_STATS", "1")
        .env("OMP_NUM_THREADS", "2")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    if !(o.status.success() && out.contains("mismatches=0")) {
        // What the servers said, if they never published: stop mpirun and
        // read its output (piped, and read nowhere else).
        let servers = hosts.mpirun.take().map_or(String::new(), |mut m| {
            let _ = m.kill();
            m.wait_with_output().map_or(String::new(), |o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
        });
        let published: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "{out}\n{err}\nin {}: {published:?}\nmpirun's servers:\n{servers}",
            dir.display()
        );
    }
    // Striped over the three hosts, in rank order.
    let ranks: Vec<String> = (0..3)
        .map(|r| {
            let t = std::fs::read_to_string(dir.join(format!("rank-{r}.json"))).unwrap();
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["launcher"], "Open MPI", "{t}");
            v["addr"].as_str().unwrap().to_string()
        })
        .collect();
    for (r, a) in ranks.iter().enumerate() {
        // The hostfile's order: rank r on host s(r+1).
        assert!(a.starts_with(&format!("10.77.0.{}:", 11 + r)), "{a}");
    }
    assert!(
        err.contains(&format!("memory servers {}", ranks.join(","))),
        "{err}"
    );

    // `farmem run` waits for the same job and passes the list on.
    let o = hosts
        .on_client(env!("CARGO_BIN_EXE_farmem"))
        .args(["run", "--local", "8M", "--servers"])
        .arg(format!("@{}", dir.display()))
        .arg("--")
        .arg(build_c_at("workloads/memwrite.c", "memwrite"))
        .args(["--size", "64M"])
        .env("FARMEM_SECRET_FILE", &secret)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && out.contains("check=ok"),
        "{out}\n{err}"
    );
    assert!(err.contains("3 servers of job"), "{err}");

    // Stopping the job removes every entry.
    let mut m = hosts.mpirun.take().unwrap();
    // SAFETY: kill(2) on a child process of this test.
    unsafe { libc::kill(m.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while m.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = m.kill();
    let mo = m.wait_with_output().unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "entries left after the job stopped: {left:?}\n{}",
        String::from_utf8_lossy(&mo.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_file(&hostfile);
}
