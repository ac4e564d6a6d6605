//! The continuous-batching engine on a hybrid model (qwen35: recurrent layers with a fixed
//! state per sequence beside attention layers' paged K/V): under random arrivals, aborts and a
//! cache small enough to force preemption, with prefix caching on and `n > 1` requests, every
//! request's tokens equal the same request run alone — the recurrent state is started,
//! carried, dropped and recomputed with its sequence. Speculative decoding is refused (the
//! state cannot be rolled back yet).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ridge_engine::spec::{NgramProposer, SpecConfig, Speculator};
use ridge_engine::{EngineConfig, FinishReason, Request};
use ridge_kernels::DType;
use ridge_model::synthetic::{SyntheticHybrid, SyntheticSpec};
use ridge_model::Architecture;

fn hybrid_fixture() -> Fixture {
    fixture_with(SyntheticSpec {
        arch: Architecture::Qwen35,
        n_layers: 4,
        head_dim: Some(16),
        ctx_len: 256,
        dtype: DType::Q4_0,
        hybrid: Some(SyntheticHybrid {
            n_k_heads: 2,
            n_v_heads: 4,
            head_dim: 16,
            conv_kernel: 4,
            interval: 2,
            rope_dim: 8,
            sections: [2, 1, 1, 0],
        }),
        seed: 51,
        ..Default::default()
    })
}

#[test]
fn hybrid_load_matches_requests_run_alone() {
    let fx = hybrid_fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 40,
        max_seqs: 6,
        kv_cache_tokens: 14 * 16,
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
            let mut r = Request::greedy(p.clone(), max_tokens);
            r.ignore_eos = true;
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
    assert!(
        core.stats().preemptions.load(Relaxed) > 0,
        "no preemption exercised"
    );
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
}

#[test]
fn speculation_is_refused_with_one_line() {
    let fx = hybrid_fixture();
    let mut core = fx.core(EngineConfig::default());
    let e = core
        .set_speculator(Speculator {
            proposer: Box::new(NgramProposer { min_n: 1, max_n: 3 }),
            cfg: SpecConfig::default(),
        })
        .expect_err("a hybrid cannot take back draft tokens");
    let msg = e.to_string();
    assert!(
        msg.contains("qwen35") && msg.contains("speculative"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1);
}
