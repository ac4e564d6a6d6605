//! x86 helpers that more than one instruction set's kernels use: horizontal sums, f16
//! loads, prefetches, and the 256-bit pieces of tile arithmetic (nibble unpacking, scale
//! vectors, the k-quant and MXFP4 decoders) that both the AVX2 and the AVX-512 VNNI tile
//! kernels build on. They live here rather than in one ISA's folder so that no kernel file
//! borrows from another's: every folder imports this module and nothing beside it.
#![allow(clippy::needless_range_loop)]

use crate::act::blocks::{Act16Block, ActBlock};
use crate::packed::layout::{
    IQ3S_QH, IQ3S_QS, IQ3S_SC, IQ3S_SG, IQ4XS_QS, Q2K_QS, Q2K_SC, Q3K_HM, Q3K_QS, Q3K_SC, Q6K_HIGH,
    Q6K_LOW,
};
use std::arch::x86_64::*;

/// Sum of the eight lanes, in a fixed order (low half + high half, then pairs).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The f16 at `p` (little-endian) as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_ptr(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Prefetches the cache lines of `bytes` bytes from `p` (never faults, so `p` may run past the
/// matrix). Consecutive spans cover every line between them, whatever the block size.
#[inline(always)]
pub(crate) unsafe fn prefetch_l1(p: *const u8, bytes: usize) {
    let mut o = 0;
    while o < bytes {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8);
        o += 64;
    }
}

// The 256-bit pieces of tile arithmetic (see `crate::packed` for the tile layouts).

/// Prefetches the cache lines of `bytes` bytes from `p` into L2 (never faults: a prefetch
/// past the end of the weights is harmless).
#[inline(always)]
pub(crate) unsafe fn prefetch_l2(p: *const u8, bytes: usize) {
    let mut o = 0;
    while o < bytes {
        _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(o) as *const i8);
        o += 64;
    }
}

/// Four activation bytes (a 32-bit little-endian word at `p`) in every lane.
#[inline(always)]
pub(crate) unsafe fn bcast4(p: *const u8) -> __m256i {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
}

/// The quant nibbles of vector `k` of the tile at `p`: (elements `4k..4k+4`, elements
/// `16+4k..16+4k+4`) of each row, unsigned bytes.
#[inline(always)]
pub(crate) unsafe fn nibbles(p: *const u8, k: usize) -> (__m256i, __m256i) {
    nibbles_at(p.add(32 + 32 * k))
}

/// The low and high nibbles of the 32 bytes at `v`, as unsigned bytes.
#[inline(always)]
pub(crate) unsafe fn nibbles_at(v: *const u8) -> (__m256i, __m256i) {
    let mask = _mm256_set1_epi8(0x0F);
    let v = _mm256_loadu_si256(v as *const __m256i);
    (
        _mm256_and_si256(v, mask),
        _mm256_and_si256(_mm256_srli_epi16(v, 4), mask),
    )
}

/// A block's integer sums into the accumulator for a format whose quants carry a constant
/// offset (Q4_0: 8, Q5_0: 16): `acc + isum · (d · da) − off · d · dsum`, `dsum = da · Σq` being
/// the activation block's precomputed product (the same rounding as computing it here).
#[inline(always)]
pub(crate) unsafe fn offset_in(
    acc: __m256,
    isum: __m256i,
    d8: __m256,
    da: f32,
    dsum: f32,
    off: f32,
) -> __m256 {
    let acc = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(isum),
        _mm256_mul_ps(d8, _mm256_set1_ps(da)),
        acc,
    );
    _mm256_fnmadd_ps(d8, _mm256_set1_ps(off * dsum), acc)
}

/// A block's integer sums and the rows' scales into the accumulator:
/// `acc + isum · (d · da) + m · dsum` (`dsum = da · Σq`, precomputed).
#[inline(always)]
pub(crate) unsafe fn scale_in(
    acc: __m256,
    isum: __m256i,
    p: *const u8,
    da: f32,
    dsum: f32,
) -> __m256 {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    let m8 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
    let acc = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(isum),
        _mm256_mul_ps(d8, _mm256_set1_ps(da)),
        acc,
    );
    _mm256_fmadd_ps(m8, _mm256_set1_ps(dsum), acc)
}

/// The quants (0..32) of vector pair `k` of the Q5_0 tile at `p`: (elements `4k..4k+4`,
/// `16+4k..16+4k+4`) of each row, the nibbles with the fifth bits ORed in.
#[inline(always)]
pub(crate) unsafe fn q5_quants(p: *const u8, k: usize) -> (__m256i, __m256i) {
    let bit4 = _mm256_set1_epi8(0x10);
    let h = _mm256_loadu_si256(p.add(16) as *const __m256i);
    let (lo, hi) = nibbles(p.add(16), k);
    (
        _mm256_or_si256(lo, _mm256_and_si256(shl16(h, 4 - k), bit4)),
        _mm256_or_si256(hi, _mm256_and_si256(shr16(h, k), bit4)),
    )
}

/// Per row of a Q8_0 tile's vector `k` (at `p`): its four signed quants widened to 16 bits,
/// rows 0..4 in the first vector and 4..8 in the second (row `r`'s in 32-bit lanes `2r % 8`,
/// `2r % 8 + 1`).
#[inline(always)]
pub(crate) unsafe fn q8_words(p: *const u8, k: usize) -> (__m256i, __m256i) {
    let w = _mm256_loadu_si256(p.add(16 + 32 * k) as *const __m256i);
    (
        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(w)),
    )
}

/// Four 16-bit activation quants (at `a`) in every 64-bit lane.
#[inline(always)]
pub(crate) unsafe fn bcast4w(a: *const i16) -> __m256i {
    _mm256_set1_epi64x((a as *const i64).read_unaligned())
}

/// Per-row sums from [`q8_words`] products (`lo`: rows 0..4, `hi`: rows 4..8, two partial sums
/// per row in adjacent lanes) as one lane per row, in row order.
#[inline(always)]
pub(crate) unsafe fn q8_rows(lo: __m256i, hi: __m256i) -> __m256i {
    // hadd: [r0, r1, r4, r5 | r2, r3, r6, r7].
    _mm256_permutevar8x32_epi32(
        _mm256_hadd_epi32(lo, hi),
        _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7),
    )
}

/// 16-bit lanes of `v` shifted left by `n` (0..=4) bits.
#[inline(always)]
pub(crate) unsafe fn shl16(v: __m256i, n: usize) -> __m256i {
    _mm256_sll_epi16(v, _mm_cvtsi32_si128(n as i32))
}

/// 16-bit lanes of `v` shifted right (logically) by `n` (0..=3) bits.
#[inline(always)]
pub(crate) unsafe fn shr16(v: __m256i, n: usize) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32))
}

/// Sub-block `s`'s scales of the eight rows of the Q4_K tile at `p`: (`d · sc`, `dmin · m`).
#[inline(always)]
pub(crate) unsafe fn q4k_scales(
    p: *const u8,
    d8: __m256,
    dmin8: __m256,
    s: usize,
) -> (__m256, __m256) {
    let sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(32 + 8 * s) as *const __m128i));
    let m = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(96 + 8 * s) as *const __m128i));
    (
        _mm256_mul_ps(d8, _mm256_cvtepi32_ps(sc)),
        _mm256_mul_ps(dmin8, _mm256_cvtepi32_ps(m)),
    )
}

/// A Q4_K sub-block's integer sums into the accumulator: `acc + isum · (d·sc · da) − dmin·m ·
/// dsum` (`dsum = da · Σq`, precomputed; `fnmadd` rounds as `fmadd` with `−dsum` does).
#[inline(always)]
pub(crate) unsafe fn q4k_in(
    acc: __m256,
    isum: __m256i,
    sc: (__m256, __m256),
    da: f32,
    dsum: f32,
) -> __m256 {
    let (dsc, dm) = sc;
    let acc = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(isum),
        _mm256_mul_ps(dsc, _mm256_set1_ps(da)),
        acc,
    );
    _mm256_fnmadd_ps(dm, _mm256_set1_ps(dsum), acc)
}

/// The signed 6-bit quants (`q − 32`) of element group `g` (0..64, elements `4g..4g+4`) of
/// every row of the Q6_K tile at `p`, for `g` in quarter `C = g / 16` of the super-block: low
/// nibbles from vector `g % 32` (its low nibbles in the first half, high in the second), the
/// top two bits from vector `g % 16` of the high-bit plane (bits `2C..2C+2`). `C` is a
/// compile-time constant so every shift is an immediate (with `g / 16` computed at run time
/// the group loop carried a branch and a shift-count move per group, and ran ~1.5× slower).
#[inline(always)]
pub(crate) unsafe fn q6_group<const C: usize>(p: *const u8, g: usize) -> __m256i {
    _mm256_sub_epi8(q6_group_u::<C>(p, g), _mm256_set1_epi8(32))
}

/// [`q6_group`] before the −32: the unsigned 6-bit quants `0..=63`.
#[inline(always)]
pub(crate) unsafe fn q6_group_u<const C: usize>(p: *const u8, g: usize) -> __m256i {
    let n = _mm256_loadu_si256(p.add(Q6K_LOW + 32 * (g % 32)) as *const __m256i);
    let h = _mm256_loadu_si256(p.add(Q6K_HIGH + 32 * (g % 16)) as *const __m256i);
    let n = if C >= 2 { _mm256_srli_epi16::<4>(n) } else { n };
    let lo = _mm256_and_si256(n, _mm256_set1_epi8(0x0F));
    // Bits 2C..2C+2 of each byte to bits 4..6: shift by 4 − 2C (either way), then mask.
    let hs = match C {
        0 => _mm256_slli_epi16::<4>(h),
        1 => _mm256_slli_epi16::<2>(h),
        2 => h,
        _ => _mm256_srli_epi16::<2>(h),
    };
    let hi = _mm256_and_si256(hs, _mm256_set1_epi8(0x30));
    _mm256_or_si256(lo, hi)
}

/// The eight rows' scales of sub-block `s` times their `d`, as f32 lanes.
#[inline(always)]
pub(crate) unsafe fn q6_scales(p: *const u8, d8: __m256, s: usize) -> __m256 {
    let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(16 + 8 * s) as *const __m128i));
    _mm256_mul_ps(d8, _mm256_cvtepi32_ps(sc))
}

/// The eight rows' MXFP4 scales (the e8m0 bytes at `p`) as f32 lanes, `2^(e − 128)` exactly
/// as [`crate::blocks::e8m0_half`] gives them: the exponent field `e − 1`, or for `e < 2` the
/// subnormal `2^21 << e` bit pattern.
#[inline(always)]
pub(crate) unsafe fn e8m0_lanes(p: *const u8) -> __m256 {
    let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
}

/// The 16 MXFP4 values as bytes in both 128-bit halves (for `vpshufb`), each plus `off`.
#[inline(always)]
pub(crate) unsafe fn mx4_table(off: i8) -> __m256i {
    let k = crate::blocks::MXFP4_VALUES.map(|v| v.wrapping_add(off));
    let t = _mm_setr_epi8(
        k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13],
        k[14], k[15],
    );
    _mm256_set_m128i(t, t)
}

/// Vector `k` of an MXFP4 tile looked up in `table`: (elements `4k..4k+4`, elements
/// `16+4k..16+4k+4`) of each row — the Q8_0 tile's vectors `k` and `k + 4`.
#[inline(always)]
pub(crate) unsafe fn mx4_values(p: *const u8, k: usize, table: __m256i) -> (__m256i, __m256i) {
    let (lo, hi) = nibbles_at(p.add(8 + 32 * k));
    (
        _mm256_shuffle_epi8(table, lo),
        _mm256_shuffle_epi8(table, hi),
    )
}

/// A looked-up MXFP4 vector widened to 16 bits: rows 0..4 and rows 4..8 (as [`q8_words`]).
#[inline(always)]
pub(crate) unsafe fn mx4_words(w: __m256i) -> (__m256i, __m256i) {
    (
        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(w)),
    )
}

/// The 16 IQ4 levels as bytes in both 128-bit halves (for `vpshufb`), each plus `off`.
#[inline(always)]
pub(crate) unsafe fn iq4_table(off: i8) -> __m256i {
    let k = crate::lowbit::IQ4_VALUES.map(|v| v.wrapping_add(off));
    let t = _mm_setr_epi8(
        k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13],
        k[14], k[15],
    );
    _mm256_set_m128i(t, t)
}

/// The nibble vector at `v` (as Q4_0's tiles: elements `4k..4k+4` in the low nibbles,
/// `16+4k..16+4k+4` in the high ones, for each row) looked up in `table`.
#[inline(always)]
pub(crate) unsafe fn lut_values(v: *const u8, table: __m256i) -> (__m256i, __m256i) {
    let (lo, hi) = nibbles_at(v);
    (
        _mm256_shuffle_epi8(table, lo),
        _mm256_shuffle_epi8(table, hi),
    )
}

/// An IQ4_XS tile's scale fields for the eight rows, one row per 32-bit lane: `d` as f32,
/// `scales_h`, `scales_l` (see [`iq4xs_scale`]).
#[inline(always)]
pub(crate) unsafe fn iq4xs_fields(p: *const u8) -> (__m256, __m256i, __m256i) {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(16) as *const __m128i));
    let l = _mm256_loadu_si256(p.add(32) as *const __m256i);
    (d8, h, l)
}

/// The eight rows' scale of sub-block `c`, `d · (ls − 32)` (exact in f32: an f16 times a
/// 6-bit integer), from [`iq4xs_fields`]; `ls` is bits `4c..4c+4` of `scales_l` and bits
/// `2c..2c+2` of `scales_h` above them.
#[inline(always)]
pub(crate) unsafe fn iq4xs_scale(f: (__m256, __m256i, __m256i), c: usize) -> __m256 {
    let (d8, h, l) = f;
    let lo = _mm256_and_si256(
        _mm256_srlv_epi32(l, _mm256_set1_epi32(4 * c as i32)),
        _mm256_set1_epi32(0x0F),
    );
    let hi = _mm256_and_si256(
        _mm256_srlv_epi32(h, _mm256_set1_epi32(2 * c as i32)),
        _mm256_set1_epi32(3),
    );
    let ls = _mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi));
    _mm256_mul_ps(
        d8,
        _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))),
    )
}

/// An activation block type's IQ4 sums on instruction set `I` (8- or 16-bit blocks): the exact
/// integer sums of one block of 32 codes for eight rows (the four nibble vectors at `v`)
/// against block `blk` of each token. Each ISA's folder implements it; the tile bodies below
/// ([`iq4xs_tile`], [`iq4nl_tile`]) are the same on every ISA.
pub(crate) trait Iq4Sums<I>: Sized {
    /// The block's scale.
    fn scale(&self) -> f32;
    /// The sums (see the trait).
    ///
    /// # Safety
    /// `I`'s features are available; `v` points at four 32-byte nibble vectors; every `x[t]`
    /// holds block `blk`.
    unsafe fn sums<const T: usize>(v: *const u8, x: &[&[Self]; T], blk: usize) -> [__m256i; T];
}

/// Eight tiled IQ4_XS rows (the super-block tile at `p`), sub-block by sub-block: each
/// sub-block's exact sums meet the rows' `d · (ls − 32)` times the activation scale.
#[inline(always)]
pub(crate) unsafe fn iq4xs_tile<I, A: Iq4Sums<I>, const T: usize>(
    p: *const u8,
    x: &[&[A]; T],
    sb: usize,
    acc: &mut [__m256; T],
) {
    let fields = iq4xs_fields(p);
    for c in 0..8 {
        let s = A::sums(p.add(IQ4XS_QS + 128 * c), x, 8 * sb + c);
        let sc = iq4xs_scale(fields, c);
        for t in 0..T {
            let da = _mm256_set1_ps(x[t].get_unchecked(8 * sb + c).scale());
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(sc, da), acc[t]);
        }
    }
}

/// Eight tiled IQ4_NL rows (Q4_0's tile: the rows' f16 scales, then four nibble vectors): the
/// exact sums times `d · da`.
#[inline(always)]
pub(crate) unsafe fn iq4nl_tile<I, A: Iq4Sums<I>, const T: usize>(
    p: *const u8,
    x: &[&[A]; T],
    i: usize,
    acc: &mut [__m256; T],
) {
    let s = A::sums(p.add(16), x, i);
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    for t in 0..T {
        let da = _mm256_set1_ps(x[t].get_unchecked(i).scale());
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(d8, da), acc[t]);
    }
}

/// Chunk `k` (elements `4k..4k + 4`) of element group `c` (elements `32c..32c + 32`) of the
/// eight rows of the Q3_K tile at `p`: each quant plus 4 (0..8) as an unsigned byte, lane `j`
/// row `j`'s four. The two low bits are bits `2·(c % 4)..` of the qs vector, the third bit
/// `c` of the hmask vector moved to bit 2 (16-bit shifts by at most five places keep every
/// byte's bit 2 inside its byte).
#[inline(always)]
pub(crate) unsafe fn q3k_values<const C: usize>(p: *const u8, k: usize) -> __m256i {
    let qs = _mm256_loadu_si256(p.add(Q3K_QS + 32 * (8 * (C / 4) + k)) as *const __m256i);
    let hm = _mm256_loadu_si256(p.add(Q3K_HM + 32 * k) as *const __m256i);
    // Shift counts from the constant `C` (folded to immediates).
    let low = _mm256_and_si256(
        _mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * (C % 4) as i32)),
        _mm256_set1_epi8(3),
    );
    let high = if C <= 2 {
        _mm256_sll_epi16(hm, _mm_cvtsi32_si128((2 - C) as i32))
    } else {
        _mm256_srl_epi16(hm, _mm_cvtsi32_si128((C - 2) as i32))
    };
    _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(4)))
}

/// The three scale vectors of the Q3_K tile at `p` (vector `v`, lane `j`: row `j`'s scale
/// bytes `4v..4v + 4`).
#[inline(always)]
pub(crate) unsafe fn q3k_scale_bytes(p: *const u8) -> [__m256i; 3] {
    std::array::from_fn(|v| _mm256_loadu_si256(p.add(Q3K_SC + 32 * v) as *const __m256i))
}

/// Sub-block `s`'s scale of the eight rows (lane `j`: row `j`'s, offset removed, −32..32), from
/// [`q3k_scale_bytes`]: the low nibble of `scales[s % 8] >> 4·(s / 8)`, the two bits of
/// `scales[8 + s % 4] >> 2·(s / 4)` above it (`crate::lowbit::q3_scales`).
#[inline(always)]
pub(crate) unsafe fn q3k_scale(v: &[__m256i; 3], s: usize) -> __m256i {
    let shr = |x: __m256i, n: usize| _mm256_srl_epi32(x, _mm_cvtsi32_si128(n as i32));
    let lo = _mm256_and_si256(
        shr(v[(s % 8) / 4], 8 * (s % 4) + 4 * (s / 8)),
        _mm256_set1_epi32(0x0F),
    );
    let hi = _mm256_and_si256(shr(v[2], 8 * (s % 4) + 2 * (s / 4)), _mm256_set1_epi32(3));
    _mm256_sub_epi32(
        _mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi)),
        _mm256_set1_epi32(32),
    )
}

/// An activation block type's Q3_K sums on instruction set `I` (8- or 16-bit blocks): the
/// exact integer sums of half `h` (elements `16h..16h + 16`, one sub-block scale) of element
/// group `c` of the eight rows of a Q3_K tile (signed quants, −4..4) against block `blk` of
/// each token. Each ISA's folder implements it; [`q3k_tile`] is the same on every ISA.
pub(crate) trait Q3Sums<I>: Sized {
    /// The block's scale.
    fn scale(&self) -> f32;
    /// The sums (see the trait).
    ///
    /// # Safety
    /// `I`'s features are available; `p` points at a Q3_K tile; every `x[t]` holds block
    /// `blk`.
    unsafe fn sums<const C: usize, const H: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> [__m256i; T];
}

/// Eight tiled Q3_K rows (the super-block tile at `p`), half group by half group: each half's
/// exact sum (below 2²⁴: 16 · 4 · 32 767 with 16-bit activations) times its rows' `d · sc`
/// (exact in f32: an f16 times a 6-bit integer) times the activation scale, one FMA.
#[inline(always)]
pub(crate) unsafe fn q3k_tile<I, A: Q3Sums<I>, const T: usize>(
    p: *const u8,
    x: &[&[A]; T],
    sb: usize,
    acc: &mut [__m256; T],
) {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    let sv = q3k_scale_bytes(p);
    // Group and half as constants: every shift an immediate, every accumulator a register.
    macro_rules! half {
        ($c:literal, $h:literal) => {{
            let blk = 8 * sb + $c;
            let s = A::sums::<$c, $h, T>(p, x, blk);
            let sc = _mm256_mul_ps(d8, _mm256_cvtepi32_ps(q3k_scale(&sv, 2 * $c + $h)));
            for t in 0..T {
                let da = _mm256_set1_ps(x[t].get_unchecked(blk).scale());
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(sc, da), acc[t]);
            }
        }};
    }
    half!(0, 0);
    half!(0, 1);
    half!(1, 0);
    half!(1, 1);
    half!(2, 0);
    half!(2, 1);
    half!(3, 0);
    half!(3, 1);
    half!(4, 0);
    half!(4, 1);
    half!(5, 0);
    half!(5, 1);
    half!(6, 0);
    half!(6, 1);
    half!(7, 0);
    half!(7, 1);
}

/// Chunk `k` (elements `4k..4k + 4`) of element group `C` of the eight rows of the Q2_K tile
/// at `p`: each quant (0..4) as an unsigned byte, lane `j` row `j`'s four.
#[inline(always)]
pub(crate) unsafe fn q2k_values<const C: usize>(p: *const u8, k: usize) -> __m256i {
    let qs = _mm256_loadu_si256(p.add(Q2K_QS + 32 * (8 * (C / 4) + k)) as *const __m256i);
    // Shift count from the constant `C` (folded to an immediate).
    _mm256_and_si256(
        _mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * (C % 4) as i32)),
        _mm256_set1_epi8(3),
    )
}

/// Sub-block `s`'s scale and minimum of the eight rows of the Q2_K tile at `p` (lane `j`: row
/// `j`'s, the low and high nibble of its `scales[s]`).
#[inline(always)]
pub(crate) unsafe fn q2k_scale_min(p: *const u8, s: usize) -> (__m256i, __m256i) {
    let v = _mm256_loadu_si256(p.add(Q2K_SC + 32 * (s / 4)) as *const __m256i);
    let b = _mm256_srl_epi32(v, _mm_cvtsi32_si128(8 * (s % 4) as i32));
    (
        _mm256_and_si256(b, _mm256_set1_epi32(0x0F)),
        _mm256_and_si256(_mm256_srli_epi32::<4>(b), _mm256_set1_epi32(0x0F)),
    )
}

/// The sum of the sixteen 16-bit activation quants at `a` (exact: at most 16 · 32 768).
#[inline(always)]
pub(crate) unsafe fn sum16_i16(a: *const i16) -> i32 {
    let v = _mm256_madd_epi16(
        _mm256_loadu_si256(a as *const __m256i),
        _mm256_set1_epi16(1),
    );
    let h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32::<1>(h)))
}

/// An activation block type's Q2_K sums on instruction set `I`: the exact integer sums of half
/// `H` of element group `C` of the eight rows of a Q2_K tile (quants 0..4) against block `blk`
/// of each token, and that half's activation sum per token (what the minimum multiplies).
pub(crate) trait Q2Sums<I>: Sized {
    /// The block's scale.
    fn scale(&self) -> f32;
    /// The sums (see the trait).
    ///
    /// # Safety
    /// `I`'s features are available; `p` points at a Q2_K tile; every `x[t]` holds block
    /// `blk`.
    unsafe fn sums<const C: usize, const H: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> ([__m256i; T], [i32; T]);
}

/// An instruction set's integer dot steps, what the low-bit tile sums below are written in
/// once for every ISA: each adds per 32-bit lane of `acc` the four products of unsigned bytes
/// `w` and signed bytes `a` (with `w` small enough that no pair of products saturates 16
/// bits: the AVX2 form goes through `pmaddubsw`), or the two products of words.
pub(crate) trait IntDot {
    /// `acc` + Σ of four `w · a` byte products per lane.
    ///
    /// # Safety
    /// The instruction set's features are available.
    unsafe fn dot_bytes(acc: __m256i, w: __m256i, a: __m256i) -> __m256i;
    /// `acc` + Σ of two `w · a` word products per lane.
    ///
    /// # Safety
    /// The instruction set's features are available.
    unsafe fn dot_words(acc: __m256i, w: __m256i, a: __m256i) -> __m256i;
}

/// Sums of signed-byte chunks `w(k)` (eight rows' four values each, [`q8_rows`]' layout
/// after widening) against 16-bit block `blk`'s elements `4k..4k + 4`, for `k` in `ks`.
#[inline(always)]
pub(crate) unsafe fn word_sums<I: IntDot, const T: usize>(
    x: &[&[Act16Block]; T],
    blk: usize,
    ks: std::ops::Range<usize>,
    w: impl Fn(usize) -> __m256i,
) -> [__m256i; T] {
    let mut lo = [_mm256_setzero_si256(); T];
    let mut hi = [_mm256_setzero_si256(); T];
    for k in ks {
        let (w0, w1) = mx4_words(w(k));
        for t in 0..T {
            let a = bcast4w(x[t].get_unchecked(blk).qs.as_ptr().add(4 * k));
            lo[t] = I::dot_words(lo[t], w0, a);
            hi[t] = I::dot_words(hi[t], w1, a);
        }
    }
    std::array::from_fn(|t| q8_rows(lo[t], hi[t]))
}

/// Sums of unsigned-byte chunks `w(k)` against 8-bit block `blk`'s elements `4k..4k + 4`, for
/// `k` in `ks`, each token's starting from `start[t]`.
#[inline(always)]
unsafe fn byte_sums<I: IntDot, const T: usize>(
    x: &[&[ActBlock]; T],
    blk: usize,
    ks: std::ops::Range<usize>,
    start: [__m256i; T],
    w: impl Fn(usize) -> __m256i,
) -> [__m256i; T] {
    let mut s = start;
    for k in ks {
        let wk = w(k);
        for t in 0..T {
            let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
            s[t] = I::dot_bytes(s[t], wk, bcast4(a.add(4 * k)));
        }
    }
    s
}

/// Q3_K against 8-bit activations: the quants go in unsigned (`q + 4`, 0..8) and the sums
/// start at the offset `−4 · Σq` of their half (`off32 / 8`).
impl<I: IntDot> Q3Sums<I> for ActBlock {
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
        let start =
            std::array::from_fn(|t| _mm256_set1_epi32(-(x[t].get_unchecked(blk).off32[H] / 8)));
        byte_sums::<I, T>(x, blk, 4 * H..4 * H + 4, start, |k| q3k_values::<C>(p, k))
    }
}

/// Q3_K against 16-bit activations: the signed quants widened once for all tokens.
impl<I: IntDot> Q3Sums<I> for Act16Block {
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
        word_sums::<I, T>(x, blk, 4 * H..4 * H + 4, |k| {
            _mm256_sub_epi8(q3k_values::<C>(p, k), _mm256_set1_epi8(4))
        })
    }
}

/// Q2_K against 8-bit activations: the unsigned quants, no offset; the half's activation sum.
impl<I: IntDot> Q2Sums<I> for ActBlock {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const C: usize, const H: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> ([__m256i; T], [i32; T]) {
        let zero = [_mm256_setzero_si256(); T];
        (
            byte_sums::<I, T>(x, blk, 4 * H..4 * H + 4, zero, |k| q2k_values::<C>(p, k)),
            std::array::from_fn(|t| x[t].get_unchecked(blk).off32[H] / 32),
        )
    }
}

/// Q2_K against 16-bit activations, and the half's activation sum.
impl<I: IntDot> Q2Sums<I> for Act16Block {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    unsafe fn sums<const C: usize, const H: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> ([__m256i; T], [i32; T]) {
        (
            word_sums::<I, T>(x, blk, 4 * H..4 * H + 4, |k| q2k_values::<C>(p, k)),
            std::array::from_fn(|t| sum16_i16(x[t].get_unchecked(blk).qs.as_ptr().add(16 * H))),
        )
    }
}

/// Eight tiled Q2_K rows (the super-block tile at `p`), half group by half group: each half's
/// exact sum times the rows' `d · sc` (exact in f32) times the activation scale, then the
/// minimum's term `dmin · m` (exact) times the half's activation sum times its scale.
#[inline(always)]
pub(crate) unsafe fn q2k_tile<I, A: Q2Sums<I>, const T: usize>(
    p: *const u8,
    x: &[&[A]; T],
    sb: usize,
    acc: &mut [__m256; T],
) {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    let m8 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
    // Group and half as constants: every shift an immediate, every accumulator a register.
    macro_rules! half {
        ($c:literal, $h:literal) => {{
            let blk = 8 * sb + $c;
            let (s, xs) = A::sums::<$c, $h, T>(p, x, blk);
            let (sc, mn) = q2k_scale_min(p, 2 * $c + $h);
            let sc = _mm256_mul_ps(d8, _mm256_cvtepi32_ps(sc));
            let mn = _mm256_mul_ps(m8, _mm256_cvtepi32_ps(mn));
            for t in 0..T {
                let da = x[t].get_unchecked(blk).scale();
                let dv = _mm256_set1_ps(da);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(sc, dv), acc[t]);
                acc[t] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(xs[t] as f32 * da), acc[t]);
            }
        }};
    }
    half!(0, 0);
    half!(0, 1);
    half!(1, 0);
    half!(1, 1);
    half!(2, 0);
    half!(2, 1);
    half!(3, 0);
    half!(3, 1);
    half!(4, 0);
    half!(4, 1);
    half!(5, 0);
    half!(5, 1);
    half!(6, 0);
    half!(6, 1);
    half!(7, 0);
    half!(7, 1);
}

/// Chunk `k` (elements `4k..4k + 4`) of element group `C` of the eight rows of the IQ3_S tile
/// at `p`: the grid magnitudes (1..16, unsigned bytes; one `vpgatherdd` fetches the eight rows'
/// entries) and the negative lanes' mask (0xFF where the sign bit is set), lane `j` row `j`'s
/// four values. `sg` is group `C`'s sign vector.
#[inline(always)]
pub(crate) unsafe fn iq3s_values<const C: usize, const K: usize>(
    p: *const u8,
    sg: __m256i,
) -> (__m256i, __m256i) {
    let k = K;
    let shr = |x: __m256i, n: usize| _mm256_srl_epi32(x, _mm_cvtsi32_si128(n as i32));
    let qs = _mm256_loadu_si256(p.add(IQ3S_QS + 32 * (2 * C + k / 4)) as *const __m256i);
    let qh = _mm256_loadu_si256(p.add(IQ3S_QH + 32 * (C / 4)) as *const __m256i);
    let lo = _mm256_and_si256(shr(qs, 8 * (k % 4)), _mm256_set1_epi32(0xFF));
    let hi = _mm256_and_si256(shr(qh, 8 * (C % 4) + k), _mm256_set1_epi32(1));
    let idx = _mm256_or_si256(lo, _mm256_slli_epi32::<8>(hi));
    let g = _mm256_i32gather_epi32::<4>(crate::iq_grids::IQ3S_GRID.as_ptr() as *const i32, idx);
    (g, lattice_signs::<K>(sg))
}

/// The negative lanes' mask (0xFF where the sign bit is set) of chunk `K` (elements
/// `4K..4K + 4` of a group of 32) of eight rows whose group's 32 sign bits are lane `j` of
/// `sg` (IQ3_S's and IQ2_S's tiles): sign byte `K / 2` of every lane copied to the lane's four
/// bytes, then bit `i + 4·(K % 2)` tested in byte `i`.
#[inline(always)]
pub(crate) unsafe fn lattice_signs<const K: usize>(sg: __m256i) -> __m256i {
    let k = K;
    let b = (k / 2) as i8;
    let pick = _mm256_setr_epi8(
        b,
        b,
        b,
        b,
        4 + b,
        4 + b,
        4 + b,
        4 + b,
        8 + b,
        8 + b,
        8 + b,
        8 + b,
        12 + b,
        12 + b,
        12 + b,
        12 + b,
        b,
        b,
        b,
        b,
        4 + b,
        4 + b,
        4 + b,
        4 + b,
        8 + b,
        8 + b,
        8 + b,
        8 + b,
        12 + b,
        12 + b,
        12 + b,
        12 + b,
    );
    let bits = _mm256_set1_epi32((0x0804_0201u32 << (4 * (k % 2))) as i32);
    _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(sg, pick), bits), bits)
}

/// The eight rows' scale of group `c`, `d · (1 + 2·s)` with `s` the nibble `c` of their
/// `scales` (exact in f32: an f16 times an odd integer below 32).
#[inline(always)]
pub(crate) unsafe fn iq3s_scale(p: *const u8, d8: __m256, c: usize) -> __m256 {
    let v = _mm256_loadu_si256(p.add(IQ3S_SC) as *const __m256i);
    let s = _mm256_and_si256(
        _mm256_srl_epi32(v, _mm_cvtsi32_si128((4 * c) as i32)),
        _mm256_set1_epi32(0x0F),
    );
    let odd = _mm256_add_epi32(_mm256_slli_epi32::<1>(s), _mm256_set1_epi32(1));
    _mm256_mul_ps(d8, _mm256_cvtepi32_ps(odd))
}

/// An activation block type's IQ3_S sums on instruction set `I`: the exact integer sums of
/// element group `C` of the eight rows of an IQ3_S tile (signed values) against block `blk`
/// of each token.
pub(crate) trait Iq3Sums<I>: Sized {
    /// The block's scale.
    fn scale(&self) -> f32;
    /// The sums (see the trait).
    ///
    /// # Safety
    /// `I`'s features are available; `p` points at an IQ3_S tile; every `x[t]` holds block
    /// `blk`.
    unsafe fn sums<const C: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> [__m256i; T];
}

/// IQ3_S against 16-bit activations: the signed values widened once for all tokens.
impl<I: IntDot> Iq3Sums<I> for Act16Block {
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
        let sg = _mm256_loadu_si256(p.add(IQ3S_SG + 32 * C) as *const __m256i);
        word_sums::<I, T>(x, blk, 0..8, |k| iq3s_signed::<C>(p, sg, k))
    }
}

/// [`iq3s_values`]' chunk `k` as signed bytes (the magnitudes with their signs).
#[inline(always)]
pub(crate) unsafe fn iq3s_signed<const C: usize>(p: *const u8, sg: __m256i, k: usize) -> __m256i {
    let (g, m) = match k {
        0 => iq3s_values::<C, 0>(p, sg),
        1 => iq3s_values::<C, 1>(p, sg),
        2 => iq3s_values::<C, 2>(p, sg),
        3 => iq3s_values::<C, 3>(p, sg),
        4 => iq3s_values::<C, 4>(p, sg),
        5 => iq3s_values::<C, 5>(p, sg),
        6 => iq3s_values::<C, 6>(p, sg),
        _ => iq3s_values::<C, 7>(p, sg),
    };
    _mm256_sub_epi8(_mm256_xor_si256(g, m), m)
}

/// Eight tiled IQ3_S rows (the super-block tile at `p`), group by group: the exact sums times
/// the rows' `d · (1 + 2s)` times the activation scale, one FMA per group.
#[inline(always)]
pub(crate) unsafe fn iq3s_tile<I, A: Iq3Sums<I>, const T: usize>(
    p: *const u8,
    x: &[&[A]; T],
    sb: usize,
    acc: &mut [__m256; T],
) {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    macro_rules! group {
        ($c:literal) => {{
            let blk = 8 * sb + $c;
            let s = A::sums::<$c, T>(p, x, blk);
            let sc = iq3s_scale(p, d8, $c);
            for t in 0..T {
                let da = _mm256_set1_ps(x[t].get_unchecked(blk).scale());
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(sc, da), acc[t]);
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

/// Defines a 256-bit tile instruction set `$isa` (one row group per pass, `__m256`
/// accumulators, eight outputs per token): its [`crate::tiles::TileIsa`] impl and the pass
/// driver compiled with `$features`, prefetching `$prefetch` bytes ahead into L2. The AVX2
/// and AVX-512 VNNI kernels share this loop and differ only in their tiles' instructions,
/// their features and their prefetch distance.
macro_rules! tile_isa_256 {
    ($isa:ty, $features:literal, $prefetch:expr) => {
        impl TileIsa for $isa {
            type Src = *const u8;
            type Acc = __m256;
            type Out = [f32; 8];
            const GROUPS: usize = 1;

            #[inline(always)]
            fn src(p: *const u8, _group_bytes: usize) -> *const u8 {
                p
            }

            #[inline(always)]
            unsafe fn run<A, F: Tiles<Self, A>, const T: usize>(
                src: *const u8,
                x: [&[A]; T],
            ) -> [[f32; 8]; T] {
                run::<A, F, T>(src, x)
            }
        }

        /// [`TileIsa::run`] for this instruction set, compiled with its features.
        ///
        /// # Safety
        /// The CPU has the features; `tiles` points at `x[t].len() / F::SPAN` (the same for
        /// every `t`) consecutive tiles of `F`'s format.
        #[target_feature(enable = $features)]
        unsafe fn run<A, F: Tiles<$isa, A>, const T: usize>(
            tiles: *const u8,
            x: [&[A]; T],
        ) -> [[f32; 8]; T] {
            let mut acc = [_mm256_setzero_ps(); T];
            for i in 0..x[0].len() / F::SPAN {
                let p = tiles.add(i * F::BYTES);
                prefetch_l2(
                    p.wrapping_add(($prefetch as usize).div_ceil(F::BYTES) * F::BYTES),
                    F::BYTES,
                );
                F::tile(p, &x, i, &mut acc);
            }
            let mut out = [[0f32; 8]; T];
            for t in 0..T {
                _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]);
            }
            out
        }
    };
}
pub(crate) use tile_isa_256;

/// Runs `$body` with `$t` bound to each token index `0..T` as a constant (`T` at most 8): the
/// token loop written out, so every accumulator stays a register (LLVM left an eight-token
/// loop rolled, with the accumulators on the stack).
macro_rules! each_token {
    ($n:expr, |$t:ident| $body:block) => {{
        macro_rules! one {
            ($i:expr) => {
                if $i < $n {
                    let $t = $i;
                    $body
                }
            };
        }
        one!(0);
        one!(1);
        one!(2);
        one!(3);
        one!(4);
        one!(5);
        one!(6);
        one!(7);
    }};
}
pub(crate) use each_token;
