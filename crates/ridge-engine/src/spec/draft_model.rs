//! Drafting with a second, smaller model that shares the target's vocabulary (`--draft-model`).
//!
//! The draft keeps its own paged KV cache with one sequence per target sequence. Each call
//! first catches the draft up with the tokens the target accepted since the last call — the
//! guesses that were verified are already in the draft's cache, so usually only the target's
//! own last token is new — then runs `k` greedy single-token steps for all slots at once.
//! When the draft's cache is full a slot simply gets no draft.

use std::collections::HashMap;

use ridge_model::{Batch, KvCache, KvDtype, Model, ModelError, SeqId, Workspace};

use super::{argmax_rows, DraftSlot, Proposer, SpecMethod};

/// A draft sequence: its id in the draft cache, how many of the target's tokens it holds, and
/// the guesses it computed past them last time.
struct DraftSeq {
    seq: SeqId,
    valid: usize,
    fed: Vec<u32>,
}

/// The draft-model proposer.
pub struct DraftModelProposer {
    model: Model,
    kv: KvCache,
    ws: Workspace,
    batch: Batch,
    seqs: HashMap<u64, DraftSeq>,
    picks: Vec<u32>,
    /// Per round, the slot indices in the batch.
    active: Vec<usize>,
    /// Mean time of the last call's rounds after the first (single-token steps), ms.
    round_ms: Option<f64>,
}

impl DraftModelProposer {
    /// Wraps a draft model with a cache of `cache_tokens` tokens. Fails when its vocabulary
    /// size differs from `target_vocab`. The model's head may be restricted
    /// ([`Model::restrict_head`]): its guesses are then among the ids it keeps.
    pub fn new(model: Model, target_vocab: usize, cache_tokens: usize) -> Result<Self, ModelError> {
        let vocab = model.config().vocab;
        if vocab != target_vocab {
            return Err(ModelError::BadBatch(format!(
                "the draft model's vocabulary has {vocab} tokens, the target's {target_vocab}: they must share one"
            )));
        }
        if model.config().recurrent.is_some() {
            // Its own cache takes back the guesses the target rejects; a hybrid's state would
            // need a journal per drafting round.
            return Err(ModelError::BadBatch(format!(
                "a hybrid draft model ({}) is not supported; use a model whose every layer attends",
                model.config().arch.gguf_name()
            )));
        }
        let kv = KvCache::with_dtype(model.config(), cache_tokens, KvDtype::F16)?;
        Ok(DraftModelProposer {
            model,
            kv,
            ws: Workspace::new(),
            batch: Batch::new(),
            seqs: HashMap::new(),
            picks: Vec::new(),
            active: Vec::new(),
            round_ms: None,
        })
    }

    /// Brings the draft sequence of slot `s` up to all of its tokens but the last, returning
    /// the position of the last token, or `None` when the draft cache cannot hold the slot.
    fn sync(&mut self, s: &DraftSlot<'_>) -> Option<usize> {
        let ctx = self.model.config().ctx_len;
        let toks = s.tokens;
        if toks.len() + s.k > ctx {
            return None;
        }
        if !self.seqs.contains_key(&s.key) {
            let seq = self.kv.add_seq();
            let cached = self.kv.attach_cached_prefix(seq, toks, toks.len() - 1);
            self.seqs.insert(
                s.key,
                DraftSeq {
                    seq,
                    valid: cached,
                    fed: Vec::new(),
                },
            );
        }
        let d = self.seqs.get_mut(&s.key)?;
        // Guesses fed last time that the target then accepted are valid cache entries.
        let base = d.valid.min(toks.len());
        let kept = d
            .fed
            .iter()
            .zip(&toks[base..])
            .take_while(|(a, b)| a == b)
            .count();
        d.valid = (base + kept).min(toks.len() - 1);
        d.fed.clear();
        self.kv.truncate(d.seq, d.valid);
        let valid = self.kv.seq_len(d.seq);
        d.valid = valid;
        // Room for the catch-up and the k - 1 guesses fed back.
        if self.kv.reserve(d.seq, toks.len() + s.k).is_err() {
            let seq = d.seq;
            self.kv.remove_seq(seq);
            self.seqs.remove(&s.key);
            return None;
        }
        Some(valid)
    }
}

impl Proposer for DraftModelProposer {
    fn method(&self) -> SpecMethod {
        SpecMethod::Draft
    }

    fn propose(
        &mut self,
        _target: &Model,
        _target_kv: &mut KvCache,
        slots: &mut [DraftSlot<'_>],
    ) -> Result<(), ModelError> {
        // Round 0: catch up (every token the draft lacks, logits on the last).
        self.batch.clear();
        self.active.clear();
        for (i, s) in slots.iter().enumerate() {
            if s.k == 0 {
                continue;
            }
            let Some(valid) = self.sync(s) else {
                continue;
            };
            let Some(seq) = self.seqs.get(&s.key).map(|d| d.seq) else {
                continue;
            };
            self.batch.push_seq(&s.tokens[valid..], valid, seq, true);
            self.active.push(i);
        }
        let vocab = self.model.logit_width();
        let mut round = 0;
        // Rounds after the first are one token per slot: their time is what a guess costs
        // (the first also reads whatever the draft missed, e.g. a whole pause's tokens).
        let (mut later, mut later_rounds) = (0.0f64, 0usize);
        while !self.active.is_empty() {
            let t0 = std::time::Instant::now();
            let logits = self
                .model
                .forward(&self.batch, &mut self.kv, &mut self.ws)?;
            argmax_rows(logits, vocab, &mut self.picks);
            for (row, &i) in self.active.iter().enumerate() {
                slots[i].out.push(self.picks[row]);
            }
            if round > 0 {
                later += t0.elapsed().as_secs_f64() * 1e3;
                later_rounds += 1;
            }
            round += 1;
            self.active.retain(|&i| slots[i].out.len() < slots[i].k);
            self.batch.clear();
            for &i in &self.active {
                let s = &slots[i];
                if let Some(d) = self.seqs.get_mut(&s.key) {
                    let tok = s.out[round - 1];
                    d.fed.push(tok);
                    self.batch
                        .push(tok, s.tokens.len() - 1 + round, d.seq, true);
                }
            }
        }
        self.round_ms = (later_rounds > 0).then(|| later / later_rounds as f64);
        // The draft now holds every slot's tokens (and `fed` past them).
        for s in slots.iter() {
            if let Some(d) = self.seqs.get_mut(&s.key) {
                if !s.out.is_empty() {
                    d.valid = s.tokens.len();
                    self.kv.commit_blocks(d.seq, s.tokens);
                }
            }
        }
        Ok(())
    }

    /// Both models stream their weights once per step: a guess costs about the ratio of
    /// their bytes (the 0.5B with its head cut to 65536 ids against the 1.5B: ~0.28, measured
    /// 0.29).
    fn prior_guess_cost(&self, target: &Model) -> Option<f64> {
        let t = target.weight_bytes_per_token();
        (t > 0).then(|| self.model.weight_bytes_per_token() as f64 / t as f64)
    }

    fn guess_ms(&self) -> Option<f64> {
        self.round_ms
    }

    fn retain(&mut self, live: &dyn Fn(u64) -> bool) {
        let kv = &mut self.kv;
        self.seqs.retain(|&k, d| {
            let keep = live(k);
            if !keep {
                kv.remove_seq(d.seq);
            }
            keep
        });
    }
}
