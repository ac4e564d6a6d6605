//! The endpoints. Each reads its body as bytes (so oversized, non-UTF-8 and malformed bodies
//! get OpenAI-style errors too), validates it field by field, and hands the work to
//! [`crate::generate`] or answers directly.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::app::AppState;
use crate::error::ApiError;
use crate::params::{self, Fields};
use crate::protocols::openai::{Kind, OpenAi};
use crate::session;
use crate::state::ModelState;

use crate::request::body_and_model;
pub use crate::request::Body;

pub use crate::protocols::Validator;

impl Validator<'_> {
    /// Validates a `/tokenize` body into token ids.
    pub fn tokenize(&self, body: &Map<String, Value>) -> Result<Vec<u32>, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
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
    pub fn detokenize(&self, body: &Map<String, Value>) -> Result<Vec<u32>, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
        match f.get("tokens") {
            Some(Value::Array(a)) => self.token_ids(a, "tokens"),
            _ => Err(ApiError::invalid(
                "tokens",
                "`tokens` must be an array of token ids",
            )),
        }
    }
}

/// `POST /v1/completions`.
pub async fn completions(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let (b, st) = match body_and_model(&app, body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    match Validator::of(&st).completion(&b) {
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
pub async fn chat(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let (b, st) = match body_and_model(&app, body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    match Validator::of(&st).chat(&b) {
        Ok(job) => {
            let a = OpenAi::new(Kind::Chat, &st.next_response_id(), job.common.include_usage);
            session::run(st.clone(), job, a).await
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/models` (and `/models`): every model the server serves, loaded or not, with its
/// state (`status.value`: `loaded`, `loading`, `unloaded`, as llama-server's router reports
/// it) and, once loaded, its memory, requests in flight and idle time.
pub async fn models(State(app): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = app
        .pool
        .list()
        .into_iter()
        .map(|l| {
            let mut v = json!({
                "id": l.entry.id,
                "object": "model",
                "created": l.model.as_ref().map_or(app.created, |m| m.created),
                "owned_by": "ridge",
                "root": l.entry.source,
                "parent": null,
                "aliases": l.entry.aliases,
                "size_bytes": l.entry.size_bytes,
                "status": {"value": l.status},
                "keep_alive_seconds": l.keep_alive.seconds(),
            });
            if let Some(m) = &l.model {
                v["max_model_len"] = json!(m.engine.info().ctx_len);
                v["memory_bytes"] = json!(m.memory_bytes);
                v["in_flight"] = json!(l.in_flight);
                v["idle_seconds"] = json!(l.idle_seconds);
                v["expires_in_seconds"] = match (l.keep_alive.seconds(), l.idle_seconds) {
                    (Some(k), Some(idle)) => json!((k - idle).max(0.0)),
                    _ => Value::Null,
                };
            }
            if let Some(e) = l.last_error {
                v["status"]["error"] = json!(e);
            }
            v
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// The `model` (and optional `keep_alive`) of a `/models/load` or `/models/unload` body.
fn model_of(body: Body) -> Result<(String, Option<crate::pool::KeepAlive>), ApiError> {
    let m = crate::request::read_json(body)?;
    let f = Fields::new(&m);
    let name = f
        .str("model")?
        .ok_or_else(|| ApiError::invalid("model", "`model` is required (a string)"))?
        .to_string();
    let keep = match f.get("keep_alive") {
        None | Some(Value::Null) => None,
        Some(v) => {
            Some(crate::pool::KeepAlive::parse(v).map_err(|e| ApiError::invalid("keep_alive", e))?)
        }
    };
    Ok((name, keep))
}

/// `POST /models/load`: loads a model now (answers once it is loaded).
pub async fn load_model(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let r = async {
        let (name, keep) = model_of(body)?;
        app.pool.get(Some(&name), keep).await
    };
    match r.await {
        Ok(m) => Json(json!({"success": true, "model": m.model_name, "status": "loaded"}))
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /models/unload`: unloads a model now, or (while requests use it) after its last.
pub async fn unload_model(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let r = async {
        let (name, _) = model_of(body)?;
        let now = app.pool.unload(&name).await?;
        Ok::<_, ApiError>((name, now))
    };
    match r.await {
        Ok((name, true)) => {
            Json(json!({"success": true, "model": name, "status": "unloaded"})).into_response()
        }
        Ok((name, false)) => Json(json!({
            "success": true,
            "model": name,
            "status": "unloading",
            "message": "requests are using the model: it unloads after the last of them",
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
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

/// One loaded model's live state.
fn engine_state(st: &ModelState) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let s = st.engine.stats();
    let info = st.engine.info();
    let running = s.running.load(Relaxed);
    json!({
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
        "kv_disk_blocks": s.kv_disk_blocks.load(Relaxed),
        "kv_disk_hits": s.kv_disk_hits.load(Relaxed),
        "last_step_tokens": if running > 0 { s.last_step_tokens.load(Relaxed) } else { 0 },
        "steps": s.steps.load(Relaxed),
        "prompt_tokens": s.prompt_tokens.load(Relaxed),
        "generation_tokens": s.generation_tokens.load(Relaxed),
        "bandwidth_gbs": info.floor.as_ref().map(|f| f.gbs()).or(info.config.bandwidth_gbs),
        "bandwidth_initial_gbs": info.config.bandwidth_gbs,
        "floor_remeasures": info.floor.as_ref().map_or(0, |f| f.remeasures()),
        "memory_level": info.config.memory_level,
        "dram_bandwidth_gbs": info.config.dram_bandwidth_gbs,
        "llc_bandwidth_gbs": info.config.llc_bandwidth_gbs,
        "speculative": info.speculative,
        "memory_bytes": st.memory_bytes,
    })
}

/// `GET /state`: the engines' live state as JSON (what the chat page's panel shows; the same
/// numbers as `/metrics`). The top level is the default model's (or, while it is not
/// loaded, the first loaded one's); `models` lists every model with its status, and each
/// loaded one's state.
pub async fn state(State(app): State<Arc<AppState>>) -> Json<Value> {
    let list = app.pool.list();
    let models: Vec<Value> = list
        .iter()
        .map(|l| {
            let mut v = match &l.model {
                Some(m) => engine_state(m),
                None => json!({"model": l.entry.id}),
            };
            v["status"] = json!(l.status);
            v["idle_seconds"] = json!(l.idle_seconds);
            v["in_flight"] = json!(l.in_flight);
            v
        })
        .collect();
    let mut top = list.iter().find_map(|l| l.model.as_ref()).map_or_else(
        || json!({"model": app.pool.entries()[0].id}),
        |m| engine_state(m),
    );
    top["models"] = json!(models);
    Json(top)
}

/// `GET /health`.
pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /metrics`.
pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let loaded = app.pool.loaded();
    let pairs: Vec<_> = loaded
        .iter()
        .map(|m| (&*m.metrics, &**m.engine.stats()))
        .collect();
    let text = app.metrics.render_as(&pairs, app.metrics_prefix);
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
pub async fn tokenize(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let (b, st) = match body_and_model(&app, body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    match Validator::of(&st).tokenize(&b) {
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
pub async fn detokenize(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let (b, st) = match body_and_model(&app, body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    match Validator::of(&st).detokenize(&b) {
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
