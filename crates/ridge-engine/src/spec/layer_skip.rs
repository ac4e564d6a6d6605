//! Self-speculation by layer skipping: the draft is the target model with some layers left
//! out (Draft & Verify, Zhang et al. 2023), so a user with one model file still gains. The draft
//! runs inside the target's own KV cache: the layers it keeps read the target's exact K/V for
//! every verified position and write theirs at the draft positions, which the verification pass
//! then rewrites with the full model. No second cache, no catch-up prefill.
//!
//! Small models leave such a draft little to work with: the `exit_agree` example measures, for
//! every exit layer, how often the truncated model agrees with the whole one on its own greedy
//! text and bounds the speed-up any early-exit draft could reach. On SmolLM2-135M the bound is
//! about 1.02× (the last few layers change most predictions, and the layers a draft must run
//! cost as much as the guesses save).

use ridge_model::{Batch, KvCache, Model, ModelError, Workspace};

use super::{argmax_rows, DraftSlot, Proposer, SpecMethod};

/// The layer-skipping proposer.
pub struct LayerSkipProposer {
    skip: Vec<bool>,
    ws: Workspace,
    batch: Batch,
    picks: Vec<u32>,
}

impl LayerSkipProposer {
    /// Skips the layers whose `skip` flag is set.
    pub fn new(skip: Vec<bool>) -> Self {
        LayerSkipProposer {
            skip,
            ws: Workspace::new(),
            batch: Batch::new(),
            picks: Vec::new(),
        }
    }

    /// The default choice for `n_layers`: keep the first and last quarter (where skipping hurts
    /// most) and every other layer in between.
    pub fn default_skip(n_layers: usize) -> Vec<bool> {
        let (lo, hi) = (n_layers / 4, n_layers - n_layers / 4);
        (0..n_layers)
            .map(|i| i >= lo && i < hi && (i - lo) % 2 == 1)
            .collect()
    }

    /// Layers skipped.
    pub fn skipped(&self) -> usize {
        self.skip.iter().filter(|&&s| s).count()
    }
}

impl Proposer for LayerSkipProposer {
    fn method(&self) -> SpecMethod {
        SpecMethod::SelfSkip
    }

    /// Measured on SmolLM2-135M: a layer-skipped draft keeps 20–30% of its guesses, and each
    /// guess costs most of a decode step, so start sceptical.
    fn prior_acceptance(&self) -> f64 {
        0.4
    }

    fn propose(
        &mut self,
        target: &Model,
        kv: &mut KvCache,
        slots: &mut [DraftSlot<'_>],
    ) -> Result<(), ModelError> {
        let rounds = slots.iter().map(|s| s.k).max().unwrap_or(0);
        let result = (|| {
            for r in 0..rounds {
                self.batch.clear();
                for s in slots.iter() {
                    if r < s.k {
                        let tok = if r == 0 {
                            s.tokens[s.tokens.len() - 1]
                        } else {
                            s.out[r - 1]
                        };
                        self.batch
                            .push(tok, s.tokens.len() - 1 + r, s.target_seq, true);
                    }
                }
                let logits =
                    target.forward_skipping(&self.batch, kv, &mut self.ws, Some(&self.skip))?;
                argmax_rows(logits, target.config().vocab, &mut self.picks);
                let mut row = 0;
                for s in slots.iter_mut() {
                    if r < s.k {
                        s.out.push(self.picks[row]);
                        row += 1;
                    }
                }
            }
            Ok(())
        })();
        // Hand every sequence back at its verified length (blocks stay reserved).
        for s in slots.iter() {
            kv.rewind(s.target_seq, s.tokens.len() - 1);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_skip_keeps_the_ends() {
        let s = LayerSkipProposer::default_skip(8);
        assert_eq!(s, [false, false, false, true, false, true, false, false]);
        let s = LayerSkipProposer::default_skip(30);
        assert!(!s[..7].iter().any(|&x| x) && !s[23..].iter().any(|&x| x));
        assert_eq!(s.iter().filter(|&&x| x).count(), 8);
    }
}
