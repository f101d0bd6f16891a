//! Plots with plotters, as SVG: text in SVG needs no font engine, while a
//! bitmap would need one (font-kit and the system's fontconfig).

use anyhow::{anyhow, Result};
use farmem_probe::far::Tier;
use farmem_probe::levels::{Level, Point};
use farmem_runtime::config::format_size;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// `--plot FILE` must name an SVG file: plots are written as SVG only.
pub fn check_svg_path(p: Option<&Path>) -> Result<()> {
    if let Some(p) = p {
        if p.extension().and_then(|e| e.to_str()) != Some("svg") {
            return Err(anyhow!(
                "--plot {}: plots are written as SVG; name the file *.svg (convert with e.g. rsvg-convert for PNG)",
                p.display()
            ));
        }
    }
    Ok(())
}

/// Latency against working set (log-log) with the detected levels marked, and
/// far throughput against transfer size; whichever are present.
pub fn probe(
    path: &Path,
    curve: Option<&[Point]>,
    levels: Option<&[Level]>,
    far: Option<&[Tier]>,
    title: &str,
) -> Result<()> {
    let panels = curve.is_some() as u32 + far.is_some() as u32;
    if panels == 0 {
        return Err(anyhow!(
            "--plot: nothing to plot (use it with latency, far or all)"
        ));
    }
    let size = (1000, 480 * panels);
    let root = SVGBackend::new(path, size).into_drawing_area();
    draw(&root, curve, levels, far, title)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    curve: Option<&[Point]>,
    levels: Option<&[Level]>,
    far: Option<&[Tier]>,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plot: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let parts = root.split_evenly((curve.is_some() as usize + far.is_some() as usize, 1));
    let mut i = 0;
    if let Some(c) = curve {
        let area = &parts[i];
        i += 1;
        let x0 = c.first().map(|p| p.bytes).unwrap_or(4096) as f64;
        let x1 = c.last().map(|p| p.bytes).unwrap_or(1 << 30) as f64;
        let y0 = c.iter().map(|p| p.ns).fold(f64::MAX, f64::min) * 0.7;
        let y1 = c.iter().map(|p| p.ns).fold(0.0, f64::max) * 1.4;
        let mut ch = ChartBuilder::on(area)
            .caption(format!("load latency — {title}"), ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(err)?;
        ch.configure_mesh()
            .x_desc("working set")
            .y_desc("ns per load")
            .x_label_formatter(&|v| format_size(*v as u64))
            .draw()
            .map_err(err)?;
        ch.draw_series(LineSeries::new(
            c.iter().map(|p| (p.bytes as f64, p.ns)),
            &BLUE,
        ))
        .map_err(err)?;
        ch.draw_series(
            c.iter()
                .map(|p| Circle::new((p.bytes as f64, p.ns), 3, BLUE.filled())),
        )
        .map_err(err)?;
        for l in levels.unwrap_or(&[]) {
            let style = ShapeStyle::from(&RED).stroke_width(1);
            ch.draw_series(LineSeries::new([(x0, l.ns), (l.bytes as f64, l.ns)], style))
                .map_err(err)?;
            ch.draw_series(std::iter::once(Text::new(
                format!("{} {:.1} ns ≤ {}", l.name, l.ns, format_size(l.bytes)),
                (x0 * 1.1, l.ns * 1.08),
                ("sans-serif", 13).into_font().color(&RED),
            )))
            .map_err(err)?;
        }
    }
    if let Some(tiers) = far {
        let area = &parts[i];
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
        let mut ch = ChartBuilder::on(area)
            .caption("far tiers: throughput by transfer size", ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (4096f64..(4u64 << 20) as f64).log_scale(),
                (y0..y1).log_scale(),
            )
            .map_err(err)?;
        ch.configure_mesh()
            .x_desc("transfer size")
            .y_desc("MB/s")
            .x_label_formatter(&|v| format_size(*v as u64))
            .draw()
            .map_err(err)?;
        let colors = [BLUE, RED, GREEN, MAGENTA, CYAN];
        for (k, t) in tiers.iter().enumerate() {
            let col = colors[k % colors.len()];
            ch.draw_series(LineSeries::new(
                t.curve
                    .iter()
                    .map(|c| (c.transfer_bytes as f64, c.read_mbps)),
                col.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("{} read", t.name))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], col.stroke_width(2)));
            ch.draw_series(LineSeries::new(
                t.curve
                    .iter()
                    .map(|c| (c.transfer_bytes as f64, c.write_mbps)),
                col.stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("{} write", t.name))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], col.stroke_width(1)));
        }
        ch.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// Heat map of an X×Y matrix: each cell coloured by its slowdown against
/// local, labelled with its time and slowdown.
pub fn heatmap(
    path: &Path,
    ids: &[usize],
    cells: &[(usize, usize, f64, f64)],
    title: &str,
) -> Result<()> {
    let n = ids.len().max(1);
    let root =
        SVGBackend::new(path, (200 + 140 * n as u32, 140 + 110 * n as u32)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("plot: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 15))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0..n as i32, 0..n as i32)
        .map_err(err)?;
    ch.configure_mesh()
        .disable_mesh()
        .x_desc("threads on node Y")
        .y_desc("memory on node X")
        .x_labels(n)
        .y_labels(n)
        .x_label_formatter(&|v| {
            ids.get(*v as usize)
                .map(|i| i.to_string())
                .unwrap_or_default()
        })
        .y_label_formatter(&|v| {
            ids.get(*v as usize)
                .map(|i| i.to_string())
                .unwrap_or_default()
        })
        .draw()
        .map_err(err)?;
    let worst = cells.iter().map(|c| c.3).fold(1.0, f64::max);
    for &(x, y, secs, slow) in cells {
        let (Some(xi), Some(yi)) = (
            ids.iter().position(|&i| i == x),
            ids.iter().position(|&i| i == y),
        ) else {
            continue;
        };
        // White for local, deepening red with the slowdown.
        let f = (slow.max(0.0) / worst).clamp(0.0, 1.0);
        let col = RGBColor(
            255,
            (255.0 * (1.0 - 0.7 * f)) as u8,
            (255.0 * (1.0 - 0.7 * f)) as u8,
        );
        ch.draw_series(std::iter::once(Rectangle::new(
            [(yi as i32, xi as i32), (yi as i32 + 1, xi as i32 + 1)],
            col.filled(),
        )))
        .map_err(err)?;
        ch.draw_series(std::iter::once(Text::new(
            format!("{secs:.4} s {slow:+.1}%"),
            (yi as i32, xi as i32),
            ("sans-serif", 13).into_font(),
        )))
        .map_err(err)?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

/// One line per named series of (seconds, value) points.
pub fn series(
    path: &Path,
    lines: &[(String, Vec<(f64, f64)>)],
    title: &str,
    y_desc: &str,
) -> Result<()> {
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("plot: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let pts = lines.iter().flat_map(|l| l.1.iter());
    let (mut x1, mut y1) = (1e-9f64, 1e-9f64);
    for &(x, y) in pts {
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    let mut ch = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x1 * 1.02, 0f64..y1 * 1.1)
        .map_err(err)?;
    ch.configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (k, (name, s)) in lines.iter().enumerate() {
        let col = colors[k % colors.len()];
        ch.draw_series(LineSeries::new(s.iter().copied(), col.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
