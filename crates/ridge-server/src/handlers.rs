//! The endpoints. Each reads its body as bytes (so oversized, non-UTF-8 and malformed bodies
//! get OpenAI-style errors too), validates it field by field, and hands the work to
//! [`crate::generate`] or answers directly.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::params::{self, Fields};
use crate::protocols::openai::{Kind, OpenAi};
use crate::session;
use crate::state::AppState;

/// A request body as axum hands it over (a rejection when it could not be read).
pub type Body = Result<Bytes, BytesRejection>;

pub use crate::protocols::Validator;

impl Validator<'_> {
    /// Validates a `/tokenize` body into token ids.
    pub fn tokenize(&self, body: &[u8]) -> Result<Vec<u32>, ApiError> {
        let m = Fields::parse(body)?;
        let f = Fields(&m);
        params::check_model(&f, self.model_name)?;
        if f.get("messages").is_some() {
            let tools = crate::tools::read(&f, self.template, self.tokenizer)?;
            self.render_chat(&f, tools.as_ref()).map(|r| r.tokens)
        } else {
            let text = f.str("prompt")?.ok_or_else(|| {
                ApiError::invalid("prompt", "`prompt` (a string) or `messages` is required")
            })?;
            let add = f.bool("add_special_tokens", true)?;
            self.tokenizer
                .encode(text, add, true)
                .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenize: {e}")))
        }
    }

    /// Validates a `/detokenize` body into token ids.
    pub fn detokenize(&self, body: &[u8]) -> Result<Vec<u32>, ApiError> {
        let m = Fields::parse(body)?;
        let f = Fields(&m);
        params::check_model(&f, self.model_name)?;
        match f.get("tokens") {
            Some(Value::Array(a)) => self.token_ids(a, "tokens"),
            _ => Err(ApiError::invalid(
                "tokens",
                "`tokens` must be an array of token ids",
            )),
        }
    }
}

fn body_bytes(body: Body) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than this server accepts",
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"))
        }
    })
}

/// The body of a request, read as bytes so oversized and unreadable bodies get the
/// protocol's error object too.
pub(crate) fn read_body(body: Body) -> Result<Bytes, ApiError> {
    body_bytes(body)
}

/// `POST /v1/completions`.
pub async fn completions(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match body_bytes(body).and_then(|b| Validator::of(&st).completion(&b)) {
        Ok(job) => {
            let a = OpenAi::new(
                Kind::Completion,
                &st.next_response_id(),
                job.common.include_usage,
            );
            session::run(st.clone(), job, a).await
        }
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match body_bytes(body).and_then(|b| Validator::of(&st).chat(&b)) {
        Ok(job) => {
            let a = OpenAi::new(Kind::Chat, &st.next_response_id(), job.common.include_usage);
            session::run(st.clone(), job, a).await
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/models`.
pub async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.model_name,
            "object": "model",
            "created": st.created,
            "owned_by": "ridge",
            "root": st.model_name,
            "parent": null,
            "max_model_len": st.engine.info().ctx_len,
        }],
    }))
}

/// `GET /`: the chat page (one self-contained file: no external scripts, styles or fonts).
pub async fn page() -> Response {
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page may talk only to this server and load nothing from elsewhere.
            (
                axum::http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
            ),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("page/chat.html"),
    )
        .into_response()
}

/// `GET /state`: the engine's live state as JSON (what the chat page's panel shows; the same
/// numbers as `/metrics`, in one object).
pub async fn state(State(st): State<Arc<AppState>>) -> Json<Value> {
    use std::sync::atomic::Ordering::Relaxed;
    let s = st.engine.stats();
    let info = st.engine.info();
    let running = s.running.load(Relaxed);
    Json(json!({
        "model": st.model_name,
        "ctx_len": info.ctx_len,
        "max_seqs": info.config.max_seqs,
        "max_batch_tokens": info.config.max_batch_tokens,
        "running": running,
        "waiting": s.waiting.load(Relaxed),
        "kv_cache_usage": s.kv_usage(),
        "kv_total_blocks": info.kv_total_blocks,
        "kv_used_blocks": s.kv_used_blocks.load(Relaxed),
        "kv_cached_blocks": s.kv_cached_blocks.load(Relaxed),
        "last_step_tokens": if running > 0 { s.last_step_tokens.load(Relaxed) } else { 0 },
        "steps": s.steps.load(Relaxed),
        "prompt_tokens": s.prompt_tokens.load(Relaxed),
        "generation_tokens": s.generation_tokens.load(Relaxed),
        "bandwidth_gbs": info.config.bandwidth_gbs,
        "memory_level": info.config.memory_level,
        "dram_bandwidth_gbs": info.config.dram_bandwidth_gbs,
        "llc_bandwidth_gbs": info.config.llc_bandwidth_gbs,
        "speculative": info.speculative,
    }))
}

/// `GET /health`.
pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /metrics`.
pub async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let text = st.metrics.render_as(st.engine.stats(), st.metrics_prefix);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

/// `POST /tokenize`: `{prompt}` or `{messages}` → `{tokens, count, max_model_len}`.
pub async fn tokenize(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match body_bytes(body).and_then(|b| Validator::of(&st).tokenize(&b)) {
        Ok(tokens) => Json(json!({
            "tokens": tokens,
            "count": tokens.len(),
            "max_model_len": st.engine.info().ctx_len,
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /detokenize`: `{tokens}` → `{prompt}`.
pub async fn detokenize(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match body_bytes(body).and_then(|b| Validator::of(&st).detokenize(&b)) {
        Ok(ids) => Json(json!({"prompt": st.tokenizer.decode(&ids, false)})).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Unknown paths.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {}", uri.path()),
    )
}

/// Known paths with the wrong method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this path",
    )
}
