//! The Mamba2 mixer (Granite 4.0-H's and Nemotron-H's recurrent layers): its weights, its
//! forward step over a batch, and the replay that takes draft rows back out of its state, as
//! llama.cpp's `mamba-base.cpp` builds it.
//!
//! `ssm_in` projects the normed row to `z` (`inner` wide), `xBC` (`inner + 2·groups·d_state`:
//! the values `x`, then the groups' `B`, then their `C`) and one `dt` per head. `xBC` goes
//! through a causal depthwise convolution (`ssm_conv1d`, plus its bias where the file has one)
//! and SiLU; each head `h` (of `head_dim` rows, group `h / (heads / groups)`) then runs the
//! selective scan over its `head_dim × d_state` state with step `Δ = softplus(dt + dt_bias)`
//! and decay `e^{Δ·A}` (`ssm_a` holds `A = −exp(A_log)`). The output `y + D·x` is gated by
//! `silu(z)`, RMS-normed per group (`ssm_norm`) and projected back (`ssm_out`).
//!
//! A row's update reads only the state before it, its `xBC` row and its `dt`, so those are what
//! a journal records (`recurrent_state.rs`); [`replay`] runs the same kernels over them.

use ridge_gguf::GgufFile;
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::recurrent::{causal_conv1d, sigmoid, softplus, ssm_scan_step, ScanGates};
use ridge_kernels::{ops, Isa};

use crate::config::ModelConfig;
use crate::hybrid::RecurrentConfig;
use crate::layer::LayerCtx;
use crate::recurrent_state::Journal;
use crate::stack::convolve_seq;
use crate::weights::{f32_rows, matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{KvCache, ModelError, Workspace};

/// A Mamba2 mixer's weights.
pub(crate) struct Mamba2 {
    /// `(2·inner + 2·groups·d_state + heads) × d`: `z`, `xBC`, `dt`.
    ssm_in: MatRef,
    /// `conv_dim` channels of `conv_kernel` taps, and their bias (zeros where the file has
    /// none).
    conv: Vec<f32>,
    conv_bias: Vec<f32>,
    dt_bias: Vec<f32>,
    /// `A = −exp(A_log)` per head, as the converter stores it.
    a: Vec<f32>,
    /// The skip `D` per head.
    d: Vec<f32>,
    /// `inner` wide: one `inner / groups` weight per group.
    norm: Vec<f32>,
    /// `d × inner`.
    ssm_out: MatRef,
}

impl Mamba2 {
    pub(crate) fn bind(
        f: &GgufFile,
        cfg: &ModelConfig,
        rc: &RecurrentConfig,
        i: usize,
    ) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let (inner, nh, ng, cd) = (rc.value_dim(), rc.n_v_heads, rc.n_k_heads, rc.conv_dim());
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let bias = format!("blk.{i}.ssm_conv1d.bias");
        Ok(Mamba2 {
            ssm_in: matrix(f, &n("ssm_in"), 2 * inner + 2 * ng * rc.d_state + nh, d)?,
            conv: f32_rows(f, &n("ssm_conv1d"), rc.conv_kernel, cd)?,
            conv_bias: if f.has_tensor(&bias) {
                vector(f, &bias, cd)?
            } else {
                vec![0.0; cd]
            },
            dt_bias: vector(f, &format!("blk.{i}.ssm_dt.bias"), nh)?,
            a: f32_rows(f, &format!("blk.{i}.ssm_a"), 1, nh)?,
            d: f32_rows(f, &format!("blk.{i}.ssm_d"), 1, nh)?,
            norm: f32_rows(f, &n("ssm_norm"), inner / ng, ng)?,
            ssm_out: matrix(f, &n("ssm_out"), d, inner)?,
        })
    }

    pub(crate) fn matrices_mut(&mut self) -> Vec<&mut MatRef> {
        vec![&mut self.ssm_in, &mut self.ssm_out]
    }

    /// Bytes one token's step reads in the weights (the state's bytes are counted apart).
    pub(crate) fn bytes(&self, cx: &LayerCtx<'_>) -> usize {
        cx.mat(&self.ssm_in).data.len()
            + cx.mat(&self.ssm_out).data.len()
            + 4 * (self.conv.len()
                + self.conv_bias.len()
                + self.dt_bias.len()
                + self.a.len()
                + self.d.len()
                + self.norm.len())
    }
}

/// Adds the convolution's bias and applies SiLU to convolved `xBC` rows.
fn bias_silu(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            let x = *v + b;
            *v = x * sigmoid(x);
        }
    }
}

/// The Mamba2 block of the `n` normed rows in `ws.xn` (recurrent layer `r`), output in `ws.xn`;
/// every sequence's state advances by its tokens (`ws.hybrid.tokens_of`).
pub(crate) fn mamba2(
    cx: &LayerCtx<'_>,
    r: usize,
    m: &Mamba2,
    n: usize,
    kv: &mut KvCache,
    ws: &mut Workspace,
) {
    let Some(rc) = cx.cfg.recurrent.as_ref() else {
        return;
    };
    let (inner, nh, hd, cd) = (rc.value_dim(), rc.n_v_heads, rc.head_dim, rc.conv_dim());
    let width = inner + cd + nh;
    let h = &mut ws.hybrid;
    fit(&mut h.qkvz, n * width);
    fit(&mut h.mixed, n * cd);
    fit(&mut h.conv, n * cd);
    fit(&mut h.out, n * inner);
    cx.mm(cx.act.qkv, &m.ssm_in, &ws.xn, n, &mut h.qkvz, &mut ws.mm);
    let h = &mut ws.hybrid;
    // xBC rows side by side, for the convolution.
    for (x, row) in h.mixed[..n * cd]
        .chunks_exact_mut(cd)
        .zip(h.qkvz.chunks_exact(width))
    {
        x.copy_from_slice(&row[inner..inner + cd]);
    }
    let ids: Vec<crate::SeqId> = ws.seq_of.iter().map(|&(s, _)| s).collect();
    for (si, &id) in ids.iter().enumerate() {
        if let Some(j) = kv.journal_mut(id) {
            for &t in &h.tokens_of[si] {
                j.records[r].extend_from_slice(&h.qkvz[t * width + inner..(t + 1) * width]);
            }
        }
    }
    // `Model::prepare` checked every sequence of the batch against the cache, so each has a
    // state; should one not, the layer leaves the rows as they are rather than panic.
    let Some(mut states) = kv.recurrent_states(&ids) else {
        return;
    };
    let (conv_len, ssm_len) = (rc.conv_state_len(), rc.delta_state_len());
    let at = r * (conv_len + ssm_len);
    for (si, toks) in h.tokens_of.iter().enumerate() {
        let st = &mut states[si][at..at + conv_len];
        convolve_seq(
            toks,
            &h.mixed,
            cd,
            (&m.conv, rc.conv_kernel),
            st,
            &mut h.conv,
        );
    }
    bias_silu(&mut h.conv[..n * cd], &m.conv_bias);
    // The scan: one task per (sequence, head), over its tokens in order.
    let bases: Vec<SharedMut<f32>> = states
        .iter_mut()
        .map(|s| SharedMut(s[at + conv_len..].as_mut_ptr()))
        .collect();
    let out = SharedMut(h.out.as_mut_ptr());
    let (conv, zxbcdt, tokens_of) = (&h.conv, &h.qkvz, &h.tokens_of);
    let ds = rc.d_state;
    pool::parallel_for(bases.len() * nh, |task| {
        let (si, head) = (task / nh, task % nh);
        // SAFETY: task (si, head) alone touches head `head`'s `hd·ds` values of sequence si's
        // state (distinct sequences' states are distinct allocations, `recurrent_states`
        // refused repeats) and the outputs `out[t·inner + head·hd ..][..hd]` of that
        // sequence's tokens (each token belongs to one sequence); both outlive `parallel_for`.
        let s =
            unsafe { std::slice::from_raw_parts_mut(bases[si].ptr().add(head * hd * ds), hd * ds) };
        for &t in &tokens_of[si] {
            // SAFETY: as above.
            let y =
                unsafe { std::slice::from_raw_parts_mut(out.ptr().add(t * inner + head * hd), hd) };
            let dt = zxbcdt[t * width + inner + cd + head];
            scan_row(cx.isa, rc, m, head, &conv[t * cd..(t + 1) * cd], dt, s, y);
        }
    });
    // y ⊙ silu(z), the grouped RMS norm, the output projection.
    let group = inner / rc.n_k_heads.max(1);
    for (y, row) in h.out[..n * inner]
        .chunks_exact_mut(inner)
        .zip(h.qkvz.chunks_exact(width))
    {
        for (v, &z) in y.iter_mut().zip(&row[..inner]) {
            *v *= z * sigmoid(z);
        }
        for (chunk, w) in y.chunks_exact_mut(group).zip(m.norm.chunks_exact(group)) {
            ops::rms_norm_rows_inplace(cx.isa, chunk, w, cx.cfg.norm_eps);
        }
    }
    cx.mm(
        cx.act.o,
        &m.ssm_out,
        &ws.hybrid.out,
        n,
        &mut ws.xn,
        &mut ws.mm,
    );
}

/// One token of head `head`'s scan: `xbc` is the token's convolved row, `dt` its raw step;
/// writes `y = S·C + D·x` (the head's `head_dim` outputs).
#[allow(clippy::too_many_arguments)]
fn scan_row(
    isa: Isa,
    rc: &RecurrentConfig,
    m: &Mamba2,
    head: usize,
    xbc: &[f32],
    dt: f32,
    s: &mut [f32],
    y: &mut [f32],
) {
    let (inner, hd, ds) = (rc.value_dim(), rc.head_dim, rc.d_state);
    let g = rc.key_head(head);
    let ng = rc.n_k_heads;
    let x = &xbc[head * hd..(head + 1) * hd];
    let b = &xbc[inner + g * ds..inner + (g + 1) * ds];
    let c = &xbc[inner + (ng + g) * ds..inner + (ng + g + 1) * ds];
    let step = softplus(dt + m.dt_bias[head]);
    let decay = (step * m.a[head]).exp();
    ssm_scan_step(isa, s, x, b, c, ScanGates { dt: step, decay }, y);
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv += xv * m.d[head];
    }
}

/// Rebuilds recurrent layer `r`'s part of a sequence's `state` as it was after the first
/// `keep` rows its journal recorded: the journal's base, then those rows' convolution and scan
/// (their outputs dropped).
pub(crate) fn replay(
    isa: Isa,
    cfg: &ModelConfig,
    r: usize,
    m: &Mamba2,
    j: &Journal,
    keep: usize,
    state: &mut [f32],
) {
    let Some(rc) = cfg.recurrent.as_ref() else {
        return;
    };
    let (nh, hd, cd, ds) = (rc.n_v_heads, rc.head_dim, rc.conv_dim(), rc.d_state);
    let (conv_len, ssm_len) = (rc.conv_state_len(), rc.delta_state_len());
    let at = r * (conv_len + ssm_len);
    let seg = at..at + conv_len + ssm_len;
    state[seg.clone()].copy_from_slice(&j.base[seg]);
    let rec_len = cd + nh;
    let Some(rec) = j.records.get(r) else {
        return;
    };
    let keep = keep.min(rec.len() / rec_len);
    if keep == 0 {
        return;
    }
    let mut xbc = Vec::with_capacity(keep * cd);
    for row in rec.chunks_exact(rec_len).take(keep) {
        xbc.extend_from_slice(&row[..cd]);
    }
    let mut conv = vec![0f32; keep * cd];
    let (window, ssm) = state[at..at + conv_len + ssm_len].split_at_mut(conv_len);
    causal_conv1d(&xbc, keep, cd, &m.conv, rc.conv_kernel, window, &mut conv);
    bias_silu(&mut conv, &m.conv_bias);
    let mut y = vec![0f32; hd];
    for (head, s) in ssm.chunks_exact_mut(hd * ds).enumerate().take(nh) {
        for (t, row) in rec.chunks_exact(rec_len).take(keep).enumerate() {
            scan_row(
                isa,
                rc,
                m,
                head,
                &conv[t * cd..(t + 1) * cd],
                row[cd + head],
                s,
                &mut y,
            );
        }
    }
}
