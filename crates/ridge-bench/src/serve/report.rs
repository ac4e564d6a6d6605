//! How a run is shown: a table for people, one JSON line for scripts, and a file with every
//! request for later analysis.
//!
//! The JSON line has the field names `vllm bench serve` users expect (`completed`,
//! `request_throughput`, `ttft_ms.median`, …), each latency as `{mean, median, p90, p99}` in
//! milliseconds, so a script written for one reads the other.

use serde_json::{json, Value};

use super::metrics::{Stats, Summary};
use super::RunResult;

/// Context of a run for the report header and the saved file.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    /// Endpoint URL.
    pub url: String,
    /// Model name sent, if any.
    pub model: Option<String>,
    /// Dataset description.
    pub dataset: String,
    /// How prompt tokens were counted.
    pub tokenizer: String,
    /// Requests per second (`None`: all at once).
    pub request_rate: Option<f64>,
    /// Gamma shape of arrivals.
    pub burstiness: f64,
    /// Concurrency cap.
    pub max_concurrency: Option<usize>,
    /// Seed.
    pub seed: u64,
}

fn stats_json(s: &Stats) -> Value {
    json!({"mean": s.mean, "median": s.median, "p90": s.p90, "p99": s.p99})
}

/// The one-line JSON of a summary.
pub fn summary_json(s: &Summary, info: &RunInfo) -> Value {
    let mut v = json!({
        "completed": s.completed,
        "failed": s.failed,
        "duration_s": s.duration_s,
        "total_input_tokens": s.total_input_tokens,
        "total_output_tokens": s.total_output_tokens,
        "total_requested_output_tokens": s.total_requested_output_tokens,
        "request_throughput": s.request_throughput,
        "output_throughput": s.output_throughput,
        "total_token_throughput": s.total_token_throughput,
        "ttft_ms": stats_json(&s.ttft_ms),
        "tpot_ms": stats_json(&s.tpot_ms),
        "itl_ms": stats_json(&s.itl_ms),
        "e2el_ms": stats_json(&s.e2el_ms),
        "request_rate": info.request_rate,
        "burstiness": info.burstiness,
        "max_concurrency": info.max_concurrency,
        "url": info.url,
        "model": info.model,
    });
    if let (Some(g), Some(n)) = (s.goodput, s.good_requests) {
        v["goodput"] = json!(g);
        v["good_requests"] = json!(n);
    }
    v
}

/// The saved file: the summary JSON plus the run's settings and every request.
pub fn saved_json(r: &RunResult, info: &RunInfo) -> Value {
    let mut v = summary_json(&r.summary, info);
    v["dataset"] = json!(info.dataset);
    v["tokenizer"] = json!(info.tokenizer);
    v["seed"] = json!(info.seed);
    v["requests"] = serde_json::to_value(&r.records).unwrap_or(Value::Null);
    v
}

/// The human-readable table of a run.
pub fn table(s: &Summary, info: &RunInfo) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<34} {v:>14}\n"));
    let rule = "=".repeat(49);
    let mut head = format!("{rule}\n{:^49}\n{rule}\n", "Serving benchmark");
    head.push_str(&format!("{:<20} {}\n", "endpoint", info.url));
    if let Some(m) = &info.model {
        head.push_str(&format!("{:<20} {m}\n", "model"));
    }
    head.push_str(&format!("{:<20} {}\n", "dataset", info.dataset));
    head.push_str(&format!(
        "{:<20} {}, burstiness {}, max concurrency {}\n",
        "load",
        info.request_rate
            .map(|r| format!("{r} req/s"))
            .unwrap_or_else(|| "all at once".into()),
        info.burstiness,
        info.max_concurrency
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into())
    ));
    line("Successful requests:", s.completed.to_string());
    line("Failed requests:", s.failed.to_string());
    line("Benchmark duration (s):", format!("{:.2}", s.duration_s));
    line("Total input tokens:", s.total_input_tokens.to_string());
    line(
        "Total output tokens:",
        format!(
            "{} / {}",
            s.total_output_tokens, s.total_requested_output_tokens
        ),
    );
    line(
        "Request throughput (req/s):",
        format!("{:.2}", s.request_throughput),
    );
    line(
        "Output token throughput (tok/s):",
        format!("{:.2}", s.output_throughput),
    );
    line(
        "Total token throughput (tok/s):",
        format!("{:.2}", s.total_token_throughput),
    );
    if let (Some(g), Some(n)) = (s.goodput, s.good_requests) {
        line("Goodput (req/s):", format!("{g:.2} ({n} requests)"));
    }
    out.push_str(&format!(
        "{:-<49}\n{:<14}{:>9}{:>9}{:>9}{:>9}\n",
        "", "latency (ms)", "mean", "median", "p90", "p99"
    ));
    for (name, st) in [
        ("TTFT", &s.ttft_ms),
        ("TPOT", &s.tpot_ms),
        ("ITL", &s.itl_ms),
        ("E2EL", &s.e2el_ms),
    ] {
        out.push_str(&format!(
            "{name:<14}{:>9.2}{:>9.2}{:>9.2}{:>9.2}\n",
            st.mean, st.median, st.p90, st.p99
        ));
    }
    out.push_str(&rule);
    out.push('\n');
    head + &out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_contract_fields() {
        let s = Summary {
            completed: 3,
            ttft_ms: Stats {
                mean: 1.0,
                median: 2.0,
                p90: 3.0,
                p99: 4.0,
            },
            goodput: Some(0.5),
            good_requests: Some(1),
            ..Summary::default()
        };
        let v = summary_json(&s, &RunInfo::default());
        for k in [
            "completed",
            "failed",
            "duration_s",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "goodput",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        for k in ["ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"] {
            for q in ["mean", "median", "p90", "p99"] {
                assert!(v[k][q].is_number(), "{k}.{q} in {v}");
            }
        }
        assert_eq!(v["ttft_ms"]["p90"], 3.0);
        let t = table(&s, &RunInfo::default());
        assert!(t.contains("Successful requests:") && t.contains("TPOT"));
        assert!(t.contains("Goodput"));
    }
}
