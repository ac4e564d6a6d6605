//! The grouped attention loop of [`crate::x86::avx2::attention`] compiled with AVX-512: the
//! same entry body (one macro), with the f16 loops for 1–8 heads widened to 512-bit vectors
//! whose every lane performs the 256-bit loop's operations in the same order, so the bits are
//! the 256-bit path's.
//!
//! Why: the attention FMAs issue on the same two ports as the int8 dot products and the
//! other float multiplies (`examples/pipes.rs`), so a 256-bit FMA costs a full port slot for
//! half the work. Scores put two positions side by side in one register (lanes 0..8 the first
//! position's eight dimensions, 8..16 the second's; the query chunk broadcast to both halves),
//! and each half is reduced exactly as the 256-bit accumulator it replaces. The weighted sum
//! of values is per dimension, so 16 dimensions per register change nothing in any lane.
#![allow(clippy::needless_range_loop)]

use crate::x86::avx2::attention::{
    attend_scores, attend_values, hsum4, prefetch_keys, prefetch_values, softmax_heads, Rows16,
};
use std::arch::x86_64::*;

crate::x86::avx2::attention::attend_entry!(
    /// `x86::avx2::attention::attend_group` compiled with AVX-512: the same operations in the
    /// same order (so the same bits), with 32 vector registers and 512-bit f16 loops
    /// ([`attend_f16_zmm`]).
    ///
    /// # Safety
    /// As `x86::avx2::attention::attend_group`, with AVX-512 F/VL detected (an AVX-512 [`crate::Isa`]).
    attend_group_zmm,
    "avx2,fma,f16c,avx512f,avx512vl",
    attend_f16_zmm
);

/// `x86::avx2::attention::attend_f16` in 512-bit vectors: scores four positions at a time
/// (two per register), the last `len % 4` through the 256-bit loop (a score's bits do not
/// depend on its group); values in chunks of 64, 32 or 16 dimensions per head as registers
/// allow, else the 256-bit loop.
///
/// # Safety
/// Called from [`attend_group_zmm`] (AVX-512 F/VL available), with its `rows`, `len`, `hd`
/// (a multiple of 8) and buffers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attend_f16_zmm<const GS: usize>(
    rows: &Rows16<'_>,
    len: usize,
    hd: usize,
    scale: f32,
    q: &[f32],
    out: &mut [f32],
    ml: &mut [f32],
    scores: &mut [f32],
) {
    let j = scores4::<GS>(rows, len, hd, scale, q, scores);
    attend_scores::<GS, 1>(rows, j, len, hd, scale, q, scores);
    softmax_heads::<GS>(len, ml, scores);
    // ≤ 24 accumulators of 32 registers.
    if hd.is_multiple_of(64) && GS <= 6 {
        values::<GS, 4>(rows, len, hd, out, scores);
    } else if hd.is_multiple_of(32) {
        values::<GS, 2>(rows, len, hd, out, scores);
    } else if hd.is_multiple_of(16) {
        values::<GS, 1>(rows, len, hd, out, scores);
    } else {
        attend_values::<GS, 1>(rows, len, hd, out, scores);
    }
}

/// The eight floats at `p` in both halves (AVX-512F's 64-bit-lane broadcast: the 32-bit one
/// needs AVX-512DQ, which the AVX-512 path does not require).
#[inline(always)]
unsafe fn bcast8(p: *const f32) -> __m512 {
    _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))))
}

/// The 256-bit halves of `v`: (lanes 0..8, lanes 8..16).
#[inline(always)]
unsafe fn halves(v: __m512) -> (__m256, __m256) {
    (
        _mm512_castps512_ps256(v),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
    )
}

/// Scores of positions `0..` in groups of four, returns the first position not done. Position
/// pair `p` of a group (positions `2p`, `2p + 1`) shares a register per head: each half is
/// the 256-bit loop's accumulator for its position (the same FMAs from zero), reduced by
/// [`hsum4`] as that loop does.
#[inline(always)]
unsafe fn scores4<const GS: usize>(
    rows: &Rows16<'_>,
    len: usize,
    hd: usize,
    scale: f32,
    q: &[f32],
    scores: &mut [f32],
) -> usize {
    let qp = q.as_ptr();
    let mut j = 0;
    while j + 4 <= len {
        prefetch_keys(rows, j, 4, len, hd);
        let r: [usize; 4] = std::array::from_fn(|u| *rows.row.get_unchecked(j + u));
        let mut acc = [[_mm512_setzero_ps(); 2]; GS];
        for c in (0..hd).step_by(8) {
            for p in 0..2 {
                let a = _mm_loadu_si128(rows.kp.add(2 * (r[2 * p] + c)) as *const __m128i);
                let b = _mm_loadu_si128(rows.kp.add(2 * (r[2 * p + 1] + c)) as *const __m128i);
                let k16 =
                    _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b));
                for h in 0..GS {
                    let qh = bcast8(qp.add(h * hd + c));
                    acc[h][p] = _mm512_fmadd_ps(k16, qh, acc[h][p]);
                }
            }
        }
        for h in 0..GS {
            let (a0, a1) = halves(acc[h][0]);
            let (a2, a3) = halves(acc[h][1]);
            let s = _mm_mul_ps(hsum4([a0, a1, a2, a3]), _mm_set1_ps(scale));
            _mm_storeu_ps(scores.as_mut_ptr().add(h * len + j), s);
        }
        j += 4;
    }
    j
}

/// `out[h] = Σ_j p[h][j] · V[j]` in chunks of `CW` registers (16·CW dimensions) per head:
/// every lane is one dimension's FMAs from zero in position order, as in the 256-bit loop.
#[inline(always)]
unsafe fn values<const GS: usize, const CW: usize>(
    rows: &Rows16<'_>,
    len: usize,
    hd: usize,
    out: &mut [f32],
    scores: &[f32],
) {
    let op = out.as_mut_ptr();
    for c in (0..hd).step_by(16 * CW) {
        let mut acc = [[_mm512_setzero_ps(); CW]; GS];
        for j in 0..len {
            let vr = rows.vp.add(2 * (*rows.row.get_unchecked(j) + c));
            prefetch_values(rows, j, len, hd, c, 32 * CW);
            let v16: [__m512; CW] = std::array::from_fn(|w| {
                _mm512_cvtph_ps(_mm256_loadu_si256(vr.add(32 * w) as *const __m256i))
            });
            for h in 0..GS {
                let p = _mm512_set1_ps(*scores.get_unchecked(h * len + j));
                for w in 0..CW {
                    acc[h][w] = _mm512_fmadd_ps(p, v16[w], acc[h][w]);
                }
            }
        }
        for h in 0..GS {
            for w in 0..CW {
                _mm512_storeu_ps(op.add(h * hd + c + 16 * w), acc[h][w]);
            }
        }
    }
}
