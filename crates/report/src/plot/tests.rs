use super::*;

#[test]
fn log_axes_get_labels_inside_one_decade() {
    assert_eq!(log_ticks(150.0, 1300.0), vec![200.0, 500.0, 1000.0]);
    assert_eq!(
        log_ticks(1.0, 1e6),
        vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]
    );
    assert!(log_ticks(300.0, 400.0).is_empty() || log_ticks(300.0, 400.0).len() < 3);
}

fn cell(s: &str, e: f64, r: Option<f64>, f: Option<&str>) -> BenchCell {
    BenchCell {
        system: s.into(),
        expansion: e,
        relative: r,
        failure: f.map(str::to_string),
    }
}

/// The defects of issue 16: a one-point system drew nothing, the x axis
/// said "seconds", failures were absent, and there was no 1.0 line.
#[test]
fn bench_svg_has_a_marker_per_point_axis_titles_and_failures() {
    let cells = [
        cell("local", 1.0, Some(1.0), None),
        cell("farmem", 1.67, Some(1.9), None),
        cell("farmem", 6.0, Some(3.1), None),
        cell("swap", 1.67, Some(2.48), None),
        cell("swap", 6.0, None, Some("OOM-killed")),
    ];
    let s = svg_string(&Bench {
        title: "qsort 1G",
        cells: &cells,
    })
    .unwrap();
    assert_eq!(s.matches("<circle").count(), 3, "one marker per point");
    assert!(s.contains("memory expansion: footprint / local memory (×)"));
    assert!(s.contains("runtime relative to all-local (×, lower is better)"));
    assert!(!s.contains("seconds"));
    assert!(s.contains("swap: OOM-killed"));
    assert!(s.contains("all-local = 1.0×"));
    assert!(s.contains("run failed"));
}

#[test]
fn bench_y_axis_goes_logarithmic_past_a_decade() {
    let lin = [cell("farmem", 2.0, Some(3.0), None)];
    let b = Bench {
        title: "",
        cells: &lin,
    };
    let (r, log, fail) = b.y_axis();
    assert!(!log);
    assert_eq!(r.start, 0.0);
    assert!(fail < r.end && fail > 3.0);
    let wide = [
        cell("farmem", 2.0, Some(1.1), None),
        cell("swap", 4.0, Some(60.0), None),
    ];
    let (r, log, fail) = Bench {
        title: "",
        cells: &wide,
    }
    .y_axis();
    assert!(log);
    assert!(r.start < 1.0 && r.end > 60.0 && fail > 60.0 && fail < r.end);
}

#[test]
fn the_x_axis_has_one_slot_per_expansion() {
    let cells = [
        cell("local", 1.0, Some(1.0), None),
        cell("farmem", 6.0, Some(2.0), None),
        cell("swap", 1.67, None, Some("OOM-killed")),
        cell("zram", 6.0, Some(3.0), None),
    ];
    let b = Bench {
        title: "",
        cells: &cells,
    };
    assert_eq!(b.expansions(), vec![1.67, 6.0]);
    let s = svg_string(&b).unwrap();
    let labels: Vec<&str> = s
        .split("</text>")
        .filter_map(|t| t.rsplit('>').next())
        .map(str::trim)
        .collect();
    assert!(
        labels.contains(&"1.7×") && labels.contains(&"6×"),
        "ticks name the ratios: {labels:?}"
    );
}

#[test]
fn png_plots_render_text_with_the_bundled_font() {
    let dir = std::env::temp_dir().join(format!("farmem-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("b.png");
    let cells = [cell("farmem", 2.0, Some(1.5), None)];
    write(
        &p,
        &Bench {
            title: "t",
            cells: &cells,
        },
    )
    .unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(bytes.len() > 5000, "a chart with text, not a blank image");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plot_paths_are_svg_or_png() {
    assert_eq!(format_of(Path::new("a.svg")).unwrap(), Format::Svg);
    assert_eq!(format_of(Path::new("a.png")).unwrap(), Format::Png);
    let e = format_of(Path::new("a.jpg")).unwrap_err().to_string();
    assert!(e.contains("*.svg") && e.contains("*.png"), "{e}");
}

#[test]
fn plain_ticks_carry_no_false_decimals() {
    let n = |v: f64| number(&v);
    assert_eq!(n(2000.0), "2000");
    assert_eq!(n(450.0), "450");
    assert_eq!(n(2.5), "2.5");
    assert_eq!(n(3.0), "3");
    assert_eq!(n(0.25), "0.25");
    assert_eq!(n(0.0), "0");
    assert_eq!(n(12.4), "12");
}
