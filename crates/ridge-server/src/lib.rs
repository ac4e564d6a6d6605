//! ridge's OpenAI-compatible HTTP server (axum on tokio).
//!
//! The server is a thin, strict shell around the engine: it validates every request field by
//! field (`params`), renders chat templates and tokenizes, submits to the engine, and shapes
//! the engine's events into OpenAI's JSON or SSE chunks (`generate`). It owns no model state;
//! the engine thread does. What it adds is protocol — the exact shapes clients expect, errors
//! as `{"error": {...}}` objects with a 4xx status, `timings` on every answer (how close the
//! request ran to the hardware's limit), Prometheus metrics, bearer-token auth, and a graceful
//! drain on SIGTERM/SIGINT.
//!
//! Every protocol goes through one generation path ([`session`]) under thin adapters
//! ([`protocols`]): OpenAI's Chat Completions, Completions and Responses, Anthropic's Messages.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `POST /v1/messages` (with
//! `/v1/messages/count_tokens`), `POST /v1/responses` (with `GET`/`DELETE
//! /v1/responses/{id}`), `POST /v1/embeddings`, `POST /v1/rerank` (a 400: no rank models yet),
//! `GET /v1/models`, the gateway probes of [`worker`] (`/server_info`, `/model_info`,
//! `/get_load`, `/health_generate`, `POST /flush_cache`, `GET /prefix_cache`), `GET /health`,
//! `GET /metrics`, `POST /tokenize`, `POST /detokenize`, and for people `GET /` (a chat page
//! embedded in the binary, which shows each answer's TTFT, TPOT and roofline efficiency) with
//! `GET /state` (the engine's live state as JSON). Unknown paths get a 404 error object. The
//! page and `/state`, like `/metrics`, need no API key; everything the page asks of the model
//! goes through the API routes with the key the user enters.
//!
//! Beside HTTP, [`kv_events`] publishes the prefix cache's changes as vLLM's KV-event stream
//! over ZeroMQ, for KV-aware routers.

#![warn(missing_docs)]

pub mod access_log;
pub mod app;
pub mod auth;
pub mod embeddings;
pub mod error;
pub mod handlers;
pub mod kv_events;
pub mod metrics;
pub mod params;
pub mod pool;
pub mod protocols;
pub mod reasoning;
pub mod request;
pub mod rerank;
pub mod response_store;
pub mod session;
pub mod state;
pub mod structured;
pub mod tools;
pub mod worker;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;

pub use app::AppState;
pub use pool::{AliasRule, KeepAlive, Loader, ModelEntry, ModelPool, PoolConfig};
pub use state::ModelState;

/// Default largest request body, bytes.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;

/// The router over shared state.
pub fn router(state: Arc<AppState>, max_body: usize) -> Router {
    let api = Router::new()
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/chat/completions", post(handlers::chat))
        .route(
            "/v1/messages",
            post(protocols::anthropic::handlers::messages),
        )
        .route(
            "/v1/messages/count_tokens",
            post(protocols::anthropic::handlers::count_tokens),
        )
        .route(
            "/v1/responses",
            post(protocols::responses::handlers::create),
        )
        .route(
            "/v1/responses/{id}",
            get(protocols::responses::handlers::get).delete(protocols::responses::handlers::delete),
        )
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/v2/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/flush_cache", post(worker::flush_cache))
        .route("/prefix_cache", get(worker::prefix_cache))
        .route("/v1/models", get(handlers::models))
        .route("/models", get(handlers::models))
        .route("/models/load", post(handlers::load_model))
        .route("/models/unload", post(handlers::unload_model))
        .route("/tokenize", post(handlers::tokenize))
        .route("/detokenize", post(handlers::detokenize))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    Router::new()
        .route("/", get(handlers::page))
        .route("/state", get(handlers::state))
        .route("/health", get(handlers::health))
        .route("/health_generate", get(worker::health_generate))
        .route("/server_info", get(worker::server_info))
        .route("/get_server_info", get(worker::server_info))
        .route("/model_info", get(worker::model_info))
        .route("/get_model_info", get(worker::model_info))
        .route("/get_load", get(worker::get_load))
        .route("/metrics", get(handlers::metrics))
        .merge(api)
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.log_format,
            access_log::log_requests,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(CatchPanicLayer::custom(|_| {
            use axum::response::IntoResponse;
            error::ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "internal error while handling this request",
            )
            .into_response()
        }))
        .with_state(state)
}

/// Serves on `listener` until `shutdown` resolves; then stops accepting and lets in-flight
/// requests finish for up to `drain` before returning.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let mut rx2 = rx.clone();
    tokio::select! {
        r = server => r,
        _ = async move {
            let _ = rx2.wait_for(|&v| v).await;
            tokio::time::sleep(drain).await;
        } => {
            drop(rx);
            Ok(())
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
