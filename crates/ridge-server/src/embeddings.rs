//! `POST /v1/embeddings` (OpenAI's shape) and `POST /v1/rerank`.
//!
//! An embedding is a different product from a completion — one vector per input, no sampling,
//! no stream — so it has its own translator onto its own engine seam
//! ([`ridge_engine::Engine::submit_embedding`]) rather than a branch inside the generation path:
//! the inputs are validated field by field like every other body, each input becomes one engine
//! embedding request (they run concurrently, batched with whatever else the engine is doing),
//! and the answers are gathered in input order.
//!
//! The pooling is the engine's ([`ridge_engine::EngineInfo::pooling`]): what the model file
//! declares, or `ridge serve --pooling`. A causal LM declares none, and llama.cpp's default for
//! it is then `none` (a vector per token), which this endpoint cannot answer with — as
//! llama-server does, such a server refuses with a 400 that says which flag to pass.
//!
//! `encoding_format: "base64"` sends each vector as the base64 of its little-endian f32 bytes,
//! which is what the OpenAI SDKs request by default and decode with `frombuffer(…, float32)`:
//! a quarter of the JSON's size and exact.
//!
//! Reranking (`/v1/rerank`, in `rerank.rs`) rides the same seam under rank pooling; its
//! handler shares [`embed_all`] and the engine's error mapping.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::unbounded_channel;

use ridge_engine::{
    EmbeddingEvent, EmbeddingRequest, EmbeddingSink, Engine, EngineError, Pooling, RequestId,
};

use crate::app::AppState;
use crate::error::ApiError;
use crate::params::{self, Fields};

/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;
/// Most tokens over all inputs of one request (OpenAI's limit).
pub const MAX_TOTAL_TOKENS: usize = 300_000;

/// Short waits for a full queue to drain, once a request has had answers (see `embed_all`).
const QUEUE_RETRIES: usize = 1000;

use crate::request::Body;

/// How the vectors are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// JSON numbers.
    Float,
    /// Base64 of the little-endian f32 bytes.
    Base64,
}

/// A validated embeddings request.
#[derive(Clone, Debug)]
pub struct EmbeddingJob {
    /// Token ids of each input, in order.
    pub inputs: Vec<Vec<u32>>,
    /// How to write the vectors.
    pub encoding: Encoding,
}

/// Validates an embeddings body for a model of vocabulary `vocab`, context `ctx` and vector
/// width `width`.
pub fn validate(
    body: &Map<String, Value>,
    tokenizer: &ridge_tokenizer::Tokenizer,
    vocab: usize,
    ctx: usize,
    width: usize,
) -> Result<EmbeddingJob, ApiError> {
    let f = Fields::new(body);
    params::check_model(&f)?;
    let encoding = match f.str("encoding_format")? {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("`encoding_format` must be \"float\" or \"base64\", got {other:?}"),
            ))
        }
    };
    if let Some(d) = f.int_in("dimensions", 1, i64::MAX)? {
        if d as usize != width {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "this model's embeddings have {width} dimensions and cannot be shortened; got {d}"
                ),
            ));
        }
    }
    f.str("user")?;
    let inputs = inputs(&f, tokenizer, vocab)?;
    let mut total = 0usize;
    for (i, t) in inputs.iter().enumerate() {
        if t.is_empty() {
            return Err(ApiError::invalid("input", format!("input {i} is empty")));
        }
        if t.len() > ctx {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "input {i} has {} tokens; this model's maximum context length is {ctx} tokens",
                    t.len()
                ),
            ));
        }
        total += t.len();
    }
    if total > MAX_TOTAL_TOKENS {
        return Err(ApiError::invalid(
            "input",
            format!("the inputs have {total} tokens; at most {MAX_TOTAL_TOKENS} per request"),
        ));
    }
    Ok(EmbeddingJob { inputs, encoding })
}

/// `input`: a string, strings, token ids, or arrays of token ids.
fn inputs(
    f: &Fields,
    tokenizer: &ridge_tokenizer::Tokenizer,
    vocab: usize,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "input",
            "`input` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids",
        )
    };
    // An empty string is refused as OpenAI does, even where the tokenizer would add a BOS.
    let text = |s: &str| {
        if s.is_empty() {
            return Err(ApiError::invalid("input", "an input string is empty"));
        }
        tokenizer
            .encode(s, true, true)
            .map_err(|e| ApiError::invalid("input", format!("cannot tokenize: {e}")))
    };
    let ids = |items: &[Value]| {
        items
            .iter()
            .map(|v| match v.as_u64() {
                Some(t) if (t as usize) < vocab => Ok(t as u32),
                _ => Err(ApiError::invalid(
                    "input",
                    format!("token ids must be integers in [0, {vocab})"),
                )),
            })
            .collect::<Result<Vec<u32>, ApiError>>()
    };
    match f.get("input") {
        None => Err(ApiError::invalid("input", "`input` is required")),
        Some(Value::String(s)) => Ok(vec![text(s)?]),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(ApiError::invalid("input", "`input` is an empty array"))
        }
        Some(Value::Array(a)) => match &a[0] {
            Value::Number(_) => Ok(vec![ids(a)?]),
            _ if a.len() > MAX_INPUTS => Err(ApiError::invalid(
                "input",
                format!("at most {MAX_INPUTS} inputs per request, got {}", a.len()),
            )),
            Value::String(_) => a
                .iter()
                .map(|v| match v {
                    Value::String(s) => text(s),
                    _ => Err(wrong()),
                })
                .collect(),
            Value::Array(_) => a
                .iter()
                .map(|v| match v {
                    Value::Array(t) => ids(t),
                    _ => Err(wrong()),
                })
                .collect(),
            _ => Err(wrong()),
        },
        Some(_) => Err(wrong()),
    }
}

/// Standard base64 (with padding) of `v`'s little-endian f32 bytes (what the OpenAI SDKs
/// decode for `encoding_format: "base64"`).
pub fn base64_f32(v: &[f32]) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::QueueFull(_) => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", format!("{e}"))
        }
        EngineError::Stopped | EngineError::Model(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "engine_unavailable",
            format!("{e}"),
        ),
        _ => ApiError::invalid("input", e.to_string()),
    }
}

/// The 400 for a server whose pooling gives no single vector.
fn no_pooling(model: &str, pooling: Pooling) -> ApiError {
    let why = match pooling {
        Pooling::Rank => "declares rank pooling (a reranker: its scores are served by /v1/rerank)",
        _ => "declares no pooling (llama.cpp's default for it is `none`, a vector per token, which this endpoint cannot return)",
    };
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "pooling_unsupported",
        format!("the model `{model}` {why}; start the server with `ridge serve --pooling mean` (or last, cls)"),
    )
}

/// Aborts the engine requests still outstanding when the handler is dropped (the client left).
struct Outstanding<'a> {
    engine: &'a Engine,
    ids: Vec<Option<RequestId>>,
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        for id in self.ids.iter().flatten() {
            self.engine.abort(*id);
        }
    }
}

/// Runs the inputs through the engine concurrently, the vectors in input order. At most
/// `max_seqs` of one request are in the engine at a time, and a full queue only waits for this
/// request's own answers: a request of 2048 inputs neither needs a queue that long nor crowds
/// out everyone else. It is a 429 only when the queue is full before the request got anything
/// in, or stays full for [`QUEUE_RETRIES`] short waits with none of its inputs left inside
/// (the engine's queue gauge is published once per step, so it can read full for a moment
/// after this request's own inputs were admitted).
pub(crate) async fn embed_all(
    engine: &Engine,
    inputs: Vec<Vec<u32>>,
    pooling: Pooling,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let (tx, mut rx) = unbounded_channel::<(usize, EmbeddingEvent)>();
    // Dropped once every input is submitted, so that a sink the engine drops unanswered (it
    // stopped) ends the wait instead of hanging it.
    let mut tx = Some(tx);
    let n = inputs.len();
    let window = engine.info().config.max_seqs.max(1);
    let mut pending = Outstanding {
        engine,
        ids: vec![None; n],
    };
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    let (mut next, mut in_flight, mut done, mut retries) = (0, 0, 0, 0);
    while done < n {
        while next < n && in_flight < window {
            let Some(tx) = tx.clone() else { break };
            let i = next;
            let sink: EmbeddingSink = Arc::new(move |e| {
                let _ = tx.send((i, e));
            });
            let req = EmbeddingRequest {
                tokens: inputs[i].clone(),
                pooling,
            };
            match engine.submit_embedding(req, sink) {
                Ok(id) => pending.ids[i] = Some(id),
                Err(EngineError::QueueFull(_)) if in_flight > 0 => break,
                Err(EngineError::QueueFull(_)) if done > 0 && retries < QUEUE_RETRIES => {
                    retries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    continue;
                }
                Err(e) => return Err(engine_error(e)),
            }
            next += 1;
            in_flight += 1;
        }
        if next == n {
            tx = None;
        }
        let Some((i, e)) = rx.recv().await else {
            return Err(engine_error(EngineError::Stopped));
        };
        pending.ids[i] = None;
        match e.result {
            Ok(v) => out[i] = Some(v),
            Err(msg) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    format!("input {i} failed: {msg}"),
                ))
            }
        }
        in_flight -= 1;
        done += 1;
    }
    Ok(out.into_iter().flatten().collect())
}

/// `POST /v1/embeddings`.
pub async fn embeddings(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match embeddings_inner(&st, body).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn embeddings_inner(app: &AppState, body: Body) -> Result<Value, ApiError> {
    let b = crate::request::read_json(body)?;
    let st = app.pool.for_body(&b).await?;
    let info = st.engine.info();
    let job = validate(
        &b,
        &st.tokenizer,
        info.vocab,
        info.ctx_len,
        info.embedding_width,
    )?;
    if !matches!(info.pooling, Pooling::Mean | Pooling::Cls | Pooling::Last) {
        return Err(no_pooling(&st.model_name, info.pooling));
    }
    let tokens: usize = job.inputs.iter().map(Vec::len).sum();
    let vectors = embed_all(&st.engine, job.inputs, info.pooling).await?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = match job.encoding {
                Encoding::Float => json!(v),
                Encoding::Base64 => Value::String(base64_f32(v)),
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": st.model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        // 1.0f32 = 00 00 80 3f; RFC 4648's "foobar" vectors for the padding cases.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.0, 0.5]), "AACAPwAAAMAAAAA/");
        assert_eq!(base64_f32(&[]), "");
        let bytes = |s: &str| -> String {
            // Reinterpret 4-byte groups as f32 to feed the encoder arbitrary bytes.
            let mut b = s.as_bytes().to_vec();
            assert_eq!(b.len() % 4, 0);
            let v: Vec<f32> = b
                .chunks_mut(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            base64_f32(&v)
        };
        assert_eq!(bytes("foob"), "Zm9vYg==");
        assert_eq!(bytes("foobarba"), "Zm9vYmFyYmE=");
    }
}
