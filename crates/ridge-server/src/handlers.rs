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

use ridge_tokenizer::ChatMessage;

use crate::error::ApiError;
use crate::generate::{self, Job, Kind};
use crate::params::{self, Fields, MAX_LOGPROBS, MAX_MESSAGES, MAX_PROMPTS};
use crate::state::AppState;
use crate::structured::Structured;
use crate::tools::Tools;

type Body = Result<Bytes, BytesRejection>;

/// Everything request validation needs from the server, and nothing more: no engine, no I/O.
///
/// The handlers build one from [`AppState`]; the fuzz targets and regression tests build one
/// from a small synthetic vocabulary, so the exact code that turns an untrusted body into a
/// [`Job`] runs without a model.
pub struct Validator<'a> {
    /// The model's tokenizer (prompts are tokenized during validation).
    pub tokenizer: &'a ridge_tokenizer::Tokenizer,
    /// The chat template, if the model has one.
    pub template: Option<&'a ridge_tokenizer::ChatTemplate>,
    /// The served model name (`model` must match it when given).
    pub model_name: &'a str,
    /// Vocabulary size: token ids must lie below it.
    pub vocab: usize,
}

impl<'a> Validator<'a> {
    /// The validator of a running server.
    pub fn of(st: &'a AppState) -> Self {
        Validator {
            tokenizer: &st.tokenizer,
            template: st.template.as_ref(),
            model_name: &st.model_name,
            vocab: st.engine.info().vocab,
        }
    }

    fn tokenize_text(&self, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
        self.tokenizer
            .encode(text, true, true)
            .map_err(|e| ApiError::invalid(param, format!("cannot tokenize: {e}")))
    }

    fn token_ids(&self, items: &[Value], param: &str) -> Result<Vec<u32>, ApiError> {
        let vocab = self.vocab;
        items
            .iter()
            .map(|v| match v.as_u64() {
                Some(t) if (t as usize) < vocab => Ok(t as u32),
                _ => Err(ApiError::invalid(
                    param,
                    format!("token ids must be integers in [0, {vocab})"),
                )),
            })
            .collect()
    }

    /// `prompt` of a completions request: a string, strings, token ids, or lists of token ids.
    fn prompts(&self, f: &Fields) -> Result<Vec<Vec<u32>>, ApiError> {
        let wrong = || {
            ApiError::invalid(
                "prompt",
                "`prompt` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids",
            )
        };
        let out = match f.get("prompt") {
            None => return Err(ApiError::invalid("prompt", "`prompt` is required")),
            Some(Value::String(s)) => vec![self.tokenize_text(s, "prompt")?],
            Some(Value::Array(a)) if a.is_empty() => return Err(wrong()),
            Some(Value::Array(a)) if a.len() > MAX_PROMPTS && !a[0].is_number() => {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("at most {MAX_PROMPTS} prompts per request"),
                ))
            }
            Some(Value::Array(a)) => match &a[0] {
                Value::Number(_) => vec![self.token_ids(a, "prompt")?],
                Value::String(_) => a
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => self.tokenize_text(s, "prompt"),
                        _ => Err(wrong()),
                    })
                    .collect::<Result<_, _>>()?,
                Value::Array(_) => a
                    .iter()
                    .map(|v| match v {
                        Value::Array(ids) => self.token_ids(ids, "prompt"),
                        _ => Err(wrong()),
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err(wrong()),
            },
            Some(_) => return Err(wrong()),
        };
        if out.iter().any(Vec::is_empty) {
            return Err(ApiError::invalid("prompt", "a prompt is empty"));
        }
        Ok(out)
    }

    /// Validates a `/v1/completions` body into a [`Job`] (prompts tokenized).
    pub fn completion(&self, body: &[u8]) -> Result<Job, ApiError> {
        let m = Fields::parse(body)?;
        let f = Fields(&m);
        params::check_model(&f, self.model_name)?;
        let common = params::common(&f, self.vocab)?;
        let logprobs = f
            .int_in("logprobs", 0, MAX_LOGPROBS as i64)?
            .map(|k| k as usize);
        let prompts = self.prompts(&f)?;
        Ok(Job {
            kind: Kind::Completion,
            prompts,
            common,
            default_max: Some(16),
            logprobs,
            structured: crate::structured::read(&f)?,
            tools: None,
        })
    }

    /// Validates a `/v1/chat/completions` body into a [`Job`] (template rendered, tokenized).
    pub fn chat(&self, body: &[u8]) -> Result<Job, ApiError> {
        let m = Fields::parse(body)?;
        let f = Fields(&m);
        params::check_model(&f, self.model_name)?;
        let common = params::common(&f, self.vocab)?;
        let top = f.int_in("top_logprobs", 0, MAX_LOGPROBS as i64)?;
        let logprobs = if f.bool("logprobs", false)? {
            Some(top.unwrap_or(0) as usize)
        } else if top.is_some_and(|t| t > 0) {
            return Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ));
        } else {
            None
        };
        let tools = crate::tools::read(&f, self.template, self.tokenizer)?;
        let mut common = common;
        if tools.as_ref().is_some_and(|t| t.template_var().is_some()) {
            // The call tags are special tokens in some vocabularies: keep them in the text the
            // call parser reads (vLLM's Hermes parser does the same).
            common.render_special = true;
        }
        let mut structured = crate::structured::read(&f)?;
        if let Some(spec) = tools.as_ref().and_then(Tools::grammar) {
            if let Some(s) = &structured {
                return Err(ApiError::invalid(
                    s.param,
                    format!(
                        "`{}` cannot be combined with a tool_choice that forces a call",
                        s.param
                    ),
                ));
            }
            structured = Some(Structured {
                spec,
                param: "tools",
            });
        }
        let prompt = self.render_chat(&f, tools.as_ref())?;
        Ok(Job {
            kind: Kind::Chat,
            prompts: vec![prompt],
            common,
            default_max: None,
            logprobs,
            structured,
            tools,
        })
    }

    /// Validates a `/tokenize` body into token ids.
    pub fn tokenize(&self, body: &[u8]) -> Result<Vec<u32>, ApiError> {
        let m = Fields::parse(body)?;
        let f = Fields(&m);
        params::check_model(&f, self.model_name)?;
        if f.get("messages").is_some() {
            let tools = crate::tools::read(&f, self.template, self.tokenizer)?;
            self.render_chat(&f, tools.as_ref())
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

    fn render_chat(&self, f: &Fields, tools: Option<&Tools>) -> Result<Vec<u32>, ApiError> {
        let msgs = messages(f)?;
        let Some(template) = self.template else {
            return Err(ApiError::bad_request(
                "this model has no chat template; use /v1/completions with a plain prompt",
            ));
        };
        let add_gen = f.bool("add_generation_prompt", true)?;
        let mut extra = serde_json::Map::new();
        if let Some(t) = tools.and_then(Tools::template_var) {
            extra.insert("tools".into(), t);
        }
        let text = template
            .render_with(&msgs, add_gen, &extra)
            .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?;
        self.tokenizer
            .encode_chat_prompt(&text)
            .map_err(|e| ApiError::invalid("messages", format!("cannot tokenize: {e}")))
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

/// `POST /v1/completions`.
pub async fn completions(State(st): State<Arc<AppState>>, body: Body) -> Response {
    let job = body_bytes(body).and_then(|b| Validator::of(&st).completion(&b));
    match job {
        Ok(job) => generate::run(st.clone(), job)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    }
}

fn messages(f: &Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match f.get("messages") {
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "`messages` must not be empty",
            ))
        }
        Some(Value::Array(a)) if a.len() > MAX_MESSAGES => {
            return Err(ApiError::invalid(
                "messages",
                format!("at most {MAX_MESSAGES} messages"),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid("messages", "`messages` must be an array")),
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let Value::Object(m) = m else {
                return Err(ApiError::invalid("messages", format!("messages[{i}] must be an object")));
            };
            let mf = Fields(m);
            let role = match mf.str("role")? {
                Some(r @ ("system" | "user" | "assistant" | "tool")) => r,
                Some("developer") => "system",
                Some(other) => {
                    return Err(ApiError::invalid(
                        "messages",
                        format!("messages[{i}].role {other:?} is not one of system, user, assistant, tool, developer"),
                    ))
                }
                None => {
                    return Err(ApiError::invalid("messages", format!("messages[{i}].role is required")))
                }
            };
            let content = match mf.get("content") {
                None if role == "assistant" => String::new(),
                None => {
                    return Err(ApiError::invalid("messages", format!("messages[{i}].content is required")))
                }
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => text.push_str(t),
                            _ => {
                                return Err(ApiError::invalid(
                                    "messages",
                                    format!("messages[{i}].content parts must be {{\"type\": \"text\", \"text\": ...}} (only text is supported)"),
                                ))
                            }
                        }
                    }
                    text
                }
                Some(_) => {
                    return Err(ApiError::invalid(
                        "messages",
                        format!("messages[{i}].content must be a string or an array of text parts"),
                    ))
                }
            };
            let mut msg = ChatMessage::new(role, content);
            if role == "assistant" {
                if let Some(calls) = mf.get("tool_calls") {
                    msg.tool_calls = Some(crate::tools::calls_for_template(calls, i)?);
                }
            }
            if role == "tool" {
                msg.tool_call_id = mf.str("tool_call_id")?.map(str::to_string);
                msg.name = mf.str("name")?.map(str::to_string);
            }
            Ok(msg)
        })
        .collect()
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): State<Arc<AppState>>, body: Body) -> Response {
    let job = body_bytes(body).and_then(|b| Validator::of(&st).chat(&b));
    match job {
        Ok(job) => generate::run(st.clone(), job)
            .await
            .unwrap_or_else(IntoResponse::into_response),
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
    let text = st.metrics.render(st.engine.stats());
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
