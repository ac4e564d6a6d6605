//! Scratch buffers of the forward pass, reused across calls: they grow to the largest batch
//! seen and are never reallocated for a batch of the same or smaller size, so the decode loop
//! allocates nothing.

use ridge_kernels::MatmulScratch;

/// Reusable activation buffers for [`crate::Model::forward`].
#[derive(Default)]
pub struct Workspace {
    pub(crate) x: Vec<f32>,
    pub(crate) xn: Vec<f32>,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) att: Vec<f32>,
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    pub(crate) cos: Vec<f32>,
    pub(crate) sin: Vec<f32>,
    /// RoPE tables of the sliding-window layers (Gemma 3's local base).
    pub(crate) cos_swa: Vec<f32>,
    pub(crate) sin_swa: Vec<f32>,
    pub(crate) logits: Vec<f32>,
    /// Normed final hidden states of the rows that asked for them (embeddings).
    pub(crate) hidden: Vec<f32>,
    pub(crate) out_rows: Vec<usize>,
    /// Per KV layer group (see `KvCache::groups`), the block table of each sequence.
    pub(crate) tables: Vec<Vec<Vec<u32>>>,
    /// Sequences of the batch with their length after it.
    pub(crate) seq_of: Vec<(crate::SeqId, usize)>,
    /// Per token, index of its sequence in `seq_of` / `tables`.
    pub(crate) table_of: Vec<usize>,
    pub(crate) mm: MatmulScratch,
    /// Decode attention split by position chunks: one task per (token, first head, chunk),
    /// with the offset of its partial in `att_partials`.
    pub(crate) att_tasks: Vec<AttnTask>,
    pub(crate) att_partials: Vec<f32>,
    /// The routed feed-forward's buffers (mixtures of experts).
    pub(crate) moe: crate::moe::MoeScratch,
}

/// One task of decode attention split by position chunks (see `Model::attention`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AttnTask {
    /// Token of the batch.
    pub(crate) t: usize,
    /// First query head.
    pub(crate) h0: usize,
    /// Chunk index (`attention::chunks`).
    pub(crate) chunk: usize,
    /// Offset of the task's partial in `att_partials`.
    pub(crate) at: usize,
}

/// Resizes `v` to exactly `n` elements without shrinking its capacity.
pub(crate) fn fit(v: &mut Vec<f32>, n: usize) {
    v.resize(n, 0.0);
}

impl Workspace {
    /// An empty workspace; buffers grow on first use.
    pub fn new() -> Self {
        Self::default()
    }
}
