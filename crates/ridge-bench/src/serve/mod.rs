//! `bench serve`: a load generator for any OpenAI-compatible server, measuring what its users
//! would see.
//!
//! A run sends `N` streaming requests on an open-loop schedule ([`arrivals`]), optionally
//! capped at `C` in flight, times every text chunk of every stream ([`client`]), and reduces the
//! timestamps with vLLM's metric definitions ([`metrics`]) so results compare across tools.
//! [`sweep`] repeats a run over request rates or concurrencies and draws the
//! latency–throughput curve; [`session`] turns command-line choices into a ready run.
//!
//! Design choices:
//! - **One tokio runtime, one task per request.** Requests are I/O-bound; a task per request
//!   makes the concurrency cap a semaphore and the arrival schedule a sleep, both exact, with
//!   no thread per connection to distort timing on a small machine.
//! - **The cap is applied when a request is sent, not when it arrives** (as vLLM does): TTFT
//!   runs from the moment the request leaves the client, so it measures the server, not our
//!   queue; the arrival schedule keeps its own clock either way.
//! - **Lengths are exact and output counts come from the server** (`usage`), with tokenizing
//!   the generated text as the fallback — see [`dataset`] and [`client`].
//! - A short untimed test request goes first, so a wrong URL or model fails in a second with
//!   the server's own message instead of as N failed requests.

pub mod arrivals;
pub mod client;
pub mod dataset;
pub mod metrics;
pub mod report;
pub mod session;
pub mod sweep;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use client::Endpoint;
pub use dataset::{DatasetSpec, Prompt, TokenCounter};
pub use metrics::{RequestRecord, Slo, Stats, Summary};
pub use session::{LoadOptions, Session};

/// Errors of a serving benchmark; each names what went wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A parameter out of range.
    #[error("{0}")]
    Invalid(String),
    /// The dataset could not be read or built.
    #[error("dataset: {0}")]
    Dataset(String),
    /// Token counting failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The server could not be reached or refused the test request.
    #[error("{0}")]
    Server(String),
    /// Writing results failed.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// A chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] ridge_roofline::chart::ChartError),
}

/// How to load the server (the prompts come separately, see [`dataset::build_prompts`]).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Where to send.
    pub endpoint: Endpoint,
    /// Requests per second (`None`: all at once).
    pub request_rate: Option<f64>,
    /// Gamma shape of the inter-arrival gaps (1 = Poisson).
    pub burstiness: f64,
    /// At most this many requests in flight (`None`: no cap).
    pub max_concurrency: Option<usize>,
    /// Seed of the arrival schedule.
    pub seed: u64,
    /// SLOs for goodput.
    pub slo: Option<Slo>,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

/// A run's records and their summary.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// One per prompt, in prompt order.
    pub records: Vec<RequestRecord>,
    /// The reduced numbers.
    pub summary: Summary,
}

/// A multi-threaded tokio runtime for running benchmarks from synchronous code.
pub fn runtime() -> Result<tokio::runtime::Runtime, ServeError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServeError::Invalid(format!("cannot start the async runtime: {e}")))
}

/// An HTTP client for benchmarking: no overall timeout (a long generation is not an error), a
/// connect timeout, and a fresh connection per request.
///
/// No idle connections are kept: a server may close a kept-alive connection just as the client
/// reuses it (llama-server does, after a streamed response), and the request then fails with
/// "connection closed before message completed" through no fault of the load. A loopback or
/// LAN connect costs well under a millisecond of TTFT, and it is what vLLM's client pays too.
pub fn http_client() -> Result<reqwest::Client, ServeError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| ServeError::Invalid(format!("cannot build the HTTP client: {e}")))
}

/// The base URL without a trailing slash or `/v1`, so `http://h:8000`, `http://h:8000/` and
/// `http://h:8000/v1` all mean the same server.
pub fn normalize_base(url: &str) -> String {
    let u = url.trim().trim_end_matches('/');
    u.strip_suffix("/v1").unwrap_or(u).to_string()
}

/// The first model id of `GET {base}/v1/models`, if the server lists any.
pub async fn discover_model(client: &reqwest::Client, base: &str) -> Option<String> {
    let r = client
        .get(format!("{base}/v1/models"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = r.json().await.ok()?;
    v.get("data")?
        .get(0)?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

/// Sends `prompts[0]` asking for two tokens, untimed: fails fast with the server's message if
/// the endpoint, model or request shape is wrong.
pub async fn test_request(
    client: &reqwest::Client,
    ep: &Endpoint,
    first: &Prompt,
) -> Result<(), ServeError> {
    let p = Prompt {
        output_len: 2,
        ..first.clone()
    };
    let r = client::send(client, ep, &p, Instant::now()).await;
    match r.error {
        None => Ok(()),
        Some(e) => Err(ServeError::Server(format!(
            "{}: the test request failed: {e}",
            ep.url
        ))),
    }
}

/// Runs one benchmark: sends every prompt on the arrival schedule and measures it.
///
/// Records whose stream carried no `usage` get their output tokens by tokenizing the generated
/// text with `counter` (or, if that fails, the number of text chunks).
pub async fn run(
    client: &reqwest::Client,
    cfg: &ServeConfig,
    prompts: &[Prompt],
    counter: &TokenCounter,
) -> Result<RunResult, ServeError> {
    if let Some(0) = cfg.max_concurrency {
        return Err(ServeError::Invalid(
            "max-concurrency must be at least 1".into(),
        ));
    }
    let times = arrivals::arrival_times(prompts.len(), cfg.request_rate, cfg.burstiness, cfg.seed)
        .map_err(ServeError::Invalid)?;
    let bar = if cfg.progress {
        indicatif::ProgressBar::new(prompts.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} requests ({per_sec})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let sem = cfg
        .max_concurrency
        .map(|c| Arc::new(tokio::sync::Semaphore::new(c)));
    let ep = Arc::new(cfg.endpoint.clone());
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(prompts.len());
    for (p, at) in prompts.iter().zip(times) {
        tokio::time::sleep_until((t0 + Duration::from_secs_f64(at)).into()).await;
        let (client, ep, sem, bar, p) = (
            client.clone(),
            ep.clone(),
            sem.clone(),
            bar.clone(),
            p.clone(),
        );
        tasks.push(tokio::spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = match sem {
                Some(s) => s.acquire_owned().await.ok(),
                None => None,
            };
            let r = client::send(&client, &ep, &p, t0).await;
            bar.inc(1);
            r
        }));
    }
    let mut records = Vec::with_capacity(tasks.len());
    for t in tasks {
        records.push(t.await.unwrap_or_else(|e| RequestRecord {
            error: Some(format!("request task failed: {e}")),
            ..RequestRecord::default()
        }));
    }
    let duration = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    for r in records
        .iter_mut()
        .filter(|r| r.success && r.output_len_source.is_empty())
    {
        match counter.count(&r.text).await {
            Ok(n) => {
                r.output_len = n;
                r.output_len_source = "tokenized";
            }
            Err(_) => {
                r.output_len = r.chunks;
                r.output_len_source = "chunks";
            }
        }
    }
    let summary = metrics::summarize(&records, duration, cfg.slo.as_ref());
    Ok(RunResult { records, summary })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_normalize() {
        assert_eq!(normalize_base("http://h:8000/"), "http://h:8000");
        assert_eq!(normalize_base("http://h:8000/v1/"), "http://h:8000");
        assert_eq!(normalize_base(" http://h:8000 "), "http://h:8000");
    }
}
