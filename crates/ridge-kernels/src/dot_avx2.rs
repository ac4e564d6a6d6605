//! AVX2 + FMA + F16C kernels. Every function here is `unsafe` because it must only be called on
//! a CPU with those features, which callers guarantee by holding an `Isa` whose `avx2()` holds (produced only
//! by `Isa::detect` after checking them). Slice lengths follow the same contracts as the scalar
//! versions in `dot_scalar`, which the tests compare against.
#![cfg(target_arch = "x86_64")]
// Row index `r` addresses accumulators, corrections and pointer offsets together.
#![allow(clippy::needless_range_loop)]

use crate::act::{Act16Block, ActBlock};
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_ptr(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

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

/// One block of 32 activations at `p` to integers of at most `qmax` in magnitude, as
/// `act::quantize_block` computes them: the scale, the four vectors of eight quants, their sum.
#[inline(always)]
unsafe fn quantize_block(p: *const f32, qmax: f32) -> (f32, [__m256i; 4], i32) {
    let sign = _mm256_set1_ps(-0.0);
    let v = [
        _mm256_loadu_ps(p),
        _mm256_loadu_ps(p.add(8)),
        _mm256_loadu_ps(p.add(16)),
        _mm256_loadu_ps(p.add(24)),
    ];
    let mut m = _mm256_andnot_ps(sign, v[0]);
    for vi in &v[1..] {
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vi));
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    let d = amax / qmax;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    // A loop, not a closure: closures do not inherit the target features.
    let mut q = [_mm256_setzero_si256(); 4];
    for k in 0..4 {
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(
            _mm256_mul_ps(v[k], idv),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        ));
    }
    let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b01_00_11_10));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0b00_00_00_01));
    (d, q, _mm_cvtsi128_si32(s1))
}

/// Quantizes activations exactly as `act::quantize_scalar` does (same scale, round half to even).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act(x: &[f32], out: &mut [ActBlock]) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, q, isum) = quantize_block(b.as_ptr(), 127.0);
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_packs_epi16(p16a, p16b);
        let fixed = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(o.qs.as_mut_ptr() as *mut __m256i, fixed);
        o.d = d;
        o.isum = isum;
        o.derive_sums();
    }
}

/// Quantizes activations into 16-bit blocks exactly as `act::quantize16_scalar` does.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act16(x: &[f32], out: &mut [Act16Block]) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, q, isum) = quantize_block(b.as_ptr(), crate::act::Q16_MAX);
        // packs works within 128-bit halves; the 64-bit permute restores element order.
        let lo = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0b11_01_10_00);
        let hi = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0b11_01_10_00);
        let qp = o.qs.as_mut_ptr() as *mut __m256i;
        _mm256_storeu_si256(qp, lo);
        _mm256_storeu_si256(qp.add(1), hi);
        o.d = d;
        o.isum = isum;
    }
}

/// Prefetches the cache lines of `bytes` bytes from `p` (never faults, so `p` may run past the
/// matrix). Consecutive spans cover every line between them, whatever the block size.
#[inline(always)]
pub(crate) unsafe fn prefetch_span(p: *const u8, bytes: usize) {
    let mut o = 0;
    while o < bytes {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8);
        o += 64;
    }
}

/// How many row groups ahead `dot_rows` prefetches.
pub(crate) const PREFETCH_GROUPS: usize = 2;

// Block formats the multi-row kernels handle (a const parameter, folded at compile time).
pub(crate) const FMT_Q4_0: u8 = 0;
pub(crate) const FMT_Q4_1: u8 = 1;
pub(crate) const FMT_Q8_0: u8 = 2;
pub(crate) const FMT_Q5_0: u8 = 3;
pub(crate) const FMT_MXFP4: u8 = 4;

#[inline(always)]
const fn block_bytes(fmt: u8) -> usize {
    match fmt {
        FMT_Q4_0 => 18,
        FMT_Q4_1 => 20,
        FMT_Q5_0 => 22,
        FMT_MXFP4 => 17,
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

/// An MXFP4 block's 32 values as signed bytes in element order (the doubled e2m1 values
/// looked up from the nibbles, which lie as Q4_0's after the scale byte at `b`).
#[inline(always)]
unsafe fn mxfp4_bytes(b: *const u8) -> __m256i {
    let q = _mm_loadu_si128(b.add(1) as *const __m128i);
    let codes = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
        _mm256_set1_epi8(0x0F),
    );
    let k = crate::blocks::MXFP4_VALUES;
    let table = _mm_setr_epi8(
        k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13],
        k[14], k[15],
    );
    _mm256_shuffle_epi8(_mm256_set_m128i(table, table), codes)
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
        FMT_MXFP4 => {
            let w = mxfp4_bytes(b);
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
        prefetch_span(pf, R * bb);
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
    let p16 = if fmt == FMT_Q8_0 || fmt == FMT_MXFP4 {
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
pub(crate) trait BlockAct: crate::act::IntActBlock {
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
        prefetch_span(next.wrapping_add(i * R * bb), R * bb);
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
        FMT_MXFP4 => {
            let w = mxfp4_bytes(b);
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
/// MXFP4).
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
    if fmt == FMT_MXFP4 {
        let dv = _mm256_set1_ps(crate::blocks::e8m0_half(*b));
        let w = mxfp4_bytes(b);
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
        prefetch_span(pf, R * bb);
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

/// Defines the grouped attention loop compiled with `$features` (`$regs32`: 32 vector
/// registers), once per instruction set, from one body.
macro_rules! attend_entry {
    ($(#[$doc:meta])* $name:ident, $features:literal, $regs32:literal) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            kv: &crate::attention::KvLayer<'_>,
            table: &[u32],
            first: usize,
            n_ctx: usize,
            shape: &crate::attention::AttnShape,
            group: usize,
            gs: usize,
            q: &[f32],
            out: &mut [f32],
            ml: &mut [f32],
            scores: &mut [f32],
            slots: &mut [usize],
        ) {
            // `REGS32`: the build has 32 vector registers.
            const REGS32: bool = $regs32;
            const MAXG: usize = crate::attention::MAX_GROUP;
            let hd = shape.head_dim;
            let len = n_ctx - first;
            let bs = kv.block_size;
            let (kp, vp, q8) = match kv.data {
                crate::attention::KvData::F16 { k, v } => {
                    (k.as_ptr() as *const u8, v.as_ptr() as *const u8, false)
                }
                crate::attention::KvData::Q8_0 { k, v } => (k.as_ptr(), v.as_ptr(), true),
            };
            if q8 {
                return attend_group_q8(
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
                let mut r = crate::attention::head_row(slot, group, n_kv, bs) * hd;
                for s in &mut slots[pos - first..end - first] {
                    *s = r;
                    r += hd;
                }
                pos = end;
            }
            let (rows, sc) = (Rows16 { kp, vp, row: slots }, shape.scale);
            match gs {
                1 => return attend_f16::<1, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                2 => return attend_f16::<2, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                3 => return attend_f16::<3, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                4 => return attend_f16::<4, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                5 => return attend_f16::<5, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                6 => return attend_f16::<6, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                7 => return attend_f16::<7, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
                8 => return attend_f16::<8, REGS32>(&rows, len, hd, sc, q, out, ml, scores),
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
                    scores[h * len + j] = hsum(acc[h]) * shape.scale;
                }
            }
            for h in 0..gs {
                let sh = &mut scores[h * len..(h + 1) * len];
                (ml[h], ml[gs + h]) = crate::elementwise_avx2::softmax_partial(sh);
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

attend_entry!(
    /// Grouped attention over one chunk of positions `first..n_ctx` (see
    /// `attention::attend_chunk`): the positions loop runs inside one AVX2 function, converting
    /// each K/V row from f16 in registers, 8 elements at a time, and applying it to all `gs`
    /// heads. Leaves the chunk's unnormalised partial: `out[h]` = `Σ_j e^(s_j − m_h) · V_j`,
    /// `ml[h]` = `m_h` (the chunk's highest score), `ml[gs + h]` = `Σ_j e^(s_j − m_h)`.
    /// `scores` has room for `gs · (n_ctx − first)` values and `slots` for `n_ctx − first`.
    attend_group,
    "avx2,fma,f16c",
    false
);

attend_entry!(
    /// [`attend_group`] compiled with AVX-512VL's 32 vector registers: the same operations in
    /// the same order (so the same bits), with more positions and dimensions per pass held in
    /// registers instead of spilled (six heads per KV head, as Qwen2.5 has, spilled at 16).
    ///
    /// # Safety
    /// As [`attend_group`], with AVX-512 F/VL detected (an AVX-512 [`crate::Isa`]).
    attend_group_zmm,
    "avx2,fma,f16c,avx512f,avx512vl",
    true
);

/// Positions ahead that the attention loops prefetch K/V rows: a sequence's rows are spread
/// over its blocks (and a head's part of a row is a fraction of it), which the hardware
/// prefetchers follow poorly; with batched decode the cache no longer fits in the caches and
/// the loops waited on memory for most of their time (measured: 27% of a 16-sequence step).
const ATTN_PREFETCH: usize = 16;

/// Where one KV head's f16 rows live: position `first + j` of the sequence is the row at
/// element `row[j]` of `kp` (keys) and `vp` (values).
struct Rows16<'t> {
    kp: *const u8,
    vp: *const u8,
    row: &'t [usize],
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
unsafe fn attend_f16<const GS: usize, const REGS32: bool>(
    rows: &Rows16<'_>,
    len: usize,
    hd: usize,
    scale: f32,
    q: &[f32],
    out: &mut [f32],
    ml: &mut [f32],
    scores: &mut [f32],
) {
    // Four positions at a time while 4·GS accumulators fit in registers (at most 12 of 16, or
    // 24 of 32), else two while 2·GS do, else one. The last few one at a time.
    let j = if GS <= 3 || (REGS32 && GS <= 6) {
        attend_scores::<GS, 4>(rows, 0, len, hd, scale, q, scores)
    } else if GS <= 4 || REGS32 {
        attend_scores::<GS, 2>(rows, 0, len, hd, scale, q, scores)
    } else {
        0
    };
    attend_scores::<GS, 1>(rows, j, len, hd, scale, q, scores);
    for h in 0..GS {
        let (m, l) = crate::elementwise_avx2::softmax_partial(&mut scores[h * len..(h + 1) * len]);
        (ml[h], ml[GS + h]) = (m, l);
    }
    // 4 vectors (32 dimensions) per head for up to 3 heads, 2 for 4, else 1: ≤ 12
    // accumulators; with 32 registers 4 for up to 6 heads and 2 for up to 8 (≤ 24).
    if hd.is_multiple_of(32) && (GS <= 3 || (REGS32 && GS <= 6)) {
        attend_values::<GS, 4>(rows, len, hd, out, scores);
    } else if hd.is_multiple_of(16) && (GS <= 4 || REGS32) {
        attend_values::<GS, 2>(rows, len, hd, out, scores);
    } else {
        attend_values::<GS, 1>(rows, len, hd, out, scores);
    }
}

/// Scores of positions `j0..` in groups of `U` (the K rows of a group converted once and
/// applied to all `GS` heads, the `U·GS` dot products reduced together); returns the first
/// position not done. Each score is the same FMAs from zero and the same reduction as
/// [`hsum`] whatever `U`, so a position's score does not depend on the group it fell in.
#[inline(always)]
unsafe fn attend_scores<const GS: usize, const U: usize>(
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
        for u in 0..U {
            if j + u + ATTN_PREFETCH < len {
                let r = *rows.row.get_unchecked(j + u + ATTN_PREFETCH);
                prefetch_span(rows.kp.add(2 * r), 2 * hd);
            }
        }
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
unsafe fn hsum4(v: [__m256; 4]) -> __m128 {
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
unsafe fn attend_values<const GS: usize, const CW: usize>(
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
            if j + ATTN_PREFETCH < len {
                let r = *rows.row.get_unchecked(j + ATTN_PREFETCH);
                if c == 0 {
                    prefetch_span(rows.vp.add(2 * r), 2 * hd);
                } else {
                    prefetch_span(rows.vp.add(2 * (r + c)), 16 * CW);
                }
            }
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
unsafe fn attend_group_q8(
    kp: *const u8,
    vp: *const u8,
    kv: &crate::attention::KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &crate::attention::AttnShape,
    group: usize,
    gs: usize,
    q: &[f32],
    out: &mut [f32],
    ml: &mut [f32],
    scores: &mut [f32],
) {
    const MAXG: usize = crate::attention::MAX_GROUP;
    const BB: usize = crate::attention::Q8_BLOCK_BYTES;
    let hd = shape.head_dim;
    let len = n_ctx - first;
    let bs = kv.block_size;
    let head_bytes = hd / 32 * BB;
    let n_kv = kv.kv_dim / hd;
    let row_of = |pos: usize| {
        crate::attention::head_row(table[pos / bs] as usize * bs + pos % bs, group, n_kv, bs)
            * head_bytes
    };
    for j in 0..len {
        let r = kp.add(row_of(first + j));
        if j + ATTN_PREFETCH < len {
            prefetch_span(kp.add(row_of(first + j + ATTN_PREFETCH)), head_bytes);
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
        let (m, l) = crate::elementwise_avx2::softmax_partial(&mut scores[h * len..(h + 1) * len]);
        (ml[h], ml[gs + h]) = (m, l);
    }
    out[..gs * hd].fill(0.0);
    let op = out.as_mut_ptr();
    for j in 0..len {
        let r = vp.add(row_of(first + j));
        if j + ATTN_PREFETCH < len {
            prefetch_span(vp.add(row_of(first + j + ATTN_PREFETCH)), head_bytes);
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
