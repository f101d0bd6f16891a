//! `farmem bench` and `farmem report`, end to end on tiny data (--quick):
//! every system set up for real (cgroup, swap file, zram, file mapping) and
//! removed afterwards, even on Ctrl-C.

// These tests share machine-wide resources (zram0, swap, cgroups): each
// takes the suite's lock, so one at a time, and none beside another heavy test.
use crate::common::programs::serial;
use crate::common::*;
use serde_json::Value;
use std::process::Command;

fn bench(args: &[&str]) -> (bool, String, String) {
    let o = farmem().arg("bench").args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn leftovers() -> Vec<String> {
    let mut v = Vec::new();
    for d in ["/sys/fs/cgroup/memory", "/sys/fs/cgroup", "/var/tmp"] {
        if let Ok(rd) = std::fs::read_dir(d) {
            v.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("farmem-bench-")),
            );
        }
    }
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    v.extend(
        swaps
            .lines()
            .filter(|l| l.contains("farmem-bench") || l.contains("zram0"))
            .map(String::from),
    );
    v
}

#[test]
fn quick_bench_all_systems_json_and_cleanup() {
    let _g = serial();
    let (ok, out, err) = bench(&["memwrite", "--quick", "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = v["results"].as_array().unwrap();
    let local = r
        .iter()
        .find(|x| x["system"] == "local")
        .expect("local reference");
    assert!(local["seconds"].as_f64().unwrap() > 0.0 && local["check"] == "ok");
    for sys in ["farmem", "swap", "zram", "ssd-mmap"] {
        let rows: Vec<&Value> = r.iter().filter(|x| x["system"] == sys).collect();
        assert_eq!(rows.len(), 3, "{sys}: 1, 1.67 and 2x");
        for x in rows {
            for k in ["system", "expansion", "seconds", "metric", "unit"] {
                assert!(x.get(k).is_some(), "{sys} lacks {k}");
            }
            // Each system ran for real here (root, cgroup v1, zram), or says why not.
            assert!(x["check"] == "ok" || x.get("unavailable").is_some(), "{x}");
        }
    }
    let fm = r
        .iter()
        .find(|x| x["system"] == "farmem" && x["expansion"] == 2.0)
        .unwrap();
    assert!(
        fm["farmem_stats"]
            .as_str()
            .unwrap()
            .contains("evicted pages"),
        "farmem runs carry their stats"
    );
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
}

#[test]
fn stencil_and_qsort_quick_with_csv_plot_and_report() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("s.svg");
    let (ok, out, err) = bench(&[
        "stencil7",
        "--quick",
        "--systems",
        "local,farmem,ssd-mmap",
        "--csv",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().next(),
        Some("system,expansion,local_budget_bytes,seconds,seconds_min,seconds_max,metric,unit,relative_runtime,check,timed_fetched_bytes,timed_written_back_bytes")
    );
    // local and farmem must run and check out; a kernel baseline may also
    // be unavailable in a small budget (OOM-killed: check "-").
    for l in out.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 12, "{l}");
        let baseline = !(l.starts_with("local,") || l.starts_with("farmem,"));
        assert!(f[9] == "ok" || (baseline && f[9] == "-"), "{l}\n{err}");
        // Only farmem reports the timed region's far traffic: the grids do
        // not fit the budget, so some pages must have moved both ways.
        if l.starts_with("farmem,") {
            let fetched: u64 = f[10].parse().expect(l);
            let written: u64 = f[11].parse().expect(l);
            assert!(fetched > 0 && written > 0, "{l}");
        } else {
            assert!(f[10].is_empty() && f[11].is_empty(), "{l}");
        }
    }
    assert!(
        out.lines().filter(|l| l.starts_with("farmem,")).count() == 3,
        "{out}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // A bench result and a probe result in one HTML page.
    let (ok, out, err) = bench(&["qsort", "--quick", "--systems", "local,farmem", "--json"]);
    assert!(ok, "{err}");
    // qsort now has a bound (one pass: loose, but never above what moved),
    // and the far ceiling says how long that least traffic takes.
    let v: Value = serde_json::from_str(&out).unwrap();
    let c = &v["params"]["far_ceiling"];
    assert!(c["read_mbps"].as_f64().unwrap() > 0.0, "{c}");
    for x in v["results"].as_array().unwrap() {
        if x["system"] == "farmem" && x["expansion"].as_f64().unwrap() > 1.0 {
            let least = x["bound_fetched_bytes"].as_u64().expect("a bound");
            assert!(least <= x["timed_fetched_bytes"].as_u64().unwrap(), "{x}");
            assert!(x["bound_seconds"].as_f64().unwrap() >= 0.0, "{x}");
        }
    }
    let bj = dir.join("q.json");
    std::fs::write(&bj, out).unwrap();
    let pj = dir.join("p.json");
    let o = farmem()
        .args(["probe", "latency", "--max", "1M", "--quick", "--json"])
        .output()
        .unwrap();
    std::fs::write(&pj, &o.stdout).unwrap();
    let html = dir.join("r.html");
    let o = farmem()
        .args([
            "report",
            bj.to_str().unwrap(),
            pj.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(
        h.contains("<h2>bench: qsort ")
            && h.contains("<h2>probe: latency</h2>")
            && h.matches("<svg").count() >= 2,
        "{h}"
    );
    let o = farmem()
        .args(["report", bj.to_str().unwrap(), "--text"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("farmem"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn pagerank_quick_reports_its_hot_and_stream_bytes() {
    let _g = serial();
    let (ok, out, err) = bench(&["pagerank", "--quick", "--systems", "local,farmem", "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 4, "local, then farmem at 1, 1.67 and 2x: {out}");
    for x in r {
        assert_eq!(x["check"], "ok", "{x}");
        assert_eq!(x["unit"], "Medges/s", "{x}");
        let line = x["result_line"].as_str().unwrap();
        // What a harness needs to bound the bytes a pager must move.
        for k in ["hot_bytes=", "stream_bytes=", "iterations=5"] {
            assert!(line.contains(k), "{line} lacks {k}");
        }
        // Beside farmem's traffic, the least any policy moves: never more
        // than farmem moved, since it is a lower bound.
        if x["system"] == "farmem" {
            let moved = x["timed_fetched_bytes"].as_u64().expect("timed traffic");
            let least = x["bound_fetched_bytes"].as_u64().expect("a bound");
            assert!(
                least <= moved,
                "bound {least} above what farmem moved {moved}: {x}"
            );
            let wb = x["timed_written_back_bytes"].as_u64().unwrap();
            assert!(x["bound_written_back_bytes"].as_u64().unwrap() <= wb, "{x}");
        } else {
            assert!(x.get("bound_fetched_bytes").is_none(), "{x}");
        }
    }
}

/// The wavefront variant, the chase and BFS, on far memory: each checks its
/// result (the stencil bitwise against the naive sweep, BFS by Graph500's
/// level rules), and each gets a bound at or below what farmem moved.
#[test]
fn wavefront_stencil_chase_and_bfs_have_bounds_below_what_moved() {
    let _g = serial();
    for args in [
        &["stencil7", "--variant", "wavefront"][..],
        &["chase"][..],
        &["bfs"][..],
    ] {
        let mut all = args.to_vec();
        all.extend([
            "--quick",
            "--systems",
            "local,farmem",
            "--expansion",
            "2",
            "--json",
        ]);
        let (ok, out, err) = bench(&all);
        assert!(ok, "{args:?}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let r = v["results"].as_array().unwrap();
        assert_eq!(r.len(), 2, "{out}");
        for x in r {
            assert_eq!(x["check"], "ok", "{x}");
        }
        let f = &r[1];
        assert_eq!(f["system"], "farmem");
        let line = f["result_line"].as_str().unwrap();
        if args[0] == "stencil7" {
            assert!(
                line.contains("variant=wavefront") && line.contains("check_by=naive-reference"),
                "{line}"
            );
        } else if args[0] == "chase" {
            assert!(line.contains("pages_touched="), "{line}");
        } else {
            assert!(
                line.contains("levels=") && line.contains("reached="),
                "{line}"
            );
        }
        let least = f["bound_fetched_bytes"].as_u64().expect("a bound");
        let moved = f["timed_fetched_bytes"].as_u64().expect("timed traffic");
        assert!(
            least > 0 && least <= moved,
            "bound {least}, moved {moved}: {f}"
        );
        let wl = f["bound_written_back_bytes"].as_u64().unwrap();
        assert!(wl <= f["timed_written_back_bytes"].as_u64().unwrap(), "{f}");
    }
}

/// The README's first command: the seed stencil at 4x against all-local and
/// swap, through the bench harness, checked.
#[test]
fn demo_runs_the_seed_stencil_against_local_and_swap() {
    let _g = serial();
    let o = farmem().args(["demo", "--size", "64M"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("7-point stencil of DLM (Distributed Large Memory")
            && out.contains("Fig. 2.2")
            && !out.contains("seed")
            && out.contains("wavefront"),
        "{out}"
    );
    let row = |name: &str| out.lines().any(|l| l.starts_with(name));
    assert!(row("farmem") && row("swap"), "{out}");
    assert!(out.contains("any policy must move"), "{out}");
    let o = farmem().args(["demo", "--updates", "5"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--random"));
}

#[test]
fn ctrl_c_cleans_everything_up() {
    let _g = serial();
    let child = farmem()
        .args([
            "bench",
            "qsort",
            "--size",
            "64M",
            "--expansion",
            "8",
            "--systems",
            "local,swap",
            "--timeout",
            "120",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the swap baseline is set up, then interrupt.
    let start = std::time::Instant::now();
    while !std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .contains("farmem-bench")
    {
        assert!(
            start.elapsed().as_secs() < 60,
            "the swap baseline never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
}

#[test]
fn bad_arguments() {
    let _g = serial();
    for (args, want) in [
        (vec!["qsort", "--size", "lots"], "--size"),
        (vec!["qsort", "--expansion", "0.5"], "between 1 and 64"),
        (vec!["qsort", "--systems", "local,tape"], "not a system"),
        (
            vec!["stencil7", "--variant", "clever"],
            "naive, spatial, temporal or wavefront",
        ),
        (
            vec!["qsort", "--size", "20G"],
            "half of this machine's memory",
        ),
        (vec!["qsort", "--plot", "x.jpg"], "*.png"),
        (vec!["--size", "1G", "--", "true"], "footprint is measured"),
        (vec!["--metric-regex", "(", "--", "true"], "--metric-regex"),
        (vec!["--hints", "--", "true"], "built-in workloads"),
        (vec!["qsort", "--", "true"], "cannot be used with"),
        (vec![], "required"),
        // A program that fails all-local leaves nothing to compare with.
        (
            vec!["--expansion", "2", "--", "sh", "-c", "exit 3"],
            "did not run all-local",
        ),
    ] {
        let (ok, _, err) = bench(&args);
        assert!(!ok, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let o = farmem()
        .args(["report", "/nonexistent.json", "-o", "/tmp/x.html"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let _ = Command::new("true").status();
}

/// Any program after `--`: its footprint is measured all-local, every system
/// gets footprint/E, and the figure of merit comes from --metric-regex.
#[test]
fn any_program_with_a_measured_footprint_and_a_metric_regex() {
    let _g = serial();
    let prog = "import numpy as np; a = np.ones(2**23); a = a * 3.0; print('score=%d' % a.sum())";
    let (ok, out, err) = bench(&[
        "--expansion",
        "2",
        "--systems",
        "local,farmem,ssd-mmap",
        "--metric-regex",
        r"score=(\d+)",
        "--runs",
        "3",
        "--json",
        "--",
        "python3",
        "-c",
        prog,
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["params"]["workload"], "custom");
    assert_eq!(v["params"]["footprint_measured"], true);
    let footprint = v["params"]["size_bytes"].as_u64().unwrap();
    // Two 64 MiB arrays at the peak, and the interpreter.
    assert!(footprint > 128 << 20, "footprint {footprint}");
    let rows = v["results"].as_array().unwrap();
    let row = |sys: &str| rows.iter().find(|r| r["system"] == sys).unwrap().clone();
    for sys in ["local", "farmem"] {
        let r = row(sys);
        assert_eq!(r["metric"].as_f64(), Some(25165824.0), "{r}");
        assert_eq!(r["unit"], "(regex)");
        // The median of three runs, between their fastest and slowest.
        let (lo, mid, hi) = (
            r["seconds_min"].as_f64().unwrap(),
            r["seconds"].as_f64().unwrap(),
            r["seconds_max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{r}");
        assert_eq!(r["runs"].as_array().unwrap().len(), 3);
    }
    assert_eq!(
        row("farmem")["local_budget_bytes"].as_u64().unwrap(),
        (footprint / 2).next_multiple_of(1 << 20)
    );
    // A system that cannot run a program says so in its cell.
    assert!(row("ssd-mmap")["unavailable"]
        .as_str()
        .unwrap()
        .contains("built-in workloads"));
}
