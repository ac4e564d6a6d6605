//! AVX2 + FMA + F16C kernels for the low-bit super-block formats (Q2_K, Q3_K, IQ4_XS; layouts
//! in [`crate::lowbit`]; IQ4_NL, a 32-element format, runs through `dot`'s kernels). Same
//! contracts as `x86::avx2::kquant`: `R` (≤ 4) consecutive weight rows against `T` activation
//! rows, every output with its own accumulator and the same operations in the same order
//! whatever `R` and `T` (batch invariance); tested against the scalar references in
//! `scalar::lowbit`.
//!
//! With 8-bit activations each 32-element activation block `c` of a super-block reads one
//! 32-byte group of weights:
//! - Q2_K/Q3_K: the 2-bit fields of `qs[32·(c / 4)..]` at shift `2·(c % 4)` (Q3_K adds its
//!   `hmask` bit as 4, giving q + 4 in 0..8; the offset returns once per super-block, as Q2_K's
//!   minimums do). Its two 16-element
//!   halves have different sub-scales: `pmaddwd` of the byte-pair sums with a vector holding
//!   the first half's scale in the low 128 bits and the second's in the high 128 bits applies
//!   both in the integer domain. Q2_K's minimums are one
//!   vector FMA per super-block (lane c = activation block c: `m_2c·Σx_lo + m_2c+1·Σx_hi`).
//! - IQ4_XS: the block's nibbles looked up in the sixteen levels (`pshufb`), signed products.
//!
//! Each block's sum needs its own float scale (`d·dx_c`, `d·ls_c·dx_c`: activation scales are
//! per 32 values), but not its own conversion and FMA: four blocks' integer sums fold into one
//! vector with two levels of `phaddd` (lanes k and k + 4 hold block k), then one conversion and
//! one FMA by the four scales apply them all. On a Zen 1 core (256-bit operations split in two)
//! a 8960 × 1536 product went from 7.9 to 8.6 GMAC/s (IQ4_XS) and 6.6 to 7.9 (Q3_K), one
//! thread, single runs; Q2_K did not move. All three stay compute-bound there (Q4_K: 10.7).
//!
//! With f32 activations each weight row is dequantized once by the scalar reference into a
//! buffer and multiplied into every token from there (the formats' fields are too scattered to
//! unpack cheaply in registers; this path serves `--activations f32`).
// Row index `r` and token index `t` address accumulators and pointers together.
#![allow(clippy::needless_range_loop)]

use super::dot::iq4nl_bytes;
use crate::act::blocks::{Act16Block, ActBlock};
use crate::dtype::lattice;
use crate::lowbit as lb;
use crate::x86::shared::{f16_ptr, hsum, prefetch_l1};
use crate::DType;
use std::arch::x86_64::*;

/// How many row groups ahead the kernels prefetch (as `kquant`'s).
const PREFETCH_GROUPS: usize = 4;

/// The scales of the eight activation blocks at `a` (lane c = block c).
#[inline(always)]
unsafe fn act_scales(a: *const ActBlock) -> __m256 {
    let a = &*(a as *const [ActBlock; 8]);
    let d: [f32; 8] = std::array::from_fn(|c| a[c].d);
    _mm256_loadu_ps(d.as_ptr())
}

/// A super-block's eight per-block scales (lane c = block c) in the order [`reduce4`] leaves
/// block sums: blocks 0..4 twice, then blocks 4..8 twice.
#[inline(always)]
unsafe fn quads(st: __m256) -> [__m256; 2] {
    [
        _mm256_permutevar8x32_ps(st, _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3)),
        _mm256_permutevar8x32_ps(st, _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7)),
    ]
}

/// Four blocks' eight-lane integer sums folded into one vector: lanes k and k + 4 together
/// hold block k's sum (so one conversion and one FMA by [`quads`] scale four blocks).
#[inline(always)]
unsafe fn reduce4(p: [__m256i; 4]) -> __m256 {
    let p01 = _mm256_hadd_epi32(p[0], p[1]);
    let p23 = _mm256_hadd_epi32(p[2], p[3]);
    _mm256_cvtepi32_ps(_mm256_hadd_epi32(p01, p23))
}

/// Sixteen sub-block scales (bytes, signed or not) arranged for [`pair_scales`]: 16-bit lanes
/// 0..8 the even sub-blocks', 8..16 the odd ones'.
#[inline(always)]
unsafe fn spread_scales<const SIGNED: bool>(s: __m128i) -> __m256i {
    let evens_odds = _mm_shuffle_epi8(
        s,
        _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15),
    );
    if SIGNED {
        _mm256_cvtepi8_epi16(evens_odds)
    } else {
        _mm256_cvtepu8_epi16(evens_odds)
    }
}

/// Sub-scales `2c` (all 16-bit lanes of the low 128 bits) and `2c + 1` (the high 128 bits),
/// from a [`spread_scales`] vector.
#[inline(always)]
unsafe fn pair_scales(spread: __m256i, c: usize) -> __m256i {
    let (lo, hi) = ((2 * c) as i8, (2 * c + 1) as i8);
    _mm256_shuffle_epi8(
        spread,
        _mm256_set1_epi16(i16::from_le_bytes([lo as u8, hi as u8])),
    )
}

/// The sixteen Q3_K sub-block scales at `s` (the 12 scale bytes), offset removed, as signed
/// bytes in sub-block order (see `lowbit::q3_scales`, the scalar form).
#[inline(always)]
unsafe fn q3_scales(s: *const u8) -> __m128i {
    let m4 = _mm_set1_epi8(0x0F);
    let v = _mm_loadl_epi64(s as *const __m128i);
    let lo = _mm_unpacklo_epi64(
        _mm_and_si128(v, m4),
        _mm_and_si128(_mm_srli_epi16::<4>(v), m4),
    );
    // Lane g of four 32-bit copies of bytes 8..12, shifted by 2g: byte i holds bits 2g..2g+2
    // of byte 8 + i, the top bits of sub-block 4g + i.
    let h = _mm_set1_epi32((s.add(8) as *const i32).read_unaligned());
    let h = _mm_and_si128(
        _mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)),
        _mm_set1_epi8(3),
    );
    let sc = _mm_or_si128(lo, _mm_slli_epi16::<4>(h));
    _mm_sub_epi8(sc, _mm_set1_epi8(32))
}

/// The eight IQ4_XS sub-block scales of the super-block at `b`, offset removed, as f32 lanes.
#[inline(always)]
unsafe fn iq4xs_scales(b: *const u8) -> __m256 {
    let h = _mm256_set1_epi32((b.add(2) as *const u16).read_unaligned() as i32);
    let l = _mm256_set1_epi32((b.add(4) as *const i32).read_unaligned());
    let lo = _mm256_and_si256(
        _mm256_srlv_epi32(l, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(0x0F),
    );
    let hi = _mm256_and_si256(
        _mm256_srlv_epi32(h, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm256_set1_epi32(3),
    );
    let ls = _mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi));
    _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)))
}

/// The 2-bit fields of activation block `c % 4` of a 32-byte `qs` group, one per byte.
#[inline(always)]
unsafe fn low2(q: __m256i, c: usize) -> __m256i {
    let v = match c % 4 {
        0 => q,
        1 => _mm256_srli_epi16::<2>(q),
        2 => _mm256_srli_epi16::<4>(q),
        _ => _mm256_srli_epi16::<6>(q),
    };
    _mm256_and_si256(v, _mm256_set1_epi8(3))
}

/// An activation block's 32 quants.
#[inline(always)]
unsafe fn qs(a: &ActBlock) -> __m256i {
    _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i)
}

/// Q2_K rows against 8-bit activation blocks.
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C; `rows` points at `R` rows `stride` bytes apart, each
/// holding `x[t].len() / 8` super-blocks, and every `x[t]` the same number of blocks, a
/// multiple of 8.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q2k_rows<const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[ActBlock]; T],
    out: &mut [[f32; R]; T],
) {
    const BB: usize = lb::Q2_K_BYTES;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * BB), R * BB);
        let mut dx = [_mm256_setzero_ps(); T];
        let mut half = [[_mm256_setzero_si256(); 2]; T];
        for t in 0..T {
            dx[t] = act_scales(x[t].as_ptr().add(8 * s));
            half[t] = half_sums(x[t].as_ptr().add(8 * s));
        }
        for r in 0..R {
            let b = rows.add(r * stride + s * BB);
            let sv = _mm_loadu_si128(b as *const __m128i);
            let m4 = _mm_set1_epi8(0x0F);
            let scales = spread_scales::<false>(_mm_and_si128(sv, m4));
            let mins = spread_scales::<false>(_mm_and_si128(_mm_srli_epi16::<4>(sv), m4));
            // 32-bit lanes: lane c holds the (even, odd) minimum pair of block c.
            let m_even = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(mins));
            let m_odd = _mm256_cvtepu16_epi32(_mm256_extracti128_si256::<1>(mins));
            let d = _mm256_set1_ps(f16_ptr(b.add(lb::Q2_K_D)));
            let dmin = _mm256_set1_ps(f16_ptr(b.add(lb::Q2_K_D + 2)));
            let mut st = [[_mm256_setzero_ps(); 2]; T];
            for t in 0..T {
                let m = _mm256_add_epi32(
                    _mm256_mullo_epi32(m_even, half[t][0]),
                    _mm256_mullo_epi32(m_odd, half[t][1]),
                );
                let dm = _mm256_mul_ps(dmin, dx[t]);
                acc[r][t] = _mm256_fnmadd_ps(dm, _mm256_cvtepi32_ps(m), acc[r][t]);
                st[t] = quads(_mm256_mul_ps(d, dx[t]));
            }
            for g in 0..2 {
                let q = _mm256_loadu_si256(b.add(lb::Q2_K_QS + 32 * g) as *const __m256i);
                let w: [__m256i; 4] = std::array::from_fn(|k| low2(q, k));
                let sc: [__m256i; 4] = std::array::from_fn(|k| pair_scales(scales, 4 * g + k));
                for t in 0..T {
                    let a = x[t].as_ptr().add(8 * s + 4 * g);
                    let p: [__m256i; 4] = std::array::from_fn(|k| {
                        _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], qs(&*a.add(k))), sc[k])
                    });
                    acc[r][t] = _mm256_fmadd_ps(st[t][g], reduce4(p), acc[r][t]);
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum(acc[r][t]);
        }
    }
}

/// Each of the eight activation blocks at `a`'s two half sums (lane c = block c): elements
/// 0..16, then 16..32.
#[inline(always)]
unsafe fn half_sums(a: *const ActBlock) -> [__m256i; 2] {
    let blocks = &*(a as *const [ActBlock; 8]);
    std::array::from_fn(|h| {
        let v: [i32; 8] = std::array::from_fn(|c| blocks[c].off32[h] / 32);
        _mm256_loadu_si256(v.as_ptr() as *const __m256i)
    })
}

/// Bit `c` of every byte of `hm` moved to bit 2 (value 4), other bits cleared. The 16-bit
/// shifts move at most five places, so bit 2 of each byte comes from the same byte.
#[inline(always)]
unsafe fn hbit4(hm: __m256i, c: usize) -> __m256i {
    let v = match c {
        0 => _mm256_slli_epi16::<2>(hm),
        1 => _mm256_slli_epi16::<1>(hm),
        2 => hm,
        3 => _mm256_srli_epi16::<1>(hm),
        4 => _mm256_srli_epi16::<2>(hm),
        5 => _mm256_srli_epi16::<3>(hm),
        6 => _mm256_srli_epi16::<4>(hm),
        _ => _mm256_srli_epi16::<5>(hm),
    };
    _mm256_and_si256(v, _mm256_set1_epi8(4))
}

/// Q3_K rows against 8-bit activation blocks. The quants go in unsigned (`q + 4`, 0..8, no
/// sign trick) and the offset comes back once per super-block: `4·Σ_h sc_h·Σx_h` per block.
///
/// # Safety
/// As [`q2k_rows`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q3k_rows<const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[ActBlock]; T],
    out: &mut [[f32; R]; T],
) {
    const BB: usize = lb::Q3_K_BYTES;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * BB), R * BB);
        let mut dx = [_mm256_setzero_ps(); T];
        let mut half = [[_mm256_setzero_si256(); 2]; T];
        for t in 0..T {
            dx[t] = act_scales(x[t].as_ptr().add(8 * s));
            half[t] = half_sums(x[t].as_ptr().add(8 * s));
        }
        for r in 0..R {
            let b = rows.add(r * stride + s * BB);
            let scales = spread_scales::<true>(q3_scales(b.add(lb::Q3_K_SCALES)));
            // 32-bit lanes: lane c holds the (even, odd) sub-scale pair of block c.
            let sc_even = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(scales));
            let sc_odd = _mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(scales));
            let d = _mm256_set1_ps(f16_ptr(b.add(lb::Q3_K_D)));
            let mut st = [[_mm256_setzero_ps(); 2]; T];
            for t in 0..T {
                let off = _mm256_add_epi32(
                    _mm256_mullo_epi32(sc_even, half[t][0]),
                    _mm256_mullo_epi32(sc_odd, half[t][1]),
                );
                let dd = _mm256_mul_ps(d, dx[t]);
                let off4 = _mm256_cvtepi32_ps(_mm256_slli_epi32::<2>(off));
                acc[r][t] = _mm256_fnmadd_ps(dd, off4, acc[r][t]);
                st[t] = quads(dd);
            }
            let hm = _mm256_loadu_si256(b as *const __m256i);
            for g in 0..2 {
                let q = _mm256_loadu_si256(b.add(lb::Q3_K_QS + 32 * g) as *const __m256i);
                let w: [__m256i; 4] =
                    std::array::from_fn(|k| _mm256_or_si256(low2(q, k), hbit4(hm, 4 * g + k)));
                let sc: [__m256i; 4] = std::array::from_fn(|k| pair_scales(scales, 4 * g + k));
                for t in 0..T {
                    let a = x[t].as_ptr().add(8 * s + 4 * g);
                    let p: [__m256i; 4] = std::array::from_fn(|k| {
                        _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], qs(&*a.add(k))), sc[k])
                    });
                    acc[r][t] = _mm256_fmadd_ps(st[t][g], reduce4(p), acc[r][t]);
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum(acc[r][t]);
        }
    }
}

/// IQ4_XS rows against 8-bit activation blocks.
///
/// # Safety
/// As [`q2k_rows`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4xs_rows<const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[ActBlock]; T],
    out: &mut [[f32; R]; T],
) {
    const BB: usize = lb::IQ4_XS_BYTES;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * BB), R * BB);
        let mut dx = [_mm256_setzero_ps(); T];
        for t in 0..T {
            dx[t] = act_scales(x[t].as_ptr().add(8 * s));
        }
        for r in 0..R {
            let b = rows.add(r * stride + s * BB);
            let dls = _mm256_mul_ps(_mm256_set1_ps(f16_ptr(b)), iq4xs_scales(b));
            let mut st = [[_mm256_setzero_ps(); 2]; T];
            for t in 0..T {
                st[t] = quads(_mm256_mul_ps(dls, dx[t]));
            }
            for g in 0..2 {
                let w: [__m256i; 4] =
                    std::array::from_fn(|k| iq4nl_bytes(b.add(lb::IQ4_XS_QS + 16 * (4 * g + k))));
                let aw: [__m256i; 4] = std::array::from_fn(|k| _mm256_sign_epi8(w[k], w[k]));
                for t in 0..T {
                    let a = x[t].as_ptr().add(8 * s + 4 * g);
                    let p: [__m256i; 4] = std::array::from_fn(|k| {
                        let xs = _mm256_sign_epi8(qs(&*a.add(k)), w[k]);
                        _mm256_madd_epi16(_mm256_maddubs_epi16(aw[k], xs), ones)
                    });
                    acc[r][t] = _mm256_fmadd_ps(st[t][g], reduce4(p), acc[r][t]);
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum(acc[r][t]);
        }
    }
}

/// Whether `dtype`'s f32-activation products go through [`dequantized_rows_f32`] (the
/// super-block formats without register-level f32 kernels).
pub(crate) fn dequantizes_for_f32(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Q2_K | DType::Q3_K | DType::IQ4_XS | lattice!()
    )
}

/// Rows `r0..r1` of such a matrix against `n` f32 activation rows: each weight row
/// dequantized once by the scalar reference (not once per token group: prefill reuses it for
/// every token), then per token one partial sum per 32 values added into an 8-lane
/// accumulator. The same operations for every token whatever `n`, so results do not depend on
/// the batch.
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C; [`dequantizes_for_f32`] holds; `x` holds `n` rows of
/// `w.cols` values; `r1 <= w.rows <= rows`; `yp` points at `n · rows` floats whose columns
/// `r0..r1` no other thread writes meanwhile.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dequantized_rows_f32(
    w: &crate::matrix::WeightMatrix<'_>,
    x: &[f32],
    n: usize,
    r0: usize,
    r1: usize,
    yp: crate::pool::SharedMut<f32>,
    rows: usize,
) {
    let cols = w.cols;
    let mut buf = vec![0f32; cols];
    for r in r0..r1 {
        crate::blocks::dequantize_row(w.dtype, w.row(r), &mut buf);
        for t in 0..n {
            let xp = x.as_ptr().add(t * cols);
            let mut acc = _mm256_setzero_ps();
            for c in 0..cols / 32 {
                let mut part = _mm256_setzero_ps();
                for k in 0..4 {
                    let o = 32 * c + 8 * k;
                    let wv = _mm256_loadu_ps(buf.as_ptr().add(o));
                    part = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp.add(o)), part);
                }
                acc = _mm256_add_ps(acc, part);
            }
            *yp.ptr().add(t * rows + r) = hsum(acc);
        }
    }
}

/// −1 in byte i where bit i of `signs` is set, else 1.
#[inline(always)]
unsafe fn sign_bytes(signs: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(signs as i32),
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_or_si256(neg, _mm256_set1_epi8(1))
}

/// Block `c` of the IQ2/IQ3 super-block at `b` as [`crate::iquant::magnitudes32`] gives it
/// (grid magnitudes, sign bits, the two halves' scales: the same values, the scales by the
/// same float steps), its grid entries fetched by one `vpgatherdd` / `vpgatherqq` instead of
/// four or eight scalar loads and inserts; `None` for the other lattice formats.
///
/// Why only on some paths: a gather is microcoded. On a Zen 1 core it is slower than the
/// scalar loads (the AVX2 path keeps them); on Zen 4 and Intel cores with AVX-512 it is the
/// cheaper way (the AVX-512 path takes it).
///
/// # Safety
/// AVX2 is available; `b` points at one whole super-block of `dtype`; `c < 8`.
#[inline(always)]
unsafe fn gathered32(
    dtype: DType,
    b: *const u8,
    c: usize,
    d: f32,
) -> Option<(__m256i, u32, [f32; 2])> {
    use crate::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
    use crate::iquant::ksign;
    let u32_at = |o: usize| (b.add(o) as *const u32).read_unaligned();
    let bytes8 = |o: usize| _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(o) as *const __m128i));
    let bytes4 = |o: usize| _mm_cvtepu8_epi32(_mm_cvtsi32_si128(u32_at(o) as i32));
    // Sign bytes of four 7-bit sign indices at bits 7l of `aux`.
    let ksigns = |aux: u32| (0..4).fold(0u32, |s, l| s | (ksign(aux >> (7 * l)) as u32) << (8 * l));
    let sc: [f32; 2];
    let (g, signs) = match dtype {
        DType::IQ3_S => {
            let qh = _mm256_set1_epi32(*b.add(66 + c) as i32);
            let hi = _mm256_and_si256(
                _mm256_srlv_epi32(qh, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                _mm256_set1_epi32(1),
            );
            let idx = _mm256_or_si256(bytes8(2 + 8 * c), _mm256_slli_epi32::<8>(hi));
            let g = _mm256_i32gather_epi32::<4>(IQ3S_GRID.as_ptr() as *const i32, idx);
            let s = (*b.add(106 + c / 2) >> (4 * (c % 2))) & 0x0F;
            let db = d * (1 + 2 * s) as f32;
            sc = [db, db];
            (g, u32_at(74 + 4 * c))
        }
        DType::IQ3_XXS => {
            let g =
                _mm256_i32gather_epi32::<4>(IQ3XXS_GRID.as_ptr() as *const i32, bytes8(2 + 8 * c));
            let aux = u32_at(66 + 4 * c);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            sc = [db, db];
            (g, ksigns(aux))
        }
        DType::IQ2_S => {
            let qh = _mm_set1_epi32(*b.add(66 + c) as i32);
            let hi = _mm_and_si128(
                _mm_srlv_epi32(qh, _mm_setr_epi32(0, 2, 4, 6)),
                _mm_set1_epi32(3),
            );
            let idx = _mm_or_si128(bytes4(2 + 4 * c), _mm_slli_epi32::<8>(hi));
            let g = _mm256_i32gather_epi64::<8>(IQ2S_GRID.as_ptr() as *const i64, idx);
            let s = *b.add(74 + c);
            sc = [s & 0x0F, s >> 4].map(|v| d * (0.5 + v as f32) * 0.25);
            (g, u32_at(34 + 4 * c))
        }
        DType::IQ2_XS => {
            let q = _mm_cvtepu16_epi32(_mm_loadl_epi64(b.add(2 + 8 * c) as *const __m128i));
            let idx = _mm_and_si128(q, _mm_set1_epi32(511));
            let g = _mm256_i32gather_epi64::<8>(IQ2XS_GRID.as_ptr() as *const i64, idx);
            let qs = b.add(2 + 8 * c) as *const u16;
            let signs = (0..4).fold(0u32, |acc, l| {
                acc | (ksign((qs.add(l).read_unaligned() >> 9) as u32) as u32) << (8 * l)
            });
            let s = *b.add(66 + c);
            sc = [s & 0x0F, s >> 4].map(|v| d * (0.5 + v as f32) * 0.25);
            (g, signs)
        }
        DType::IQ2_XXS => {
            let g =
                _mm256_i32gather_epi64::<8>(IQ2XXS_GRID.as_ptr() as *const i64, bytes4(2 + 8 * c));
            let aux = u32_at(6 + 8 * c);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            sc = [db, db];
            (g, ksigns(aux))
        }
        _ => return None,
    };
    Some((g, signs, sc))
}

/// A lattice or ternary format's rows (`iquant`) against 8-bit activation blocks: each
/// 32-value block as grid magnitudes and signs (`iquant::magnitudes32`, or [`gathered32`]
/// where `G`, with the same values: the IQ2 and IQ3 formats) or decoded to signed bytes (the others), once for all tokens, then byte products
/// and one FMA by `[scale_lo·dx × 4, scale_hi·dx × 4]` (the low four 32-bit lanes of the
/// products hold values 0..16).
///
/// # Safety
/// As [`q2k_rows`], with `dtype` one of `iquant::is_lattice`'s formats.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn lattice_rows<const G: bool, const R: usize, const T: usize>(
    dtype: DType,
    rows: *const u8,
    stride: usize,
    x: [&[ActBlock]; T],
    out: &mut [[f32; R]; T],
) {
    let bb = dtype.block_bytes();
    let ones = _mm256_set1_epi16(1);
    let mut w = Bytes([0; 32]);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * bb), R * bb);
        for r in 0..R {
            // SAFETY: the super-block lies inside row r (function contract).
            let b = std::slice::from_raw_parts(rows.add(r * stride + s * bb), bb);
            let d = f16_ptr(b.as_ptr());
            for c in 0..8 {
                let (aw, sgn, sc) = lattice_block::<G>(dtype, b, c, d, &mut w);
                let scv = _mm256_setr_ps(sc[0], sc[0], sc[0], sc[0], sc[1], sc[1], sc[1], sc[1]);
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * s + c);
                    acc[r][t] = lattice_step(acc[r][t], aw, sgn, scv, a, ones);
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum(acc[r][t]);
        }
    }
}

/// A 32-byte block buffer.
#[repr(align(32))]
struct Bytes([i8; 32]);

/// Block `c` of a lattice or ternary super-block `b` (scale `d`) for the byte products: grid
/// magnitudes and ±1 per byte where the format has that form ([`gathered32`] where `G`, else
/// `iquant::magnitudes32`: the same values), else the signed values and themselves (the sign
/// trick); and the two halves' scales.
///
/// # Safety
/// AVX2 is available; `b` is one whole super-block of `dtype`, a lattice format; `c < 8`.
#[inline(always)]
unsafe fn lattice_block<const G: bool>(
    dtype: DType,
    b: &[u8],
    c: usize,
    d: f32,
    w: &mut Bytes,
) -> (__m256i, __m256i, [f32; 2]) {
    if G {
        if let Some((gv, signs, sc)) = gathered32(dtype, b.as_ptr(), c, d) {
            return (gv, sign_bytes(signs), sc);
        }
    }
    match crate::iquant::magnitudes32(dtype, b, c, d) {
        Some((g, signs, sc)) => {
            let gv = _mm256_setr_epi64x(g[0] as i64, g[1] as i64, g[2] as i64, g[3] as i64);
            (gv, sign_bytes(signs), sc)
        }
        None => {
            let sc = crate::iquant::decode32(dtype, b, c, &mut w.0);
            let wv = _mm256_load_si256(w.0.as_ptr() as *const __m256i);
            (_mm256_sign_epi8(wv, wv), wv, sc)
        }
    }
}

/// One block of one token into its accumulator: byte products of the magnitudes with the
/// signed activations, widened, and one FMA by `[scale_lo·dx × 4, scale_hi·dx × 4]`. The one
/// place this arithmetic is written, so every caller gives the same bits.
#[inline(always)]
unsafe fn lattice_step(
    acc: __m256,
    aw: __m256i,
    sgn: __m256i,
    scv: __m256,
    a: &ActBlock,
    ones: __m256i,
) -> __m256 {
    let xs = _mm256_sign_epi8(qs(a), sgn);
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones);
    let st = _mm256_mul_ps(scv, _mm256_set1_ps(a.d));
    _mm256_fmadd_ps(st, _mm256_cvtepi32_ps(p), acc)
}

/// A lattice format's rows `r0..r1` against `n` tokens' 8-bit activation blocks (prefill):
/// each group of up to four rows decoded once ([`lattice_block`]) into a buffer, then every
/// token of the chunk, four at a time, multiplied from there. Each (row, token) output takes
/// [`lattice_rows`]'s steps in the same order (the same blocks, [`lattice_step`], one
/// accumulator, [`hsum`]), so it is the same bits as a decode step's: only the decoding is
/// shared by more tokens. Why: decoding a lattice block (grid lookups, signs) costs several
/// times its products; four tokens per decode left IQ3_M's prefill at a fifth of llama.cpp's.
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C (and gathers are wanted only where `G`); `w` is a lattice
/// format in the stored layout; `a` holds `n` rows of 8-bit blocks; `r1 <= w.rows <= rows`;
/// `yp` points at `n · rows` floats whose columns `r0..r1` no other thread writes meanwhile.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn lattice_chunk<const G: bool>(
    w: &crate::matrix::WeightMatrix<'_>,
    a: &crate::matmul::acts::CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    yp: crate::pool::SharedMut<f32>,
    rows: usize,
) {
    const R: usize = 4;
    let (dtype, nb, bb) = (w.dtype, w.cols / 32, w.dtype.block_bytes());
    let mut wb = Bytes([0; 32]);
    // Per row of the group and block: magnitudes, signs, the halves' scales.
    let mut vecs = vec![[_mm256_setzero_si256(); 2]; R * nb];
    let mut scs = vec![[0f32; 2]; R * nb];
    let mut r = r0;
    while r < r1 {
        let rr = (r1 - r).min(R);
        for i in 0..rr {
            let row = w.row(r + i);
            for s in 0..nb / 8 {
                let b = &row[s * bb..(s + 1) * bb];
                let d = f16_ptr(b.as_ptr());
                for c in 0..8 {
                    let (aw, sgn, sc) = lattice_block::<G>(dtype, b, c, d, &mut wb);
                    vecs[i * nb + 8 * s + c] = [aw, sgn];
                    scs[i * nb + 8 * s + c] = sc;
                }
            }
        }
        let mut t = 0;
        while t < n {
            let tt = (n - t).min(4);
            for i in 0..rr {
                let (v, sc) = (&vecs[i * nb..(i + 1) * nb], &scs[i * nb..(i + 1) * nb]);
                let o = match tt {
                    4 => decoded_tokens::<4>(v, sc, a, t),
                    _ => {
                        let mut o = [0f32; 4];
                        for (j, oj) in o.iter_mut().enumerate().take(tt) {
                            *oj = decoded_tokens::<1>(v, sc, a, t + j)[0];
                        }
                        o
                    }
                };
                for (j, &oj) in o.iter().enumerate().take(tt) {
                    *yp.ptr().add((t + j) * rows + r + i) = oj;
                }
            }
            t += tt;
        }
        r += rr;
    }
}

/// One decoded row ([`lattice_chunk`]'s buffer) against tokens `t..t + T`.
#[inline(always)]
unsafe fn decoded_tokens<const T: usize>(
    v: &[[__m256i; 2]],
    sc: &[[f32; 2]],
    a: &crate::matmul::acts::CallActs<'_>,
    t: usize,
) -> [f32; 4] {
    let ones = _mm256_set1_epi16(1);
    let x: [&[ActBlock]; T] = std::array::from_fn(|j| a.row(t + j).q8);
    let mut acc = [_mm256_setzero_ps(); T];
    for (k, ([aw, sgn], sc)) in v.iter().zip(sc).enumerate() {
        let scv = _mm256_setr_ps(sc[0], sc[0], sc[0], sc[0], sc[1], sc[1], sc[1], sc[1]);
        for j in 0..T {
            acc[j] = lattice_step(acc[j], *aw, *sgn, scv, x[j].get_unchecked(k), ones);
        }
    }
    let mut o = [0f32; 4];
    for j in 0..T {
        o[j] = hsum(acc[j]);
    }
    o
}

/// Q2_K, Q3_K, IQ4_XS or a lattice format's rows against 16-bit activation blocks: each
/// 32-value block decoded by `lowbit::decode32` (once for all tokens), widened to 16 bits and
/// multiplied exactly by `pmaddwd`; per half one FMA by `scale·dx`, and for Q2_K one by
/// `−min·dx` times the half's activation sum.
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C; `dtype` is one of those formats; `rows` points at `R` rows
/// `stride` bytes apart, each holding `x[t].len() / 8` super-blocks, and every `x[t]` the same
/// number of blocks, a multiple of 8.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn decoded_rows16<const R: usize, const T: usize>(
    dtype: DType,
    rows: *const u8,
    stride: usize,
    x: [&[Act16Block]; T],
    out: &mut [[f32; R]; T],
) {
    let bb = dtype.block_bytes();
    let ones = _mm256_set1_epi16(1);
    let mut w = [0i8; 32];
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * bb), R * bb);
        for r in 0..R {
            // SAFETY: the super-block lies inside row r (function contract).
            let b = std::slice::from_raw_parts(rows.add(r * stride + s * bb), bb);
            for c in 0..8 {
                let (sc, mn) = lb::decode32(dtype, b, c, &mut w);
                let w16 = [
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(w.as_ptr() as *const __m128i)),
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(w.as_ptr().add(16) as *const __m128i)),
                ];
                let has_min = mn != [0.0; 2];
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * s + c);
                    let dx = _mm256_set1_ps(a.d);
                    for h in 0..2 {
                        let xv = _mm256_loadu_si256(a.qs.as_ptr().add(16 * h) as *const __m256i);
                        let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(w16[h], xv));
                        let st = _mm256_mul_ps(_mm256_set1_ps(sc[h]), dx);
                        acc[r][t] = _mm256_fmadd_ps(st, p, acc[r][t]);
                        if has_min {
                            let xs = _mm256_cvtepi32_ps(_mm256_madd_epi16(xv, ones));
                            let sm = _mm256_mul_ps(_mm256_set1_ps(mn[h]), dx);
                            acc[r][t] = _mm256_fnmadd_ps(sm, xs, acc[r][t]);
                        }
                    }
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum(acc[r][t]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gathered grid entries, sign bits and scales are `iquant::magnitudes32`'s exactly,
    /// for every block of random super-blocks of each format that has them (the f16 scale
    /// bytes random too, finite ones kept).
    #[test]
    fn gathered_blocks_are_the_scalar_magnitudes() {
        if !crate::Isa::detect().avx2() {
            return;
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut byte = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        };
        for dtype in [
            DType::IQ2_XXS,
            DType::IQ2_XS,
            DType::IQ2_S,
            DType::IQ3_XXS,
            DType::IQ3_S,
        ] {
            for _ in 0..200 {
                let b: Vec<u8> = (0..dtype.block_bytes()).map(|_| byte()).collect();
                let d = crate::fields::f16_at(&b);
                if !d.is_finite() {
                    continue;
                }
                for c in 0..8 {
                    let (g, signs, sc) = crate::iquant::magnitudes32(dtype, &b, c, d).unwrap();
                    // SAFETY: AVX2 was detected; `b` is one whole super-block; c < 8.
                    let (gv, gsigns, gsc) = unsafe { gathered32(dtype, b.as_ptr(), c, d) }.unwrap();
                    let mut got = [0u64; 4];
                    // SAFETY: `got` holds 32 bytes.
                    unsafe { _mm256_storeu_si256(got.as_mut_ptr() as *mut __m256i, gv) };
                    assert_eq!(got, g, "{dtype:?} block {c}: grid entries");
                    assert_eq!(gsigns, signs, "{dtype:?} block {c}: signs");
                    assert_eq!(
                        gsc.map(f32::to_bits),
                        sc.map(f32::to_bits),
                        "{dtype:?} block {c}: scales"
                    );
                }
            }
        }
    }
}
