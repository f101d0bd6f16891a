//! The Debian package (`scripts/package-deb.sh`): built from this tree,
//! installed with `dpkg -i` on this machine, used as an ordinary user
//! (`nobody`): `farmem run` of a program, `farmem bench` with its built-in
//! workloads, and a C program built with `pkg-config --cflags --libs
//! farmem` whose far memory checks out at 8× its budget. Purged after.
//!
//! Needs root (dpkg), and skips where farmem is installed already (it
//! would replace someone's install); under CI it fails instead.

use crate::common::programs::{serial, TempDir};
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Purges the package on drop.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "farmem"]).output();
    }
}

fn as_nobody(program: &str, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            program,
        ])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .envs(env.iter().copied())
        .current_dir(home)
        .output()
        .expect("setpriv runs")
}

#[test]
fn the_debian_package_installs_and_runs_as_a_user() {
    let test = "the_debian_package_installs_and_runs_as_a_user";
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip(test, "dpkg -i needs root");
        return;
    }
    for tool in ["/usr/bin/dpkg-deb", "/usr/bin/pkg-config"] {
        if !Path::new(tool).exists() {
            skip(
                test,
                &format!("{tool} is missing (Debian packages dpkg, pkg-config)"),
            );
            return;
        }
    }
    let already = Command::new("dpkg")
        .args(["-s", "farmem"])
        .output()
        .is_ok_and(|o| o.status.success());
    if already {
        skip(
            test,
            "a farmem package is installed here already; the test would replace it",
        );
        return;
    }
    let _g = serial();
    let o = Command::new("bash")
        .arg(repo().join("scripts/package-deb.sh"))
        .arg("--no-build")
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let deb = repo().join(String::from_utf8_lossy(&o.stdout).trim());
    let o = Command::new("dpkg").arg("-i").arg(&deb).output().unwrap();
    let _installed = Installed;
    assert!(o.status.success(), "{}", output_text(&o));
    let listed = Command::new("dpkg")
        .args(["-L", "farmem"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    for f in [
        "/usr/bin/farmem",
        "/usr/include/farmem.h",
        "/usr/lib/farmem/libfarmem_preload.so",
        "/usr/lib/farmem/workloads/memwrite",
        "/lib/systemd/system/farmem-serve.service",
        "/usr/share/farmem/slurm/far-memory.sbatch",
        "/usr/share/farmem/containers/seccomp-allow-farmem",
        "/usr/share/doc/farmem/README.md",
    ] {
        assert!(
            listed.lines().any(|l| l == f),
            "{f} is not in the package:\n{listed}"
        );
    }
    assert!(listed.contains("/pkgconfig/farmem.pc") && listed.contains("/libfarmem.so"));

    let home = TempDir::new("package");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // An unmodified program under the installed farmem, as the user.
    let o = as_nobody(
        "/usr/bin/farmem",
        home.path(),
        &[
            "run",
            "--local",
            "32M",
            "--stats",
            "--",
            "/usr/lib/farmem/workloads/memwrite",
            "--size",
            "128",
            "--passes",
            "2",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", output_text(&o));
    let out = output_text(&o);
    assert!(out.contains("check=ok"), "{out}");
    let s = programs::stats(&out).unwrap_or_else(|| panic!("no statistics\n{out}"));
    assert!(s.fetched > 0, "{out}");
    // farmem bench finds its workloads where the package put them.
    let o = as_nobody(
        "/usr/bin/farmem",
        home.path(),
        &["bench", "memwrite", "--quick", "--systems", "local,farmem"],
        &[],
    );
    assert!(o.status.success(), "{}", output_text(&o));
    // A C program built against the package with pkg-config, run as the
    // user at 8x its budget.
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "farmem"])
        .output()
        .unwrap();
    assert!(flags.status.success(), "{}", output_text(&flags));
    let flags = String::from_utf8_lossy(&flags.stdout).to_string();
    assert!(flags.contains("-lfarmem"), "{flags}");
    let exe = home.path().join("integrity_omp");
    let st = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-fopenmp"])
        .arg(repo().join("tests/programs/integrity_omp.c"))
        .args(flags.split_whitespace())
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success(), "gcc with pkg-config's flags failed");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = as_nobody(
        exe.to_str().unwrap(),
        home.path(),
        &["128"],
        &[("FARMEM_LOCAL", "16M"), ("OMP_NUM_THREADS", "2")],
    );
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("mismatches=0"),
        "{}",
        output_text(&o)
    );
}
