//! Lines over time or load: `farmem numa xy` passes, policies, loaded latency.

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
    mesh(&mut ch, frame, x_desc, y_desc)
        .x_label_formatter(&number)
        .y_label_formatter(&number)
        .draw()
        .map_err(err)?;
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
