//! Embedding requests: a prompt in, one pooled, L2-normalised vector out — or, under rank
//! pooling, a reranker's scores.
//!
//! # Why a seam of its own
//!
//! An embedding is a prefill that never samples, so it rides the same scheduler as generation
//! (`core.rs`): it is admitted under the same token budget, its prompt is chunked like any
//! other, and its rows share forward passes with decodes. What differs is what happens to its
//! rows: they ask the model for final hidden states instead of logits (the LM head never runs
//! for them), and the pooling folds each chunk's rows into an accumulator as the chunk
//! completes, so a long prompt is pooled across steps without keeping its rows. When the last
//! chunk is computed the vector is normalised and sent, the sequence's KV blocks are freed,
//! and it never decodes.
//!
//! The event type and sink are separate from [`crate::Event`] on purpose: a consumer of
//! generation events never sees an embedding, and one of embeddings never matches on tokens.
//!
//! # Rank pooling
//!
//! A rerank request is an embedding request under [`Pooling::Rank`]: the same path, the
//! last row kept (every architecture ridge runs is causal, and llama.cpp then reads the last
//! token), and at the end the model's classifier head ([`ridge_model::RankHead`]) applied to
//! it instead of the normalisation: the event carries the head's outputs, the score first
//! (see `ridge-model`'s `rank.rs` for the definition).
//!
//! # Invariance
//!
//! A vector must not depend on what else ran in its steps. The layers already reduce every
//! output element in an order independent of the batch (see the engine's batch test); the
//! pooling adds each row to the accumulator in position order, one row at a time in f64, so
//! where the chunk boundaries fall changes nothing either. An embedding never adopts a cached
//! prefix (mean and cls pooling need every row, and skipping rows would make the vector depend
//! on the cache) and never indexes its blocks for reuse, so it neither reads nor changes what
//! later requests find in the prefix cache.

use std::sync::Arc;
use std::time::Instant;

use ridge_model::{Pooling, RankHead};

use crate::EngineError;

/// One embedding request.
#[derive(Clone, Debug)]
pub struct EmbeddingRequest {
    /// The tokens to embed (already tokenized; at most the context length).
    pub tokens: Vec<u32>,
    /// How the rows are pooled: [`Pooling::Mean`], [`Pooling::Cls`] or [`Pooling::Last`]
    /// for a vector, [`Pooling::Rank`] for a reranker's scores (the tokens then hold one
    /// formed query–document prompt).
    pub pooling: Pooling,
}

/// The answer to an embedding request, sent once.
#[derive(Clone, Debug)]
pub struct EmbeddingEvent {
    /// The L2-normalised vector (`d_model` values) — under rank pooling the classifier
    /// head's outputs, the score first —, or why there is none (aborted, or an internal
    /// failure of the step).
    pub result: Result<Vec<f32>, String>,
    /// Tokens embedded.
    pub prompt_tokens: usize,
    /// When the request was submitted.
    pub arrival: Instant,
    /// When it was first scheduled.
    pub scheduled: Option<Instant>,
    /// When the vector was ready (or the request failed).
    pub finished: Instant,
}

/// Receives an embedding request's one event on the engine thread; must not block.
pub type EmbeddingSink = Arc<dyn Fn(EmbeddingEvent) + Send + Sync>;

/// Checks an embedding request against a model of context `ctx` and vocabulary `vocab`, and a
/// KV pool of `total_blocks` blocks of `block` tokens.
pub(crate) fn check_embedding(
    req: &EmbeddingRequest,
    ctx: usize,
    vocab: usize,
    total_blocks: usize,
    block: usize,
) -> Result<(), EngineError> {
    if !matches!(
        req.pooling,
        Pooling::Mean | Pooling::Cls | Pooling::Last | Pooling::Rank
    ) {
        return Err(EngineError::InvalidParam(format!(
            "pooling `{}` does not give one vector per input; use mean, cls, last or rank",
            req.pooling
        )));
    }
    if req.tokens.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if req.tokens.len() > ctx {
        return Err(EngineError::InvalidParam(format!(
            "the input has {} tokens but the model's context holds {ctx}",
            req.tokens.len()
        )));
    }
    if let Some(&bad) = req.tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(EngineError::InvalidParam(format!(
            "token id {bad} is outside the vocabulary of {vocab} tokens"
        )));
    }
    let need = req.tokens.len().div_ceil(block);
    if need > total_blocks {
        return Err(EngineError::InvalidParam(format!(
            "the input needs {need} KV blocks but the whole cache holds {total_blocks}"
        )));
    }
    Ok(())
}

/// The tokens of one (query, document) pair for a reranker, formed as llama-server forms them:
/// with the model's rerank template (`template`, [`RankHead::template`]) `{query}` and
/// `{document}` are replaced and the text tokenized with special tokens parsed and none
/// added; without one, `[BOS if add_bos] query [EOS if add_eos] document [EOS if add_eos]`,
/// the texts tokenized plainly (llama.cpp also puts a SEP token after the query for
/// vocabularies that ask for one; the decoder-only ones ridge reads never do).
pub fn rerank_prompt(
    tokenizer: &ridge_tokenizer::Tokenizer,
    template: Option<&str>,
    query: &str,
    document: &str,
) -> Result<Vec<u32>, ridge_tokenizer::TokenizerError> {
    if let Some(t) = template {
        let text = t.replace("{query}", query).replace("{document}", document);
        return tokenizer.encode(&text, false, true);
    }
    let mut out = Vec::new();
    if tokenizer.add_bos() {
        out.extend(tokenizer.bos_id());
    }
    out.extend(tokenizer.encode(query, false, false)?);
    if tokenizer.add_eos() {
        out.extend(tokenizer.eos_id());
    }
    out.extend(tokenizer.encode(document, false, false)?);
    if tokenizer.add_eos() {
        out.extend(tokenizer.eos_id());
    }
    Ok(out)
}

/// The pooling state of one embedding sequence.
pub(crate) struct EmbedState {
    pub(crate) pooling: Pooling,
    pub(crate) sink: EmbeddingSink,
    /// The classifier head, under rank pooling.
    head: Option<Arc<RankHead>>,
    /// Mean: the sum of the rows so far; cls / last: the chosen row once seen.
    acc: Vec<f64>,
    /// Rows folded in so far.
    rows: usize,
}

impl EmbedState {
    /// A fresh state; `head` is the model's classifier head, which rank pooling applies.
    pub(crate) fn new(pooling: Pooling, sink: EmbeddingSink, head: Option<Arc<RankHead>>) -> Self {
        EmbedState {
            pooling,
            sink,
            head,
            acc: Vec::new(),
            rows: 0,
        }
    }

    /// Forgets what was pooled (the sequence was preempted and will be recomputed).
    pub(crate) fn reset(&mut self) {
        self.acc.clear();
        self.rows = 0;
    }

    /// Whether the row at `pos` of a sequence of `len` tokens is needed.
    pub(crate) fn wants(&self, pos: usize, len: usize) -> bool {
        match self.pooling {
            Pooling::Cls => pos == 0,
            Pooling::Last | Pooling::Rank => pos + 1 == len,
            _ => true,
        }
    }

    /// Folds in one needed row (in position order).
    pub(crate) fn add(&mut self, row: &[f32]) {
        if self.acc.is_empty() {
            self.acc.resize(row.len(), 0.0);
        }
        for (a, &x) in self.acc.iter_mut().zip(row) {
            *a += f64::from(x);
        }
        self.rows += 1;
    }

    /// The pooled, L2-normalised vector (a zero vector stays zero); under rank pooling the
    /// head's outputs for the kept row, not normalised.
    pub(crate) fn vector(&self) -> Vec<f32> {
        if let (Pooling::Rank, Some(head)) = (self.pooling, &self.head) {
            let row: Vec<f32> = self.acc.iter().map(|&a| a as f32).collect();
            return head.outputs(&row);
        }
        let n = self.rows.max(1) as f64;
        let pooled: Vec<f64> = self.acc.iter().map(|a| a / n).collect();
        let norm = pooled.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            return vec![0.0; pooled.len()];
        }
        pooled.iter().map(|x| (x / norm) as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(p: Pooling) -> EmbedState {
        EmbedState::new(p, Arc::new(|_| {}), None)
    }

    #[test]
    fn mean_of_rows_is_normalised() {
        let mut s = state(Pooling::Mean);
        s.add(&[3.0, 0.0]);
        s.add(&[3.0, 8.0]);
        // mean (3, 4), norm 5
        assert_eq!(s.vector(), vec![0.6, 0.8]);
        s.reset();
        s.add(&[0.0, -2.0]);
        assert_eq!(s.vector(), vec![0.0, -1.0]);
    }

    #[test]
    fn rows_wanted_by_pooling() {
        assert!(state(Pooling::Cls).wants(0, 3));
        assert!(!state(Pooling::Cls).wants(1, 3));
        assert!(state(Pooling::Last).wants(2, 3));
        assert!(state(Pooling::Rank).wants(2, 3));
        assert!(!state(Pooling::Rank).wants(0, 3));
        assert!(!state(Pooling::Last).wants(1, 3));
        assert!(state(Pooling::Mean).wants(1, 3));
        assert_eq!(state(Pooling::Mean).vector(), Vec::<f32>::new());
    }

    #[test]
    fn refuses_poolings_without_one_vector() {
        let r = |pooling| EmbeddingRequest {
            tokens: vec![1, 2],
            pooling,
        };
        assert!(check_embedding(&r(Pooling::None), 8, 10, 4, 16).is_err());
        assert!(check_embedding(&r(Pooling::Rank), 8, 10, 4, 16).is_ok());
        assert!(check_embedding(&r(Pooling::Last), 8, 10, 4, 16).is_ok());
        assert!(check_embedding(&r(Pooling::Last), 1, 10, 4, 16).is_err());
        assert!(check_embedding(&r(Pooling::Last), 8, 2, 4, 16).is_err());
    }
}
