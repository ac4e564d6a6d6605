//! Causal attention of one query token over a sequence's cached keys and values, read through
//! a paged KV layout.
//!
//! The cache stores K and V per token slot, `kv_dim = n_kv_heads · head_dim` elements each; a
//! sequence's positions map to slots through its block table
//! (`slot = table[pos / block_size] · block_size + pos % block_size`). Within a block the rows
//! are head-major: KV head `g`'s `head_dim` elements of the block's slot `i` are head row
//! [`head_row`]` = (block · n_kv_heads + g) · block_size + i`, so one KV head's rows of a block
//! are contiguous. Why: decode attention runs one task per KV head and chunk of positions, and
//! with whole-token rows each task read a third of every 384-byte row of SmolLM2 — measured
//! 1.5× slower per byte from memory than contiguous rows (`attn_bw`, 2048 positions).
//! Grouped-query attention: query head `h` reads KV head `h / (n_heads / n_kv_heads)`.
//!
//! A query's positions are processed in fixed chunks of [`ATTN_CHUNK`] positions (cut at
//! absolute positions), each giving an unnormalised partial softmax that [`merge_chunks`]
//! combines. Decode has one query token and a handful of heads — too few tasks to keep the
//! threads busy and every thread re-reading the same K/V rows — so it spreads a token's chunks
//! over the pool ([`attend_chunk`]); prefill runs whole groups per task ([`attend_group`]).
//! Both compute the same partials and merge them the same way, so a token's output does not
//! depend on which path, batch or thread computed it.

pub mod layout;

pub use layout::{head_row, AttnShape, KvData, KvLayer, MAX_GROUP, Q8_BLOCK_BYTES};

use crate::{ops, Isa};
use std::cell::RefCell;

thread_local! {
    /// Per-thread score buffer; grows to the longest context seen, never per call.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread buffers for one K or V row converted to f32, and group scores.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread K/V row index of every position one AVX2 attention call reads.
    static SLOTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// Per-thread chunk partials of one [`attend_group`] call.
    static PARTIALS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// f32 · f32 with eight independent accumulators (vectorised by the compiler).
#[inline]
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
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

/// Positions per attention chunk. A query's positions are cut at multiples of this (absolute
/// positions); each chunk gives an unnormalised partial — its highest score `m`, the sum of
/// `e^(s − m)` and the sum of `e^(s − m) · V` — and [`merge_chunks`] combines a query's
/// partials in chunk order. The cuts depend only on the positions, never on how the work is
/// divided among threads or batched, so a token's result has the same bits however it was
/// computed; decode spreads one token's chunks over the pool, so the threads stream different
/// K/V rows instead of all reading every row.
pub const ATTN_CHUNK: usize = 32;

/// The chunks (index `k`: positions `k · ATTN_CHUNK..(k + 1) · ATTN_CHUNK`) that positions
/// `first..n_ctx` touch.
pub fn chunks(first: usize, n_ctx: usize) -> std::ops::Range<usize> {
    if first >= n_ctx {
        return 0..0;
    }
    first / ATTN_CHUNK..n_ctx.div_ceil(ATTN_CHUNK)
}

/// Floats of one chunk's partial for `gs` heads: their `gs · head_dim` weighted value sums,
/// then `gs` maxima, then `gs` exponential sums.
pub fn partial_len(gs: usize, head_dim: usize) -> usize {
    gs * (head_dim + 2)
}

/// Computes `gs` query heads that share KV group `group` over positions `first..n_ctx`,
/// reading each cached K and V row once for all of them (GQA: `n_heads / n_kv_heads` heads share
/// one KV head, so this divides the cache traffic and f16 conversions by that factor). Callers
/// pass the whole group, or a subset of its heads when they need more parallel tasks.
///
/// `q` holds the heads' queries back to back (`gs · head_dim`), `out` receives their attended
/// values in the same layout. `gs` is at most [`MAX_GROUP`]. `sinks`, where the model has them
/// (gpt-oss), holds one learnt logit per head that joins each head's softmax denominator and
/// attends to nothing. The result is [`attend_chunk`] of every chunk, merged by
/// [`merge_chunks`].
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    isa: Isa,
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    group: usize,
    gs: usize,
    q: &[f32],
    sinks: Option<&[f32]>,
    out: &mut [f32],
) {
    let ks = chunks(first, n_ctx);
    let plen = partial_len(gs, shape.head_dim);
    PARTIALS.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < ks.len() * plen {
            buf.resize(ks.len() * plen, 0.0);
        }
        for (i, k) in ks.clone().enumerate() {
            let p = &mut buf[i * plen..(i + 1) * plen];
            attend_chunk(isa, kv, table, first, n_ctx, shape, group, gs, q, k, p);
        }
        merge_chunks(&buf[..ks.len() * plen], gs, shape.head_dim, sinks, out);
    });
}

/// Chunk `k` of positions `first..n_ctx` (see [`ATTN_CHUNK`]) for `gs` query heads of KV group
/// `group`, as an unnormalised partial into `partial` ([`partial_len`] floats). `k` must be
/// one of [`chunks`]`(first, n_ctx)`.
#[allow(clippy::too_many_arguments)]
pub fn attend_chunk(
    isa: Isa,
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    group: usize,
    gs: usize,
    q: &[f32],
    k: usize,
    partial: &mut [f32],
) {
    debug_assert!(gs <= MAX_GROUP && q.len() == gs * shape.head_dim);
    let (p0, p1) = (first.max(k * ATTN_CHUNK), n_ctx.min((k + 1) * ATTN_CHUNK));
    let (out, ml) = partial[..partial_len(gs, shape.head_dim)].split_at_mut(gs * shape.head_dim);
    let simd_ok = match kv.data {
        KvData::F16 { .. } => shape.head_dim.is_multiple_of(8),
        KvData::Q8_0 { .. } => shape.head_dim.is_multiple_of(32),
    };
    let kernels = isa.kernels();
    if let (Some(attend), true) = (kernels.attend_group, simd_ok) {
        if let KvData::F16 { k: kd, v: vd } = kv.data {
            // The next chunk is usually this thread's next task (a decode step's tasks run in
            // consecutive ranges, a prefill task walks its chunks in order): start reading its
            // K and V rows into L2 while this one computes. The in-kernel prefetch runs only
            // 16 positions ahead within a chunk, so each chunk's first rows and the start of
            // its value pass waited on memory: decode attention at 4096 positions (the 1.5B's
            // shape) ran at ~9 GB/s.
            let (n0, n1) = ((k + 1) * ATTN_CHUNK, n_ctx.min((k + 2) * ATTN_CHUNK));
            let (bs, hd) = (kv.block_size, shape.head_dim);
            let n_kv = kv.kv_dim / hd;
            let mut pos = n0.max(first);
            while pos < n1 {
                let (b, i0) = (pos / bs, pos % bs);
                let end = n1.min((b + 1) * bs);
                let Some(&blk) = table.get(b) else { break };
                let r = head_row(blk as usize * bs + i0, group, n_kv, bs) * hd;
                let bytes = 2 * (end - pos) * hd;
                if 2 * r + bytes <= 2 * kd.len().min(vd.len()) {
                    // SAFETY: prefetches never fault; the range was checked to lie inside the
                    // K and V storage anyway.
                    unsafe {
                        (kernels.prefetch_l2)(kd.as_ptr().add(r).cast(), bytes);
                        (kernels.prefetch_l2)(vd.as_ptr().add(r).cast(), bytes);
                    }
                }
                pos = end;
            }
        }
        SCORES.with(|sc| {
            SLOTS.with(|sl| {
                let (mut scores, mut slots) = (sc.borrow_mut(), sl.borrow_mut());
                let len = p1 - p0;
                if scores.len() < gs * len {
                    scores.resize(gs * len, 0.0);
                }
                if slots.len() < len {
                    slots.resize(len, 0);
                }
                // SAFETY: the kernel is `isa`'s table's, which runs on this CPU (cpu.rs);
                // head_dim suits the storage (simd_ok); the table maps every position below n_ctx into kv
                // (caller's contract); q/out hold gs heads, ml 2·gs, scores gs·len, slots len.
                unsafe {
                    attend(
                        kv,
                        table,
                        p0,
                        p1,
                        shape,
                        group,
                        gs,
                        q,
                        out,
                        ml,
                        &mut scores[..gs * len],
                        &mut slots[..len],
                    )
                }
            })
        });
        return;
    }
    attend_group_scalar(kv, table, p0, p1, shape, group, gs, q, out, ml)
}

/// Merges a query's chunk partials (`partials`: whole [`partial_len`] records in chunk order)
/// into the attended values of its `gs` heads: with `M` the highest chunk maximum and
/// `w_c = e^(m_c − M)`, `out = Σ_c w_c · acc_c / Σ_c w_c · l_c`, summed in chunk order. With
/// `sinks` (one logit `s_h` per head), `M` also covers `s_h` and the denominator gains
/// `e^(s_h − M)`: probability mass the head gives to no position.
pub fn merge_chunks(
    partials: &[f32],
    gs: usize,
    head_dim: usize,
    sinks: Option<&[f32]>,
    out: &mut [f32],
) {
    let plen = partial_len(gs, head_dim);
    let n = partials.len() / plen;
    let out = &mut out[..gs * head_dim];
    out.fill(0.0);
    if n == 0 {
        return;
    }
    let rec = |c: usize| &partials[c * plen..(c + 1) * plen];
    for h in 0..gs {
        let m = |c: usize| rec(c)[gs * head_dim + h];
        let mut top = (0..n).fold(f32::NEG_INFINITY, |a, c| a.max(m(c)));
        if let Some(s) = sinks {
            top = top.max(s[h]);
        }
        let o = &mut out[h * head_dim..(h + 1) * head_dim];
        let mut sum = 0f32;
        for c in 0..n {
            let r = rec(c);
            let w = ops::exp_approx(m(c) - top);
            sum += r[gs * (head_dim + 1) + h] * w;
            for (o, &a) in o.iter_mut().zip(&r[h * head_dim..(h + 1) * head_dim]) {
                *o += a * w;
            }
        }
        if let Some(s) = sinks {
            sum += ops::exp_approx(s[h] - top);
        }
        let inv = 1.0 / sum;
        for v in o.iter_mut() {
            *v *= inv;
        }
    }
}

/// The portable [`attend_chunk`]: positions `first..n_ctx` (one chunk) into `out` (weighted
/// value sums) and `ml` (maxima, then exponential sums).
#[allow(clippy::too_many_arguments)]
fn attend_group_scalar(
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    group: usize,
    gs: usize,
    q: &[f32],
    out: &mut [f32],
    ml: &mut [f32],
) {
    let hd = shape.head_dim;
    let len = n_ctx - first;
    let slot =
        |pos: usize| table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size;
    SCORES.with(|sc| {
        ROW.with(|rw| {
            let (mut scores, mut row) = (sc.borrow_mut(), rw.borrow_mut());
            if scores.len() < gs * len {
                scores.resize(gs * len, 0.0);
            }
            if row.len() < hd {
                row.resize(hd, 0.0);
            }
            let row = &mut row[..hd];
            for j in 0..len {
                kv.load_head(false, slot(first + j), group, row);
                for h in 0..gs {
                    scores[h * len + j] = dot_f32(row, &q[h * hd..(h + 1) * hd]) * shape.scale;
                }
            }
            for h in 0..gs {
                let (m, l) = ops::softmax_partial(&mut scores[h * len..(h + 1) * len]);
                (ml[h], ml[gs + h]) = (m, l);
            }
            out[..gs * hd].fill(0.0);
            for j in 0..len {
                kv.load_head(true, slot(first + j), group, row);
                for h in 0..gs {
                    let p = scores[h * len + j];
                    for (o, v) in out[h * hd..(h + 1) * hd].iter_mut().zip(row.iter()) {
                        *o += p * v;
                    }
                }
            }
        })
    });
}

/// Scalar reference: one query head over positions `first..n_ctx` of a sequence, the plainest
/// possible loop; the tests hold [`attend_group`]'s paths against it.
///
/// `q` is the head's query (`head_dim`), `out` receives the attended value (`head_dim`).
/// `table` must map every position below `n_ctx` to a slot inside `kv`.
#[allow(clippy::too_many_arguments)]
pub fn attend_head(
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    head: usize,
    q: &[f32],
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let g = head / (shape.n_heads / shape.n_kv_heads);
    let mut row = vec![0f32; hd];
    let slot =
        |pos: usize| table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size;
    SCORES.with(|cell| {
        let mut scores = cell.borrow_mut();
        if scores.len() < n_ctx - first {
            scores.resize(n_ctx - first, 0.0);
        }
        let s = &mut scores[..n_ctx - first];
        for (j, sj) in s.iter_mut().enumerate() {
            kv.load_head(false, slot(first + j), g, &mut row);
            let d: f64 = row.iter().zip(q).map(|(a, b)| *a as f64 * *b as f64).sum();
            *sj = d as f32 * shape.scale;
        }
        ops::softmax_inplace(s);
        out.fill(0.0);
        for (j, &p) in s.iter().enumerate() {
            kv.load_head(true, slot(first + j), g, &mut row);
            for (o, v) in out.iter_mut().zip(&row) {
                *o += p * v;
            }
        }
    });
}
