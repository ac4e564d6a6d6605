//! AVX-512 VNNI products of tiled Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS, Q3_K, Q2_K, IQ3_S and IQ2_S weights: the tile layout,
//! prefetch and scale arithmetic of `crate::x86::avx2::tiles`, with every 8-bit product sum
//! done by `vpdpbusd` (four unsigned × signed byte products added straight into a 32-bit lane).
//!
//! Why a second set: on AVX2 each four-element step is `pmaddubsw` (16-bit, saturating, so sums
//! must be widened every few steps), an add, and periodically `pmaddwd` + add to reach 32 bits;
//! `vpdpbusd` is one instruction and never saturates. AVX-512VL also gives 32 vector registers,
//! so a pass over a row group's tiles serves up to eight tokens instead of four, halving the
//! weight decoding (nibble masks, Q5_0's fifth bits, Q6_K's bit planes) per token in prefill.
//!
//! Every integer sum here equals the AVX2 kernel's exactly (both are exact), and the float
//! steps that follow are the same operations in the same order, so the outputs are the AVX2
//! path's bits: a token's result depends neither on the path nor on the batch around it.
// Token index `t` and sub-block `h` address accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use crate::act::blocks::{Act16Block, ActBlock, ActSplit16};
use crate::packed::layout::IQ3S_SG;
use crate::tiles::{
    Iq2S, Iq2SDec, Iq3S, Iq3SDec, Iq4Nl, Iq4Xs, Mx4, TileAct, TileIsa, Tiles, Q2K, Q3K, Q40, Q41,
    Q4K, Q50, Q51, Q6K, Q80,
};
use crate::x86::iq2s::{
    half_offset, iq2s_combine, iq2s_d, iq2s_half, iq2s_index, iq2s_odd, iq2s_tile, Iq2Grid, Iq2Sums,
};
use crate::x86::shared::*;
use std::arch::x86_64::*;

/// How far ahead of the tile being read the kernels prefetch into L2, in bytes (rounded up to
/// whole tiles). The AVX2 kernels' 1280 was measured on a Zen 3 with 512 KB of L2 per core;
/// on the Zen 5 VM (1 MB of L2, ~2–3× the bandwidth) 3072 read faster, alternating binaries:
/// a 2048×640 Q5_0 product 19–21 → 15–18 µs, decode (seven pairs, medians) SmolLM2 484 → 509
/// tok/s, Gemma 3 202 → 219. The AVX-512 kernels run only on such newer cores.
pub(crate) const PREFETCH_BYTES: usize = 3072;

/// Most tokens one pass over a row group serves (accumulators stay in the 32 registers).
pub(crate) const MAX_TOKENS: usize = 8;

/// `acc + Σ a·b` over each 32-bit lane's four byte pairs, `a` unsigned, `b` signed.
#[inline(always)]
unsafe fn dp(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, a, b)
}

/// The AVX-512 VNNI tile kernels on 256-bit vectors: eight rows per vector, one row group per
/// pass, up to [`MAX_TOKENS`] tokens per pass.
pub(crate) struct Vnni;

tile_isa_256!(
    Vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    PREFETCH_BYTES
);

/// Q8_0: the signed weights are offset to unsigned (`w + 128`, one XOR per vector for all
/// tokens) and the offset taken back through the activation block's quant sum:
/// `Σ w·a = Σ (w + 128)·a − 128 · Σ a`.
impl Tiles<Vnni, ActBlock> for Q80 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m256; T],
    ) {
        let bias = _mm256_set1_epi8(-128);
        let mut s = [_mm256_setzero_si256(); T];
        for k in 0..8 {
            let w = _mm256_loadu_si256(p.add(16 + 32 * k) as *const __m256i);
            let wu = _mm256_xor_si256(w, bias);
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                s[t] = dp(s[t], wu, bcast4(a.add(4 * k)));
            }
        }
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let isum = _mm256_sub_epi32(s[t], _mm256_set1_epi32(128 * a.isum));
            let da = _mm256_set1_ps(a.d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d8, da), acc[t]);
        }
    }
}

/// Vector pair `k` of the quants of a 32-element tile whose quant part starts at byte `o`:
/// four-bit nibbles (Q4_0, Q4_1), or with `FIVE` the fifth-bit vector and then the nibbles
/// with those bits ORed in (Q5_0, Q5_1), as unsigned bytes.
#[inline(always)]
unsafe fn small_quants<const FIVE: bool>(p: *const u8, o: usize, k: usize) -> (__m256i, __m256i) {
    if FIVE {
        q5_quants(p.add(o - 16), k)
    } else {
        nibbles_at(p.add(o + 32 * k))
    }
}

/// Per row (lane), `Σ q · a` of a Q4_0/Q4_1 (or with `FIVE` Q5_0/Q5_1) tile's quants (see
/// [`small_quants`]) against 8-bit activation block `i`: unsigned quants × signed bytes.
#[inline(always)]
unsafe fn small_isum<const FIVE: bool, const T: usize>(
    p: *const u8,
    o: usize,
    x: &[&[ActBlock]; T],
    i: usize,
) -> [__m256i; T] {
    // Two chains per token (low and high nibbles): with one token a single chain of eight
    // dependent `vpdpbusd`s per tile would bound the loop by their latency, not by the loads.
    let mut s = [_mm256_setzero_si256(); T];
    let mut h = [_mm256_setzero_si256(); T];
    for k in 0..4 {
        let (lo, hi) = small_quants::<FIVE>(p, o, k);
        for t in 0..T {
            let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
            s[t] = dp(s[t], lo, bcast4(a.add(4 * k)));
            h[t] = dp(h[t], hi, bcast4(a.add(16 + 4 * k)));
        }
    }
    std::array::from_fn(|t| _mm256_add_epi32(s[t], h[t]))
}

/// [`small_isum`] against 16-bit activations split into bytes: unsigned low bytes × quants
/// (as signed bytes, at most 31) and quants × signed high bytes, `Σ = 256 · high + low`
/// (exact in 32 bits).
#[inline(always)]
unsafe fn small_isum16<const FIVE: bool, const T: usize>(
    p: *const u8,
    o: usize,
    x: &[&[ActSplit16]; T],
    i: usize,
) -> [__m256i; T] {
    // Four chains per token (low/high bytes × low/high nibbles), as in `small_isum`.
    let z = _mm256_setzero_si256();
    let (mut low, mut low2, mut high, mut high2) = ([z; T], [z; T], [z; T], [z; T]);
    for k in 0..4 {
        let (wl, wh) = small_quants::<FIVE>(p, o, k);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
            low[t] = dp(low[t], bcast4(lo.add(4 * k)), wl);
            low2[t] = dp(low2[t], bcast4(lo.add(16 + 4 * k)), wh);
            high[t] = dp(high[t], wl, bcast4(hi.add(4 * k)));
            high2[t] = dp(high2[t], wh, bcast4(hi.add(16 + 4 * k)));
        }
    }
    std::array::from_fn(|t| {
        let high = _mm256_add_epi32(high[t], high2[t]);
        _mm256_add_epi32(
            _mm256_slli_epi32(high, 8),
            _mm256_add_epi32(low[t], low2[t]),
        )
    })
}

/// [`small_isum`] or [`small_isum16`] by activation type, so each 4-/5-bit format's kernel is
/// written once for both (see `x86::avx2::tiles`).
trait SmallSums: TileAct + Sized {
    /// The integer sums of the tile at `p` whose quant part starts at byte `o`.
    unsafe fn sums<const FIVE: bool, const T: usize>(
        p: *const u8,
        o: usize,
        x: &[&[Self]; T],
        i: usize,
    ) -> [__m256i; T];
}

impl SmallSums for ActBlock {
    #[inline(always)]
    unsafe fn sums<const FIVE: bool, const T: usize>(
        p: *const u8,
        o: usize,
        x: &[&[Self]; T],
        i: usize,
    ) -> [__m256i; T] {
        small_isum::<FIVE, T>(p, o, x, i)
    }
}

impl SmallSums for ActSplit16 {
    #[inline(always)]
    unsafe fn sums<const FIVE: bool, const T: usize>(
        p: *const u8,
        o: usize,
        x: &[&[Self]; T],
        i: usize,
    ) -> [__m256i; T] {
        small_isum16::<FIVE, T>(p, o, x, i)
    }
}

/// Q4_0: the nibbles' sums (from byte 16), the offset of 8 as on AVX2.
impl<A: SmallSums> Tiles<Vnni, A> for Q40 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::sums::<false, T>(p, 16, x, i);
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = offset_in(acc[t], s[t], d8, a.d(), a.dsum(), 8.0);
        }
    }
}

/// Q4_1: the nibbles' sums (from byte 32), then the scales and minimums.
impl<A: SmallSums> Tiles<Vnni, A> for Q41 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::sums::<false, T>(p, 32, x, i);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = scale_in(acc[t], s[t], p, a.d(), a.dsum());
        }
    }
}

/// Q5_0: the 5-bit sums, the offset of 16 as on AVX2.
impl<A: SmallSums> Tiles<Vnni, A> for Q50 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::sums::<true, T>(p, 16, x, i);
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = offset_in(acc[t], s[t], d8, a.d(), a.dsum(), 16.0);
        }
    }
}

/// Q5_1: the 5-bit sums (16 bytes later in the tile), then the scales and minimums.
impl<A: SmallSums> Tiles<Vnni, A> for Q51 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        let s = A::sums::<true, T>(p, 32, x, i);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = scale_in(acc[t], s[t], p, a.d(), a.dsum());
        }
    }
}

/// Q8_0 with 16-bit activations: the quants widened to 16 bits as on AVX2, `vpdpwssd` for
/// `pmaddwd` + add.
impl Tiles<Vnni, Act16Block> for Q80 {
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
                lo[t] = _mm256_dpwssd_epi32(lo[t], w0, a);
                hi[t] = _mm256_dpwssd_epi32(hi[t], w1, a);
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

/// Q4_K: per sub-block (the low nibbles of a vector pair's bytes for the even one, the high
/// for the odd), unsigned nibbles × signed activation bytes, then the rows' `d · sc` and
/// `dmin · m` as on AVX2. Sub-blocks are the outer loop so a token needs one integer
/// accumulator at a time.
impl Tiles<Vnni, ActBlock> for Q4K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        let dmin8 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
        for s in 0..8 {
            let (pair, h) = (s / 2, s % 2);
            let mut sum = [_mm256_setzero_si256(); T];
            for k in 0..8 {
                let (lo, hi) = nibbles(p.add(128 + 256 * pair), k);
                let w = if h == 0 { lo } else { hi };
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s).qs.as_ptr() as *const u8;
                    sum[t] = dp(sum[t], w, bcast4(a.add(4 * k)));
                }
            }
            let sc = q4k_scales(p, d8, dmin8, s);
            // As the 512-bit kernel (`tiles_zmm`): Q4_K's activation scales are powers of
            // two, so `dsc · da` is an exponent add where no weight scale is zero.
            let magnitude = _mm256_set1_epi32(0x7FFF_FFFF);
            if _mm256_test_epi32_mask(_mm256_castps_si256(sc.0), magnitude) == 0xFF {
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    let k = _mm256_set1_epi32(a.se);
                    let w = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(sc.0), k));
                    let v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), w, acc[t]);
                    acc[t] = _mm256_fnmadd_ps(sc.1, _mm256_set1_ps(a.dsum), v);
                }
            } else {
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    acc[t] = q4k_in(acc[t], sum[t], sc, a.d, a.dsum);
                }
            }
        }
    }
}

/// Q4_K with 16-bit activations split into bytes, per sub-block as the 8-bit kernel:
/// `Σ = 256 · Σ w·hi + Σ lo·w`.
impl Tiles<Vnni, ActSplit16> for Q4K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActSplit16]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        let dmin8 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
        for s in 0..8 {
            let (pair, h) = (s / 2, s % 2);
            let mut low = [_mm256_setzero_si256(); T];
            let mut high = [_mm256_setzero_si256(); T];
            for k in 0..8 {
                let (lo, hi) = nibbles(p.add(128 + 256 * pair), k);
                let w = if h == 0 { lo } else { hi };
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    let (al, ah) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                    low[t] = dp(low[t], bcast4(al.add(4 * k)), w);
                    high[t] = dp(high[t], w, bcast4(ah.add(4 * k)));
                }
            }
            let sc = q4k_scales(p, d8, dmin8, s);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + s);
                let isum = _mm256_add_epi32(_mm256_slli_epi32(high[t], 8), low[t]);
                acc[t] = q4k_in(acc[t], isum, sc, a.d, a.dsum);
            }
        }
    }
}

/// Sub-blocks `4C..4C + 4` of the Q6_K tile at `p` against 8-bit activations: the unsigned
/// quants (`q + 32`, `0..=63`) straight into `vpdpbusd`, then `32 · Σa` of the sub-block's
/// activations ([`ActBlock::off32`]) taken off the exact integer sum — the same sum the AVX2
/// kernels reach by moving the signs of `q` onto the activations, one instruction per token
/// and group cheaper.
#[inline(always)]
unsafe fn q6_quarter_i8<const C: usize, const T: usize>(
    p: *const u8,
    x: &[&[ActBlock]; T],
    sb: usize,
    d8: __m256,
    acc: &mut [__m256; T],
) {
    for s in 4 * C..4 * C + 4 {
        let mut sum = [_mm256_setzero_si256(); T];
        for g in 4 * s..4 * s + 4 {
            let w = q6_group_u::<C>(p, g);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + g / 8).qs.as_ptr() as *const u8;
                sum[t] = dp(sum[t], w, bcast4(a.add(4 * (g % 8))));
            }
        }
        let dsc = q6_scales(p, d8, s);
        for t in 0..T {
            let a = x[t].get_unchecked(8 * sb + s / 2);
            let da = _mm256_set1_ps(a.d);
            let exact = _mm256_sub_epi32(sum[t], _mm256_set1_epi32(a.off32[s % 2]));
            let isum = _mm256_cvtepi32_ps(exact);
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dsc, da), acc[t]);
        }
    }
}

/// Sub-blocks `4C..4C + 4` of the Q6_K tile at `p` against 16-bit activations split into
/// bytes: the signed high bytes offset to unsigned (`hi + 128`) and the offset taken back
/// through the rows' quant sums, `Σ a·w = 256·(Σ (hi + 128)·w − 128·Σ w) + Σ lo·w`.
#[inline(always)]
unsafe fn q6_quarter_i16<const C: usize, const T: usize>(
    p: *const u8,
    x: &[&[ActSplit16]; T],
    sb: usize,
    d8: __m256,
    acc: &mut [__m256; T],
) {
    let ones8 = _mm256_set1_epi8(1);
    let bias = _mm256_set1_epi8(-128);
    for s in 4 * C..4 * C + 4 {
        let mut low = [_mm256_setzero_si256(); T];
        let mut high = [_mm256_setzero_si256(); T];
        let mut wsum = _mm256_setzero_si256();
        for g in 4 * s..4 * s + 4 {
            let w = q6_group::<C>(p, g);
            wsum = dp(wsum, ones8, w);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + g / 8);
                let e = 4 * (g % 8);
                let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                low[t] = dp(low[t], bcast4(lo.add(e)), w);
                high[t] = dp(high[t], _mm256_xor_si256(bcast4(hi.add(e)), bias), w);
            }
        }
        let w128 = _mm256_slli_epi32(wsum, 7);
        let dsc = q6_scales(p, d8, s);
        for t in 0..T {
            let a = x[t].get_unchecked(8 * sb + s / 2);
            let hs = _mm256_slli_epi32(_mm256_sub_epi32(high[t], w128), 8);
            let isum = _mm256_cvtepi32_ps(_mm256_add_epi32(hs, low[t]));
            acc[t] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dsc, _mm256_set1_ps(a.d)), acc[t]);
        }
    }
}

/// Q6_K against 8-bit activation blocks.
impl Tiles<Vnni, ActBlock> for Q6K {
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

/// Q6_K against 16-bit activation blocks split into bytes.
impl Tiles<Vnni, ActSplit16> for Q6K {
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

/// MXFP4: the codes looked up as unsigned `v + 128` (one `vpshufb` per nibble vector for all
/// tokens; Q8_0's offset, without its XOR) and the offset taken back through the activation
/// block's quant sum, the exact sum of the AVX2 kernel.
impl Tiles<Vnni, ActBlock> for Mx4 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m256; T],
    ) {
        let table = mx4_table(-128);
        let mut s = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            let (wl, wh) = mx4_values(p, k, table);
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                s[t] = dp(s[t], wl, bcast4(a.add(4 * k)));
                s[t] = dp(s[t], wh, bcast4(a.add(16 + 4 * k)));
            }
        }
        let d8 = e8m0_lanes(p);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let isum = _mm256_sub_epi32(s[t], _mm256_set1_epi32(128 * a.isum));
            let da = _mm256_set1_ps(a.d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d8, da), acc[t]);
        }
    }
}

/// MXFP4 with 16-bit activations: the values widened as on AVX2, `vpdpwssd` for `pmaddwd` +
/// add.
impl Tiles<Vnni, Act16Block> for Mx4 {
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
                    lo[t] = _mm256_dpwssd_epi32(lo[t], w0, a);
                    hi[t] = _mm256_dpwssd_epi32(hi[t], w1, a);
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
/// at `v`) against activation block `blk` of each token: the codes looked up as unsigned
/// `v + 128` (MXFP4's offset) and the offset taken back through the block's quant sum — the
/// AVX2 kernel's sums.
#[inline(always)]
unsafe fn iq4_sums<const T: usize>(v: *const u8, x: &[&[ActBlock]; T], blk: usize) -> [__m256i; T] {
    let table = iq4_table(-128);
    let mut s = [_mm256_setzero_si256(); T];
    for k in 0..4 {
        let (wl, wh) = lut_values(v.add(32 * k), table);
        for t in 0..T {
            let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
            s[t] = dp(s[t], wl, bcast4(a.add(4 * k)));
            s[t] = dp(s[t], wh, bcast4(a.add(16 + 4 * k)));
        }
    }
    std::array::from_fn(|t| {
        let isum = x[t].get_unchecked(blk).isum;
        _mm256_sub_epi32(s[t], _mm256_set1_epi32(128 * isum))
    })
}

/// [`iq4_sums`] against 16-bit activation blocks: the levels widened as on AVX2, `vpdpwssd`
/// for `pmaddwd` + add.
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
                lo[t] = _mm256_dpwssd_epi32(lo[t], w0, a);
                hi[t] = _mm256_dpwssd_epi32(hi[t], w1, a);
            }
        }
    }
    std::array::from_fn(|t| q8_rows(lo[t], hi[t]))
}

impl Iq4Sums<Vnni> for ActBlock {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const T: usize>(v: *const u8, x: &[&[Self]; T], blk: usize) -> [__m256i; T] {
        iq4_sums(v, x, blk)
    }
}

impl Iq4Sums<Vnni> for Act16Block {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const T: usize>(v: *const u8, x: &[&[Self]; T], blk: usize) -> [__m256i; T] {
        iq4_sums16(v, x, blk)
    }
}

/// IQ4_XS: `x86::shared::iq4xs_tile` over this file's exact sums (the AVX2 path's bits).
impl<A: Iq4Sums<Vnni>> Tiles<Vnni, A> for Iq4Xs {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        iq4xs_tile::<Vnni, A, T>(p, x, sb, acc)
    }
}

/// IQ3_S group `C`'s exact sums against 8-bit block `blk`: the signed values offset to unsigned (`v + 128`) by `vpdpbusd`, the offset taken back through the block's quant sum (the AVX2 path's exact sums).
#[inline(always)]
unsafe fn iq3_group<const C: usize, const T: usize>(
    p: *const u8,
    x: &[&[ActBlock]; T],
    blk: usize,
) -> [__m256i; T] {
    let sg = _mm256_loadu_si256(p.add(IQ3S_SG + 32 * C) as *const __m256i);
    let mut s = [_mm256_setzero_si256(); T];
    // Chunk by chunk as constants: every shift and shuffle an immediate.
    macro_rules! chunk {
        ($k:literal) => {{
            let (g, m) = iq3s_values::<C, $k>(p, sg);
            let ws = _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
            let w = _mm256_xor_si256(ws, _mm256_set1_epi8(-128));
            for t in 0..T {
                let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
                s[t] = dp(s[t], w, bcast4(a.add(4 * $k)));
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
    std::array::from_fn(|t| {
        let isum = x[t].get_unchecked(blk).isum;
        _mm256_sub_epi32(s[t], _mm256_set1_epi32(128 * isum))
    })
}

/// Decodes the IQ3_S tile at `p` into the [`crate::packed::layout::IQ3_S_DEC_TILE`] bytes at
/// `out`: the scales and values [`iq3_group`] computes, stored once for every pass of a chunk.
///
/// # Safety
/// AVX2 and AVX-512 F/BW/VL are available; `p` points at one IQ3_S tile and `out` at 2304
/// writable bytes.
#[inline(always)]
pub(crate) unsafe fn iq3s_decode_tile(p: *const u8, out: *mut u8) {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    macro_rules! group {
        ($c:literal) => {{
            let o = out.add(288 * $c);
            _mm256_storeu_ps(o as *mut f32, iq3s_scale(p, d8, $c));
            let sg = _mm256_loadu_si256(p.add(IQ3S_SG + 32 * $c) as *const __m256i);
            macro_rules! chunk {
                ($k:literal) => {{
                    let (g, m) = iq3s_values::<$c, $k>(p, sg);
                    let ws = _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
                    let w = _mm256_xor_si256(ws, _mm256_set1_epi8(-128));
                    _mm256_storeu_si256(o.add(32 + 32 * $k) as *mut __m256i, w);
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
        }};
    }
    group!(0);
    group!(1);
    group!(2);
    group!(3);
    group!(4);
    group!(5);
    group!(6);
    group!(7);
}

/// A decoded IQ3_S tile against 8-bit activations: [`iq3_group`]'s exact sums from the stored
/// values, then `iq3s_tile`'s float steps with the stored scales (the same bits).
impl Tiles<Vnni, ActBlock> for Iq3SDec {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        // A group's values stay in registers while the tokens pass, token by token.
        for c in 0..8 {
            let o = p.add(288 * c);
            let blk = 8 * sb + c;
            let w: [__m256i; 8] =
                std::array::from_fn(|k| _mm256_loadu_si256(o.add(32 + 32 * k) as *const __m256i));
            let sc = _mm256_loadu_ps(o as *const f32);
            each_token!(T, |t| {
                let a = x[t].get_unchecked(blk);
                let qs = a.qs.as_ptr() as *const u8;
                let mut s = _mm256_set1_epi32(-128 * a.isum);
                for k in 0..8 {
                    s = dp(s, w[k], bcast4(qs.add(4 * k)));
                }
                let da = _mm256_set1_ps(a.d);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(sc, da), acc[t]);
            });
        }
    }
}

/// IQ3_S's sums against 8-bit activations.
impl Iq3Sums<Vnni> for ActBlock {
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
impl<A: Iq3Sums<Vnni>> Tiles<Vnni, A> for Iq3S {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        iq3s_tile::<Vnni, A, T>(p, x, sb, acc)
    }
}

/// IQ2_S grid entries as one 64-bit gather per chunk of eight rows (lane `j` row `j`'s eight
/// values), split into its low and high four bytes per row by one permute.
impl Iq2Grid for Vnni {
    #[inline(always)]
    unsafe fn magnitudes<const C: usize, const L: usize>(p: *const u8) -> (__m256i, __m256i) {
        let idx = iq2s_index::<C, L>(p);
        let grid = crate::iq_grids::IQ2S_GRID.as_ptr() as *const i64;
        let q = _mm512_i32gather_epi64::<8>(idx, grid);
        let split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
        let v = _mm512_permutexvar_epi32(split, q);
        (_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
    }
}

/// IQ2_S half `H` of group `C`'s signed values as `vpdpbusd`'s unsigned operand (`v + 128`).
#[inline(always)]
unsafe fn iq2s_offset<const C: usize, const H: usize>(p: *const u8) -> [__m256i; 4] {
    iq2s_half::<Vnni, C, H>(p).map(|w| _mm256_xor_si256(w, _mm256_set1_epi8(-128)))
}

/// IQ2_S half `H` of group `C` against 8-bit block `blk`: the values offset to unsigned by
/// `vpdpbusd`, the offset taken back through the half's activation sum (the AVX2 path's exact
/// sums).
impl Iq2Sums<Vnni> for ActBlock {
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
        let w = iq2s_offset::<C, H>(p);
        let mut s: [__m256i; T] =
            std::array::from_fn(|t| _mm256_set1_epi32(-half_offset(x[t].get_unchecked(blk), H)));
        for k in 0..4 {
            for t in 0..T {
                let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
                s[t] = dp(s[t], w[k], bcast4(a.add(4 * (4 * H + k))));
            }
        }
        s
    }
}

/// Eight tiled IQ2_S rows: `x86::iq2s::iq2s_tile` over the sums above.
impl<A: Iq2Sums<Vnni>> Tiles<Vnni, A> for Iq2S {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        iq2s_tile::<Vnni, A, T>(p, x, sb, acc)
    }
}

/// Decodes the IQ2_S tile at `p` into the [`crate::packed::layout::IQ2_S_DEC_TILE`] bytes at
/// `out`: the rows' `d / 8`, then per group the odd scale factors and offset values
/// [`iq2s_tile`] computes, stored once for every pass of a chunk.
///
/// # Safety
/// AVX2 and AVX-512 F/BW/VL are available; `p` points at one IQ2_S tile and `out` at
/// `IQ2_S_DEC_TILE` writable bytes.
#[inline(always)]
pub(crate) unsafe fn iq2s_decode_tile(p: *const u8, out: *mut u8) {
    _mm256_storeu_ps(out as *mut f32, iq2s_d(p));
    macro_rules! group {
        ($c:literal) => {{
            let o = out.add(32 + 320 * $c);
            _mm256_storeu_si256(o as *mut __m256i, iq2s_odd(p, $c, 0));
            _mm256_storeu_si256(o.add(32) as *mut __m256i, iq2s_odd(p, $c, 1));
            let h0 = iq2s_offset::<$c, 0>(p);
            let h1 = iq2s_offset::<$c, 1>(p);
            for k in 0..4 {
                _mm256_storeu_si256(o.add(64 + 32 * k) as *mut __m256i, h0[k]);
                _mm256_storeu_si256(o.add(192 + 32 * k) as *mut __m256i, h1[k]);
            }
        }};
    }
    group!(0);
    group!(1);
    group!(2);
    group!(3);
    group!(4);
    group!(5);
    group!(6);
    group!(7);
}

/// A decoded IQ2_S tile against 8-bit activations: [`Iq2Sums`]' exact sums from the stored
/// values, then [`iq2s_tile`]'s integer combination and float step with the stored scale
/// factors (the same bits).
impl Tiles<Vnni, ActBlock> for Iq2SDec {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        p: *const u8,
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m256; T],
    ) {
        let d = _mm256_loadu_ps(p as *const f32);
        // A group's values stay in registers while the tokens pass, token by token.
        for c in 0..8 {
            let o = p.add(32 + 320 * c);
            let blk = 8 * sb + c;
            let w: [__m256i; 8] =
                std::array::from_fn(|k| _mm256_loadu_si256(o.add(64 + 32 * k) as *const __m256i));
            let odd0 = _mm256_loadu_si256(o as *const __m256i);
            let odd1 = _mm256_loadu_si256(o.add(32) as *const __m256i);
            each_token!(T, |t| {
                let a = x[t].get_unchecked(blk);
                let qs = a.qs.as_ptr() as *const u8;
                let mut s0 = _mm256_set1_epi32(-half_offset(a, 0));
                let mut s1 = _mm256_set1_epi32(-half_offset(a, 1));
                for k in 0..4 {
                    s0 = dp(s0, w[k], bcast4(qs.add(4 * k)));
                    s1 = dp(s1, w[4 + k], bcast4(qs.add(16 + 4 * k)));
                }
                let si = iq2s_combine(s0, odd0, s1, odd1);
                let da = _mm256_set1_ps(a.d);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(d, da), acc[t]);
            });
        }
    }
}

/// Eight tiled Q2_K rows: `x86::shared::q2k_tile` over `x86::shared`'s sums by [`IntDot`].
impl<A: Q2Sums<Vnni>> Tiles<Vnni, A> for Q2K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        q2k_tile::<Vnni, A, T>(p, x, sb, acc)
    }
}

/// Eight tiled Q3_K rows: `x86::shared::q3k_tile` over `x86::shared`'s sums by [`IntDot`].
impl<A: Q3Sums<Vnni>> Tiles<Vnni, A> for Q3K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], sb: usize, acc: &mut [__m256; T]) {
        q3k_tile::<Vnni, A, T>(p, x, sb, acc)
    }
}

/// This instruction set's integer dot steps: `vpdpbusd`, `vpdpwssd`.
impl IntDot for Vnni {
    #[inline(always)]
    unsafe fn dot_bytes(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        dp(acc, w, a)
    }
    #[inline(always)]
    unsafe fn dot_words(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, w, a)
    }
}

/// IQ4_NL: `x86::shared::iq4nl_tile` over this file's exact sums (the AVX2 path's bits).
impl<A: Iq4Sums<Vnni>> Tiles<Vnni, A> for Iq4Nl {
    #[inline(always)]
    unsafe fn tile<const T: usize>(p: *const u8, x: &[&[A]; T], i: usize, acc: &mut [__m256; T]) {
        iq4nl_tile::<Vnni, A, T>(p, x, i, acc)
    }
}
