//! Qwen3.5 / Qwen3.6, a hybrid, dense (`qwen35`) and mixture (`qwen35moe`: the feed-forward
//! routed as qwen3moe's, with a sigmoid-gated shared expert, `moe.rs`), as llama.cpp runs it
//! (`src/models/qwen35.cpp`, `qwen35moe.cpp`, `delta-net-base.cpp`).
//!
//! Every layer is pre-norm with two residual blocks — `x += mixer(norm(x))`, then
//! `x += ffn(norm'(x))` with `norm'` the file's `post_attention_norm` — and the mixer is one
//! of two kinds (`RecurrentConfig::layers`; by default every fourth layer attends):
//!
//! - **Gated DeltaNet** (linear attention): `delta_net.rs`, a convolution and the gated delta
//!   rule over a fixed state per sequence.
//! - **Gated attention**. `attn_q` yields, per head, the query and then an output gate of the
//!   same width; queries and keys get per-head RMS norms, RoPE on the first
//!   `rope.dimension_count` dimensions in the NEOX layout (for text, the interleaved M-RoPE
//!   sections reduce to that, with pairs of a text-less section left unrotated: `hybrid.rs`),
//!   grouped-query attention over the paged cache, and `sigmoid(gate)` on its output before
//!   `attn_output`.
//!
//! The recurrent state lives in the `KvCache` beside the attention layers' blocks, one array
//! per sequence; each (sequence, value head) is one independent loop over the sequence's
//! tokens in order, so a token's result is the same in any chunk of a prompt and among any
//! other sequences. The multi-token-prediction block some files carry (`nextn`) is not run.

use ridge_gguf::GgufFile;
use ridge_kernels::recurrent::sigmoid;
use ridge_kernels::{matmul_many, ops};

use crate::config::ModelConfig;
use crate::delta_net::{self, delta_net, DeltaNet};
use crate::layer::{Ffn, GateAct, LayerCtx, RopeTable};
use crate::recurrent_state::Journal;
use crate::stack::{experts, ffn_bytes, ffn_expert_bytes, group_tokens, skipped, Stack};
use crate::weights::{matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{Batch, KvCache, ModelError, Workspace};

/// Qwen3.5's layers.
pub(crate) struct Qwen35Stack {
    layers: Vec<HybridLayer>,
}

/// One layer: its norms, its mixer and its feed-forward.
struct HybridLayer {
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    mixer: Mixer,
    ffn: Ffn,
}

enum Mixer {
    Attention(GatedAttention),
    /// The index among the recurrent layers (its slice of a sequence's state) and weights.
    DeltaNet(usize, DeltaNet),
}

/// Attention with a sigmoid output gate.
struct GatedAttention {
    /// `2 · q_dim × d`: per head, its query rows then its gate rows.
    wq: MatRef,
    wk: MatRef,
    wv: MatRef,
    wo: MatRef,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
}

impl Qwen35Stack {
    /// Binds every layer, each as the configuration says it is (recurrent or attention).
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let Some(rc) = &cfg.recurrent else {
            return Err(ModelError::Unsupported {
                path: f.path().display().to_string(),
                message: format!("{} needs its ssm.* keys", cfg.arch.gguf_name()),
            });
        };
        let d = cfg.d_model;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        let mut r = 0;
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let mixer = if cfg.is_recurrent(i) {
                r += 1;
                Mixer::DeltaNet(r - 1, DeltaNet::bind(f, cfg, rc, i)?)
            } else {
                let (q, kv, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
                Mixer::Attention(GatedAttention {
                    wq: matrix(f, &n("attn_q"), 2 * q, d)?,
                    wk: matrix(f, &n("attn_k"), kv, d)?,
                    wv: matrix(f, &n("attn_v"), kv, d)?,
                    wo: matrix(f, &n("attn_output"), d, q)?,
                    q_norm: vector(f, &n("attn_q_norm"), hd)?,
                    k_norm: vector(f, &n("attn_k_norm"), hd)?,
                })
            };
            layers.push(HybridLayer {
                attn_norm: vector(f, &n("attn_norm"), d)?,
                ffn_norm: vector(f, &n("post_attention_norm"), d)?,
                mixer,
                ffn: Ffn::bind(f, cfg, i, |m| experts(f, cfg, i, m))?,
            });
        }
        Ok(Qwen35Stack { layers })
    }
}

impl Stack for Qwen35Stack {
    fn replay(&self, cx: &LayerCtx<'_>, j: &Journal, keep: usize, state: &mut [f32]) {
        for l in &self.layers {
            if let Mixer::DeltaNet(r, net) = &l.mixer {
                delta_net::replay(cx.isa, cx.cfg, *r, net, j, keep, state);
            }
        }
    }

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
        for (li, l) in self.layers.iter().enumerate() {
            // A recurrent layer cannot be skipped: its state must see every token.
            if skipped(skip, li) && matches!(l.mixer, Mixer::Attention(_)) {
                continue;
            }
            ops::rms_norm_rows(cx.isa, &ws.x, &l.attn_norm, eps, &mut ws.xn);
            match &l.mixer {
                Mixer::Attention(a) => gated_attention(cx, li, a, batch, kv, ws),
                Mixer::DeltaNet(r, net) => delta_net(cx, *r, net, n, kv, ws),
            }
            ops::add_inplace(&mut ws.x, &ws.xn);

            ops::rms_norm_rows(cx.isa, &ws.x, &l.ffn_norm, eps, &mut ws.xn);
            cx.ffn(&l.ffn, n, ws, GateAct::Silu);
            ops::add_inplace(&mut ws.x, &ws.xn);
        }
    }

    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let mut v = Vec::new();
        for l in self.layers.iter_mut() {
            match &mut l.mixer {
                Mixer::Attention(a) => v.extend([&mut a.wq, &mut a.wk, &mut a.wv, &mut a.wo]),
                Mixer::DeltaNet(_, net) => v.extend(net.matrices_mut()),
            }
            v.extend(l.ffn.matrices_mut(cfg));
        }
        v
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .map(|l| {
                let mixer = match &l.mixer {
                    Mixer::Attention(a) => {
                        [a.wq, a.wk, a.wv, a.wo]
                            .iter()
                            .map(|m| cx.mat(m).data.len())
                            .sum::<usize>()
                            + 4 * (a.q_norm.len() + a.k_norm.len())
                    }
                    Mixer::DeltaNet(_, net) => net.bytes(cx),
                };
                mixer + ffn_bytes(cx, &l.ffn) + 8 * cx.cfg.d_model
            })
            .sum()
    }

    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .map(|l| ffn_expert_bytes(cx, &l.ffn))
            .sum()
    }
}

/// The gated attention block of the `n` normed rows in `ws.xn`, output in `ws.xn`.
fn gated_attention(
    cx: &LayerCtx<'_>,
    li: usize,
    a: &GatedAttention,
    batch: &Batch,
    kv: &mut KvCache,
    ws: &mut Workspace,
) {
    let n = batch.len();
    let (qd, hd, eps) = (cx.cfg.q_dim(), cx.cfg.head_dim, cx.cfg.norm_eps);
    let h = &mut ws.hybrid;
    fit(&mut h.qg, n * 2 * qd);
    fit(&mut h.gate, n * qd);
    {
        let mut ys = [
            (cx.mat(&a.wq), &mut h.qg[..]),
            (cx.mat(&a.wk), &mut ws.k[..]),
            (cx.mat(&a.wv), &mut ws.v[..]),
        ];
        matmul_many(cx.isa, cx.act.qkv, &mut ys, &ws.xn, n, &mut ws.mm);
    }
    // Per head: the query's `hd` values, then the gate's.
    for (t, row) in h.qg.chunks_exact(2 * qd).take(n).enumerate() {
        for (hh, pair) in row.chunks_exact(2 * hd).enumerate() {
            let at = t * qd + hh * hd;
            ws.q[at..at + hd].copy_from_slice(&pair[..hd]);
            h.gate[at..at + hd].copy_from_slice(&pair[hd..]);
        }
    }
    let kvd = cx.cfg.kv_dim();
    ops::rms_norm_rows_inplace(cx.isa, &mut ws.q[..n * qd], &a.q_norm, eps);
    ops::rms_norm_rows_inplace(cx.isa, &mut ws.k[..n * kvd], &a.k_norm, eps);
    cx.rope_and_store(li, batch, kv, ws, RopeTable::Global, true);
    cx.attention(li, None, batch, kv, ws, None);
    for (o, &g) in ws.att[..n * qd].iter_mut().zip(&ws.hybrid.gate) {
        *o *= sigmoid(g);
    }
    cx.mm(cx.act.o, &a.wo, &ws.att, n, &mut ws.xn, &mut ws.mm);
}
