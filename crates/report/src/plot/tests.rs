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
