//! The Gemma 3 architecture (text), as llama.cpp runs it.
//!
//! Differences from llama, each visible in [`layers`]:
//! - embeddings are scaled by `√d_model` (done in `model.rs`'s embedding from
//!   `cfg.embd_scale`);
//! - queries and keys get a per-head RMSNorm (`attn_q_norm`, `attn_k_norm`, one head wide)
//!   before RoPE, which is applied in the NEOX (halves) layout;
//! - "sandwich" norms: the attention output and the FFN output are each RMSNorm'ed
//!   (`post_attention_norm`, `post_ffw_norm`) before they join the residual stream;
//! - the FFN is GeGLU with the tanh approximation of GELU;
//! - five layers of every six attend through a sliding window of `attention.sliding_window`
//!   positions and use RoPE base 10 000; the sixth is global with `rope.freq_base`;
//! - the head dimension comes from `attention.key_length` (256, not `d_model / n_heads`) and
//!   the score scale is `1/√head_dim`; the output head is tied to the embedding table.
//!
//! Gemma computes its norms as `x̂ · (1 + w)`; llama.cpp's converter stores `1 + w` in the GGUF,
//! so the weights are used as they are (the float64 reference confirms it: adding another 1
//! makes the model produce noise).
//!
//! The layer steps are the shared ones of `layer.rs`; what Gemma 3 has beyond them, its
//! post-attention and post-FFN norms, is bound and kept here ([`LayerNorms`]) beside the
//! shared layers, in [`Gemma3Stack`].
//!
//! KV cache: the sliding layers have block tables of their own (see `kv_cache.rs`), whose
//! blocks go back to the pool once no future token can see them, so past the window a Gemma 3
//! sequence grows only by its global layers' K/V (3 of 18 layers on the 270M model).

use ridge_gguf::GgufFile;
use ridge_kernels::ops;

use crate::config::ModelConfig;
use crate::layer::{GateAct, Layer, LayerCtx};
use crate::stack::{skipped, SharedLayers, Stack};
use crate::weights::{vector, MatRef};
use crate::{Batch, KvCache, ModelError, Workspace};

/// Gemma 3's layers: the shared weights and, per layer, its extra norms.
pub(crate) struct Gemma3Stack {
    layers: SharedLayers,
    norms: Vec<LayerNorms>,
}

impl Gemma3Stack {
    /// Binds every layer and its extra norms.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let layers = SharedLayers::bind(f, cfg)?;
        let norms = (0..cfg.n_layers)
            .map(|i| LayerNorms::bind(f, cfg, i))
            .collect::<Result<_, _>>()?;
        Ok(Gemma3Stack { layers, norms })
    }
}

impl Stack for Gemma3Stack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        layers(cx, &self.layers.0, &self.norms, batch, kv, ws, skip);
    }

    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        self.layers.matrices_mut(cfg)
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        let norms: usize = self.norms.iter().map(LayerNorms::bytes).sum();
        norms + self.layers.bytes_per_token(cx)
    }

    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers.expert_bytes(cx)
    }
}

/// The norms a Gemma 3 layer has beyond llama's `attn_norm` and `ffn_norm` (its per-head Q/K
/// norms are bound with the layer, as qwen3 has them too).
struct LayerNorms {
    post_attn: Vec<f32>,
    post_ffn: Vec<f32>,
}

impl LayerNorms {
    /// Binds layer `i`'s extra norms (type and length checked).
    fn bind(f: &GgufFile, cfg: &ModelConfig, i: usize) -> Result<Self, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        Ok(LayerNorms {
            post_attn: vector(f, &n("post_attention_norm"), cfg.d_model)?,
            post_ffn: vector(f, &n("post_ffw_norm"), cfg.d_model)?,
        })
    }

    /// Bytes read per decode step (f32 weights).
    fn bytes(&self) -> usize {
        4 * (self.post_attn.len() + self.post_ffn.len())
    }
}

/// Runs every layer (but those `skip` marks) over the embedded batch in `ws.x`, leaving the
/// residual stream there; `norms[i]` are layer `i`'s extra norms.
fn layers(
    cx: &LayerCtx<'_>,
    stack: &[Layer],
    norms: &[LayerNorms],
    batch: &Batch,
    kv: &mut KvCache,
    ws: &mut Workspace,
    skip: Option<&[bool]>,
) {
    let (cfg, n) = (cx.cfg, batch.len());
    let eps = cfg.norm_eps;
    for (li, (l, g)) in stack.iter().zip(norms).enumerate() {
        if skipped(skip, li) {
            continue;
        }
        let (table, window) = cx.window_of(li);

        // Attention block.
        ops::rms_norm_rows(cx.isa, &ws.x, &l.attn_norm, eps, &mut ws.xn);
        cx.qkv(l, n, ws);
        cx.qk_norm(l, n, ws);
        cx.rope_and_store(li, batch, kv, ws, table, true);
        cx.attention(li, None, batch, kv, ws, window);
        cx.attn_out(l, n, ws);
        ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn, &g.post_attn, eps);
        ops::add_inplace(&mut ws.x, &ws.xn);

        // Feed-forward block.
        ops::rms_norm_rows(cx.isa, &ws.x, &l.ffn_norm, eps, &mut ws.xn);
        cx.ffn(&l.ffn, n, ws, GateAct::GeluTanh);
        ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn, &g.post_ffn, eps);
        ops::add_inplace(&mut ws.x, &ws.xn);
    }
}
