//! `farmem report` as a person sees it: rendered from fixed JSON (real
//! results committed under tests/fixtures/report) by headless Chromium, and
//! the screenshot checked where each plot's points must be.

// Pixel arithmetic on small test images: the casts below stay in range.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use crate::common::programs::serial;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURES: [&str; 5] = [
    "bench-qsort.json",
    "bench-memwrite.json",
    "probe-latency.json",
    "probe-far.json",
    "numa-xy.json",
];

fn fixture(name: &str) -> PathBuf {
    repo().join("crates/cli/tests/fixtures/report").join(name)
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("farmem-report-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn report(dir: &Path) -> String {
    let html = dir.join("r.html");
    let o = farmem()
        .arg("report")
        .args(FIXTURES.map(fixture))
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(html).unwrap()
}

/// The inline SVGs of a page, in order.
fn svgs(html: &str) -> Vec<&str> {
    html.split("<svg ")
        .skip(1)
        .map(|s| &s[..s.find("</svg>").expect("closed svg")])
        .collect()
}

/// The text of every `<text>` element.
fn texts(svg: &str) -> Vec<String> {
    let re = regex::Regex::new(r"<text[^>]*>\s*([^<]*?)\s*</text>").unwrap();
    re.captures_iter(svg).map(|c| c[1].to_string()).collect()
}

/// (cx, cy, fill) of every circle: the data points, by the plot convention.
fn circles(svg: &str) -> Vec<(f64, f64, [u8; 3])> {
    let re =
        regex::Regex::new(r##"<circle cx="([\d.]+)" cy="([\d.]+)"[^>]*fill="#([0-9A-Fa-f]{6})""##)
            .unwrap();
    re.captures_iter(svg)
        .map(|c| {
            let hex = u32::from_str_radix(&c[3], 16).unwrap();
            (
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
                [(hex >> 16) as u8, (hex >> 8) as u8, hex as u8],
            )
        })
        .collect()
}

#[test]
fn the_page_has_tables_a_summary_and_one_machine_line() {
    let dir = scratch("html");
    let h = report(&dir);
    // Real tables, no preformatted text.
    assert!(!h.contains("<pre>"), "tables must be HTML tables");
    assert!(h.matches("<table").count() >= 6);
    // The summary: per workload and expansion, farmem against each baseline.
    let summary = &h[h.find("id=summary").unwrap()..h.find("</section>").unwrap()];
    for want in [
        "farmem vs swap",
        "farmem vs zram",
        "qsort 256M",
        "memwrite 512M",
        "swap killed (signal 9)",
        "ssd-mmap timed out (&gt; 150 s)",
    ] {
        assert!(summary.contains(want), "summary lacks {want}");
    }
    // The machine once; the probe fixtures come from another machine and
    // say so in their own sections.
    assert_eq!(h.matches("Machine: ").count(), 1);
    assert_eq!(h.matches("Measured on: ").count(), 3);
    // farmem's statistics as a table.
    assert!(h.contains("<td class=l>fetched from backend</td>"));
    // Failed cells are named in the bench table, not just "unavailable".
    assert!(h.contains("<td class=fail"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn every_plot_has_its_markers_axis_titles_and_failures() {
    let dir = scratch("svg");
    let h = report(&dir);
    let s = svgs(&h);
    assert_eq!(s.len(), 5, "qsort, memwrite, latency, far, numa");
    // qsort: farmem 2 points, swap 1 (its 6x run was killed), zram 2,
    // ssd-mmap none (timed out twice). The lone swap point must be drawn.
    assert_eq!(circles(s[0]).len(), 5);
    assert!(
        circles(s[0]).iter().any(|c| c.2 == [0xD6, 0x27, 0x28]),
        "swap's one point"
    );
    // memwrite at one expansion only: four systems, four points.
    assert_eq!(circles(s[1]).len(), 4);
    for b in &s[..2] {
        assert!(b.contains("memory expansion: footprint / local memory (×)"));
        assert!(b.contains("runtime relative to all-local (×, lower is better)"));
        assert!(b.contains("all-local = 1.0×"));
    }
    assert!(s[0].contains("swap: killed (signal 9)"));
    assert!(
        s[0].contains("ssd-mmap: timed out (&gt; 150 s)")
            || s[0].contains("ssd-mmap: timed out (> 150 s)")
    );
    // memwrite spans 6x to 38x with 1.0 on the axis: a log scale.
    assert!(
        texts(s[1]).iter().any(|t| t == "100×"),
        "memwrite's y axis should be logarithmic"
    );
    let lat = std::fs::read_to_string(fixture("probe-latency.json")).unwrap();
    let points = serde_json::from_str::<serde_json::Value>(&lat).unwrap()["curve"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(circles(s[2]).len(), points);
    assert!(
        s[2].contains("working set (bytes)") && s[2].contains("latency (ns per dependent load)")
    );
    assert!(
        s[3].contains("transfer size (bytes per request)") && s[3].contains("throughput (MB/s)")
    );
    assert!(!circles(s[3]).is_empty());
    assert!(s[4].contains("memory on node X") && s[4].contains("threads on node Y"));
    std::fs::remove_dir_all(dir).ok();
}

fn chromium() -> PathBuf {
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(o) = Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
        {
            let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !p.is_empty() {
                return PathBuf::from(p);
            }
        }
    }
    panic!("headless Chromium is needed to check the report as a person sees it: install it with scripts/setup.sh (Debian package chromium)");
}

fn headless(dir: &Path, height: u32, extra: &[&str], page: &Path) -> std::process::Output {
    let o = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            &format!("--user-data-dir={}", dir.join("profile").display()),
            &format!("--window-size=1280,{height}"),
        ])
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// An RGB screenshot.
struct Shot {
    w: usize,
    h: usize,
    px: Vec<[u8; 3]>,
}

impl Shot {
    fn load(p: &Path) -> Shot {
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(p).unwrap()));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut buf).unwrap();
        let n = match info.color_type {
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            c => panic!("unexpected screenshot colour type {c:?}"),
        };
        let px = buf[..info.buffer_size()]
            .chunks(n)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        Shot {
            w: info.width as usize,
            h: info.height as usize,
            px,
        }
    }

    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.px[y * self.w + x]
    }

    /// Whether a pixel within `r` of (x, y) is close to `want`.
    fn near(&self, x: f64, y: f64, r: i64, want: [u8; 3]) -> bool {
        let (x, y) = (x.round() as i64, y.round() as i64);
        (-r..=r).any(|dy| {
            (-r..=r).any(|dx| {
                let (px, py) = (x + dx, y + dy);
                px >= 0 && py >= 0 && (px as usize) < self.w && (py as usize) < self.h && {
                    let p = self.at(px as usize, py as usize);
                    (0..3).all(|i| (p[i] as i32 - want[i] as i32).abs() < 40)
                }
            })
        })
    }

    fn non_white(&self, x0: f64, y0: f64, x1: f64, y1: f64) -> usize {
        let (x0, y0) = (x0.max(0.0) as usize, y0.max(0.0) as usize);
        let (x1, y1) = ((x1 as usize).min(self.w), (y1 as usize).min(self.h));
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| self.at(x, y).iter().any(|&c| c < 235))
            .count()
    }
}

#[test]
fn chromium_shows_every_point_where_the_svg_puts_it() {
    let _g = serial();
    let dir = scratch("browser");
    let h = report(&dir);
    on_screen(&dir, &h);
    std::fs::remove_dir_all(dir).ok();
}

/// The page `h` (written to DIR/r.html) in headless Chromium: not blank,
/// each plot drawn, and each data point on screen in its colour where the
/// SVG puts it.
fn on_screen(dir: &Path, h: &str) {
    let page = dir.join("r.html");
    // A copy that writes the page height and each plot's box into its title:
    // the layout the screenshot of the unchanged page will have.
    let probe = dir.join("layout.html");
    let js = "<script>var b=[].map.call(document.querySelectorAll('svg'),function(s){var r=s.getBoundingClientRect();return [r.left,r.top+window.scrollY,r.width,r.height];});document.title=JSON.stringify([document.documentElement.scrollHeight,b]);</script></body>";
    std::fs::write(&probe, h.replace("</body>", js)).unwrap();
    let dom = headless(dir, 1000, &["--dump-dom"], &probe);
    let dom = String::from_utf8_lossy(&dom.stdout);
    let title = &dom[dom.find("<title>").expect("a title") + 7..dom.find("</title>").unwrap()];
    let layout: serde_json::Value =
        serde_json::from_str(title).unwrap_or_else(|e| panic!("{title}: {e}"));
    let height = layout[0].as_f64().unwrap().ceil() as u32;
    let boxes: Vec<Vec<f64>> = layout[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            b.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect();
    let svgs = svgs(h);
    assert_eq!(boxes.len(), svgs.len());

    let shot = dir.join("r.png");
    headless(
        dir,
        height,
        &[&format!("--screenshot={}", shot.display())],
        &page,
    );
    let img = Shot::load(&shot);
    assert!(img.h as u32 >= height.min(16000), "the whole page");
    // Not blank: text, tables and plots cover a fair share of the page.
    let ink = img.non_white(0.0, 0.0, img.w as f64, img.h as f64);
    assert!(
        ink * 50 > img.w * img.h,
        "page looks blank: {ink} inked pixels"
    );
    for (i, (svg, b)) in svgs.iter().zip(&boxes).enumerate() {
        let (x, y, w, hgt) = (b[0], b[1], b[2], b[3]);
        let width: f64 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        let scale = w / width;
        assert!(
            img.non_white(x, y, x + w, y + hgt) as f64 > 0.02 * w * hgt,
            "plot {i} is blank on screen"
        );
        let points = circles(svg);
        for (k, &(cx, cy, fill)) in points.iter().enumerate() {
            assert!(
                fill.iter().any(|&c| c < 200),
                "a point drawn in {fill:?} could hide on white"
            );
            // A point may be covered only by one drawn later at the same
            // place (two mixes measuring the same bandwidth and latency).
            if points[k + 1..]
                .iter()
                .any(|&(x2, y2, _)| (x2 - cx).abs() < 5.0 && (y2 - cy).abs() < 5.0)
            {
                continue;
            }
            let (px, py) = (x + cx * scale, y + cy * scale);
            assert!(
                img.near(px, py, 2, fill),
                "plot {i}: no point of colour {fill:?} on screen at ({px:.0}, {py:.0})"
            );
        }
    }
}

/// The loaded-latency figure (issue 27): each mix's line runs left to
/// right (joined in order of the bandwidth reached, never zig-zagging back),
/// its ticks carry no false decimals ("2000.0"), and Chromium shows every
/// point. From the committed run of `farmem probe loaded`.
#[test]
fn the_loaded_latency_figure_reads_at_a_glance() {
    let _g = serial();
    let dir = scratch("loaded");
    let html = dir.join("r.html");
    let o = farmem()
        .arg("report")
        .arg(fixture("probe-loaded.json"))
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let h = std::fs::read_to_string(&html).unwrap();
    let s = svgs(&h);
    assert_eq!(s.len(), 1, "one figure: the mixes and the far tier");
    let lines = regex::Regex::new(r#"<polyline[^>]*points="([^"]*)""#).unwrap();
    let mut joined = 0;
    for l in lines.captures_iter(s[0]) {
        let xs: Vec<f64> = l[1]
            .split_whitespace()
            .filter_map(|p| p.split(',').next()?.parse().ok())
            .collect();
        if xs.len() > 2 {
            joined += 1;
            assert!(
                xs.windows(2).all(|w| w[0] <= w[1] + 0.5),
                "a line goes back left: {xs:?}"
            );
        }
    }
    assert!(joined >= 4, "the mixes' and the far tier's lines: {joined}");
    let false_decimal = regex::Regex::new(r"^\d+\.0$").unwrap();
    let ticks = texts(s[0]);
    assert!(
        !ticks.iter().any(|t| false_decimal.is_match(t)),
        "ticks with a false decimal: {ticks:?}"
    );
    assert!(
        ticks.iter().any(|t| t == "2000" || t == "4000"),
        "{ticks:?}"
    );
    on_screen(&dir, &h);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn plots_are_written_as_png_too() {
    let _g = serial();
    let dir = scratch("png");
    let png = dir.join("lat.png");
    let o = farmem()
        .args(["probe", "latency", "--max", "1M", "--quick", "--plot"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let img = Shot::load(&png);
    assert_eq!((img.w, img.h), (1000, 480));
    // Data, axes and text drawn with the bundled font: well over a few
    // hundred dark pixels.
    assert!(img.non_white(0.0, 0.0, 1000.0, 480.0) > 3000);
    std::fs::remove_dir_all(dir).ok();
}
