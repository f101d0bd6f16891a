//! A world-readable kit of farmem's binaries and libraries, and commands
//! that run as an ordinary user: `nobody` under root (through `setpriv`),
//! else the user running the tests. A checkout or target directory may be
//! private to root, so what the user runs is copied into the kit.

use super::programs::TempDir;
use super::{repo, target_dir};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The ordinary user's uid and gid: `nobody` under root, else ourselves.
pub fn user() -> Option<(u32, u32)> {
    // SAFETY: geteuid takes nothing and cannot fail.
    (unsafe { libc::geteuid() } == 0).then_some((65534, 65534))
}

/// A world-readable directory with farmem's binaries and libraries, and a
/// home for the user inside it.
pub struct Kit {
    dir: TempDir,
}

impl Kit {
    pub fn new(what: &str) -> Kit {
        let dir = TempDir::new(what);
        let d = dir.path();
        for f in ["farmem", "libfarmem.so", "libfarmem_preload.so"] {
            std::fs::copy(target_dir().join(f), d.join(f)).unwrap();
        }
        let home = d.join("home");
        std::fs::create_dir(&home).unwrap();
        open_to_all(d, 0o755);
        if let Some((uid, gid)) = user() {
            std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        Kit { dir }
    }

    pub fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// tests/programs/NAME.c, linked against this kit's libfarmem (`c_api`)
    /// or plain (for `farmem run`).
    pub fn build(&self, name: &str, c_api: bool) -> PathBuf {
        let exe = self.path(name);
        let mut c = Command::new("gcc");
        c.args([
            "-O2", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-pthread", "-I",
        ])
        .arg(repo().join("include"))
        .arg(repo().join(format!("tests/programs/{name}.c")));
        if c_api {
            c.arg("-L")
                .arg(self.dir.path())
                .args(["-lfarmem", "-lm"])
                .arg(format!("-Wl,-rpath,{}", self.dir.path().display()));
        }
        let st = c.arg("-o").arg(&exe).status().expect("gcc runs");
        assert!(st.success(), "compiling {name}.c failed");
        open_to_all(&exe, 0o755);
        exe
    }

    /// `program` as the ordinary user, in this kit's home, with a clean
    /// environment but for `env`.
    pub fn command(&self, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = match user() {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={gid}"),
                    "--clear-groups",
                    "--",
                ])
                .arg(program);
                c
            }
            None => Command::new(program),
        };
        c.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path("home"))
            .envs(env.iter().copied())
            .current_dir(self.path("home"));
        c
    }

    pub fn farmem(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        self.command(&self.path("farmem"), args, env)
    }
}

pub fn open_to_all(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn run(mut c: Command) -> Output {
    c.output().expect("the command starts")
}
