//! Qwen3.5 / Qwen3.6, a hybrid, dense (`qwen35`) and mixture (`qwen35moe`: the feed-forward
//! routed as qwen3moe's, with a sigmoid-gated shared expert, `moe.rs`), as llama.cpp runs it
//! (`src/models/qwen35.cpp`, `qwen35moe.cpp`, `delta-net-base.cpp`).
//!
//! Every layer is pre-norm with two residual blocks — `x += mixer(norm(x))`, then
//! `x += ffn(norm'(x))` with `norm'` the file's `post_attention_norm` — and the mixer is one
//! of two kinds (`RecurrentConfig::layers`; by default every fourth layer attends):
//!
//! - **Gated DeltaNet** (linear attention). `attn_qkv` projects the normed row to queries,
//!   keys and values side by side, which go through a causal depthwise convolution of
//!   `ssm.conv_kernel` taps (`ssm_conv1d`, continuing from the sequence's window) and SiLU;
//!   queries and keys are L2-normalized per head; each value head `h` (of `n_v_heads`)
//!   reads query/key head `h mod n_k_heads` and runs the gated delta rule over its state
//!   with decay `exp(softplus(α + dt_bias) · a)` (`ssm_alpha`, `ssm_dt.bias`, `ssm_a`) and
//!   write strength `sigmoid(β)` (`ssm_beta`); the heads' outputs are RMS-normed (`ssm_norm`,
//!   one head wide), multiplied by `silu(z)` (`attn_gate`) and projected back (`ssm_out`).
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
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::recurrent::{
    causal_conv1d, gated_delta_step, l2_normalize, sigmoid, softplus, DeltaGates,
};
use ridge_kernels::{matmul_many, ops};

use crate::config::ModelConfig;
use crate::hybrid::RecurrentConfig;
use crate::layer::{Ffn, GateAct, LayerCtx, RopeTable};
use crate::stack::{experts, ffn_bytes, ffn_expert_bytes, skipped, Stack};
use crate::weights::{f32_rows, matrix, vector, MatRef};
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

/// A Gated DeltaNet mixer's weights.
struct DeltaNet {
    /// `conv_dim × d`: queries, keys, values.
    wqkv: MatRef,
    /// `value_dim × d`: the output gate `z`.
    wz: MatRef,
    /// `n_v_heads × d` each.
    w_beta: MatRef,
    w_alpha: MatRef,
    /// `conv_dim` channels of `conv_kernel` taps.
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    /// `−exp(A_log)` per value head, as the converter stores it.
    a: Vec<f32>,
    /// One head wide.
    norm: Vec<f32>,
    /// `d × value_dim`.
    wout: MatRef,
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

impl DeltaNet {
    fn bind(
        f: &GgufFile,
        cfg: &ModelConfig,
        rc: &RecurrentConfig,
        i: usize,
    ) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        Ok(DeltaNet {
            wqkv: matrix(f, &n("attn_qkv"), rc.conv_dim(), d)?,
            wz: matrix(f, &n("attn_gate"), rc.value_dim(), d)?,
            w_beta: matrix(f, &n("ssm_beta"), rc.n_v_heads, d)?,
            w_alpha: matrix(f, &n("ssm_alpha"), rc.n_v_heads, d)?,
            conv: f32_rows(f, &n("ssm_conv1d"), rc.conv_kernel, rc.conv_dim())?,
            dt_bias: vector(f, &format!("blk.{i}.ssm_dt.bias"), rc.n_v_heads)?,
            a: vector(f, &format!("blk.{i}.ssm_a"), rc.n_v_heads)?,
            norm: vector(f, &n("ssm_norm"), rc.head_dim)?,
            wout: matrix(f, &n("ssm_out"), d, rc.value_dim())?,
        })
    }

    fn matrices_mut(&mut self) -> Vec<&mut MatRef> {
        vec![
            &mut self.wqkv,
            &mut self.wz,
            &mut self.w_beta,
            &mut self.w_alpha,
            &mut self.wout,
        ]
    }

    /// Bytes one token's step reads in the weights (the state's bytes are counted apart).
    fn bytes(&self, cx: &LayerCtx<'_>) -> usize {
        [self.wqkv, self.wz, self.w_beta, self.w_alpha, self.wout]
            .iter()
            .map(|m| cx.mat(m).data.len())
            .sum::<usize>()
            + 4 * (self.conv.len() + self.dt_bias.len() + self.a.len() + self.norm.len())
    }
}

impl Stack for Qwen35Stack {
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

/// Fills `ws.hybrid.tokens_of`: per sequence of `ws.seq_of`, its tokens in batch order
/// (which `Model::prepare` checked to be its positions in order).
fn group_tokens(batch: &Batch, ws: &mut Workspace) {
    let per = &mut ws.hybrid.tokens_of;
    per.resize_with(ws.seq_of.len(), Vec::new);
    for p in per.iter_mut() {
        p.clear();
    }
    for t in 0..batch.len() {
        per[ws.table_of[t]].push(t);
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

/// The Gated DeltaNet block of the `n` normed rows in `ws.xn` (recurrent layer `r`), output in
/// `ws.xn`; every sequence's state advances by its tokens.
fn delta_net(
    cx: &LayerCtx<'_>,
    r: usize,
    net: &DeltaNet,
    n: usize,
    kv: &mut KvCache,
    ws: &mut Workspace,
) {
    let Some(rc) = cx.cfg.recurrent.as_ref() else {
        return;
    };
    let (cd, vd, nv, nk, hd) = (
        rc.conv_dim(),
        rc.value_dim(),
        rc.n_v_heads,
        rc.n_k_heads,
        rc.head_dim,
    );
    let kd = rc.key_dim();
    let eps = cx.cfg.norm_eps;
    let h = &mut ws.hybrid;
    fit(&mut h.mixed, n * cd);
    fit(&mut h.conv, n * cd);
    fit(&mut h.z, n * vd);
    fit(&mut h.beta, n * nv);
    fit(&mut h.alpha, n * nv);
    fit(&mut h.out, n * vd);
    {
        let mut ys = [
            (cx.mat(&net.wqkv), &mut h.mixed[..]),
            (cx.mat(&net.wz), &mut h.z[..]),
            (cx.mat(&net.w_beta), &mut h.beta[..]),
            (cx.mat(&net.w_alpha), &mut h.alpha[..]),
        ];
        matmul_many(cx.isa, cx.act.qkv, &mut ys, &ws.xn, n, &mut ws.mm);
    }
    // Decay and write strength per (token, value head).
    for t in 0..n {
        for j in 0..nv {
            let i = t * nv + j;
            h.alpha[i] = (softplus(h.alpha[i] + net.dt_bias[j]) * net.a[j]).exp();
            h.beta[i] = sigmoid(h.beta[i]);
        }
    }
    let ids: Vec<crate::SeqId> = ws.seq_of.iter().map(|&(s, _)| s).collect();
    // `Model::prepare` checked every sequence of the batch against the cache, so each has a
    // state; should one not, the layer leaves the rows as they are rather than panic.
    let Some(mut states) = kv.recurrent_states(&ids) else {
        return;
    };
    let (conv_len, delta_len) = (rc.conv_state_len(), rc.delta_state_len());
    let layer_at = r * (conv_len + delta_len);
    // The convolution over each sequence's tokens in order (a run of consecutive rows in one
    // call: prefill's window shifts once, not once per token), then SiLU and the per-head L2
    // norms of queries and keys.
    for (si, toks) in h.tokens_of.iter().enumerate() {
        let st = &mut states[si][layer_at..layer_at + conv_len];
        let mut i = 0;
        while i < toks.len() {
            let first = toks[i];
            let mut len = 1;
            while i + len < toks.len() && toks[i + len] == first + len {
                len += 1;
            }
            let rows = first * cd..(first + len) * cd;
            causal_conv1d(
                &h.mixed[rows.clone()],
                len,
                cd,
                &net.conv,
                rc.conv_kernel,
                st,
                &mut h.conv[rows],
            );
            i += len;
        }
    }
    for row in h.conv[..n * cd].chunks_exact_mut(cd) {
        for v in row.iter_mut() {
            *v = *v * sigmoid(*v);
        }
        for head in row[..2 * kd].chunks_exact_mut(hd) {
            l2_normalize(head, eps);
        }
    }
    // The delta rule: one task per (sequence, value head), over its tokens in order.
    let bases: Vec<SharedMut<f32>> = states
        .iter_mut()
        .map(|s| SharedMut(s[layer_at + conv_len..].as_mut_ptr()))
        .collect();
    let out = SharedMut(h.out.as_mut_ptr());
    let (conv, alpha, beta, tokens_of) = (&h.conv, &h.alpha, &h.beta, &h.tokens_of);
    let scale = 1.0 / (hd as f32).sqrt();
    pool::parallel_for(bases.len() * nv, |task| {
        let (si, j) = (task / nv, task % nv);
        let kh = j % nk;
        // SAFETY: task (si, j) alone touches head j's `hd·hd` values of sequence si's state
        // (distinct sequences' states are distinct allocations, `recurrent_states` refused
        // repeats) and the outputs `out[t·vd + j·hd ..][..hd]` of that sequence's tokens
        // (each token belongs to one sequence); both buffers outlive `parallel_for`.
        let s =
            unsafe { std::slice::from_raw_parts_mut(bases[si].ptr().add(j * hd * hd), hd * hd) };
        for &t in &tokens_of[si] {
            let row = &conv[t * cd..(t + 1) * cd];
            let q = &row[kh * hd..(kh + 1) * hd];
            let k = &row[kd + kh * hd..kd + (kh + 1) * hd];
            let v = &row[2 * kd + j * hd..2 * kd + (j + 1) * hd];
            // SAFETY: as above.
            let o = unsafe { std::slice::from_raw_parts_mut(out.ptr().add(t * vd + j * hd), hd) };
            let i = t * nv + j;
            let gates = DeltaGates {
                decay: alpha[i],
                beta: beta[i],
                scale,
            };
            gated_delta_step(cx.isa, s, q, k, v, gates, o);
        }
    });
    // Gated RMS norm per head (rows of one head), then the output projection.
    ops::rms_norm_rows_inplace(cx.isa, &mut h.out[..n * vd], &net.norm, eps);
    for (ov, &zv) in h.out[..n * vd].iter_mut().zip(&h.z) {
        *ov *= zv * sigmoid(zv);
    }
    cx.mm(
        cx.act.o,
        &net.wout,
        &ws.hybrid.out,
        n,
        &mut ws.xn,
        &mut ws.mm,
    );
}
