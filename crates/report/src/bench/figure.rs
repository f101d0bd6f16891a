//! A bench result's figure: runtime relative to all-local against
//! expansion, one line per system.

use super::{failure, relative, BenchDoc};
use crate::plot::kit::*;

/// One cell of a bench result: a system at an expansion ratio.
#[derive(Debug, Clone)]
pub struct BenchCell {
    pub system: String,
    pub expansion: f64,
    /// Runtime over all-local runtime, where the run succeeded.
    pub relative: Option<f64>,
    /// Why it did not, in a few words ("OOM-killed", "timed out (> 150 s)").
    pub failure: Option<String>,
}

/// Slowdown against expansion, one series per system, with the all-local
/// line at 1.0 and failed runs marked at the top edge.
pub struct Bench<'a> {
    pub title: &'a str,
    pub cells: &'a [BenchCell],
}

impl Bench<'_> {
    fn systems(&self) -> Vec<&str> {
        systems(self.cells.iter().map(|c| c.system.as_str()))
    }

    /// The y range (with room at the top for failure marks), whether it is
    /// logarithmic, and where failures are drawn.
    pub fn y_axis(&self) -> (Range<f64>, bool, f64) {
        let vals = self.cells.iter().filter_map(|c| c.relative);
        let (lo, hi) = vals.fold((1.0f64, 1.0f64), |(a, b), v| (a.min(v), b.max(v)));
        if wants_log(lo, hi) {
            (lo / 1.5..hi * 6.0, true, hi * 4.0)
        } else {
            (0.0..hi * 1.5, false, hi * 1.38)
        }
    }

    /// The expansions, in order: the x axis has one evenly spaced slot for
    /// each, labelled with its ratio.
    pub fn expansions(&self) -> Vec<f64> {
        ratios(self.cells.iter().map(|c| (c.system.as_str(), c.expansion)))
    }

    fn panel<DB, Y>(&self, area: &DrawingArea<DB, Shift>, y: Y, fail_y: f64) -> Result<()>
    where
        DB: DrawingBackend,
        DB::ErrorType: 'static,
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let exps = self.expansions();
        let slots = exps.len().max(1);
        let slot = |e: f64| exps.iter().position(|x| *x == e).unwrap_or(0);
        let index = |e: f64| slot(e) as f64;
        let xr = -0.5..slots as f64 - 0.5;
        let frame = Frame {
            caption: 19,
            margin: 14,
            x_area: 48,
            y_area: 64,
            ticks: 15,
        };
        let mut ch = chart_on(area, self.title, frame, xr, y)?;
        mesh(
            &mut ch,
            frame,
            "memory expansion: footprint / local memory (×)",
            "runtime relative to all-local (×, lower is better)",
        )
        // One tick per slot: a range n wide with n ticks puts them on the
        // integers, which the formatter names.
        .x_labels(slots)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            // A whole number, not negative (checked above); one too large
            // saturates, and `get` finds no ratio there.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let i = i as usize;
            exps.get(i).map(times).unwrap_or_default()
        })
        .y_label_formatter(&times)
        .draw()
        .map_err(err)?;
        ch.draw_series(std::iter::once(PathElement::new(
            [(-0.5, 1.0), (slots as f64 - 0.5, 1.0)],
            GREY.stroke_width(2),
        )))
        .map_err(err)?;
        let systems = self.systems();
        let n = systems.len() as f64;
        // Each system sits a few pixels beside the slot's centre, so equal
        // figures (farmem 6.20×, ssd-mmap 6.17× at one ratio) both show.
        let px = slots as f64 / f64::from(area.dim_in_pixel().0.max(1));
        let mut failed_at = vec![0i32; slots];
        for (k, s) in systems.iter().enumerate() {
            let col = color(k);
            let x = |e: f64| index(e) + 6.0 * px * (2.0 * k as f64 - (n - 1.0));
            let mut pts: Vec<(f64, f64)> = self
                .cells
                .iter()
                .filter(|c| c.system == *s)
                .filter_map(|c| c.relative.map(|r| (x(c.expansion), r)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            ch.draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(2)))
                .map_err(err)?;
            ch.draw_series(pts.iter().map(|&p| Circle::new(p, 5, col.filled())))
                .map_err(err)?;
            // Each figure beside its point, away from its neighbours: a log
            // axis has few labels to read it from.
            let (h, tx) = if (k as f64) < (n - 1.0) / 2.0 {
                (HPos::Right, -8)
            } else {
                (HPos::Left, 8)
            };
            let style = ("sans-serif", 13)
                .into_font()
                .color(&col)
                .pos(Pos::new(h, VPos::Center));
            ch.draw_series(pts.iter().map(|&(x, r)| {
                EmptyElement::at((x, r)) + Text::new(format!("{r:.2}×"), (tx, 0), style.clone())
            }))
            .map_err(err)?;
            // A failed run: a cross at the top with its reason above it,
            // one row per failure at that ratio.
            for c in self.cells.iter().filter(|c| c.system == *s) {
                if let (None, Some(f)) = (c.relative, &c.failure) {
                    let row = &mut failed_at[slot(c.expansion)];
                    let dy = 34 * *row;
                    *row += 1;
                    let style = TextStyle::from(("sans-serif", 15).into_font())
                        .pos(Pos::new(HPos::Center, VPos::Bottom));
                    ch.draw_series(std::iter::once(
                        EmptyElement::at((x(c.expansion), fail_y))
                            + Cross::new((0, dy), 6, col.stroke_width(3))
                            + Text::new(format!("{s}: {f}"), (0, dy - 9), style),
                    ))
                    .map_err(err)?;
                }
            }
        }
        Ok(())
    }
}

impl Figure for Bench<'_> {
    fn size(&self) -> (u32, u32) {
        (1000, 520)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (chart, side) = chart_and_legend(root)?;
        let (yr, log, fail_y) = self.y_axis();
        if log {
            self.panel(&chart, yr.log_scale(), fail_y)?;
        } else {
            self.panel(&chart, yr, fail_y)?;
        }
        let mut entries: Vec<(String, RGBColor, Swatch)> = self
            .systems()
            .iter()
            .enumerate()
            .map(|(k, s)| (s.to_string(), color(k), Swatch::Square))
            .collect();
        entries.push(("all-local = 1.0×".into(), GREY, Swatch::Line));
        if self.cells.iter().any(|c| c.relative.is_none()) {
            entries.push(("run failed (reason beside)".into(), BLACK, Swatch::Cross));
        }
        legend(&side, 60, &entries)
    }
}

/// `farmem bench --plot FILE`: runtime relative to all-local against
/// expansion, one line per system, failures marked.
pub fn write(path: &Path, d: &BenchDoc) -> Result<()> {
    let title = format!("{}: runtime relative to all-local", d.title());
    crate::plot::write(
        path,
        &Bench {
            title: &title,
            cells: &cells(d),
        },
    )
}

/// The figure's cells from the result's.
pub fn cells(d: &BenchDoc) -> Vec<BenchCell> {
    d.results
        .iter()
        .map(|c| BenchCell {
            system: c.system.clone(),
            expansion: c.expansion,
            relative: relative(c),
            failure: failure(c),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::svg_string;

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
        crate::plot::write(
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
}
