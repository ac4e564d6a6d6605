//! Rank pooling on the synthetic qwen3 reranker (`ridge_model::synthetic::synthetic_reranker`,
//! f32 weights, Qwen3-Reranker's head layout): the prompts ridge forms and the scores it
//! computes against llama.cpp's (`llama-embedding --pooling rank`, a fixture,
//! `tests/data/llama_cpp_rerank.json`, made by `tools/reference/make_rerank_fixtures.sh`), in
//! chunks and batched with generations, and the same scores as each pair alone.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ridge_engine::{
    rerank_prompt, EmbeddingEvent, EmbeddingRequest, EmbeddingSink, EngineConfig, EngineCore,
    EventSink, Pooling, Request,
};
use ridge_model::synthetic::{synthetic_model, synthetic_reranker};
use ridge_model::Model;
use ridge_tokenizer::Tokenizer;
use serde_json::Value;

/// Relative gap allowed between ridge's outputs and llama.cpp's (both in f32 weights;
/// llama.cpp prints seven decimals).
const TOL: f64 = 1e-3;

fn core(dir: &tempfile::TempDir, max_batch_tokens: usize) -> (EngineCore, Arc<Tokenizer>) {
    let path = dir.path().join("reranker.gguf");
    std::fs::write(&path, synthetic_model(&synthetic_reranker())).unwrap();
    let model = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(model.gguf()).unwrap());
    let core = EngineCore::new(
        model,
        tok.clone(),
        EngineConfig {
            max_batch_tokens,
            max_seqs: 16,
            kv_cache_tokens: 16 * 512,
            ..Default::default()
        },
    )
    .unwrap();
    (core, tok)
}

type Slot = Arc<Mutex<Option<EmbeddingEvent>>>;

fn submit(core: &mut EngineCore, id: u64, tokens: Vec<u32>) -> Slot {
    let slot: Slot = Arc::default();
    let s = slot.clone();
    let sink: EmbeddingSink = Arc::new(move |e| *s.lock().unwrap() = Some(e));
    let req = EmbeddingRequest {
        tokens,
        pooling: Pooling::Rank,
    };
    core.submit_embedding(id, req, sink, Instant::now())
        .unwrap();
    slot
}

fn outputs(slot: &Slot) -> Vec<f32> {
    let e = slot.lock().unwrap().take().expect("a rank event");
    e.result.expect("scores")
}

fn fixture() -> Value {
    let p = format!(
        "{}/tests/data/llama_cpp_rerank.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The fixture's pairs formed with the file's rerank template give llama.cpp's token ids;
/// their outputs, computed with a budget of 32 tokens (every prompt is scored across three to
/// eleven chunks) beside two generations, match llama.cpp's to [`TOL`], relative; each pair
/// alone in a fresh engine gives the same bits; and every block is free at the end.
#[test]
fn rank_scores_match_llama_cpp() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (mut c, tok) = core(&dir, 32);
    let head = c.model().rank_head().expect("a rank head").clone();
    assert_eq!(head.labels(), ["yes", "no"]);
    let pairs = fx["pairs"].as_array().unwrap();
    let mut prompts = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let (q, d) = (
            p["query"].as_str().unwrap(),
            p["document"].as_str().unwrap(),
        );
        let got = rerank_prompt(&tok, head.template(), q, d).unwrap();
        let want: Vec<u32> = fx["token_ids"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got, want, "pair {i}: ridge forms llama.cpp's prompt");
        prompts.push(got);
    }
    for g in 0..2u64 {
        let sink: EventSink = Arc::new(|_| true);
        let mut r = Request::greedy(prompts[g as usize][..20].to_vec(), 6);
        r.ignore_eos = true;
        c.submit(100 + g, r, sink, Instant::now()).unwrap();
    }
    let slots: Vec<Slot> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| submit(&mut c, i as u64 + 1, p.clone()))
        .collect();
    while c.step() {
        c.check_invariants().unwrap();
    }
    assert_eq!(c.stats().kv_used_blocks.load(Ordering::Relaxed), 0);
    let mut worst = 0f64;
    for (i, slot) in slots.iter().enumerate() {
        let got = outputs(slot);
        let want: Vec<f64> = fx["outputs"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "pair {i}: one output per label");
        for (g, w) in got.iter().zip(&want) {
            let rel = (f64::from(*g) - w).abs() / w.abs();
            worst = worst.max(rel);
            assert!(rel < TOL, "pair {i}: ridge {got:?}, llama.cpp {want:?}");
        }
        eprintln!("pair {i}: ridge {got:?}, llama.cpp {want:?}");

        let (mut one, _) = core(&dir, 512);
        let s = submit(&mut one, 1, prompts[i].clone());
        while one.step() {}
        assert_eq!(
            outputs(&s),
            got,
            "pair {i}: alone, in one chunk, the same bits"
        );
    }
    eprintln!("worst relative gap to llama.cpp: {worst:.2e}");
}

/// Rank pooling is refused on a model without a head, and is not offered to vectors.
#[test]
fn rank_needs_a_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.gguf");
    let spec = ridge_model::synthetic::SyntheticSpec {
        arch: ridge_model::Architecture::Qwen3,
        ..Default::default()
    };
    std::fs::write(&path, synthetic_model(&spec)).unwrap();
    let model = Model::load(&path).unwrap();
    assert!(model.rank_head().is_none());
    let tok = Arc::new(Tokenizer::from_gguf(model.gguf()).unwrap());
    let c = EngineCore::new(model, tok, EngineConfig::default()).unwrap();
    let e = c
        .check_embedding(&EmbeddingRequest {
            tokens: vec![1, 2],
            pooling: Pooling::Rank,
        })
        .unwrap_err();
    assert!(e.to_string().contains("classifier head"), "{e}");
}
