//! `POST /v1/embeddings` end to end: the official OpenAI SDK against a real `ridge serve
//! --pooling mean` on SmolLM2-135M, every vector equal to what the engine computes in-process
//! for the same tokens (float, the SDK's decoded base64, raw base64); bad inputs are 400s; a
//! server on a model that declares no pooling, and `/v1/rerank` without rank pooling, answer
//! 400s that say why.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::server::Server;
use common::*;
use ridge_engine::{EmbeddingRequest, EmbeddingSink, EngineConfig, EngineCore, Pooling};
use serde_json::{json, Value};

const TEXTS: [&str; 4] = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors.",
    "Paris is the capital and largest city of France.",
    "fn main() { println!(\"hello\"); }",
];

/// Vectors by input index.
type Vectors = Vec<(usize, Vec<f32>)>;

/// The engine's own vectors for `TEXTS` (tokenized as the server does), and their token ids.
fn engine_vectors(pooling: Pooling) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let model = ridge_model::Model::load(smollm2()).unwrap();
    let tok = Arc::new(ridge_tokenizer::Tokenizer::from_gguf(model.gguf()).unwrap());
    let mut core = EngineCore::new(model, tok.clone(), EngineConfig::default()).unwrap();
    let ids: Vec<Vec<u32>> = TEXTS
        .iter()
        .map(|t| tok.encode(t, true, true).unwrap())
        .collect();
    let out: Arc<Mutex<Vectors>> = Arc::default();
    for (i, t) in ids.iter().enumerate() {
        let o = out.clone();
        let sink: EmbeddingSink = Arc::new(move |e| {
            o.lock().unwrap().push((i, e.result.unwrap()));
        });
        let req = EmbeddingRequest {
            tokens: t.clone(),
            pooling,
        };
        core.submit_embedding(i as u64 + 1, req, sink, Instant::now())
            .unwrap();
    }
    while core.step() {}
    let mut v = out.lock().unwrap().clone();
    v.sort_by_key(|(i, _)| *i);
    (ids, v.into_iter().map(|(_, v)| v).collect())
}

#[test]
fn the_openai_sdk_gets_the_engines_vectors_as_float_and_base64() {
    let (ids, vectors) = engine_vectors(Pooling::Mean);
    // A queue of 2: requests of more inputs wait for their own answers instead of a 429.
    let s = Server::start(&["--pooling", "mean", "--max-queue", "2", "--max-seqs", "8"]);
    let (code, models) = s.get("/v1/models");
    assert_eq!(code, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    let name = models["data"][0]["id"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let expected = dir.path().join("expected.json");
    let want = json!({
        "model": name,
        "width": 576,
        "texts": TEXTS,
        "token_ids": ids,
        "vectors": vectors,
    });
    std::fs::write(&expected, want.to_string()).unwrap();
    let out = python_check(
        "embeddings_check.py",
        &[s.base.as_ref(), expected.as_os_str()],
    );
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["texts"], 4);
    assert_eq!(summary["width"], 576);
    // The raw JSON: the exact shape, and usage counts the tokens.
    let (code, r) = s.post(
        "/v1/embeddings",
        &json!({"input": TEXTS[1], "model": name, "user": "someone"}),
    );
    assert_eq!(code, 200, "{r}");
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&r), ["data", "model", "object", "usage"]);
    assert_eq!(keys(&r["data"][0]), ["embedding", "index", "object"]);
    assert_eq!(r["usage"]["prompt_tokens"], ids[1].len());
    assert_eq!(r["usage"]["total_tokens"], ids[1].len());
    let got: Vec<f32> = r["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(
        got, vectors[1],
        "JSON floats round-trip to the engine's f32s"
    );
    // 100 inputs through a queue of 2, each the engine's vector of its text.
    let many: Vec<&str> = (0..100).map(|i| TEXTS[i % 4]).collect();
    let (code, r) = s.post(
        "/v1/embeddings",
        &json!({"input": many, "encoding_format": "float"}),
    );
    assert_eq!(code, 200, "{r}");
    let data = r["data"].as_array().unwrap();
    assert_eq!(data.len(), 100);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        let v: Vec<f32> = d["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(v, vectors[i % 4], "input {i}");
    }
}

#[test]
fn without_a_pooling_embeddings_and_rerank_are_400s_that_say_why() {
    // SmolLM2 declares no pooling (llama.cpp's default is then none).
    let s = Server::start(&[]);
    let (code, r) = s.post("/v1/embeddings", &json!({"input": "hello"}));
    assert_eq!(code, 400, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("--pooling"), "{msg}");
    assert_eq!(r["error"]["type"], "invalid_request_error");
    // Field errors come first, as on every endpoint.
    let (code, r) = s.post("/v1/embeddings", &json!({"input": []}));
    assert_eq!(code, 400);
    assert_eq!(r["error"]["param"], "input");
    let (code, r) = s.post(
        "/v1/rerank",
        &json!({"query": "a", "documents": ["b", "c"]}),
    );
    assert_eq!(code, 400, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("no rank pooling"), "{msg}");
    // Last pooling through the flag: a different vector from mean's, still unit length.
    let s = Server::start(&["--pooling", "last"]);
    let (_, mean) = engine_vectors(Pooling::Mean);
    let (_, last) = engine_vectors(Pooling::Last);
    let (code, r) = s.post(
        "/v1/embeddings",
        &json!({"input": TEXTS[0], "encoding_format": "float"}),
    );
    assert_eq!(code, 200, "{r}");
    let got: Vec<f32> = r["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got, last[0]);
    assert_ne!(got, mean[0]);
    let bad = run(&["serve", "--pooling", "rank", "--port", "0"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("expected mean, last or cls"),
        "{}",
        stderr(&bad)
    );
}
