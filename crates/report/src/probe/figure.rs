//! A probe result's figures: the latency ladder with its levels and the far
//! tiers, or latency under load.

use crate::plot::kit::*;
use farmem_probe::far::Tier;
use farmem_probe::levels::{Level, Point};
use farmem_probe::suite::Report as ProbeReport;
use farmem_sys::format_size;

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
            loaded_panel(
                at.next()
                    .ok_or_else(|| ReportError::Draw("a panel too few".into()))?,
                self.title,
                curves,
            )?;
        }
        if let Some(far) = self.far {
            // Joined in order of bandwidth, as the mixes are.
            let pts = |f: fn(&farmem_probe::loaded::FarPoint) -> f64| {
                let mut v: Vec<_> = far.iter().map(|p| (p.bandwidth_mbps, f(p))).collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                v
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

/// Latency against the bandwidth the other threads draw, one line per mix,
/// as MLC draws it but readable at a glance:
/// - each mix joined in order of the bandwidth it reached (near full load a
///   shorter delay does not always draw more; the tables keep the order
///   measured), so no line doubles back;
/// - bandwidth on a log axis: each halving of the delay doubles the load,
///   so the points spread evenly instead of half of them piling up within
///   the first twentieth of a linear axis;
/// - the idle latency (no load), one measurement every mix starts from, as
///   one grey reference line instead of a marker per mix drawn on top of
///   each other.
fn loaded_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    curves: &[farmem_probe::loaded::Curve],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let lines: Vec<(String, Vec<(f64, f64)>)> = curves
        .iter()
        .map(|c| {
            let mut pts: Vec<_> = c
                .points
                .iter()
                .filter(|p| p.delay.is_some() && p.bandwidth_mbps > 0.0)
                .map(|p| (p.bandwidth_mbps, p.latency_ns))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (format!("mix {}", c.mix), pts)
        })
        .collect();
    let idle = curves
        .iter()
        .flat_map(|c| c.points.iter())
        .find(|p| p.delay.is_none())
        .map(|p| p.latency_ns);
    let all = || lines.iter().flat_map(|l| l.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, 0f64, idle.unwrap_or(0.0));
    for &(x, y) in all() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() || x1 <= 0.0 {
        // No point under load: the shared panel draws what there is.
        return xy_panel(
            area,
            title,
            "bandwidth drawn by the other threads (MB/s)",
            "latency (ns per dependent load)",
            &lines,
        );
    }
    let (x0, x1) = (x0 / 1.4, x1 * 1.4);
    let (chart, side) = chart_and_legend(area)?;
    let frame = Frame {
        caption: 16,
        y_area: 72,
        ..PANEL
    };
    let mut ch = chart_on(
        &chart,
        title,
        frame,
        (x0..x1).log_scale().with_key_points(log_ticks(x0, x1)),
        0f64..y1 * 1.1,
    )?;
    mesh(
        &mut ch,
        frame,
        "bandwidth drawn by the other threads (MB/s, log scale)",
        "latency (ns per dependent load)",
    )
    .x_label_formatter(&number)
    .y_label_formatter(&number)
    .draw()
    .map_err(err)?;
    let mut entries = Vec::new();
    if let Some(ns) = idle {
        ch.draw_series(std::iter::once(PathElement::new(
            [(x0, ns), (x1, ns)],
            GREY.stroke_width(2),
        )))
        .map_err(err)?;
        entries.push((format!("idle, no load: {ns:.0} ns"), GREY, Swatch::Line));
    }
    draw_lines(&mut ch, &lines, &mut entries)?;
    legend(&side, 60, &entries)
}

/// `farmem probe --plot FILE`: for `loaded`, latency against bandwidth
/// drawn (and the far tier under load); else latency against working set
/// and far throughput against transfer size.
pub fn write(path: &Path, r: &ProbeReport) -> Result<()> {
    if r.params.as_ref().is_some_and(|p| p.what == "loaded") {
        return crate::plot::write(
            path,
            &Loaded {
                curves: r.loaded.as_ref().map(|l| &l.curves[..]),
                far: r.far_loaded.as_deref(),
                title: "loaded latency: one thread chases, the others stream",
            },
        );
    }
    let title = r.machine.as_ref().map(|m| m.summary()).unwrap_or_default();
    crate::plot::write(
        path,
        &Probe {
            curve: r.curve.as_deref(),
            levels: r.levels.as_deref(),
            far: r.far.as_deref(),
            title: &title,
        },
    )
}
