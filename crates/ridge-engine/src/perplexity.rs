//! Perplexity with llama.cpp's `llama-perplexity` protocol, so the numbers compare directly:
//! the token stream is cut into non-overlapping chunks of `ctx` tokens, each evaluated from an
//! empty cache; when the model adds BOS, BOS replaces each chunk's first token; only the second
//! half of each chunk is scored (logits at positions ctx/2 … ctx−2 predicting the next token).

use ridge_model::{Batch, KvCache, KvDtype, Model, Workspace};

use crate::EngineError;

/// Result of a perplexity run.
#[derive(Clone, Debug)]
pub struct PerplexityResult {
    /// exp(mean negative log-likelihood).
    pub perplexity: f64,
    /// Chunks evaluated.
    pub chunks: usize,
    /// Tokens scored.
    pub tokens_scored: usize,
    /// Perplexity after each chunk (running estimate).
    pub running: Vec<f64>,
}

/// Evaluates `tokens` in chunks of `ctx` (at most `max_chunks` if given). `bos` replaces the
/// first token of each chunk when set.
pub fn perplexity(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    max_chunks: Option<usize>,
    on_chunk: impl FnMut(usize, usize, f64),
) -> Result<PerplexityResult, EngineError> {
    perplexity_kv(model, tokens, ctx, bos, max_chunks, KvDtype::F16, on_chunk)
}

/// As [`perplexity`], with the KV cache stored as `kv_dtype` (to measure what a quantized
/// cache costs in accuracy).
pub fn perplexity_kv(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    max_chunks: Option<usize>,
    kv_dtype: KvDtype,
    mut on_chunk: impl FnMut(usize, usize, f64),
) -> Result<PerplexityResult, EngineError> {
    if ctx < 4 || ctx > model.config().ctx_len {
        return Err(EngineError::InvalidParam(format!(
            "ctx must be between 4 and the model's context length {}, got {ctx}",
            model.config().ctx_len
        )));
    }
    let available = tokens.len() / ctx;
    if available == 0 {
        return Err(EngineError::InvalidParam(format!(
            "need at least {ctx} tokens for one chunk of ctx {ctx}, the text has {}",
            tokens.len()
        )));
    }
    let n_chunks = max_chunks.map_or(available, |m| m.min(available));
    let first = ctx / 2;
    let vocab = model.config().vocab;
    let mut kv = KvCache::with_dtype(model.config(), ctx, kv_dtype)?;
    let mut ws = Workspace::new();
    let mut batch = Batch::new();
    let mut nll = 0f64;
    let mut count = 0usize;
    let mut running = Vec::with_capacity(n_chunks);
    for c in 0..n_chunks {
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        let seq = kv.add_seq();
        batch.clear();
        for (i, &t) in chunk.iter().enumerate() {
            let t = if i == 0 { bos.unwrap_or(t) } else { t };
            batch.push(t, i, seq, i >= first && i + 1 < ctx);
        }
        let logits = model.forward(&batch, &mut kv, &mut ws)?;
        for (row, i) in logits.chunks_exact(vocab).zip(first..ctx - 1) {
            let target = chunk[i + 1] as usize;
            let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let lse = row
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln()
                + max;
            nll += lse - row[target] as f64;
            count += 1;
        }
        kv.remove_seq(seq);
        let ppl = (nll / count as f64).exp();
        running.push(ppl);
        on_chunk(c + 1, n_chunks, ppl);
    }
    Ok(PerplexityResult {
        perplexity: (nll / count as f64).exp(),
        chunks: n_chunks,
        tokens_scored: count,
        running,
    })
}
