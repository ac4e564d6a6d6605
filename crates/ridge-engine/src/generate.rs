//! Single-request generation: prefill the prompt in chunks, then decode token by token,
//! streaming each token to a callback as soon as it is sampled.

use ridge_model::{Batch, KvCache, Model, Workspace};

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::constraint::sample_constrained;
use crate::{
    Constraint, EngineCore, EngineError, Event, EventSink, FinishEvent, Request, RequestTimings,
    Sampler, SamplingParams,
};

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
    /// A grammar the output must match.
    pub constraint: Option<crate::Constraint>,
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
    /// Speculative tokens drafted (0 without speculation).
    pub draft_tokens: usize,
    /// Drafted tokens accepted.
    pub accepted_tokens: usize,
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
    let mut constraint = params.constraint.clone();
    let mut scratch = Vec::new();
    let mut pick = |logits: &[f32], constraint: &mut Option<Constraint>| {
        sample_constrained(
            &mut sampler,
            None,
            constraint.as_mut(),
            &mut scratch,
            logits,
            None,
        )
        .map_err(|e| EngineError::InvalidParam(e.to_string()))
    };

    let mut next = 0u32;
    for (ci, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
        batch.clear();
        let last = (ci + 1) * PREFILL_CHUNK >= prompt.len();
        batch.push_seq(chunk, ci * PREFILL_CHUNK, seq, last);
        let logits = model.forward(&batch, &mut kv, &mut ws)?;
        if last {
            next = pick(logits, &mut constraint)?;
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
        if constraint.as_ref().is_some_and(Constraint::is_complete) {
            finish = FinishReason::Stop;
            break;
        }
        batch.clear();
        batch.push(next, prompt.len() + tokens.len() - 1, seq, true);
        let logits = model.forward(&batch, &mut kv, &mut ws)?;
        next = pick(logits, &mut constraint)?;
        // Nothing is rewound here: the windowed layers' old blocks can go.
        let len = kv.seq_len(seq);
        kv.release_behind_window(seq, len);
    }
    Ok(Generation {
        tokens,
        finish,
        timings,
        draft_tokens: 0,
        accepted_tokens: 0,
    })
}

/// As [`generate`], but through an engine core (which must be idle): the path that has the
/// scheduler's features, speculative decoding among them. Tokens reach `on_token` after each
/// engine step, in order.
pub fn generate_in(
    core: &mut EngineCore,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Generation, EngineError> {
    let mut req = Request::greedy(prompt.to_vec(), params.max_tokens);
    req.sampling = params.sampling.clone();
    req.ignore_eos = params.stop_tokens.is_empty();
    req.stop_token_ids = params.stop_tokens.clone();
    req.constraint = params.constraint.clone();
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let log = events.clone();
    let sink: EventSink = Arc::new(move |e| log.lock().map(|mut l| l.push(e)).is_ok());
    let id = u64::MAX;
    core.submit(id, req, sink, Instant::now())?;
    let mut tokens = Vec::new();
    let mut end: Option<FinishEvent> = None;
    let mut buf = Vec::new();
    while end.is_none() {
        let worked = core.step();
        if let Ok(mut l) = events.lock() {
            buf.append(&mut l);
        }
        let mut stop = false;
        for e in buf.drain(..) {
            match e {
                Event::Token(t) => {
                    tokens.push(t.token);
                    if !stop && !on_token(t.token) {
                        stop = true;
                    }
                }
                Event::Finish(f) => end = Some(f),
            }
        }
        if stop && end.is_none() {
            core.abort(id);
        }
        if !worked && end.is_none() {
            return Err(EngineError::Stopped);
        }
    }
    let Some(f) = end else {
        return Err(EngineError::Stopped);
    };
    if let Some(e) = f.error {
        return Err(EngineError::InvalidParam(e));
    }
    let t = &f.timings;
    Ok(Generation {
        finish: f.reason,
        timings: RequestTimings {
            arrival: t.arrival,
            first_token: t.first_token,
            last_token: t.last_token,
            prompt_tokens: prompt.len(),
            output_tokens: tokens.len(),
        },
        draft_tokens: t.draft_tokens,
        accepted_tokens: t.accepted_tokens,
        tokens,
    })
}
