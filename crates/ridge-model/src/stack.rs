//! The open model layer: one file per architecture behind one trait, and the table that picks
//! the file for a configuration.
//!
//! An architecture's file binds the weights only it has and runs its layer loop over the
//! shared steps of `layer.rs`; [`Stack`] is all `model.rs` knows of it — run the layers, list
//! the matrices that may be tiled or re-encoded, count the bytes a step reads. `Model` keeps
//! one `Box<dyn Stack>` and no field that only one architecture uses, so adding an
//! architecture is its file plus one arm in the table (`arches.rs`). The table sits apart
//! from the trait so that imports run one way: `model.rs` → `arches.rs` → each
//! architecture's file → this module and `layer.rs`.
//!
//! Why a trait object rather than an enum: the layer loop runs once per layer per forward
//! pass (one virtual call per pass, not per token or per element), and the per-architecture
//! state (Gemma 3's sandwich norms, a hybrid's recurrent weights) stays private to its file.

use ridge_gguf::GgufFile;

use crate::config::ModelConfig;
use crate::layer::{Ffn, Layer, LayerCtx, QkNorm, QkvBias, RoutedFfn};
use crate::weights::MatRef;
use crate::{moe, Batch, KvCache, ModelError, Workspace};

/// An architecture's layers: its weights and its layer loop.
pub(crate) trait Stack: Send + Sync {
    /// Runs every layer (but those `skip` marks) over the embedded batch in `ws.x`, leaving
    /// the residual stream there.
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    );

    /// The matrices that may be packed into tiles or re-encoded.
    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef>;

    /// Bytes of weights one token's decode step reads in the layers (of a mixture, the
    /// router, any shared expert and `k` experts).
    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize;

    /// Bytes of one routed expert over every layer (0 for a dense model).
    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize;
}

/// Binds layer `i`'s shared weights, with the experts of a routed feed-forward bound by the
/// file that owns them (`moe.rs`).
pub(crate) fn bind_layer(f: &GgufFile, cfg: &ModelConfig, i: usize) -> Result<Layer, ModelError> {
    Layer::bind(f, cfg, i, |m| {
        let e: Box<dyn RoutedFfn> = Box::new(moe::Experts::bind(f, cfg, m, i)?);
        Ok(e)
    })
}

/// Bytes one token's step reads in a feed-forward.
pub(crate) fn ffn_bytes(cx: &LayerCtx<'_>, ffn: &Ffn) -> usize {
    match ffn {
        Ffn::Dense { gate, up, down } => {
            [gate, up, down].iter().map(|m| cx.mat(m).data.len()).sum()
        }
        Ffn::Routed(e) => e.bytes_per_token(cx),
    }
}

/// Bytes one token's step reads in a shared layer: its products, norms, biases and sinks.
pub(crate) fn layer_bytes(cx: &LayerCtx<'_>, l: &Layer) -> usize {
    ffn_bytes(cx, &l.ffn)
        + [l.wq, l.wk, l.wv, l.wo]
            .iter()
            .map(|m| cx.mat(m).data.len())
            .sum::<usize>()
        + 8 * cx.cfg.d_model
        + l.qkv_bias.as_ref().map_or(0, QkvBias::bytes)
        + l.qk_norm.as_ref().map_or(0, QkNorm::bytes)
        + 4 * l.o_bias.as_ref().map_or(0, Vec::len)
        + 4 * l.sinks.as_ref().map_or(0, Vec::len)
}

/// Bytes of one expert in a shared layer's routed feed-forward (0 when dense).
pub(crate) fn layer_expert_bytes(cx: &LayerCtx<'_>, l: &Layer) -> usize {
    match &l.ffn {
        Ffn::Routed(e) => e.expert_bytes(cx),
        Ffn::Dense { .. } => 0,
    }
}

/// Whether `skip` marks layer `li`.
#[inline]
pub(crate) fn skipped(skip: Option<&[bool]>, li: usize) -> bool {
    skip.is_some_and(|s| s.get(li).copied().unwrap_or(false))
}
