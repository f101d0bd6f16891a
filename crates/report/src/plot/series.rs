//! Lines over time or load, a marker on every point: the chart kit's line
//! figure (policies' rates, loaded latency).

use super::*;

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
pub(crate) fn xy_panel<DB: DrawingBackend>(
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
    mesh(&mut ch, frame, x_desc, y_desc)
        .x_label_formatter(&number)
        .y_label_formatter(&number)
        .draw()
        .map_err(err)?;
    let mut entries = Vec::new();
    draw_lines(&mut ch, lines, &mut entries)?;
    legend(&side, 60, &entries)
}

/// Each line in its palette colour with a marker on every point, and its
/// legend entry.
pub(crate) fn draw_lines<DB, X, Y>(
    ch: &mut Chart<'_, DB, X, Y>,
    lines: &[(String, Vec<(f64, f64)>)],
    entries: &mut Vec<(String, RGBColor, Swatch)>,
) -> Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (k, (name, s)) in lines.iter().enumerate() {
        let col = color(k);
        ch.draw_series(LineSeries::new(s.iter().copied(), col.stroke_width(2)))
            .map_err(err)?;
        ch.draw_series(s.iter().map(|&p| Circle::new(p, 3, col.filled())))
            .map_err(err)?;
        entries.push((name.clone(), col, Swatch::Square));
    }
    Ok(())
}
