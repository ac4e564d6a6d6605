//! Each tiled format as AMX weight tiles: how a pair of eight-row tiles (16 weight rows)
//! becomes one weight tile per sub-block, and which scales and constant term the sub-block's
//! integer sums take afterwards.
//!
//! The quants come from the 512-bit VNNI helpers (`x86::avx512::tiles_zmm`), which already
//! put two tiles' rows side by side: lane `j` (four bytes) of the vector for element group `k`
//! is row `j`'s quants `4k..4k + 4` — exactly row `k` of an AMX weight tile. The scales and
//! the constant term are those of the VNNI kernels, computed by the same instructions, so a
//! product's bits do not depend on the path.

use crate::tiles::{TileFormat, Q40, Q41, Q4K, Q50, Q51, Q6K, Q80};
use crate::x86::avx512::tiles_zmm::{
    f16x2, ld2, nibbles, q4k_scales, q6_group, q6_scales, small_quants,
};
use crate::DType;
use std::arch::x86_64::*;

/// The term a sub-block adds beside `isum · (scale · da)`.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Constant {
    /// None (Q8_0, Q6_K: signed weights).
    None,
    /// `+ second · dsum` (Q4_1, Q5_1: the minimums).
    Add,
    /// `− second · (off · dsum)` (Q4_0: 8, Q5_0: 16, Q4_K: 1 with `dmin · m`).
    Sub(f32),
}

/// A tiled format's AMX form.
pub(crate) trait AmxTiles: TileFormat {
    /// Elements per sub-block (one tile product): 32, or Q6_K's 16.
    const K: usize;
    /// Whether the weight bytes are signed (`tdpbssd`) or unsigned (`tdpbsud`).
    const SIGNED: bool;
    /// The constant term.
    const CONSTANT: Constant;

    /// Sub-block `s` of the tiles at `p` (rows 0..8) and `q` (rows 8..16): its weight tile
    /// (`K / 4` rows of 64 bytes) written at `b`; returns the 16 rows' scales and the factor of
    /// their constant term (zero where there is none).
    ///
    /// # Safety
    /// AVX-512 F/BW/VL (and what the VNNI tile kernels need) are available; `p` and `q` each
    /// point at one tile of this format; `b` at `K · 16` writable bytes.
    unsafe fn build(p: *const u8, q: *const u8, s: usize, b: *mut u8) -> (__m512, __m512);
}

/// Sub-blocks per tile.
pub(crate) const fn subs<F: AmxTiles>() -> usize {
    F::SPAN * 32 / F::K
}

#[inline(always)]
unsafe fn put(b: *mut u8, row: usize, v: __m512i) {
    _mm512_storeu_si512(b.add(64 * row) as *mut __m512i, v);
}

/// The 4- and 5-bit formats: quants from byte `O` (unsigned), scales `d` at 0 (and minimums at
/// 16 where the constant term adds).
macro_rules! small {
    ($f:ty, $o:expr, $five:expr, $constant:expr) => {
        impl AmxTiles for $f {
            const K: usize = 32;
            const SIGNED: bool = false;
            const CONSTANT: Constant = $constant;

            #[inline(always)]
            unsafe fn build(p: *const u8, q: *const u8, _s: usize, b: *mut u8) -> (__m512, __m512) {
                for k in 0..4 {
                    let (lo, hi) = small_quants::<$five>(p, q, $o, k);
                    put(b, k, lo);
                    put(b, 4 + k, hi);
                }
                let d = f16x2(p, q, 0);
                match $constant {
                    Constant::Add => (d, f16x2(p, q, 16)),
                    _ => (d, d),
                }
            }
        }
    };
}

small!(Q40, 16, false, Constant::Sub(8.0));
small!(Q41, 32, false, Constant::Add);
small!(Q50, 16, true, Constant::Sub(16.0));
small!(Q51, 32, true, Constant::Add);

impl AmxTiles for Q80 {
    const K: usize = 32;
    const SIGNED: bool = true;
    const CONSTANT: Constant = Constant::None;

    #[inline(always)]
    unsafe fn build(p: *const u8, q: *const u8, _s: usize, b: *mut u8) -> (__m512, __m512) {
        for k in 0..8 {
            put(b, k, ld2(p, q, 16 + 32 * k));
        }
        (f16x2(p, q, 0), _mm512_setzero_ps())
    }
}

/// Q4_K: sub-block `s` is the low (even `s`) or high nibbles of vector pair `s / 2`.
impl AmxTiles for Q4K {
    const K: usize = 32;
    const SIGNED: bool = false;
    const CONSTANT: Constant = Constant::Sub(1.0);

    #[inline(always)]
    unsafe fn build(p: *const u8, q: *const u8, s: usize, b: *mut u8) -> (__m512, __m512) {
        let (pair, h) = (s / 2, s % 2);
        for k in 0..8 {
            let (lo, hi) = nibbles(p.add(128 + 256 * pair), q.add(128 + 256 * pair), k);
            put(b, k, if h == 0 { lo } else { hi });
        }
        q4k_scales(p, q, f16x2(p, q, 0), f16x2(p, q, 16), s)
    }
}

/// Q6_K: 16-element sub-blocks of signed quants `q − 32`, so the integer sum is the VNNI
/// kernels' `Σ q·a − 32 · Σa` without the correction.
impl AmxTiles for Q6K {
    const K: usize = 16;
    const SIGNED: bool = true;
    const CONSTANT: Constant = Constant::None;

    #[inline(always)]
    unsafe fn build(p: *const u8, q: *const u8, s: usize, b: *mut u8) -> (__m512, __m512) {
        for (row, g) in (4 * s..4 * s + 4).enumerate() {
            let v = match s / 4 {
                0 => q6_group::<0>(p, q, g),
                1 => q6_group::<1>(p, q, g),
                2 => q6_group::<2>(p, q, g),
                _ => q6_group::<3>(p, q, g),
            };
            put(b, row, v);
        }
        (q6_scales(p, q, f16x2(p, q, 0), s), _mm512_setzero_ps())
    }
}

/// Whether `dtype` has an AMX form (MXFP4's looked-up codes do not: it stays on VNNI).
pub(crate) fn has(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q4_K
            | DType::Q6_K
    )
}
