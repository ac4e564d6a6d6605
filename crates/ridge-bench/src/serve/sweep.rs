//! `bench sweep`: the latency–throughput curve of a server.
//!
//! One run tells what users see at one load. Capacity planning needs the whole curve: as the
//! offered load (request rate, or requests in flight) rises, throughput climbs and then
//! flattens while latency stays flat and then climbs — TPOT gently, as batches grow, and TTFT
//! steeply, once requests queue. The knee is the server's useful capacity. A sweep runs the
//! same prompts at each load point (so only the load changes) and draws TPOT and TTFT against
//! output throughput, each point labelled with its load.

use plotters::coord::Shift;
use plotters::prelude::*;
use ridge_roofline::chart::{de, decades, fmt_short, Chart, FONT, MUTED, PALETTE};
use serde::Serialize;

use super::{metrics::Summary, run, Prompt, ServeConfig, ServeError, TokenCounter};

/// What varies across a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepAxis {
    /// Request rates, requests per second (`inf`: all at once).
    RequestRate(Vec<f64>),
    /// Concurrency caps (requests sent all at once, at most this many in flight).
    Concurrency(Vec<usize>),
}

impl SweepAxis {
    /// Number of points.
    pub fn len(&self) -> usize {
        match self {
            SweepAxis::RequestRate(v) => v.len(),
            SweepAxis::Concurrency(v) => v.len(),
        }
    }

    /// True when there are no points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One point of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The load, as a label (`4 req/s`, `16 in flight`).
    pub label: String,
    /// Request rate of this point, if the sweep is over rates.
    pub request_rate: Option<f64>,
    /// Concurrency cap of this point, if the sweep is over concurrencies.
    pub max_concurrency: Option<usize>,
    /// The run's numbers.
    pub summary: Summary,
}

/// Runs `prompts` at each point of `axis`, other settings from `base`; calls `on_point` as each
/// finishes.
pub async fn sweep(
    client: &reqwest::Client,
    base: &ServeConfig,
    axis: &SweepAxis,
    prompts: &[Prompt],
    counter: &TokenCounter,
    mut on_point: impl FnMut(&SweepPoint),
) -> Result<Vec<SweepPoint>, ServeError> {
    if axis.is_empty() {
        return Err(ServeError::Invalid(
            "sweep: give at least one request rate or concurrency".into(),
        ));
    }
    let loads: Vec<(Option<f64>, Option<usize>, String)> = match axis {
        SweepAxis::RequestRate(v) => v
            .iter()
            .map(|&r| {
                let label = if r.is_infinite() {
                    "all at once".to_string()
                } else {
                    format!("{} req/s", fmt_short(r))
                };
                (Some(r), base.max_concurrency, label)
            })
            .collect(),
        SweepAxis::Concurrency(v) => v
            .iter()
            .map(|&c| (base.request_rate, Some(c), format!("{c} in flight")))
            .collect(),
    };
    let mut out = Vec::with_capacity(loads.len());
    for (rate, conc, label) in loads {
        let cfg = ServeConfig {
            request_rate: rate,
            max_concurrency: conc,
            ..base.clone()
        };
        let r = run(client, &cfg, prompts, counter).await?;
        let p = SweepPoint {
            label,
            request_rate: rate.filter(|r| r.is_finite()),
            max_concurrency: conc,
            summary: r.summary,
        };
        on_point(&p);
        out.push(p);
    }
    Ok(out)
}

/// The latency–throughput chart of a sweep.
pub struct SweepChart<'a> {
    /// Title (server and model).
    pub title: String,
    /// One line under the title (dataset, lengths).
    pub subtitle: String,
    /// The points, in load order.
    pub points: &'a [SweepPoint],
}

impl SweepChart<'_> {
    fn panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        caption: &str,
        y_desc: &str,
        pick: impl Fn(&Summary) -> (f64, f64),
        color: RGBColor,
    ) -> Result<(), String> {
        let xs: Vec<f64> = self
            .points
            .iter()
            .map(|p| p.summary.output_throughput)
            .collect();
        let ys: Vec<(f64, f64)> = self.points.iter().map(|p| pick(&p.summary)).collect();
        let x_hi = xs.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.15;
        let y_max = ys.iter().map(|y| y.0.max(y.1)).fold(0.0, f64::max);
        let y_min = ys
            .iter()
            .map(|y| y.0.min(y.1))
            .filter(|&v| v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let mut c = ChartBuilder::on(area);
        c.caption(caption, (FONT, 20).into_font().color(&BLACK))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64);
        // The same drawing on either y axis (the two coordinate types differ, so a macro
        // rather than a function generic over both).
        macro_rules! draw_on {
            ($ch:expr) => {{
                let ch = &mut $ch;
                ch.configure_mesh()
                    .x_desc("output tokens/s (all requests)")
                    .y_desc(y_desc)
                    .x_label_formatter(&|v| fmt_short(*v))
                    .y_label_formatter(&|v| fmt_short(*v))
                    .label_style((FONT, 14))
                    .axis_desc_style((FONT, 15))
                    .bold_line_style(RGBColor(225, 225, 225))
                    .light_line_style(RGBColor(245, 245, 245))
                    .draw()
                    .map_err(de)?;
                let p99 = color.mix(0.45);
                ch.draw_series(DashedLineSeries::new(
                    xs.iter().zip(&ys).map(|(&x, y)| (x, y.1)),
                    7,
                    5,
                    p99.stroke_width(2),
                ))
                .map_err(de)?
                .label("p99")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x - 8, y), (x + 8, y)], p99.stroke_width(2))
                });
                ch.draw_series(LineSeries::new(
                    xs.iter().zip(&ys).map(|(&x, y)| (x, y.0)),
                    color.stroke_width(3),
                ))
                .map_err(de)?
                .label("median")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x - 8, y), (x + 8, y)], color.stroke_width(3))
                });
                ch.draw_series(
                    xs.iter()
                        .zip(&ys)
                        .map(|(&x, y)| Circle::new((x, y.1), 4, p99.filled())),
                )
                .map_err(de)?;
                ch.draw_series(xs.iter().zip(&ys).zip(self.points).map(|((&x, y), p)| {
                    EmptyElement::at((x, y.0))
                        + Circle::new((0, 0), 6, color.filled())
                        + Text::new(
                            p.label.clone(),
                            (8, 6),
                            (FONT, 13).into_font().color(&MUTED),
                        )
                }))
                .map_err(de)?;
                ch.configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .label_font((FONT, 14))
                    .background_style(WHITE.mix(0.9))
                    .border_style(RGBColor(200, 200, 200))
                    .draw()
                    .map_err(de)?;
            }};
        }
        // Latency that spans more than 30× (a queue building up) reads better on a log axis.
        if y_min.is_finite() && y_max / y_min > 30.0 {
            let (lo, hi) = decades(y_min / 1.3, y_max * 1.3);
            let mut ch = c
                .build_cartesian_2d(0.0..x_hi, (lo..hi).log_scale())
                .map_err(de)?;
            draw_on!(ch);
        } else {
            let hi = (y_max * 1.2).max(1e-9);
            let mut ch = c.build_cartesian_2d(0.0..x_hi, 0.0..hi).map_err(de)?;
            draw_on!(ch);
        }
        Ok(())
    }
}

impl Chart for SweepChart<'_> {
    fn size(&self) -> (u32, u32) {
        (1500, 680)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        if self.points.is_empty() {
            return Err("no sweep points to draw".into());
        }
        root.fill(&WHITE).map_err(de)?;
        let body = root
            .titled(&self.title, (FONT, 26).into_font().color(&BLACK))
            .map_err(de)?;
        let (sub, body) = body.split_vertically(28);
        sub.draw(&Text::new(
            self.subtitle.clone(),
            (24, 4),
            (FONT, 15).into_font().color(&MUTED),
        ))
        .map_err(de)?;
        let panels = body.split_evenly((1, 2));
        self.panel(
            &panels[0],
            "Time per output token vs throughput",
            "TPOT (ms)",
            |s| (s.tpot_ms.median, s.tpot_ms.p99),
            PALETTE[0],
        )?;
        self.panel(
            &panels[1],
            "Time to first token vs throughput",
            "TTFT (ms)",
            |s| (s.ttft_ms.median, s.ttft_ms.p99),
            PALETTE[1],
        )?;
        Ok(())
    }
}
