//! The paged KV cache: one pool of fixed-size blocks shared by all sequences.
//!
//! Storage is one f16 array per layer for K and one for V, `n_blocks · KV_BLOCK_SIZE` slots of
//! `kv_dim` elements each. A sequence owns a block table (block ids in position order); position
//! `p` lives in slot `table[p / B] · B + p % B`. Blocks come from a free list, so sequences grow
//! one block at a time and a finished sequence returns its blocks at once — no fragmentation, no
//! copying. (Scheduling policy — preemption, prefix sharing — is the engine's, built on this.)

use crate::{ModelConfig, ModelError};
use half::f16;
use ridge_kernels::attention::KvLayer;

/// Tokens per KV block.
pub const KV_BLOCK_SIZE: usize = 16;

/// Identifies a sequence in a [`KvCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(pub usize);

#[derive(Debug, Default)]
struct SeqState {
    blocks: Vec<u32>,
    len: usize,
}

/// Paged K/V storage plus per-sequence block tables.
pub struct KvCache {
    kv_dim: usize,
    n_blocks: usize,
    k: Vec<Vec<f16>>,
    v: Vec<Vec<f16>>,
    free: Vec<u32>,
    seqs: Vec<Option<SeqState>>,
}

impl KvCache {
    /// A cache able to hold `capacity_tokens` tokens (rounded up to whole blocks) for `cfg`.
    pub fn new(cfg: &ModelConfig, capacity_tokens: usize) -> Self {
        let n_blocks = capacity_tokens.div_ceil(KV_BLOCK_SIZE).max(1);
        let slots = n_blocks * KV_BLOCK_SIZE * cfg.kv_dim();
        KvCache {
            kv_dim: cfg.kv_dim(),
            n_blocks,
            k: (0..cfg.n_layers).map(|_| vec![f16::ZERO; slots]).collect(),
            v: (0..cfg.n_layers).map(|_| vec![f16::ZERO; slots]).collect(),
            free: (0..n_blocks as u32).rev().collect(),
            seqs: Vec::new(),
        }
    }

    /// Bytes of K and V storage.
    pub fn bytes(&self) -> usize {
        2 * self.k.len() * self.n_blocks * KV_BLOCK_SIZE * self.kv_dim * 2
    }

    /// Total blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks not owned by any sequence.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Starts an empty sequence.
    pub fn add_seq(&mut self) -> SeqId {
        if let Some(i) = self.seqs.iter().position(|s| s.is_none()) {
            self.seqs[i] = Some(SeqState::default());
            SeqId(i)
        } else {
            self.seqs.push(Some(SeqState::default()));
            SeqId(self.seqs.len() - 1)
        }
    }

    /// Ends a sequence and returns its blocks to the pool. Unknown ids are ignored.
    pub fn remove_seq(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(id.0).and_then(Option::take) {
            self.free.extend(s.blocks.iter().rev());
        }
    }

    fn seq(&self, id: SeqId) -> Result<&SeqState, ModelError> {
        self.seqs
            .get(id.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| ModelError::BadBatch(format!("unknown sequence {}", id.0)))
    }

    /// Tokens cached for a sequence (0 for unknown ids).
    pub fn seq_len(&self, id: SeqId) -> usize {
        self.seq(id).map_or(0, |s| s.len)
    }

    /// The block table of a sequence.
    pub fn block_table(&self, id: SeqId) -> &[u32] {
        self.seq(id).map_or(&[], |s| &s.blocks)
    }

    /// Makes room for a sequence to hold `len` tokens, taking blocks from the pool. On failure
    /// nothing is taken.
    pub(crate) fn reserve(&mut self, id: SeqId, len: usize) -> Result<(), ModelError> {
        let have = self.seq(id)?.blocks.len();
        let need = len.div_ceil(KV_BLOCK_SIZE).saturating_sub(have);
        if need > self.free.len() {
            return Err(ModelError::KvFull {
                needed: need,
                free: self.free.len(),
            });
        }
        let start = self.free.len() - need;
        let taken: Vec<u32> = self.free.drain(start..).rev().collect();
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            s.blocks.extend(taken);
        }
        Ok(())
    }

    /// Records that a sequence now holds `len` tokens (after a forward pass wrote them).
    pub(crate) fn set_len(&mut self, id: SeqId, len: usize) {
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            s.len = len;
        }
    }

    /// Slot index of position `pos` of a sequence (the block must be reserved).
    #[inline]
    pub(crate) fn slot(&self, table: &[u32], pos: usize) -> usize {
        table[pos / KV_BLOCK_SIZE] as usize * KV_BLOCK_SIZE + pos % KV_BLOCK_SIZE
    }

    /// Writes one token's K and V rows of layer `layer` into `slot`.
    pub(crate) fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        let kd = &mut self.k[layer][slot * d..(slot + 1) * d];
        for (o, &x) in kd.iter_mut().zip(k) {
            *o = f16::from_f32(x);
        }
        let vd = &mut self.v[layer][slot * d..(slot + 1) * d];
        for (o, &x) in vd.iter_mut().zip(v) {
            *o = f16::from_f32(x);
        }
    }

    /// Read view of one layer for the attention kernel.
    pub(crate) fn layer(&self, layer: usize) -> KvLayer<'_> {
        KvLayer {
            k: &self.k[layer],
            v: &self.v[layer],
            kv_dim: self.kv_dim,
            block_size: KV_BLOCK_SIZE,
        }
    }
}
