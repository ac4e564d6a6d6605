//! Multi-head latent attention (`deepseek2`: DeepSeek-V2/V3/R1, Kimi K2, GLM-4.7-Flash), as
//! llama.cpp runs it (`src/models/deepseek2.cpp`, its absorbed "MLA" path).
//!
//! A layer's keys and values come from one compressed latent per token: `kv_a` maps the normed
//! input to `c` (`kv_lora` wide, RMS-normed by `kv_a_norm`) and a rotated key part `k_pe`
//! (`rope_dim` wide, one for every head). The cache holds `[c, k_pe]` — one row of
//! `kv_lora + rope_dim` per token and layer, no values — so what a token costs in memory, and
//! what decode reads per position, is the latent's size, not `2 · n_heads · head_dim`.
//!
//! Attention runs in the latent space. A query head `q = [q_nope, q_pe]` (from `attn_q`, or
//! the low-rank `attn_q_a` → `attn_q_a_norm` → `attn_q_b`) scores a position by
//! `q_nope · (W_kb c) + q_pe · k_pe`; the key up-projection `W_kb` (`attn_k_b`, per head
//! `kv_lora × nope`) is absorbed into the query once per token — `q_abs = W_kbᵀ q_nope` — so
//! the score is `[q_abs, q_pe] · [c, k_pe]` against the cached row as it is. The head's output
//! is the attention-weighted sum of the `c`s, mapped up by `W_vb` (`attn_v_b`, per head
//! `v_head × kv_lora`), and the heads go through `attn_output`. The score scale is llama.cpp's
//! (`ModelConfig::attn_scale`: YaRN's `mscale²` over `√key_length_mla`).
//!
//! Why a kernel of its own ([`latent_attention`]): every head reads the same latent row (it
//! is grouped-query attention with one K/V head of 576 values where DeepSeek-V3 has 128 query
//! heads), and the value is a prefix of the key row; the shared kernels assume at most 16
//! heads per K/V head and separate value rows. Each (token, block of heads) is one task that
//! walks its positions in order, so a token's result does not depend on the batch or the
//! thread that computed it.
//!
//! The feed-forward is the shared one: leading dense layers, then experts (`moe.rs`: softmax
//! or sigmoid gating, the selection bias, group-limited top-k) with ungated shared experts.

use ridge_gguf::GgufFile;
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::{matmul, matmul_each, ops, WeightMatrix};

use crate::config::{MlaConfig, ModelConfig};
use crate::layer::{Ffn, GateAct, LayerCtx};
use crate::stack::{experts, ffn_bytes, ffn_expert_bytes, skipped, Stack};
use crate::weights::{experts as stacked, matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{Batch, KvCache, ModelError, Workspace};

/// The query projection: one matrix, or a low-rank pair with a norm between.
enum QProj {
    Direct(MatRef),
    LowRank {
        a: MatRef,
        norm: Vec<f32>,
        b: MatRef,
    },
}

/// One latent-attention layer's weights.
struct MlaLayer {
    attn_norm: Vec<f32>,
    q: QProj,
    /// `(kv_lora + rope) × d`: the latent and the rotated key part.
    kv_a: MatRef,
    kv_a_norm: Vec<f32>,
    /// Per head `kv_lora × nope` (stacked `n_heads` deep).
    k_b: MatRef,
    /// Per head `v_head × kv_lora` (stacked).
    v_b: MatRef,
    wo: MatRef,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
}

/// The layers of a latent-attention model.
pub(crate) struct Deepseek2Stack {
    layers: Vec<MlaLayer>,
    mla: MlaConfig,
}

impl Deepseek2Stack {
    /// Binds every layer (shapes checked against the metadata).
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let Some(mla) = cfg.mla else {
            return Err(ModelError::Unsupported {
                path: f.path().display().to_string(),
                message: "deepseek2 needs its latent-attention keys".into(),
            });
        };
        let (d, h, rope) = (cfg.d_model, cfg.n_heads, cfg.rope_dim);
        let nope = mla.nope(rope);
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                if f.has_tensor(&n("attn_kv_b")) && !f.has_tensor(&n("attn_k_b")) {
                    return Err(ModelError::Unsupported {
                        path: f.path().display().to_string(),
                        message: format!(
                            "`{}` is the unsplit layout of older files; convert the model again (llama.cpp splits it into attn_k_b / attn_v_b)",
                            n("attn_kv_b")
                        ),
                    });
                }
                let q = match mla.q_lora {
                    Some(r) => QProj::LowRank {
                        a: matrix(f, &n("attn_q_a"), r, d)?,
                        norm: vector(f, &n("attn_q_a_norm"), r)?,
                        b: matrix(f, &n("attn_q_b"), h * mla.k_head, r)?,
                    },
                    None => QProj::Direct(matrix(f, &n("attn_q"), h * mla.k_head, d)?),
                };
                Ok(MlaLayer {
                    attn_norm: vector(f, &n("attn_norm"), d)?,
                    q,
                    kv_a: matrix(f, &n("attn_kv_a_mqa"), mla.kv_lora + rope, d)?,
                    kv_a_norm: vector(f, &n("attn_kv_a_norm"), mla.kv_lora)?,
                    k_b: stacked(f, &n("attn_k_b"), h, mla.kv_lora, nope)?,
                    v_b: stacked(f, &n("attn_v_b"), h, mla.v_head, mla.kv_lora)?,
                    wo: matrix(f, &n("attn_output"), d, h * mla.v_head)?,
                    ffn_norm: vector(f, &n("ffn_norm"), d)?,
                    ffn: Ffn::bind(f, cfg, i, |m| experts(f, cfg, i, m))?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Deepseek2Stack { layers, mla })
    }
}

impl Stack for Deepseek2Stack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        let (eps, n) = (cx.cfg.norm_eps, batch.len());
        for (li, l) in self.layers.iter().enumerate() {
            if skipped(skip, li) {
                continue;
            }
            ops::rms_norm_rows(cx.isa, &ws.x, &l.attn_norm, eps, &mut ws.xn);
            self.attention(cx, li, l, batch, kv, ws);
            ops::add_inplace(&mut ws.x, &ws.xn);

            ops::rms_norm_rows(cx.isa, &ws.x, &l.ffn_norm, eps, &mut ws.xn);
            cx.ffn(&l.ffn, n, ws, GateAct::Silu);
            ops::add_inplace(&mut ws.x, &ws.xn);
        }
    }

    /// The dense matrices, and the per-head up-projections where a head is a whole number of
    /// tile groups (so each head stays a row range).
    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let tile = ridge_kernels::packed::TILE_ROWS;
        let mla = self.mla;
        let mut v = Vec::new();
        for l in &mut self.layers {
            match &mut l.q {
                QProj::Direct(m) => v.push(m),
                QProj::LowRank { a, b, .. } => v.extend([a, b]),
            }
            v.extend([&mut l.kv_a, &mut l.wo]);
            if mla.kv_lora.is_multiple_of(tile) {
                v.push(&mut l.k_b);
            }
            if mla.v_head.is_multiple_of(tile) {
                v.push(&mut l.v_b);
            }
            v.extend(l.ffn.matrices_mut(cfg));
        }
        v
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .map(|l| {
                let q = match &l.q {
                    QProj::Direct(m) => cx.mat(m).data.len(),
                    QProj::LowRank { a, norm, b } => {
                        cx.mat(a).data.len() + cx.mat(b).data.len() + 4 * norm.len()
                    }
                };
                let mats: usize = [l.kv_a, l.k_b, l.v_b, l.wo]
                    .iter()
                    .map(|m| cx.mat(m).data.len())
                    .sum();
                q + mats
                    + ffn_bytes(cx, &l.ffn)
                    + 4 * (l.attn_norm.len() + l.kv_a_norm.len() + l.ffn_norm.len())
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

impl Deepseek2Stack {
    /// The attention block of layer `li` over the normed rows in `ws.xn`, its output (before
    /// the residual add) left in `ws.xn`.
    fn attention(
        &self,
        cx: &LayerCtx<'_>,
        li: usize,
        l: &MlaLayer,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
    ) {
        let cfg = cx.cfg;
        let mla = self.mla;
        let (n, h, rope) = (batch.len(), cfg.n_heads, cfg.rope_dim);
        let (rank, nope, kh, vh) = (mla.kv_lora, mla.nope(rope), mla.k_head, mla.v_head);
        let row = rank + rope; // = cfg.head_dim: one cached latent row
        let s = &mut ws.mla;

        // Queries, n × h × k_head.
        fit(&mut s.q, n * h * kh);
        match &l.q {
            QProj::Direct(m) => cx.mm(cx.act.qkv, m, &ws.xn, n, &mut s.q, &mut ws.mm),
            QProj::LowRank { a, norm, b } => {
                fit(&mut s.q_a, n * a.rows);
                cx.mm(cx.act.qkv, a, &ws.xn, n, &mut s.q_a, &mut ws.mm);
                ops::rms_norm_rows_inplace(cx.isa, &mut s.q_a, norm, cfg.norm_eps);
                cx.mm(cx.act.qkv, b, &s.q_a, n, &mut s.q, &mut ws.mm);
            }
        }
        // The latent and the rotated key part, n × (rank + rope).
        fit(&mut s.kv, n * row);
        cx.mm(cx.act.qkv, &l.kv_a, &ws.xn, n, &mut s.kv, &mut ws.mm);

        // Each query head's unrotated part, gathered head-major for the absorption.
        fit(&mut s.nope, h * n * nope);
        for t in 0..n {
            for hh in 0..h {
                let src = &s.q[(t * h + hh) * kh..][..nope];
                s.nope[(hh * n + t) * nope..][..nope].copy_from_slice(src);
            }
        }
        fit(&mut s.abs, h * n * rank);
        {
            let kb = cx.mat(&l.k_b);
            let mut items: Vec<(WeightMatrix<'_>, &[f32], usize, &mut [f32])> =
                Vec::with_capacity(h);
            for (hh, (x, y)) in s
                .nope
                .chunks_exact(n * nope)
                .zip(s.abs.chunks_exact_mut(n * rank))
                .enumerate()
            {
                items.push((head(&kb, hh, rank), x, n, y));
            }
            matmul_each(cx.isa, cx.act.qkv, &mut items, &mut ws.mm);
        }

        // Full queries [q_abs, rope(q_pe)] into ws.q (n × h × row = q_dim), and the cache rows
        // [norm(c), rope(k_pe)].
        let half = rope / 2;
        fit(&mut ws.q, n * h * row);
        fit(&mut ws.k, n * row);
        for t in 0..n {
            let (c, sn) = (&ws.cos[t * half..][..half], &ws.sin[t * half..][..half]);
            for hh in 0..h {
                let dst = &mut ws.q[(t * h + hh) * row..][..row];
                dst[..rank].copy_from_slice(&s.abs[(hh * n + t) * rank..][..rank]);
                dst[rank..].copy_from_slice(&s.q[(t * h + hh) * kh + nope..][..rope]);
                ops::rope_apply(&mut dst[rank..], c, sn, cfg.rope_neox);
            }
            let krow = &mut ws.k[t * row..][..row];
            krow.copy_from_slice(&s.kv[t * row..][..row]);
            ops::rms_norm_rows_inplace(cx.isa, &mut krow[..rank], &l.kv_a_norm, cfg.norm_eps);
            ops::rope_apply(&mut krow[rank..], c, sn, cfg.rope_neox);
            let slot = kv.slot(
                &ws.tables[kv.group_of(li)][ws.table_of[t]],
                batch.positions[t],
            );
            kv.write(li, slot, &ws.k[t * row..][..row], &[]);
        }

        // Latent attention: per (token, head) the weighted sum of the positions' latents.
        fit(&mut s.lat, n * h * rank);
        latent_attention(cx, li, batch, kv, ws, (rank, row));

        // Each head's value up-projection, then the output projection.
        let s = &mut ws.mla;
        fit(&mut s.nope, h * n * rank);
        for t in 0..n {
            for hh in 0..h {
                let src = &s.lat[(t * h + hh) * rank..][..rank];
                s.nope[(hh * n + t) * rank..][..rank].copy_from_slice(src);
            }
        }
        fit(&mut s.vout, h * n * vh);
        {
            let vb = cx.mat(&l.v_b);
            let mut items: Vec<(WeightMatrix<'_>, &[f32], usize, &mut [f32])> =
                Vec::with_capacity(h);
            for (hh, (x, y)) in s
                .nope
                .chunks_exact(n * rank)
                .zip(s.vout.chunks_exact_mut(n * vh))
                .enumerate()
            {
                items.push((head(&vb, hh, vh), x, n, y));
            }
            matmul_each(cx.isa, cx.act.o, &mut items, &mut ws.mm);
        }
        fit(&mut ws.att, n * h * vh);
        for t in 0..n {
            for hh in 0..h {
                ws.att[(t * h + hh) * vh..][..vh]
                    .copy_from_slice(&s.vout[(hh * n + t) * vh..][..vh]);
            }
        }
        matmul(
            cx.isa,
            cx.act.o,
            &cx.mat(&l.wo),
            &ws.att[..n * h * vh],
            n,
            &mut ws.xn,
            &mut ws.mm,
        );
    }
}

/// Head `hh`'s `rows`-row block of a stacked per-head matrix.
fn head<'a>(w: &WeightMatrix<'a>, hh: usize, rows: usize) -> WeightMatrix<'a> {
    w.row_range(hh * rows, rows)
        .expect("a head's rows lie within its stacked tensor (bound so, tiled only whole)")
}

/// Attention of every (token, query head) of the batch over its sequence's cached latent rows
/// of layer `li`: scores `scale · q · row` against the whole row (`row` wide: latent then
/// rotated part), softmax, and the weighted sum of the rows' first `rank` values into
/// `ws.mla.lat` (n × heads × rank). One task per (token, block of heads), positions in order.
fn latent_attention(
    cx: &LayerCtx<'_>,
    li: usize,
    batch: &Batch,
    kv: &KvCache,
    ws: &mut Workspace,
    (rank, row): (usize, usize),
) {
    let cfg = cx.cfg;
    let (n, h) = (batch.len(), cfg.n_heads);
    // Enough head blocks that every thread has two tasks; whole heads per block.
    let per = h.div_ceil((2 * pool::threads()).div_ceil(n).max(1)).max(1);
    let blocks = h.div_ceil(per);
    let layer = kv.layer(li);
    let group = kv.group_of(li);
    let (q, tables, table_of) = (&ws.q, &ws.tables[group], &ws.table_of);
    let lat = SharedMut(ws.mla.lat.as_mut_ptr());
    let scale = cfg.attn_scale;
    pool::parallel_for(n * blocks, |i| {
        let (t, b) = (i / blocks, i % blocks);
        let (h0, h1) = (b * per, ((b + 1) * per).min(h));
        let end = batch.positions[t] + 1;
        let table = &tables[table_of[t]];
        let mut krow = vec![0f32; row];
        let mut scores = vec![0f32; (h1 - h0) * end];
        for p in 0..end {
            layer.load_head(false, kv.slot(table, p), 0, &mut krow);
            for hh in h0..h1 {
                let qh = &q[(t * h + hh) * row..][..row];
                scores[(hh - h0) * end + p] = scale * dot(qh, &krow);
            }
        }
        for sc in scores.chunks_exact_mut(end) {
            let max = sc.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let mut sum = 0f32;
            for v in sc.iter_mut() {
                *v = (*v - max).exp();
                sum += *v;
            }
            sc.iter_mut().for_each(|v| *v /= sum);
        }
        // SAFETY: task i alone writes lat[(t·h + h0)·rank .. (t·h + h1)·rank] (distinct
        // (token, block) pairs give disjoint ranges inside the n·h·rank buffer), and the
        // buffer outlives parallel_for.
        let out = unsafe {
            std::slice::from_raw_parts_mut(lat.ptr().add((t * h + h0) * rank), (h1 - h0) * rank)
        };
        out.iter_mut().for_each(|v| *v = 0.0);
        for p in 0..end {
            layer.load_head(false, kv.slot(table, p), 0, &mut krow);
            for (k, o) in out.chunks_exact_mut(rank).enumerate() {
                let w = scores[k * end + p];
                for (o, &c) in o.iter_mut().zip(&krow[..rank]) {
                    *o += w * c;
                }
            }
        }
    });
}

/// f32 · f32 with eight independent accumulators (vectorised by the compiler).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}
