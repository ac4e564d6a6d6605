//! AVX2 attention of query heads over a chunk of cached positions (f16 or Q8_0 K/V rows),
//! converting rows in registers and applying each to all heads of a KV group.
//!
//! The entry point's body is a macro, [`attend_entry`], so that the AVX-512 folder compiles
//! the very same loop (`x86::avx512::attention`), with its own 512-bit loops for 1–8 heads
//! whose lanes perform these loops' operations: the same operations in the same order on
//! both instruction sets, and so the same bits (the kernel tests compare them).
#![allow(clippy::needless_range_loop)]

use crate::attention::layout::{AttnShape, KvLayer};
use crate::x86::shared::{hsum, prefetch_l1};
use std::arch::x86_64::*;

/// Defines the grouped attention loop compiled with `$features`, once per instruction set,
/// from one body; `$f16` is that instruction set's loop for 1–8 heads over f16 rows.
macro_rules! attend_entry {
    ($(#[$doc:meta])* $name:ident, $features:literal, $f16:ident) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            kv: &crate::attention::layout::KvLayer<'_>,
            table: &[u32],
            first: usize,
            n_ctx: usize,
            shape: &crate::attention::layout::AttnShape,
            group: usize,
            gs: usize,
            q: &[f32],
            out: &mut [f32],
            ml: &mut [f32],
            scores: &mut [f32],
            slots: &mut [usize],
        ) {
            use std::arch::x86_64::*;
            const MAXG: usize = crate::attention::layout::MAX_GROUP;
            let hd = shape.head_dim;
            let len = n_ctx - first;
            let bs = kv.block_size;
            let (kp, vp, q8) = match kv.data {
                crate::attention::layout::KvData::F16 { k, v } => {
                    (k.as_ptr() as *const u8, v.as_ptr() as *const u8, false)
                }
                crate::attention::layout::KvData::Q8_0 { k, v } => (k.as_ptr(), v.as_ptr(), true),
            };
            if q8 {
                return $crate::x86::avx2::attention::attend_group_q8(
                    kp, vp, kv, table, first, n_ctx, shape, group, gs, q, out, ml, scores,
                );
            }
            // Each position's row, walking the block table once (no division per position): the
            // head's rows of a block are consecutive (`attention::head_row`).
            let n_kv = kv.kv_dim / hd;
            let mut pos = first;
            while pos < n_ctx {
                let (b, i0) = (pos / bs, pos % bs);
                let end = n_ctx.min((b + 1) * bs);
                let slot = table[b] as usize * bs + i0;
                let mut r = crate::attention::layout::head_row(slot, group, n_kv, bs) * hd;
                for s in &mut slots[pos - first..end - first] {
                    *s = r;
                    r += hd;
                }
                pos = end;
            }
            let (rows, sc) = ($crate::x86::avx2::attention::Rows16 { kp, vp, row: slots }, shape.scale);
            match gs {
                1 => return $f16::<1>(&rows, len, hd, sc, q, out, ml, scores),
                2 => return $f16::<2>(&rows, len, hd, sc, q, out, ml, scores),
                3 => return $f16::<3>(&rows, len, hd, sc, q, out, ml, scores),
                4 => return $f16::<4>(&rows, len, hd, sc, q, out, ml, scores),
                5 => return $f16::<5>(&rows, len, hd, sc, q, out, ml, scores),
                6 => return $f16::<6>(&rows, len, hd, sc, q, out, ml, scores),
                7 => return $f16::<7>(&rows, len, hd, sc, q, out, ml, scores),
                8 => return $f16::<8>(&rows, len, hd, sc, q, out, ml, scores),
                _ => {}
            }
            for j in 0..len {
                let r = slots[j];
                let mut acc = [_mm256_setzero_ps(); MAXG];
                for c in (0..hd).step_by(8) {
                    let k8 = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(2 * (r + c)).cast()));
                    for h in 0..gs {
                        let qh = _mm256_loadu_ps(q.as_ptr().add(h * hd + c));
                        acc[h] = _mm256_fmadd_ps(k8, qh, acc[h]);
                    }
                }
                for h in 0..gs {
                    scores[h * len + j] = $crate::x86::shared::hsum(acc[h]) * shape.scale;
                }
            }
            for h in 0..gs {
                let sh = &mut scores[h * len..(h + 1) * len];
                (ml[h], ml[gs + h]) = crate::x86::avx2::elementwise::softmax_partial(sh);
            }
            out[..gs * hd].fill(0.0);
            let op = out.as_mut_ptr();
            for (j, &r) in slots.iter().enumerate() {
                for c in (0..hd).step_by(8) {
                    let v8 = _mm256_cvtph_ps(_mm_loadu_si128(vp.add(2 * (r + c)).cast()));
                    for h in 0..gs {
                        let o = op.add(h * hd + c);
                        let p = _mm256_set1_ps(scores[h * len + j]);
                        _mm256_storeu_ps(o, _mm256_fmadd_ps(p, v8, _mm256_loadu_ps(o)));
                    }
                }
            }
        }
    };
}

pub(crate) use attend_entry;

attend_entry!(
    /// Grouped attention over one chunk of positions `first..n_ctx` (see
    /// `attention::attend_chunk`): the positions loop runs inside one AVX2 function, converting
    /// each K/V row from f16 in registers, 8 elements at a time, and applying it to all `gs`
    /// heads. Leaves the chunk's unnormalised partial: `out[h]` = `Σ_j e^(s_j − m_h) · V_j`,
    /// `ml[h]` = `m_h` (the chunk's highest score), `ml[gs + h]` = `Σ_j e^(s_j − m_h)`.
    /// `scores` has room for `gs · (n_ctx − first)` values and `slots` for `n_ctx − first`.
    attend_group,
    "avx2,fma,f16c",
    attend_f16
);

/// Positions ahead that the attention loops prefetch K/V rows: a sequence's rows are spread
/// over its blocks (and a head's part of a row is a fraction of it), which the hardware
/// prefetchers follow poorly; with batched decode the cache no longer fits in the caches and
/// the loops waited on memory for most of their time (measured: 27% of a 16-sequence step).
const ATTN_PREFETCH: usize = 16;

/// Where one KV head's f16 rows live: position `first + j` of the sequence is the row at
/// element `row[j]` of `kp` (keys) and `vp` (values).
pub(crate) struct Rows16<'t> {
    pub(crate) kp: *const u8,
    pub(crate) vp: *const u8,
    pub(crate) row: &'t [usize],
}

/// Prefetches the K rows of positions `j + ATTN_PREFETCH + k`, `k < u`, that exist: what a
/// scores pass over `u` positions at a time reads [`ATTN_PREFETCH`] positions later.
#[inline(always)]
pub(crate) unsafe fn prefetch_keys(rows: &Rows16<'_>, j: usize, u: usize, len: usize, hd: usize) {
    for k in 0..u {
        if j + k + ATTN_PREFETCH < len {
            let r = *rows.row.get_unchecked(j + k + ATTN_PREFETCH);
            prefetch_l1(rows.kp.add(2 * r), 2 * hd);
        }
    }
}

/// Prefetches position `j + ATTN_PREFETCH`'s V row for a values pass over dimensions `c..`:
/// the whole row on the first chunk (`c == 0`), the chunk's `bytes` after it.
#[inline(always)]
pub(crate) unsafe fn prefetch_values(
    rows: &Rows16<'_>,
    j: usize,
    len: usize,
    hd: usize,
    c: usize,
    bytes: usize,
) {
    if j + ATTN_PREFETCH < len {
        let r = *rows.row.get_unchecked(j + ATTN_PREFETCH);
        if c == 0 {
            prefetch_l1(rows.vp.add(2 * r), 2 * hd);
        } else {
            prefetch_l1(rows.vp.add(2 * (r + c)), bytes);
        }
    }
}

/// [`attend_group`] for `GS` heads known at compile time, so every accumulator lives in a
/// register: scores as one dot product per (head, position) with the K row converted once for
/// all heads; the weighted sum of values in chunks of up to 32 dimensions, the chunk's
/// accumulators for all heads held in registers across every position (the V row chunk
/// converted once for all heads), stored once at the end. Each output element is the same
/// sequence of FMAs from zero, in position order, as the general loop, so results do not
/// depend on `GS` (a head computed alone or with its group gives identical bits).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attend_f16<const GS: usize>(
    rows: &Rows16<'_>,
    len: usize,
    hd: usize,
    scale: f32,
    q: &[f32],
    out: &mut [f32],
    ml: &mut [f32],
    scores: &mut [f32],
) {
    // Four positions at a time while 4·GS accumulators fit in the 16 registers (at most 12),
    // else two while 2·GS do, else one. The last few one at a time.
    let j = if GS <= 3 {
        attend_scores::<GS, 4>(rows, 0, len, hd, scale, q, scores)
    } else if GS <= 4 {
        attend_scores::<GS, 2>(rows, 0, len, hd, scale, q, scores)
    } else {
        0
    };
    attend_scores::<GS, 1>(rows, j, len, hd, scale, q, scores);
    softmax_heads::<GS>(len, ml, scores);
    // 4 vectors (32 dimensions) per head for up to 3 heads, 2 for 4, else 1: ≤ 12
    // accumulators.
    if hd.is_multiple_of(32) && GS <= 3 {
        attend_values::<GS, 4>(rows, len, hd, out, scores);
    } else if hd.is_multiple_of(16) && GS <= 4 {
        attend_values::<GS, 2>(rows, len, hd, out, scores);
    } else {
        attend_values::<GS, 1>(rows, len, hd, out, scores);
    }
}

/// Each head's scores (`scores[h · len..]`) to its chunk partial: `e^(s − m)` in place,
/// `ml[h] = m`, `ml[GS + h] = Σ e^(s − m)`.
#[inline(always)]
pub(crate) unsafe fn softmax_heads<const GS: usize>(
    len: usize,
    ml: &mut [f32],
    scores: &mut [f32],
) {
    for h in 0..GS {
        let (m, l) =
            crate::x86::avx2::elementwise::softmax_partial(&mut scores[h * len..(h + 1) * len]);
        (ml[h], ml[GS + h]) = (m, l);
    }
}

/// Scores of positions `j0..` in groups of `U` (the K rows of a group converted once and
/// applied to all `GS` heads, the `U·GS` dot products reduced together); returns the first
/// position not done. Each score is the same FMAs from zero and the same reduction as
/// [`hsum`] whatever `U`, so a position's score does not depend on the group it fell in.
#[inline(always)]
pub(crate) unsafe fn attend_scores<const GS: usize, const U: usize>(
    rows: &Rows16<'_>,
    j0: usize,
    len: usize,
    hd: usize,
    scale: f32,
    q: &[f32],
    scores: &mut [f32],
) -> usize {
    let qp = q.as_ptr();
    let mut j = j0;
    while j + U <= len {
        prefetch_keys(rows, j, U, len, hd);
        let r: [usize; U] = std::array::from_fn(|u| *rows.row.get_unchecked(j + u));
        let mut acc = [[_mm256_setzero_ps(); U]; GS];
        for c in (0..hd).step_by(8) {
            for u in 0..U {
                let k8 = _mm256_cvtph_ps(_mm_loadu_si128(
                    rows.kp.add(2 * (r[u] + c)) as *const __m128i
                ));
                for h in 0..GS {
                    acc[h][u] = _mm256_fmadd_ps(k8, _mm256_loadu_ps(qp.add(h * hd + c)), acc[h][u]);
                }
            }
        }
        for h in 0..GS {
            let o = scores.as_mut_ptr().add(h * len + j);
            if U == 4 {
                let s = _mm_mul_ps(
                    hsum4([acc[h][0], acc[h][1], acc[h][2], acc[h][3]]),
                    _mm_set1_ps(scale),
                );
                _mm_storeu_ps(o, s);
            } else {
                for u in 0..U {
                    *o.add(u) = hsum(acc[h][u]) * scale;
                }
            }
        }
        j += U;
    }
    j
}

/// [`hsum`] of four vectors at once, lane `i` of the result the sum of `v[i]`, added in
/// exactly [`hsum`]'s order (so the results are bitwise [`hsum`]'s).
#[inline(always)]
pub(crate) unsafe fn hsum4(v: [__m256; 4]) -> __m128 {
    // [a.lo + a.hi | c.lo + c.hi] and [b.lo + b.hi | d.lo + d.hi]: lane i = x_i + x_{i+4}.
    let ac = _mm256_add_ps(
        _mm256_permute2f128_ps(v[0], v[2], 0x20),
        _mm256_permute2f128_ps(v[0], v[2], 0x31),
    );
    let bd = _mm256_add_ps(
        _mm256_permute2f128_ps(v[1], v[3], 0x20),
        _mm256_permute2f128_ps(v[1], v[3], 0x31),
    );
    // [a0+a2, b0+b2, a1+a3, b1+b3 | c…, d…]
    let s = _mm256_add_ps(_mm256_unpacklo_ps(ac, bd), _mm256_unpackhi_ps(ac, bd));
    // lane 0: (a0+a2) + (a1+a3), lane 1: b's, likewise in the upper half for c and d.
    let t = _mm256_add_ps(s, _mm256_permute_ps(s, 0b11_10_11_10));
    _mm_castpd_ps(_mm_unpacklo_pd(
        _mm_castps_pd(_mm256_castps256_ps128(t)),
        _mm_castps_pd(_mm256_extractf128_ps(t, 1)),
    ))
}

/// `out[h] = Σ_j p[h][j] · V[j]` in chunks of `CW` vectors (8·CW dimensions) per head.
#[inline(always)]
pub(crate) unsafe fn attend_values<const GS: usize, const CW: usize>(
    rows: &Rows16<'_>,
    len: usize,
    hd: usize,
    out: &mut [f32],
    scores: &[f32],
) {
    let op = out.as_mut_ptr();
    for c in (0..hd).step_by(8 * CW) {
        let mut acc = [[_mm256_setzero_ps(); CW]; GS];
        for j in 0..len {
            let vr = rows.vp.add(2 * (*rows.row.get_unchecked(j) + c));
            prefetch_values(rows, j, len, hd, c, 16 * CW);
            let mut v8 = [_mm256_setzero_ps(); CW];
            for w in 0..CW {
                v8[w] = _mm256_cvtph_ps(_mm_loadu_si128(vr.add(16 * w) as *const __m128i));
            }
            for h in 0..GS {
                let p = _mm256_set1_ps(*scores.get_unchecked(h * len + j));
                for w in 0..CW {
                    acc[h][w] = _mm256_fmadd_ps(p, v8[w], acc[h][w]);
                }
            }
        }
        for h in 0..GS {
            for w in 0..CW {
                _mm256_storeu_ps(op.add(h * hd + c + 8 * w), acc[h][w]);
            }
        }
    }
}

/// [`attend_group`] over Q8_0 K/V rows: each 32-element block is one f16 scale and 32 int8
/// values, widened to f32 eight at a time and scaled.
///
/// # Safety
/// As [`attend_group`]; `kp`/`vp` point at Q8_0 storage of `kv_dim / 32 · 34` bytes per slot and
/// `head_dim` is a multiple of 32.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attend_group_q8(
    kp: *const u8,
    vp: *const u8,
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
    scores: &mut [f32],
) {
    const MAXG: usize = crate::attention::layout::MAX_GROUP;
    const BB: usize = crate::attention::layout::Q8_BLOCK_BYTES;
    let hd = shape.head_dim;
    let len = n_ctx - first;
    let bs = kv.block_size;
    let head_bytes = hd / 32 * BB;
    let n_kv = kv.kv_dim / hd;
    let row_of = |pos: usize| {
        crate::attention::layout::head_row(
            table[pos / bs] as usize * bs + pos % bs,
            group,
            n_kv,
            bs,
        ) * head_bytes
    };
    for j in 0..len {
        let r = kp.add(row_of(first + j));
        if j + ATTN_PREFETCH < len {
            prefetch_l1(kp.add(row_of(first + j + ATTN_PREFETCH)), head_bytes);
        }
        let mut acc = [_mm256_setzero_ps(); MAXG];
        for b in 0..hd / 32 {
            let blk = r.add(b * BB);
            let d = _mm256_set1_ps(
                half::f16::from_bits(u16::from_le_bytes([*blk, *blk.add(1)])).to_f32(),
            );
            for c in 0..4 {
                let i8s = _mm_loadl_epi64(blk.add(2 + 8 * c) as *const __m128i);
                let k8 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(i8s)));
                for h in 0..gs {
                    let qv = _mm256_loadu_ps(q.as_ptr().add(h * hd + b * 32 + 8 * c));
                    acc[h] = _mm256_fmadd_ps(k8, qv, acc[h]);
                }
            }
        }
        for h in 0..gs {
            scores[h * len + j] = hsum(acc[h]) * shape.scale;
        }
    }
    for h in 0..gs {
        let (m, l) =
            crate::x86::avx2::elementwise::softmax_partial(&mut scores[h * len..(h + 1) * len]);
        (ml[h], ml[gs + h]) = (m, l);
    }
    out[..gs * hd].fill(0.0);
    let op = out.as_mut_ptr();
    for j in 0..len {
        let r = vp.add(row_of(first + j));
        if j + ATTN_PREFETCH < len {
            prefetch_l1(vp.add(row_of(first + j + ATTN_PREFETCH)), head_bytes);
        }
        for b in 0..hd / 32 {
            let blk = r.add(b * BB);
            let d = _mm256_set1_ps(
                half::f16::from_bits(u16::from_le_bytes([*blk, *blk.add(1)])).to_f32(),
            );
            for c in 0..4 {
                let i8s = _mm_loadl_epi64(blk.add(2 + 8 * c) as *const __m128i);
                let v8 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(i8s)));
                for h in 0..gs {
                    let o = op.add(h * hd + b * 32 + 8 * c);
                    let p = _mm256_set1_ps(scores[h * len + j]);
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(p, v8, _mm256_loadu_ps(o)));
                }
            }
        }
    }
}
