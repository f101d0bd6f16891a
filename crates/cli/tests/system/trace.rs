//! The policy trace: `farmem run --trace FILE` records a real program's
//! faults, prefetches and evictions, and `farmem trace` explains them against
//! Belady's MIN computed from the program's reference string.

use crate::common::programs::serial;
use crate::common::*;
use std::path::{Path, PathBuf};

fn num_after(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    line[line.find(label).unwrap() + label.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?}: {line}"))
}

/// The program's run under `farmem run --stats --trace`: its stdout, and
/// farmem's statistics (stderr).
fn traced_run(exe: &Path, local: &str, prefetch: &str, trace: &Path) -> (String, String) {
    let o = farmem()
        .args(["run", "--local", local, "--stats", "--trace"])
        .arg(trace)
        .arg("--")
        .arg(exe)
        .env("FARMEM_PREFETCH", prefetch)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success() && out.contains("ok (0 bad)"),
        "{out}\n{err}"
    );
    (out, err)
}

/// The reference string's references and distinct pages, from the line
/// "reference string FILE: R references to P pages (...)".
fn reference_string(report: &str) -> (u64, u64) {
    let line = report
        .lines()
        .find(|l| l.starts_with("reference string"))
        .unwrap_or_else(|| panic!("no reference string line: {report}"));
    let nums: Vec<u64> = line
        .split(": ")
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(nums.len() >= 2, "{line}");
    (nums[0], nums[1])
}

/// A test program's two traces: `tests/programs/NAME.c` run at 16M with
/// prefetch (the run) and at 1M without (the reference string), in a
/// directory of their own. Returns the directory, the two traces and the
/// run's output and `--stats`.
fn record(name: &str) -> (PathBuf, PathBuf, PathBuf, (String, String)) {
    let exe = build_plain(
        "gcc",
        &format!("tests/programs/{name}.c"),
        name,
        &["-Wextra"],
    );
    let dir = std::env::temp_dir().join(format!("farmem-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (run_t, refs_t) = (dir.join("run.trace"), dir.join("refs.trace"));
    let run = traced_run(&exe, "16M", "64", &run_t);
    traced_run(&exe, "1M", "0", &refs_t);
    (dir, run_t, refs_t, run)
}

/// `farmem trace RUN --refs REFS ARGS`'s report.
fn explain(run_t: &Path, refs_t: &Path, args: &[&str]) -> String {
    let o = farmem()
        .arg("trace")
        .arg(run_t)
        .arg("--refs")
        .arg(refs_t)
        .args(args)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn a_trace_agrees_with_the_statistics_and_min_bounds_the_run() {
    let _g = serial();
    let (dir, run_t, refs_t, (_, stats)) = record("trace_pattern");
    let out = explain(&run_t, &refs_t, &[]);

    // The trace counts what --stats counts.
    let line = stats
        .lines()
        .find(|l| l.contains("prefetched (used / wasted)"))
        .unwrap();
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(num_after(&out, "prefetched  "), nums[0], "{out}\n{line}");
    assert_eq!(
        num_after(&out, "prefetched used / wasted"),
        nums[1],
        "{out}\n{line}"
    );

    // MIN is a lower bound on what the run brought in, and the sequential
    // passes were prefetched with little waste while the random reads were not.
    let min = num_after(&out, "Belady's MIN fetches");
    let fetched = num_after(&out, "this run brought in");
    assert!(min > 16384 && min <= fetched, "{out}");
    let prefetched = nums[0];
    let wasted = nums[2];
    assert!(
        prefetched > 16384,
        "the sequential passes were prefetched: {out}"
    );
    assert!(wasted * 100 <= prefetched * 15, "waste over 15%: {out}");

    // By range, the columns add up to the totals: every reference, every
    // page MIN fetches, the run brought in and the replay fetched falls in
    // exactly one range.
    let by = explain(&run_t, &refs_t, &["--by-range", "8M"]);
    let rows: Vec<Vec<u64>> = by
        .lines()
        .skip_while(|l| !l.contains("by range of 8M"))
        .skip(2)
        .take_while(|l| l.starts_with("    "))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(4)
                .map(|w| w.parse().unwrap())
                .collect()
        })
        .collect();
    // 64 MiB of data, one allocation: eight ranges of 8M, or nine where it
    // does not start on a range's edge.
    assert!((8..=9).contains(&rows.len()), "{by}");
    let col = |i: usize| rows.iter().map(|r| r[i]).sum::<u64>();
    assert_eq!(col(0), reference_string(&by).0, "{by}");
    assert_eq!(col(1), min, "{by}");
    assert_eq!(col(2), fetched, "{by}");
    assert_eq!(col(3), num_after(&by, "farmem's policy, replayed"), "{by}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_trace_arguments_are_named() {
    let o = farmem()
        .args(["run", "--trace", "/nonexistent-dir/t", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("FARMEM_TRACE"), "{err}");

    let junk = std::env::temp_dir().join(format!("farmem-not-a-trace-{}", std::process::id()));
    std::fs::write(&junk, b"hello").unwrap();
    let o = farmem().arg("trace").arg(&junk).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a farmem trace"),
        "{err}"
    );
    std::fs::remove_file(junk).ok();

    for (args, says) in [
        (&["--by-range", "8M"][..], "pass --refs too"),
        (
            &["--refs", "/dev/null", "--by-range", "5000"][..],
            "whole number of 4K pages",
        ),
        (
            &["--refs", "/dev/null", "--by-range", "0"][..],
            "whole number of 4K pages",
        ),
    ] {
        let o = farmem()
            .args(["trace", "/dev/null"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{args:?}: {err}");
    }
}

/// Pages the program gives back are in the trace, and the replay and MIN
/// treat them as dead: array A is freed before array B is made (in A's
/// range, if the allocator reuses it) and read six times under a budget B
/// fits in. Before releases were traced, MIN took B's first touches for
/// hits on A's pages, and the replay kept A's dead pages.
#[test]
fn pages_given_back_are_dead_to_min_and_the_replay() {
    let _g = serial();
    let (dir, run_t, refs_t, (said, _)) = record("trace_release");
    // What the checks below tell apart needs B in A's old range (farmem's
    // allocator gives a freed range to the next allocation that fits).
    assert!(said.contains("b reuses a's range: yes"), "{said}");
    let out = explain(&run_t, &refs_t, &[]);
    // A's 8192 pages and B's 3072, each given back once.
    assert!(
        num_after(&out, "given back by the program") >= 8192 + 3072,
        "{out}"
    );
    assert_eq!(
        reference_string(&out).1,
        8192 + 3072,
        "every page of B is new: {out}"
    );
    let min = num_after(&out, "Belady's MIN fetches");
    let lru = num_after(&out, "LRU seeing every hit");
    let run = num_after(&out, "this run brought in");
    let replay = num_after(&out, "farmem's policy, replayed");
    // Every first touch is a fetch (or a zero-fill), and A's second pass
    // cannot all hit in a budget of half of A.
    assert!(
        min >= 8192 + 3072 + 4096 - 256 && min <= lru && min <= run,
        "{out}"
    );
    // The replay runs the runtime's policy: it agrees with the run.
    assert!(
        replay.abs_diff(run) * 10 <= run,
        "replay far from the run: {out}"
    );
    std::fs::remove_dir_all(dir).ok();
}
