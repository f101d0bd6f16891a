//! Heat maps of a node × node matrix: the chart kit's grid figure (numa X×Y
//! placements, the idle latency and bandwidth matrix).

use super::*;

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

/// Heat-map cells: (memory node, CPU node, label, how much worse than
/// local).
pub type HeatCells = Vec<(usize, usize, String, f64)>;
