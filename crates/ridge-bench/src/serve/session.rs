//! From command-line choices to a ready benchmark: the URL normalized, the model name and
//! tokenizer resolved, the prompts built, the endpoint checked with one test request.
//!
//! This lives here rather than in the CLI so the binary stays argument parsing only, and so
//! tests can drive exactly what `ridge bench serve` does without spawning it.

use std::path::{Path, PathBuf};

use super::report::RunInfo;
use super::sweep::{self, SweepAxis, SweepPoint};
use super::{
    dataset, discover_model, http_client, normalize_base, run, test_request, DatasetSpec, Endpoint,
    Prompt, RunResult, ServeConfig, ServeError, Slo, TokenCounter,
};

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Server base URL.
    pub url: String,
    /// `--model`: the request's model name, and the tokenizer when it is a GGUF path or a
    /// known model name.
    pub model: Option<String>,
    /// The model name to send when it differs from `model`.
    pub served_model_name: Option<String>,
    /// Tokenizer: a GGUF path or known model name.
    pub tokenizer: Option<String>,
    /// Endpoint path (default by `chat`).
    pub endpoint: Option<String>,
    /// Chat completions instead of completions.
    pub chat: bool,
    /// Requests to send.
    pub num_prompts: usize,
    /// Prompt tokens (random dataset).
    pub input_len: usize,
    /// Output tokens (default 128; ShareGPT: each reply's).
    pub output_len: Option<usize>,
    /// Length spread of the random dataset.
    pub range_ratio: f64,
    /// Requests per second (`None`: all at once).
    pub request_rate: Option<f64>,
    /// Gamma shape of arrivals.
    pub burstiness: f64,
    /// Concurrency cap.
    pub max_concurrency: Option<usize>,
    /// Where prompts come from.
    pub dataset: DatasetSpec,
    /// Goodput SLOs.
    pub slo: Option<Slo>,
    /// Seed of prompts and arrivals.
    pub seed: u64,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            url: String::new(),
            model: None,
            served_model_name: None,
            tokenizer: None,
            endpoint: None,
            chat: false,
            num_prompts: 100,
            input_len: 1024,
            output_len: None,
            range_ratio: 0.0,
            request_rate: None,
            burstiness: 1.0,
            max_concurrency: None,
            dataset: DatasetSpec::Random,
            slo: None,
            seed: 0,
            progress: false,
        }
    }
}

/// A prepared benchmark: run it once ([`Session::run`]) or at several loads
/// ([`Session::sweep`]).
pub struct Session {
    /// The HTTP client (one pool for every request).
    pub client: reqwest::Client,
    /// The load.
    pub cfg: ServeConfig,
    /// How tokens are counted.
    pub counter: TokenCounter,
    /// The prompts, in send order.
    pub prompts: Vec<Prompt>,
    /// Description for reports.
    pub info: RunInfo,
}

/// A GGUF file for `arg` when it names one: an existing file, or a known model name (pulled
/// into the cache on first use).
fn local_gguf(arg: &str) -> Result<Option<PathBuf>, ServeError> {
    if Path::new(arg).is_file() || ridge_model::registry::find(arg).is_some() {
        return ridge_model::registry::resolve(arg, false)
            .map(Some)
            .map_err(|e| ServeError::Tokenizer(e.to_string()));
    }
    Ok(None)
}

impl Session {
    /// Resolves `o`, builds the prompts and sends one untimed test request.
    pub async fn prepare(o: &LoadOptions) -> Result<Session, ServeError> {
        let base = normalize_base(&o.url);
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ServeError::Invalid(format!(
                "url: expected http://HOST:PORT or https://…, got `{}`",
                o.url
            )));
        }
        let client = http_client()?;
        let model_gguf = match &o.model {
            Some(m) => local_gguf(m)?,
            None => None,
        };
        let tok_gguf = match &o.tokenizer {
            Some(t) => Some(local_gguf(t)?.ok_or_else(|| {
                ServeError::Tokenizer(format!("`{t}` is not a GGUF file or a known model name"))
            })?),
            None => model_gguf,
        };
        // The model field: an explicit name, else --model unless it is a file path, else the
        // first model the server lists (servers that ignore the field get none).
        let model_name = match (&o.served_model_name, &o.model) {
            (Some(n), _) => Some(n.clone()),
            (None, Some(m)) if !Path::new(m).is_file() => Some(m.clone()),
            _ => discover_model(&client, &base).await,
        };
        let counter = match &tok_gguf {
            Some(p) => TokenCounter::from_gguf(p)?,
            None => TokenCounter::server(client.clone(), &base, model_name.clone()),
        };
        let path = o.endpoint.clone().unwrap_or_else(|| {
            if o.chat {
                "/v1/chat/completions".into()
            } else {
                "/v1/completions".into()
            }
        });
        let endpoint = Endpoint {
            url: format!("{base}/{}", path.trim_start_matches('/')),
            chat: o.chat,
            model: model_name.clone(),
        };
        let prompts = dataset::build_prompts(
            &o.dataset,
            o.num_prompts,
            o.input_len,
            o.output_len,
            o.range_ratio,
            o.seed,
            &counter,
        )
        .await?;
        if let Some(first) = prompts.first() {
            test_request(&client, &endpoint, first).await?;
        }
        let dataset = match &o.dataset {
            DatasetSpec::Random => format!(
                "random: {} prompts, {} in / {} out tokens{}",
                o.num_prompts,
                o.input_len,
                o.output_len.unwrap_or(128),
                if o.range_ratio > 0.0 {
                    format!(" (± {}%)", o.range_ratio * 100.0)
                } else {
                    String::new()
                }
            ),
            DatasetSpec::File(p) => format!("file {}: {} prompts", p.display(), o.num_prompts),
            DatasetSpec::ShareGpt(p) => {
                format!("sharegpt {}: {} prompts", p.display(), o.num_prompts)
            }
        };
        let info = RunInfo {
            url: endpoint.url.clone(),
            model: model_name,
            dataset,
            tokenizer: counter.describe(),
            request_rate: o.request_rate,
            burstiness: o.burstiness,
            max_concurrency: o.max_concurrency,
            seed: o.seed,
        };
        let cfg = ServeConfig {
            endpoint,
            request_rate: o.request_rate,
            burstiness: o.burstiness,
            max_concurrency: o.max_concurrency,
            seed: o.seed,
            slo: o.slo,
            progress: o.progress,
        };
        Ok(Session {
            client,
            cfg,
            counter,
            prompts,
            info,
        })
    }

    /// One run of every prompt.
    pub async fn run(&self) -> Result<RunResult, ServeError> {
        run(&self.client, &self.cfg, &self.prompts, &self.counter).await
    }

    /// The same prompts at each load of `axis`.
    pub async fn sweep(
        &self,
        axis: &SweepAxis,
        on_point: impl FnMut(&SweepPoint),
    ) -> Result<Vec<SweepPoint>, ServeError> {
        sweep::sweep(
            &self.client,
            &self.cfg,
            axis,
            &self.prompts,
            &self.counter,
            on_point,
        )
        .await
    }
}
