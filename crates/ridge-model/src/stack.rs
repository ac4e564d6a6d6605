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

use crate::config::{ModelConfig, MoeConfig};
use crate::layer::{Ffn, Layer, LayerCtx, QkNorm, QkvBias, RoutedFfn};
use crate::recurrent_state::Journal;
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

    /// Sets a sequence's recurrent `state` to what it was after the first `keep` rows its
    /// journal recorded (see `recurrent_state.rs`): how a hybrid takes rejected draft tokens
    /// back. Nothing to do for a stack without recurrent layers.
    fn replay(&self, _cx: &LayerCtx<'_>, _j: &Journal, _keep: usize, _state: &mut [f32]) {}
}

/// Binds layer `i`'s routed feed-forward `m` (the experts live in `moe.rs`): what `Layer::bind`
/// and `Ffn::bind` take for a mixture.
pub(crate) fn experts(
    f: &GgufFile,
    cfg: &ModelConfig,
    i: usize,
    m: &MoeConfig,
) -> Result<Box<dyn RoutedFfn>, ModelError> {
    Ok(Box::new(moe::Experts::bind(f, cfg, m, i)?))
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

/// Bytes of one expert of a feed-forward (0 when dense).
pub(crate) fn ffn_expert_bytes(cx: &LayerCtx<'_>, ffn: &Ffn) -> usize {
    match ffn {
        Ffn::Routed(e) => e.expert_bytes(cx),
        Ffn::Dense { .. } => 0,
    }
}

/// The shared layers (`layer.rs`) of an architecture whose every layer is one, bound in order,
/// with what a [`Stack`] reports of them (llama's and Gemma 3's stacks hold these).
pub(crate) struct SharedLayers(pub(crate) Vec<Layer>);

impl SharedLayers {
    /// Binds every layer of `cfg`.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let layers = (0..cfg.n_layers)
            .map(|i| Layer::bind(f, cfg, i, |m| experts(f, cfg, i, m)))
            .collect::<Result<_, _>>()?;
        Ok(SharedLayers(layers))
    }

    /// Every layer's matrices that may be tiled or re-encoded.
    pub(crate) fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        self.0
            .iter_mut()
            .flat_map(|l| l.matrices_mut(cfg))
            .collect()
    }

    /// Bytes one token's step reads: products, norms, biases and sinks of every layer.
    pub(crate) fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        self.0.iter().map(|l| layer_bytes(cx, l)).sum()
    }

    /// Bytes of one routed expert over every layer.
    pub(crate) fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.0.iter().map(|l| ffn_expert_bytes(cx, &l.ffn)).sum()
    }
}

/// Bytes one token's step reads in a shared layer: products, norms, biases and sinks.
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

/// Fills `ws.hybrid.tokens_of`: per sequence of `ws.seq_of`, its tokens in batch order
/// (which `Model::prepare` checked to be its positions in order) — how a hybrid's recurrent
/// layers walk each sequence's rows.
pub(crate) fn group_tokens(batch: &Batch, ws: &mut Workspace) {
    let per = &mut ws.hybrid.tokens_of;
    per.resize_with(ws.seq_of.len(), Vec::new);
    for p in per.iter_mut() {
        p.clear();
    }
    for t in 0..batch.len() {
        per[ws.table_of[t]].push(t);
    }
}

/// The causal convolution of one sequence's rows `toks` (batch indices, in order) of `x`
/// (`ch` channels each) into the same rows of `out`, continuing from its `window`: each run of
/// consecutive rows in one call, so prefill's window shifts once per run, not once per token.
pub(crate) fn convolve_seq(
    toks: &[usize],
    x: &[f32],
    ch: usize,
    (w, kernel): (&[f32], usize),
    window: &mut [f32],
    out: &mut [f32],
) {
    let mut i = 0;
    while i < toks.len() {
        let first = toks[i];
        let mut len = 1;
        while i + len < toks.len() && toks[i + len] == first + len {
            len += 1;
        }
        let rows = first * ch..(first + len) * ch;
        ridge_kernels::recurrent::causal_conv1d(
            &x[rows.clone()],
            len,
            ch,
            w,
            kernel,
            window,
            &mut out[rows],
        );
        i += len;
    }
}

/// Whether `skip` marks layer `li`.
#[inline]
pub(crate) fn skipped(skip: Option<&[bool]>, li: usize) -> bool {
    skip.is_some_and(|s| s.get(li).copied().unwrap_or(false))
}
