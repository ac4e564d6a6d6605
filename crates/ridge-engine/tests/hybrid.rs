//! The continuous-batching engine on a hybrid model (qwen35: recurrent layers with a fixed
//! state per sequence beside attention layers' paged K/V): under random arrivals, aborts and a
//! cache small enough to force preemption, with prefix caching on and `n > 1` requests, every
//! request's tokens equal the same request run alone — the recurrent state is started,
//! carried, dropped and recomputed with its sequence. A cached prefix resumes from a checkpoint
//! of the state (a repeated prompt, the next turn of a conversation, a sibling choice, a long
//! shared system prompt) with the same tokens as computing it; n-gram speculation takes
//! rejected drafts back out of the state and gives the bits of plain decoding.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ridge_engine::spec::{LayerSkipProposer, NgramProposer, SpecConfig, Speculator};
use ridge_engine::{EngineConfig, FinishReason, Request};
use ridge_kernels::DType;
use ridge_model::synthetic::{SyntheticHybrid, SyntheticSpec};
use ridge_model::Architecture;

fn hybrid_fixture() -> Fixture {
    hybrid_fixture_ctx(256)
}

/// LFM2's layout: gated short convolutions (3 taps), every third layer attending.
fn lfm2_fixture() -> Fixture {
    fixture_with(SyntheticSpec {
        arch: Architecture::Lfm2,
        n_layers: 6,
        ctx_len: 256,
        dtype: DType::Q4_0,
        hybrid: Some(SyntheticHybrid {
            n_k_heads: 0,
            n_v_heads: 0,
            head_dim: 0,
            conv_kernel: 3,
            interval: 3,
            rope_dim: 0,
            sections: [0; 4],
            legacy_qkvz: false,
        }),
        seed: 57,
        ..Default::default()
    })
}

/// Granite 4.0-H's layout: Mamba2 (4 heads in 2 groups, 8 state entries), every third layer
/// attending without positions.
fn granite_fixture() -> Fixture {
    fixture_with(SyntheticSpec {
        arch: Architecture::GraniteHybrid,
        n_layers: 6,
        ctx_len: 256,
        dtype: DType::Q4_0,
        hybrid: Some(SyntheticHybrid {
            n_k_heads: 2,
            n_v_heads: 4,
            head_dim: 8,
            conv_kernel: 4,
            interval: 3,
            ..SyntheticHybrid::default()
        }),
        seed: 67,
        ..Default::default()
    })
}

fn hybrid_fixture_ctx(ctx_len: usize) -> Fixture {
    fixture_with(SyntheticSpec {
        arch: Architecture::Qwen35,
        n_layers: 4,
        head_dim: Some(16),
        ctx_len,
        dtype: DType::Q4_0,
        hybrid: Some(SyntheticHybrid {
            n_k_heads: 2,
            n_v_heads: 4,
            head_dim: 16,
            conv_kernel: 4,
            interval: 2,
            rope_dim: 8,
            sections: [2, 1, 1, 0],
            legacy_qkvz: false,
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
        kv_cache_tokens: 10 * 16,
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
    assert!(
        core.stats().prefix_hits.load(Relaxed) > 0,
        "no prefix resumed from a checkpoint"
    );
}

/// Each generated token of a choice with the bits of its log-probability and of the four most
/// likely tokens': a recurrent state that differs by one bit shows in them even where the
/// greedy token does not change (the chosen token's log-probability alone can sit at 0).
type Choice = Vec<(u32, Vec<u32>)>;

/// Submits `r` (asking for log-probabilities), runs the engine until it is done, and returns
/// its choices and the prompt tokens it found cached.
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

/// The same request computed from scratch by an engine without prefix caching.
fn cold(fx: &Fixture, r: &Request) -> Vec<Choice> {
    let mut core = fx.core(EngineConfig {
        prefix_caching: false,
        ..Default::default()
    });
    run_one(&mut core, 1, r.clone()).0
}

fn tokens(c: &Choice) -> Vec<u32> {
    c.iter().map(|(t, _)| *t).collect()
}

fn greedy(p: &[u32], max_tokens: usize) -> Request {
    let mut r = Request::greedy(p.to_vec(), max_tokens);
    r.ignore_eos = true;
    r
}

#[test]
fn a_repeated_prompt_and_the_next_turn_resume_from_checkpoints() {
    let fx = hybrid_fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 48,
        ..Default::default()
    });
    let p = prompt(&mut rng, 70);
    let want = cold(&fx, &greedy(&p, 20));
    assert_eq!(tokens(&want[0]), alone(&fx, &p, 20));
    let (first, hits) = run_one(&mut core, 1, greedy(&p, 20));
    assert_eq!((first, hits), (want.clone(), 0));
    // The prompt's last full block before its last token: 64 of 70 tokens.
    let (again, hits) = run_one(&mut core, 2, greedy(&p, 20));
    assert_eq!((again, hits), (want.clone(), 64));
    // The next turn: prompt + answer + a new message. The first request computed 89 tokens;
    // its state at its last boundary (80) was kept when it finished.
    let mut turn = p.clone();
    turn.extend(tokens(&want[0]));
    turn.extend(prompt(&mut rng, 9));
    let (next, hits) = run_one(&mut core, 3, greedy(&turn, 12));
    assert_eq!((next, hits), (cold(&fx, &greedy(&turn, 12)), 80));
    // Two choices: the second resumes from the first's prompt checkpoint.
    let q = prompt(&mut rng, 37);
    let mut r = greedy(&q, 10);
    r.n = 2;
    let (both, hits) = run_one(&mut core, 4, r);
    let want_q = cold(&fx, &greedy(&q, 10)).remove(0);
    assert_eq!((both, hits), (vec![want_q.clone(), want_q], 32));
    assert!(core.state_checkpoints() > 0);
    // Flushing the prefix cache drops the checkpoints with the blocks.
    core.flush_prefix_cache();
    assert_eq!(core.state_checkpoints(), 0);
    let (again, hits) = run_one(&mut core, 5, greedy(&p, 20));
    assert_eq!((again, hits), (want, 0));
}

#[test]
fn a_shared_system_prompt_resumes_at_the_checkpoint_interval() {
    let interval = ridge_model::CHECKPOINT_INTERVAL;
    let fx = hybrid_fixture_ctx(interval + 256);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut core = fx.core(EngineConfig {
        max_batch_tokens: 200,
        kv_cache_tokens: 4 * interval,
        ..Default::default()
    });
    let system = prompt(&mut rng, interval + 2);
    let ask = |rng: &mut ChaCha8Rng| {
        let mut p = system.clone();
        p.extend(prompt(rng, 3));
        greedy(&p, 6)
    };
    let (a, b) = (ask(&mut rng), ask(&mut rng));
    let (first, hits) = run_one(&mut core, 1, a.clone());
    assert_eq!((first, hits), (cold(&fx, &a), 0));
    // Chunks of 200 tokens were cut at the interval, where the state was kept.
    let (second, hits) = run_one(&mut core, 2, b.clone());
    assert_eq!((second, hits), (cold(&fx, &b), interval));
}

#[test]
fn without_checkpoint_memory_a_hybrid_computes_every_prompt() {
    let fx = hybrid_fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let mut core = fx.core(EngineConfig {
        state_checkpoint_bytes: 0,
        ..Default::default()
    });
    let r = greedy(&prompt(&mut rng, 50), 8);
    let want = cold(&fx, &r);
    for id in 1..=2 {
        let (out, hits) = run_one(&mut core, id, r.clone());
        assert_eq!((out, hits), (want.clone(), 0));
    }
    assert_eq!(core.state_checkpoints(), 0);
}

#[test]
fn the_state_pool_bounds_running_hybrid_sequences() {
    let fx = hybrid_fixture();
    let per_seq = {
        let m = fx.model();
        m.config().recurrent.as_ref().unwrap().state_bytes()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // Room for two sequences' states and their boundary copies.
    let mut core = fx.core(EngineConfig {
        state_pool_bytes: 4 * per_seq + 1,
        ..Default::default()
    });
    let mut logs = Vec::new();
    let mut prompts = Vec::new();
    for id in 1..=5u64 {
        let p = prompt(&mut rng, 20);
        let (s, log) = sink();
        core.submit(id, greedy(&p, 6), s, Instant::now()).unwrap();
        logs.push(log);
        prompts.push(p);
    }
    let mut most = 0;
    while core.step() {
        most = most.max(core.counts().0);
    }
    assert_eq!(most, 2);
    for (p, log) in prompts.iter().zip(&logs) {
        assert_eq!(choice(log, 0).0, alone(&fx, p, 6));
    }
}

#[test]
fn self_speculation_is_refused_with_one_line() {
    let fx = hybrid_fixture();
    let mut core = fx.core(EngineConfig::default());
    let e = core
        .set_speculator(Speculator {
            proposer: Box::new(LayerSkipProposer::new(LayerSkipProposer::default_skip(4))),
            cfg: SpecConfig::default(),
        })
        .expect_err("a hybrid's recurrent layers cannot be skipped");
    let msg = e.to_string();
    assert!(
        msg.contains("qwen35") && msg.contains("self-speculation"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1);
}

#[test]
fn ngram_speculation_takes_rejected_drafts_out_of_the_state() {
    let fx = hybrid_fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(13);
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
    // The model repeats the prompt's last token `a`. A prompt holding `a a b c d e` earlier
    // makes the proposer draft `b c d e` once the output reads `a a`: rejected, taken back.
    for id in 1..=4u64 {
        let mut p = prompt(&mut rng, 7);
        let a = p[0];
        p.extend([a, a]);
        p.extend(prompt(&mut rng, 4));
        p.extend(prompt(&mut rng, 5));
        p.push(a);
        let r = greedy(&p, 24);
        let (out, _) = run_one(&mut core, id, r.clone());
        assert_eq!(out, cold(&fx, &r), "request {id}");
    }
    let st = core.stats();
    let (drafted, accepted) = (
        st.spec_draft_tokens.load(Relaxed),
        st.spec_accepted_tokens.load(Relaxed),
    );
    assert!(
        accepted > 0 && accepted < drafted,
        "{accepted} of {drafted}"
    );
}

#[test]
fn checkpoints_stay_within_their_budget_oldest_out_first() {
    let fx = hybrid_fixture();
    let per_seq = fx
        .model()
        .config()
        .recurrent
        .as_ref()
        .unwrap()
        .state_bytes();
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut core = fx.core(EngineConfig {
        state_checkpoint_bytes: 2 * per_seq,
        ..Default::default()
    });
    // Each 40-token prompt leaves a checkpoint at 32 (its prompt) and at 48 (its last
    // boundary, kept when it ends).
    let reqs: Vec<Request> = (0..3).map(|_| greedy(&prompt(&mut rng, 40), 10)).collect();
    for (id, r) in reqs.iter().enumerate() {
        run_one(&mut core, id as u64 + 1, r.clone());
        assert!(core.state_checkpoints() <= 2);
    }
    let (last, hits) = run_one(&mut core, 10, reqs[2].clone());
    assert_eq!((last, hits), (cold(&fx, &reqs[2]), 32));
    let (first, hits) = run_one(&mut core, 11, reqs[0].clone());
    assert_eq!((first, hits), (cold(&fx, &reqs[0]), 0));
}

#[test]
fn lfm2_resumes_from_checkpoints_and_takes_drafts_back() {
    resumes_and_takes_drafts_back(&lfm2_fixture());
}

#[test]
fn granite_resumes_from_checkpoints_and_takes_drafts_back() {
    resumes_and_takes_drafts_back(&granite_fixture());
}

/// A repeated prompt resumes from its checkpoint and n-gram drafts are taken back, with the
/// bits of a cold run.
fn resumes_and_takes_drafts_back(fx: &Fixture) {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
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
    let mut p = prompt(&mut rng, 7);
    let a = p[0];
    p.extend([a, a]);
    p.extend(prompt(&mut rng, 30));
    p.push(a);
    let r = greedy(&p, 24);
    let want = cold(fx, &r);
    let (first, hits) = run_one(&mut core, 1, r.clone());
    assert_eq!((first, hits), (want.clone(), 0));
    let (again, hits) = run_one(&mut core, 2, r);
    assert_eq!((again, hits), (want, 32));
    let st = core.stats();
    let (drafted, accepted) = (
        st.spec_draft_tokens.load(Relaxed),
        st.spec_accepted_tokens.load(Relaxed),
    );
    assert!(accepted < drafted, "{accepted} of {drafted}");
}
