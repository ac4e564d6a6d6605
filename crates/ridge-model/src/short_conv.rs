//! LFM2's gated short convolution: its weights, its forward step over a batch, and the replay
//! that takes draft rows back out of its window (as llama.cpp's `lfm2.cpp` builds it).
//!
//! `shortconv.in_proj` projects the normed row to three `d_model`-wide parts `b, c, x`; the
//! product `b ⊙ x` goes through a causal depthwise convolution of `shortconv.l_cache` taps
//! (`shortconv.conv`, continuing from the sequence's window of the last `l_cache − 1` products),
//! the result is gated by `c` and projected back by `shortconv.out_proj`. No activation, and no
//! state beyond the window — the cheapest recurrent layer there is: a decode step reads and
//! writes `(l_cache − 1) · d_model` floats per layer.
//!
//! A row's update of the window is its own product `b ⊙ x`, so that is what a journal records
//! (`recurrent_state.rs`); replaying `keep` rows puts their products back into the window.

use ridge_gguf::GgufFile;
use ridge_kernels::recurrent::causal_conv1d;

use crate::config::ModelConfig;
use crate::layer::LayerCtx;
use crate::recurrent_state::Journal;
use crate::stack::convolve_seq;
use crate::weights::{f32_rows, matrix, MatRef};
use crate::workspace::fit;
use crate::{KvCache, ModelError, Workspace};

/// A short-convolution mixer's weights.
pub(crate) struct ShortConv {
    /// `3·d × d`: the parts `b`, `c`, `x`.
    in_proj: MatRef,
    /// `d` channels of `l_cache` taps.
    conv: Vec<f32>,
    /// `d × d`.
    out_proj: MatRef,
}

impl ShortConv {
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig, i: usize) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let taps = cfg.recurrent.as_ref().map_or(0, |r| r.conv_kernel);
        let n = |s: &str| format!("blk.{i}.shortconv.{s}.weight");
        Ok(ShortConv {
            in_proj: matrix(f, &n("in_proj"), 3 * d, d)?,
            conv: f32_rows(f, &n("conv"), taps, d)?,
            out_proj: matrix(f, &n("out_proj"), d, d)?,
        })
    }

    pub(crate) fn matrices_mut(&mut self) -> Vec<&mut MatRef> {
        vec![&mut self.in_proj, &mut self.out_proj]
    }

    /// Bytes one token's step reads in the weights (the window's bytes are counted apart).
    pub(crate) fn bytes(&self, cx: &LayerCtx<'_>) -> usize {
        cx.mat(&self.in_proj).data.len() + cx.mat(&self.out_proj).data.len() + 4 * self.conv.len()
    }
}

/// The short convolution of the `n` normed rows in `ws.xn` (recurrent layer `r`), output in
/// `ws.xn`; every sequence's window advances by its tokens (`ws.hybrid.tokens_of`, filled by
/// `stack::group_tokens`).
pub(crate) fn short_conv(
    cx: &LayerCtx<'_>,
    r: usize,
    sc: &ShortConv,
    n: usize,
    kv: &mut KvCache,
    ws: &mut Workspace,
) {
    let Some(rc) = cx.cfg.recurrent.as_ref() else {
        return;
    };
    let d = cx.cfg.d_model;
    let h = &mut ws.hybrid;
    fit(&mut h.mixed, n * 3 * d);
    fit(&mut h.z, n * d);
    fit(&mut h.conv, n * d);
    cx.mm(cx.act.qkv, &sc.in_proj, &ws.xn, n, &mut h.mixed, &mut ws.mm);
    let h = &mut ws.hybrid;
    // b ⊙ x per row.
    for (bx, bcx) in h.z[..n * d]
        .chunks_exact_mut(d)
        .zip(h.mixed.chunks_exact(3 * d))
    {
        for ((o, &b), &x) in bx.iter_mut().zip(&bcx[..d]).zip(&bcx[2 * d..]) {
            *o = b * x;
        }
    }
    let ids: Vec<crate::SeqId> = ws.seq_of.iter().map(|&(s, _)| s).collect();
    for (si, &id) in ids.iter().enumerate() {
        if let Some(j) = kv.journal_mut(id) {
            for &t in &h.tokens_of[si] {
                j.records[r].extend_from_slice(&h.z[t * d..(t + 1) * d]);
            }
        }
    }
    // `Model::prepare` checked every sequence of the batch against the cache, so each has a
    // window; should one not, the layer leaves the rows as they are rather than panic.
    let Some(mut states) = kv.recurrent_states(&ids) else {
        return;
    };
    let win = rc.conv_state_len();
    for (si, toks) in h.tokens_of.iter().enumerate() {
        let st = &mut states[si][r * win..(r + 1) * win];
        convolve_seq(toks, &h.z, d, (&sc.conv, rc.conv_kernel), st, &mut h.conv);
    }
    // c ⊙ conv, then the output projection.
    for (y, bcx) in h.conv[..n * d]
        .chunks_exact_mut(d)
        .zip(h.mixed.chunks_exact(3 * d))
    {
        for (o, &c) in y.iter_mut().zip(&bcx[d..2 * d]) {
            *o *= c;
        }
    }
    cx.mm(
        cx.act.o,
        &sc.out_proj,
        &ws.hybrid.conv,
        n,
        &mut ws.xn,
        &mut ws.mm,
    );
}

/// Rebuilds recurrent layer `r`'s window in a sequence's `state` as it was after the first
/// `keep` rows its journal recorded: the journal's base window, then those rows' products.
pub(crate) fn replay(
    cfg: &ModelConfig,
    r: usize,
    sc: &ShortConv,
    j: &Journal,
    keep: usize,
    state: &mut [f32],
) {
    let Some(rc) = cfg.recurrent.as_ref() else {
        return;
    };
    let (d, win) = (cfg.d_model, rc.conv_state_len());
    let seg = r * win..(r + 1) * win;
    state[seg.clone()].copy_from_slice(&j.base[seg.clone()]);
    let Some(rec) = j.records.get(r) else {
        return;
    };
    let keep = keep.min(rec.len() / d.max(1));
    if keep == 0 {
        return;
    }
    // The convolution's outputs are dropped; only the window it leaves matters.
    let mut out = vec![0f32; keep * d];
    causal_conv1d(
        &rec[..keep * d],
        keep,
        d,
        &sc.conv,
        rc.conv_kernel,
        &mut state[seg],
        &mut out,
    );
}
