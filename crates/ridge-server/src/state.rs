//! What every handler shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ridge_engine::Engine;
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
    /// Prometheus metrics.
    pub metrics: Metrics,
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
            metrics: Metrics::new(),
            next_id: AtomicU64::new(1),
        }
    }

    /// A fresh id for a response (unique within this server's life, random-looking across).
    pub fn next_response_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{:x}{:08x}", self.created, n)
    }
}
