//! `farmem numa`: plans on fixture topologies (seed 000's 2 x 8 and 4 x 8
//! core machines), and real runs on this machine (one node: 1 x 1).

use crate::common::programs::serial;
use crate::common::*;
use serde_json::Value;

fn numa(args: &[&str]) -> (bool, String, String) {
    let o = farmem().arg("numa").args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn fixture(name: &str) -> String {
    repo()
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn topology_of_fixture_machines() {
    let (ok, out, err) = numa(&["topology", "--sysfs", &fixture("sysfs-2node")]);
    assert!(ok, "{err}");
    assert!(out.starts_with("available: 2 nodes (0-1)"), "{out}");
    assert!(out.contains("node 1 cpus: 8-15,24-31"));
    assert!(out.contains("   0:  10  21"), "{out}");
    let (ok, out, _) = numa(&["topology", "--sysfs", &fixture("sysfs-4node"), "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(v["distances"][0], serde_json::json!([10, 16, 16, 22]));
}

#[test]
fn plans_for_two_and_four_nodes() {
    let (ok, out, _) = numa(&["xy", "--sysfs", &fixture("sysfs-2node"), "--dry-run"]);
    assert!(ok);
    assert_eq!(out.lines().count(), 4);
    assert!(
        out.contains("X=1 Y=0: --membind=1 --cpunodebind=0  (CPUs 0-7,16-23)"),
        "{out}"
    );
    let (_, out, _) = numa(&["xy", "--sysfs", &fixture("sysfs-4node"), "--dry-run"]);
    assert_eq!(out.lines().count(), 16);
    let (_, out, _) = numa(&[
        "policies",
        "--sysfs",
        &fixture("sysfs-4node"),
        "--dry-run",
        "--",
        "true",
    ]);
    assert_eq!(out.lines().count(), 11);
    assert!(out.contains("--interleave=0-3") && out.contains("--preferred=3"));
    // A fixture describes another machine: running on it is refused.
    let (ok, _, err) = numa(&["xy", "--sysfs", &fixture("sysfs-2node")]);
    assert!(!ok && err.contains("--dry-run"), "{err}");
}

#[test]
fn memwrite_matrix_for_real_with_placement_checked() {
    let _g = serial();
    let (ok, out, err) = numa(&["xy", "--runs", "1", "--passes", "3", "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1, "one node here");
    let c = &cells[0];
    assert!(
        c["seconds"].as_f64().unwrap() > 0.0 && c["later_pass_seconds"].as_f64().unwrap() > 0.0
    );
    assert_eq!(c["slowdown_pct"].as_f64().unwrap(), 0.0);
    // The worker's move_pages census found its pages on node 0.
    assert!(c["by_node"]["0"].as_u64().unwrap() >= 30 << 20, "{c}");
    assert!(v["note"].as_str().unwrap().contains("one NUMA node"));
}

#[test]
fn hackbench_and_memslap_run_for_real() {
    let _g = serial();
    let (ok, out, err) = numa(&["xy", "--workload", "hackbench", "--runs", "1", "--csv"]);
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with("0,0,"), "{out}");
    let (ok, out, err) = numa(&["xy", "--workload", "memslap", "--runs", "1", "--csv"]);
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with("0,0,"), "{out}");
}

#[test]
fn policies_parse_rates_and_stop_at_the_duration() {
    let _g = serial();
    let (ok, out, err) = numa(&[
        "policies",
        "--rate-regex",
        "rate=([0-9.]+)",
        "--json",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3; do echo rate=$((i*10)); done",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = v["results"].as_array().unwrap();
    assert_eq!(
        r.len(),
        5,
        "default, bind 0, localalloc, interleave, preferred 0"
    );
    assert!(r.iter().all(|x| x["mean_rate"].as_f64() == Some(20.0)));
    let (ok, out, _) = numa(&[
        "policies",
        "--duration",
        "0.3",
        "--csv",
        "--",
        "sleep",
        "30",
    ]);
    assert!(ok);
    for l in out.lines().skip(1) {
        let secs: f64 = l.split(',').nth(1).unwrap().parse().unwrap();
        assert!(secs < 5.0, "--duration stops the command: {l}");
    }
}

#[test]
fn bad_input_is_refused_clearly() {
    for (args, want) in [
        (
            vec!["exec", "--membind", "7", "--", "true"],
            "node 7 does not exist",
        ),
        (
            vec!["exec", "--membind", "0", "--interleave", "0", "--", "true"],
            "exclusive",
        ),
        (
            vec!["exec", "--cpunodebind", "a-b", "--", "true"],
            "not a CPU or node list",
        ),
        (
            vec!["policies", "--rate-regex", "(", "--", "true"],
            "not a valid regular expression",
        ),
        (
            vec!["policies", "--rate-regex", "nomatch=(\\d+)", "--", "true"],
            "matched no number",
        ),
        (vec!["xy", "--runs", "0"], "at least 1"),
        (
            vec!["topology", "--sysfs", "/nonexistent"],
            "cannot read the NUMA topology",
        ),
    ] {
        let (ok, _, err) = numa(&args);
        assert!(!ok, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `numa matrix`: the plan of the 2- and 4-node fixture machines (every
/// pair, memory bound to X, the CPUs of Y), and a real run here (1x1):
/// latency and bandwidth measured, the pages on the bound node, the heat
/// maps drawn, and the result read back by `farmem report`.
#[test]
fn matrix_plans_the_fixture_machines_and_runs_here() {
    let _g = serial();
    let (ok, out, err) = numa(&["matrix", "--sysfs", &fixture("sysfs-2node"), "--dry-run"]);
    assert!(ok, "{err}");
    for cell in [
        "X=0 Y=0: --membind=0 --cpunodebind=0  (CPUs 0-7,16-23)",
        "X=0 Y=1: --membind=0 --cpunodebind=1  (CPUs 8-15,24-31)",
        "X=1 Y=0: --membind=1 --cpunodebind=0",
        "X=1 Y=1: --membind=1 --cpunodebind=1",
    ] {
        assert!(out.contains(cell), "{cell}: {out}");
    }
    let (ok, out, _) = numa(&["matrix", "--sysfs", &fixture("sysfs-4node"), "--dry-run"]);
    assert!(ok);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("X=")).count(),
        16,
        "{out}"
    );
    let (ok, _, err) = numa(&["matrix", "--sysfs", &fixture("sysfs-4node")]);
    assert!(!ok && err.contains("--dry-run"), "{err}");

    let dir = std::env::temp_dir().join(format!("farmem-matrix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("m.png");
    let (ok, out, err) = numa(&[
        "matrix",
        "--quick",
        "--json",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = v["matrix"].as_array().unwrap();
    let nodes = v["nodes"].as_array().unwrap().len();
    assert_eq!(m.len(), nodes * nodes);
    for c in m {
        assert!(c["latency_ns"].as_f64().unwrap() > 1.0, "{c}");
        assert!(c["read_gbps"].as_f64().unwrap() > 0.0, "{c}");
        let on = c["pages_by_node"].as_object().unwrap();
        assert_eq!(
            on.keys().collect::<Vec<_>>(),
            vec![&c["mem_node"].to_string()],
            "{c}"
        );
    }
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
    let j = dir.join("m.json");
    std::fs::write(&j, &out).unwrap();
    let html = dir.join("m.html");
    let o = farmem()
        .args(["report", j.to_str().unwrap(), "-o", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(
        h.contains("numa matrix") && h.matches("<svg").count() >= 1,
        "{h}"
    );
    std::fs::remove_dir_all(dir).ok();
}
