//! AVX2 + FMA + F16C dot products of weight rows in their stored layout: float rows (F32, F16,
//! BF16) against f32, and the 32-element quantized formats (Q4_0, Q4_1, Q5_0, Q8_0, MXFP4,
//! IQ4_NL) against 8- or 16-bit activation blocks or f32, several rows and tokens per pass.
//!
//! Every function here is `unsafe` because it must only be called on a CPU with those
//! features, which callers guarantee by holding an `Isa` of an AVX2 kind (made only after
//! detection checked them). Slice lengths follow the same contracts as the scalar versions in
//! `scalar::dot`, which the tests compare against.
// Row index `r` addresses accumulators, corrections and pointer offsets together.
#![allow(clippy::needless_range_loop)]

use crate::act::blocks::{Act16Block, ActBlock};
use crate::x86::shared::{f16_ptr, hsum, prefetch_l1};
use std::arch::x86_64::*;

/// F32 row · f32. `row.len() == 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let w = row.as_ptr() as *const f32;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        acc = _mm256_fmadd_ps(
            _mm256_loadu_ps(w.add(i)),
            _mm256_loadu_ps(x.as_ptr().add(i)),
            acc,
        );
        i += 8;
    }
    let mut s = hsum(acc);
    while i < n {
        s += w.add(i).read_unaligned() * x[i];
        i += 1;
    }
    s
}

/// F16 row · f32. `row.len() == 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let w = row.as_ptr();
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let wv = _mm256_cvtph_ps(_mm_loadu_si128(w.add(2 * i) as *const __m128i));
        acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr().add(i)), acc);
        i += 8;
    }
    let mut s = hsum(acc);
    while i < n {
        s += f16_ptr(w.add(2 * i)) * x[i];
        i += 1;
    }
    s
}

/// BF16 row · f32. `row.len() == 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let w = row.as_ptr();
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let h = _mm_loadu_si128(w.add(2 * i) as *const __m128i);
        let wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr().add(i)), acc);
        i += 8;
    }
    let mut s = hsum(acc);
    while i < n {
        let bits = u16::from_le_bytes([*w.add(2 * i), *w.add(2 * i + 1)]);
        s += f32::from_bits((bits as u32) << 16) * x[i];
        i += 1;
    }
    s
}

/// How many row groups ahead `dot_rows` prefetches.
pub(crate) const PREFETCH_GROUPS: usize = 2;

// Block formats the multi-row kernels handle (a const parameter, folded at compile time).
pub(crate) const FMT_Q4_0: u8 = 0;
pub(crate) const FMT_Q4_1: u8 = 1;
pub(crate) const FMT_Q8_0: u8 = 2;
pub(crate) const FMT_Q5_0: u8 = 3;
pub(crate) const FMT_MXFP4: u8 = 4;
pub(crate) const FMT_IQ4_NL: u8 = 5;

#[inline(always)]
const fn block_bytes(fmt: u8) -> usize {
    match fmt {
        FMT_Q4_0 => 18,
        FMT_Q4_1 => 20,
        FMT_Q5_0 => 22,
        FMT_MXFP4 => 17,
        FMT_IQ4_NL => 18,
        _ => 34,
    }
}

/// A Q5_0 block's 32 quants (0..32) as bytes, in element order: the nibbles as Q4_0's, each
/// byte ORed with 16 where its bit of `qh` is set (bit `i` of the little-endian u32 at
/// `b + 2` belongs to element `i`).
#[inline(always)]
unsafe fn q5_0_bytes(b: *const u8) -> __m256i {
    let q = _mm_loadu_si128(b.add(6) as *const __m128i);
    let lo = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
        _mm256_set1_epi8(0x0F),
    );
    let qh = (b.add(2) as *const i32).read_unaligned();
    // Byte i takes byte i / 8 of qh, then tests its bit i % 8.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh),
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_or_si256(lo, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// Sixteen nibbles at `qs` (laid out as Q4_0's) looked up in `table`: 32 signed bytes in
/// element order.
#[inline(always)]
unsafe fn lut_bytes(qs: *const u8, table: &[i8; 16]) -> __m256i {
    let q = _mm_loadu_si128(qs as *const __m128i);
    let codes = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
        _mm256_set1_epi8(0x0F),
    );
    let t = _mm_loadu_si128(table.as_ptr() as *const __m128i);
    _mm256_shuffle_epi8(_mm256_set_m128i(t, t), codes)
}

/// An MXFP4 block's 32 values as signed bytes in element order (the doubled e2m1 values
/// looked up from the nibbles, which lie as Q4_0's after the scale byte at `b`).
#[inline(always)]
unsafe fn mxfp4_bytes(b: *const u8) -> __m256i {
    lut_bytes(b.add(1), &crate::blocks::MXFP4_VALUES)
}

/// An IQ4_NL block's 32 levels as signed bytes in element order (nibbles after the f16 scale).
#[inline(always)]
pub(crate) unsafe fn iq4nl_bytes(qs: *const u8) -> __m256i {
    lut_bytes(qs, &crate::lowbit::IQ4_VALUES)
}

/// Integer products of one weight block with one activation block, 8 f32 lanes (unscaled).
#[inline(always)]
unsafe fn block_products(fmt: u8, b: *const u8, xv: __m256i) -> __m256 {
    let p16 = match fmt {
        FMT_Q8_0 => {
            let w = _mm256_loadu_si256(b.add(2) as *const __m256i);
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w))
        }
        FMT_Q5_0 => _mm256_maddubs_epi16(q5_0_bytes(b), xv),
        FMT_MXFP4 | FMT_IQ4_NL => {
            let w = if fmt == FMT_MXFP4 {
                mxfp4_bytes(b)
            } else {
                iq4nl_bytes(b.add(2))
            };
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w))
        }
        _ => {
            let qs = b.add(if fmt == FMT_Q4_1 { 4 } else { 2 });
            let q = _mm_loadu_si128(qs as *const __m128i);
            let w = _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                _mm256_set1_epi8(0x0F),
            );
            _mm256_maddubs_epi16(w, xv)
        }
    };
    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
}

/// The little-endian f16 at `p + r·stride` for each of `R` (≤ 4) rows, as f32 lanes (lanes
/// past `R` are zero): one conversion instruction for all rows' block scales.
#[inline(always)]
unsafe fn f16_lanes<const R: usize>(p: *const u8, stride: usize) -> __m128 {
    let rd = |o: usize| i16::from_le_bytes([*p.add(o), *p.add(o + 1)]);
    let v = _mm_setr_epi16(
        rd(0),
        if R > 1 { rd(stride) } else { 0 },
        if R > 2 { rd(2 * stride) } else { 0 },
        if R > 3 { rd(3 * stride) } else { 0 },
        0,
        0,
        0,
        0,
    );
    _mm_cvtph_ps(v)
}

/// The block scales of `R` (≤ 4) rows as f32 lanes: f16 at the block's start, or for MXFP4
/// its e8m0 byte (see [`crate::blocks::e8m0_half`]).
#[inline(always)]
unsafe fn scale_lanes<const FMT: u8, const R: usize>(p: *const u8, stride: usize) -> __m128 {
    if FMT != FMT_MXFP4 {
        return f16_lanes::<R>(p, stride);
    }
    let e = |r: usize| {
        if r < R {
            crate::blocks::e8m0_half(*p.add(r * stride))
        } else {
            0.0
        }
    };
    _mm_setr_ps(e(0), e(1), e(2), e(3))
}

/// Lane `r` of `v` in all eight lanes of a ymm register.
#[inline(always)]
unsafe fn lane(v: __m128, r: usize) -> __m256 {
    _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(r as i32))
}

/// Per-row constant terms of one block for all rows at once: Q4_0 subtracts 8·d·dx·Σq, Q5_0
/// 16·d·dx·Σq, Q4_1 adds m·dx·Σq (`dw` holds the rows' scales, `blk` points at row 0's block).
#[inline(always)]
unsafe fn corrections<const FMT: u8, const R: usize>(
    blk: *const u8,
    stride: usize,
    dw: __m128,
    d: f32,
    isum: i32,
) -> __m128 {
    let (dx, isum) = (_mm_set1_ps(d), _mm_set1_ps(isum as f32));
    match FMT {
        FMT_Q4_0 => _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(-8.0), dw), dx), isum),
        FMT_Q5_0 => _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(-16.0), dw), dx), isum),
        FMT_Q4_1 => _mm_mul_ps(_mm_mul_ps(f16_lanes::<R>(blk.add(2), stride), dx), isum),
        _ => _mm_setzero_ps(),
    }
}

/// `R` (≤ 4) consecutive weight rows (starting at `rows`, `stride` bytes apart) against one
/// activation row: the activation block is loaded once per block for all rows, the rows' block
/// scales (and Q4_1 minimums) are converted and multiplied for all rows in one instruction each,
/// and the rows give the memory system `R` independent streams.
///
/// The rows are consecutive in memory, and so is the group after them: while computing this
/// group the kernel prefetches ahead, a cache line or two per block. (Measured here: without it
/// a decode step streams weights at ~3 GB/s on one core, since the hardware prefetchers alone
/// keep too few lines in flight; a plain read reaches ~10 GB/s.) Prefetching never faults, so
/// running past the end of the matrix is harmless.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows<const FMT: u8, const R: usize>(
    rows: *const u8,
    stride: usize,
    x: &[ActBlock],
    out: &mut [f32; R],
) {
    debug_assert!(R <= 4);
    let bb = block_bytes(FMT);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = _mm_setzero_ps();
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for (i, a) in x.iter().enumerate() {
        let pf = next.wrapping_add(i * R * bb);
        prefetch_l1(pf, R * bb);
        let xv = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
        let blk = rows.add(i * bb);
        let dw = scale_lanes::<FMT, R>(blk, stride);
        let sc = _mm_mul_ps(dw, _mm_set1_ps(a.d));
        for r in 0..R {
            let p = block_products(FMT, blk.add(r * stride), xv);
            acc[r] = _mm256_fmadd_ps(lane(sc, r), p, acc[r]);
        }
        corr = _mm_add_ps(corr, corrections::<FMT, R>(blk, stride, dw, a.d, a.isum));
    }
    let mut c = [0f32; 4];
    _mm_storeu_ps(c.as_mut_ptr(), corr);
    for r in 0..R {
        out[r] = hsum(acc[r]) + c[r];
    }
}

/// A weight block unpacked for integer products: the unsigned bytes `maddubs` multiplies,
/// and for Q8_0 the weights themselves (their signs move onto the activations).
#[inline(always)]
unsafe fn unpack_block(fmt: u8, b: *const u8) -> (__m256i, __m256i) {
    match fmt {
        FMT_Q8_0 => {
            let w = _mm256_loadu_si256(b.add(2) as *const __m256i);
            (_mm256_sign_epi8(w, w), w)
        }
        FMT_Q5_0 => (q5_0_bytes(b), _mm256_setzero_si256()),
        FMT_MXFP4 => {
            let w = mxfp4_bytes(b);
            (_mm256_sign_epi8(w, w), w)
        }
        FMT_IQ4_NL => {
            let w = iq4nl_bytes(b.add(2));
            (_mm256_sign_epi8(w, w), w)
        }
        _ => {
            let qs = b.add(if fmt == FMT_Q4_1 { 4 } else { 2 });
            let q = _mm_loadu_si128(qs as *const __m128i);
            let w = _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                _mm256_set1_epi8(0x0F),
            );
            (w, _mm256_setzero_si256())
        }
    }
}

/// [`block_products`] from an unpacked block: the same instructions, so the same values.
#[inline(always)]
unsafe fn unpacked_products(fmt: u8, w: (__m256i, __m256i), xv: __m256i) -> __m256 {
    let p16 = if fmt == FMT_Q8_0 || fmt == FMT_MXFP4 || fmt == FMT_IQ4_NL {
        _mm256_maddubs_epi16(w.0, _mm256_sign_epi8(xv, w.1))
    } else {
        _mm256_maddubs_epi16(w.0, xv)
    };
    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
}

/// An activation block the multi-row integer kernel multiplies weight blocks into: 8-bit
/// (`pmaddubsw` on the weights' unsigned bytes) or 16-bit (`pmaddwd` on weights widened to 16
/// bits, exact 32-bit sums). The constant terms (Q4_0/Q5_0 offsets, Q4_1 minimums) go through
/// the block's quant sum in [`corrections`] either way.
pub(crate) trait BlockAct: crate::act::blocks::IntActBlock {
    /// A weight block in the form [`BlockAct::products`] takes.
    type W: Copy;
    /// Unpacks the weight block at `b` (format `fmt`).
    unsafe fn unpack(fmt: u8, b: *const u8) -> Self::W;
    /// The block's integer products with `a`, eight f32 lanes summing to `Σ w·q` (unscaled).
    unsafe fn products(fmt: u8, w: Self::W, a: &Self) -> __m256;
}

impl BlockAct for ActBlock {
    type W = (__m256i, __m256i);
    #[inline(always)]
    unsafe fn unpack(fmt: u8, b: *const u8) -> Self::W {
        unpack_block(fmt, b)
    }
    #[inline(always)]
    unsafe fn products(fmt: u8, w: Self::W, a: &Self) -> __m256 {
        unpacked_products(fmt, w, _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i))
    }
}

impl BlockAct for Act16Block {
    type W = (__m256i, __m256i);
    #[inline(always)]
    unsafe fn unpack(fmt: u8, b: *const u8) -> Self::W {
        unpack_block16(fmt, b)
    }
    #[inline(always)]
    unsafe fn products(_fmt: u8, w: Self::W, a: &Self) -> __m256 {
        let xp = a.qs.as_ptr() as *const __m256i;
        let p = _mm256_add_epi32(
            _mm256_madd_epi16(w.0, _mm256_loadu_si256(xp)),
            _mm256_madd_epi16(w.1, _mm256_loadu_si256(xp.add(1))),
        );
        _mm256_cvtepi32_ps(p)
    }
}

/// `R` (≤ 4) consecutive weight rows against `T` rows of 8- or 16-bit activation blocks
/// (prefill, batched decode, speculative verification; 16-bit also decode): each weight block is
/// unpacked once and multiplied into every activation row, and the block's scales are converted
/// once for all of them; the next row group is prefetched as in [`dot_rows`]. Every output is
/// reduced with exactly the same operations in the same order whatever `R` and `T` (and, for
/// 8-bit blocks, as the one-row [`dot_rows`]), so results do not depend on the batch.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows_xt<A: BlockAct, const FMT: u8, const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[A]; T],
    out: &mut [[f32; R]; T],
) {
    debug_assert!(R <= 4);
    let bb = block_bytes(FMT);
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    let mut corr = [_mm_setzero_ps(); T];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for i in 0..x[0].len() {
        prefetch_l1(next.wrapping_add(i * R * bb), R * bb);
        let blk = rows.add(i * bb);
        let dw = scale_lanes::<FMT, R>(blk, stride);
        let mut sc = [_mm_setzero_ps(); T];
        for t in 0..T {
            sc[t] = _mm_mul_ps(dw, _mm_set1_ps(x[t].get_unchecked(i).scale()));
        }
        for r in 0..R {
            let w = A::unpack(FMT, blk.add(r * stride));
            for t in 0..T {
                // Activations loaded where used (an L1 hit): holding T blocks in registers
                // across the rows spills the accumulators instead.
                let p = A::products(FMT, w, x[t].get_unchecked(i));
                acc[t][r] = _mm256_fmadd_ps(lane(sc[t], r), p, acc[t][r]);
            }
        }
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let c = corrections::<FMT, R>(blk, stride, dw, a.scale(), a.qsum());
            corr[t] = _mm_add_ps(corr[t], c);
        }
    }
    for t in 0..T {
        let mut c = [0f32; 4];
        _mm_storeu_ps(c.as_mut_ptr(), corr[t]);
        for r in 0..R {
            out[t][r] = hsum(acc[t][r]) + c[r];
        }
    }
}

/// A weight block widened to 16-bit integers for `pmaddwd`: elements 0..16 and 16..32.
#[inline(always)]
unsafe fn unpack_block16(fmt: u8, b: *const u8) -> (__m256i, __m256i) {
    match fmt {
        FMT_Q8_0 => (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(2) as *const __m128i)),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(18) as *const __m128i)),
        ),
        FMT_Q5_0 => {
            let w = q5_0_bytes(b);
            (
                _mm256_cvtepu8_epi16(_mm256_castsi256_si128(w)),
                _mm256_cvtepu8_epi16(_mm256_extracti128_si256(w, 1)),
            )
        }
        FMT_MXFP4 | FMT_IQ4_NL => {
            let w = if fmt == FMT_MXFP4 {
                mxfp4_bytes(b)
            } else {
                iq4nl_bytes(b.add(2))
            };
            (
                _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
                _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1)),
            )
        }
        _ => {
            // Each byte widened to a 16-bit lane holds its two nibbles: the low one (element
            // j) under a mask, the high one (element j + 16) a shift away, no mask needed.
            let qs = b.add(if fmt == FMT_Q4_1 { 4 } else { 2 });
            let v = _mm256_cvtepu8_epi16(_mm_loadu_si128(qs as *const __m128i));
            (
                _mm256_and_si256(v, _mm256_set1_epi16(0x0F)),
                _mm256_srli_epi16(v, 4),
            )
        }
    }
}

/// One quantized block dequantized to 32 f32 values in four registers (Q4_0, Q4_1, Q5_0, Q8_0,
/// MXFP4, IQ4_NL).
/// (No closures here: a closure does not inherit the caller's target features, so intrinsics
/// inside one would compile to slow out-of-line calls.)
#[inline(always)]
unsafe fn dequant_block(fmt: u8, b: *const u8) -> [__m256; 4] {
    if fmt == FMT_Q8_0 {
        let dv = _mm256_set1_ps(f16_ptr(b));
        let q0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(2) as *const __m128i));
        let q1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(10) as *const __m128i));
        let q2 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(18) as *const __m128i));
        let q3 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(26) as *const __m128i));
        return [
            _mm256_mul_ps(_mm256_cvtepi32_ps(q0), dv),
            _mm256_mul_ps(_mm256_cvtepi32_ps(q1), dv),
            _mm256_mul_ps(_mm256_cvtepi32_ps(q2), dv),
            _mm256_mul_ps(_mm256_cvtepi32_ps(q3), dv),
        ];
    }
    if fmt == FMT_MXFP4 || fmt == FMT_IQ4_NL {
        let (dv, w) = if fmt == FMT_MXFP4 {
            (_mm256_set1_ps(crate::blocks::e8m0_half(*b)), mxfp4_bytes(b))
        } else {
            (_mm256_set1_ps(f16_ptr(b)), iq4nl_bytes(b.add(2)))
        };
        let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        let parts = [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)];
        let mut out = [_mm256_setzero_ps(); 4];
        for k in 0..4 {
            out[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), dv);
        }
        return out;
    }
    if fmt == FMT_Q5_0 {
        let d = f16_ptr(b);
        let (dv, mv) = (_mm256_set1_ps(d), _mm256_set1_ps(-16.0 * d));
        let w = q5_0_bytes(b);
        let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        let mut out = [_mm256_setzero_ps(); 4];
        let parts = [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)];
        for k in 0..4 {
            let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
            out[k] = _mm256_fmadd_ps(q, dv, mv);
        }
        return out;
    }
    let d = f16_ptr(b);
    let (m, qs) = if fmt == FMT_Q4_1 {
        (f16_ptr(b.add(2)), b.add(4))
    } else {
        (-8.0 * d, b.add(2))
    };
    let (dv, mv) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
    let q = _mm_loadu_si128(qs as *const __m128i);
    let lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
    [
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), dv, mv),
        _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))),
            dv,
            mv,
        ),
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), dv, mv),
        _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))),
            dv,
            mv,
        ),
    ]
}

/// f32-activation counterpart of [`dot_rows`]: `R` consecutive rows of a quantized format
/// against one f32 activation row, weights dequantized in registers, next rows prefetched.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows_f32<const FMT: u8, const R: usize>(
    rows: *const u8,
    stride: usize,
    x: &[f32],
    out: &mut [f32; R],
) {
    let bb = block_bytes(FMT);
    let mut acc = [_mm256_setzero_ps(); R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for i in 0..x.len() / 32 {
        let pf = next.wrapping_add(i * R * bb);
        prefetch_l1(pf, R * bb);
        let xp = x.as_ptr().add(32 * i);
        for r in 0..R {
            let w = dequant_block(FMT, rows.add(r * stride + i * bb));
            for k in 0..4 {
                acc[r] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xp.add(8 * k)), acc[r]);
            }
        }
    }
    for r in 0..R {
        out[r] = hsum(acc[r]);
    }
}

/// [`dot_rows_f32`] for `T` activation rows: each block is dequantized once for all, with the
/// same per-row operations in the same order (bitwise equal to single calls).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows_f32_xt<const FMT: u8, const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[f32]; T],
    out: &mut [[f32; R]; T],
) {
    let bb = block_bytes(FMT);
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    for i in 0..x[0].len() / 32 {
        for r in 0..R {
            let w = dequant_block(FMT, rows.add(r * stride + i * bb));
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * i);
                for k in 0..4 {
                    acc[t][r] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xp.add(8 * k)), acc[t][r]);
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum(acc[t][r]);
        }
    }
}
