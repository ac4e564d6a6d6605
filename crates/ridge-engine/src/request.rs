//! What a client submits and what it gets back: request parameters, streamed events, usage and
//! timings.

use std::sync::Arc;
use std::time::Instant;

use crate::{FinishReason, SamplingParams, TokenLogprobs};

/// Identifies a submitted request.
pub type RequestId = u64;

/// One generation request.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids (already templated and tokenized).
    pub prompt: Vec<u32>,
    /// Most tokens to generate per choice (capped by the context length).
    pub max_tokens: usize,
    /// Sampling; with `n > 1` choice `i` uses seed `seed + i`.
    pub sampling: SamplingParams,
    /// Strings that end a choice; never part of the output.
    pub stop: Vec<String>,
    /// Token ids that end a choice (besides end-of-generation tokens).
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Number of choices; they share the prompt's KV blocks.
    pub n: usize,
    /// Alternatives to report with each token's log-probability (`None`: no logprobs).
    pub logprobs: Option<usize>,
    /// Render special tokens in the text (default: skipped).
    pub render_special: bool,
    /// Allow speculative decoding for this request when the engine has it (default: yes; the
    /// output is the same either way, only the speed differs).
    pub speculative: bool,
    /// A grammar the output must match (compiled by [`crate::Grammars::compile`]); each choice
    /// gets its own copy.
    pub constraint: Option<crate::Constraint>,
    /// A cap on the tokens a reasoning model thinks before it must answer.
    pub think_budget: Option<crate::ThinkBudget>,
}

impl Request {
    /// A greedy request for `max_tokens` tokens.
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Request {
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            n: 1,
            logprobs: None,
            render_special: false,
            speculative: true,
            constraint: None,
            think_budget: None,
        }
    }
}

/// Token counts of a finished choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens (including a stop token that ended the choice).
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Timing of one choice, stamped by the engine (vLLM's definitions).
#[derive(Clone, Debug)]
pub struct ChoiceTimings {
    /// When the request was submitted.
    pub arrival: Instant,
    /// When it was first scheduled.
    pub scheduled: Option<Instant>,
    /// When its first token was sampled.
    pub first_token: Option<Instant>,
    /// When its last token was sampled.
    pub last_token: Option<Instant>,
    /// Tokens sampled.
    pub tokens: usize,
    /// Batch-1 roofline floor per output token for this request's mean context, ms (when the
    /// engine knows the machine's bandwidth).
    pub roofline_tpot_ms: Option<f64>,
    /// The request beat the floor its bandwidth gave, so the floor was re-measured:
    /// `roofline_tpot_ms` is what the request proved (its TPOT) and the bandwidth was raised
    /// for later requests.
    pub floor_remeasured: bool,
    /// Speculative tokens drafted for this choice.
    pub draft_tokens: usize,
    /// Drafted tokens the target accepted.
    pub accepted_tokens: usize,
}

impl ChoiceTimings {
    pub(crate) fn new(arrival: Instant) -> Self {
        ChoiceTimings {
            arrival,
            scheduled: None,
            first_token: None,
            last_token: None,
            tokens: 0,
            roofline_tpot_ms: None,
            floor_remeasured: false,
            draft_tokens: 0,
            accepted_tokens: 0,
        }
    }

    /// Arrival → first token, ms.
    pub fn ttft_ms(&self) -> Option<f64> {
        self.first_token.map(|t| ms(t - self.arrival))
    }

    /// Arrival → first scheduled, ms.
    pub fn queue_ms(&self) -> Option<f64> {
        self.scheduled.map(|t| ms(t - self.arrival))
    }

    /// (t_last − t_first) / (n − 1), ms.
    pub fn tpot_ms(&self) -> Option<f64> {
        match (self.first_token, self.last_token) {
            (Some(a), Some(b)) if self.tokens > 1 => Some(ms(b - a) / (self.tokens - 1) as f64),
            _ => None,
        }
    }

    /// Arrival → last token, ms.
    pub fn e2e_ms(&self) -> Option<f64> {
        self.last_token.map(|t| ms(t - self.arrival))
    }

    /// Decode time after the first token, ms.
    pub fn decode_ms(&self) -> Option<f64> {
        match (self.first_token, self.last_token) {
            (Some(a), Some(b)) => Some(ms(b - a)),
            _ => None,
        }
    }

    /// Roofline floor / measured TPOT (1 = at the hardware's limit; never more: a request that
    /// beats its floor re-measures it, see [`ChoiceTimings::floor_remeasured`]).
    pub fn roofline_efficiency(&self) -> Option<f64> {
        match (self.roofline_tpot_ms, self.tpot_ms()) {
            (Some(f), Some(t)) if t > 0.0 => Some((f / t).min(1.0)),
            _ => None,
        }
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One generated token of one choice.
#[derive(Clone, Debug)]
pub struct TokenEvent {
    /// Choice index (0..n).
    pub index: usize,
    /// The token id.
    pub token: u32,
    /// Text that became final with this token (may be empty: an incomplete UTF-8 sequence or a
    /// possible stop string is held back).
    pub text: String,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<TokenLogprobs>,
    /// When the token was sampled.
    pub at: Instant,
    /// When the request arrived (so a consumer can observe TTFT at the first token).
    pub arrival: Instant,
}

/// The end of one choice.
#[derive(Clone, Debug)]
pub struct FinishEvent {
    /// Choice index.
    pub index: usize,
    /// Why it ended.
    pub reason: FinishReason,
    /// Text released at the end (held-back text when the choice ended for another reason than
    /// a stop string).
    pub text: String,
    /// Token counts.
    pub usage: Usage,
    /// Timings.
    pub timings: ChoiceTimings,
    /// Set when the engine failed this choice (an internal error, reported, not a panic).
    pub error: Option<String>,
    /// The stop string that ended the choice, when one did (`reason` is then `Stop`).
    pub stop_sequence: Option<String>,
}

/// What the engine streams back for a request.
#[derive(Clone, Debug)]
pub enum Event {
    /// A token.
    Token(TokenEvent),
    /// A choice ended.
    Finish(FinishEvent),
}

/// Receives a request's events on the engine thread; must not block. Returning `false` means
/// the receiver is gone: the request is aborted and its blocks freed.
pub type EventSink = Arc<dyn Fn(Event) -> bool + Send + Sync>;
