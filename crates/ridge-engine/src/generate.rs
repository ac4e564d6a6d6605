//! Single-request generation: prefill the prompt in chunks, then decode token by token,
//! streaming each token to a callback as soon as it is sampled.

use ridge_model::{Batch, KvCache, Model, Workspace};

use crate::{EngineError, RequestTimings, Sampler, SamplingParams};

/// Largest number of prompt tokens per forward pass (bounds the activation buffers).
const PREFILL_CHUNK: usize = 512;

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token was sampled.
    Stop,
    /// `max_tokens` or the context length was reached.
    Length,
    /// The callback asked to stop.
    Aborted,
}

/// Parameters of one generation.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling.
    pub sampling: SamplingParams,
    /// Tokens that end generation (not passed to the callback).
    pub stop_tokens: Vec<u32>,
}

/// The outcome of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Generated token ids (without the stop token).
    pub tokens: Vec<u32>,
    /// Why it stopped.
    pub finish: FinishReason,
    /// Timing of the request.
    pub timings: RequestTimings,
}

/// Generates from `prompt`. `on_token` receives each new token; returning `false` stops.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Generation, EngineError> {
    params.sampling.validate()?;
    let ctx = model.config().ctx_len;
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if prompt.len() >= ctx {
        return Err(EngineError::PromptTooLong {
            prompt: prompt.len(),
            ctx,
        });
    }
    let mut timings = RequestTimings::start(prompt.len());
    let max_new = params.max_tokens.min(ctx - prompt.len());
    // The last sampled token is never fed back, so the cache holds prompt + max_new − 1.
    let mut kv = KvCache::new(model.config(), prompt.len() + max_new);
    let seq = kv.add_seq();
    let mut ws = Workspace::new();
    let mut batch = Batch::new();
    let mut sampler = Sampler::new(params.sampling.clone());
    let mut tokens = Vec::with_capacity(max_new);

    let mut next = 0u32;
    for (ci, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
        batch.clear();
        let last = (ci + 1) * PREFILL_CHUNK >= prompt.len();
        batch.push_seq(chunk, ci * PREFILL_CHUNK, seq, last);
        let logits = model.forward(&batch, &mut kv, &mut ws)?;
        if last {
            next = sampler.sample(logits);
        }
    }
    let mut finish = FinishReason::Length;
    while tokens.len() < max_new {
        timings.token();
        if params.stop_tokens.contains(&next) {
            finish = FinishReason::Stop;
            timings.output_tokens -= 1;
            break;
        }
        tokens.push(next);
        if !on_token(next) {
            finish = FinishReason::Aborted;
            break;
        }
        if tokens.len() == max_new {
            break;
        }
        batch.clear();
        batch.push(next, prompt.len() + tokens.len() - 1, seq, true);
        let logits = model.forward(&batch, &mut kv, &mut ws)?;
        next = sampler.sample(logits);
    }
    Ok(Generation {
        tokens,
        finish,
        timings,
    })
}
