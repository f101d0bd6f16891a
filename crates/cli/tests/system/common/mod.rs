//! Helpers for the integration tests: find the built artifacts, compile the
//! C programs under tests/programs, start real `farmem serve` processes.
#![allow(dead_code)]

pub mod kit;
pub mod programs;
pub mod proxy;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[path = "../../../../../tests/support/skip.rs"]
mod skip_support;
pub use skip_support::skip;

/// A new shared-secret file at `path` (`farmem secret init --path`).
pub fn new_secret(path: &Path) {
    let _ = std::fs::remove_file(path);
    let o = farmem()
        .args(["secret", "init", "--path"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Say Hello to the server at `addr` without the handshake first, and read
/// until it closes (a server with a secret refuses it).
pub fn hello_without_secret(addr: &str) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let token = [9u8; farmem_wire::TOKEN_LEN];
    let hello = farmem_wire::Frame::Hello {
        token: &token,
        max_pages: 16,
    };
    s.write_all(&hello.encode(1)).unwrap();
    let _ = s.read_to_end(&mut Vec::new());
}

/// target/<profile>, where libfarmem.so is built next to the farmem binary.
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_farmem"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

/// Compile tests/programs/NAME.c against libfarmem with the project's C flags.
pub fn build_c(name: &str) -> PathBuf {
    build_c_at(&format!("tests/programs/{name}.c"), name)
}

/// Compile the C file at `rel` (relative to the repository) against libfarmem.
pub fn build_c_at(rel: &str, name: &str) -> PathBuf {
    let lib = target_dir().join("libfarmem.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --workspace` for this profile first (scripts/test.sh does)",
        lib.display()
    );
    let out_dir = std::env::temp_dir().join(format!("farmem-cprog-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let tmp = building(&exe);
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-I"])
        .arg(repo().join("include"))
        .arg(repo().join(rel))
        .arg("-L")
        .arg(target_dir())
        .args(["-lfarmem", "-lm"])
        .arg(format!("-Wl,-rpath,{}", target_dir().display()))
        .arg("-o")
        .arg(&tmp)
        .status()
        .expect("gcc is needed for these tests");
    assert!(st.success(), "compiling {name}.c failed");
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

/// A private output path for one compile of `exe`. Tests run in parallel
/// and build the same program: each links its own file and renames it into
/// place, so none writes a file another is executing (ETXTBSY).
fn building(exe: &std::path::Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    exe.with_extension(format!("build{n}"))
}

/// Compile a C/C++/Fortran program at `rel` with `compiler` and `flags`,
/// without linking libfarmem (for runs under `farmem run`).
pub fn build_plain(compiler: &str, rel: &str, name: &str, flags: &[&str]) -> PathBuf {
    let out_dir = std::env::temp_dir().join(format!("farmem-cprog-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let tmp = building(&exe);
    let st = Command::new(compiler)
        .args(["-O2", "-g", "-Wall", "-Werror"])
        .args(flags)
        .arg(repo().join(rel))
        .arg("-o")
        .arg(&tmp)
        .status()
        .unwrap_or_else(|e| {
            panic!("{compiler} is needed for this test ({e}); scripts/setup.sh installs it")
        });
    assert!(st.success(), "compiling {rel} failed");
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

/// The first line a child writes on its stdout (a server's banner).
pub fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .unwrap();
    line
}

/// The address in `farmem serve`'s banner ("farmem serve: listening on ADDR (…").
pub fn banner_addr(line: &str) -> String {
    line.split_whitespace()
        .nth(4)
        .unwrap_or_else(|| panic!("unexpected banner {line:?}"))
        .to_string()
}

/// A `farmem serve` process on an ephemeral loopback port; killed on drop.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Serve {
    pub fn start(capacity: &str) -> Serve {
        Serve::start_with_env(capacity, &[])
    }

    /// As [`Serve::start`], with `env` added to the server's environment.
    pub fn start_with_env(capacity: &str, env: &[(&str, &str)]) -> Serve {
        Serve::spawn(capacity, &[], env)
    }

    /// As [`Serve::start`], with `args` added to `farmem serve`'s.
    pub fn start_with_args(capacity: &str, args: &[&str]) -> Serve {
        Serve::spawn(capacity, args, &[])
    }

    /// `farmem serve --capacity CAPACITY ARGS` alone (ARGS give the
    /// address: a server started again where another was).
    pub fn start_bare_with_args(capacity: &str, args: &[&str]) -> Serve {
        Serve::spawn_with(&["--capacity", capacity], args, &[])
    }

    /// A server on loopback TCP that requires the shared secret in
    /// `secret` (made by [`new_secret`]): the only kind that offers UCX.
    pub fn start_with_secret(capacity: &str, secret: &Path, env: &[(&str, &str)]) -> Serve {
        let file = secret.to_str().unwrap();
        Serve::spawn(capacity, &["--secret-file", file], env)
    }

    /// `farmem serve` on loopback TCP with `args` and `env`, once it has
    /// printed its address.
    fn spawn(capacity: &str, args: &[&str], env: &[(&str, &str)]) -> Serve {
        Serve::spawn_with(
            &["--listen", "127.0.0.1:0", "--capacity", capacity],
            args,
            env,
        )
    }

    /// `farmem serve FIRST ARGS` with `env`, once it has printed its address.
    fn spawn_with(first: &[&str], args: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut child = farmem()
            .arg("serve")
            .args(first)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let addr = banner_addr(&first_line(&mut child));
        Serve { child, addr }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A finished command's status and output, for an assertion's message.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
