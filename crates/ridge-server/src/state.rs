//! What every handler shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ridge_engine::{Engine, GrammarError, Grammars};
use ridge_tokenizer::{ChatTemplate, Tokenizer};

use crate::metrics::Metrics;

/// Shared server state.
pub struct AppState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The model's chat template (`None`: chat requests are refused with a clear error).
    pub template: Option<ChatTemplate>,
    /// Name clients address the model by.
    pub model_name: String,
    /// Unix time the server started (the model's `created`).
    pub created: u64,
    /// Required bearer token, if any.
    pub api_key: Option<String>,
    /// Split thinking models' reasoning from their answers (`--reasoning-format none`: no).
    pub parse_reasoning: bool,
    /// Most tokens a thinking model may think before the engine closes its thoughts
    /// (`--reasoning-budget`; requests may set their own).
    pub reasoning_budget: Option<usize>,
    /// Prometheus metrics.
    pub metrics: Metrics,
    /// The metric names' prefix: `ridge`, or `vllm` for pickers left at vLLM's names.
    pub metrics_prefix: &'static str,
    /// Stored Responses-API responses (bounded; see [`crate::protocols::responses`]).
    pub responses: crate::protocols::responses::ResponseStore,
    /// The grammar compiler for this vocabulary, built on the first constrained request.
    grammars: OnceLock<Result<Arc<Grammars>, String>>,
    next_id: AtomicU64,
}

impl AppState {
    /// Builds the state.
    pub fn new(
        engine: Arc<Engine>,
        tokenizer: Arc<Tokenizer>,
        template: Option<ChatTemplate>,
        model_name: String,
        api_key: Option<String>,
    ) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        AppState {
            engine,
            tokenizer,
            template,
            model_name,
            created,
            api_key,
            parse_reasoning: true,
            reasoning_budget: None,
            metrics: Metrics::new(),
            metrics_prefix: "ridge",
            responses: Default::default(),
            grammars: OnceLock::new(),
            next_id: AtomicU64::new(1),
        }
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

    /// A fresh id for a response (unique within this server's life, random-looking across).
    pub fn next_response_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{:x}{:08x}", self.created, n)
    }
}
