//! `--speculative` and its options, shared by `run`, `serve` and `bench`: builds the engine's
//! [`Speculator`] from the command line.

use anyhow::{bail, Context, Result};
use ridge_engine::spec::{
    DraftModelProposer, LayerSkipProposer, NgramProposer, Proposer, SpecConfig, Speculator,
};
use ridge_model::Model;
use ridge_tokenizer::Tokenizer;

/// Speculative decoding options.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SpecArgs {
    /// Speculative decoding: ngram (prompt lookup), draft (--draft-model), self (layer skip).
    #[arg(long, value_parser = ["ngram", "draft", "self"])]
    pub speculative: Option<String>,
    /// Most draft tokens per step (the engine adapts below it). 7 keeps a verification step
    /// to one 8-token pass over the weights; on the 1.5B n-gram drafting on editing prompts
    /// went 1.51× → 1.64× from 5.
    #[arg(long, default_value_t = 7)]
    pub num_speculative_tokens: usize,
    /// The draft model for `--speculative draft` (path or known name; same vocabulary).
    #[arg(long)]
    pub draft_model: Option<String>,
    /// Token ids the draft model guesses among: the first N of the vocabulary, whose BPE
    /// merges are the most frequent (0: all). Its head then reads N rows instead of the whole
    /// vocabulary: the 0.5B Qwen2.5 draft's 145 MB head shrinks to 62 MB, ~13 → ~11 ms a guess,
    /// for a rare guess it can no longer make.
    #[arg(long, default_value_t = 65536)]
    pub draft_vocab: usize,
    /// Re-encode the draft model's wider matrices (Q5_0, Q8_0, Q6_K…) as q4_0 at load, or
    /// keep its file's formats: fewer bytes per guess for about as many guesses held (the
    /// 0.5B Qwen2.5 draft: 11.1 → 8.6 ms a guess, 77–79% held either way; drafting for the
    /// 1.5B 1.31–1.45× → 1.42×).
    #[arg(long, default_value = "q4_0", value_parser = ["keep", "q4_0"])]
    pub draft_quant: String,
    /// Speculate only while at most this many sequences run (bigger batches are compute-bound).
    #[arg(long, default_value_t = 4)]
    pub spec_max_running: usize,
    /// Layers the self draft skips, comma-separated (default: every other middle layer).
    #[arg(long, value_delimiter = ',')]
    pub spec_skip_layers: Option<Vec<usize>>,
    /// Always draft --num-speculative-tokens (default: size drafts by measured step cost and
    /// acceptance, and stop drafting where it does not pay).
    #[arg(long)]
    pub spec_fixed: bool,
}

impl SpecArgs {
    /// The speculator for `target` (whose tokenizer is `tok`), or `None` without
    /// `--speculative`. `cache_tokens` sizes a draft model's own KV cache.
    pub fn build(
        &self,
        target: &Model,
        tok: &Tokenizer,
        cache_tokens: usize,
    ) -> Result<Option<Speculator>> {
        let Some(method) = self.speculative.as_deref() else {
            if self.draft_model.is_some() {
                bail!("--draft-model needs --speculative draft");
            }
            return Ok(None);
        };
        if self.num_speculative_tokens == 0 || self.num_speculative_tokens > 32 {
            bail!("--num-speculative-tokens must be in 1..=32");
        }
        let n_layers = target.config().n_layers;
        let proposer: Box<dyn Proposer> = match method {
            "ngram" => Box::new(NgramProposer::default()),
            "self" => {
                let skip = match &self.spec_skip_layers {
                    None => LayerSkipProposer::default_skip(n_layers),
                    Some(list) => {
                        let mut skip = vec![false; n_layers];
                        for &l in list {
                            if l >= n_layers {
                                bail!("--spec-skip-layers: layer {l} does not exist (the model has {n_layers})");
                            }
                            skip[l] = true;
                        }
                        if skip.iter().all(|&s| s) {
                            bail!("--spec-skip-layers must keep at least one layer");
                        }
                        skip
                    }
                };
                Box::new(LayerSkipProposer::new(skip))
            }
            _ => {
                let Some(name) = self.draft_model.as_deref() else {
                    bail!("--speculative draft needs --draft-model");
                };
                let mut d =
                    crate::load::load(Some(name)).with_context(|| format!("draft model {name}"))?;
                check_same_vocab(tok, &d.tokenizer)?;
                if self.draft_vocab > 0 {
                    d.model.restrict_head(self.draft_vocab);
                }
                if self.draft_quant == "q4_0" {
                    d.model.requantize(ridge_kernels::DType::Q4_0);
                }
                Box::new(DraftModelProposer::new(
                    d.model,
                    target.config().vocab,
                    cache_tokens,
                )?)
            }
        };
        Ok(Some(Speculator {
            proposer,
            cfg: SpecConfig {
                max_draft: self.num_speculative_tokens,
                max_running: self.spec_max_running,
                adaptive: !self.spec_fixed,
            },
        }))
    }
}

/// Drafts are token ids: the two vocabularies must be the same list.
fn check_same_vocab(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let n = target.vocab_size();
    if draft.vocab_size() != n {
        bail!(
            "the draft model's vocabulary has {} tokens, the target's {n}: they must share one",
            draft.vocab_size()
        );
    }
    if let Some(id) = (0..n as u32).find(|&i| target.token_str(i) != draft.token_str(i)) {
        bail!("the draft model's token {id} differs from the target's: they must share one vocabulary");
    }
    Ok(())
}
