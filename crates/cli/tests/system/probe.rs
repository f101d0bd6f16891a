//! `farmem probe`: output schemas and argument checks (quick runs).

use crate::common::programs::serial;
use crate::common::*;
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
    let _g = serial();
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
    let _g = serial();
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
    let _g = serial();
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
    let _g = serial();
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
    let _g = serial();
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

/// `farmem probe loaded`: a curve per mix, each from the idle point to no
/// delay, drawing more bandwidth as the delay falls; the far tier under
/// load; a PNG and an SVG plot; and the same in an HTML report.
#[test]
fn loaded_gives_a_curve_per_mix_the_far_tier_plots_and_a_report() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-loaded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("l.png");
    let html = dir.join("l.html");
    let v = json(&[
        "loaded",
        "--quick",
        "--mix",
        "1:0,2:1-nt",
        "--json",
        "--plot",
        png.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ]);
    let curves = v["loaded"]["curves"].as_array().unwrap();
    let mixes: Vec<&str> = curves.iter().map(|c| c["mix"].as_str().unwrap()).collect();
    assert_eq!(mixes, ["1:0", "2:1-nt"]);
    let cal: Vec<f64> = v["loaded"]["calibration_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(cal.windows(2).all(|w| w[0] >= w[1]), "{cal:?}");
    for c in curves {
        let pts = c["points"].as_array().unwrap();
        assert_eq!(pts.len(), 1 + cal.len(), "{c}");
        assert!(pts[0]["delay"].is_null(), "the idle point first: {c}");
        for p in pts {
            assert!(p["latency_ns"].as_f64().unwrap() > 0.0, "{p}");
        }
        let bw = |p: &serde_json::Value| p["bandwidth_mbps"].as_f64().unwrap();
        assert!(
            bw(pts.last().unwrap()) > bw(&pts[1]),
            "no delay draws more than the longest: {c}"
        );
    }
    let far = v["far_loaded"].as_array().unwrap();
    assert!(far.len() >= 2 && far[0]["streams"] == 0, "{far:?}");
    assert!(far.iter().all(|p| p["p50_us"].as_f64().unwrap() > 0.0));
    let img = std::fs::read(&png).unwrap();
    assert_eq!(&img[..8], b"\x89PNG\r\n\x1a\n");
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(
        h.contains("<h3>loaded latency</h3>")
            && h.contains("<h3>the far tier under load</h3>")
            && h.contains("<svg"),
        "{h}"
    );
    let (ok, _, err) = probe(&["loaded", "--mix", "0:0"]);
    assert!(
        !ok && err.contains("R:W") || err.contains("not both 0"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}
