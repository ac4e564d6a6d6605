//! LFM2 (Liquid's 350M–2.6B hybrids), as llama.cpp runs it (`src/models/lfm2.cpp`).
//!
//! Every layer is pre-norm with two residual blocks — `x += mixer(attn_norm(x))`, then
//! `x += ffn(ffn_norm(x))` with a dense SwiGLU feed-forward — and the mixer is either a gated
//! short convolution (`short_conv.rs`: the layers with no K/V heads in
//! `attention.head_count_kv`) or grouped-query attention with per-head Q/K RMS norms and NEOX
//! RoPE over the whole head, run by the shared steps of `layer.rs`. The final norm is the
//! file's `token_embd_norm` (`Model` reads it by the architecture's name for it).

use ridge_gguf::GgufFile;
use ridge_kernels::ops;

use crate::config::ModelConfig;
use crate::layer::{Ffn, GateAct, Layer, LayerCtx, RopeTable};
use crate::recurrent_state::Journal;
use crate::short_conv::{self, short_conv, ShortConv};
use crate::stack::{
    experts, ffn_bytes, ffn_expert_bytes, group_tokens, layer_bytes, skipped, Stack,
};
use crate::weights::{vector, MatRef};
use crate::{Batch, KvCache, ModelError, Workspace};

/// LFM2's layers.
pub(crate) struct Lfm2Stack {
    layers: Vec<Lfm2Layer>,
}

// One value per layer, tens of them: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Lfm2Layer {
    /// An attention layer, the shared kind.
    Attention(Layer),
    /// A short-convolution layer: its index among the recurrent layers, its norms, mixer and
    /// feed-forward.
    Conv {
        r: usize,
        attn_norm: Vec<f32>,
        ffn_norm: Vec<f32>,
        mixer: ShortConv,
        ffn: Ffn,
    },
}

impl Lfm2Stack {
    /// Binds every layer as the configuration says it is.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let mut r = 0;
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let routed = |m: &_| experts(f, cfg, i, m);
                if !cfg.is_recurrent(i) {
                    return Ok(Lfm2Layer::Attention(Layer::bind(f, cfg, i, routed)?));
                }
                r += 1;
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                Ok(Lfm2Layer::Conv {
                    r: r - 1,
                    attn_norm: vector(f, &n("attn_norm"), d)?,
                    ffn_norm: vector(f, &n("ffn_norm"), d)?,
                    mixer: ShortConv::bind(f, cfg, i)?,
                    ffn: Ffn::bind(f, cfg, i, routed)?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Lfm2Stack { layers })
    }
}

impl Stack for Lfm2Stack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        let (eps, n) = (cx.cfg.norm_eps, batch.len());
        group_tokens(batch, ws);
        for (li, layer) in self.layers.iter().enumerate() {
            let (ffn_norm, ffn) = match layer {
                Lfm2Layer::Attention(l) => {
                    // A convolution layer cannot be skipped: its window must see every token.
                    if skipped(skip, li) {
                        continue;
                    }
                    ops::rms_norm_rows(cx.isa, &ws.x, &l.attn_norm, eps, &mut ws.xn);
                    cx.qkv(l, n, ws);
                    cx.qk_norm(l, n, ws);
                    cx.rope_and_store(li, batch, kv, ws, RopeTable::Global, true);
                    cx.attention(li, None, batch, kv, ws, None);
                    cx.attn_out(l, n, ws);
                    (&l.ffn_norm, &l.ffn)
                }
                Lfm2Layer::Conv {
                    r,
                    attn_norm,
                    ffn_norm,
                    mixer,
                    ffn,
                } => {
                    ops::rms_norm_rows(cx.isa, &ws.x, attn_norm, eps, &mut ws.xn);
                    short_conv(cx, *r, mixer, n, kv, ws);
                    (ffn_norm, ffn)
                }
            };
            ops::add_inplace(&mut ws.x, &ws.xn);
            ops::rms_norm_rows(cx.isa, &ws.x, ffn_norm, eps, &mut ws.xn);
            cx.ffn(ffn, n, ws, GateAct::Silu);
            ops::add_inplace(&mut ws.x, &ws.xn);
        }
    }

    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let mut v = Vec::new();
        for l in &mut self.layers {
            match l {
                Lfm2Layer::Attention(l) => v.extend(l.matrices_mut(cfg)),
                Lfm2Layer::Conv { mixer, ffn, .. } => {
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
                Lfm2Layer::Attention(l) => layer_bytes(cx, l),
                Lfm2Layer::Conv { mixer, ffn, .. } => {
                    mixer.bytes(cx) + ffn_bytes(cx, ffn) + 8 * cx.cfg.d_model
                }
            })
            .sum()
    }

    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                Lfm2Layer::Attention(l) => ffn_expert_bytes(cx, &l.ffn),
                Lfm2Layer::Conv { ffn, .. } => ffn_expert_bytes(cx, ffn),
            })
            .sum()
    }

    fn replay(&self, cx: &LayerCtx<'_>, j: &Journal, keep: usize, state: &mut [f32]) {
        for l in &self.layers {
            if let Lfm2Layer::Conv { r, mixer, .. } = l {
                short_conv::replay(cx.cfg, *r, mixer, j, keep, state);
            }
        }
    }
}
