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
use ridge_kernels::{latent, matmul, matmul_each, ops, Isa, WeightMatrix};

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

/// Positions per chunk of latent attention: a query's positions are cut at multiples of this
/// (absolute positions), each chunk gives a partial softmax per head, and the partials are
/// merged in chunk order — so a token's result has the same bits whether its chunks ran in one
/// task (prefill) or were spread over the threads (decode).
const CHUNK: usize = 64;

thread_local! {
    /// Per-thread buffers of latent attention: a chunk's rows in f32, its scores, and one
    /// token's chunk partials — kept across calls, so a step allocates nothing.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Attention of every (token, query head) of the batch over its sequence's cached latent rows
/// of layer `li`: scores `scale · q · row` against the whole row (`row` wide: latent then
/// rotated part), softmax, and the weighted sum of the rows' first `rank` values into
/// `ws.mla.lat` (n × heads × rank).
///
/// Work is cut into (token, chunk of [`CHUNK`] positions) pieces, each computing every head's
/// partial — its highest score, the sum of `e^(s − m)`, and the `e^(s − m)`-weighted sum of the
/// latents — with each latent row converted to f32 once for all heads. With many tokens
/// (prefill) one task takes a token's chunks in order and merges as it goes; with few (decode)
/// the chunks are spread over the threads and merged after. Both merge the same partials in the
/// same order.
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
    let layer = kv.layer(li);
    let group = kv.group_of(li);
    let (scale, isa) = (cfg.attn_scale, cx.isa);
    let plen = h * (rank + 2);
    let (q, tables, table_of) = (&ws.q, &ws.tables[group], &ws.table_of);
    let s = &mut ws.mla;
    let chunks_of = |t: usize| (batch.positions[t] + 1).div_ceil(CHUNK);
    // One chunk's partial for token t: rows loaded into `rows`, scores into `sc`.
    let partial = |t: usize, c: usize, rows: &mut Vec<f32>, sc: &mut Vec<f32>, out: &mut [f32]| {
        let end = batch.positions[t] + 1;
        let (p0, p1) = (c * CHUNK, ((c + 1) * CHUNK).min(end));
        let m = p1 - p0;
        let table = &tables[table_of[t]];
        rows.resize(m * row, 0.0);
        for (j, r) in rows.chunks_exact_mut(row).enumerate() {
            layer.load_head(false, kv.slot(table, p0 + j), 0, r);
        }
        sc.resize(h * m, 0.0);
        latent::scores(
            isa,
            &q[t * h * row..(t + 1) * h * row],
            rows,
            row,
            scale,
            sc,
        );
        chunk_partial(isa, sc, rows, (m, row, rank), out);
    };
    fit(&mut s.lat, n * h * rank);
    let lat = SharedMut(s.lat.as_mut_ptr());
    if n >= 2 * pool::threads() {
        pool::parallel_for(n, |t| {
            SCRATCH.with(|cell| {
                let (rows, sc, parts) = &mut *cell.borrow_mut();
                let k = chunks_of(t);
                parts.resize(k * plen, 0.0);
                for (c, part) in parts.chunks_exact_mut(plen).enumerate() {
                    partial(t, c, rows, sc, part);
                }
                // SAFETY: task t alone writes lat[t·h·rank .. (t + 1)·h·rank] (distinct tokens
                // give disjoint ranges of the n·h·rank buffer), which outlives parallel_for.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(lat.ptr().add(t * h * rank), h * rank)
                };
                merge(parts, h, rank, out);
            });
        });
        return;
    }
    // Decode: one task per (token, chunk), the partials merged per token after the loop.
    s.tasks.clear();
    for t in 0..n {
        s.tasks.extend((0..chunks_of(t)).map(|c| (t, c)));
    }
    fit(&mut s.parts, s.tasks.len() * plen);
    let parts = SharedMut(s.parts.as_mut_ptr());
    let tasks = &s.tasks;
    pool::parallel_for(tasks.len(), |i| {
        let (t, c) = tasks[i];
        // SAFETY: task i alone writes parts[i·plen .. (i + 1)·plen], inside the buffer sized
        // for every task, which outlives parallel_for.
        let out = unsafe { std::slice::from_raw_parts_mut(parts.ptr().add(i * plen), plen) };
        SCRATCH.with(|cell| {
            let (rows, sc, _) = &mut *cell.borrow_mut();
            partial(t, c, rows, sc, out);
        });
    });
    let mut i = 0;
    for t in 0..n {
        let k = chunks_of(t);
        merge(
            &s.parts[i * plen..(i + k) * plen],
            h,
            rank,
            &mut s.lat[t * h * rank..(t + 1) * h * rank],
        );
        i += k;
    }
}

/// One chunk's partial per head from its scores `sc` (`h × m`) and rows (`m × row`): the
/// highest score, the sum of `e^(s − max)`, and the weighted sum of the rows' first `rank`
/// values, laid out per head as `[weighted sum (rank), max, sum]`.
fn chunk_partial(
    isa: Isa,
    sc: &mut [f32],
    rows: &[f32],
    (m, row, rank): (usize, usize, usize),
    out: &mut [f32],
) {
    for (s, part) in sc.chunks_exact_mut(m).zip(out.chunks_exact_mut(rank + 2)) {
        let max = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let mut sum = 0f32;
        for v in s.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        part[rank] = max;
        part[rank + 1] = sum;
    }
    latent::weighted_rows(isa, sc, rows, row, rank, out);
}

/// Merges a token's chunk partials (in chunk order; `h` heads of `[rank, max, sum]` each) into
/// its heads' attended latents `out` (`h × rank`).
fn merge(parts: &[f32], h: usize, rank: usize, out: &mut [f32]) {
    let plen = h * (rank + 2);
    for (hh, o) in out.chunks_exact_mut(rank).enumerate() {
        let head = |p: &[f32]| -> (f32, f32) {
            let st = &p[hh * (rank + 2) + rank..][..2];
            (st[0], st[1])
        };
        let max = parts
            .chunks_exact(plen)
            .map(|p| head(p).0)
            .fold(f32::NEG_INFINITY, f32::max);
        o.iter_mut().for_each(|v| *v = 0.0);
        let mut total = 0f32;
        for p in parts.chunks_exact(plen) {
            let (m, s) = head(p);
            let f = (m - max).exp();
            total += s * f;
            for (v, &a) in o.iter_mut().zip(&p[hh * (rank + 2)..][..rank]) {
                *v += f * a;
            }
        }
        o.iter_mut().for_each(|v| *v /= total);
    }
}
