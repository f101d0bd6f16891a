//! Every `--plot` and every picture in `farmem report`, drawn with plotters
//! as SVG or PNG (chosen by the file's extension).
//!
//! Text is laid out, and in a PNG drawn, with a bundled font (DejaVu Sans),
//! so a plot needs no fonts on the machine. Each figure is a [`Figure`]: one
//! drawing routine for both formats and for the report's inline SVG.
//!
//! Conventions, which the report's browser test checks: every data point is
//! a filled circle (legends use squares, so the circles in an SVG are the
//! points); a run that failed is a cross at the top edge with its reason
//! beside it; legends sit in their own column, never over the data.

use crate::ReportError;
use farmem_bench::Report as BenchReport;
use farmem_numa::matrix::{MatrixCell, MatrixReport};
use farmem_numa::policies::PolicyReport;
use farmem_numa::xy::XyReport;
use farmem_probe::far::Tier;
use farmem_probe::levels::{Level, Point};
use farmem_probe::suite::Report as ProbeReport;
use farmem_runtime::config::format_size;
use plotters::chart::MeshStyle;
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::Path;
use std::sync::Once;

type Result<T> = std::result::Result<T, ReportError>;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Width of the legend column at the right of a chart, in pixels.
const LEGEND_W: u32 = 290;
const GREY: RGBColor = RGBColor(120, 120, 120);

/// A plot's file format, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

pub fn format_of(p: &Path) -> Result<Format> {
    match p.extension().and_then(|e| e.to_str()) {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(ReportError::Format(format!(
            "--plot {}: name the file *.svg (scalable, for pages) or *.png (for slides and chats)",
            p.display()
        ))),
    }
}

/// Validate a `--plot FILE` before any measuring starts.
pub fn check_path(p: Option<&Path>) -> Result<()> {
    p.map_or(Ok(()), |p| format_of(p).map(drop))
}

/// Something that can be drawn: its size in pixels and how to draw it.
pub trait Figure {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bundled file is a valid TrueType font; a failure here is a
        // build defect, and plots would then fail with "FontUnavailable".
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

fn err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> ReportError {
    ReportError::Draw(e.to_string())
}

/// Write a figure to `path`, as SVG or PNG by its extension.
pub fn write(path: &Path, fig: &impl Figure) -> Result<()> {
    fonts();
    let written = |r: Result<()>| {
        r.map_err(|e| ReportError::Write {
            path: path.display().to_string(),
            why: e.to_string(),
        })
    };
    match format_of(path)? {
        Format::Svg => {
            let root = SVGBackend::new(path, fig.size()).into_drawing_area();
            fig.draw(&root)?;
            written(root.present().map_err(err))
        }
        Format::Png => {
            let root = BitMapBackend::new(path, fig.size()).into_drawing_area();
            fig.draw(&root)?;
            written(root.present().map_err(err))
        }
    }
}

/// A figure as SVG text, for inlining into a page.
pub fn svg_string(fig: &impl Figure) -> Result<String> {
    fonts();
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, fig.size()).into_drawing_area();
        fig.draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(s)
}

/// Colours by series index; farmem's own results come first in every plot.
const PALETTE: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Swatch {
    /// A filled square: a series of points.
    Square,
    /// A line: a reference line or a level.
    Line,
    /// A cross: a run that failed.
    Cross,
}

/// A legend in its own area (never over data), one entry per line.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    top: i32,
    entries: &[(String, RGBColor, Swatch)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 16).into_font();
    for ((label, col, sw), y) in entries.iter().zip((top..).step_by(24)) {
        match sw {
            Swatch::Square => area
                .draw(&Rectangle::new([(4, y - 5), (16, y + 7)], col.filled()))
                .map_err(err)?,
            Swatch::Line => area
                .draw(&PathElement::new(
                    [(2, y + 1), (18, y + 1)],
                    col.stroke_width(2),
                ))
                .map_err(err)?,
            Swatch::Cross => area
                .draw(&Cross::new((10, y + 1), 5, col.stroke_width(2)))
                .map_err(err)?,
        }
        area.draw(&Text::new(label.clone(), (24, y - 6), font.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// A log scale when the values span more than a decade, else linear from 0.
fn wants_log(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo > 10.0
}

/// Tick labels for a ratio axis: 1.5×, 10×.
fn times(v: &f64) -> String {
    if *v >= 10.0 || (*v - v.round()).abs() < 1e-9 {
        format!("{v:.0}×")
    } else {
        format!("{v:.1}×")
    }
}

/// Tick labels for an axis of sizes in bytes: 4K, 1M.
fn bytes(v: &f64) -> String {
    // A tick of a log axis of sizes: positive, and far below 2^64 (`as`
    // saturates, and drops only the fraction of a byte).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let b = *v as u64;
    format_size(b)
}

/// How a chart is framed: the caption's and the tick labels' font sizes,
/// the margin, and the room for the tick labels below (x) and at the left
/// (y), in pixels.
#[derive(Clone, Copy)]
struct Frame {
    caption: u32,
    margin: u32,
    x_area: u32,
    y_area: u32,
    ticks: u32,
}

/// The frame of each panel of a probe figure.
const PANEL: Frame = Frame {
    caption: 15,
    margin: 12,
    x_area: 44,
    y_area: 64,
    ticks: 14,
};

/// A chart with an x and a y axis, as plotters types it.
type Chart<'a, DB, X, Y> = ChartContext<'a, DB, Cartesian2d<X, Y>>;

/// A chart on `area` with its caption and frame, over the axes `x` and `y`
/// (ranges, or log scales of them); its mesh comes from [`mesh`].
fn chart_on<'a, DB, X, Y>(
    area: &'a DrawingArea<DB, Shift>,
    caption: impl AsRef<str>,
    f: Frame,
    x: X,
    y: Y,
) -> Result<Chart<'a, DB, X::CoordDescType, Y::CoordDescType>>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: AsRangedCoord,
    Y: AsRangedCoord,
{
    ChartBuilder::on(area)
        .caption(caption, ("sans-serif", f.caption))
        .margin(f.margin)
        .x_label_area_size(f.x_area)
        .y_label_area_size(f.y_area)
        .build_cartesian_2d(x, y)
        .map_err(err)
}

/// The mesh of a chart in every figure's style, its axes described; the
/// caller adds what is its own (tick count and labels) and draws it.
fn mesh<'a, 'b, DB, X, Y>(
    ch: &'b mut Chart<'a, DB, X, Y>,
    f: Frame,
    x_desc: &str,
    y_desc: &str,
) -> MeshStyle<'a, 'b, X, Y, DB>
where
    DB: DrawingBackend,
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
{
    let mut m = ch.configure_mesh();
    m.x_desc(x_desc)
        .y_desc(y_desc)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", f.ticks))
        .light_line_style(RGBColor(238, 238, 238));
    m
}

// ---------------------------------------------------------------- bench

/// The distinct expansion ratios of (system, expansion) cells, all-local
/// left out, in increasing order.
pub fn ratios<'a>(cells: impl Iterator<Item = (&'a str, f64)>) -> Vec<f64> {
    let mut e: Vec<f64> = cells
        .filter(|(s, _)| *s != "local")
        .map(|(_, e)| e)
        .collect();
    e.sort_by(|a, b| a.total_cmp(b));
    e.dedup();
    e
}

/// The systems of bench cells in order of first appearance, all-local left
/// out.
pub fn systems<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::new();
    for n in names {
        if n != "local" && !v.contains(&n) {
            v.push(n);
        }
    }
    v
}

/// A white figure split into the chart and, at its right, the legend column.
fn chart_and_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
) -> Result<(DrawingArea<DB, Shift>, DrawingArea<DB, Shift>)>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    Ok(beside_legend(root))
}

/// An area split into the chart and, at its right, the legend column.
fn beside_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    area.split_horizontally(area.dim_in_pixel().0 - LEGEND_W)
}

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

/// Latency against working set (log-log) with the detected levels marked,
/// and far throughput against transfer size; whichever are present.
pub struct Probe<'a> {
    pub curve: Option<&'a [Point]>,
    pub levels: Option<&'a [Level]>,
    pub far: Option<&'a [Tier]>,
    pub title: &'a str,
}

impl Probe<'_> {
    pub fn check(&self) -> Result<()> {
        if self.curve.is_none() && self.far.is_none() {
            return Err(ReportError::Format(
                "--plot: nothing to plot (use it with latency, far or all)".into(),
            ));
        }
        Ok(())
    }

    fn latency<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, c: &[Point]) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (chart, side) = beside_legend(area);
        let x0 = c.first().map_or(4096, |p| p.bytes) as f64;
        let x1 = c.last().map_or(1 << 30, |p| p.bytes) as f64;
        let y0 = c.iter().map(|p| p.ns).fold(f64::MAX, f64::min) * 0.7;
        let y1 = c.iter().map(|p| p.ns).fold(0.0, f64::max) * 1.4;
        let mut ch = sizes_chart(
            &chart,
            format!("load latency by working set — {}", self.title),
            x0 / 1.2..x1 * 1.2,
            y0..y1,
            "working set (bytes)",
            "latency (ns per dependent load)",
        )?;
        let col = color(0);
        ch.draw_series(LineSeries::new(
            c.iter().map(|p| (p.bytes as f64, p.ns)),
            col.stroke_width(2),
        ))
        .map_err(err)?;
        ch.draw_series(
            c.iter()
                .map(|p| Circle::new((p.bytes as f64, p.ns), 4, col.filled())),
        )
        .map_err(err)?;
        let red = color(1);
        for l in self.levels.unwrap_or(&[]) {
            ch.draw_series(std::iter::once(PathElement::new(
                [(x0 / 1.2, l.ns), (l.bytes as f64, l.ns)],
                red.stroke_width(1),
            )))
            .map_err(err)?;
            ch.draw_series(std::iter::once(Text::new(
                format!("{} {:.1} ns ≤ {}", l.name, l.ns, format_size(l.bytes)),
                (x0 / 1.1, l.ns * 1.08),
                ("sans-serif", 14).into_font().color(&red),
            )))
            .map_err(err)?;
        }
        let mut entries = vec![("measured latency".to_string(), col, Swatch::Square)];
        if self.levels.is_some_and(|l| !l.is_empty()) {
            entries.push(("detected level".into(), red, Swatch::Line));
        }
        legend(&side, 60, &entries)
    }

    fn far<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, tiers: &[Tier]) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (chart, side) = beside_legend(area);
        let pts: Vec<_> = tiers.iter().flat_map(|t| t.curve.iter()).collect();
        let y1 = pts
            .iter()
            .map(|c| c.read_mbps.max(c.write_mbps))
            .fold(1.0, f64::max)
            * 2.0;
        let y0 = pts
            .iter()
            .map(|c| c.read_mbps.min(c.write_mbps))
            .fold(f64::MAX, f64::min)
            .max(0.1)
            * 0.5;
        let xs = pts.iter().map(|c| c.transfer_bytes as f64);
        let (x0, x1) = xs.fold((4096f64, 4096f64), |(a, b), x| (a.min(x), b.max(x)));
        let mut ch = sizes_chart(
            &chart,
            "far tiers: throughput by transfer size",
            x0 / 1.3..x1 * 1.3,
            y0..y1,
            "transfer size (bytes per request)",
            "throughput (MB/s)",
        )?;
        let mut entries = Vec::new();
        for (k, t) in tiers.iter().enumerate() {
            // Read and write of one tier in two shades of one hue.
            let read = color(2 * k);
            let write = color(2 * k + 1);
            for (col, get, what) in [
                (
                    read,
                    (|c: &farmem_probe::far::Throughput| c.read_mbps) as fn(_) -> f64,
                    "read",
                ),
                (write, |c| c.write_mbps, "write"),
            ] {
                let p: Vec<(f64, f64)> = t
                    .curve
                    .iter()
                    .map(|c| (c.transfer_bytes as f64, get(c)))
                    .filter(|p| p.1 > 0.0)
                    .collect();
                ch.draw_series(LineSeries::new(p.iter().copied(), col.stroke_width(2)))
                    .map_err(err)?;
                ch.draw_series(p.iter().map(|&p| Circle::new(p, 4, col.filled())))
                    .map_err(err)?;
                entries.push((format!("{} {what}", t.name), col, Swatch::Square));
            }
        }
        legend(&side, 60, &entries)
    }
}

/// A chart of [`sizes_chart`]: log axes, the y axis with its own ticks.
type SizesChart<'a, DB> = Chart<'a, DB, LogCoord<f64>, WithKeyPoints<LogCoord<f64>>>;

/// A probe panel, its mesh drawn: sizes in bytes on a base-2 log x axis,
/// against a log y axis labelled by [`log_ticks`].
fn sizes_chart<'a, DB>(
    area: &'a DrawingArea<DB, Shift>,
    caption: impl AsRef<str>,
    x: Range<f64>,
    y: Range<f64>,
    x_desc: &str,
    y_desc: &str,
) -> Result<SizesChart<'a, DB>>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    let ticks = log_ticks(y.start, y.end);
    let mut ch = chart_on(
        area,
        caption,
        PANEL,
        x.log_scale().base(2.0),
        y.log_scale().with_key_points(ticks),
    )?;
    mesh(&mut ch, PANEL, x_desc, y_desc)
        .x_label_formatter(&bytes)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    Ok(ch)
}

/// Labels for a log axis over `[lo, hi]`: 1, 2 and 5 of each decade, or
/// only the powers of ten when that would crowd it. Plotters alone labels
/// only powers of ten, which leaves a range inside one decade with one
/// label or none.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = (lo.max(1e-9), hi.max(lo * 1.0001));
    // The log10 of an f64 lies within ±324 (an infinity saturates), far
    // inside i32.
    #[allow(clippy::cast_possible_truncation)]
    let decades = lo.log10().floor() as i32..=hi.log10().ceil() as i32;
    let all = |steps: &[f64]| -> Vec<f64> {
        decades
            .clone()
            .flat_map(|k| steps.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let fine = all(&[1.0, 2.0, 5.0]);
    if fine.len() <= 10 {
        fine
    } else {
        all(&[1.0])
    }
}

impl Figure for Probe<'_> {
    fn size(&self) -> (u32, u32) {
        let panels = self.curve.is_some() as u32 + self.far.is_some() as u32;
        (1000, 480 * panels.max(1))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        self.check()?;
        root.fill(&WHITE).map_err(err)?;
        let n = self.curve.is_some() as usize + self.far.is_some() as usize;
        let parts = root.split_evenly((n, 1));
        let mut i = 0;
        if let Some(c) = self.curve {
            self.latency(&parts[i], c)?;
            i += 1;
        }
        if let Some(t) = self.far {
            self.far(&parts[i], t)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- numa

/// Heat map of a memory-node × CPU-node matrix: each cell coloured by its
/// slowdown against local, labelled with its time and slowdown.
pub struct Heatmap<'a> {
    pub ids: &'a [usize],
    /// (memory node, CPU node, label, how much worse than local: 0 is
    /// white, the worst cell the deepest red).
    pub cells: &'a [(usize, usize, String, f64)],
    pub title: &'a str,
}

/// The label of an X×Y cell: its time, and its slowdown against local.
pub fn time_and_slowdown(secs: f64, slow: f64) -> String {
    format!("{secs:.4} s, {slow:+.1}%")
}

impl Figure for Heatmap<'_> {
    fn size(&self) -> (u32, u32) {
        let n = u32::try_from(self.ids.len().max(1)).unwrap_or(u32::MAX);
        (
            n.saturating_mul(150).saturating_add(240),
            n.saturating_mul(110).saturating_add(150),
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let ids = self.ids;
        let n = ids.len().max(1);
        let end = i32::try_from(n).unwrap_or(i32::MAX);
        root.fill(&WHITE).map_err(err)?;
        let frame = Frame {
            margin: 16,
            ..PANEL
        };
        let mut ch = chart_on(root, self.title, frame, 0..end, 0..end)?;
        let name = |v: &i32| {
            let i = usize::try_from(*v).ok()?;
            ids.get(i).map(|i| format!("node {i}"))
        };
        mesh(&mut ch, frame, "threads on node Y", "memory on node X")
            .disable_mesh()
            .x_labels(n)
            .y_labels(n)
            .x_label_formatter(&|v| name(v).unwrap_or_default())
            .y_label_formatter(&|v| name(v).unwrap_or_default())
            .draw()
            .map_err(err)?;
        let slot = |node: &usize| {
            let i = ids.iter().position(|i| i == node)?;
            i32::try_from(i).ok()
        };
        let worst = self.cells.iter().map(|c| c.3).fold(1.0, f64::max);
        for (x, y, label, slow) in self.cells {
            let (Some(xi), Some(yi)) = (slot(x), slot(y)) else {
                continue;
            };
            // White for local, deepening red with the slowdown.
            let f = (slow.max(0.0) / worst).clamp(0.0, 1.0);
            // f is within [0, 1], so the shade within [76.5, 255].
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let shade = (255.0 * (1.0 - 0.7 * f)) as u8;
            ch.draw_series(std::iter::once(Rectangle::new(
                [(yi, xi), (yi + 1, xi + 1)],
                RGBColor(255, shade, shade).filled(),
            )))
            .map_err(err)?;
            ch.draw_series(std::iter::once(Rectangle::new(
                [(yi, xi), (yi + 1, xi + 1)],
                GREY.stroke_width(1),
            )))
            .map_err(err)?;
            ch.draw_series(std::iter::once(
                EmptyElement::at((yi, xi + 1))
                    + Text::new(label.clone(), (10, 12), ("sans-serif", 14)),
            ))
            .map_err(err)?;
        }
        Ok(())
    }
}

/// Two heat maps side by side (`farmem numa matrix`: latency, bandwidth).
pub struct HeatmapPair<'a>(pub Heatmap<'a>, pub Heatmap<'a>);

impl Figure for HeatmapPair<'_> {
    fn size(&self) -> (u32, u32) {
        let (w, h) = self.0.size();
        (2 * w, h)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (l, r) = root.split_horizontally(root.dim_in_pixel().0 / 2);
        self.0.draw(&l)?;
        self.1.draw(&r)
    }
}

/// One line per named series of (seconds since start, value) points: a
/// command's own rate under each NUMA policy.
pub struct Series<'a> {
    pub lines: &'a [(String, Vec<(f64, f64)>)],
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
}

impl Figure for Series<'_> {
    fn size(&self) -> (u32, u32) {
        (1000, 520)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        xy_panel(root, self.title, self.x_desc, self.y_desc, self.lines)
    }
}

/// Lines with a marker on every point, linear axes from zero, the legend in
/// a column of its own.
fn xy_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (chart, side) = chart_and_legend(area)?;
    let (mut x1, mut y1) = (1e-9f64, 1e-9f64);
    for &(x, y) in lines.iter().flat_map(|l| l.1.iter()) {
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    let frame = Frame {
        caption: 16,
        y_area: 72,
        ..PANEL
    };
    let mut ch = chart_on(&chart, title, frame, 0f64..x1 * 1.04, 0f64..y1 * 1.1)?;
    mesh(&mut ch, frame, x_desc, y_desc).draw().map_err(err)?;
    let mut entries = Vec::new();
    for (k, (name, s)) in lines.iter().enumerate() {
        let col = color(k);
        ch.draw_series(LineSeries::new(s.iter().copied(), col.stroke_width(2)))
            .map_err(err)?;
        ch.draw_series(s.iter().map(|&p| Circle::new(p, 3, col.filled())))
            .map_err(err)?;
        entries.push((name.clone(), col, Swatch::Square));
    }
    legend(&side, 60, &entries)
}

/// Loaded latency (`farmem probe loaded`): latency against the bandwidth
/// other threads draw, one curve per traffic mix; and the far tier's
/// single-page latency against the bandwidth streamed from its servers.
pub struct Loaded<'a> {
    pub curves: Option<&'a [farmem_probe::loaded::Curve]>,
    pub far: Option<&'a [farmem_probe::loaded::FarPoint]>,
    pub title: &'a str,
}

impl Figure for Loaded<'_> {
    fn size(&self) -> (u32, u32) {
        let panels = self.curves.is_some() as u32 + self.far.is_some() as u32;
        (1000, 520 * panels.max(1))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let panels = self.curves.is_some() as usize + self.far.is_some() as usize;
        let areas = root.split_evenly((panels.max(1), 1));
        let mut at = areas.iter();
        if let Some(curves) = self.curves {
            // Drawn in order of bandwidth: near full load, a shorter delay
            // does not always draw more (the tables keep the order measured).
            let lines: Vec<_> = curves
                .iter()
                .map(|c| {
                    let mut pts: Vec<_> = c
                        .points
                        .iter()
                        .map(|p| (p.bandwidth_mbps, p.latency_ns))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (format!("mix {}", c.mix), pts)
                })
                .collect();
            xy_panel(
                at.next()
                    .ok_or_else(|| ReportError::Draw("a panel too few".into()))?,
                self.title,
                "bandwidth drawn by the other threads (MB/s)",
                "latency (ns per dependent load)",
                &lines,
            )?;
        }
        if let Some(far) = self.far {
            let pts = |f: fn(&farmem_probe::loaded::FarPoint) -> f64| {
                far.iter()
                    .map(|p| (p.bandwidth_mbps, f(p)))
                    .collect::<Vec<_>>()
            };
            xy_panel(
                at.next()
                    .ok_or_else(|| ReportError::Draw("a panel too few".into()))?,
                "far tier under load: one-page reads while others stream",
                "bandwidth streamed from the servers (MB/s)",
                "one-page read latency (µs)",
                &[
                    ("p50".to_string(), pts(|p| p.p50_us)),
                    ("p99".to_string(), pts(|p| p.p99_us)),
                ],
            )?;
        }
        Ok(())
    }
}

/// The matrix as heat-map cells: latency, then bandwidth, each shaded by
/// how much worse it is than the CPU node's own memory.
pub type HeatCells = Vec<(usize, usize, String, f64)>;

fn matrix_cells(results: &[MatrixCell]) -> (HeatCells, HeatCells) {
    let local = |y: usize, f: fn(&MatrixCell) -> f64| {
        results
            .iter()
            .find(|r| r.mem_node == y && r.cpu_node == y)
            .map_or(f64::NAN, f)
    };
    let lat = results
        .iter()
        .map(|r| {
            let l = local(r.cpu_node, |c| c.latency_ns);
            (
                r.mem_node,
                r.cpu_node,
                format!("{:.1} ns", r.latency_ns),
                (r.latency_ns / l - 1.0) * 100.0,
            )
        })
        .collect();
    let bw = results
        .iter()
        .map(|r| {
            let l = local(r.cpu_node, |c| c.read_gbps);
            (
                r.mem_node,
                r.cpu_node,
                format!("{:.2} GB/s", r.read_gbps),
                (l / r.read_gbps - 1.0) * 100.0,
            )
        })
        .collect();
    (lat, bw)
}

/// The matrix's two heat maps (latency, bandwidth), handed to `f`.
pub fn matrix_figure<R>(
    ids: &[usize],
    results: &[MatrixCell],
    f: impl FnOnce(&HeatmapPair) -> Result<R>,
) -> Result<R> {
    let (lat, bw) = matrix_cells(results);
    f(&HeatmapPair(
        Heatmap {
            ids,
            cells: &lat,
            title: "idle latency (ns per dependent load)",
        },
        Heatmap {
            ids,
            cells: &bw,
            title: "read bandwidth, all CPUs of node Y (GB/s)",
        },
    ))
}

/// `farmem probe --plot FILE`: for `loaded`, latency against bandwidth
/// drawn (and the far tier under load); else latency against working set
/// and far throughput against transfer size.
pub fn write_probe(path: &Path, r: &ProbeReport) -> Result<()> {
    if r.params.as_ref().and_then(|p| p["what"].as_str()) == Some("loaded") {
        return write(
            path,
            &Loaded {
                curves: r.loaded.as_ref().map(|l| &l.curves[..]),
                far: r.far_loaded.as_deref(),
                title: "loaded latency: one thread chases, the others stream",
            },
        );
    }
    let title = r.machine.as_ref().map(|m| m.summary()).unwrap_or_default();
    write(
        path,
        &Probe {
            curve: r.curve.as_deref(),
            levels: r.levels.as_deref(),
            far: r.far.as_deref(),
            title: &title,
        },
    )
}

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

/// `farmem numa xy --plot FILE`: a heat map of time and slowdown, memory
/// node against CPU node.
pub fn write_xy(path: &Path, r: &XyReport) -> Result<()> {
    let cells: HeatCells = r
        .cells
        .iter()
        .map(|c| {
            (
                c.mem_node,
                c.cpu_node,
                time_and_slowdown(c.seconds, c.slowdown_pct),
                c.slowdown_pct,
            )
        })
        .collect();
    let title = format!("{}: time, and slowdown vs local (X = Y)", r.params.workload);
    write(
        path,
        &Heatmap {
            ids: &r.topology.ids(),
            cells: &cells,
            title: &title,
        },
    )
}

/// `farmem numa policies --plot FILE`: the rate over time, a line per
/// policy.
pub fn write_policies(path: &Path, r: &PolicyReport) -> Result<()> {
    let lines: Vec<(String, Vec<(f64, f64)>)> = r
        .results
        .iter()
        .map(|p| (p.policy.clone(), p.series.clone()))
        .collect();
    write(
        path,
        &Series {
            lines: &lines,
            title: "the command's rate over time by NUMA policy",
            x_desc: "time since start (s)",
            y_desc: "rate (the number --rate-regex takes)",
        },
    )
}

/// `farmem numa matrix --plot FILE`: latency and bandwidth heat maps side
/// by side.
pub fn write_matrix(path: &Path, r: &MatrixReport) -> Result<()> {
    let ids: Vec<usize> = r.nodes.iter().map(|n| n.id).collect();
    matrix_figure(&ids, &r.matrix, |f| write(path, f))
}

#[cfg(test)]
mod tests {
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
}
