//! An offline benchmark of one model on this machine, in the spirit of llama-bench and
//! llama-batched-bench: no server, no tokenizer, just the forward pass and a clock.
//!
//! For each batch size `B` it runs `B` independent sequences, each with a prompt of `P` random
//! token ids (seeded, so every run feeds the same ids):
//!
//! 1. **Prefill** — one sequence after another, each prompt as one forward pass of `P` tokens.
//!    A sequence's first output token (greedy argmax of its last logits row) arrives when its
//!    own prefill ends, so later sequences wait for earlier ones, as they would in a server that
//!    prefills requests in arrival order.
//! 2. **Decode** — `G − 1` steps in which all `B` sequences advance one token in *one* batched
//!    forward pass, so each sequence ends with `G` output tokens (the first from prefill).
//!
//! Metrics follow vLLM's definitions (see `DESIGN.md`), so the numbers compare:
//!
//! - prefill tok/s = `B · P / prefill time`;
//! - TTFT = mean over sequences of start → that sequence's first token;
//! - TPOT = `(t_last − t_first) / (G − 1)`, the time of one decode step, where `t_first` is when
//!   the last sequence's first token arrived (the end of prefill) and `t_last` the end of the
//!   last step; aggregate decode tok/s = `B · (G − 1) / (t_last − t_first)`;
//! - roofline TPOT = the mean over decode steps of
//!   `(weight bytes + Σ_seq kv_bytes_per_token · context) / bandwidth` (see
//!   [`ridge_roofline::model`]); step `k` (1-based) attends over `P + k` positions, so the mean
//!   context is `P + G/2`;
//! - roofline efficiency = roofline TPOT / TPOT (1.0 = at the memory-bandwidth floor).
//!
//! With `reps > 1` the whole measurement repeats and each metric is the median over reps. A
//! short warm-up pass precedes each batch size so that page-faulting the memory-mapped weights
//! and waking the thread pool are not billed to the first rep.
//!
//! The [`serve`] module is the other half of the crate: a load generator that measures any
//! OpenAI-compatible server over HTTP (`ridge bench serve`, `ridge bench sweep`), with the
//! same metric definitions.

#![warn(missing_docs)]

pub mod compute_floor;
pub mod serve;

use std::time::Instant;

use ridge_model::{Batch, KvCache, Model, ModelConfig, ModelError, SeqId, Workspace};
use ridge_roofline::RooflineInputs;

/// Benchmark errors.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An argument outside its range; the message names it and what was expected.
    #[error("{0}")]
    InvalidParam(String),
    /// The model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Prompt tokens per sequence (`P`).
    pub prompt_tokens: usize,
    /// Output tokens per sequence (`G`, at least 2): the first from prefill, then `G − 1` decode
    /// steps.
    pub gen_tokens: usize,
    /// Batch sizes to run, in order.
    pub batch_sizes: Vec<usize>,
    /// Repetitions per batch size (each metric is the median over them).
    pub reps: usize,
    /// Seed of the random prompt ids.
    pub seed: u64,
}

impl Default for BenchConfig {
    /// llama-bench's pp512 / tg128 at batch sizes 1, 16 and 64, three reps.
    fn default() -> Self {
        BenchConfig {
            prompt_tokens: 512,
            gen_tokens: 128,
            batch_sizes: vec![1, 16, 64],
            reps: 3,
            seed: 0,
        }
    }
}

impl BenchConfig {
    /// Checks the arguments that need no model: at least one batch size, every batch size,
    /// the prompt and reps at least 1, and at least 2 output tokens (TPOT needs two).
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::InvalidParam(m));
        if self.batch_sizes.is_empty() {
            return bad("batch: give at least one batch size".into());
        }
        if let Some(&b) = self.batch_sizes.iter().find(|&&b| b == 0) {
            return bad(format!("batch: batch sizes must be at least 1, got {b}"));
        }
        if self.prompt_tokens == 0 {
            return bad("prompt: the prompt must have at least 1 token, got 0".into());
        }
        if self.gen_tokens < 2 {
            return bad(format!(
                "gen: at least 2 output tokens are needed to measure TPOT, got {}",
                self.gen_tokens
            ));
        }
        if self.reps == 0 {
            return bad("reps: at least 1 repetition is needed, got 0".into());
        }
        Ok(())
    }

    /// [`validate`](Self::validate), plus: prompt + gen tokens fit the model's context.
    pub fn validate_for(&self, cfg: &ModelConfig) -> Result<(), BenchError> {
        self.validate()?;
        let need = self.prompt_tokens.saturating_add(self.gen_tokens);
        if need > cfg.ctx_len {
            return Err(BenchError::InvalidParam(format!(
                "prompt + gen = {} + {} = {need} tokens does not fit the model's context of {} tokens",
                self.prompt_tokens, self.gen_tokens, cfg.ctx_len
            )));
        }
        Ok(())
    }
}

/// The measurements of one batch size (medians over reps).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// Sequences run together (`B`).
    pub batch: usize,
    /// Prompt tokens per sequence (`P`).
    pub prompt_tokens: usize,
    /// Output tokens per sequence (`G`).
    pub gen_tokens: usize,
    /// Repetitions the medians are taken over.
    pub reps: usize,
    /// Prompt tokens processed per second over the whole prefill phase: `B · P / prefill time`.
    pub prefill_tok_s: f64,
    /// Output tokens per second over the decode phase, all sequences together:
    /// `B · (G − 1) / (t_last − t_first)`.
    pub decode_tok_s: f64,
    /// Mean time to first token, ms (start of the run → a sequence's first token).
    pub ttft_ms: f64,
    /// Time per output token, ms: `(t_last − t_first) / (G − 1)`, one batched decode step.
    pub tpot_ms: f64,
    /// The memory-bandwidth floor of one decode step, ms, averaged over the steps.
    pub roofline_tpot_ms: f64,
    /// `roofline_tpot_ms / tpot_ms`: the fraction of the floor reached (1.0 = at the floor).
    pub roofline_efficiency: f64,
    /// Bytes one decode step reads on average: weights + every sequence's KV cache.
    pub step_bytes: f64,
    /// Mean context (cached positions attended over) of a sequence during decode: `P + G/2`.
    pub mean_decode_context: f64,
    /// Wall time of the prefill phase, ms (median).
    pub prefill_ms: f64,
    /// Wall time of the decode phase, ms (median).
    pub decode_ms: f64,
}

/// The byte counts of `model` that a decode step reads: its weights
/// ([`Model::weight_bytes_per_token`]) and its f16 KV cache per token (sliding-window layers
/// reading at most their window).
pub fn roofline_inputs(model: &Model) -> RooflineInputs {
    let cfg = model.config();
    let windowed = (0..cfg.n_layers).filter(|&l| cfg.is_sliding(l)).count();
    let mut r = RooflineInputs::with_f16_kv_windowed(
        model.weight_bytes_per_token(),
        cfg.n_kv_layers(),
        0,
        windowed,
        cfg.sliding_window.unwrap_or(usize::MAX),
    );
    // f16 rows, per layer of its own width (latent attention caches one row).
    let (global, windowed_bytes) = cfg.kv_token_bytes(|d| 2 * d);
    r.kv_bytes_per_token = global;
    if let Some(w) = r.window.as_mut() {
        w.bytes_per_token = windowed_bytes;
    }
    r.experts = cfg.moe.as_ref().map(|moe| ridge_roofline::RoutedExperts {
        bytes_per_expert: model.expert_bytes(),
        n_expert: moe.n_expert,
        n_used: moe.n_used,
    });
    r.state_bytes_per_seq = cfg.recurrent.as_ref().map_or(0, |h| h.state_bytes());
    r
}

/// The roofline TPOT in ms of `batch` sequences with `prompt` prompt tokens generating `gen`
/// tokens: the mean over the `gen − 1` decode steps of the step's floor, where step `k` reads
/// the weights plus `P + k` positions of cache per sequence. Returns the floor and the mean
/// bytes per step.
pub fn decode_floor(
    inputs: &RooflineInputs,
    batch: usize,
    prompt: usize,
    gen: usize,
    bandwidth_gbs: f64,
) -> (f64, f64) {
    let steps = gen.saturating_sub(1).max(1);
    let mut ms = 0.0;
    let mut bytes = 0.0;
    let mut contexts = vec![0; batch];
    for k in 1..=steps {
        contexts.fill(prompt + k);
        let b = inputs.step_bytes(&contexts);
        bytes += b as f64;
        ms += ridge_roofline::floor_ms(b, bandwidth_gbs);
    }
    (ms / steps as f64, bytes / steps as f64)
}

/// Runs every batch size of `cfg` on `model`, judging decode against `bandwidth_gbs` (GB/s),
/// and calls `on_result` as each batch size finishes (so a caller can print progressively).
pub fn run(
    model: &Model,
    cfg: &BenchConfig,
    bandwidth_gbs: f64,
    mut on_result: impl FnMut(&BenchResult),
) -> Result<Vec<BenchResult>, BenchError> {
    cfg.validate_for(model.config())?;
    let mut out = Vec::with_capacity(cfg.batch_sizes.len());
    for &b in &cfg.batch_sizes {
        let r = bench_batch(model, cfg, b, bandwidth_gbs)?;
        on_result(&r);
        out.push(r);
    }
    Ok(out)
}

/// Measures one batch size (see the crate docs for the protocol), `cfg.reps` times, and
/// returns the medians.
pub fn bench_batch(
    model: &Model,
    cfg: &BenchConfig,
    batch: usize,
    bandwidth_gbs: f64,
) -> Result<BenchResult, BenchError> {
    cfg.validate_for(model.config())?;
    if batch == 0 {
        return Err(BenchError::InvalidParam(
            "batch: batch sizes must be at least 1, got 0".into(),
        ));
    }
    if !(bandwidth_gbs.is_finite() && bandwidth_gbs > 0.0) {
        return Err(BenchError::InvalidParam(format!(
            "bandwidth: must be a positive number of GB/s, got {bandwidth_gbs}"
        )));
    }
    let (p, g) = (cfg.prompt_tokens, cfg.gen_tokens);
    let vocab = model.config().vocab;
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|i| random_prompt(cfg.seed, i, p, vocab))
        .collect();
    // Every sequence needs P + G − 1 positions; whole blocks each, so round per sequence.
    let per_seq = (p + g).div_ceil(ridge_model::KV_BLOCK_SIZE) * ridge_model::KV_BLOCK_SIZE;
    let mut kv = KvCache::new(model.config(), batch * per_seq);
    let mut ws = Workspace::new();
    let mut tokens = Batch::new();

    warm_up(model, &prompts[0], batch, &mut kv, &mut ws, &mut tokens)?;

    let mut reps = Vec::with_capacity(cfg.reps);
    for _ in 0..cfg.reps {
        reps.push(one_rep(model, &prompts, g, &mut kv, &mut ws, &mut tokens)?);
    }
    let med = |f: fn(&Rep) -> f64| median(reps.iter().map(f).collect());
    let prefill_s = med(|r| r.prefill_s);
    let decode_s = med(|r| r.decode_s);
    let tpot_ms = med(|r| r.decode_s / (r.steps as f64)) * 1e3;
    let (roofline_tpot_ms, step_bytes) =
        decode_floor(&roofline_inputs(model), batch, p, g, bandwidth_gbs);
    Ok(BenchResult {
        batch,
        prompt_tokens: p,
        gen_tokens: g,
        reps: cfg.reps,
        prefill_tok_s: med(|r| r.prefill_tokens as f64 / r.prefill_s),
        decode_tok_s: med(|r| r.decode_tokens as f64 / r.decode_s),
        ttft_ms: med(|r| r.ttft_s) * 1e3,
        tpot_ms,
        roofline_tpot_ms,
        roofline_efficiency: roofline_tpot_ms / tpot_ms,
        step_bytes,
        mean_decode_context: p as f64 + g as f64 / 2.0,
        prefill_ms: prefill_s * 1e3,
        decode_ms: decode_s * 1e3,
    })
}

/// Raw timings of one repetition.
struct Rep {
    prefill_tokens: usize,
    prefill_s: f64,
    ttft_s: f64,
    decode_tokens: usize,
    decode_s: f64,
    steps: usize,
}

/// One sequence through a short prefill and a decode step at the full batch width, then
/// removed: faults in the weights, starts the pool's threads, grows the workspace.
fn warm_up(
    model: &Model,
    prompt: &[u32],
    batch: usize,
    kv: &mut KvCache,
    ws: &mut Workspace,
    tokens: &mut Batch,
) -> Result<(), BenchError> {
    let n = prompt.len().min(16);
    let s = kv.add_seq();
    tokens.clear();
    tokens.push_seq(&prompt[..n], 0, s, true);
    let r = model.forward(tokens, kv, ws).map(|_| ());
    kv.remove_seq(s);
    r?;
    // The decode step's width, without needing its cache: `batch` fresh one-token sequences.
    let seqs: Vec<SeqId> = (0..batch).map(|_| kv.add_seq()).collect();
    tokens.clear();
    for &s in &seqs {
        tokens.push(prompt[0], 0, s, true);
    }
    let r = model.forward(tokens, kv, ws).map(|_| ());
    for s in seqs {
        kv.remove_seq(s);
    }
    r.map_err(Into::into)
}

/// One measurement: prefill every sequence in turn, then `g − 1` batched decode steps.
fn one_rep(
    model: &Model,
    prompts: &[Vec<u32>],
    g: usize,
    kv: &mut KvCache,
    ws: &mut Workspace,
    tokens: &mut Batch,
) -> Result<Rep, BenchError> {
    let vocab = model.config().vocab;
    let b = prompts.len();
    let seqs: Vec<SeqId> = (0..b).map(|_| kv.add_seq()).collect();
    let r = (|| -> Result<Rep, BenchError> {
        let mut next = vec![0u32; b];
        let mut ttft_sum = 0.0;
        let start = Instant::now();
        for (i, (prompt, &s)) in prompts.iter().zip(&seqs).enumerate() {
            tokens.clear();
            tokens.push_seq(prompt, 0, s, true);
            let logits = model.forward(tokens, kv, ws)?;
            next[i] = argmax(&logits[..vocab]);
            ttft_sum += start.elapsed().as_secs_f64();
        }
        let t_first = Instant::now();
        let p = prompts.first().map_or(0, Vec::len);
        for step in 1..g {
            tokens.clear();
            for (&t, &s) in next.iter().zip(&seqs) {
                tokens.push(t, p + step - 1, s, true);
            }
            let logits = model.forward(tokens, kv, ws)?;
            for (i, row) in logits.chunks_exact(vocab).enumerate().take(b) {
                next[i] = argmax(row);
            }
        }
        let t_last = Instant::now();
        std::hint::black_box(&next);
        Ok(Rep {
            prefill_tokens: b * p,
            prefill_s: (t_first - start).as_secs_f64().max(1e-9),
            ttft_s: ttft_sum / b as f64,
            decode_tokens: b * (g - 1),
            decode_s: (t_last - t_first).as_secs_f64().max(1e-9),
            steps: g - 1,
        })
    })();
    for s in seqs {
        kv.remove_seq(s);
    }
    r
}

/// Index of the largest logit (the first on ties): greedy decoding.
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// The median (mean of the middle two for an even count); NaN for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// `len` token ids in `[0, vocab)` for sequence `seq`, from a SplitMix64 stream seeded by
/// `seed` and `seq`: the same ids on every run.
pub fn random_prompt(seed: u64, seq: usize, len: usize, vocab: usize) -> Vec<u32> {
    let mut state = seed ^ (seq as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..len)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // Multiply-shift maps 64 random bits onto [0, vocab) without a modulo bias worth
            // measuring.
            (((z >> 32) * vocab as u64) >> 32) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn argmax_takes_first_maximum() {
        assert_eq!(argmax(&[0.0, 2.0, 1.0, 2.0]), 1);
        assert_eq!(argmax(&[-1.0]), 0);
    }

    #[test]
    fn prompts_are_seeded_and_in_range() {
        let a = random_prompt(7, 0, 1000, 257);
        assert_eq!(a, random_prompt(7, 0, 1000, 257));
        assert_ne!(a, random_prompt(7, 1, 1000, 257));
        assert_ne!(a, random_prompt(8, 0, 1000, 257));
        assert!(a.iter().all(|&t| t < 257));
        // Spread over the range, not stuck in a corner.
        assert!(a.iter().any(|&t| t < 20) && a.iter().any(|&t| t > 237));
    }

    #[test]
    fn decode_floor_uses_mean_context() {
        let r = RooflineInputs {
            weight_bytes: 1_000_000,
            kv_bytes_per_token: 100,
            window: None,
            experts: None,
            state_bytes_per_seq: 0,
        };
        // B = 3, P = 8, G = 4: steps attend over 9, 10, 11 positions, mean 10;
        // bytes = 1e6 + 3 · 100 · 10 = 1 003 000; at 10 GB/s: 0.1003 ms.
        let (ms, bytes) = decode_floor(&r, 3, 8, 4, 10.0);
        assert!((bytes - 1_003_000.0).abs() < 1e-6);
        assert!((ms - 0.1003).abs() < 1e-12, "{ms}");
    }

    #[test]
    fn arguments_are_validated() {
        let ok = BenchConfig::default();
        assert!(ok.validate().is_ok());
        let msg = |c: BenchConfig| c.validate().unwrap_err().to_string();
        assert!(msg(BenchConfig {
            batch_sizes: vec![1, 0],
            ..ok.clone()
        })
        .contains("at least 1, got 0"));
        assert!(msg(BenchConfig {
            batch_sizes: vec![],
            ..ok.clone()
        })
        .contains("batch"));
        assert!(msg(BenchConfig {
            gen_tokens: 1,
            ..ok.clone()
        })
        .contains("at least 2 output tokens"));
        assert!(msg(BenchConfig {
            prompt_tokens: 0,
            ..ok.clone()
        })
        .contains("prompt"));
        assert!(msg(BenchConfig { reps: 0, ..ok }).contains("reps"));
    }
}
