use super::*;

fn cell(system: &str, e: f64, rel: f64, metric: f64) -> serde_json::Value {
    serde_json::json!({ "system": system, "expansion": e, "seconds": rel,
        "relative_runtime": rel, "metric": metric, "unit": "Medges/s" })
}

fn doc(results: Vec<serde_json::Value>) -> BenchDoc {
    serde_json::from_value(serde_json::json!({
        "machine": {},
        "params": { "workload": "pagerank", "size_bytes": 134217728u64, "expansion": [2.0, 4.0],
                    "threads": 2, "runs": 3 },
        "results": results,
    }))
    .unwrap()
}

/// Columns stay apart however wide a cell is.
#[test]
fn bench_table_columns_never_touch() {
    let d = doc(vec![
        cell("local", 1.0, 1.0, 564.0),
        cell("swap", 2.0, 11.3, 55.339),
        cell("swap", 4.0, 15.0, 38.171),
        cell("farmem", 2.0, 4.08, 147.0),
        cell("farmem", 4.0, 4.62, 121.0),
    ]);
    let t = table(&d);
    let row = t.lines().find(|l| l.starts_with("swap")).unwrap();
    assert!(row.contains("(55.3 Medges/s)  "), "{t}");
    assert!(!row.contains(")1"), "{t}");
    assert_eq!(short(55.339), "55.3");
    assert_eq!(short(0.001234), "1.23e-3");
    assert_eq!(short(f64::NAN), "-");
}

/// A cell that did not run was written with `null` times; it reads back
/// as a failure, not as 0×.
#[test]
fn a_failed_cell_reads_back_from_nulls() {
    let mut swap = cell("swap", 2.0, 0.0, 0.0);
    for k in ["seconds", "relative_runtime", "metric"] {
        swap[k] = serde_json::Value::Null;
    }
    swap["unavailable"] = "killed by signal 9 (OOM?)".into();
    let d = doc(vec![cell("local", 1.0, 1.0, 564.0), swap]);
    let c = &d.results[1];
    assert!(c.seconds.is_nan() && relative(c).is_none());
    assert!(failure(c).is_some());
    assert!(!table(&d).contains("0.00×"));
    // And it round-trips.
    let again: BenchDoc = serde_json::from_value(json(&d)).unwrap();
    assert!(again.results[1].relative_runtime.is_nan());
}

/// A field renamed or missing is an error that names it, not a blank
/// column.
#[test]
fn a_result_missing_a_field_it_needs_is_refused_by_name() {
    let mut c = cell("farmem", 2.0, 4.0, 1.0);
    c.as_object_mut().unwrap().remove("relative_runtime");
    let v = serde_json::json!({
        "machine": {},
        "params": { "workload": "qsort", "size_bytes": 1, "expansion": [2.0], "threads": 1, "runs": 1 },
        "results": [c],
    });
    let e = serde_json::from_value::<BenchDoc>(v)
        .unwrap_err()
        .to_string();
    assert!(e.contains("relative_runtime"), "{e}");
}
