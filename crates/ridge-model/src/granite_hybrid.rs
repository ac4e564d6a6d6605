//! IBM Granite 4.0-H (`granitehybrid`), as llama.cpp runs it (`src/models/granite-hybrid.cpp`),
//! and dense Granite (`granite`, `granitemoe`: `src/models/granite.cpp`), whose layers are
//! Granite 4.0-H's attention layers, every one of them.
//!
//! Every layer is pre-norm with two residual blocks, each block's output scaled by
//! `residual_scale` before its add — `x += s · mixer(attn_norm(x))`, then
//! `x += s · ffn(ffn_norm(x))` — and the mixer is either Mamba2 (`mamba2.rs`: the layers with
//! no K/V heads in `attention.head_count_kv`) or grouped-query attention (optional biases, no
//! Q/K norms, scores scaled by `attention.scale`, positions only where the file asks for
//! RoPE), run by the shared steps of `layer.rs`. The feed-forward is dense or routed over
//! experts with an ungated shared expert (`moe.rs`). Embeddings and logits take Granite's
//! other two multipliers in `Model`.

use ridge_gguf::GgufFile;
use ridge_kernels::ops;

use crate::config::ModelConfig;
use crate::layer::{Ffn, GateAct, Layer, LayerCtx, RopeTable};
use crate::mamba2::{self, mamba2, Mamba2};
use crate::recurrent_state::Journal;
use crate::stack::{
    experts, ffn_bytes, ffn_expert_bytes, group_tokens, layer_bytes, skipped, Stack,
};
use crate::weights::{vector, MatRef};
use crate::{Batch, KvCache, ModelError, Workspace};

/// Granite 4.0-H's layers.
pub(crate) struct GraniteHybridStack {
    layers: Vec<GraniteLayer>,
}

// One value per layer, tens of them: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum GraniteLayer {
    /// An attention layer, the shared kind.
    Attention(Layer),
    /// A Mamba2 layer: its index among the recurrent layers, its norms, mixer and
    /// feed-forward.
    Mamba {
        r: usize,
        attn_norm: Vec<f32>,
        ffn_norm: Vec<f32>,
        mixer: Mamba2,
        ffn: Ffn,
    },
}

impl GraniteHybridStack {
    /// Binds every layer as the configuration says it is.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let mut r = 0;
        let layers = (0..cfg.n_layers)
            .map(|i| {
                refuse_ffn_biases(f, i)?;
                let routed = |m: &_| experts(f, cfg, i, m);
                // Dense Granite (`granite`, `granitemoe`) has no recurrent layer.
                let Some(rc) = cfg.recurrent.as_ref().filter(|_| cfg.is_recurrent(i)) else {
                    return Ok(GraniteLayer::Attention(Layer::bind(f, cfg, i, routed)?));
                };
                r += 1;
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                Ok(GraniteLayer::Mamba {
                    r: r - 1,
                    attn_norm: vector(f, &n("attn_norm"), d)?,
                    ffn_norm: vector(f, &n("ffn_norm"), d)?,
                    mixer: Mamba2::bind(f, cfg, rc, i)?,
                    ffn: Ffn::bind(f, cfg, i, routed)?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(GraniteHybridStack { layers })
    }
}

/// Granite's feed-forward may carry biases in llama.cpp's loader; no published Granite has
/// them, and running without them would be silently wrong, so a file with them is refused.
fn refuse_ffn_biases(f: &GgufFile, i: usize) -> Result<(), ModelError> {
    for t in ["ffn_gate", "ffn_up", "ffn_down"] {
        let name = format!("blk.{i}.{t}.bias");
        if f.has_tensor(&name) {
            return Err(ModelError::Unsupported {
                path: f.path().display().to_string(),
                message: format!("feed-forward biases (`{name}`) are not supported"),
            });
        }
    }
    Ok(())
}

/// `x += s · y` (`residual_scale`, applied as llama.cpp does: scale, then add).
fn residual(x: &mut [f32], y: &mut [f32], s: f32) {
    if s != 1.0 {
        ops::scale_inplace(y, s);
    }
    ops::add_inplace(x, y);
}

impl Stack for GraniteHybridStack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        let (eps, n, rs) = (cx.cfg.norm_eps, batch.len(), cx.cfg.residual_scale);
        group_tokens(batch, ws);
        for (li, layer) in self.layers.iter().enumerate() {
            let (ffn_norm, ffn) = match layer {
                GraniteLayer::Attention(l) => {
                    // A Mamba2 layer cannot be skipped: its state must see every token.
                    if skipped(skip, li) {
                        continue;
                    }
                    ops::rms_norm_rows(cx.isa, &ws.x, &l.attn_norm, eps, &mut ws.xn);
                    cx.qkv(l, n, ws);
                    cx.rope_and_store(li, batch, kv, ws, RopeTable::Global, cx.cfg.rope_neox);
                    cx.attention(li, None, batch, kv, ws, None);
                    cx.attn_out(l, n, ws);
                    (&l.ffn_norm, &l.ffn)
                }
                GraniteLayer::Mamba {
                    r,
                    attn_norm,
                    ffn_norm,
                    mixer,
                    ffn,
                } => {
                    ops::rms_norm_rows(cx.isa, &ws.x, attn_norm, eps, &mut ws.xn);
                    mamba2(cx, *r, mixer, n, kv, ws);
                    (ffn_norm, ffn)
                }
            };
            residual(&mut ws.x, &mut ws.xn, rs);
            ops::rms_norm_rows(cx.isa, &ws.x, ffn_norm, eps, &mut ws.xn);
            cx.ffn(ffn, n, ws, GateAct::Silu);
            residual(&mut ws.x, &mut ws.xn, rs);
        }
    }

    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let mut v = Vec::new();
        for l in &mut self.layers {
            match l {
                GraniteLayer::Attention(l) => v.extend(l.matrices_mut(cfg)),
                GraniteLayer::Mamba { mixer, ffn, .. } => {
                    v.extend(mixer.matrices_mut());
                    v.extend(ffn.matrices_mut(cfg));
                }
            }
        }
        v
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                GraniteLayer::Attention(l) => layer_bytes(cx, l),
                GraniteLayer::Mamba { mixer, ffn, .. } => {
                    mixer.bytes(cx) + ffn_bytes(cx, ffn) + 8 * cx.cfg.d_model
                }
            })
            .sum()
    }

    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                GraniteLayer::Attention(l) => ffn_expert_bytes(cx, &l.ffn),
                GraniteLayer::Mamba { ffn, .. } => ffn_expert_bytes(cx, ffn),
            })
            .sum()
    }

    fn replay(&self, cx: &LayerCtx<'_>, j: &Journal, keep: usize, state: &mut [f32]) {
        for l in &self.layers {
            if let GraniteLayer::Mamba { r, mixer, .. } = l {
                mamba2::replay(cx.isa, cx.cfg, *r, mixer, j, keep, state);
            }
        }
    }
}
