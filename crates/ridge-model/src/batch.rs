//! A batch of tokens for one forward pass.

use crate::SeqId;

/// Tokens to run through the model in one pass, possibly from several sequences.
///
/// Each token carries its sequence and position. A sequence's tokens must appear in position
/// order and continue exactly where that sequence's cache ends. Tokens with `logits` set get a
/// row of logits in the output, in batch order.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Token ids.
    pub tokens: Vec<u32>,
    /// Position of each token within its sequence.
    pub positions: Vec<usize>,
    /// Sequence of each token.
    pub seqs: Vec<SeqId>,
    /// Whether to return logits for each token.
    pub logits: Vec<bool>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes all tokens, keeping the allocations.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.positions.clear();
        self.seqs.clear();
        self.logits.clear();
    }

    /// Appends one token.
    pub fn push(&mut self, token: u32, pos: usize, seq: SeqId, logits: bool) {
        self.tokens.push(token);
        self.positions.push(pos);
        self.seqs.push(seq);
        self.logits.push(logits);
    }

    /// Appends a run of consecutive tokens of one sequence starting at `start`; only the last
    /// gets logits when `last_logits` is set.
    pub fn push_seq(&mut self, tokens: &[u32], start: usize, seq: SeqId, last_logits: bool) {
        for (i, &t) in tokens.iter().enumerate() {
            self.push(t, start + i, seq, last_logits && i + 1 == tokens.len());
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}
