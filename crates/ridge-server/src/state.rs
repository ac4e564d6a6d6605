//! Each loaded model's state ([`ModelState`]).
//!
//! A server holds several models (`crate::pool::ModelPool`), loaded on demand and unloaded
//! when idle or to make room; a request picks one by its `model` field. Everything that
//! belongs to one model — its engine, tokenizer, chat template, grammar compiler, the names it
//! answers to, its metric handles — lives in a [`ModelState`], which handlers hold as an
//! `Arc` for as long as the request runs (that clone is also what keeps the pool from
//! evicting a model under its requests). What spans models — the key, the Responses store,
//! the metrics registry — lives in `crate::app::AppState`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ridge_engine::{Engine, GrammarError, Grammars};
use ridge_tokenizer::{ChatTemplate, Tokenizer};

use crate::metrics::ModelMetrics;

/// One loaded model, as the handlers use it.
pub struct ModelState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The model's chat template (`None`: chat requests are refused with a clear error).
    pub template: Option<ChatTemplate>,
    /// Name clients address the model by (answers carry it).
    pub model_name: String,
    /// Other names it answers to (`--served-model-name` aliases).
    pub aliases: Vec<String>,
    /// Unix time the model was loaded (its `created`).
    pub created: u64,
    /// Split thinking models' reasoning from their answers (`--reasoning-format none`: no).
    pub parse_reasoning: bool,
    /// Most tokens a thinking model may think before the engine closes its thoughts
    /// (`--reasoning-budget`; requests may set their own).
    pub reasoning_budget: Option<usize>,
    /// Longest silence on a stream before a keep-alive frame (prefill of a long prompt, a
    /// tool call held back until complete).
    pub sse_keepalive: std::time::Duration,
    /// Bytes the model holds while loaded: its weights and its KV cache (what
    /// `--max-memory` counts).
    pub memory_bytes: u64,
    /// This model's metric handles (they outlive a load: counters continue across reloads).
    pub metrics: Arc<ModelMetrics>,
    /// The grammar compiler for this vocabulary, built on the first constrained request.
    grammars: OnceLock<Result<Arc<Grammars>, String>>,
}

/// Unix time now, seconds.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The process's start time and a counter: ids unique within the process's life (so across
/// models and servers in one process), random-looking across processes.
pub(crate) fn next_id() -> String {
    static START: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let start = *START.get_or_init(unix_now);
    format!("{start:x}{:08x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The default longest silence on a stream (agent clients' idle watchdogs allow tens of
/// seconds; proxies often 60).
pub const DEFAULT_SSE_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(5);

impl ModelState {
    /// A loaded model's state (metrics handles detached: see [`ModelState::with_metrics`]).
    pub fn new(
        engine: Arc<Engine>,
        tokenizer: Arc<Tokenizer>,
        template: Option<ChatTemplate>,
        model_name: String,
    ) -> Self {
        ModelState {
            engine,
            tokenizer,
            template,
            model_name,
            aliases: Vec::new(),
            created: unix_now(),
            parse_reasoning: true,
            reasoning_budget: None,
            sse_keepalive: DEFAULT_SSE_KEEPALIVE,
            memory_bytes: 0,
            metrics: Arc::new(ModelMetrics::detached()),
            grammars: OnceLock::new(),
        }
    }

    /// Whether the model answers to `name`.
    pub fn answers_to(&self, name: &str) -> bool {
        self.model_name == name || self.aliases.iter().any(|a| a == name)
    }

    /// The grammar compiler (its token trie is built once, on first use: tens of ms).
    pub fn grammars(&self) -> Result<Arc<Grammars>, GrammarError> {
        self.grammars
            .get_or_init(|| {
                Grammars::new(self.tokenizer.clone())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(GrammarError)
    }

    /// A fresh id for a response (unique within this process's life, random-looking across).
    pub fn next_response_id(&self) -> String {
        next_id()
    }
}
