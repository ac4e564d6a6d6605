//! `POST /v1/rerank` (also `/rerank` and `/v2/rerank`): a query against documents, scored by a
//! reranker's classifier head.
//!
//! The body and the answer follow the shape llama-server, vLLM, Jina and Cohere share:
//! `{"model", "query", "documents": [...], "top_n"?, "return_documents"?}` in,
//! `{"id", "model", "object": "list", "results": [{"index", "relevance_score",
//! "document"?: {"text"}}], "usage": {"prompt_tokens", "total_tokens"}}` out, the results
//! sorted by score, highest first (ties keep the documents' order), `top_n` of them (all when
//! it is absent or 0, as vLLM reads 0). A document may be a string or Jina's `{"text": …}`.
//! `return_documents` defaults to false (Cohere's v2 default; llama-server never returns them).
//!
//! Each (query, document) pair becomes one prompt, formed as llama-server forms it
//! ([`ridge_engine::rerank_prompt`]: the model's rerank template if it has one), and one engine
//! request under [`Pooling::Rank`]: the same seam as embeddings (batched with whatever else
//! runs, chunked, its blocks freed, never the prefix cache), answered with the head's outputs.
//! The relevance score is the first output, as llama-server reports it (for a Qwen3 reranker
//! P(yes); see `ridge-model`'s `rank.rs`).
//!
//! A model without a classifier head (it declares no rank pooling) answers 400, as
//! llama-server does when it was not started for reranking.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use ridge_engine::{rerank_prompt, Pooling};

use crate::app::AppState;
use crate::embeddings::{embed_all, MAX_INPUTS, MAX_TOTAL_TOKENS};
use crate::error::ApiError;
use crate::params::{self, Fields};
use crate::request::Body;

/// A validated rerank request.
#[derive(Clone, Debug)]
pub struct RerankJob {
    /// The documents' texts, in order.
    pub documents: Vec<String>,
    /// The formed prompt of each (query, document) pair.
    pub prompts: Vec<Vec<u32>>,
    /// How many results to return.
    pub top_n: usize,
    /// Whether each result carries its document.
    pub return_documents: bool,
}

/// Validates a rerank body for a model of context `ctx`, forming the
/// prompts with `template` (the model's rerank template, if any).
pub fn validate(
    body: &Map<String, Value>,
    tokenizer: &ridge_tokenizer::Tokenizer,
    template: Option<&str>,
    ctx: usize,
) -> Result<RerankJob, ApiError> {
    let f = Fields::new(body);
    params::check_model(&f)?;
    let query = f
        .str("query")?
        .ok_or_else(|| ApiError::invalid("query", "`query` is required (a string)"))?;
    let wrong = || {
        ApiError::invalid(
            "documents",
            "`documents` must be an array of strings (or of objects with a string `text`)",
        )
    };
    let documents: Vec<String> = match f.get("documents") {
        None => return Err(ApiError::invalid("documents", "`documents` is required")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "documents",
                "`documents` is an empty array",
            ))
        }
        Some(Value::Array(a)) if a.len() > MAX_INPUTS => {
            return Err(ApiError::invalid(
                "documents",
                format!(
                    "at most {MAX_INPUTS} documents per request, got {}",
                    a.len()
                ),
            ))
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Object(o) => match o.get("text") {
                    Some(Value::String(s)) => Ok(s.clone()),
                    _ => Err(wrong()),
                },
                _ => Err(wrong()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(wrong()),
    };
    let top_n = match f.int_in("top_n", 0, i64::MAX)? {
        None | Some(0) => documents.len(),
        Some(n) => (n as usize).min(documents.len()),
    };
    let return_documents = f.bool("return_documents", false)?;
    let mut prompts = Vec::with_capacity(documents.len());
    let mut total = 0usize;
    for (i, d) in documents.iter().enumerate() {
        let t = rerank_prompt(tokenizer, template, query, d)
            .map_err(|e| ApiError::invalid("documents", format!("cannot tokenize: {e}")))?;
        if t.is_empty() {
            return Err(ApiError::invalid(
                "documents",
                format!("document {i} and the query form an empty prompt"),
            ));
        }
        if t.len() > ctx {
            return Err(ApiError::invalid(
                "documents",
                format!(
                    "the query and document {i} take {} tokens; this model's maximum context \
                     length is {ctx} tokens",
                    t.len()
                ),
            ));
        }
        total += t.len();
        prompts.push(t);
    }
    if total > MAX_TOTAL_TOKENS {
        return Err(ApiError::invalid(
            "documents",
            format!("the pairs take {total} tokens; at most {MAX_TOTAL_TOKENS} per request"),
        ));
    }
    Ok(RerankJob {
        documents,
        prompts,
        top_n,
        return_documents,
    })
}

/// `POST /v1/rerank`.
pub async fn rerank(State(app): State<Arc<AppState>>, body: Body) -> Response {
    match rerank_inner(&app, body).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn rerank_inner(app: &AppState, body: Body) -> Result<Value, ApiError> {
    let b = crate::request::read_json(body)?;
    let st = app.pool.for_body(&b).await?;
    let info = st.engine.info();
    let Some(head) = &info.rank_head else {
        // The model is checked first, so a wrong name reads as one.
        params::check_model(&Fields::new(&b))?;
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "rerank_unsupported",
            format!(
                "the model `{}` has no rank pooling (it declares `{}`); reranking needs a \
                 reranker (`{{arch}}.pooling_type = 4` with a classifier head)",
                st.model_name, info.declared_pooling
            ),
        ));
    };
    let job = validate(&b, &st.tokenizer, head.template(), info.ctx_len)?;
    let tokens: usize = job.prompts.iter().map(Vec::len).sum();
    let outputs = embed_all(&st.engine, job.prompts, Pooling::Rank).await?;
    let mut scored: Vec<(usize, f32)> = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| (i, o.first().copied().unwrap_or(f32::NAN)))
        .collect();
    // Highest first; a stable sort keeps tied documents in their order.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let results: Vec<Value> = scored
        .into_iter()
        .take(job.top_n)
        .map(|(i, score)| {
            let mut r = json!({"index": i, "relevance_score": score});
            if job.return_documents {
                r["document"] = json!({"text": job.documents[i]});
            }
            r
        })
        .collect();
    Ok(json!({
        "id": format!("rerank-{}", st.next_response_id()),
        "model": st.model_name,
        "object": "list",
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked_field_by_field() {
        let spec = ridge_model::synthetic::synthetic_reranker();
        let f = ridge_gguf::GgufFile::from_bytes(
            "<memory>",
            ridge_model::synthetic::synthetic_model(&spec),
        )
        .unwrap();
        let tok = ridge_tokenizer::Tokenizer::from_gguf(&f).unwrap();
        let t = Some("<|endoftext|>{query}|{document}");
        let v = |body: Value| validate(body.as_object().unwrap(), &tok, t, 64);
        let err = |body: Value| v(body).unwrap_err().message;
        let ok = v(json!({"query": "q", "documents": ["ab", {"text": "c"}], "top_n": 1})).unwrap();
        // 256 is <|endoftext|>; the synthetic vocabulary is one token per byte.
        assert_eq!(
            ok.prompts,
            vec![vec![256, 113, 124, 97, 98], vec![256, 113, 124, 99]]
        );
        assert_eq!((ok.top_n, ok.return_documents), (1, false));
        let all =
            v(json!({"query": "q", "documents": ["a"], "top_n": 0, "return_documents": true}));
        assert_eq!(
            all.map(|j| (j.top_n, j.return_documents)).ok(),
            Some((1, true))
        );
        assert!(err(json!({"documents": ["a"]})).contains("`query` is required"));
        assert!(err(json!({"query": 3, "documents": ["a"]})).contains("`query` must be a string"));
        assert!(err(json!({"query": "q"})).contains("`documents` is required"));
        assert!(err(json!({"query": "q", "documents": []})).contains("empty array"));
        assert!(err(json!({"query": "q", "documents": "a"})).contains("array of strings"));
        assert!(err(json!({"query": "q", "documents": [1]})).contains("array of strings"));
        assert!(err(json!({"query": "q", "documents": ["a"], "top_n": -1})).contains("top_n"));
        let many = vec!["a"; MAX_INPUTS + 1];
        assert!(err(json!({"query": "q", "documents": many})).contains("at most 2048"));
        let long = "x".repeat(80);
        assert!(err(json!({"query": "q", "documents": [long]})).contains("maximum context"));
        // The pool resolved the name before the body got here; only its type is checked.
        assert!(err(json!({"model": 3, "query": "q", "documents": ["a"]})).contains("model"));
    }
}
