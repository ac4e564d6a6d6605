//! Scratch buffers of the forward pass, reused across calls: they grow to the largest batch
//! seen and are never reallocated for a batch of the same or smaller size, so the decode loop
//! allocates nothing.
//!
//! The buffers of every step live here, the routed feed-forward's included, so that this
//! module imports nothing of the layers that use it (`layer.rs`, `moe.rs`, `attend.rs`).

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
    pub(crate) moe: MoeScratch,
    /// A router's input rows where they are not the experts' (Gemma 4 routes from the
    /// residual, normed apart).
    pub(crate) router_in: Vec<f32>,
    /// A hybrid's buffers (its recurrent layers and gated attention, `qwen35.rs`).
    pub(crate) hybrid: HybridScratch,
    /// Latent attention's buffers (`deepseek2.rs`).
    pub(crate) mla: MlaScratch,
    /// Gemma 4's per-layer embedding buffers (`gemma4.rs`).
    pub(crate) ple: PleScratch,
}

/// Scratch of Gemma 4's per-layer token embeddings and mixture layers (`gemma4.rs`).
#[derive(Default)]
pub(crate) struct PleScratch {
    /// The projection of each token's embedding (`[token][layer · ple_dim]`).
    pub(crate) proj: Vec<f32>,
    /// The per-layer inputs, layer-major (`[layer][token][ple_dim]`).
    pub(crate) inputs: Vec<f32>,
    /// One token's dequantized embedding row.
    pub(crate) row: Vec<f32>,
    /// A layer's gate activations (`[token][ple_dim]`).
    pub(crate) gate: Vec<f32>,
    /// A mixture layer's dense feed-forward output, kept while its experts run.
    pub(crate) mlp: Vec<f32>,
}

/// Scratch of latent attention (`deepseek2.rs`), reused across layers and calls.
#[derive(Default)]
pub(crate) struct MlaScratch {
    /// The query's low-rank activation, and the queries (`n × heads × key_length_mla`).
    pub(crate) q_a: Vec<f32>,
    pub(crate) q: Vec<f32>,
    /// The latent and rotated key part of each token.
    pub(crate) kv: Vec<f32>,
    /// Per-head inputs of the up-projections, head-major (the queries' unrotated parts, then
    /// the attended latents).
    pub(crate) nope: Vec<f32>,
    /// The absorbed queries, head-major.
    pub(crate) abs: Vec<f32>,
    /// Each (token, head)'s attended latent, token-major.
    pub(crate) lat: Vec<f32>,
    /// Each head's value, head-major.
    pub(crate) vout: Vec<f32>,
    /// Decode attention split by chunks: (token, chunk) per task, and their partials.
    pub(crate) tasks: Vec<(usize, usize)>,
    pub(crate) parts: Vec<f32>,
}

/// Scratch of a hybrid's layers (`qwen35.rs`), reused across layers and calls.
#[derive(Default)]
pub(crate) struct HybridScratch {
    /// Gated attention: the query projection (queries and gates interleaved per head) and
    /// the gates alone.
    pub(crate) qg: Vec<f32>,
    pub(crate) gate: Vec<f32>,
    /// Recurrent layer: the projected queries/keys/values before and after the convolution,
    /// the output gate `z`, the write strengths β and decay inputs α, and the heads' outputs.
    pub(crate) mixed: Vec<f32>,
    pub(crate) conv: Vec<f32>,
    pub(crate) z: Vec<f32>,
    pub(crate) beta: Vec<f32>,
    pub(crate) alpha: Vec<f32>,
    pub(crate) out: Vec<f32>,
    /// Fused projections' products before they are split (Qwen3-Next's `ssm_in`, `ssm_ba`).
    pub(crate) qkvz: Vec<f32>,
    pub(crate) ba: Vec<f32>,
    /// Per sequence of the batch, its tokens' indices in batch order.
    pub(crate) tokens_of: Vec<Vec<usize>>,
}

/// Scratch of the routed feed-forward (`moe.rs`), reused across layers and calls.
#[derive(Default)]
pub(crate) struct MoeScratch {
    /// `n × E` router logits, then probabilities.
    pub(crate) probs: Vec<f32>,
    /// One token's ranking scores where they differ from its probabilities (a selection bias,
    /// group-limited routing).
    pub(crate) select: Vec<f32>,
    /// Per token, its `k` experts and their weights.
    pub(crate) chosen: Vec<(u32, f32)>,
    /// `(token, weight)` of every routed pair, grouped by expert: expert `e`'s are
    /// `pairs[start[e]..start[e + 1]]`, tokens in batch order.
    pub(crate) pairs: Vec<(u32, f32)>,
    pub(crate) start: Vec<usize>,
    /// The gathered inputs of one expert's tokens, its gate/up activations and its output.
    pub(crate) x: Vec<f32>,
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    pub(crate) y: Vec<f32>,
    /// The layer's output, accumulated over experts.
    pub(crate) out: Vec<f32>,
}

/// One task of decode attention split by position chunks (see `LayerCtx::attention`).
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
