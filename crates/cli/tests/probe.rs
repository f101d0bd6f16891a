//! `farmem probe`: output schemas and argument checks (quick runs).

mod common;
use common::*;
use serde_json::Value;

fn probe(args: &[&str]) -> (bool, String, String) {
    let o = farmem().arg("probe").args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = probe(args);
    assert!(ok, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"))
}

#[test]
fn latency_json_has_curve_levels_machine_and_params() {
    let v = json(&["latency", "--max", "64M", "--quick", "--json"]);
    let curve = v["curve"].as_array().unwrap();
    assert!(curve.len() >= 20);
    for p in curve {
        assert!(p["bytes"].as_u64().unwrap() >= 4096 && p["ns"].as_f64().unwrap() > 0.0);
    }
    let levels = v["levels"].as_array().unwrap();
    assert!(!levels.is_empty());
    for l in levels {
        let name = l["name"].as_str().unwrap();
        assert!(["L1", "L2", "L3", "L4", "DRAM"].contains(&name), "{name}");
        assert!(l["bytes"].as_u64().unwrap() > 0 && l["ns"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(levels[0]["name"], "L1");
    assert!(v["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(v["machine"]["kernel"].as_str().is_some());
    assert_eq!(v["params"]["latency"]["pages"], "4k");
    assert_eq!(
        v["params"]["latency"]["timer"],
        "clock_gettime(CLOCK_MONOTONIC)"
    );
}

#[test]
fn csv_and_svg_plot() {
    let dir = std::env::temp_dir().join(format!("farmem-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("lat.svg");
    let (ok, out, err) = probe(&[
        "latency",
        "--max",
        "1M",
        "--quick",
        "--csv",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().next(), Some("bytes,ns"));
    assert!(out.lines().count() > 5);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg") && text.contains("load latency"),
        "not our SVG"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn far_json_has_rtt_and_the_transfer_curve() {
    let v = json(&["far", "--quick", "--json"]);
    let tiers = v["far"].as_array().unwrap();
    assert_eq!(
        tiers.len(),
        1,
        "only the embedded server unless --file is given"
    );
    let t = &tiers[0];
    assert!(t["rtt"]["p50_us"].as_f64().unwrap() > 0.0);
    let curve = t["curve"].as_array().unwrap();
    assert_eq!(curve.first().unwrap()["transfer_bytes"], 4096);
    assert_eq!(curve.last().unwrap()["transfer_bytes"], 4 << 20);
    assert!(
        curve
            .iter()
            .all(|c| c["read_mbps"].as_f64().unwrap() > 0.0
                && c["write_mbps"].as_f64().unwrap() > 0.0)
    );
}

#[test]
fn faults_and_bandwidth() {
    let v = json(&["faults", "--quick", "--json"]);
    let kinds: Vec<&str> = v["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.iter().any(|k| k.starts_with("first touch, 4 KiB")));
    assert!(kinds.iter().any(|k| k.starts_with("far: fetch")));
    let v = json(&["bandwidth", "--quick", "--threads", "1", "--json"]);
    let b = v["bandwidth"].as_array().unwrap();
    assert_eq!(b.len(), 4);
    assert!(b
        .iter()
        .all(|r| r["gbps"].as_f64().unwrap() > 0.1 && r["threads"] == 1));
}

#[test]
fn bad_arguments_are_refused_clearly() {
    for (args, want) in [
        (vec!["latency", "--max", "1K"], "--max must be at least 4K"),
        (vec!["latency", "--pages", "big"], "not a page mode"),
        (vec!["bandwidth", "--threads", "0"], "--threads"),
        (vec!["latency", "--plot", "x.jpg"], "*.png"),
        (vec!["nonsense"], "invalid value"),
    ] {
        let (ok, _, err) = probe(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Each `--servers` set is a far tier of its own: one and two servers side by
/// side, and a transfer striped over two servers reads back.
#[test]
fn far_with_two_server_sets_gives_a_tier_each() {
    let a = Serve::start("128M");
    let b = Serve::start("128M");
    let c = Serve::start("128M");
    let two = format!("{},{}", b.addr, c.addr);
    let v = json(&[
        "far",
        "--quick",
        "--json",
        "--servers",
        &a.addr,
        "--servers",
        &two,
    ]);
    let names: Vec<&str> = v["far"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["far memory (1 server)", "far memory (2 servers)"]);
    for t in v["far"].as_array().unwrap() {
        let big = t["curve"].as_array().unwrap().last().unwrap().clone();
        assert!(big["read_mbps"].as_f64().unwrap() > 0.0, "{t}");
    }
}
