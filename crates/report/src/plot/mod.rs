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

mod heatmap;
mod series;

pub use heatmap::{time_and_slowdown, HeatCells, Heatmap, HeatmapPair};
pub use series::Series;
pub(crate) use series::{draw_lines, xy_panel};

/// What a figure of one kind of result (in that kind's module) draws with.
pub(crate) mod kit {
    pub(crate) use super::{
        beside_legend, bytes, chart_and_legend, chart_on, color, draw_lines, err, legend,
        log_ticks, mesh, number, ratios, systems, times, wants_log, xy_panel, Chart, Figure, Frame,
        Swatch, GREY, PANEL,
    };
    pub(crate) use crate::ReportError;
    pub(crate) use plotters::coord::combinators::{LogCoord, WithKeyPoints};
    pub(crate) use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
    pub(crate) use plotters::coord::Shift;
    pub(crate) use plotters::prelude::*;
    pub(crate) use plotters::style::text_anchor::{HPos, Pos, VPos};
    pub(crate) use std::ops::Range;
    pub(crate) use std::path::Path;
    pub(crate) type Result<T> = std::result::Result<T, ReportError>;
}

use crate::ReportError;
use farmem_sys::format_size;
use plotters::chart::MeshStyle;
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

type Result<T> = std::result::Result<T, ReportError>;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Width of the legend column at the right of a chart, in pixels.
const LEGEND_W: u32 = 290;
pub(crate) const GREY: RGBColor = RGBColor(120, 120, 120);

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

pub(crate) fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bundled file is a valid TrueType font; a failure here is a
        // build defect, and plots would then fail with "FontUnavailable".
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

pub(crate) fn err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> ReportError {
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

pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
pub(crate) enum Swatch {
    /// A filled square: a series of points.
    Square,
    /// A line: a reference line or a level.
    Line,
    /// A cross: a run that failed.
    Cross,
}

/// A legend in its own area (never over data), one entry per line.
pub(crate) fn legend<DB: DrawingBackend>(
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
pub(crate) fn wants_log(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo > 10.0
}

/// Tick labels for a ratio axis: 1.5×, 10×.
pub(crate) fn times(v: &f64) -> String {
    if *v >= 10.0 || (*v - v.round()).abs() < 1e-9 {
        format!("{v:.0}×")
    } else {
        format!("{v:.1}×")
    }
}

/// Tick labels for a plain axis: no decimals a tick does not have (`2000`,
/// `450`, `2.5`, `0.25`), as many as a value below 1 needs.
pub(crate) fn number(v: &f64) -> String {
    let a = v.abs();
    let decimals = if a >= 10.0 || a == 0.0 {
        0
    } else if a >= 1.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.decimals$}");
    // 2.50 -> 2.5, 3.0 -> 3
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Tick labels for an axis of sizes in bytes: 4K, 1M.
pub(crate) fn bytes(v: &f64) -> String {
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
pub(crate) struct Frame {
    pub(crate) caption: u32,
    pub(crate) margin: u32,
    pub(crate) x_area: u32,
    pub(crate) y_area: u32,
    pub(crate) ticks: u32,
}

/// The frame of each panel of a probe figure.
pub(crate) const PANEL: Frame = Frame {
    caption: 15,
    margin: 12,
    x_area: 44,
    y_area: 64,
    ticks: 14,
};

/// A chart with an x and a y axis, as plotters types it.
pub(crate) type Chart<'a, DB, X, Y> = ChartContext<'a, DB, Cartesian2d<X, Y>>;

/// A chart on `area` with its caption and frame, over the axes `x` and `y`
/// (ranges, or log scales of them); its mesh comes from [`mesh`].
pub(crate) fn chart_on<'a, DB, X, Y>(
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
pub(crate) fn mesh<'a, 'b, DB, X, Y>(
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
pub(crate) fn chart_and_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
) -> Result<(DrawingArea<DB, Shift>, DrawingArea<DB, Shift>)>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    Ok(beside_legend(root))
}

/// An area split into the chart and, at its right, the legend column.
pub(crate) fn beside_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    area.split_horizontally(area.dim_in_pixel().0 - LEGEND_W)
}

/// Labels for a log axis over `[lo, hi]`: 1, 2 and 5 of each decade, or
/// only the powers of ten when that would crowd it. Plotters alone labels
/// only powers of ten, which leaves a range inside one decade with one
/// label or none.
pub(crate) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
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

#[cfg(test)]
mod tests;
