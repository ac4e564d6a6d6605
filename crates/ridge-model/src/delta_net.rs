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
use crate::weights::{f32_rows, matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{KvCache, ModelError, Workspace};

/// A Gated DeltaNet mixer's weights.
pub(crate) struct DeltaNet {
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

impl DeltaNet {
    pub(crate) fn bind(
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

    pub(crate) fn matrices_mut(&mut self) -> Vec<&mut MatRef> {
        vec![
            &mut self.wqkv,
            &mut self.wz,
            &mut self.w_beta,
            &mut self.w_alpha,
            &mut self.wout,
        ]
    }

    /// Bytes one token's step reads in the weights (the state's bytes are counted apart).
    pub(crate) fn bytes(&self, cx: &LayerCtx<'_>) -> usize {
        [self.wqkv, self.wz, self.w_beta, self.w_alpha, self.wout]
            .iter()
            .map(|m| cx.mat(m).data.len())
            .sum::<usize>()
            + 4 * (self.conv.len() + self.dt_bias.len() + self.a.len() + self.norm.len())
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
    let (cd, nv, nk, hd, kd) = (
        rc.conv_dim(),
        rc.n_v_heads,
        rc.n_k_heads,
        rc.head_dim,
        rc.key_dim(),
    );
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
        let kh = jh % nk;
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
