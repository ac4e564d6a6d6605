//! AVX2 products of tiled Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS, Q3_K, Q2_K, IQ3_S and IQ2_S weights (see `crate::packed`) with `T`
//! activation rows: eight weight rows per instruction, lane `j` of every vector belonging to
//! row `j`.
//!
//! Integer sums are exact: each format's kernel states how many `pmaddubsw` results its 16-bit
//! lanes may accumulate before widening (Q4_1: 16 products of a 4-bit quant with an 8-bit
//! activation, at most 30 480). 16-bit activations are split as `256 · hi + lo` into two byte
//! operands whose sums are recombined in 32 bits. A block's (or sub-block's) integer sum then
//! meets the rows' scales once, with the same operations in the same order for every token
//! whatever `T`, so an output does not depend on the batch it was computed in.
// Token index `t` and sub-block `h` address accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use crate::act::blocks::{Act16Block, ActBlock, ActSplit16};
use crate::matmul::acts::CallActs;
use crate::matrix::WeightMatrix;
use crate::packed::layout::{IQ3S_SG, TILE_ROWS};
use crate::pool::SharedMut;
use crate::tiles::{
    groups, Iq2S, Iq3S, Iq4Nl, Iq4Xs, Mx4, PassActs, TileAct, TileIsa, Tiles, Q2K, Q3K, Q40, Q41,
    Q4K, Q50, Q51, Q6K, Q80,
};
use crate::x86::iq2s::{iq2s_half, iq2s_index, iq2s_tile, Iq2Grid, Iq2Sums};
use crate::x86::shared::*;
use std::arch::x86_64::*;

/// How far ahead of the tile being read the kernels prefetch, in bytes (rounded up to whole
/// tiles). Decode streams every weight once from memory; a prefetch into L2 (`T1`) rather
/// than L1 leaves the core's few L1 miss slots to the loads themselves, and ~1.3 KB ahead
/// measured best on the 2-core EPYC (`mv_bw`, `layer_bw`, alternating): SmolLM2's four
/// per-layer products 3–7% faster than an L1 prefetch 640 bytes ahead, the 178 MB Q8_0 head of
/// Gemma 3 1–3% faster; 960, 1920 and 4096 bytes, and L1 at 1280, did no better.
pub(crate) const PREFETCH_BYTES: usize = 1280;

/// The AVX2 tile kernels: eight rows per vector, one row group per pass.
pub(crate) struct Avx2;

tile_isa_256!(Avx2, "avx2,fma,f16c", PREFETCH_BYTES);

/// Tokens `0..n` against rows `r0..r1` (whole tile groups) of a tiled matrix, up to four
/// tokens per pass over the chunk's tiles (the accumulators of four tokens fill the sixteen
/// registers), the last pass taking the 1–3 left.
///
/// # Safety
/// AVX2/FMA/F16C are available; [`crate::tiles::has_kernel`] holds for `w.dtype` and `a.path`;
/// `a` holds `n` activation rows; rows `r0..r1` are whole groups inside `w` whose outputs in
/// `y` (`n · rows` floats) this caller alone writes.
pub(crate) unsafe fn tiled_chunk(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let (g0, g1) = (r0 / TILE_ROWS, r1 / TILE_ROWS);
    let mut t = 0;
    while t < n {
        match n - t {
            1 => groups::<Avx2, 1>(w, &PassActs::of(a, t), t, g0, g1, y, rows),
            2 => groups::<Avx2, 2>(w, &PassActs::of(a, t), t, g0, g1, y, rows),
            3 => groups::<Avx2, 3>(w, &PassActs::of(a, t), t, g0, g1, y, rows),
            _ => groups::<Avx2, 4>(w, &PassActs::of(a, t), t, g0, g1, y, rows),
        };
        t += (n - t).min(4);
    }
}

/// Per row (lane), `Σ q · a` of the four nibble vectors at `v` (a Q4_0 or Q4_1 tile's quants)
/// against block `i` of `T` 8-bit activation rows: 16-bit sums (16 products of at most
/// 15 · 127 per lane) widened once.
#[inline(always)]
unsafe fn q4_isum<const T: usize>(v: *const u8, x: &[&[ActBlock]; T], i: usize) -> [__m256i; T] {
    let ones = _mm256_set1_epi16(1);
    let mut s = [_mm256_setzero_si256(); T];
    for k in 0..4 {
        let (lo, hi) = nibbles_at(v.add(32 * k));
        for t in 0..T {
            let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
            let pl = _mm256_maddubs_epi16(lo, bcast4(a.add(4 * k)));
            let ph = _mm256_maddubs_epi16(hi, bcast4(a.add(16 + 4 * k)));
            s[t] = _mm256_add_epi16(s[t], _mm256_add_epi16(pl, ph));
        }
    }
    s.map(|s| _mm256_madd_epi16(s, ones))
}

/// [`q4_isum`] against 16-bit activations split into bytes: unsigned low bytes × the weights
/// (as signed bytes), unsigned weights × the signed high bytes, `Σ = 256 · high + low`.
#[inline(always)]
unsafe fn q4_isum16<const T: usize>(
    v: *const u8,
    x: &[&[ActSplit16]; T],
    i: usize,
) -> [__m256i; T] {
    let ones = _mm256_set1_epi16(1);
    // Per token: low bytes × elements 0..16, low bytes × 16..32, high bytes × all.
    let mut la = [_mm256_setzero_si256(); T];
    let mut lb = [_mm256_setzero_si256(); T];
    let mut h = [_mm256_setzero_si256(); T];
    for k in 0..4 {
        let (wl, wh) = nibbles_at(v.add(32 * k));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
            la[t] = _mm256_add_epi16(la[t], _mm256_maddubs_epi16(bcast4(lo.add(4 * k)), wl));
            lb[t] = _mm256_add_epi16(lb[t], _mm256_maddubs_epi16(bcast4(lo.add(16 + 4 * k)), wh));
            let ph = _mm256_add_epi16(
                _mm256_maddubs_epi16(wl, bcast4(hi.add(4 * k))),
                _mm256_maddubs_epi16(wh, bcast4(hi.add(16 + 4 * k))),
            );
            h[t] = _mm256_add_epi16(h[t], ph);
        }
    }
    std::array::from_fn(|t| {
        let low = _mm256_add_epi32(
            _mm256_madd_epi16(la[t], ones),
            _mm256_madd_epi16(lb[t], ones),
        );
        _mm256_add_epi32(_mm256_slli_epi32(_mm256_madd_epi16(h[t], ones), 8), low)
    })
}

/// Eight tiled Q8_0 rows against `T` rows of 8-bit activation blocks. A `pmaddubsw` pair of
/// two signed 8-bit products can reach 32 512, so each is widened to 32 bits at once
/// (`pmaddwd`); the weights' signs move onto the activations as in the row layout.
impl Tiles<Avx2, ActBlock> for Q80 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m256; T],
    ) {
        let ones = _mm256_set1_epi16(1);
        let mut s = [_mm256_setzero_si256(); T];
        for k in 0..8 {
            let w = _mm256_loadu_si256(p.add(16 + 32 * k) as *const __m256i);
            let aw = _mm256_sign_epi8(w, w);
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                let pr = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(a.add(4 * k)), w));
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(pr, ones));
            }
        }
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let da = _mm256_set1_ps(x[t].get_unchecked(i).d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(d8, da), acc[t]);
        }
    }
}

/// The integer sums of the 32-element formats' 4-bit (Q4_0, Q4_1) and 5-bit (Q5_0, Q5_1)
/// quants against one activation type, so each format's kernel is written once for both.
trait SmallSums: TileAct + Sized {
    /// [`q4_isum`] or [`q4_isum16`].
    unsafe fn q4<const T: usize>(v: *const u8, x: &[&[Self]; T], i: usize) -> [__m256i; T];
    /// [`q5_isum`] or [`q5_isum16`].
    unsafe fn q5<const T: usize>(p5: *const u8, x: &[&[Self]; T], i: usize) -> [__m256i; T];
}

impl SmallSums for ActBlock {
    #[inline(always)]
    unsafe fn q4<const T: usize>(v: *const u8, x: &[&[Self]; T], i: usize) -> [__m256i; T] {
        q4_isum(v, x, i)
    }
    #[inline(always)]
    unsafe fn q5<const T: usize>(p5: *const u8, x: &[&[Self]; T], i: usize) -> [__m256i; T] {
        q5_isum(p5, x, i)
    }
}

impl SmallSums for ActSplit16 {
    #[inline(always)]
    unsafe fn q4<const T: usize>(v: *const u8, x: &[&[Self]; T], i: usize) -> [__m256i; T] {
        q4_isum16(v, x, i)
    }
    #[inline(always)]
    unsafe fn q5<const T: usize>(p5: *const u8, x: &[&[Self]; T], i: usize) -> [__m256i; T] {
        q5_isum16(p5, x, i)
    }
}

/// Eight tiled Q4_0 rows against `T` activation rows: the integer sums of the nibbles (which
/// start at byte 16, after the scales), the offset of 8 folded in as `−8 · d · (d_act · Σq)`.
impl<A: SmallSums> Tiles<Avx2, A> for Q40 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::q4(p.add(16), x, i);
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = offset_in(acc[t], s[t], d8, a.d(), a.dsum(), 8.0);
        }
    }
}

/// Eight tiled Q4_1 rows: the nibbles' sums (from byte 32), then the scales and minimums.
impl<A: SmallSums> Tiles<Avx2, A> for Q41 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::q4(p.add(32), x, i);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = scale_in(acc[t], s[t], p, a.d(), a.dsum());
        }
    }
}

/// Eight tiled Q5_0 rows: the nibbles with each row's fifth bits ORed in (one shift and mask
/// per vector, see `packed::spread_high_bits`), the offset of 16 folded in as
/// `−16 · d · (d_act · Σq)`.
impl<A: SmallSums> Tiles<Avx2, A> for Q50 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::q5(p, x, i);
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = offset_in(acc[t], s[t], d8, a.d(), a.dsum(), 16.0);
        }
    }
}

/// Eight tiled Q5_1 rows: Q5_0's integer sums (16 bytes later in the tile), then Q4_1's
/// scales and minimums.
impl<A: SmallSums> Tiles<Avx2, A> for Q51 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::q5(p.add(16), x, i);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = scale_in(acc[t], s[t], p, a.d(), a.dsum());
        }
    }
}

/// Per row (lane), `Σ q · a` of the 5-bit quants of a Q5_0 tile at `p5` (a Q5_1 tile at
/// `p + 16`: its fifth bits and nibbles follow one more f16 field) against block `i` of `T`
/// 8-bit activation rows: 16-bit sums widened every two vectors (four products of at most
/// 31 · 127 per lane and vector pair stay below 32 768).
#[inline(always)]
unsafe fn q5_isum<const T: usize>(p5: *const u8, x: &[&[ActBlock]; T], i: usize) -> [__m256i; T] {
    let ones = _mm256_set1_epi16(1);
    let mut s = [_mm256_setzero_si256(); T];
    for pair in 0..2 {
        let mut s16 = [_mm256_setzero_si256(); T];
        for k in 2 * pair..2 * pair + 2 {
            let (lo, hi) = q5_quants(p5, k);
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                let pl = _mm256_maddubs_epi16(lo, bcast4(a.add(4 * k)));
                let ph = _mm256_maddubs_epi16(hi, bcast4(a.add(16 + 4 * k)));
                s16[t] = _mm256_add_epi16(s16[t], _mm256_add_epi16(pl, ph));
            }
        }
        for t in 0..T {
            s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(s16[t], ones));
        }
    }
    s
}

/// [`q5_isum`] against 16-bit activations split into bytes: as [`q4_isum16`] with quants up
/// to 31, so the low bytes' 16-bit sums are widened at every vector (two `pmaddubsw`, at most
/// 2 · 2 · 255 · 31 = 31 620 per lane) and the high bytes' every two vectors (4 · 2 · 31 ·
/// 128 = 31 744).
#[inline(always)]
unsafe fn q5_isum16<const T: usize>(
    p5: *const u8,
    x: &[&[ActSplit16]; T],
    i: usize,
) -> [__m256i; T] {
    let ones = _mm256_set1_epi16(1);
    let mut low = [_mm256_setzero_si256(); T];
    let mut high = [_mm256_setzero_si256(); T];
    for pair in 0..2 {
        let mut h16 = [_mm256_setzero_si256(); T];
        for k in 2 * pair..2 * pair + 2 {
            let (wl, wh) = q5_quants(p5, k);
            for t in 0..T {
                let a = x[t].get_unchecked(i);
                let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                let pl = _mm256_add_epi16(
                    _mm256_maddubs_epi16(bcast4(lo.add(4 * k)), wl),
                    _mm256_maddubs_epi16(bcast4(lo.add(16 + 4 * k)), wh),
                );
                low[t] = _mm256_add_epi32(low[t], _mm256_madd_epi16(pl, ones));
                let ph = _mm256_add_epi16(
                    _mm256_maddubs_epi16(wl, bcast4(hi.add(4 * k))),
                    _mm256_maddubs_epi16(wh, bcast4(hi.add(16 + 4 * k))),
                );
                h16[t] = _mm256_add_epi16(h16[t], ph);
            }
        }
        for t in 0..T {
            high[t] = _mm256_add_epi32(high[t], _mm256_madd_epi16(h16[t], ones));
        }
    }
    std::array::from_fn(|t| _mm256_add_epi32(_mm256_slli_epi32(high[t], 8), low[t]))
}

/// Eight tiled Q8_0 rows against `T` rows of 16-bit activation blocks: signed 8-bit × signed
/// 16-bit products need `pmaddwd`, so each vector's quants are widened to 16 bits (once for
/// all tokens) and meet four activation quants per row; the 32-bit sums are exact (at most
/// 32 · 128 · 32 768 per block).
impl Tiles<Avx2, Act16Block> for Q80 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[Act16Block]; T],
        i: usize,
        acc: &mut [__m256; T],
    ) {
        let mut lo = [_mm256_setzero_si256(); T];
        let mut hi = [_mm256_setzero_si256(); T];
        for k in 0..8 {
            let (w0, w1) = q8_words(p, k);
            for t in 0..T {
                let a = bcast4w(x[t].get_unchecked(i).qs.as_ptr().add(4 * k));
                lo[t] = _mm256_add_epi32(lo[t], _mm256_madd_epi16(w0, a));
                hi[t] = _mm256_add_epi32(hi[t], _mm256_madd_epi16(w1, a));
            }
        }
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let da = _mm256_set1_ps(x[t].get_unchecked(i).d);
            let isum = _mm256_cvtepi32_ps(q8_rows(lo[t], hi[t]));
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d8, da), acc[t]);
        }
    }
}

/// Eight tiled Q4_K rows against `T` rows of 8-bit activation blocks (one per 32-element
/// sub-block). Per super-block and pair of sub-blocks, eight nibble vectors feed two 16-bit
/// sums per token (16 products of at most 15 · 127 per lane); each sub-block's sum then meets
/// the rows' scales, `d · sc` and `dmin · m`, converted once per tile for all tokens.
impl Tiles<Avx2, ActBlock> for Q4K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let ones = _mm256_set1_epi16(1);
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        let dmin8 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
        for pair in 0..4 {
            let mut s16 = [[_mm256_setzero_si256(); 2]; T];
            for k in 0..8 {
                let (lo, hi) = nibbles(p.add(128 + 256 * pair), k);
                for t in 0..T {
                    let a0 = x[t].get_unchecked(8 * sb + 2 * pair).qs.as_ptr() as *const u8;
                    let a1 = x[t].get_unchecked(8 * sb + 2 * pair + 1).qs.as_ptr() as *const u8;
                    let p0 = _mm256_maddubs_epi16(lo, bcast4(a0.add(4 * k)));
                    let p1 = _mm256_maddubs_epi16(hi, bcast4(a1.add(4 * k)));
                    s16[t][0] = _mm256_add_epi16(s16[t][0], p0);
                    s16[t][1] = _mm256_add_epi16(s16[t][1], p1);
                }
            }
            for h in 0..2 {
                let s = 2 * pair + h;
                let sc = q4k_scales(p, d8, dmin8, s);
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    let isum = _mm256_madd_epi16(s16[t][h], ones);
                    acc[t] = q4k_in(acc[t], isum, sc, a.d, a.dsum);
                }
            }
        }
    }
}

/// As the Q4_K 8-bit kernel with 16-bit activation blocks split into bytes (see
/// the Q4_1 16-bit kernel): per sub-block the unsigned low bytes are summed four vectors at a time
/// (at most 4 · 2 · 255 · 15 = 30 600 per lane) and the signed high bytes over all eight.
impl Tiles<Avx2, ActSplit16> for Q4K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActSplit16]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let ones = _mm256_set1_epi16(1);
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        let dmin8 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
        for pair in 0..4 {
            // Per token and sub-block of the pair: low bytes (32-bit), high bytes (16-bit).
            let mut low = [[_mm256_setzero_si256(); 2]; T];
            let mut high = [[_mm256_setzero_si256(); 2]; T];
            for half in 0..2 {
                let mut l16 = [[_mm256_setzero_si256(); 2]; T];
                for k in 4 * half..4 * half + 4 {
                    let w = nibbles(p.add(128 + 256 * pair), k);
                    let w = [w.0, w.1];
                    for t in 0..T {
                        for h in 0..2 {
                            let a = x[t].get_unchecked(8 * sb + 2 * pair + h);
                            let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                            let pl = _mm256_maddubs_epi16(bcast4(lo.add(4 * k)), w[h]);
                            let ph = _mm256_maddubs_epi16(w[h], bcast4(hi.add(4 * k)));
                            l16[t][h] = _mm256_add_epi16(l16[t][h], pl);
                            high[t][h] = _mm256_add_epi16(high[t][h], ph);
                        }
                    }
                }
                for t in 0..T {
                    for h in 0..2 {
                        low[t][h] = _mm256_add_epi32(low[t][h], _mm256_madd_epi16(l16[t][h], ones));
                    }
                }
            }
            for h in 0..2 {
                let s = 2 * pair + h;
                let sc = q4k_scales(p, d8, dmin8, s);
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    let hs = _mm256_slli_epi32(_mm256_madd_epi16(high[t][h], ones), 8);
                    acc[t] = q4k_in(acc[t], _mm256_add_epi32(hs, low[t][h]), sc, a.d, a.dsum);
                }
            }
        }
    }
}

/// Sub-blocks `4C..4C + 4` of the Q6_K tile at `p` against 8-bit activations (see the
/// `Tiles<ActBlock>` impl of [`Q6K`]).
#[inline(always)]
unsafe fn q6_quarter_i8<const C: usize, const T: usize>(
    p: *const u8,
    x: &[&[ActBlock]; T],
    sb: usize,
    d8: __m256,
    acc: &mut [__m256; T],
) {
    let ones = _mm256_set1_epi16(1);
    for s in 4 * C..4 * C + 4 {
        let mut s16 = [_mm256_setzero_si256(); T];
        for g in 4 * s..4 * s + 4 {
            let w = q6_group::<C>(p, g);
            let aw = _mm256_sign_epi8(w, w);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + g / 8).qs.as_ptr() as *const u8;
                let pr = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(a.add(4 * (g % 8))), w));
                s16[t] = _mm256_add_epi16(s16[t], pr);
            }
        }
        let dsc = q6_scales(p, d8, s);
        for t in 0..T {
            let da = _mm256_set1_ps(x[t].get_unchecked(8 * sb + s / 2).d);
            let isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[t], ones));
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dsc, da), acc[t]);
        }
    }
}

/// Sub-blocks `4C..4C + 4` of the Q6_K tile at `p` against 16-bit activations split into
/// bytes (see the `Tiles<ActSplit16>` impl of [`Q6K`]).
#[inline(always)]
unsafe fn q6_quarter_i16<const C: usize, const T: usize>(
    p: *const u8,
    x: &[&[ActSplit16]; T],
    sb: usize,
    d8: __m256,
    acc: &mut [__m256; T],
) {
    let ones = _mm256_set1_epi16(1);
    let ones8 = _mm256_set1_epi8(1);
    let bias = _mm256_set1_epi8(-128);
    for s in 4 * C..4 * C + 4 {
        let mut low = [_mm256_setzero_si256(); T];
        let mut high = [_mm256_setzero_si256(); T];
        let mut wsum = _mm256_setzero_si256();
        for half in 0..2 {
            let mut l16 = [_mm256_setzero_si256(); T];
            let mut h16 = [_mm256_setzero_si256(); T];
            for g in 4 * s + 2 * half..4 * s + 2 * half + 2 {
                let w = q6_group::<C>(p, g);
                wsum = _mm256_add_epi16(wsum, _mm256_maddubs_epi16(ones8, w));
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + g / 8);
                    let e = 4 * (g % 8);
                    let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                    let hb = _mm256_xor_si256(bcast4(hi.add(e)), bias);
                    l16[t] = _mm256_add_epi16(l16[t], _mm256_maddubs_epi16(bcast4(lo.add(e)), w));
                    h16[t] = _mm256_add_epi16(h16[t], _mm256_maddubs_epi16(hb, w));
                }
            }
            for t in 0..T {
                low[t] = _mm256_add_epi32(low[t], _mm256_madd_epi16(l16[t], ones));
                high[t] = _mm256_add_epi32(high[t], _mm256_madd_epi16(h16[t], ones));
            }
        }
        let w128 = _mm256_slli_epi32(_mm256_madd_epi16(wsum, ones), 7);
        let dsc = q6_scales(p, d8, s);
        for t in 0..T {
            let a = x[t].get_unchecked(8 * sb + s / 2);
            let hs = _mm256_slli_epi32(_mm256_sub_epi32(high[t], w128), 8);
            let isum = _mm256_cvtepi32_ps(_mm256_add_epi32(hs, low[t]));
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dsc, _mm256_set1_ps(a.d)), acc[t]);
        }
    }
}

/// Eight tiled Q6_K rows against `T` rows of 8-bit activation blocks. Quants are used signed
/// (`q − 32`, |w| ≤ 32) with the signs moved onto the activations, so a sub-block's four
/// `pmaddubsw` (at most 4 · 2 · 32 · 127 = 32 512 per lane) sum in 16 bits.
impl Tiles<Avx2, ActBlock> for Q6K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        q6_quarter_i8::<0, T>(p, x, sb, d8, acc);
        q6_quarter_i8::<1, T>(p, x, sb, d8, acc);
        q6_quarter_i8::<2, T>(p, x, sb, d8, acc);
        q6_quarter_i8::<3, T>(p, x, sb, d8, acc);
    }
}

/// As the Q6_K 8-bit kernel with 16-bit activation blocks split into bytes. The high bytes are
/// signed and may be −128, whose sign cannot move onto a byte, so they are offset to unsigned
/// (`hi + 128`) like the low bytes and the offset is taken back through the rows' quant sums:
/// `Σ a·w = 256·(Σ (hi + 128)·w − 128·Σ w) + Σ lo·w`. Each 16-bit sum spans two groups (at most
/// 2 · 2 · 255 · 32 = 32 640 per lane).
impl Tiles<Avx2, ActSplit16> for Q6K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActSplit16]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        q6_quarter_i16::<0, T>(p, x, sb, d8, acc);
        q6_quarter_i16::<1, T>(p, x, sb, d8, acc);
        q6_quarter_i16::<2, T>(p, x, sb, d8, acc);
        q6_quarter_i16::<3, T>(p, x, sb, d8, acc);
    }
}

/// Eight tiled MXFP4 rows against `T` rows of 8-bit activation blocks: the codes looked up as
/// signed values (|v| ≤ 12) once for all tokens, their signs moved onto the activations as
/// for Q8_0; a 16-bit lane sums eight `pmaddubsw` pairs, at most 16 · 12 · 127 = 24 384, so
/// it is widened once per block. The exact integer sum meets the rows' power-of-two scales.
impl Tiles<Avx2, ActBlock> for Mx4 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m256; T],
    ) {
        let table = mx4_table(0);
        let mut s = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            let (wl, wh) = mx4_values(p, k, table);
            let (al, ah) = (_mm256_sign_epi8(wl, wl), _mm256_sign_epi8(wh, wh));
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                let pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(a.add(4 * k)), wl));
                let ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(a.add(16 + 4 * k)), wh));
                s[t] = _mm256_add_epi16(s[t], _mm256_add_epi16(pl, ph));
            }
        }
        let d8 = e8m0_lanes(p);
        let ones = _mm256_set1_epi16(1);
        for t in 0..T {
            let da = _mm256_set1_ps(x[t].get_unchecked(i).d);
            let isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s[t], ones));
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d8, da), acc[t]);
        }
    }
}

/// Eight tiled MXFP4 rows against `T` rows of 16-bit activation blocks, as Q8_0's: the
/// values widened to 16 bits once for all tokens, `pmaddwd` against four activation quants.
impl Tiles<Avx2, Act16Block> for Mx4 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[Act16Block]; T],
        i: usize,
        acc: &mut [__m256; T],
    ) {
        let table = mx4_table(0);
        let mut lo = [_mm256_setzero_si256(); T];
        let mut hi = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            let (wl, wh) = mx4_values(p, k, table);
            for (w, e) in [(wl, 4 * k), (wh, 16 + 4 * k)] {
                let (w0, w1) = mx4_words(w);
                for t in 0..T {
                    let a = bcast4w(x[t].get_unchecked(i).qs.as_ptr().add(e));
                    lo[t] = _mm256_add_epi32(lo[t], _mm256_madd_epi16(w0, a));
                    hi[t] = _mm256_add_epi32(hi[t], _mm256_madd_epi16(w1, a));
                }
            }
        }
        let d8 = e8m0_lanes(p);
        for t in 0..T {
            let da = _mm256_set1_ps(x[t].get_unchecked(i).d);
            let isum = _mm256_cvtepi32_ps(q8_rows(lo[t], hi[t]));
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d8, da), acc[t]);
        }
    }
}

/// The exact integer sums of one block of 32 IQ4 codes for eight rows (the four nibble vectors
/// at `v`, as Q4_0's) against activation block `blk` of each token: the codes looked up as
/// signed levels (|v| ≤ 127) once for all tokens, their signs moved onto the activations as
/// for MXFP4; a `pmaddubsw` pair may reach 2 · 127 · 127 = 32 258, so each is widened at once.
#[inline(always)]
unsafe fn iq4_sums<const T: usize>(v: *const u8, x: &[&[ActBlock]; T], blk: usize) -> [__m256i; T] {
    let table = iq4_table(0);
    let ones = _mm256_set1_epi16(1);
    let mut s = [_mm256_setzero_si256(); T];
    for k in 0..4 {
        let (wl, wh) = lut_values(v.add(32 * k), table);
        let (al, ah) = (_mm256_sign_epi8(wl, wl), _mm256_sign_epi8(wh, wh));
        for t in 0..T {
            let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
            let pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(a.add(4 * k)), wl));
            let ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(a.add(16 + 4 * k)), wh));
            let pw = _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
            s[t] = _mm256_add_epi32(s[t], pw);
        }
    }
    s
}

/// [`iq4_sums`] against 16-bit activation blocks, as MXFP4's: the levels widened to 16 bits
/// once for all tokens, `pmaddwd` against four activation quants (a lane sums at most 16
/// products of 127 · 32 767: no overflow).
#[inline(always)]
unsafe fn iq4_sums16<const T: usize>(
    v: *const u8,
    x: &[&[Act16Block]; T],
    blk: usize,
) -> [__m256i; T] {
    let table = iq4_table(0);
    let mut lo = [_mm256_setzero_si256(); T];
    let mut hi = [_mm256_setzero_si256(); T];
    for k in 0..4 {
        let (wl, wh) = lut_values(v.add(32 * k), table);
        for (w, e) in [(wl, 4 * k), (wh, 16 + 4 * k)] {
            let (w0, w1) = mx4_words(w);
            for t in 0..T {
                let a = bcast4w(x[t].get_unchecked(blk).qs.as_ptr().add(e));
                lo[t] = _mm256_add_epi32(lo[t], _mm256_madd_epi16(w0, a));
                hi[t] = _mm256_add_epi32(hi[t], _mm256_madd_epi16(w1, a));
            }
        }
    }
    std::array::from_fn(|t| q8_rows(lo[t], hi[t]))
}

impl Iq4Sums<Avx2> for ActBlock {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const T: usize>(v: *const u8, x: &[&[Self]; T], blk: usize) -> [__m256i; T] {
        iq4_sums(v, x, blk)
    }
}

impl Iq4Sums<Avx2> for Act16Block {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const T: usize>(v: *const u8, x: &[&[Self]; T], blk: usize) -> [__m256i; T] {
        iq4_sums16(v, x, blk)
    }
}

/// Eight tiled IQ4_XS rows: `x86::shared::iq4xs_tile` over [`iq4_sums`].
impl<A: Iq4Sums<Avx2>> Tiles<Avx2, A> for Iq4Xs {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        iq4xs_tile::<Avx2, A, T>(p, x, sb, acc)
    }
}

/// IQ3_S group `C`'s exact sums against 8-bit block `blk`: the magnitudes (≤ 15) against the activations carrying the weights' signs (`pmaddubsw` pairs stay below 2 · 15 · 127).
#[inline(always)]
unsafe fn iq3_group<const C: usize, const T: usize>(
    p: *const u8,
    x: &[&[ActBlock]; T],
    blk: usize,
) -> [__m256i; T] {
    let ones = _mm256_set1_epi16(1);
    let sg = _mm256_loadu_si256(p.add(IQ3S_SG + 32 * C) as *const __m256i);
    let mut s = [_mm256_setzero_si256(); T];
    // Chunk by chunk as constants: every shift and shuffle an immediate.
    macro_rules! chunk {
        ($k:literal) => {{
            let (g, m) = iq3s_values::<C, $k>(p, sg);
            let ws = _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
            for t in 0..T {
                let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
                let av = _mm256_sign_epi8(bcast4(a.add(4 * $k)), ws);
                let pw = _mm256_madd_epi16(_mm256_maddubs_epi16(g, av), ones);
                s[t] = _mm256_add_epi32(s[t], pw);
            }
        }};
    }
    chunk!(0);
    chunk!(1);
    chunk!(2);
    chunk!(3);
    chunk!(4);
    chunk!(5);
    chunk!(6);
    chunk!(7);
    s
}

/// IQ3_S's sums against 8-bit activations.
impl Iq3Sums<Avx2> for ActBlock {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const C: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> [__m256i; T] {
        iq3_group::<C, T>(p, x, blk)
    }
}

/// Eight tiled IQ3_S rows: `x86::shared::iq3s_tile` over the sums above.
impl<A: Iq3Sums<Avx2>> Tiles<Avx2, A> for Iq3S {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        iq3s_tile::<Avx2, A, T>(p, x, sb, acc)
    }
}

/// IQ2_S grid entries as two 32-bit gathers per chunk of eight rows (each entry's low and high
/// four bytes).
impl Iq2Grid for Avx2 {
    #[inline(always)]
    unsafe fn magnitudes<const C: usize, const L: usize>(p: *const u8) -> (__m256i, __m256i) {
        let i2 = _mm256_slli_epi32::<1>(iq2s_index::<C, L>(p));
        let grid = crate::iq_grids::IQ2S_GRID.as_ptr() as *const i32;
        (
            _mm256_i32gather_epi32::<4>(grid, i2),
            _mm256_i32gather_epi32::<4>(grid, _mm256_add_epi32(i2, _mm256_set1_epi32(1))),
        )
    }
}

/// IQ2_S half `H` of group `C` against 8-bit block `blk`: the magnitudes (≤ 43) against the
/// activations carrying the weights' signs (`pmaddubsw` pairs stay below 2 · 43 · 128).
impl Iq2Sums<Avx2> for ActBlock {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const C: usize, const H: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> [__m256i; T] {
        let ones = _mm256_set1_epi16(1);
        let w = iq2s_half::<Avx2, C, H>(p);
        let mut s = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            let g = _mm256_abs_epi8(w[k]);
            for t in 0..T {
                let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
                let av = _mm256_sign_epi8(bcast4(a.add(4 * (4 * H + k))), w[k]);
                let pw = _mm256_madd_epi16(_mm256_maddubs_epi16(g, av), ones);
                s[t] = _mm256_add_epi32(s[t], pw);
            }
        }
        s
    }
}

/// Eight tiled IQ2_S rows: `x86::iq2s::iq2s_tile` over the sums above.
impl<A: Iq2Sums<Avx2>> Tiles<Avx2, A> for Iq2S {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        iq2s_tile::<Avx2, A, T>(p, x, sb, acc)
    }
}

/// Eight tiled Q2_K rows: `x86::shared::q2k_tile` over `x86::shared`'s sums by [`IntDot`].
impl<A: Q2Sums<Avx2>> Tiles<Avx2, A> for Q2K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        q2k_tile::<Avx2, A, T>(p, x, sb, acc)
    }
}

/// Eight tiled Q3_K rows: `x86::shared::q3k_tile` over `x86::shared`'s sums by [`IntDot`].
impl<A: Q3Sums<Avx2>> Tiles<Avx2, A> for Q3K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        q3k_tile::<Avx2, A, T>(p, x, sb, acc)
    }
}

/// This instruction set's integer dot steps: `pmaddubsw` then `pmaddwd` by ones (exact for the low-bit sums' operands), `pmaddwd`.
impl IntDot for Avx2 {
    #[inline(always)]
    unsafe fn dot_bytes(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_add_epi32(
            acc,
            _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)),
        )
    }
    #[inline(always)]
    unsafe fn dot_words(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(w, a))
    }
}

/// Eight tiled IQ4_NL rows: `x86::shared::iq4nl_tile` over [`iq4_sums`].
impl<A: Iq4Sums<Avx2>> Tiles<Avx2, A> for Iq4Nl {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        iq4nl_tile::<Avx2, A, T>(p, x, i, acc)
    }
}

#[cfg(test)]
mod tests {
    /// Every e8m0 byte, the two subnormal ones included, converts as the scalar reference.
    #[test]
    fn e8m0_lanes_match_the_scalar_conversion_for_every_byte() {
        if !crate::Isa::detect().avx2() {
            return;
        }
        for base in (0..=255u8).step_by(8) {
            let bytes: [u8; 8] = std::array::from_fn(|i| base.wrapping_add(i as u8));
            let mut got = [0f32; 8];
            // SAFETY: AVX2 was detected; `bytes` holds the eight bytes read.
            unsafe {
                std::arch::x86_64::_mm256_storeu_ps(
                    got.as_mut_ptr(),
                    super::e8m0_lanes(bytes.as_ptr()),
                )
            };
            for (g, &e) in got.iter().zip(&bytes) {
                assert_eq!(
                    g.to_bits(),
                    crate::blocks::e8m0_half(e).to_bits(),
                    "e = {e}"
                );
            }
        }
    }
}
