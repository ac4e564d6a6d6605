//! Prompt lookup (n-gram) drafting: the text being written often repeats text already seen —
//! a passage being rewritten, code being edited, fields being extracted. Find the latest
//! earlier occurrence of the sequence's last `n` tokens (longest `n` first) and propose what
//! followed it. No model, no memory; a miss costs nothing because no draft is verified.

use ridge_model::{KvCache, Model, ModelError};

use super::{DraftSlot, Proposer, SpecMethod};

/// The n-gram proposer.
#[derive(Clone, Debug)]
pub struct NgramProposer {
    /// Shortest suffix to match.
    pub min_n: usize,
    /// Longest suffix to match.
    pub max_n: usize,
}

impl Default for NgramProposer {
    fn default() -> Self {
        NgramProposer { min_n: 2, max_n: 4 }
    }
}

impl NgramProposer {
    /// Up to `k` tokens that followed the latest earlier occurrence of the longest matching
    /// suffix of `tokens` (empty when none matches).
    pub fn lookup(&self, tokens: &[u32], k: usize, out: &mut Vec<u32>) {
        let len = tokens.len();
        for n in (self.min_n.max(1)..=self.max_n).rev() {
            if n >= len {
                continue;
            }
            let pat = &tokens[len - n..];
            // Latest start i < len - n with tokens[i..i+n] == pat.
            let found = (0..len - n).rev().find(|&i| &tokens[i..i + n] == pat);
            if let Some(i) = found {
                let from = i + n;
                out.extend_from_slice(&tokens[from..(from + k).min(len)]);
                return;
            }
        }
    }
}

impl Proposer for NgramProposer {
    fn method(&self) -> SpecMethod {
        SpecMethod::Ngram
    }

    fn propose(
        &mut self,
        _target: &Model,
        _target_kv: &mut KvCache,
        slots: &mut [DraftSlot<'_>],
    ) -> Result<(), ModelError> {
        for s in slots.iter_mut() {
            self.lookup(s.tokens, s.k, s.out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(tokens: &[u32], k: usize) -> Vec<u32> {
        let mut out = Vec::new();
        NgramProposer::default().lookup(tokens, k, &mut out);
        out
    }

    #[test]
    fn continues_the_latest_longest_match() {
        // Suffix [2, 3] occurs at 1 (followed by 9, 9) and at 5 (followed by 7, 8): latest wins.
        assert_eq!(look(&[1, 2, 3, 9, 9, 2, 3, 7, 8, 2, 3], 2), vec![7, 8]);
        // A 3-gram match beats a later 2-gram match: [1, 2, 3] occurs only at 0.
        assert_eq!(look(&[1, 2, 3, 4, 5, 2, 3, 6, 1, 2, 3], 3), vec![4, 5, 2]);
        // Continuation cut at the end of the tokens.
        assert_eq!(look(&[5, 6, 5, 6], 4), vec![5, 6]);
        // Nothing repeats: no draft; a single repeated token is below min_n.
        assert!(look(&[1, 2, 3, 4], 3).is_empty());
        assert!(look(&[1, 2, 1], 3).is_empty());
    }
}
