//! AVX2 + FMA + F16C kernels for the k-quant super-block formats (Q4_K, Q5_K, Q6_K; layouts in
//! [`crate::kquant`]). Same contracts as `x86::avx2::dot`: every function is `unsafe` and must only
//! run on a CPU with those features (callers hold an `Isa` whose `avx2()` holds); results are tested against
//! the scalar references in `scalar::dot`.
//!
//! Each kernel computes `R` (≤ 4) consecutive weight rows against `T` (1 or 2) activation rows.
//! Every output has its own accumulator and sees exactly the same operations in the same
//! order whatever `R` and `T` are, so a result does not depend on how the matrix product grouped
//! rows and tokens (batch invariance); `T = 2` only shares the unpacking of each weight block.
//!
//! With 8-bit activations a super-block meets eight 32-element activation blocks, each with its
//! own scale, so the sum stays in f32 per activation block (one FMA per 32 products):
//! - Q4_K/Q5_K: `Σ_j d·sc_j·dx_j·Σ_i q·qx − Σ_j dmin·m_j·dx_j·isum_j`; the minimum terms of all
//!   eight sub-blocks are one vector FMA per super-block (lane j = sub-block j).
//! - Q6_K: `q − 32` is signed, so the products use the sign trick (|w| · sign(x, w)); the two
//!   16-element sub-scales of an activation block land in the low and high four lanes of the
//!   pairwise sums, and a per-lane scale vector applies both at once.
//!
//! With f32 activations Q4_K/Q5_K weights are dequantized in registers (w = d·sc·q − dmin·m)
//! and multiplied into the activations, as the 32-element formats do; the minimum is not
//! factored out (d·sc·Σq·x − dmin·m·Σx nearly cancels and costs accuracy in f32). Q6_K has no
//! minimum, so its exact integer weights q − 32 meet x first and d·sc scales each 16-element
//! partial sum. Partial sums per sub-block keep each accumulator's dependency chain short.
// Row index `r` and token index `t` address accumulators and pointers together.
#![allow(clippy::needless_range_loop)]

use crate::act::blocks::{Act16Block, ActBlock, IntActBlock};
use crate::x86::shared::{f16_ptr, hsum, prefetch_l1};

/// How many row groups ahead the kernels prefetch (a group's rows are consecutive, so the
/// prefetch walks the group `PREFETCH_GROUPS` ahead linearly, one super-block of each row per
/// step). Measured single-threaded streaming a 65536 × 2048 Q4_K matrix: 2 groups ~8 GB/s,
/// 4 groups ~10 GB/s, 8 groups no better.
const PREFETCH_GROUPS: usize = 4;
use crate::kquant;
use crate::DType;
use std::arch::x86_64::*;

const Q4_K_BYTES: usize = 144;
const Q5_K_BYTES: usize = 176;
const Q6_K_BYTES: usize = 210;

/// `R` rows × `T` activation rows of a k-quant matrix, int8 (`xq`) or f32 (`xf`) activations.
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C; `rows` points at `R` rows `stride` bytes apart, each
/// `dtype.row_bytes(cols)` long, and every `xq[t]` holds `cols / 32` blocks (int8) or every
/// `xf[t]` holds `cols` values (f32), `cols` a multiple of 256.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rows<const R: usize, const T: usize>(
    dtype: DType,
    int8: bool,
    rows: *const u8,
    stride: usize,
    xq: [&[ActBlock]; T],
    xf: [&[f32]; T],
    out: &mut [[f32; R]; T],
) {
    match (dtype, int8) {
        (DType::Q4_K, true) => q45_rows::<ActBlock, false, R, T>(rows, stride, xq, out),
        (DType::Q5_K, true) => q45_rows::<ActBlock, true, R, T>(rows, stride, xq, out),
        (DType::Q4_K, false) => q45_rows_f32::<false, R, T>(rows, stride, xf, out),
        (DType::Q5_K, false) => q45_rows_f32::<true, R, T>(rows, stride, xf, out),
        (_, true) => q6k_rows::<R, T>(rows, stride, xq, out),
        (_, false) => q6k_rows_f32::<R, T>(rows, stride, xf, out),
    }
}

/// The eight little-endian byte lanes of `v` as f32 lanes.
#[inline(always)]
unsafe fn u8x8_ps(v: u64) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)))
}

/// Lane `j` of `v` in all eight lanes.
#[inline(always)]
unsafe fn bcast(v: __m256, j: usize) -> __m256 {
    _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j as i32))
}

/// The scales of the eight activation blocks at `a` (lane j = block j), and the same times
/// each block's sum of quants (8- or 16-bit blocks).
#[inline(always)]
unsafe fn act_scales<A: IntActBlock>(a: *const A) -> (__m256, __m256) {
    let a = &*(a as *const [A; 8]);
    let d: [f32; 8] = std::array::from_fn(|j| a[j].scale());
    let is: [i32; 8] = std::array::from_fn(|j| a[j].qsum());
    let dx = _mm256_loadu_ps(d.as_ptr());
    let is = _mm256_loadu_si256(is.as_ptr() as *const __m256i);
    (dx, _mm256_mul_ps(dx, _mm256_cvtepi32_ps(is)))
}

/// An activation block the integer k-quant kernels multiply weights into.
pub(crate) trait SimdAct: IntActBlock {
    /// Eight 32-bit lanes summing to `Σ_i w_i · q_i`, for 32 unsigned weight bytes `w`
    /// (each < 128) in element order.
    unsafe fn products(w: __m256i, a: &Self) -> __m256i;
}

impl SimdAct for ActBlock {
    #[inline(always)]
    unsafe fn products(w: __m256i, a: &Self) -> __m256i {
        let xv = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), _mm256_set1_epi16(1))
    }
}

impl SimdAct for Act16Block {
    /// The weights widened to 16 bits; `pmaddwd` sums are exact.
    #[inline(always)]
    unsafe fn products(w: __m256i, a: &Self) -> __m256i {
        let xp = a.qs.as_ptr() as *const __m256i;
        let w0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(w));
        let w1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(w));
        _mm256_add_epi32(
            _mm256_madd_epi16(w0, _mm256_loadu_si256(xp)),
            _mm256_madd_epi16(w1, _mm256_loadu_si256(xp.add(1))),
        )
    }
}

/// Q5_K's fifth bit of sub-block `j` (bit `j` of each `qh` byte) moved to bit 4 of its byte.
/// 16-bit shifts are safe here: after the mask only bits that started in the same byte remain.
#[inline(always)]
unsafe fn q5_high(qh: __m256i, j: usize) -> __m256i {
    let v = match j {
        0 => _mm256_slli_epi16::<4>(qh),
        1 => _mm256_slli_epi16::<3>(qh),
        2 => _mm256_slli_epi16::<2>(qh),
        3 => _mm256_slli_epi16::<1>(qh),
        4 => qh,
        5 => _mm256_srli_epi16::<1>(qh),
        6 => _mm256_srli_epi16::<2>(qh),
        _ => _mm256_srli_epi16::<3>(qh),
    };
    _mm256_and_si256(v, _mm256_set1_epi8(0x10))
}

/// The quants of sub-blocks `2g` and `2g + 1` of a Q4_K/Q5_K super-block at `b`, one byte per
/// element (0..16, or 0..32 with `FIVE`).
#[inline(always)]
unsafe fn q45_pair<const FIVE: bool>(b: *const u8, qh: __m256i, g: usize) -> [__m256i; 2] {
    let m4 = _mm256_set1_epi8(0x0F);
    let qs = b.add(if FIVE { 48 } else { 16 } + 32 * g);
    let q = _mm256_loadu_si256(qs as *const __m256i);
    let mut w = [
        _mm256_and_si256(q, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
    ];
    if FIVE {
        w[0] = _mm256_or_si256(w[0], q5_high(qh, 2 * g));
        w[1] = _mm256_or_si256(w[1], q5_high(qh, 2 * g + 1));
    }
    w
}

/// Per-row super-block scales of Q4_K/Q5_K: `(d·sc_j, dmin·m_j)` with lane j = sub-block j.
#[inline(always)]
unsafe fn q45_scales(b: *const u8) -> (__m256, __m256) {
    // SAFETY: `b` is a whole super-block (callers' contract), whose bytes 4..16 are the scales.
    let (sc, m) = kquant::scales_mins(unsafe { std::slice::from_raw_parts(b.add(4), 12) });
    (
        _mm256_mul_ps(_mm256_set1_ps(f16_ptr(b)), u8x8_ps(sc)),
        _mm256_mul_ps(_mm256_set1_ps(f16_ptr(b.add(2))), u8x8_ps(m)),
    )
}

/// Q4_K (`FIVE == false`) or Q5_K rows against 8- or 16-bit activation blocks. See [`rows`].
///
/// # Safety
/// As [`rows`], with every `x[t]` holding `cols / 32` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q45_rows<A: SimdAct, const FIVE: bool, const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[A]; T],
    out: &mut [[f32; R]; T],
) {
    let sb = if FIVE { Q5_K_BYTES } else { Q4_K_BYTES };
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * sb), R * sb);
        let mut dx = [_mm256_setzero_ps(); T];
        let mut dxs = [_mm256_setzero_ps(); T];
        for t in 0..T {
            (dx[t], dxs[t]) = act_scales(x[t].as_ptr().add(8 * s));
        }
        for r in 0..R {
            let b = rows.add(r * stride + s * sb);
            let (scf, mf) = q45_scales(b);
            let mut st = [_mm256_setzero_ps(); T];
            for t in 0..T {
                acc[r][t] = _mm256_fnmadd_ps(mf, dxs[t], acc[r][t]);
                st[t] = _mm256_mul_ps(scf, dx[t]);
            }
            let qh = if FIVE {
                _mm256_loadu_si256(b.add(16) as *const __m256i)
            } else {
                _mm256_setzero_si256()
            };
            for g in 0..4 {
                let w = q45_pair::<FIVE>(b, qh, g);
                for h in 0..2 {
                    let j = 2 * g + h;
                    for t in 0..T {
                        let p = A::products(w[h], x[t].get_unchecked(8 * s + j));
                        acc[r][t] =
                            _mm256_fmadd_ps(bcast(st[t], j), _mm256_cvtepi32_ps(p), acc[r][t]);
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

/// Eight bytes `k` (0..4) of a 32-byte vector, in the low half of an xmm register.
#[inline(always)]
unsafe fn bytes8(lo: __m128i, hi: __m128i, k: usize) -> __m128i {
    match k {
        0 => lo,
        1 => _mm_srli_si128::<8>(lo),
        2 => hi,
        _ => _mm_srli_si128::<8>(hi),
    }
}

/// Q4_K (`FIVE == false`) or Q5_K rows against f32 activations. See [`rows`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q45_rows_f32<const FIVE: bool, const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[f32]; T],
    out: &mut [[f32; R]; T],
) {
    let sb = if FIVE { Q5_K_BYTES } else { Q4_K_BYTES };
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / kquant::QK_K {
        prefetch_l1(next.wrapping_add(s * R * sb), R * sb);
        for r in 0..R {
            let b = rows.add(r * stride + s * sb);
            let (scf, mf) = q45_scales(b);
            let qh = if FIVE {
                _mm256_loadu_si256(b.add(16) as *const __m256i)
            } else {
                _mm256_setzero_si256()
            };
            for g in 0..4 {
                let w = q45_pair::<FIVE>(b, qh, g);
                for h in 0..2 {
                    let j = 2 * g + h;
                    let (sj, mj) = (bcast(scf, j), bcast(mf, j));
                    let (lo, hi) = (
                        _mm256_castsi256_si128(w[h]),
                        _mm256_extracti128_si256::<1>(w[h]),
                    );
                    // A partial sum per sub-block keeps the dependency chain on `acc` short
                    // (one add per 32 weights instead of four FMAs).
                    let mut part = [_mm256_setzero_ps(); T];
                    for k in 0..4 {
                        let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes8(lo, hi, k)));
                        let wf = _mm256_fmsub_ps(q, sj, mj);
                        for t in 0..T {
                            let xp = x[t].as_ptr().add(kquant::QK_K * s + 32 * j + 8 * k);
                            let xv = _mm256_loadu_ps(xp);
                            part[t] = if k == 0 {
                                _mm256_mul_ps(wf, xv)
                            } else {
                                _mm256_fmadd_ps(wf, xv, part[t])
                            };
                        }
                    }
                    for t in 0..T {
                        acc[r][t] = _mm256_add_ps(acc[r][t], part[t]);
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

/// Q6_K's per-row sub-block scales times d: lanes 0..8 and 8..16 of the sixteen.
#[inline(always)]
unsafe fn q6k_scales(b: *const u8) -> [__m256; 2] {
    let d = _mm256_set1_ps(f16_ptr(b.add(208)));
    let sc = _mm_loadu_si128(b.add(192) as *const __m128i);
    [
        _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))),
        _mm256_mul_ps(
            d,
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sc))),
        ),
    ]
}

/// The 32 signed quants `q − 32` of activation block `c` (0..4) of half `h` of a Q6_K
/// super-block, given that half's `ql` (two 32-byte loads) and `qh` bytes. Block `c` takes low
/// nibbles for c < 2 and high nibbles after, from `ql[c % 2]`, and bits `2c..2c + 2` of `qh`.
/// The 16-bit shifts only move bits within a byte once masked.
#[inline(always)]
unsafe fn q6k_block(ql: [__m256i; 2], qh: __m256i, c: usize) -> __m256i {
    let m4 = _mm256_set1_epi8(0x0F);
    let lo = match c {
        0 | 1 => _mm256_and_si256(ql[c], m4),
        _ => _mm256_and_si256(_mm256_srli_epi16::<4>(ql[c - 2]), m4),
    };
    let hi = match c {
        0 => _mm256_slli_epi16::<4>(qh),
        1 => _mm256_slli_epi16::<2>(qh),
        2 => qh,
        _ => _mm256_srli_epi16::<2>(qh),
    };
    let q = _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    _mm256_sub_epi8(q, _mm256_set1_epi8(32))
}

/// Loads half `h` of the Q6_K super-block at `b`: its two `ql` vectors and its `qh` vector.
#[inline(always)]
unsafe fn q6k_half(b: *const u8, h: usize) -> ([__m256i; 2], __m256i) {
    let ql = b.add(64 * h);
    (
        [
            _mm256_loadu_si256(ql as *const __m256i),
            _mm256_loadu_si256(ql.add(32) as *const __m256i),
        ],
        _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i),
    )
}

/// Q6_K rows against 8-bit activations. See [`rows`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_rows<const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[ActBlock]; T],
    out: &mut [[f32; R]; T],
) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    // Sub-scale k belongs to activation block k / 2: spread the eight block scales over the
    // sixteen sub-scale lanes, half `h` covering sub-scales 8h..8h + 8.
    let spread = [
        _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3),
        _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7),
    ];
    for s in 0..x[0].len() / 8 {
        prefetch_l1(next.wrapping_add(s * R * Q6_K_BYTES), R * Q6_K_BYTES);
        let mut dxx = [[_mm256_setzero_ps(); 2]; T];
        for t in 0..T {
            let (dx, _) = act_scales(x[t].as_ptr().add(8 * s));
            for h in 0..2 {
                dxx[t][h] = _mm256_permutevar8x32_ps(dx, spread[h]);
            }
        }
        for r in 0..R {
            let b = rows.add(r * stride + s * Q6_K_BYTES);
            let dsc = q6k_scales(b);
            for h in 0..2 {
                let mut st = [_mm256_setzero_ps(); T];
                for t in 0..T {
                    st[t] = _mm256_mul_ps(dsc[h], dxx[t][h]);
                }
                let (ql, qh) = q6k_half(b, h);
                for c in 0..4 {
                    let w = q6k_block(ql, qh, c);
                    let aw = _mm256_sign_epi8(w, w);
                    // Low four lanes: sub-scale 2c of this half; high four: 2c + 1.
                    let c2 = 2 * c as i32;
                    let idx = _mm256_setr_epi32(c2, c2, c2, c2, c2 + 1, c2 + 1, c2 + 1, c2 + 1);
                    for t in 0..T {
                        let a = x[t].as_ptr().add(8 * s + 4 * h + c);
                        let xv = _mm256_loadu_si256((*a).qs.as_ptr() as *const __m256i);
                        let p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w));
                        let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                        let sc = _mm256_permutevar8x32_ps(st[t], idx);
                        acc[r][t] = _mm256_fmadd_ps(sc, p, acc[r][t]);
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

/// Q6_K rows against f32 activations. See [`rows`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_rows_f32<const R: usize, const T: usize>(
    rows: *const u8,
    stride: usize,
    x: [&[f32]; T],
    out: &mut [[f32; R]; T],
) {
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let next = rows.wrapping_add(PREFETCH_GROUPS * R * stride);
    for s in 0..x[0].len() / kquant::QK_K {
        prefetch_l1(next.wrapping_add(s * R * Q6_K_BYTES), R * Q6_K_BYTES);
        for r in 0..R {
            let b = rows.add(r * stride + s * Q6_K_BYTES);
            let dsc = q6k_scales(b);
            for h in 0..2 {
                let (ql, qh) = q6k_half(b, h);
                for c in 0..4 {
                    let w = q6k_block(ql, qh, c);
                    let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
                    // Per 16-element sub-block: Σ (q − 32)·x (exact weights, no cancellation),
                    // then one FMA by d·sc into `acc`, which keeps its dependency chain short.
                    for k2 in 0..2 {
                        let sc = bcast(dsc[h], 2 * c + k2);
                        let mut part = [_mm256_setzero_ps(); T];
                        for k in 2 * k2..2 * k2 + 2 {
                            let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8(lo, hi, k)));
                            for t in 0..T {
                                let off = kquant::QK_K * s + 128 * h + 32 * c + 8 * k;
                                let xv = _mm256_loadu_ps(x[t].as_ptr().add(off));
                                part[t] = if k == 2 * k2 {
                                    _mm256_mul_ps(q, xv)
                                } else {
                                    _mm256_fmadd_ps(q, xv, part[t])
                                };
                            }
                        }
                        for t in 0..T {
                            acc[r][t] = _mm256_fmadd_ps(sc, part[t], acc[r][t]);
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
