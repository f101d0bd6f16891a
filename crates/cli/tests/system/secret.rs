//! The shared secret as a user meets it: `farmem secret init`, `farmem
//! serve` refusing to open an address other machines reach without one, and
//! an unmodified OpenMP program whose pages live on a server that demands
//! it, with the right secret, none, and a wrong one (one clear line on each
//! side).

use crate::common::programs::serial;
use crate::common::*;
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
    let _g = serial();
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

/// A man in the middle: forwards every byte both ways, and on the first
/// connection changes one byte of the server's stream at `flip` (None:
/// changes nothing). Its address.
fn tamper_proxy(server: &str, flip: Option<usize>) -> String {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let server = server.to_string();
    std::thread::spawn(move || {
        for (i, c) in l.incoming().enumerate() {
            let Ok(mut c) = c else { break };
            let Ok(mut s) = TcpStream::connect(&server) else {
                break;
            };
            let _ = c.set_nodelay(true);
            let _ = s.set_nodelay(true);
            let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(Shutdown::Both);
            });
            let flip = flip.filter(|_| i == 0);
            std::thread::spawn(move || {
                let mut at = 0usize;
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    if let Some(f) = flip.filter(|&f| (at..at + n).contains(&f)) {
                        buf[f - at] ^= 0x01;
                    }
                    at += n;
                    if c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c.shutdown(Shutdown::Both);
            });
        }
    });
    addr
}

/// After the handshake every frame is sealed: a man in the middle who
/// lets the handshake through and then changes one byte of a reply stops
/// the program with one line, and one who changes nothing is invisible.
#[test]
fn a_reply_changed_on_the_way_after_the_handshake_stops_the_program() {
    let _g = serial();
    let home = scratch("mitm");
    let secret = home.join("secret");
    assert!(farmem_at(&home)
        .args(["secret", "init", "--path"])
        .arg(&secret)
        .status()
        .unwrap()
        .success());
    let log = home.join("serve.log");
    let (mut server, addr) = serve_with(&home, &secret, &log);
    let exe = build_c("integrity_omp");
    let program = |via: &str| {
        Command::new(&exe)
            .arg("32")
            .env("HOME", &home)
            .env("FARMEM_SECRET_FILE", &secret)
            .env("FARMEM_LOCAL", "8M")
            .env("FARMEM_SERVERS", via)
            .env("OMP_NUM_THREADS", "2")
            .output()
            .unwrap()
    };
    let o = program(&tamper_proxy(&addr, None));
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("mismatches=0"),
        "through a faithful proxy: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The server's stream: AuthChallenge (24 + 64 bytes), AuthOk (24), then
    // the sealed HelloOk: header (24), payload (24), tag. Change the
    // payload's used-pages figure, which the client never checks itself.
    let used_pages = 24 + 64 + 24 + 24 + 8;
    let o = program(&tamper_proxy(&addr, Some(used_pages)));
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("failed its seal"), "{e}");
    let _ = server.kill();
    let _ = server.wait();
    std::fs::remove_dir_all(home).ok();
}
