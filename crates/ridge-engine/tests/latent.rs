//! The continuous-batching engine on a latent-attention model (deepseek2: one cached latent row
//! per token and layer, no values): under random arrivals, aborts and a cache small enough to
//! force preemption, with prefix caching on and `n > 1` requests, every request's tokens equal
//! the same request run alone; a repeated prompt resumes from its cached blocks with the same
//! log-probability bits; n-gram speculation gives the bits of plain decoding; a q8_0 cache runs.
//! The same load and resumption on Gemma 4's layout (sliding and global layers of their own
//! widths, the last layers reading earlier layers' K/V, per-layer embeddings).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ridge_engine::spec::{NgramProposer, SpecConfig, Speculator};
use ridge_engine::{EngineConfig, FinishReason, Request};
use ridge_kernels::DType;
use ridge_model::synthetic::{SyntheticGemma4, SyntheticMla, SyntheticMoe, SyntheticSpec};
use ridge_model::{Architecture, KvDtype};

/// DeepSeek-V3's layout in miniature: low-rank queries, a 32-wide latent with a 32-wide
/// rotated part (a 64-value row, so q8_0 blocks fit), a leading dense layer, sigmoid routing
/// over 4 groups of which 2 open, one shared expert.
fn latent_fixture() -> Fixture {
    fixture_with(SyntheticSpec {
        arch: Architecture::Deepseek2,
        n_layers: 3,
        n_kv_heads: 1,
        ctx_len: 256,
        dtype: DType::Q4_0,
        mla: Some(SyntheticMla {
            q_lora: Some(64),
            kv_lora: 32,
            nope: 32,
            rope: 32,
            v_head: 32,
        }),
        moe: Some(SyntheticMoe {
            dense_lead: 1,
            sigmoid: true,
            groups: Some((4, 2)),
            ..SyntheticMoe::new(16, 4, 64, Some(64))
        }),
        seed: 95,
        ..Default::default()
    })
}

/// Gemma 4's E4B layout in miniature: six layers, 2 and 5 global (32-wide heads, one K/V
/// head), the others sliding over 16 positions (16-wide heads, two); the last three read
/// layers 1 and 2's K/V; per-layer embeddings of 32.
fn gemma4_fixture() -> Fixture {
    fixture_with(SyntheticSpec {
        arch: Architecture::Gemma4,
        n_layers: 6,
        n_kv_heads: 1,
        head_dim: Some(32),
        sliding_window: 16,
        ctx_len: 256,
        dtype: DType::Q4_0,
        gemma4: Some(SyntheticGemma4 {
            shared_kv_layers: 3,
            ple_dim: 32,
            double_wide: true,
            ..SyntheticGemma4::default()
        }),
        seed: 96,
        ..Default::default()
    })
}

fn greedy(p: &[u32], max_tokens: usize) -> Request {
    let mut r = Request::greedy(p.to_vec(), max_tokens);
    r.ignore_eos = true;
    r
}

/// Each generated token with the bits of its log-probability and of the four most likely.
type Choice = Vec<(u32, Vec<u32>)>;

/// Runs `r` (with log-probabilities) to the end; its choices and the prompt tokens found cached.
fn run_one(core: &mut ridge_engine::EngineCore, id: u64, mut r: Request) -> (Vec<Choice>, usize) {
    r.logprobs = Some(4);
    let n = r.n;
    let (s, log) = sink();
    let hits = core.stats().prefix_hits.load(Relaxed);
    core.submit(id, r, s, Instant::now()).unwrap();
    run_to_end(core);
    let mut out = vec![Vec::new(); n];
    for e in log.lock().unwrap().iter() {
        match e {
            ridge_engine::Event::Token(t) => {
                let mut bits = Vec::new();
                if let Some(l) = &t.logprobs {
                    bits.push(l.logprob.to_bits());
                    bits.extend(l.top.iter().flat_map(|&(id, lp)| [id, lp.to_bits()]));
                }
                out[t.index].push((t.token, bits));
            }
            ridge_engine::Event::Finish(f) => assert_eq!(f.reason, FinishReason::Length),
        }
    }
    (
        out,
        (core.stats().prefix_hits.load(Relaxed) - hits) as usize,
    )
}

/// The same request from an engine without prefix caching.
fn cold(fx: &Fixture, r: &Request) -> Vec<Choice> {
    let mut core = fx.core(EngineConfig {
        prefix_caching: false,
        ..Default::default()
    });
    run_one(&mut core, 1, r.clone()).0
}

#[test]
fn latent_load_matches_requests_run_alone() {
    load_matches_requests_run_alone(latent_fixture(), 21, 10);
}

#[test]
fn gemma4_load_matches_requests_run_alone() {
    // Its global layers alone bound admission: a tighter cache to force preemption.
    load_matches_requests_run_alone(gemma4_fixture(), 25, 8);
}

/// Random arrivals, aborts, preemption, prefix caching and `n > 1`: every request's tokens
/// are the request's alone, in a cache of `blocks` blocks.
fn load_matches_requests_run_alone(fx: Fixture, seed: u64, blocks: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 40,
        max_seqs: 6,
        kv_cache_tokens: blocks * 16,
        prefix_caching: true,
        ..Default::default()
    });
    let shared = prompt(&mut rng, 40);
    let mut reqs = Vec::new();
    let mut aborted = Vec::new();
    for id in 1..=40u64 {
        if reqs.len() < 16 && rng.random_bool(0.4) {
            let mut p = if rng.random_bool(0.5) {
                shared.clone()
            } else {
                Vec::new()
            };
            let len = rng.random_range(1..50);
            p.extend(prompt(&mut rng, len));
            let max_tokens = rng.random_range(1..30);
            let mut r = greedy(&p, max_tokens);
            r.n = if rng.random_bool(0.2) { 2 } else { 1 };
            let (s, log) = sink();
            core.submit(id, r, s, Instant::now()).unwrap();
            reqs.push((id, p, max_tokens, log));
        }
        if id % 13 == 0 {
            core.abort(reqs[reqs.len() / 2].0);
            aborted.push(reqs[reqs.len() / 2].0);
        }
        for _ in 0..3 {
            core.step();
            core.check_invariants().unwrap();
        }
    }
    run_to_end(&mut core);
    assert_eq!(core.kv_used_blocks(), 0, "blocks leaked");
    assert!(core.stats().preemptions.load(Relaxed) > 0, "no preemption");
    let mut finished = 0;
    for (id, p, max_tokens, log) in &reqs {
        let want = alone(&fx, p, *max_tokens);
        for index in 0..2 {
            let (toks, fin, _) = choice(log, index);
            let Some(fin) = fin else { continue };
            if aborted.contains(id) && fin == FinishReason::Aborted {
                continue;
            }
            assert_eq!(fin, FinishReason::Length);
            assert_eq!(toks, want, "request {id} choice {index}");
            finished += 1;
        }
    }
    assert!(finished >= 10, "{finished}");
    assert!(
        core.stats().prefix_hits.load(Relaxed) > 0,
        "no prefix reused"
    );
}

#[test]
fn a_repeated_prompt_resumes_from_its_latent_blocks() {
    a_repeated_prompt_resumes(latent_fixture(), 22);
}

#[test]
fn a_repeated_prompt_resumes_from_gemma4_blocks() {
    a_repeated_prompt_resumes(gemma4_fixture(), 26);
}

/// A prompt run twice: the second run finds every full block before its last token cached and
/// gives the same log-probability bits.
fn a_repeated_prompt_resumes(fx: Fixture, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut core = fx.core(EngineConfig::default());
    let p = prompt(&mut rng, 70);
    let want = cold(&fx, &greedy(&p, 20));
    let (first, hits) = run_one(&mut core, 1, greedy(&p, 20));
    assert_eq!((first, hits), (want.clone(), 0));
    // Every full block of the prompt before its last token: 64 of 70.
    let (again, hits) = run_one(&mut core, 2, greedy(&p, 20));
    assert_eq!((again, hits), (want, 64));
}

#[test]
fn ngram_speculation_on_latent_attention_gives_plain_decoding() {
    let fx = latent_fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let mut core = fx.core(EngineConfig::default());
    core.set_speculator(Speculator {
        proposer: Box::new(NgramProposer { min_n: 1, max_n: 3 }),
        cfg: SpecConfig {
            max_draft: 4,
            max_running: 8,
            adaptive: false,
        },
    })
    .unwrap();
    for id in 1..=4u64 {
        let mut p = prompt(&mut rng, 7);
        let a = p[0];
        p.extend([a, a]);
        p.extend(prompt(&mut rng, 9));
        p.push(a);
        let r = greedy(&p, 24);
        let (out, _) = run_one(&mut core, id, r.clone());
        assert_eq!(out, cold(&fx, &r), "request {id}");
    }
    assert!(
        core.stats().spec_draft_tokens.load(Relaxed) > 0,
        "nothing drafted"
    );
}

#[test]
fn a_q8_0_latent_cache_runs_and_is_half_the_bytes() {
    let fx = latent_fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let p = prompt(&mut rng, 40);
    let f16 = cold(&fx, &greedy(&p, 12));
    let mut core = fx.core(EngineConfig {
        kv_dtype: KvDtype::Q8_0,
        prefix_caching: false,
        ..Default::default()
    });
    let (q8, _) = run_one(&mut core, 1, greedy(&p, 12));
    // Same length; the tokens may differ where 8-bit latents move a near tie.
    assert_eq!(q8[0].len(), f16[0].len());
    let cfg = fx.model().config().clone();
    assert_eq!(KvDtype::F16.token_bytes(&cfg), 3 * 64 * 2);
    assert_eq!(KvDtype::Q8_0.token_bytes(&cfg), 3 * 2 * 34);
}
