//! `farmem stat`: the live counters of a real program paging under
//! `farmem run`, read from another process while it runs.

use crate::common::programs::serial;
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A private XDG_RUNTIME_DIR, so that only this test's programs are seen.
fn private_runtime_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("farmem-stat-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stat(xdg: &Path, args: &[&str]) -> (bool, String, String) {
    let o = farmem()
        .arg("stat")
        .args(args)
        .env("XDG_RUNTIME_DIR", xdg)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn samples(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The numbers on the `--stats` line that starts with `label`.
fn stats_numbers(stats: &str, label: &str) -> Vec<u64> {
    let line = stats
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{stats}"));
    line[label.len() + 2..]
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn start_paging(xdg: &Path, seconds: &str) -> std::process::Child {
    let exe = build_plain(
        "gcc",
        "tests/programs/page_loop.c",
        "page_loop",
        &["-Wextra"],
    );
    farmem()
        .args(["run", "--local", "16M", "--stats", "--"])
        .arg(exe)
        .arg(seconds)
        .env("XDG_RUNTIME_DIR", xdg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The pid of the one program publishing in `xdg`, once it appears.
fn wait_for_program(xdg: &Path) -> u64 {
    let t = Instant::now();
    loop {
        let (ok, out, err) = stat(xdg, &["--json"]);
        assert!(ok, "{err}");
        let s = samples(&out);
        if let Some(p) = s[0]["programs"].as_array().and_then(|a| a.first()) {
            return p["pid"].as_u64().unwrap();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no program published: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn stat_follows_a_paging_program_and_agrees_with_its_exit_statistics() {
    let _g = serial();
    let xdg = private_runtime_dir("follow");
    let child = start_paging(&xdg, "4");
    let pid = wait_for_program(&xdg);
    let pid_s = pid.to_string();

    // Three samples while it pages: the counters rise between them.
    let (ok, out, err) = stat(&xdg, &[&pid_s, "--json", "--count", "3"]);
    assert!(ok, "{err}");
    let s = samples(&out);
    assert_eq!(s.len(), 3, "{out}");
    let faults: Vec<u64> = s
        .iter()
        .map(|x| x["programs"][0]["totals"]["faults"].as_u64().unwrap())
        .collect();
    assert!(
        faults[0] < faults[1] && faults[1] < faults[2],
        "faults do not rise: {faults:?}"
    );
    for x in &s[1..] {
        let p = &x["programs"][0];
        assert_eq!(p["pid"].as_u64(), Some(pid));
        assert_eq!(p["state"], "running");
        assert!(p["faults_per_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["fetched_mb_per_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["fault_p50_us"].as_f64().unwrap() > 0.0, "{p}");
        assert!(
            p["fault_p99_us"].as_f64() >= p["fault_p50_us"].as_f64(),
            "{p}"
        );
        assert!(p["resident_bytes"].as_u64() <= p["budget_bytes"].as_u64());
        assert_eq!(p["servers"][0]["up"], true, "{p}");
    }

    // Watch it to the end: the last sample says it ended, with the same
    // counters as the `--stats` it prints at exit.
    let (ok, out, err) = stat(&xdg, &[&pid_s, "--json", "--watch", "0.3"]);
    assert!(ok, "a watch of a program that exits is not an error: {err}");
    let s = samples(&out);
    let last = &s.last().unwrap()["programs"][0];
    assert_eq!(last["state"], "ended", "{out}");
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stats = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && stdout.contains("ok (0 bad)"),
        "{stdout}\n{stats}"
    );
    let t = &last["totals"];
    let at_exit = |label| stats_numbers(&stats, label);
    assert_eq!(
        t["faults"].as_u64().unwrap(),
        at_exit("faults (missing / first write)")[0]
    );
    assert_eq!(
        t["evictions"].as_u64().unwrap(),
        at_exit("evicted pages")[0]
    );
    let calls = at_exit("eviction calls (protect / unmap)");
    assert_eq!(t["protect_calls"].as_u64().unwrap(), calls[0]);
    assert_eq!(t["unmap_calls"].as_u64().unwrap(), calls[1]);
    assert_eq!(t["protect_lone"].as_u64().unwrap(), calls[2]);
    assert_eq!(t["protect_hole"].as_u64().unwrap(), calls[3]);
    let recycled = at_exit("recycled pages (out / in)");
    assert_eq!(t["recycled_out"].as_u64().unwrap(), recycled[0]);
    assert_eq!(t["recycled_in"].as_u64().unwrap(), recycled[1]);
    assert_eq!(t["move_out_calls"].as_u64().unwrap(), recycled[2]);
    assert_eq!(t["move_in_calls"].as_u64().unwrap(), recycled[3]);
    assert_eq!(t["moves_misreported"].as_u64().unwrap(), recycled[4]);
    assert!(
        calls[1] + recycled[2] > 0,
        "a program that paged unmapped and moved out nothing: {stats}"
    );
    let pf = at_exit("prefetched (used / wasted)");
    assert_eq!(t["prefetched"].as_u64().unwrap(), pf[0]);
    assert_eq!(t["prefetch_used"].as_u64().unwrap(), pf[1]);
    assert_eq!(t["prefetch_wasted"].as_u64().unwrap(), pf[2]);

    // Gone now: the file went with it, and a later look names the pid.
    let (ok, _, err) = stat(&xdg, &[&pid_s]);
    assert!(!ok && err.contains(&pid_s), "{err}");
    let (ok, out, _) = stat(&xdg, &[]);
    assert!(ok && out.contains("no farmem programs"), "{out}");
    std::fs::remove_dir_all(&xdg).unwrap();
}

#[test]
fn the_table_shows_a_running_program_and_forgets_a_killed_one() {
    let _g = serial();
    let xdg = private_runtime_dir("table");
    let mut child = start_paging(&xdg, "60");
    let pid = wait_for_program(&xdg);
    let (ok, out, err) = stat(&xdg, &["--count", "2", "--watch", "0.5"]);
    assert!(ok, "{err}");
    assert_eq!(out.matches("faults/s").count(), 2, "{out}");
    assert!(out.contains(&format!("{pid} ")), "{out}");
    assert!(out.contains("page_loop"), "{out}");
    // Killed outright, it cannot remove its file: the next look does.
    let board = xdg.join(format!("farmem/{pid}.stats"));
    assert!(board.exists());
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = child.wait();
    let (ok, out, _) = stat(&xdg, &[]);
    assert!(ok && out.contains("no farmem programs"), "{out}");
    assert!(!board.exists());
    std::fs::remove_dir_all(&xdg).unwrap();
}

#[test]
fn stat_names_what_is_wrong() {
    let xdg = private_runtime_dir("errors");
    // A pid with no process behind it.
    let (ok, _, err) = stat(&xdg, &["999999999"]);
    assert!(!ok && err.contains("no process 999999999"), "{err}");
    // A running process that is not a farmem program.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let (ok, _, err) = stat(&xdg, &[&pid]);
    assert!(
        !ok && err.contains(&format!("process {pid} is not a farmem program")),
        "{err}"
    );
    // A file in its name that this build cannot read: shown as such, by
    // pid, never misread.
    let d = xdg.join("farmem");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(d.join(format!("{pid}.stats")), vec![0u8; 64 << 10]).unwrap();
    let (ok, out, err) = stat(&xdg, &["--json"]);
    assert!(ok, "{err}");
    let u = &samples(&out)[0]["unreadable"][0];
    assert_eq!(u["pid"].to_string(), pid, "{out}");
    assert!(
        u["why"].as_str().unwrap().contains("no farmem header"),
        "{out}"
    );
    let (ok, _, err) = stat(&xdg, &[&pid]);
    assert!(!ok && err.contains("not a farmem statistics file"), "{err}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    for (args, what) in [
        (&["--count", "0"][..], "--count 0"),
        (&["--watch", "0"][..], "--watch 0"),
        (&["--watch", "nan"][..], "--watch NaN"),
        (&["notapid"][..], "notapid"),
    ] {
        let (ok, _, err) = stat(&xdg, args);
        assert!(!ok && err.contains(what), "{args:?}: {err}");
    }
    // Nothing running: said, not an error.
    let (ok, out, _) = stat(&xdg, &["--json"]);
    assert!(ok);
    assert_eq!(samples(&out)[0]["programs"], serde_json::json!([]));
    std::fs::remove_dir_all(&xdg).unwrap();
}
