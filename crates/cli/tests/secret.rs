//! The shared secret as a user meets it: `farmem secret init`, `farmem
//! serve` refusing to open an address other machines reach without one, and
//! an unmodified OpenMP program whose pages live on a server that demands
//! it, with the right secret, none, and a wrong one (one clear line on each
//! side).

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("farmem-secret-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `farmem` with HOME in `home`, so the user's own secret never leaks in.
fn farmem_at(home: &Path) -> Command {
    let mut c = farmem();
    c.env("HOME", home).env_remove("FARMEM_SECRET_FILE");
    c
}

#[test]
fn secret_init_writes_a_private_file_and_keeps_an_existing_one() {
    let home = scratch("init");
    let o = farmem_at(&home).args(["secret", "init"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = home.join(".config/farmem/secret");
    let meta = std::fs::metadata(&p).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 32);
    let first = std::fs::read(&p).unwrap();
    let o = farmem_at(&home).args(["secret", "init"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(std::fs::read(&p).unwrap(), first, "kept without --force");
    let o = farmem_at(&home)
        .args(["secret", "init", "--force"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_ne!(std::fs::read(&p).unwrap(), first, "fresh random bytes");
    assert!(farmem_at(&home)
        .args(["secret", "check"])
        .status()
        .unwrap()
        .success());
    // An exposed file is refused with the fix.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = farmem_at(&home).args(["secret", "check"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("chmod 600"));
    // FARMEM_SECRET_FILE names another file, validated.
    let o = farmem_at(&home)
        .args(["secret", "check"])
        .env("FARMEM_SECRET_FILE", "")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("FARMEM_SECRET_FILE"));
    std::fs::remove_dir_all(home).ok();
}

#[test]
fn serve_refuses_a_reachable_address_without_a_secret() {
    let home = scratch("listen");
    let o = farmem_at(&home)
        .args(["serve", "--listen", "0.0.0.0:0", "--capacity", "16M"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("without a shared secret")
            && e.contains("farmem secret init")
            && e.contains("--insecure"),
        "{e}"
    );
    // --insecure is the loud way out: it starts, and says so.
    let mut child = farmem_at(&home)
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--capacity",
            "16M",
            "--insecure",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    assert!(line.contains("no authentication"), "{line}");
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("WARNING"));
    std::fs::remove_dir_all(home).ok();
}

/// A server demanding `secret`, its stderr in a file.
fn serve_with(home: &Path, secret: &Path, log: &Path) -> (Child, String) {
    let mut child = farmem_at(home)
        .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "256M"])
        .arg("--secret-file")
        .arg(secret)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    assert!(line.contains("authenticated with"), "{line}");
    (child, banner_addr(&line))
}

#[test]
fn a_program_runs_with_the_right_secret_and_stops_clearly_without_it() {
    let home = scratch("e2e");
    let (good, bad) = (home.join("good"), home.join("bad"));
    for p in [&good, &bad] {
        let o = farmem_at(&home)
            .args(["secret", "init", "--path"])
            .arg(p)
            .output()
            .unwrap();
        assert!(o.status.success());
    }
    let log = home.join("serve.log");
    let (mut server, addr) = serve_with(&home, &good, &log);
    let exe = build_c("integrity_omp");
    let program = |secret: Option<&Path>| {
        let mut c = Command::new(&exe);
        c.arg("64")
            .env("HOME", &home)
            .env("FARMEM_LOCAL", "8M")
            .env("FARMEM_SERVERS", &addr)
            .env("OMP_NUM_THREADS", "2");
        match secret {
            Some(s) => c.env("FARMEM_SECRET_FILE", s),
            None => c.env_remove("FARMEM_SECRET_FILE"),
        };
        c.output().unwrap()
    };
    // The right secret: the program runs at 8x expansion, every byte right.
    let o = program(Some(&good));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("mismatches=0"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // No secret: refused, and the message says what to do.
    let o = program(None);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("requires the shared secret"), "{e}");
    // A wrong secret: the client catches the server's proof.
    let o = program(Some(&bad));
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("secret file differs"), "{e}");
    // The server notices the hang-up on its own thread: give it a moment
    // before it is stopped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("did not accept")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = server.kill();
    let _ = server.wait();
    let l = std::fs::read_to_string(&log).unwrap();
    assert!(l.contains("without the shared secret"), "server log: {l}");
    assert!(l.contains("did not accept"), "server log: {l}");
    std::fs::remove_dir_all(home).ok();
}
