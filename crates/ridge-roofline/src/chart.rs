//! Charts (plotters, SVG or PNG by the file's extension): the roofline with a model's operating
//! points, and the shared plumbing — fonts, palette, number formatting — that `ridge-bench`
//! uses for its latency–throughput charts too.
//!
//! # Fonts
//! plotters is built with its pure-Rust `ab_glyph` text backend (no fontconfig, no C), which
//! needs a TrueType font registered at run time. [`ensure_font`] takes `$RIDGE_FONT` if set,
//! else the first of the usual system paths (DejaVu, Liberation, Noto, Arial on macOS and
//! Windows), else any `.ttf` under `/usr/share/fonts`. The font is read once per process and
//! kept for its life (plotters wants `'static` bytes). Without one, drawing fails with an error
//! saying how to provide one, rather than producing a chart with no words on it.
//!
//! # The roofline chart
//! Two panels a reader takes in at a glance: on the left the classic roofline — attainable
//! FLOP/s against arithmetic intensity on log axes, the memory slope and the compute ceiling,
//! the ridge point marked, each (batch, context) as a dot *on* its roof — so it is plain which
//! roof binds and how far batching moves a step along it; on the right what that means to a
//! user — the TPOT floor against total throughput, one line per context through the batch
//! sizes, the latency–throughput trade batching buys.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::analytic::{OperatingPoint, Setup};
use crate::spec::ModelSpec;

/// Chart errors.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The file name does not say SVG or PNG.
    #[error("{0}: chart files must end in .svg or .png")]
    Format(String),
    /// No TrueType font was found for the labels.
    #[error(
        "no TrueType font found for chart labels (looked in $RIDGE_FONT and the usual system \
         font folders); set RIDGE_FONT=/path/to/font.ttf"
    )]
    NoFont,
    /// plotters failed (I/O, backend).
    #[error("{path}: drawing the chart failed: {message}")]
    Draw {
        /// The output file.
        path: String,
        /// plotters' message.
        message: String,
    },
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChartFormat {
    /// Scalable vector graphics (text stays text).
    Svg,
    /// A bitmap.
    Png,
}

impl ChartFormat {
    /// The format named by `path`'s extension (case-insensitive).
    pub fn from_path(path: &Path) -> Result<ChartFormat, ChartError> {
        match path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .as_deref()
        {
            Some("svg") => Ok(ChartFormat::Svg),
            Some("png") => Ok(ChartFormat::Png),
            _ => Err(ChartError::Format(path.display().to_string())),
        }
    }
}

/// The font family every chart uses; [`ensure_font`] registers it.
pub const FONT: &str = "sans-serif";

/// Where fonts usually live, most common first.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

fn find_ttf(dir: &Path, depth: usize) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in &entries {
        let p = e.path();
        if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
            return Some(p);
        }
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_ttf(&e.path(), depth - 1))
}

/// Registers a TrueType font as [`FONT`] (once per process; see the module doc for the search
/// order).
pub fn ensure_font() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        let mut paths: Vec<std::path::PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("RIDGE_FONT").filter(|p| !p.is_empty()) {
            paths.push(p.into());
        }
        paths.extend(FONT_CANDIDATES.iter().map(std::path::PathBuf::from));
        if let Some(p) = find_ttf(Path::new("/usr/share/fonts"), 3) {
            paths.push(p);
        }
        for p in paths {
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            // Leaked on purpose: plotters keeps `'static` font bytes for the process's life,
            // and this runs at most once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
        false
    });
    if ok {
        Ok(())
    } else {
        Err(ChartError::NoFont)
    }
}

/// A chart that can draw itself on any plotters backend.
pub trait Chart {
    /// Canvas size in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws on `root`; errors are plotters' messages.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `chart` into `path`, SVG or PNG by its extension.
pub fn render(chart: &impl Chart, path: &Path) -> Result<(), ChartError> {
    let format = ChartFormat::from_path(path)?;
    ensure_font()?;
    let draw_err = |message: String| ChartError::Draw {
        path: path.display().to_string(),
        message,
    };
    match format {
        ChartFormat::Svg => {
            let root = SVGBackend::new(path, chart.size()).into_drawing_area();
            chart.draw(&root).map_err(draw_err)?;
            root.present().map_err(|e| draw_err(e.to_string()))
        }
        ChartFormat::Png => {
            let root = BitMapBackend::new(path, chart.size()).into_drawing_area();
            chart.draw(&root).map_err(draw_err)?;
            root.present().map_err(|e| draw_err(e.to_string()))
        }
    }
}

/// Turns any displayable error into the `String` [`Chart::draw`] returns.
pub fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Eight colours that stay distinct side by side and in grey (Tableau 10 without the two
/// that clash with the roofs).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Text grey for secondary labels.
pub const MUTED: RGBColor = RGBColor(90, 90, 90);

/// A number as a short axis or point label: `0.05`, `3`, `250`, `12k`, `3.4M`.
pub fn fmt_short(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        format!("{}G", trim(format!("{:.1}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.0}", v / 1e3)))
    } else if a >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.1}"))
    } else if a >= 0.01 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.1e}"))
    }
}

/// A number for legends and captions: up to three decimals, trailing zeros dropped
/// (`3.35`, `1979`, `96.577`).
pub fn fmt_plain(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A log-axis range that covers `[lo, hi]` with whole decades (so the ticks are round), with
/// at least one decade between the ends.
pub fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1e-3 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo * 10.0
    };
    let a = 10f64.powf(lo.log10().floor());
    let mut b = 10f64.powf(hi.log10().ceil());
    if b <= a {
        b = a * 10.0;
    }
    (a, b)
}

/// The roofline chart of `points` (all of one model on one machine).
pub struct RooflineChart<'a> {
    /// The model.
    pub model: &'a ModelSpec,
    /// Hardware, precision, KV format.
    pub setup: &'a Setup,
    /// The operating points, in any order.
    pub points: &'a [OperatingPoint],
}

impl RooflineChart<'_> {
    /// The distinct contexts, in first-seen order, each with its colour.
    fn contexts(&self) -> Vec<(u64, RGBColor)> {
        let mut out: Vec<(u64, RGBColor)> = Vec::new();
        for p in self.points {
            if !out.iter().any(|(c, _)| *c == p.context) {
                out.push((p.context, PALETTE[out.len() % PALETTE.len()]));
            }
        }
        out
    }

    fn roofline_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        let hw = &self.setup.hardware;
        let bw = hw.memory_bandwidth_gbs / 1e3; // TFLOP/s per FLOP/byte
        let peak = hw
            .peak_tflops(self.setup.precision)
            .ok_or("no peak for the chosen precision")?;
        let fp8 = hw.fp8_tflops.filter(|&f| f > peak);
        let top = fp8.unwrap_or(peak);
        let ridge = peak / bw;
        let ai = self.points.iter().map(|p| p.arithmetic_intensity);
        let ai_lo = ai.clone().fold(f64::INFINITY, f64::min).min(ridge);
        let ai_hi = ai.fold(0.0, f64::max).max(top / bw);
        let (x_lo, x_hi) = decades(ai_lo / 2.0, ai_hi * 4.0);
        let att_lo = self
            .points
            .iter()
            .map(|p| p.attained_tflops)
            .fold(f64::INFINITY, f64::min)
            .min(bw * x_lo);
        let (y_lo, y_hi) = decades(att_lo / 1.5, top * 3.0);

        let mut c = ChartBuilder::on(area)
            .caption(
                "Roofline: where each step sits",
                (FONT, 20).into_font().color(&BLACK),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(de)?;
        c.configure_mesh()
            .x_desc("arithmetic intensity (FLOP per byte read)")
            .y_desc("attainable TFLOP/s")
            .x_label_formatter(&|v| fmt_short(*v))
            .y_label_formatter(&|v| fmt_short(*v))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .bold_line_style(RGBColor(225, 225, 225))
            .light_line_style(RGBColor(245, 245, 245))
            .draw()
            .map_err(de)?;

        // The region under the roof, lightly shaded: everything an implementation can reach.
        c.draw_series(std::iter::once(Polygon::new(
            vec![
                (x_lo, y_lo),
                (x_lo, bw * x_lo),
                (ridge, peak),
                (x_hi, peak),
                (x_hi, y_lo),
            ],
            RGBColor(70, 130, 180).mix(0.08).filled(),
        )))
        .map_err(de)?;
        let roof = RGBColor(40, 40, 40);
        if let Some(f8) = fp8 {
            let grey = RGBColor(120, 120, 120);
            c.draw_series(DashedLineSeries::new(
                vec![(ridge, peak), (f8 / bw, f8), (x_hi, f8)],
                8,
                6,
                grey.stroke_width(2),
            ))
            .map_err(de)?
            .label(format!("fp8 peak {} TFLOP/s", fmt_plain(f8)))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x - 10, y), (x + 10, y)], grey.stroke_width(2))
            });
        }
        c.draw_series(LineSeries::new(
            vec![(x_lo, bw * x_lo), (ridge, peak), (x_hi, peak)],
            roof.stroke_width(3),
        ))
        .map_err(de)?
        .label(format!(
            "roof: {} TB/s, {} peak {} TFLOP/s",
            fmt_plain(bw),
            self.setup.precision,
            fmt_plain(peak)
        ))
        .legend(move |(x, y)| {
            PathElement::new(vec![(x - 10, y), (x + 10, y)], roof.stroke_width(3))
        });
        c.draw_series(DashedLineSeries::new(
            vec![(ridge, y_lo), (ridge, peak)],
            4,
            4,
            roof.stroke_width(1),
        ))
        .map_err(de)?;
        let label = (FONT, 14).into_font().color(&MUTED);
        c.draw_series([
            Text::new(
                format!("ridge point {} FLOP/B", fmt_short(ridge)),
                (ridge * 1.12, y_lo * 1.6),
                label.clone(),
            ),
            Text::new(
                "memory-bound ←".to_string(),
                (ridge / 6.0, y_lo * 3.0),
                label.clone(),
            ),
            Text::new(
                "→ compute-bound".to_string(),
                (ridge * 1.12, y_lo * 3.0),
                label,
            ),
        ])
        .map_err(de)?;

        for (ci, (ctx, color)) in self.contexts().into_iter().enumerate() {
            let mut pts: Vec<&OperatingPoint> =
                self.points.iter().filter(|p| p.context == ctx).collect();
            pts.sort_by_key(|p| p.batch);
            c.draw_series(pts.iter().map(|p| {
                Circle::new(
                    (p.arithmetic_intensity, p.attained_tflops),
                    6,
                    color.filled(),
                )
            }))
            .map_err(de)?
            .label(format!("context {ctx}"))
            .legend(move |(x, y)| Circle::new((x, y), 5, color.filled()));
            // Points that land on one spot (large batches at a long context all have the
            // KV cache's intensity) share one label; contexts alternate above and below.
            let dy = if ci % 2 == 0 { -20 } else { 8 };
            c.draw_series(clusters(&pts).into_iter().map(|(at, batches)| {
                EmptyElement::at(at)
                    + Text::new(
                        format!("B={batches}"),
                        (-14, dy),
                        (FONT, 13).into_font().color(&color),
                    )
            }))
            .map_err(de)?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(de)?;
        Ok(())
    }

    fn latency_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        let tps = self.points.iter().map(|p| p.tokens_per_s);
        let (x_lo, x_hi) = decades(
            tps.clone().fold(f64::INFINITY, f64::min) / 1.5,
            tps.fold(0.0, f64::max) * 1.5,
        );
        let tp = self.points.iter().map(|p| p.tpot_min_ms);
        let (y_lo, y_hi) = decades(
            tp.clone().fold(f64::INFINITY, f64::min) / 1.5,
            tp.fold(0.0, f64::max) * 1.5,
        );
        let mut c = ChartBuilder::on(area)
            .caption(
                "What a user sees: TPOT floor vs throughput",
                (FONT, 20).into_font().color(&BLACK),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(de)?;
        c.configure_mesh()
            .x_desc("output tokens/s, all sequences")
            .y_desc("TPOT floor (ms per token, per user)")
            .x_label_formatter(&|v| fmt_short(*v))
            .y_label_formatter(&|v| fmt_short(*v))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .bold_line_style(RGBColor(225, 225, 225))
            .light_line_style(RGBColor(245, 245, 245))
            .draw()
            .map_err(de)?;
        for (ctx, color) in self.contexts() {
            let mut pts: Vec<&OperatingPoint> =
                self.points.iter().filter(|p| p.context == ctx).collect();
            pts.sort_by_key(|p| p.batch);
            c.draw_series(LineSeries::new(
                pts.iter().map(|p| (p.tokens_per_s, p.tpot_min_ms)),
                color.stroke_width(2),
            ))
            .map_err(de)?
            .label(format!("context {ctx}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x - 8, y), (x + 8, y)], color.stroke_width(3))
            });
            c.draw_series(pts.iter().map(|p| {
                EmptyElement::at((p.tokens_per_s, p.tpot_min_ms))
                    + Circle::new((0, 0), 5, color.filled())
                    + Text::new(
                        format!("B={}", p.batch),
                        (8, -16),
                        (FONT, 13).into_font().color(&color),
                    )
            }))
            .map_err(de)?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(de)?;
        Ok(())
    }
}

/// Groups points (sorted by batch) that fall within 30% of each other on both log axes; each
/// group's position is its first point and its label the batch sizes joined (`8, 64`).
fn clusters(pts: &[&OperatingPoint]) -> Vec<((f64, f64), String)> {
    let near = |a: f64, b: f64| (a / b).ln().abs() < 0.3f64.ln_1p();
    let mut out: Vec<((f64, f64), String)> = Vec::new();
    for p in pts {
        let at = (p.arithmetic_intensity, p.attained_tflops);
        match out.last_mut() {
            Some((c, label)) if near(c.0, at.0) && near(c.1, at.1) => {
                label.push_str(&format!(", {}", p.batch));
            }
            _ => out.push((at, p.batch.to_string())),
        }
    }
    out
}

impl Chart for RooflineChart<'_> {
    fn size(&self) -> (u32, u32) {
        (1500, 720)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        if self.points.is_empty() {
            return Err("no operating points to draw".into());
        }
        root.fill(&WHITE).map_err(de)?;
        let hw = &self.setup.hardware;
        let m = self.model;
        let title = format!("{} on {} — decode floor", m.name, hw.description);
        let body = root
            .titled(&title, (FONT, 26).into_font().color(&BLACK))
            .map_err(de)?;
        let (sub, body) = body.split_vertically(28);
        let kv = self.setup.kv_bytes_per_token(m);
        sub.draw(&Text::new(
            format!(
                "weights {} MB ({}), {} params · KV {} kB/token ({}) · {} TB/s, {} TFLOP/s {} · {}",
                fmt_plain(m.weight_bytes as f64 / 1e6),
                m.weights_format,
                fmt_short(m.params as f64),
                fmt_plain(kv / 1e3),
                self.setup.kv_dtype.name(),
                fmt_plain(hw.memory_bandwidth_gbs / 1e3),
                fmt_plain(hw.peak_tflops(self.setup.precision).unwrap_or(0.0)),
                self.setup.precision,
                hw.source,
            ),
            (24, 4),
            (FONT, 15).into_font().color(&MUTED),
        ))
        .map_err(de)?;
        let panels = body.split_evenly((1, 2));
        self.roofline_panel(&panels[0])?;
        self.latency_panel(&panels[1])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(fmt_short(0.05), "0.05");
        assert_eq!(fmt_short(3.0), "3");
        assert_eq!(fmt_short(2.5), "2.5");
        assert_eq!(fmt_short(250.0), "250");
        assert_eq!(fmt_short(1500.0), "1.5k");
        assert_eq!(fmt_short(12_000.0), "12k");
        assert_eq!(fmt_short(3_400_000.0), "3.4M");
        assert_eq!(fmt_short(134_479_872.0), "134.5M");
        assert_eq!(fmt_short(0.0), "0");
        assert_eq!(fmt_plain(3.35), "3.35");
        assert_eq!(fmt_plain(1979.0), "1979");
        assert_eq!(fmt_plain(96.576768), "96.577");
    }

    #[test]
    fn decade_ranges() {
        assert_eq!(decades(0.03, 250.0), (0.01, 1000.0));
        assert_eq!(decades(1.0, 1.0), (1.0, 10.0));
        let (a, b) = decades(0.0, f64::NAN);
        assert!(a > 0.0 && b > a);
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(
            ChartFormat::from_path(Path::new("a.SVG")).unwrap(),
            ChartFormat::Svg
        );
        assert_eq!(
            ChartFormat::from_path(Path::new("a.png")).unwrap(),
            ChartFormat::Png
        );
        assert!(ChartFormat::from_path(Path::new("a.pdf"))
            .unwrap_err()
            .to_string()
            .contains("a.pdf"));
    }
}
