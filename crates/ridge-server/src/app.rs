//! The server's shared state: the models it serves (the pool), its API key, its metrics
//! registry, the Responses store and the request log's format. Routes hold it; nothing below
//! the routes does (a protocol adapter gets the pieces it needs, such as the response store).

use std::sync::Arc;

use crate::access_log::LogFormat;
use crate::metrics::Metrics;
use crate::pool::ModelPool;
use crate::response_store::ResponseStore;
use crate::state::{next_id, unix_now, ModelState};

/// Shared server state.
pub struct AppState {
    /// The models this server serves, loaded or not.
    pub pool: Arc<ModelPool>,
    /// Required bearer token, if any.
    pub api_key: Option<String>,
    /// Prometheus metrics (one registry; every model's series carry its `model_name`).
    pub metrics: Arc<Metrics>,
    /// The metric names' prefix: `ridge`, or `vllm` for pickers left at vLLM's names.
    pub metrics_prefix: &'static str,
    /// Stored Responses-API responses (bounded; see [`crate::response_store`]).
    pub responses: Arc<ResponseStore>,
    /// Unix time the server started.
    pub created: u64,
    /// How the request log is written.
    pub log_format: LogFormat,
}

impl AppState {
    /// The state of a server over `pool`.
    pub fn new(pool: Arc<ModelPool>, api_key: Option<String>) -> Self {
        AppState {
            metrics: pool.metrics().clone(),
            pool,
            api_key,
            metrics_prefix: "ridge",
            responses: Default::default(),
            created: unix_now(),
            log_format: Default::default(),
        }
    }

    /// A server of one model, already loaded (tests and embedders; `ridge serve` builds a
    /// pool).
    pub fn single(model: ModelState, api_key: Option<String>) -> Self {
        AppState::new(Arc::new(ModelPool::single(model)), api_key)
    }

    /// A fresh id for something not tied to a model.
    pub fn next_response_id(&self) -> String {
        next_id()
    }
}
