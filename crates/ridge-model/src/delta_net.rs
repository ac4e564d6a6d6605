//! The Gated DeltaNet mixer (Qwen3.5's and Qwen3-Next's linear attention): its weights, its
//! forward step over a batch, and the replay that takes draft rows back out of its state.
//!
//! `attn_qkv` projects the normed row to queries, keys and values side by side, which go
//! through a causal depthwise convolution of `ssm.conv_kernel` taps (`ssm_conv1d`, continuing
//! from the sequence's window) and SiLU; queries and keys are L2-normalized per head; each value
//! head `h` (of `n_v_heads`) reads query/key head `h mod n_k_heads` and runs the gated delta
//! rule over its state with decay `exp(softplus(α + dt_bias) · a)` (`ssm_alpha`, `ssm_dt.bias`,
//! `ssm_a`) and write strength `sigmoid(β)` (`ssm_beta`); the heads' outputs are RMS-normed
//! (`ssm_norm`, one head wide), multiplied by `silu(z)` (`attn_gate`) and projected back
//! (`ssm_out`).
//!
//! A row's update reads only the state before it and three inputs of its own — the
//! convolution's input row and the two gates — so those are what a sequence's journal records
//! (`recurrent_state.rs`), and [`replay`] runs the same kernels over them: the state after the
//! kept rows has the bits a pass over those rows alone gives.

use ridge_gguf::GgufFile;
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::recurrent::{
    causal_conv1d, gated_delta_step, l2_normalize, sigmoid, softplus, DeltaGates,
};
use ridge_kernels::{matmul_many, ops, Isa};

use crate::config::ModelConfig;
use crate::hybrid::RecurrentConfig;
use crate::layer::LayerCtx;
use crate::recurrent_state::Journal;
use crate::stack::convolve_seq;
use crate::weights::{f32_rows, matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{KvCache, ModelError, Workspace};

/// A Gated DeltaNet mixer's weights.
pub(crate) struct DeltaNet {
    /// Queries, keys, values and the output gate `z`.
    proj: InProj,
    /// The write strengths β and decay inputs α.
    gates: GateProj,
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

/// Where the input projection puts queries, keys, values and `z`.
enum InProj {
    /// `attn_qkv` (`conv_dim × d`: queries, keys, values side by side) and `attn_gate`
    /// (`value_dim × d`: `z`).
    Split { wqkv: MatRef, wz: MatRef },
    /// The first Qwen3-Next converter's `ssm_in`: per key head, its query, its key, then its
    /// value heads' values and their `z` (scattered into the split layout after the product).
    Fused(MatRef),
}

/// Where β and α come from.
enum GateProj {
    /// `ssm_beta` and `ssm_alpha`, `n_v_heads × d` each (Qwen3.5).
    Split { w_beta: MatRef, w_alpha: MatRef },
    /// `ssm_ba` (`2·n_v_heads × d`, Qwen3-Next): per key head, its value heads' β then their α.
    Fused(MatRef),
}

impl DeltaNet {
    pub(crate) fn bind(
        f: &GgufFile,
        cfg: &ModelConfig,
        rc: &RecurrentConfig,
        i: usize,
    ) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let proj = if f.has_tensor(&n("ssm_in")) {
            InProj::Fused(matrix(f, &n("ssm_in"), rc.conv_dim() + rc.value_dim(), d)?)
        } else {
            InProj::Split {
                wqkv: matrix(f, &n("attn_qkv"), rc.conv_dim(), d)?,
                wz: matrix(f, &n("attn_gate"), rc.value_dim(), d)?,
            }
        };
        let gates = if f.has_tensor(&n("ssm_ba")) {
            GateProj::Fused(matrix(f, &n("ssm_ba"), 2 * rc.n_v_heads, d)?)
        } else {
            GateProj::Split {
                w_beta: matrix(f, &n("ssm_beta"), rc.n_v_heads, d)?,
                w_alpha: matrix(f, &n("ssm_alpha"), rc.n_v_heads, d)?,
            }
        };
        Ok(DeltaNet {
            proj,
            gates,
            conv: f32_rows(f, &n("ssm_conv1d"), rc.conv_kernel, rc.conv_dim())?,
            dt_bias: vector(f, &format!("blk.{i}.ssm_dt.bias"), rc.n_v_heads)?,
            a: vector(f, &format!("blk.{i}.ssm_a"), rc.n_v_heads)?,
            norm: vector(f, &n("ssm_norm"), rc.head_dim)?,
            wout: matrix(f, &n("ssm_out"), d, rc.value_dim())?,
        })
    }

    pub(crate) fn matrices_mut(&mut self) -> Vec<&mut MatRef> {
        let mut v = Vec::with_capacity(5);
        match &mut self.proj {
            InProj::Split { wqkv, wz } => v.extend([wqkv, wz]),
            InProj::Fused(m) => v.push(m),
        }
        match &mut self.gates {
            GateProj::Split { w_beta, w_alpha } => v.extend([w_beta, w_alpha]),
            GateProj::Fused(m) => v.push(m),
        }
        v.push(&mut self.wout);
        v
    }

    /// Bytes one token's step reads in the weights (the state's bytes are counted apart).
    pub(crate) fn bytes(&self, cx: &LayerCtx<'_>) -> usize {
        let mut mats = vec![self.wout];
        match self.proj {
            InProj::Split { wqkv, wz } => mats.extend([wqkv, wz]),
            InProj::Fused(m) => mats.push(m),
        }
        match self.gates {
            GateProj::Split { w_beta, w_alpha } => mats.extend([w_beta, w_alpha]),
            GateProj::Fused(m) => mats.push(m),
        }
        mats.iter().map(|m| cx.mat(m).data.len()).sum::<usize>()
            + 4 * (self.conv.len() + self.dt_bias.len() + self.a.len() + self.norm.len())
    }
}

/// Splits `ssm_in`'s rows (per key head: query, key, its value heads' values, their `z`) into
/// the split layout: queries, keys, values side by side in `mixed`, `z` in `z`.
fn scatter_qkvz(qkvz: &[f32], n: usize, rc: &RecurrentConfig, mixed: &mut [f32], z: &mut [f32]) {
    let (hd, nk, kd, vd) = (rc.head_dim, rc.n_k_heads, rc.key_dim(), rc.value_dim());
    let (cd, per_v) = (rc.conv_dim(), vd / nk.max(1));
    let group = 2 * hd + 2 * per_v;
    for t in 0..n {
        let src = &qkvz[t * (cd + vd)..(t + 1) * (cd + vd)];
        let (m, zt) = (
            &mut mixed[t * cd..(t + 1) * cd],
            &mut z[t * vd..(t + 1) * vd],
        );
        for (g, part) in src.chunks_exact(group).enumerate() {
            m[g * hd..(g + 1) * hd].copy_from_slice(&part[..hd]);
            m[kd + g * hd..kd + (g + 1) * hd].copy_from_slice(&part[hd..2 * hd]);
            let v = 2 * kd + g * per_v;
            m[v..v + per_v].copy_from_slice(&part[2 * hd..2 * hd + per_v]);
            zt[g * per_v..(g + 1) * per_v].copy_from_slice(&part[2 * hd + per_v..]);
        }
    }
}

/// Splits `ssm_ba`'s rows (per key head: its value heads' β, then their α) into `beta` and
/// `alpha`, value heads in order.
fn scatter_ba(ba: &[f32], n: usize, rc: &RecurrentConfig, beta: &mut [f32], alpha: &mut [f32]) {
    let nv = rc.n_v_heads;
    let r = nv / rc.n_k_heads.max(1);
    for t in 0..n {
        let src = &ba[t * 2 * nv..(t + 1) * 2 * nv];
        for (g, part) in src.chunks_exact(2 * r).enumerate() {
            let at = t * nv + g * r;
            beta[at..at + r].copy_from_slice(&part[..r]);
            alpha[at..at + r].copy_from_slice(&part[r..]);
        }
    }
}

/// The Gated DeltaNet block of the `n` normed rows in `ws.xn` (recurrent layer `r`), output in
/// `ws.xn`; every sequence's state advances by its tokens.
pub(crate) fn delta_net(
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
    let (cd, vd, nv, hd) = (rc.conv_dim(), rc.value_dim(), rc.n_v_heads, rc.head_dim);
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
        let mut ys = Vec::with_capacity(4);
        match &net.proj {
            InProj::Split { wqkv, wz } => {
                ys.push((cx.mat(wqkv), &mut h.mixed[..]));
                ys.push((cx.mat(wz), &mut h.z[..]));
            }
            InProj::Fused(m) => {
                fit(&mut h.qkvz, n * (cd + vd));
                ys.push((cx.mat(m), &mut h.qkvz[..]));
            }
        }
        match &net.gates {
            GateProj::Split { w_beta, w_alpha } => {
                ys.push((cx.mat(w_beta), &mut h.beta[..]));
                ys.push((cx.mat(w_alpha), &mut h.alpha[..]));
            }
            GateProj::Fused(m) => {
                fit(&mut h.ba, n * 2 * nv);
                ys.push((cx.mat(m), &mut h.ba[..]));
            }
        }
        matmul_many(cx.isa, cx.act.qkv, &mut ys, &ws.xn, n, &mut ws.mm);
    }
    if let InProj::Fused(_) = net.proj {
        scatter_qkvz(&h.qkvz, n, rc, &mut h.mixed, &mut h.z);
    }
    if let GateProj::Fused(_) = net.gates {
        scatter_ba(&h.ba, n, rc, &mut h.beta, &mut h.alpha);
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
    // A sequence whose draft rows may be taken back records what its update reads.
    for (si, &id) in ids.iter().enumerate() {
        if let Some(j) = kv.journal_mut(id) {
            let rec = &mut j.records[r];
            for &t in &h.tokens_of[si] {
                rec.extend_from_slice(&h.mixed[t * cd..(t + 1) * cd]);
                rec.extend_from_slice(&h.alpha[t * nv..(t + 1) * nv]);
                rec.extend_from_slice(&h.beta[t * nv..(t + 1) * nv]);
            }
        }
    }
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
        let conv = (&net.conv[..], rc.conv_kernel);
        convolve_seq(toks, &h.mixed, cd, conv, st, &mut h.conv);
    }
    activate(&mut h.conv[..n * cd], cd, kd, hd, eps);
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
        let kh = rc.key_head(j);
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

/// SiLU on every channel of the convolved rows, then the per-head L2 norm of their queries and
/// keys (the first `2 · key_dim` channels).
fn activate(rows: &mut [f32], cd: usize, kd: usize, hd: usize, eps: f32) {
    for row in rows.chunks_exact_mut(cd) {
        for v in row.iter_mut() {
            *v = *v * sigmoid(*v);
        }
        for head in row[..2 * kd].chunks_exact_mut(hd) {
            l2_normalize(head, eps);
        }
    }
}

/// Rebuilds recurrent layer `r`'s part of a sequence's `state` as it was after the first
/// `keep` rows its journal recorded: the journal's base state, then those rows' convolution
/// and delta-rule updates through the kernels `delta_net` ran (their outputs are dropped).
pub(crate) fn replay(
    isa: Isa,
    cfg: &ModelConfig,
    r: usize,
    net: &DeltaNet,
    j: &Journal,
    keep: usize,
    state: &mut [f32],
) {
    let Some(rc) = cfg.recurrent.as_ref() else {
        return;
    };
    let (cd, nv, hd, kd) = (rc.conv_dim(), rc.n_v_heads, rc.head_dim, rc.key_dim());
    let (conv_len, delta_len) = (rc.conv_state_len(), rc.delta_state_len());
    let at = r * (conv_len + delta_len);
    let seg = at..at + conv_len + delta_len;
    state[seg.clone()].copy_from_slice(&j.base[seg]);
    let rec_len = cd + 2 * nv;
    let Some(rec) = j.records.get(r) else {
        return;
    };
    let keep = keep.min(rec.len() / rec_len);
    if keep == 0 {
        return;
    }
    let mut mixed = Vec::with_capacity(keep * cd);
    for row in rec.chunks_exact(rec_len).take(keep) {
        mixed.extend_from_slice(&row[..cd]);
    }
    let mut conv = vec![0f32; keep * cd];
    let (window, delta) = state[at..at + conv_len + delta_len].split_at_mut(conv_len);
    causal_conv1d(
        &mixed,
        keep,
        cd,
        &net.conv,
        rc.conv_kernel,
        window,
        &mut conv,
    );
    activate(&mut conv, cd, kd, hd, cfg.norm_eps);
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; hd];
    for (jh, s) in delta.chunks_exact_mut(hd * hd).enumerate().take(nv) {
        let kh = rc.key_head(jh);
        for (t, row) in rec.chunks_exact(rec_len).take(keep).enumerate() {
            let c = &conv[t * cd..(t + 1) * cd];
            let gates = DeltaGates {
                decay: row[cd + jh],
                beta: row[cd + nv + jh],
                scale,
            };
            let (q, k) = (
                &c[kh * hd..(kh + 1) * hd],
                &c[kd + kh * hd..kd + (kh + 1) * hd],
            );
            let v = &c[2 * kd + jh * hd..2 * kd + (jh + 1) * hd];
            gated_delta_step(isa, s, q, k, v, gates, &mut out);
        }
    }
}
