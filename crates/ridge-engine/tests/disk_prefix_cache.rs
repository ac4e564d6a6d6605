//! The prefix cache's disk tier on a tiny random model: a prompt served by one engine is read
//! back from disk by a fresh engine (a restarted server) or after its blocks left memory, and
//! answers with the same tokens and the same log-probability bits as a cold run; a damaged
//! file costs only its own block and what follows; a different model never reads the files;
//! models whose prefixes need more than full blocks are refused in one line.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

mod common;

use common::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use ridge_engine::{EngineConfig, EngineCore, FinishReason, Request};
use ridge_model::synthetic::SyntheticSpec;
use ridge_model::{DiskTierConfig, KV_BLOCK_SIZE};

/// Tokens with the bits of their log-probabilities and top-4 alternatives.
type Answer = Vec<(u32, Vec<u32>)>;

/// Runs `p` greedily for 8 tokens; returns the answer and the prompt tokens found cached.
fn run(core: &mut EngineCore, id: u64, p: &[u32]) -> (Answer, usize) {
    let mut r = Request::greedy(p.to_vec(), 8);
    r.ignore_eos = true;
    r.logprobs = Some(4);
    let (s, log) = sink();
    let hits = core.stats().prefix_hits.load(Relaxed);
    core.submit(id, r, s, Instant::now()).unwrap();
    run_to_end(core);
    let mut out = Vec::new();
    for e in log.lock().unwrap().iter() {
        match e {
            ridge_engine::Event::Token(t) => {
                let l = t.logprobs.as_ref().unwrap();
                let mut bits = vec![l.logprob.to_bits()];
                bits.extend(l.top.iter().flat_map(|&(id, lp)| [id, lp.to_bits()]));
                out.push((t.token, bits));
            }
            ridge_engine::Event::Finish(f) => assert_eq!(f.reason, FinishReason::Length),
        }
    }
    let cached = (core.stats().prefix_hits.load(Relaxed) - hits) as usize;
    (out, cached)
}

fn with_disk(
    fx: &Fixture,
    dir: &std::path::Path,
    fingerprint: u64,
    kv_tokens: usize,
) -> EngineCore {
    fx.core(EngineConfig {
        kv_cache_tokens: kv_tokens,
        disk_prefix_cache: Some(DiskTierConfig {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 30,
            fingerprint,
        }),
        ..Default::default()
    })
}

#[test]
fn a_restarted_engine_reads_the_prompt_back_with_the_same_bits() {
    let fx = fixture(512);
    let dir = tempfile::tempdir().unwrap();
    let p = prompt(&mut ChaCha8Rng::seed_from_u64(3), 200);
    let full = (p.len() - 1) / KV_BLOCK_SIZE * KV_BLOCK_SIZE;
    let (cold, _) = run(
        &mut fx.core(EngineConfig {
            prefix_caching: false,
            ..Default::default()
        }),
        1,
        &p,
    );

    // The first engine computes the prompt and writes its blocks.
    let mut a = with_disk(&fx, dir.path(), 7, 4096);
    let (first, cached) = run(&mut a, 1, &p);
    assert_eq!((first.clone(), cached), (cold.clone(), 0));
    let written = a.stats().kv_disk_blocks.load(Relaxed) as usize;
    assert!(written >= full / KV_BLOCK_SIZE, "{written} blocks written");
    drop(a);

    // A fresh engine (nothing in memory) reads every full block before the last token back.
    let mut b = with_disk(&fx, dir.path(), 7, 4096);
    let (again, cached) = run(&mut b, 1, &p);
    assert_eq!(cached, full);
    assert_eq!(again, cold, "read-back K/V answers bit for bit as computed");
    assert_eq!(
        b.stats().kv_disk_hits.load(Relaxed) as usize,
        full / KV_BLOCK_SIZE
    );
    // A longer prompt sharing the first: the shared blocks come from memory now.
    let mut longer = p.clone();
    longer.extend(prompt(&mut ChaCha8Rng::seed_from_u64(4), 40));
    let (_, cached) = run(&mut b, 2, &longer);
    assert!(cached >= full, "{cached}");
    drop(b);

    // A damaged file: its block and the ones after it are computed again, same answer.
    let model_dir = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut files: Vec<_> = std::fs::read_dir(&model_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let victim = &files[files.len() / 2];
    let mut bytes = std::fs::read(victim).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x40;
    std::fs::write(victim, bytes).unwrap();
    let mut c = with_disk(&fx, dir.path(), 7, 4096);
    let (after_damage, cached) = run(&mut c, 1, &p);
    assert_eq!(after_damage, cold);
    assert!(cached < full, "the damaged block was not read back");
    drop(c);

    // Another model's fingerprint reads nothing.
    let mut d = with_disk(&fx, dir.path(), 8, 4096);
    assert_eq!(run(&mut d, 1, &p), (cold, 0));
}

#[test]
fn blocks_evicted_from_memory_come_back_from_disk() {
    let fx = fixture(512);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let p = prompt(&mut rng, 150);
    let full = (p.len() - 1) / KV_BLOCK_SIZE * KV_BLOCK_SIZE;
    // 16 blocks of memory: the other prompts push the first one's blocks out.
    let mut core = with_disk(&fx, dir.path(), 1, 16 * KV_BLOCK_SIZE);
    let (first, _) = run(&mut core, 1, &p);
    for i in 0..3 {
        run(&mut core, 10 + i, &prompt(&mut rng, 150));
    }
    let hits = core.stats().kv_disk_hits.load(Relaxed);
    let (again, cached) = run(&mut core, 2, &p);
    assert_eq!(again, first);
    assert_eq!(cached, full);
    assert!(
        core.stats().kv_disk_hits.load(Relaxed) > hits,
        "read from disk"
    );
}

#[test]
fn models_whose_prefix_needs_more_than_full_blocks_are_refused() {
    let fx = fixture_with(SyntheticSpec {
        arch: ridge_model::Architecture::Gemma3,
        n_layers: 6,
        head_dim: Some(32),
        sliding_window: 8,
        ctx_len: 256,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let e = ridge_engine::EngineCore::new(
        fx.model(),
        fx.tokenizer.clone(),
        EngineConfig {
            disk_prefix_cache: Some(DiskTierConfig {
                dir: dir.path().to_path_buf(),
                max_bytes: 1 << 20,
                fingerprint: 1,
            }),
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("sliding-window"), "{e}");
}
