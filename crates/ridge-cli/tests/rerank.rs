//! `POST /v1/rerank` end to end: a real `ridge serve` on the synthetic qwen3 reranker
//! (written into the test's temp dir): results sorted by score, `top_n` and
//! `return_documents`, every score equal to the engine's for the same pair and within 1e-3 of
//! llama.cpp's (the engine's fixture, `crates/ridge-engine/tests/data/llama_cpp_rerank.json`),
//! the same answer on `/rerank` and `/v2/rerank`, and bad bodies as 400s.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::server::Server;
use ridge_engine::{
    rerank_prompt, EmbeddingRequest, EmbeddingSink, EngineConfig, EngineCore, Pooling,
};
use ridge_model::synthetic::{synthetic_model, synthetic_reranker};
use serde_json::{json, Value};

fn fixture() -> Value {
    let p = common::repo().join("crates/ridge-engine/tests/data/llama_cpp_rerank.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The engine's first output (the score) for each document against `query`, and the tokens.
fn engine_scores(path: &std::path::Path, query: &str, docs: &[String]) -> (Vec<f32>, usize) {
    let model = ridge_model::Model::load(path).unwrap();
    let tok = Arc::new(ridge_tokenizer::Tokenizer::from_gguf(model.gguf()).unwrap());
    let template = model.rank_head().unwrap().template().map(str::to_string);
    let mut core = EngineCore::new(model, tok.clone(), EngineConfig::default()).unwrap();
    let out: Arc<Mutex<Vec<(usize, f32)>>> = Arc::default();
    let mut tokens = 0;
    for (i, d) in docs.iter().enumerate() {
        let t = rerank_prompt(&tok, template.as_deref(), query, d).unwrap();
        tokens += t.len();
        let o = out.clone();
        let sink: EmbeddingSink =
            Arc::new(move |e| o.lock().unwrap().push((i, e.result.unwrap()[0])));
        let req = EmbeddingRequest {
            tokens: t,
            pooling: Pooling::Rank,
        };
        core.submit_embedding(i as u64 + 1, req, sink, Instant::now())
            .unwrap();
    }
    while core.step() {}
    let mut v = out.lock().unwrap().clone();
    v.sort_by_key(|(i, _)| *i);
    (v.into_iter().map(|(_, s)| s).collect(), tokens)
}

#[test]
fn rerank_sorts_the_engines_scores_and_matches_llama_cpp() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reranker.gguf");
    std::fs::write(&path, synthetic_model(&synthetic_reranker())).unwrap();
    // The fixture's first three pairs share a query.
    let query = fx["pairs"][0]["query"].as_str().unwrap().to_string();
    let docs: Vec<String> = (0..3)
        .map(|i| fx["pairs"][i]["document"].as_str().unwrap().to_string())
        .collect();
    let llama: Vec<f64> = (0..3)
        .map(|i| fx["outputs"][i][0].as_f64().unwrap())
        .collect();
    let (want, tokens) = engine_scores(&path, &query, &docs);

    let s = Server::start_model(&path, &["--max-seqs", "4", "--max-batch-tokens", "32"]);
    let (code, r) = s.post(
        "/v1/rerank",
        &json!({"query": query, "documents": docs, "return_documents": true}),
    );
    assert_eq!(code, 200, "{r}");
    assert!(r["id"].as_str().unwrap().starts_with("rerank-"), "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], tokens);
    assert_eq!(r["usage"]["total_tokens"], tokens);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
    for (k, res) in results.iter().enumerate() {
        let i = res["index"].as_u64().unwrap() as usize;
        assert_eq!(i, order[k], "result {k}: sorted by score, highest first");
        let got = res["relevance_score"].as_f64().unwrap();
        assert_eq!(got as f32, want[i], "document {i}: the engine's score");
        assert!(
            (got - llama[i]).abs() / llama[i] < 1e-3,
            "document {i}: {got} vs llama.cpp {}",
            llama[i]
        );
        assert_eq!(res["document"], json!({"text": docs[i]}));
        assert_eq!(res.as_object().unwrap().len(), 3, "{res}");
    }
    // top_n truncates; documents are left out by default; the other paths answer alike.
    for p in ["/rerank", "/v2/rerank"] {
        let (code, t) = s.post(p, &json!({"query": query, "documents": docs, "top_n": 2}));
        assert_eq!(code, 200, "{p}: {t}");
        let t = t["results"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        for (a, b) in t.iter().zip(results) {
            assert_eq!(a["index"], b["index"]);
            assert_eq!(a["relevance_score"], b["relevance_score"]);
            assert!(a.get("document").is_none(), "{a}");
        }
    }
    for (body, param) in [
        (json!({"documents": ["a"]}), "query"),
        (json!({"query": ["a"], "documents": ["a"]}), "query"),
        (json!({"query": "q", "documents": []}), "documents"),
        (json!({"query": "q", "documents": [1, 2]}), "documents"),
        (
            json!({"query": "q", "documents": vec!["a"; 2049]}),
            "documents",
        ),
        (
            json!({"query": "q", "documents": ["a"], "top_n": "2"}),
            "top_n",
        ),
    ] {
        let (code, r) = s.post("/v1/rerank", &body);
        assert_eq!(code, 400, "{body}: {r}");
        assert_eq!(r["error"]["type"], "invalid_request_error", "{r}");
        assert_eq!(r["error"]["param"], param, "{r}");
    }
}
