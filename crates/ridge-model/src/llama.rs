//! The llama architecture (Llama 2/3, Mistral-style, SmolLM2): pre-norm transformer with
//! RMSNorm, rotary position embeddings (adjacent-pair layout, as the GGUF converter permutes
//! Q/K for llama), grouped-query attention and a SwiGLU feed-forward; the output head is
//! `output.weight` or, when absent, the tied embedding table.
//!
//! Qwen2 (Qwen2, Qwen2.5 and their fine-tunes and distills) is this same layer with two
//! differences, both data rather than code: its Q/K/V projections carry biases (bound in
//! `layer.rs` and added by `LayerCtx::qkv`), and its RoPE pairs each element with the one half a
//! head away (`cfg.rope_neox`, the layout its converter leaves Q and K in).
//!
//! Qwen3 (dense) drops the biases and adds a per-head RMSNorm on queries and keys before RoPE
//! (`attn_q_norm`, `attn_k_norm`, bound in `layer.rs` as Gemma 3's are and applied by
//! `LayerCtx::qk_norm`); its head dimension may differ from `d_model / n_heads`.
//!
//! gpt-oss runs this stack too: biases on Q/K/V and the output projection, a learnt sink logit
//! per head in the attention softmax (`LayerCtx::attention`), a sliding window on every other
//! layer (`LayerCtx::window_of`), YaRN RoPE (`rope.rs`), and its routed feed-forward (`moe.rs`);
//! its pre-FFN norm is stored as `post_attention_norm`, bound as `ffn_norm`.
//!
//! SmolLM3, Mistral 3 and Phi-3 run this stack too, their differences data: SmolLM3's layers
//! without positions (`ModelConfig::rotates`), Mistral 3's YaRN and attention temperature
//! (`LayerCtx::attn_temperature`), Phi-3's fused projections (bound as row ranges of one
//! matrix in `layer.rs`) and LongRoPE divisors (folded into the RoPE tables as Llama 3's are).
//!
//! Llama 3.1's RoPE scaling is data too: `rope_freqs.weight` divides each pair's frequency,
//! folded into the RoPE tables once per batch (`Model::embed`).
//!
//! The layer stack reads top to bottom like the math; its steps are the shared ones of
//! `layer.rs` (which this file imports, and which imports nothing of it), and embeddings and
//! the output head are `model.rs`'s, which runs [`LlamaStack`] for these architectures.

use ridge_gguf::GgufFile;
use ridge_kernels::ops;

use crate::config::ModelConfig;
use crate::layer::{GateAct, Layer, LayerCtx};
use crate::stack::{skipped, SharedLayers, Stack};
use crate::weights::MatRef;
use crate::{Batch, KvCache, ModelError, Workspace};

/// The layers of llama and the architectures that share its layer (see the module doc).
pub(crate) struct LlamaStack(SharedLayers);

impl LlamaStack {
    /// Binds every layer.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        Ok(LlamaStack(SharedLayers::bind(f, cfg)?))
    }
}

impl Stack for LlamaStack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        layers(cx, &self.0 .0, batch, kv, ws, skip);
    }

    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        self.0.matrices_mut(cfg)
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        self.0.bytes_per_token(cx)
    }

    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.0.expert_bytes(cx)
    }
}

/// Runs every layer (but those `skip` marks) over the embedded batch in `ws.x`, leaving the
/// residual stream there.
fn layers(
    cx: &LayerCtx<'_>,
    stack: &[Layer],
    batch: &Batch,
    kv: &mut KvCache,
    ws: &mut Workspace,
    skip: Option<&[bool]>,
) {
    let (eps, n) = (cx.cfg.norm_eps, batch.len());
    for (li, l) in stack.iter().enumerate() {
        if skipped(skip, li) {
            continue;
        }
        // Attention block (windowed on gpt-oss's even layers).
        let (table, window) = cx.window_of(li);
        ops::rms_norm_rows(cx.isa, &ws.x, &l.attn_norm, eps, &mut ws.xn);
        cx.qkv(l, n, ws);
        cx.qk_norm(l, n, ws); // qwen3 only
        cx.rope_and_store(li, batch, kv, ws, table, cx.cfg.rope_neox);
        cx.attn_temperature(batch, ws); // mistral3 only
        cx.attention(li, l.sinks.as_deref(), batch, kv, ws, window); // with gpt-oss's sinks
        cx.attn_out(l, n, ws); // + gpt-oss's bias
        ops::add_inplace(&mut ws.x, &ws.xn);

        // Feed-forward block.
        ops::rms_norm_rows(cx.isa, &ws.x, &l.ffn_norm, eps, &mut ws.xn);
        cx.ffn(&l.ffn, n, ws, GateAct::Silu); // dense, or routed over experts
        ops::add_inplace(&mut ws.x, &ws.xn);
    }
}
