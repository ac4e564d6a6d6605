//! The engine: turns a model's forward pass into generated tokens and measured numbers.
//!
//! Today it runs one request at a time ([`generate`]) and evaluates perplexity
//! ([`perplexity()`]); the continuous-batching scheduler over the paged KV cache builds on the
//! same `Model::forward(batch)` call. Timing is stamped here, once, so every consumer (CLI
//! stats, HTTP timings, benchmarks) reports the same numbers with vLLM's definitions:
//! TTFT = arrival → first token; TPOT = (t_last − t_first) / (n − 1).

mod generate;
mod perplexity;
mod sampler;
mod timing;

pub use generate::{generate, FinishReason, GenerateParams, Generation};
pub use perplexity::{perplexity, PerplexityResult};
pub use sampler::{Sampler, SamplingParams};
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
}
