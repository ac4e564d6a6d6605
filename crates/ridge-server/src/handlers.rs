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
use serde_json::{json, Map, Value};

use ridge_tokenizer::ChatMessage;

use crate::error::ApiError;
use crate::generate::{self, Job, Kind};
use crate::params::{self, Fields, MAX_LOGPROBS, MAX_MESSAGES, MAX_PROMPTS};
use crate::state::AppState;

type Body = Result<Bytes, BytesRejection>;

fn body_map(body: Body) -> Result<Map<String, Value>, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than this server accepts",
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"))
        }
    })?;
    Fields::parse(&bytes)
}

fn tokenize_text(st: &AppState, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
    st.tokenizer
        .encode(text, true, true)
        .map_err(|e| ApiError::invalid(param, format!("cannot tokenize: {e}")))
}

fn token_ids(st: &AppState, items: &[Value], param: &str) -> Result<Vec<u32>, ApiError> {
    let vocab = st.engine.info().vocab;
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
fn prompts(st: &AppState, f: &Fields) -> Result<Vec<Vec<u32>>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "prompt",
            "`prompt` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids",
        )
    };
    let out = match f.get("prompt") {
        None => return Err(ApiError::invalid("prompt", "`prompt` is required")),
        Some(Value::String(s)) => vec![tokenize_text(st, s, "prompt")?],
        Some(Value::Array(a)) if a.is_empty() => return Err(wrong()),
        Some(Value::Array(a)) if a.len() > MAX_PROMPTS && !a[0].is_number() => {
            return Err(ApiError::invalid(
                "prompt",
                format!("at most {MAX_PROMPTS} prompts per request"),
            ))
        }
        Some(Value::Array(a)) => match &a[0] {
            Value::Number(_) => vec![token_ids(st, a, "prompt")?],
            Value::String(_) => a
                .iter()
                .map(|v| match v {
                    Value::String(s) => tokenize_text(st, s, "prompt"),
                    _ => Err(wrong()),
                })
                .collect::<Result<_, _>>()?,
            Value::Array(_) => a
                .iter()
                .map(|v| match v {
                    Value::Array(ids) => token_ids(st, ids, "prompt"),
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

/// `POST /v1/completions`.
pub async fn completions(State(st): State<Arc<AppState>>, body: Body) -> Response {
    let r = async {
        let m = body_map(body)?;
        let f = Fields(&m);
        params::check_model(&f, &st.model_name)?;
        let common = params::common(&f, st.engine.info().vocab)?;
        let logprobs = f
            .int_in("logprobs", 0, MAX_LOGPROBS as i64)?
            .map(|k| k as usize);
        let prompts = prompts(&st, &f)?;
        generate::run(
            st.clone(),
            Job {
                kind: Kind::Completion,
                prompts,
                common,
                default_max: Some(16),
                logprobs,
            },
        )
        .await
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
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
                Some(r @ ("system" | "user" | "assistant")) => r,
                Some("developer") => "system",
                Some(other) => {
                    return Err(ApiError::invalid(
                        "messages",
                        format!("messages[{i}].role {other:?} is not one of system, user, assistant, developer"),
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
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

fn render_chat(st: &AppState, f: &Fields) -> Result<Vec<u32>, ApiError> {
    let msgs = messages(f)?;
    let Some(template) = &st.template else {
        return Err(ApiError::bad_request(
            "this model has no chat template; use /v1/completions with a plain prompt",
        ));
    };
    let add_gen = f.bool("add_generation_prompt", true)?;
    let text = template
        .render(&msgs, add_gen)
        .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?;
    st.tokenizer
        .encode_chat_prompt(&text)
        .map_err(|e| ApiError::invalid("messages", format!("cannot tokenize: {e}")))
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): State<Arc<AppState>>, body: Body) -> Response {
    let r = async {
        let m = body_map(body)?;
        let f = Fields(&m);
        params::check_model(&f, &st.model_name)?;
        let common = params::common(&f, st.engine.info().vocab)?;
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
        let prompt = render_chat(&st, &f)?;
        generate::run(
            st.clone(),
            Job {
                kind: Kind::Chat,
                prompts: vec![prompt],
                common,
                default_max: None,
                logprobs,
            },
        )
        .await
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
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
    let r = (|| {
        let m = body_map(body)?;
        let f = Fields(&m);
        params::check_model(&f, &st.model_name)?;
        let tokens = if f.get("messages").is_some() {
            render_chat(&st, &f)?
        } else {
            let text = f.str("prompt")?.ok_or_else(|| {
                ApiError::invalid("prompt", "`prompt` (a string) or `messages` is required")
            })?;
            let add = f.bool("add_special_tokens", true)?;
            st.tokenizer
                .encode(text, add, true)
                .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenize: {e}")))?
        };
        Ok::<_, ApiError>(Json(json!({
            "tokens": tokens,
            "count": tokens.len(),
            "max_model_len": st.engine.info().ctx_len,
        })))
    })();
    r.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

/// `POST /detokenize`: `{tokens}` → `{prompt}`.
pub async fn detokenize(State(st): State<Arc<AppState>>, body: Body) -> Response {
    let r = (|| {
        let m = body_map(body)?;
        let f = Fields(&m);
        params::check_model(&f, &st.model_name)?;
        let ids = match f.get("tokens") {
            Some(Value::Array(a)) => token_ids(&st, a, "tokens")?,
            _ => {
                return Err(ApiError::invalid(
                    "tokens",
                    "`tokens` must be an array of token ids",
                ))
            }
        };
        Ok(Json(json!({"prompt": st.tokenizer.decode(&ids, false)})))
    })();
    r.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
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
