//! `farmem numa`: plans on fixture topologies (seed 000's 2 x 8 and 4 x 8
//! core machines), and real runs on this machine (one node: 1 x 1).

mod common;
use common::*;
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
    let (ok, out, err) = numa(&["xy", "--workload", "hackbench", "--runs", "1", "--csv"]);
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with("0,0,"), "{out}");
    let (ok, out, err) = numa(&["xy", "--workload", "memslap", "--runs", "1", "--csv"]);
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with("0,0,"), "{out}");
}

#[test]
fn policies_parse_rates_and_stop_at_the_duration() {
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
