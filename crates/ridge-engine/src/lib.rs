//! The engine: turns a model's forward pass into generated tokens and measured numbers.
//!
//! - [`Engine`] serves many requests at once: a thread running [`EngineCore`]'s steps —
//!   continuous batching with chunked prefill under a token budget, a paged KV cache with
//!   preemption and prefix reuse, per-request sampling, stop strings, logprobs, `n` choices —
//!   and streaming [`Event`]s back to each request's sink (see `core.rs` for the mechanism).
//! - Embeddings ride the same engine: [`Engine::submit_embedding`] queues an
//!   [`EmbeddingRequest`] whose prompt is prefilled (chunked, batched with generation) and
//!   pooled into one vector, sent as one [`EmbeddingEvent`] to its own [`EmbeddingSink`]; it
//!   never samples or decodes (see `embed.rs`).
//! - [`generate`] runs one request alone (the CLI's `run`, offline benchmarks) and
//!   [`perplexity()`] evaluates a text with llama-perplexity's protocol.
//!
//! Timing is stamped here, once, so every consumer (CLI stats, HTTP timings, Prometheus,
//! benchmarks) reports the same numbers with vLLM's definitions: TTFT = arrival → first token;
//! TPOT = (t_last − t_first) / (n − 1).

mod constraint;
mod core;
mod embed;
mod engine;
mod floor;
mod generate;
mod perplexity;
mod request;
mod sampler;
pub mod spec;
mod stats;
mod stop;
mod think;
mod throughput;
mod timing;

pub use crate::core::{check_request, EngineConfig, EngineCore, KvEventSink};
pub use constraint::{Constraint, GrammarError, GrammarSpec, Grammars, COMPILE_LIMITS};
pub use embed::{rerank_prompt, EmbeddingEvent, EmbeddingRequest, EmbeddingSink};
pub use engine::{Engine, EngineInfo};
pub use floor::{FloorGauge, FloorProbe, REPROBE_INTERVAL};
pub use generate::{generate, generate_in, FinishReason, GenerateParams, Generation};
pub use perplexity::{perplexity, perplexity_kv, PerplexityResult};
pub use request::{
    ChoiceTimings, Event, EventSink, FinishEvent, Request, RequestId, TokenEvent, Usage,
};
pub use ridge_model::{KvEvent, Pooling, RankHead, KV_BLOCK_SIZE};
pub use sampler::{logprobs, Sampler, SamplingParams, TokenHistory, TokenLogprobs};
pub use stats::EngineStats;
pub use stop::{StopMatcher, StopOutcome};
pub use think::ThinkBudget;
pub use throughput::{run_concurrent, ThroughputRun};
pub use timing::RequestTimings;

/// Engine errors.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model failed.
    #[error(transparent)]
    Model(#[from] ridge_model::ModelError),
    /// The prompt does not fit the context.
    #[error("prompt of {prompt} tokens does not fit the context of {ctx} tokens (at least one token must be generated)")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Context length.
        ctx: usize,
    },
    /// An empty prompt.
    #[error("the prompt is empty (no tokens to condition on)")]
    EmptyPrompt,
    /// A request parameter outside its range.
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    /// Too many requests are waiting.
    #[error("the queue is full ({0} requests waiting); retry later")]
    QueueFull(usize),
    /// The engine thread has stopped.
    #[error("the engine has stopped")]
    Stopped,
}
