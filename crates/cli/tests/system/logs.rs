//! `farmem serve`'s logs: levels, one line per event naming the server,
//! the peer and the session, as text or JSON.

use crate::common::programs::serial;
use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

/// Run a server with `args`, let one client session and one refused
/// client reach it, stop it, and return its stderr.
fn server_log(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "farmem-logs-{}-{}",
        std::process::id(),
        args.join("")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    new_secret(&secret);
    let mut child = farmem()
        .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "64M"])
        .arg("--secret-file")
        .arg(&secret)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = banner_addr(&line);
    // A client with the secret: a program paging through the server.
    let exe = build_plain(
        "gcc",
        "tests/programs/page_loop.c",
        "page_loop",
        &["-Wextra"],
    );
    let o = farmem()
        .args(["run", "--local", "16M", "--"])
        .arg(exe)
        .arg("0.2")
        .env("FARMEM_SERVERS", &addr)
        .env("FARMEM_SECRET_FILE", &secret)
        .env("FARMEM_TRANSPORT", "socket")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A client without it.
    hello_without_secret(&addr);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let _ = std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status();
    let o = child.wait_with_output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn text_lines_name_the_server_peer_and_session() {
    let _g = serial();
    let log = server_log(&[], &[]);
    let opened = log
        .lines()
        .find(|l| l.contains("INFO session") && l.contains("opened"))
        .unwrap_or_else(|| panic!("no session line:\n{log}"));
    assert!(opened.starts_with("farmem serve: 20"), "{opened}");
    assert!(opened.contains(" server=127.0.0.1:"), "{opened}");
    assert!(opened.contains(" peer=127.0.0.1:"), "{opened}");
    let closed = log.lines().find(|l| l.contains("closed")).unwrap();
    assert!(closed.contains(" session="), "{closed}");
    // The refusal keeps its wording, now with its level and fields.
    let refused = log
        .lines()
        .find(|l| l.contains("refused"))
        .unwrap_or_else(|| panic!("no refusal:\n{log}"));
    assert!(
        refused.contains("WARN refused 127.0.0.1:")
            && refused.contains("it sent Hello without the shared secret")
            && refused.contains(" server="),
        "{refused}"
    );
    // Info hides connection lines; debug shows them.
    assert!(!log.contains("connected"), "{log}");
    let debug = server_log(&[], &[("FARMEM_LOG", "debug")]);
    assert!(debug.contains("DEBUG connected"), "{debug}");
    // warn: only the refusal.
    let warn = server_log(&["--log-level", "warn"], &[("FARMEM_LOG", "debug")]);
    assert!(
        !warn.contains("INFO") && warn.contains("WARN refused"),
        "{warn}"
    );
}

#[test]
fn json_lines_are_objects_with_their_spans() {
    let _g = serial();
    let log = server_log(&["--log-format", "json"], &[]);
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let closed = events
        .iter()
        .find(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("closed"))
        })
        .unwrap_or_else(|| panic!("no session close in:\n{log}"));
    assert_eq!(closed["level"], "INFO");
    let spans = closed["spans"].as_array().unwrap();
    assert!(spans.iter().any(|s| s["server"].is_string()), "{closed}");
    assert!(
        spans
            .iter()
            .any(|s| s["peer"].is_string() && s["session"].is_u64()),
        "{closed}"
    );
    assert!(events.iter().any(|e| e["level"] == "WARN"));
}

#[test]
fn a_bad_level_is_named() {
    let o = farmem()
        .args(["serve", "--capacity", "64M", "--log-level", "loud"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected one of off, error, warn"));
    let o = farmem()
        .args(["serve", "--capacity", "64M"])
        .env("FARMEM_LOG", "loud")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("FARMEM_LOG=\"loud\""),
        "{e}"
    );
}
