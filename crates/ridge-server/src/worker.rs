//! What a gateway asks of a worker beyond chat: the probe and control endpoints SGLang's model
//! gateway (and vLLM's router, its fork) call on every replica.
//!
//! - `GET /server_info`, `/get_server_info`: the served model name, how many requests may run
//!   at once, how many tokens the KV cache holds, the chunked-prefill budget, the context
//!   length, ridge's version.
//! - `GET /model_info`, `/get_model_info`: `is_generation`, the architecture.
//! - `GET /get_load`: requests running and waiting and tokens in use, in SGLang's shape (one
//!   entry per data-parallel rank; ridge has one).
//! - `POST /flush_cache`: drops the prefix cache's unused blocks (a benchmark resets replicas
//!   with it); running requests keep theirs.
//! - `GET /health_generate`: a one-token greedy generation through the engine, so a replica
//!   whose engine is wedged fails the probe even though its HTTP side answers.
//! - `GET /prefix_cache[?model=ID]`: the block hashes in a model's prefix index, the state its
//!   KV events (`kv_events.rs`) describe, so a subscriber can check its view against it.
//!
//! The probes need no API key (like `/health` and `/metrics`, a gateway polls them without
//! one); `/flush_cache` changes state and sits behind the key with the API routes.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use ridge_engine::{Event, EventSink, Request};

use crate::app::AppState;
use crate::error::ApiError;

/// How long `/health_generate` waits for its token.
pub const HEALTH_GENERATE_TIMEOUT: Duration = Duration::from_secs(20);

/// The default model (the one these single-model probes describe), loaded if it is not.
async fn default_model(app: &AppState) -> Result<Arc<crate::state::ModelState>, ApiError> {
    app.pool.get(None, None).await
}

/// `GET /server_info` and `/get_server_info`.
pub async fn server_info(State(app): State<Arc<AppState>>) -> Response {
    let st = match default_model(&app).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let info = st.engine.info();
    Json(json!({
        "served_model_name": st.model_name,
        "model_path": st.model_name,
        "max_running_requests": info.config.max_seqs,
        "max_total_num_tokens": info.kv_total_blocks * ridge_engine::KV_BLOCK_SIZE,
        "chunked_prefill_size": info.config.max_batch_tokens,
        "context_length": info.ctx_len,
        "page_size": ridge_engine::KV_BLOCK_SIZE,
        "dp_size": 1,
        "tp_size": 1,
        "is_embedding": false,
        "version": env!("CARGO_PKG_VERSION"),
        "engine": "ridge",
        "served_models": app.pool.entries().iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
    }))
    .into_response()
}

/// `GET /model_info` and `/get_model_info`.
pub async fn model_info(State(app): State<Arc<AppState>>) -> Response {
    let st = match default_model(&app).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let info = st.engine.info();
    Json(json!({
        "model_path": st.model_name,
        "tokenizer_path": st.model_name,
        "is_generation": true,
        "model_type": info.architecture,
        "architectures": [info.architecture],
        "max_model_len": info.ctx_len,
    }))
    .into_response()
}

/// `GET /get_load`.
pub async fn get_load(State(app): State<Arc<AppState>>) -> Json<Value> {
    // One rank: every loaded model's engine, summed (they share this machine).
    let (mut reqs, mut waiting, mut tokens) = (0u64, 0u64, 0usize);
    for m in app.pool.loaded() {
        let s = m.engine.stats();
        reqs += s.running.load(Relaxed);
        waiting += s.waiting.load(Relaxed);
        tokens += s.kv_used_blocks.load(Relaxed) as usize * ridge_engine::KV_BLOCK_SIZE;
    }
    Json(json!([{
        "dp_rank": 0,
        "num_reqs": reqs,
        "num_waiting_reqs": waiting,
        "num_tokens": tokens,
    }]))
}

/// `POST /flush_cache`.
pub async fn flush_cache(State(app): State<Arc<AppState>>) -> Response {
    let engines: Vec<_> = app.pool.loaded().iter().map(|m| m.engine.clone()).collect();
    let flushed = tokio::task::spawn_blocking(move || {
        engines
            .iter()
            .map(|e| e.flush_prefix_cache())
            .sum::<Result<usize, _>>()
    });
    match flushed.await {
        Ok(Ok(n)) => Json(json!({"status": "ok", "flushed_blocks": n})).into_response(),
        _ => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the engine is not running",
        )
        .into_response(),
    }
}

/// `?model=` of `GET /prefix_cache`.
#[derive(serde::Deserialize)]
pub struct PrefixCacheQuery {
    model: Option<String>,
}

/// `GET /prefix_cache`.
pub async fn prefix_cache(
    State(app): State<Arc<AppState>>,
    axum::extract::Query(q): axum::extract::Query<PrefixCacheQuery>,
) -> Response {
    let st = match app.pool.get(q.model.as_deref(), None).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let engine = st.engine.clone();
    match tokio::task::spawn_blocking(move || engine.indexed_blocks()).await {
        Ok(Ok(hashes)) => Json(json!({
            "object": "prefix_cache",
            "model": st.model_name,
            "block_size": ridge_engine::KV_BLOCK_SIZE,
            "block_hashes": hashes,
        }))
        .into_response(),
        _ => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the engine is not running",
        )
        .into_response(),
    }
}

/// `GET /health_generate`.
pub async fn health_generate(State(app): State<Arc<AppState>>) -> Response {
    let unhealthy = |why: String| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unhealthy", why).into_response()
    };
    let st = match default_model(&app).await {
        Ok(m) => m,
        Err(e) => return unhealthy(e.message),
    };
    let first = st.tokenizer.bos_id().unwrap_or(0);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink: EventSink = Arc::new(move |e| tx.send(e).is_ok());
    let mut req = Request::greedy(vec![first], 1);
    req.speculative = false;
    let id = match st.engine.submit(req, sink) {
        Ok(id) => id,
        Err(e) => return unhealthy(format!("the engine refused a one-token request: {e}")),
    };
    let wait = async {
        while let Some(ev) = rx.recv().await {
            if let Event::Finish(f) = ev {
                return f.error.map_or(Ok(()), Err);
            }
        }
        Err("the engine stopped".to_string())
    };
    match tokio::time::timeout(HEALTH_GENERATE_TIMEOUT, wait).await {
        Ok(Ok(())) => Json(json!({"status": "ok"})).into_response(),
        Ok(Err(e)) => unhealthy(e),
        Err(_) => {
            st.engine.abort(id);
            unhealthy(format!(
                "no token within {} s",
                HEALTH_GENERATE_TIMEOUT.as_secs()
            ))
        }
    }
}
