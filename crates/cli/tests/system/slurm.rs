//! A real Slurm: a one-node cluster (munge, slurmctld, slurmd, cgroup v1
//! memory limits; `contrib/slurm/one-node.sh`), and the README's batch
//! recipe (`contrib/slurm/far-memory.sbatch`) submitted with `sbatch` by an
//! ordinary user: a memory server started by `srun` publishes itself in a
//! rendezvous directory, and a program with more memory than its job step
//! may hold runs under `farmem run --servers @DIR`. Checked: the program's
//! own result, that its pages went far, and the step's peak memory as
//! Slurm's cgroup counted it, within the step's limit and below the
//! program's footprint.
//!
//! Needs root (slurmd starts jobs as their users) and Debian's slurmd,
//! slurmctld, slurm-client and munge (scripts/setup.sh installs them);
//! without them the test skips, and under CI fails.

use crate::common::programs::{serial, TempDir};
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const NOBODY: u32 = 65534;
/// The program's footprint and the step's limit (the recipe's default).
const FOOTPRINT_MIB: u64 = 512;
const STEP_LIMIT: u64 = 300 << 20;

/// The cluster, stopped on drop.
struct Cluster {
    dir: TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = TempDir::new("slurm");
        let st = Command::new("bash")
            .arg(repo().join("contrib/slurm/one-node.sh"))
            .arg("start")
            .arg(dir.path())
            .status()
            .expect("bash runs");
        let c = Cluster { dir };
        assert!(
            st.success(),
            "the one-node cluster did not start: logs in {:?}",
            c.dir.path()
        );
        c
    }

    fn conf(&self) -> std::path::PathBuf {
        self.dir.path().join("slurm.conf")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("contrib/slurm/one-node.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn as_nobody(program: &str, home: &Path, conf: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "--",
        program,
    ])
    .env_clear()
    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
    .env("HOME", home)
    .env("SLURM_CONF", conf)
    .current_dir(home);
    c
}

#[test]
fn an_sbatch_job_runs_a_program_larger_than_its_step_on_far_memory() {
    let test = "an_sbatch_job_runs_a_program_larger_than_its_step_on_far_memory";
    let missing: Vec<&str> = [
        "/usr/sbin/slurmctld",
        "/usr/sbin/slurmd",
        "/usr/sbin/munged",
        "/usr/bin/sbatch",
    ]
    .into_iter()
    .filter(|p| !Path::new(p).exists())
    .collect();
    if !missing.is_empty() {
        skip(
            test,
            &format!(
                "{} not installed (Debian packages slurmctld, slurmd, slurm-client, munge)",
                missing.join(", ")
            ),
        );
        return;
    }
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip(test, "slurmd needs root to start jobs as their users");
        return;
    }
    if !Path::new("/sys/fs/cgroup/memory").exists() {
        skip(
            test,
            "no cgroup v1 memory controller for the job steps' limits",
        );
        return;
    }
    let _g = serial();
    let cluster = Cluster::start();
    // What the user runs, readable by all; the user's home, theirs.
    let kit = TempDir::new("slurm-kit");
    for f in [
        "farmem",
        "libfarmem.so",
        "libfarmem_preload.so",
        "workloads/memwrite",
    ] {
        let to = kit.path().join(Path::new(f).file_name().unwrap());
        std::fs::copy(target_dir().join(f), &to).unwrap();
        chmod(&to, 0o755);
    }
    let script = kit.path().join("far-memory.sbatch");
    std::fs::copy(repo().join("contrib/slurm/far-memory.sbatch"), &script).unwrap();
    chmod(&script, 0o755);
    chmod(kit.path(), 0o755);
    let home = kit.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    let farmem = kit.path().join("farmem");
    let farmem = farmem.to_str().unwrap();
    let o = as_nobody(farmem, &home, &cluster.conf())
        .args(["secret", "init"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = home.join("job.out");
    let memwrite = kit.path().join("memwrite");
    let o = as_nobody("sbatch", &home, &cluster.conf())
        .env("FARMEM", farmem)
        .arg("--wait")
        .arg("--time=10")
        .arg("-o")
        .arg(&out)
        .arg(&script)
        .arg(&memwrite)
        .args(["--size", &FOOTPRINT_MIB.to_string(), "--passes", "2"])
        .output()
        .unwrap();
    let printed = std::fs::read_to_string(&out).unwrap_or_default();
    let report = format!(
        "sbatch: {}\n{}{}\n--- job output\n{printed}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{report}");
    assert!(printed.contains("check=ok"), "{report}");
    // One node: the server is on this host, and pages move through its
    // memory files, whose memory the server's step must pay for.
    assert!(
        printed.contains("transport                      memfd"),
        "{report}"
    );
    let s = programs::stats(&printed).unwrap_or_else(|| panic!("no statistics\n{report}"));
    assert!(s.fetched > 0 && s.evicted > 0, "nothing went far\n{report}");
    // "step memory: peak P bytes, limit L bytes (Slurm cgroup ...)"
    let line = printed
        .lines()
        .find(|l| l.starts_with("step memory: peak "))
        .unwrap_or_else(|| panic!("no step memory line\n{report}"));
    let num = |after: &str| -> u64 {
        let i = line.find(after).unwrap() + after.len();
        line[i..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (peak, limit) = (num("peak "), num("limit "));
    assert_eq!(limit, STEP_LIMIT, "{report}");
    assert!(peak > 0 && peak <= limit, "{report}");
    assert!(peak < FOOTPRINT_MIB << 20, "{report}");
    eprintln!(
        "step peak {} MiB for a {FOOTPRINT_MIB} MiB program, limit {} MiB",
        peak >> 20,
        limit >> 20
    );
}
