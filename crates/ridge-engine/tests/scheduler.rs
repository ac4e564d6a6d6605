//! The continuous-batching engine on tiny random models: scheduler invariants under random
//! arrivals, lengths and aborts with a cache small enough to force preemption; outputs that do
//! not depend on batching, chunking, preemption or prefix reuse; stop conditions; n > 1 sharing
//! the prompt's blocks.

use std::sync::{Arc, Mutex};
use std::time::Instant;

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ridge_engine::{EngineConfig, Event, EventSink, FinishReason, Request, SamplingParams};
use ridge_model::synthetic::SyntheticSpec;

#[test]
fn random_load_keeps_invariants_and_matches_requests_run_alone() {
    let fx = fixture(256);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // 20 blocks of 16 tokens for up to 24 requests of up to ~110 tokens: preemption happens.
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 48,
        max_seqs: 8,
        kv_cache_tokens: 20 * 16,
        prefix_caching: true,
        ..Default::default()
    });
    let shared_prefix = prompt(&mut rng, 40);
    let mut reqs = Vec::new();
    let mut next_id = 1;
    let mut aborted = Vec::new();
    for step in 0..4000 {
        if reqs.len() < 24 && rng.random_bool(0.3) {
            let len = rng.random_range(1..70);
            let mut p = if rng.random_bool(0.4) {
                shared_prefix.clone()
            } else {
                Vec::new()
            };
            p.extend(prompt(&mut rng, len));
            let max_tokens = rng.random_range(1..40);
            let (s, log) = sink();
            let mut r = Request::greedy(p.clone(), max_tokens);
            r.ignore_eos = true;
            core.submit(next_id, r, s, Instant::now()).unwrap();
            reqs.push((next_id, p, max_tokens, log));
            next_id += 1;
        }
        if !reqs.is_empty() && rng.random_bool(0.03) {
            let id = reqs[rng.random_range(0..reqs.len())].0;
            core.abort(id);
            aborted.push(id);
            core.check_invariants().unwrap();
        }
        let before = core
            .stats()
            .step_tokens
            .load(std::sync::atomic::Ordering::Relaxed);
        core.step();
        let after = core
            .stats()
            .step_tokens
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            after - before <= 48,
            "step {step} ran {} tokens",
            after - before
        );
        core.check_invariants().unwrap();
        if reqs.len() == 24 && !core.has_work() {
            break;
        }
    }
    run_to_end(&mut core);
    assert_eq!(core.kv_used_blocks(), 0, "blocks leaked");
    let preemptions = core
        .stats()
        .preemptions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(preemptions > 0, "the test should exercise preemption");
    let hits = core
        .stats()
        .prefix_hits
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(hits > 0, "the test should exercise prefix reuse");
    let mut finished = 0;
    for (id, p, max_tokens, log) in &reqs {
        let (toks, fin, _) = choice(log, 0);
        let fin = fin.expect("every request ends");
        if aborted.contains(id) && fin == FinishReason::Aborted {
            continue;
        }
        assert_eq!(fin, FinishReason::Length);
        assert_eq!(toks, alone(&fx, p, *max_tokens), "request {id}");
        finished += 1;
    }
    assert!(finished >= 12, "{finished}");
}

#[test]
fn seeded_sampling_does_not_depend_on_the_batch() {
    let fx = fixture(128);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let p = prompt(&mut rng, 20);
    let sampled = |others: usize| {
        let mut core = fx.core(EngineConfig {
            max_batch_tokens: 64,
            ..Default::default()
        });
        let mut r = Request::greedy(p.clone(), 30);
        r.sampling = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: Some(11),
            ..Default::default()
        };
        r.ignore_eos = true;
        let mut rng = ChaCha8Rng::seed_from_u64(others as u64);
        for i in 0..others {
            let (s, _) = sink();
            let mut o = Request::greedy(prompt(&mut rng, 5 + i * 3), 25);
            o.sampling = r.sampling.clone();
            o.sampling.seed = None;
            core.submit(100 + i as u64, o, s, Instant::now()).unwrap();
        }
        let (s, log) = sink();
        core.submit(1, r, s, Instant::now()).unwrap();
        run_to_end(&mut core);
        choice(&log, 0).0
    };
    let a = sampled(0);
    assert_eq!(a.len(), 30);
    assert_eq!(a, sampled(5));
    assert_eq!(a, sampled(9));
}

#[test]
fn n_choices_share_the_prompt_blocks() {
    let fx = fixture(256);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let p = prompt(&mut rng, 50);
    let mut core = fx.core(EngineConfig::default());
    let mut r = Request::greedy(p.clone(), 8);
    r.n = 3;
    r.ignore_eos = true;
    let (s, log) = sink();
    core.submit(1, r, s, Instant::now()).unwrap();
    run_to_end(&mut core);
    let expect = alone(&fx, &p, 8);
    let mut cached = Vec::new();
    for e in log.lock().unwrap().iter() {
        if let Event::Finish(f) = e {
            cached.push((f.index, f.usage.cached_tokens, f.usage.completion_tokens));
        }
    }
    cached.sort();
    // Choice 0 computes the prompt; 1 and 2 adopt its 3 full blocks (48 tokens).
    assert_eq!(cached, vec![(0, 0, 8), (1, 48, 8), (2, 48, 8)]);
    for i in 0..3 {
        assert_eq!(choice(&log, i).0, expect, "greedy choices agree");
    }
}

#[test]
fn stop_strings_tokens_and_lengths_end_choices() {
    let fx = fixture(256);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let p = prompt(&mut rng, 12);
    let reference = alone(&fx, &p, 30);
    let text = fx.tokenizer.decode(&reference, true);
    let run = |r: Request| {
        let mut core = fx.core(EngineConfig::default());
        let (s, log) = sink();
        core.submit(1, r, s, Instant::now()).unwrap();
        run_to_end(&mut core);
        choice(&log, 0)
    };
    // A stop token id: the choice ends at its first occurrence, the token is not text.
    let stop_tok = reference[10];
    let first = reference.iter().position(|&t| t == stop_tok).unwrap();
    let mut r = Request::greedy(p.clone(), 30);
    r.stop_token_ids = vec![stop_tok];
    let (toks, fin, out) = run(r);
    assert_eq!(fin, Some(FinishReason::Stop));
    assert_eq!(toks, reference[..first]);
    assert_eq!(out, fx.tokenizer.decode(&reference[..first], true));
    // A stop string spanning tokens: cut just before it, never emitted.
    let chars: Vec<char> = text.chars().collect();
    let stop: String = chars[5..8].iter().collect();
    let cut = text.find(&stop).unwrap();
    let mut r = Request::greedy(p.clone(), 30);
    r.stop = vec![stop.clone()];
    let (_, fin, out) = run(r);
    assert_eq!(fin, Some(FinishReason::Stop));
    assert_eq!(out, text[..cut]);
    // Length.
    let (toks, fin, out) = run(Request::greedy(p.clone(), 7));
    assert_eq!(
        (toks.as_slice(), fin),
        (&reference[..7], Some(FinishReason::Length))
    );
    assert_eq!(out, fx.tokenizer.decode(&reference[..7], true));
}

#[test]
fn abort_frees_blocks_at_once_and_gone_clients_abort() {
    let fx = fixture(256);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut core = fx.core(EngineConfig::default());
    let (s, log) = sink();
    core.submit(
        1,
        Request::greedy(prompt(&mut rng, 60), 100),
        s,
        Instant::now(),
    )
    .unwrap();
    core.step();
    core.step();
    assert!(core.kv_used_blocks() > 0);
    core.abort(1);
    assert_eq!(core.kv_used_blocks(), 0);
    assert_eq!(choice(&log, 0).1, Some(FinishReason::Aborted));
    // A sink that reports its receiver gone aborts the request on its next token.
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    let gone: EventSink = Arc::new(move |_| {
        *c.lock().unwrap() += 1;
        *c.lock().unwrap() < 3
    });
    core.submit(
        2,
        Request::greedy(prompt(&mut rng, 10), 100),
        gone,
        Instant::now(),
    )
    .unwrap();
    run_to_end(&mut core);
    assert_eq!(core.kv_used_blocks(), 0);
    // Three token events, the third refused; then the finish event.
    assert_eq!(*count.lock().unwrap(), 4);
}

#[test]
fn requests_that_cannot_fit_are_refused_up_front() {
    let fx = fixture(256);
    let core = fx.core(EngineConfig {
        kv_cache_tokens: 64,
        ..Default::default()
    });
    let check = |p: usize, m: usize| core.check(&Request::greedy(vec![1; p], m));
    assert!(check(40, 24).is_ok());
    assert!(check(40, 25)
        .unwrap_err()
        .to_string()
        .contains("whole cache"));
    assert!(check(0, 5).is_err());
    assert!(check(256, 5).is_err());
    assert!(check(10, 0).is_err());
    assert!(core.check(&Request::greedy(vec![300], 5)).is_err());
}

#[test]
fn a_q8_0_kv_cache_serves_the_same_mechanism() {
    // head_dim 32: Q8_0 blocks cover a head exactly.
    let fx = fixture_with(SyntheticSpec {
        ctx_len: 256,
        n_heads: 2,
        n_kv_heads: 1,
        ..Default::default()
    });
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 32,
        kv_cache_tokens: 12 * 16,
        kv_dtype: ridge_model::KvDtype::Q8_0,
        ..Default::default()
    });
    let shared = prompt(&mut rng, 40);
    let mut logs = Vec::new();
    for i in 0..6 {
        let mut p = shared.clone();
        p.extend(prompt(&mut rng, 5 + i));
        let mut r = Request::greedy(p, 20);
        r.ignore_eos = true;
        let (s, log) = sink();
        core.submit(i as u64 + 1, r, s, Instant::now()).unwrap();
        logs.push(log);
    }
    run_to_end(&mut core);
    assert_eq!(core.kv_used_blocks(), 0);
    for log in &logs {
        let (toks, fin, _) = choice(log, 0);
        assert_eq!((toks.len(), fin), (20, Some(FinishReason::Length)));
    }
    assert!(
        core.stats()
            .prefix_hits
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 32
    );
}

/// The all-decoding window counts exactly the tokens sampled after the last first token: with
/// every prompt prefilled in one step, that is every request's tokens but its first. (It used
/// to estimate them by spacing each request's tokens uniformly, which undercounted when early
/// requests decoded slowly beside others' prefill.)
#[test]
fn throughput_counts_the_decode_window_exactly() {
    let fx = common::fixture(256);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 64,
        ..Default::default()
    });
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| vec![1, 2 + i, 3, 4]).collect();
    let r = ridge_engine::run_concurrent(&mut core, &prompts, 7);
    assert_eq!(r.decode_tokens, 3 * 6);
    assert!(r.decode_tok_s > 0.0);
    // Prompts too long to prefill together: the early ones decode during the later prefill,
    // and only tokens after the last first token count.
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 16,
        ..Default::default()
    });
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|i| (0..14).map(|j| 1 + (i + j) % 20).collect())
        .collect();
    let r = ridge_engine::run_concurrent(&mut core, &prompts, 9);
    assert!(
        r.decode_tokens < 3 * 8 && r.decode_tokens >= 8,
        "{}",
        r.decode_tokens
    );
}

/// A short prompt that arrives while a long one is being prefilled is admitted beside it
/// (the long prefill leaves half the step's budget) and, once running, shares the budget
/// with it, so it answers long before the long prompt's first token — and both answer what
/// they answer alone.
#[test]
fn a_short_prompt_is_not_held_behind_a_long_prefill() {
    let fx = fixture(512);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let long = prompt(&mut rng, 400);
    let short = prompt(&mut rng, 60);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 32,
        ..Default::default()
    });
    let mut r = Request::greedy(long.clone(), 4);
    r.ignore_eos = true;
    let (s, long_log) = sink();
    core.submit(1, r, s, Instant::now()).unwrap();
    core.step();
    let mut r = Request::greedy(short.clone(), 4);
    r.ignore_eos = true;
    let (s, short_log) = sink();
    core.submit(2, r, s, Instant::now()).unwrap();
    let mut steps = 0;
    while choice(&short_log, 0).1.is_none() {
        core.step();
        steps += 1;
        assert!(steps < 100, "the short prompt never finished");
    }
    // 60 prompt tokens (16 at admission, then half the budget a step) and 4 decodes: a
    // handful of steps, while the long prompt (400 tokens at most 32 a step) is still far
    // from its first token.
    assert!(steps <= 8, "{steps} steps");
    assert!(
        choice(&long_log, 0).0.is_empty(),
        "the long prompt already answered"
    );
    run_to_end(&mut core);
    assert_eq!(choice(&short_log, 0).0, alone(&fx, &short, 4));
    assert_eq!(choice(&long_log, 0).0, alone(&fx, &long, 4));
}
