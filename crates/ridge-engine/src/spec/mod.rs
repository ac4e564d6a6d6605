//! Speculative decoding: guess several next tokens cheaply, verify them all in one forward
//! pass of the target model, keep the longest verified prefix plus one token from the target.
//!
//! Decode reads every weight to produce one token per sequence; a verification pass over
//! `1 + k` tokens reads them once for up to `k + 1` tokens. The engine core (`core.rs`) owns the
//! mechanism — reserving blocks for the drafts, putting `1 + k` tokens of a sequence into the
//! batch with logits for each, accepting or rejecting each draft with the request's own sampler
//! (`Sampler::verify_draft`: greedy output is unchanged, sampled output keeps the target's
//! distribution) and rolling the KV cache back past rejected tokens. This module holds what
//! varies: the [`Proposer`]s that make the guesses and the [`SpecState`] that sizes them.
//!
//! Proposers are deterministic (each guess is the proposer's argmax), so verification treats a
//! draft as a point mass; see `Sampler::verify_draft` for why that leaves the distribution
//! exactly unchanged.

mod adaptive;
mod bound;
mod draft_model;
mod layer_skip;
mod ngram;

pub use adaptive::{SpecState, StepCosts};
pub use bound::{lookup_guesses, pass_costs, spec_bound, Guesses, SpecBound};
pub use draft_model::DraftModelProposer;
pub use layer_skip::LayerSkipProposer;
pub use ngram::NgramProposer;

use ridge_model::{KvCache, Model, ModelError, SeqId};

/// Which proposer a speculating engine uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt lookup: continue the latest earlier occurrence of the last few tokens.
    Ngram,
    /// A smaller model sharing the target's vocabulary.
    Draft,
    /// The target itself with layers skipped.
    SelfSkip,
}

impl SpecMethod {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            SpecMethod::Ngram => "ngram",
            SpecMethod::Draft => "draft",
            SpecMethod::SelfSkip => "self",
        }
    }
}

/// Speculation limits.
#[derive(Clone, Debug)]
pub struct SpecConfig {
    /// Most draft tokens per sequence per step.
    pub max_draft: usize,
    /// Speculate only while at most this many sequences run: larger batches are compute-bound
    /// on a CPU, where extra verified tokens cost as much as they save.
    pub max_running: usize,
    /// Size drafts by measured cost and acceptance (see `adaptive.rs`); when false every
    /// eligible step drafts `max_draft` tokens (for tests and experiments).
    pub adaptive: bool,
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            max_draft: 7,
            max_running: 4,
            adaptive: true,
        }
    }
}

/// One sequence asking for drafts.
pub struct DraftSlot<'a> {
    /// Stable id of the sequence for the proposer's own state.
    pub key: u64,
    /// Every token of the sequence; the target cache holds all but the last.
    pub tokens: &'a [u32],
    /// The sequence in the target's cache (blocks reserved for `tokens.len() + k`).
    pub target_seq: SeqId,
    /// Most drafts wanted.
    pub k: usize,
    /// Where the drafts go (cleared by the caller; at most `k`).
    pub out: &'a mut Vec<u32>,
}

/// Makes draft tokens.
pub trait Proposer: Send {
    /// The method implemented.
    fn method(&self) -> SpecMethod;

    /// Fills each slot's `out` with up to `k` guesses of the tokens after `tokens`. May use the
    /// target model and its cache, but must leave every target sequence's cached length as it
    /// found it (positions past it may be overwritten: they are rewritten by verification).
    fn propose(
        &mut self,
        target: &Model,
        target_kv: &mut KvCache,
        slots: &mut [DraftSlot<'_>],
    ) -> Result<(), ModelError>;

    /// The time one more guess cost in the last [`Proposer::propose`] call, in milliseconds,
    /// when the proposer can tell it apart from its catch-up work (a draft model's rounds
    /// after the first are single-token steps); `None` lets the engine divide the whole call
    /// by the guesses.
    fn guess_ms(&self) -> Option<f64> {
        None
    }

    /// How often a guess is expected to hold before any is measured (the adaptive policy's
    /// prior): prompt lookup is usually right when it finds a match.
    fn prior_acceptance(&self) -> f64 {
        0.8
    }

    /// What one guess is expected to cost before any is timed, in plain decode steps of
    /// `target` (the adaptive policy's prior; `None`: nothing until measured). Without it the
    /// first guesses after start-up, timed while the proposer's pages and caches are cold,
    /// set the estimate, and drafting stayed off for most of the first request.
    fn prior_guess_cost(&self, target: &Model) -> Option<f64> {
        let _ = target;
        None
    }

    /// Drops any state kept for sequences `live` rejects (finished, preempted or aborted).
    fn retain(&mut self, live: &dyn Fn(u64) -> bool) {
        let _ = live;
    }
}

/// The engine's speculation: a proposer and its limits.
pub struct Speculator {
    /// Makes the guesses.
    pub proposer: Box<dyn Proposer>,
    /// Limits.
    pub cfg: SpecConfig,
}

/// The argmax of each `vocab`-wide row of `logits`, into `out`.
fn argmax_rows(logits: &[f32], vocab: usize, out: &mut Vec<u32>) {
    out.clear();
    out.extend(logits.chunks_exact(vocab).map(crate::sampler::argmax));
}
