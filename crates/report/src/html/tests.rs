use super::*;

#[test]
fn result_files_are_read_or_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("farmem-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let probe = file("probe.json", r#"{"curve": [], "machine": {}}"#);
    assert_eq!(read_result(&probe).unwrap().0, Kind::Probe);
    for (p, why) in [
        (file("text.json", "tier size"), "not JSON"),
        (
            file("other.json", r#"{"a": 1}"#),
            "not a probe, numa or bench",
        ),
        (dir.join("missing.json"), "missing.json"),
    ] {
        let e = read_result(&p).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains(&*p.to_string_lossy()), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Columns stay apart however wide a cell is.
#[test]
fn bench_table_columns_never_touch() {
    let cell = |system: &str, e: f64, rel: f64, metric: f64| {
        serde_json::json!({ "system": system, "expansion": e, "seconds": rel,
            "relative_runtime": rel, "metric": metric, "unit": "Medges/s" })
    };
    let v = serde_json::json!({
        "params": { "workload": "pagerank", "size_bytes": 134217728u64, "threads": 2, "runs": 3 },
        "results": [cell("local", 1.0, 1.0, 564.0), cell("swap", 2.0, 11.3, 55.339),
                    cell("swap", 4.0, 15.0, 38.171), cell("farmem", 2.0, 4.08, 147.0),
                    cell("farmem", 4.0, 4.62, 121.0)],
    });
    let t = bench_table(&v);
    let row = t.lines().find(|l| l.starts_with("swap")).unwrap();
    assert!(row.contains("(55.3 Medges/s)  "), "{t}");
    assert!(!row.contains(")1"), "{t}");
    assert_eq!(short(55.339), "55.3");
    assert_eq!(short(0.001234), "1.23e-3");
    assert_eq!(short(f64::NAN), "-");
}
