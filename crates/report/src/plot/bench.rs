//! `farmem bench`: time against expansion, one line per system.

use super::*;

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

// ---------------------------------------------------------------- probe

/// `farmem bench --plot FILE`: runtime relative to all-local against
/// expansion, one line per system, failures marked.
pub fn write_bench(path: &Path, r: &BenchReport) -> Result<()> {
    let cells: Vec<BenchCell> = r
        .results
        .iter()
        .map(|c| BenchCell {
            system: c.system.clone(),
            expansion: c.expansion,
            relative: Some(c.relative_runtime).filter(|r| r.is_finite()),
            failure: c.unavailable.as_deref().map(farmem_bench::failure_words),
        })
        .collect();
    let title = format!(
        "{} {}: runtime relative to all-local",
        r.workload,
        format_size(r.size)
    );
    write(
        path,
        &Bench {
            title: &title,
            cells: &cells,
        },
    )
}
