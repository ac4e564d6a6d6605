//! Turning per-request timestamps into the numbers people compare, with vLLM's definitions
//! exactly, so a figure from `ridge bench serve` means what the same figure from
//! `vllm bench serve` means:
//!
//! - **TTFT**: request sent → first chunk carrying text.
//! - **TPOT**, per request: `(e2el − ttft) / (n_out − 1)`, for requests with more than one
//!   output token; then mean / median / p90 / p99 *across requests*. A request's TPOT is thus
//!   its average decode gap, and every request weighs the same however long it ran.
//! - **ITL**: every gap between consecutive text-carrying chunks, pooled over all requests —
//!   it weighs long requests more and exposes stalls TPOT averages away.
//! - **E2EL**: request sent → last chunk carrying text.
//! - Throughputs divide totals over *successful* requests by the run's wall time.
//! - **Goodput**: successful requests per second that met every given SLO.
//!
//! Percentiles interpolate linearly between order statistics (numpy's default), the method
//! vLLM's numbers come from.

use serde::Serialize;

/// One request's outcome, as the client measured it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestRecord {
    /// The server answered 200 and streamed at least one text chunk.
    pub success: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// Prompt tokens (the dataset's count).
    pub input_len: usize,
    /// Output tokens asked for (`max_tokens`).
    pub requested_output_len: usize,
    /// Output tokens produced: `usage.completion_tokens`, else the generated text tokenized.
    pub output_len: usize,
    /// Where `output_len` came from: `"usage"` or `"tokenized"`.
    pub output_len_source: &'static str,
    /// `usage.prompt_tokens` as the server reported it, if it did.
    pub server_prompt_tokens: Option<usize>,
    /// Seconds from the start of the run to this request's send.
    pub start_s: f64,
    /// Time to first text chunk, seconds.
    pub ttft_s: f64,
    /// Send → last text chunk, seconds.
    pub e2el_s: f64,
    /// Gaps between consecutive text chunks, seconds.
    pub itl_s: Vec<f64>,
    /// Text-carrying chunks received.
    pub chunks: usize,
    /// The server's own `timings` object, when it sends one (ridge and llama-server do): its
    /// view of the same request, for comparison.
    pub server_timings: Option<serde_json::Value>,
    /// The generated text (kept for token counting when the server sends no usage).
    #[serde(skip)]
    pub text: String,
}

impl RequestRecord {
    /// This request's TPOT in seconds, `(e2el − ttft) / (n_out − 1)`; `None` for fewer than
    /// two output tokens.
    pub fn tpot_s(&self) -> Option<f64> {
        (self.output_len > 1).then(|| (self.e2el_s - self.ttft_s) / (self.output_len - 1) as f64)
    }
}

/// Mean and percentiles of one metric, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Arithmetic mean.
    pub mean: f64,
    /// 50th percentile.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// The `q`-th percentile (0–100) of sorted `v`, interpolating linearly between the two nearest
/// ranks (numpy's default); 0 for an empty slice.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let pos = (q / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

impl Stats {
    /// Stats of `seconds`, reported in milliseconds; all zero when empty.
    pub fn of_seconds(seconds: &[f64]) -> Stats {
        if seconds.is_empty() {
            return Stats::default();
        }
        let mut v: Vec<f64> = seconds.iter().map(|s| s * 1e3).collect();
        v.sort_by(f64::total_cmp);
        Stats {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            median: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
        }
    }
}

/// Service-level objectives for goodput, in milliseconds; `None` = not constrained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Slo {
    /// TTFT at most this.
    pub ttft_ms: Option<f64>,
    /// TPOT at most this.
    pub tpot_ms: Option<f64>,
    /// E2EL at most this.
    pub e2el_ms: Option<f64>,
}

impl Slo {
    /// Parses `ttft:MS,tpot:MS,e2el:MS` (any subset, any order).
    pub fn parse(s: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once(':')
                .ok_or_else(|| format!("goodput: `{part}` is not KEY:MS"))?;
            let ms: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("goodput: `{v}` is not a positive number of ms"))?;
            match k.trim() {
                "ttft" => slo.ttft_ms = Some(ms),
                "tpot" => slo.tpot_ms = Some(ms),
                "e2el" => slo.e2el_ms = Some(ms),
                other => {
                    return Err(format!(
                        "goodput: unknown metric `{other}` (expected ttft, tpot or e2el)"
                    ))
                }
            }
        }
        if slo == Slo::default() {
            return Err("goodput: give at least one of ttft:MS, tpot:MS, e2el:MS".into());
        }
        Ok(slo)
    }

    /// True when `r` succeeded and meets every constrained metric.
    pub fn met_by(&self, r: &RequestRecord) -> bool {
        let ok = |limit: Option<f64>, s: f64| limit.is_none_or(|l| s * 1e3 <= l);
        r.success
            && ok(self.ttft_ms, r.ttft_s)
            && ok(self.tpot_ms, r.tpot_s().unwrap_or(0.0))
            && ok(self.e2el_ms, r.e2el_s)
    }
}

/// The numbers of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Successful requests.
    pub completed: usize,
    /// Failed requests.
    pub failed: usize,
    /// Wall time of the run, seconds.
    pub duration_s: f64,
    /// Prompt tokens of the successful requests.
    pub total_input_tokens: usize,
    /// Output tokens of the successful requests.
    pub total_output_tokens: usize,
    /// Successful requests per second.
    pub request_throughput: f64,
    /// Output tokens per second.
    pub output_throughput: f64,
    /// Input + output tokens per second.
    pub total_token_throughput: f64,
    /// Time to first token, ms.
    pub ttft_ms: Stats,
    /// Time per output token (per request, then across requests), ms.
    pub tpot_ms: Stats,
    /// Inter-token latency (all gaps pooled), ms.
    pub itl_ms: Stats,
    /// End-to-end latency, ms.
    pub e2el_ms: Stats,
    /// Requests per second meeting every SLO, when SLOs were given.
    pub goodput: Option<f64>,
    /// Requests meeting every SLO, when SLOs were given.
    pub good_requests: Option<usize>,
    /// Output tokens the successful requests asked for (equals `total_output_tokens` when the
    /// server honoured `ignore_eos` and `max_tokens`).
    pub total_requested_output_tokens: usize,
}

/// Summarizes `records` of a run that lasted `duration_s` seconds.
pub fn summarize(records: &[RequestRecord], duration_s: f64, slo: Option<&Slo>) -> Summary {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.success).collect();
    let total_in: usize = ok.iter().map(|r| r.input_len).sum();
    let total_out: usize = ok.iter().map(|r| r.output_len).sum();
    let per_s = |x: f64| {
        if duration_s > 0.0 {
            x / duration_s
        } else {
            0.0
        }
    };
    let ttft: Vec<f64> = ok.iter().map(|r| r.ttft_s).collect();
    let tpot: Vec<f64> = ok.iter().filter_map(|r| r.tpot_s()).collect();
    let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_s.iter().copied()).collect();
    let e2el: Vec<f64> = ok.iter().map(|r| r.e2el_s).collect();
    let good = slo.map(|s| records.iter().filter(|r| s.met_by(r)).count());
    Summary {
        completed: ok.len(),
        failed: records.len() - ok.len(),
        duration_s,
        total_input_tokens: total_in,
        total_output_tokens: total_out,
        request_throughput: per_s(ok.len() as f64),
        output_throughput: per_s(total_out as f64),
        total_token_throughput: per_s((total_in + total_out) as f64),
        ttft_ms: Stats::of_seconds(&ttft),
        tpot_ms: Stats::of_seconds(&tpot),
        itl_ms: Stats::of_seconds(&itl),
        e2el_ms: Stats::of_seconds(&e2el),
        goodput: good.map(|g| per_s(g as f64)),
        good_requests: good,
        total_requested_output_tokens: ok.iter().map(|r| r.requested_output_len).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        // numpy.percentile([1,2,3,4], [50, 90, 99]) = [2.5, 3.7, 3.97]
        assert!(close(percentile(&v, 50.0), 2.5));
        assert!(close(percentile(&v, 90.0), 3.7));
        assert!(close(percentile(&v, 99.0), 3.97));
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 100.0), 4.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        // Unsorted input is sorted by Stats: 10..=1 ms.
        let s: Vec<f64> = (1..=10).rev().map(|i| i as f64 / 1e3).collect();
        let st = Stats::of_seconds(&s);
        assert!(close(st.mean, 5.5) && close(st.median, 5.5));
        // pos 0.9 · 9 = 8.1 → 9 + 0.1 = 9.1; 0.99 · 9 = 8.91 → 9.91.
        assert!(close(st.p90, 9.1) && close(st.p99, 9.91), "{st:?}");
    }

    /// A request whose text chunks arrive at `times` (seconds after its send).
    fn rec(times: &[f64], output_len: usize, input_len: usize) -> RequestRecord {
        RequestRecord {
            success: true,
            input_len,
            requested_output_len: output_len,
            output_len,
            output_len_source: "usage",
            ttft_s: times[0],
            e2el_s: *times.last().unwrap(),
            itl_s: times.windows(2).map(|w| w[1] - w[0]).collect(),
            chunks: times.len(),
            ..Default::default()
        }
    }

    #[test]
    fn tpot_is_per_request_then_across_requests_itl_is_pooled() {
        // Request A: first token at 100 ms, then 4 more 10 ms apart → e2el 140 ms,
        // TPOT (140 − 100) / 4 = 10 ms. Request B: first at 200 ms, one more 50 ms later →
        // TPOT 50 ms.
        let a = rec(&[0.100, 0.110, 0.120, 0.130, 0.140], 5, 10);
        let b = rec(&[0.200, 0.250], 2, 20);
        let s = summarize(&[a, b], 2.0, None);
        assert_eq!((s.completed, s.failed), (2, 0));
        // TPOT across requests: mean (10 + 50) / 2 = 30, median 30 — not the pooled mean of
        // the five gaps (10, 10, 10, 10, 50 → 18 ms), which is what ITL reports.
        assert!(
            close(s.tpot_ms.mean, 30.0) && close(s.tpot_ms.median, 30.0),
            "{s:?}"
        );
        assert!(close(s.itl_ms.mean, 18.0), "{:?}", s.itl_ms);
        assert!(close(s.itl_ms.median, 10.0));
        assert!(close(s.ttft_ms.mean, 150.0));
        assert!(close(s.e2el_ms.mean, 195.0));
        // Throughputs over the 2 s wall time: 1 req/s, 7/2 output tok/s, (30 + 7)/2 total.
        assert_eq!((s.total_input_tokens, s.total_output_tokens), (30, 7));
        assert!(close(s.request_throughput, 1.0));
        assert!(close(s.output_throughput, 3.5));
        assert!(close(s.total_token_throughput, 18.5));
        assert_eq!(s.goodput, None);
    }

    #[test]
    fn tpot_uses_the_token_count_not_the_chunk_count() {
        // A server that sends 4 tokens per chunk: 3 chunks at 100, 140, 180 ms carrying 12
        // tokens. TPOT = (180 − 100) / 11; ITL sees two 40 ms gaps.
        let mut r = rec(&[0.100, 0.140, 0.180], 12, 1);
        r.chunks = 3;
        assert!(close(r.tpot_s().unwrap(), 0.08 / 11.0));
        let s = summarize(&[r], 1.0, None);
        assert!(close(s.itl_ms.mean, 40.0));
        // One output token: no TPOT, and the request is left out of the TPOT stats.
        let one = rec(&[0.05], 1, 1);
        assert_eq!(one.tpot_s(), None);
        assert_eq!(summarize(&[one], 1.0, None).tpot_ms, Stats::default());
    }

    #[test]
    fn failures_are_counted_but_not_measured() {
        let ok = rec(&[0.1, 0.2], 2, 5);
        let bad = RequestRecord {
            error: Some("HTTP 500".into()),
            input_len: 5,
            ..Default::default()
        };
        let s = summarize(&[ok, bad], 1.0, None);
        assert_eq!((s.completed, s.failed), (1, 1));
        assert_eq!(s.total_input_tokens, 5);
        assert!(close(s.ttft_ms.mean, 100.0));
    }

    #[test]
    fn goodput_counts_requests_meeting_every_slo() {
        let slo = Slo::parse("ttft:150, tpot:20").unwrap();
        assert_eq!(slo.e2el_ms, None);
        let fast = rec(&[0.100, 0.110, 0.120], 3, 1); // ttft 100, tpot 10
        let slow_start = rec(&[0.200, 0.210], 2, 1); // ttft 200
        let slow_decode = rec(&[0.100, 0.150], 2, 1); // tpot 50
        let s = summarize(&[fast, slow_start, slow_decode], 4.0, Some(&slo));
        assert_eq!(s.good_requests, Some(1));
        assert!(close(s.goodput.unwrap(), 0.25));
        assert!(Slo::parse("ttft").is_err());
        assert!(Slo::parse("ttft:-1").is_err());
        assert!(Slo::parse("tbt:5").unwrap_err().contains("unknown metric"));
        assert!(Slo::parse("").is_err());
    }
}
