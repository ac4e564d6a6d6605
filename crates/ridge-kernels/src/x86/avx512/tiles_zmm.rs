//! 512-bit AVX-512 VNNI products of two tiled row groups at once: the 256-bit kernels of
//! `crate::x86::avx512::tiles` widened so that lanes 0..8 of every vector belong to one group's
//! tile and lanes 8..16 to the next group's (two 32-byte halves loaded side by side; the tile
//! layout is unchanged).
//!
//! Why: a 256-bit `vpdpbusd` advances eight rows; on a core with full-width 512-bit units
//! (AMD Zen 5, Intel server cores) the same instruction on a 512-bit register advances sixteen
//! rows in the same time, and the weight decoding and activation broadcasts are shared by
//! both groups. Every lane's operations are those of the 256-bit kernel in the same order, so
//! the outputs are the same bits whichever kernel a row group went through.
// Token index `t` addresses accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::tiles::{Vnni, PREFETCH_BYTES};
use crate::act::blocks::{Act16Block, ActBlock, ActSplit16};
use crate::packed::layout::{
    IQ3S_QH, IQ3S_QS, IQ3S_SC, IQ3S_SG, IQ4XS_QS, Q3K_HM, Q3K_QS, Q3K_SC, Q6K_HIGH, Q6K_LOW,
};
use crate::tiles::{
    Iq2S, Iq3S, Iq4Nl, Iq4Xs, Mx4, TileAct, TileIsa, Tiles, Q2K, Q3K, Q40, Q41, Q4K, Q50, Q51, Q6K,
    Q80,
};
use crate::x86::shared::prefetch_l2;
use std::arch::x86_64::*;

/// The 512-bit VNNI tile kernels: two row groups per pass (lanes 0..8 of every vector the
/// first group's rows, 8..16 the second's).
pub(crate) struct Zmm;

impl TileIsa for Zmm {
    type Src = (*const u8, *const u8);
    type Acc = __m512;
    type Out = [f32; 16];
    const GROUPS: usize = 2;

    #[inline(always)]
    fn src(p: *const u8, group_bytes: usize) -> (*const u8, *const u8) {
        (p, p.wrapping_add(group_bytes))
    }

    #[inline(always)]
    unsafe fn run<A, F: Tiles<Self, A>, const T: usize>(
        src: (*const u8, *const u8),
        x: [&[A]; T],
    ) -> [[f32; 16]; T] {
        run::<A, F, T>(src.0, src.1, x)
    }
}

/// [`TileIsa::run`] for [`Zmm`]: eight tiled rows at `p` and eight at `q` (each
/// `x[t].len() / F::SPAN` tiles) against `T` activation rows: `out[t][j]` = row `j` (rows
/// 8..16 being `q`'s) · activation row `t`.
///
/// # Safety
/// AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI are available (an AVX-512 [`crate::Isa`]); `p` and
/// `q` each point at `x[t].len() / F::SPAN` (the same for every `t`) consecutive tiles of
/// `F`'s format.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn run<A, F: Tiles<Zmm, A>, const T: usize>(
    p: *const u8,
    q: *const u8,
    x: [&[A]; T],
) -> [[f32; 16]; T] {
    let mut acc = [_mm512_setzero_ps(); T];
    let ahead = PREFETCH_BYTES.div_ceil(F::BYTES) * F::BYTES;
    for i in 0..x[0].len() / F::SPAN {
        let (pi, qi) = (p.add(i * F::BYTES), q.add(i * F::BYTES));
        prefetch_l2(pi.wrapping_add(ahead), F::BYTES);
        prefetch_l2(qi.wrapping_add(ahead), F::BYTES);
        F::tile((pi, qi), &x, i, &mut acc);
    }
    let mut out = [[0f32; 16]; T];
    for t in 0..T {
        _mm512_storeu_ps(out[t].as_mut_ptr(), acc[t]);
    }
    out
}

/// Q8_0, MXFP4 and the IQ4 formats with 16-bit activations have 256-bit kernels only
/// (`vpdpwssd` on words leaves no lanes to spare): a pair pass runs each group's tile through
/// them on the halves of the 512-bit accumulators, so every lane sees the 256-bit kernel's
/// operations (its bits).
macro_rules! halves {
    ($($f:ty: $a:ty),*) => {$(
        impl Tiles<Zmm, $a> for $f {
            #[inline(always)]
            unsafe fn tile<const T: usize>(
                (p, q): (*const u8, *const u8),
                x: &[&[$a]; T],
                i: usize,
                acc: &mut [__m512; T],
            ) {
                let mut lo: [__m256; T] = std::array::from_fn(|t| _mm512_castps512_ps256(acc[t]));
                let mut hi: [__m256; T] = std::array::from_fn(|t| {
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[t])))
                });
                <$f as Tiles<Vnni, $a>>::tile(p, x, i, &mut lo);
                <$f as Tiles<Vnni, $a>>::tile(q, x, i, &mut hi);
                for t in 0..T {
                    let v = _mm512_castps256_ps512(lo[t]);
                    acc[t] = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                        _mm512_castps_pd(v),
                        _mm256_castps_pd(hi[t]),
                    ));
                }
            }
        }
    )*};
}

halves!(
    Iq3S: Act16Block,
    Iq2S: ActBlock,
    Iq2S: Act16Block,
    Q2K: ActBlock,
    Q2K: Act16Block,
    Q3K: Act16Block,
    Q80: Act16Block,
    Mx4: Act16Block,
    Iq4Xs: Act16Block,
    Iq4Nl: Act16Block
);

/// `acc + Σ a·b` over each 32-bit lane's four byte pairs, `a` unsigned, `b` signed.
#[inline(always)]
pub(crate) unsafe fn dp(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(acc, a, b)
}

/// The 32 bytes at offset `o` of both tiles, `p`'s in the low half.
#[inline(always)]
pub(crate) unsafe fn ld2(p: *const u8, q: *const u8, o: usize) -> __m512i {
    let lo = _mm256_loadu_si256(p.add(o) as *const __m256i);
    let hi = _mm256_loadu_si256(q.add(o) as *const __m256i);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The eight f16 values at offset `o` of both tiles as sixteen f32 lanes.
#[inline(always)]
pub(crate) unsafe fn f16x2(p: *const u8, q: *const u8, o: usize) -> __m512 {
    let lo = _mm_loadu_si128(p.add(o) as *const __m128i);
    let hi = _mm_loadu_si128(q.add(o) as *const __m128i);
    _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi))
}

/// The eight bytes at offset `o` of both tiles, as sixteen bytes (`p`'s first).
#[inline(always)]
pub(crate) unsafe fn bytes2(p: *const u8, q: *const u8, o: usize) -> __m128i {
    _mm_unpacklo_epi64(
        _mm_loadl_epi64(p.add(o) as *const __m128i),
        _mm_loadl_epi64(q.add(o) as *const __m128i),
    )
}

/// Four activation bytes (a 32-bit little-endian word at `a`) in every lane.
#[inline(always)]
pub(crate) unsafe fn bcast4(a: *const u8) -> __m512i {
    _mm512_set1_epi32((a as *const i32).read_unaligned())
}

/// The quant nibbles of vector `k` of both tiles (see `x86::shared::nibbles`).
#[inline(always)]
pub(crate) unsafe fn nibbles(p: *const u8, q: *const u8, k: usize) -> (__m512i, __m512i) {
    nibbles_at(p, q, 32 + 32 * k)
}

/// The low and high nibbles of the 32 bytes at offset `o` of both tiles.
#[inline(always)]
unsafe fn nibbles_at(p: *const u8, q: *const u8, o: usize) -> (__m512i, __m512i) {
    let mask = _mm512_set1_epi8(0x0F);
    let v = ld2(p, q, o);
    (
        _mm512_and_si512(v, mask),
        _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask),
    )
}

/// `acc + isum · (d · da) + m · dsum` with both tiles' `d` and `m` (Q4_1).
#[inline(always)]
unsafe fn scale_in(acc: __m512, isum: __m512i, d: __m512, m: __m512, da: f32, dsum: f32) -> __m512 {
    let acc = _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(isum),
        _mm512_mul_ps(d, _mm512_set1_ps(da)),
        acc,
    );
    _mm512_fmadd_ps(m, _mm512_set1_ps(dsum), acc)
}

/// `acc + isum · (d · da) − off · d · dsum` (see `x86::shared::offset_in`).
#[inline(always)]
unsafe fn offset_in(acc: __m512, isum: __m512i, d: __m512, da: f32, dsum: f32, off: f32) -> __m512 {
    let acc = _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(isum),
        _mm512_mul_ps(d, _mm512_set1_ps(da)),
        acc,
    );
    _mm512_fnmadd_ps(d, _mm512_set1_ps(off * dsum), acc)
}

impl<A: SmallSums> Tiles<Zmm, A> for Q40 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[A]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let s = A::sums::<false, T>(p, q, 16, x, i);
        let d = f16x2(p, q, 0);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = offset_in(acc[t], s[t], d, a.d(), a.dsum(), 8.0);
        }
    }
}

impl<A: SmallSums> Tiles<Zmm, A> for Q41 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[A]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let s = A::sums::<false, T>(p, q, 32, x, i);
        let (d, m) = (f16x2(p, q, 0), f16x2(p, q, 16));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = scale_in(acc[t], s[t], d, m, a.d(), a.dsum());
        }
    }
}

impl Tiles<Zmm, ActBlock> for Q80 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let bias = _mm512_set1_epi8(-128);
        let mut s = [_mm512_setzero_si512(); T];
        for k in 0..8 {
            let wu = _mm512_xor_si512(ld2(p, q, 16 + 32 * k), bias);
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                s[t] = dp(s[t], wu, bcast4(a.add(4 * k)));
            }
        }
        let d = f16x2(p, q, 0);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let isum = _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * a.isum));
            let da = _mm512_set1_ps(a.d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, da), acc[t]);
        }
    }
}

/// Vector pair `k` of both tiles' quants, whose quant part starts at byte `o`: four-bit
/// nibbles (Q4_0, Q4_1), or with `FIVE` the fifth-bit vector and then the nibbles with those
/// bits ORed in (Q5_0, Q5_1; see `x86::shared::q5_quants`), as unsigned bytes.
#[inline(always)]
pub(crate) unsafe fn small_quants<const FIVE: bool>(
    p: *const u8,
    q: *const u8,
    o: usize,
    k: usize,
) -> (__m512i, __m512i) {
    if !FIVE {
        return nibbles_at(p, q, o + 32 * k);
    }
    let bit4 = _mm512_set1_epi8(0x10);
    let h = ld2(p, q, o);
    let (lo, hi) = nibbles(p.add(o), q.add(o), k);
    let up = _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - k as i32));
    let down = _mm512_srl_epi16(h, _mm_cvtsi32_si128(k as i32));
    (
        _mm512_or_si512(lo, _mm512_and_si512(up, bit4)),
        _mm512_or_si512(hi, _mm512_and_si512(down, bit4)),
    )
}

/// Per row (lane), `Σ q · a` of both tiles' quants (see [`small_quants`]) against 8-bit
/// activation block `i`.
#[inline(always)]
unsafe fn small_isum<const FIVE: bool, const T: usize>(
    p: *const u8,
    q: *const u8,
    o: usize,
    x: &[&[ActBlock]; T],
    i: usize,
) -> [__m512i; T] {
    let mut s = [_mm512_setzero_si512(); T];
    for k in 0..4 {
        let (lo, hi) = small_quants::<FIVE>(p, q, o, k);
        for t in 0..T {
            let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
            s[t] = dp(s[t], lo, bcast4(a.add(4 * k)));
            s[t] = dp(s[t], hi, bcast4(a.add(16 + 4 * k)));
        }
    }
    s
}

/// [`small_isum`] against 16-bit activations split into bytes, `Σ = 256 · high + low`.
#[inline(always)]
unsafe fn small_isum16<const FIVE: bool, const T: usize>(
    p: *const u8,
    q: *const u8,
    o: usize,
    x: &[&[ActSplit16]; T],
    i: usize,
) -> [__m512i; T] {
    let mut low = [_mm512_setzero_si512(); T];
    let mut high = [_mm512_setzero_si512(); T];
    for k in 0..4 {
        let (wl, wh) = small_quants::<FIVE>(p, q, o, k);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
            low[t] = dp(low[t], bcast4(lo.add(4 * k)), wl);
            low[t] = dp(low[t], bcast4(lo.add(16 + 4 * k)), wh);
            high[t] = dp(high[t], wl, bcast4(hi.add(4 * k)));
            high[t] = dp(high[t], wh, bcast4(hi.add(16 + 4 * k)));
        }
    }
    std::array::from_fn(|t| _mm512_add_epi32(_mm512_slli_epi32::<8>(high[t]), low[t]))
}

/// [`small_isum`] or [`small_isum16`] by activation type (see `x86::avx2::tiles`).
trait SmallSums: TileAct + Sized {
    /// The integer sums of both tiles, whose quant part starts at byte `o`.
    unsafe fn sums<const FIVE: bool, const T: usize>(
        p: *const u8,
        q: *const u8,
        o: usize,
        x: &[&[Self]; T],
        i: usize,
    ) -> [__m512i; T];
}

impl SmallSums for ActBlock {
    #[inline(always)]
    unsafe fn sums<const FIVE: bool, const T: usize>(
        p: *const u8,
        q: *const u8,
        o: usize,
        x: &[&[Self]; T],
        i: usize,
    ) -> [__m512i; T] {
        small_isum::<FIVE, T>(p, q, o, x, i)
    }
}

impl SmallSums for ActSplit16 {
    #[inline(always)]
    unsafe fn sums<const FIVE: bool, const T: usize>(
        p: *const u8,
        q: *const u8,
        o: usize,
        x: &[&[Self]; T],
        i: usize,
    ) -> [__m512i; T] {
        small_isum16::<FIVE, T>(p, q, o, x, i)
    }
}

impl<A: SmallSums> Tiles<Zmm, A> for Q50 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[A]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let s = A::sums::<true, T>(p, q, 16, x, i);
        let d = f16x2(p, q, 0);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = offset_in(acc[t], s[t], d, a.d(), a.dsum(), 16.0);
        }
    }
}

impl<A: SmallSums> Tiles<Zmm, A> for Q51 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[A]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let s = A::sums::<true, T>(p, q, 32, x, i);
        let (d, m) = (f16x2(p, q, 0), f16x2(p, q, 16));
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            acc[t] = scale_in(acc[t], s[t], d, m, a.d(), a.dsum());
        }
    }
}

/// Both tiles' sub-block `s` scales: (`d · sc`, `dmin · m`) (see `x86::shared::q4k_scales`).
#[inline(always)]
pub(crate) unsafe fn q4k_scales(
    p: *const u8,
    q: *const u8,
    d: __m512,
    dmin: __m512,
    s: usize,
) -> (__m512, __m512) {
    let sc = _mm512_cvtepu8_epi32(bytes2(p, q, 32 + 8 * s));
    let m = _mm512_cvtepu8_epi32(bytes2(p, q, 96 + 8 * s));
    (
        _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)),
        _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m)),
    )
}

/// `acc + isum · (d·sc · da) − dmin·m · dsum` (see `x86::shared::q4k_in`).
#[inline(always)]
unsafe fn q4k_in(acc: __m512, isum: __m512i, sc: (__m512, __m512), da: f32, dsum: f32) -> __m512 {
    let (dsc, dm) = sc;
    let acc = _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(isum),
        _mm512_mul_ps(dsc, _mm512_set1_ps(da)),
        acc,
    );
    _mm512_fnmadd_ps(dm, _mm512_set1_ps(dsum), acc)
}

/// Whether no lane of `w` is ±0 (then [`times_pow2`] may skip a zero test).
#[inline(always)]
unsafe fn all_nonzero(w: __m512) -> bool {
    let magnitude = _mm512_set1_epi32(0x7FFF_FFFF);
    _mm512_test_epi32_mask(_mm512_castps_si512(w), magnitude) == 0xFFFF
}

/// `w · a.d` for a `w` with no zero lane and a power-of-two `a.d = 2^k`
/// (`act::quantize_pow2`): `w` with `k` added to its exponent bits, bitwise the product
/// `_mm512_mul_ps(w, _mm512_set1_ps(a.d))` gives (scaling by a power of two is exact while the
/// result is a normal float, which the quantizer's clamps keep for f16 weight scales) — but an
/// integer add, which Zen 4 issues beside `vpdpbusd`, where the multiply takes one of its
/// slots (`examples/pipes.rs`). A zero lane would not stay zero: [`all_nonzero`] first (a
/// masked add, select or `and` measured slower than the multiply).
#[inline(always)]
unsafe fn times_pow2(w: __m512, a: &ActBlock) -> __m512 {
    let k = _mm512_set1_epi32(a.se);
    _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(w), k))
}

impl Tiles<Zmm, ActBlock> for Q4K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        let dmin = f16x2(p, q, 16);
        for s in 0..8 {
            let (pair, h) = (s / 2, s % 2);
            let mut sum = [_mm512_setzero_si512(); T];
            for k in 0..8 {
                let (lo, hi) = nibbles(p.add(128 + 256 * pair), q.add(128 + 256 * pair), k);
                let w = if h == 0 { lo } else { hi };
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s).qs.as_ptr() as *const u8;
                    sum[t] = dp(sum[t], w, bcast4(a.add(4 * k)));
                }
            }
            let sc = q4k_scales(p, q, d, dmin, s);
            // Q4_K's activations have power-of-two scales (`matmul::pow2_acts`); a sub-block
            // scale of zero (rare in real files) takes the multiply.
            if all_nonzero(sc.0) {
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    // q4k_in's operations, its `dsc · da` an exponent add (the same bits).
                    let v = _mm512_cvtepi32_ps(sum[t]);
                    let v = _mm512_fmadd_ps(v, times_pow2(sc.0, a), acc[t]);
                    acc[t] = _mm512_fnmadd_ps(sc.1, _mm512_set1_ps(a.dsum), v);
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

impl Tiles<Zmm, ActSplit16> for Q4K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActSplit16]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        let dmin = f16x2(p, q, 16);
        for s in 0..8 {
            let (pair, h) = (s / 2, s % 2);
            let mut low = [_mm512_setzero_si512(); T];
            let mut high = [_mm512_setzero_si512(); T];
            for k in 0..8 {
                let (lo, hi) = nibbles(p.add(128 + 256 * pair), q.add(128 + 256 * pair), k);
                let w = if h == 0 { lo } else { hi };
                for t in 0..T {
                    let a = x[t].get_unchecked(8 * sb + s);
                    let (al, ah) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                    low[t] = dp(low[t], bcast4(al.add(4 * k)), w);
                    high[t] = dp(high[t], w, bcast4(ah.add(4 * k)));
                }
            }
            let sc = q4k_scales(p, q, d, dmin, s);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + s);
                let isum = _mm512_add_epi32(_mm512_slli_epi32::<8>(high[t]), low[t]);
                acc[t] = q4k_in(acc[t], isum, sc, a.d, a.dsum);
            }
        }
    }
}

/// Both tiles' signed 6-bit quants of element group `g` in quarter `C` (see
/// `x86::shared::q6_group`).
#[inline(always)]
pub(crate) unsafe fn q6_group<const C: usize>(p: *const u8, q: *const u8, g: usize) -> __m512i {
    _mm512_sub_epi8(q6_group_u::<C>(p, q, g), _mm512_set1_epi8(32))
}

/// [`q6_group`] before the −32: both tiles' unsigned quants `0..=63`.
#[inline(always)]
unsafe fn q6_group_u<const C: usize>(p: *const u8, q: *const u8, g: usize) -> __m512i {
    let n = ld2(p, q, Q6K_LOW + 32 * (g % 32));
    let h = ld2(p, q, Q6K_HIGH + 32 * (g % 16));
    let n = if C >= 2 { _mm512_srli_epi16::<4>(n) } else { n };
    let lo = _mm512_and_si512(n, _mm512_set1_epi8(0x0F));
    let hs = match C {
        0 => _mm512_slli_epi16::<4>(h),
        1 => _mm512_slli_epi16::<2>(h),
        2 => h,
        _ => _mm512_srli_epi16::<2>(h),
    };
    let hi = _mm512_and_si512(hs, _mm512_set1_epi8(0x30));
    _mm512_or_si512(lo, hi)
}

/// Both tiles' scales of sub-block `s` times their `d`.
#[inline(always)]
pub(crate) unsafe fn q6_scales(p: *const u8, q: *const u8, d: __m512, s: usize) -> __m512 {
    let sc = _mm512_cvtepi8_epi32(bytes2(p, q, 16 + 8 * s));
    _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc))
}

/// Sub-blocks `4C..4C + 4` of both Q6_K tiles against 8-bit activations: unsigned quants,
/// then the activations' `32 · Σa` off the exact integer sum (see
/// `x86::avx512::tiles`).
#[inline(always)]
unsafe fn q6_quarter_i8<const C: usize, const T: usize>(
    p: *const u8,
    q: *const u8,
    x: &[&[ActBlock]; T],
    sb: usize,
    d: __m512,
    acc: &mut [__m512; T],
) {
    for s in 4 * C..4 * C + 4 {
        let mut sum = [_mm512_setzero_si512(); T];
        for g in 4 * s..4 * s + 4 {
            let w = q6_group_u::<C>(p, q, g);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + g / 8).qs.as_ptr() as *const u8;
                sum[t] = dp(sum[t], w, bcast4(a.add(4 * (g % 8))));
            }
        }
        let dsc = q6_scales(p, q, d, s);
        for t in 0..T {
            let a = x[t].get_unchecked(8 * sb + s / 2);
            let da = _mm512_set1_ps(a.d);
            let exact = _mm512_sub_epi32(sum[t], _mm512_set1_epi32(a.off32[s % 2]));
            let isum = _mm512_cvtepi32_ps(exact);
            acc[t] = _mm512_fmadd_ps(isum, _mm512_mul_ps(dsc, da), acc[t]);
        }
    }
}

/// Sub-blocks `4C..4C + 4` of both Q6_K tiles against 16-bit activations split into bytes.
#[inline(always)]
unsafe fn q6_quarter_i16<const C: usize, const T: usize>(
    p: *const u8,
    q: *const u8,
    x: &[&[ActSplit16]; T],
    sb: usize,
    d: __m512,
    acc: &mut [__m512; T],
) {
    let ones8 = _mm512_set1_epi8(1);
    let bias = _mm512_set1_epi8(-128);
    for s in 4 * C..4 * C + 4 {
        let mut low = [_mm512_setzero_si512(); T];
        let mut high = [_mm512_setzero_si512(); T];
        let mut wsum = _mm512_setzero_si512();
        for g in 4 * s..4 * s + 4 {
            let w = q6_group::<C>(p, q, g);
            wsum = dp(wsum, ones8, w);
            for t in 0..T {
                let a = x[t].get_unchecked(8 * sb + g / 8);
                let e = 4 * (g % 8);
                let (lo, hi) = (a.lo.as_ptr(), a.hi.as_ptr() as *const u8);
                low[t] = dp(low[t], bcast4(lo.add(e)), w);
                high[t] = dp(high[t], _mm512_xor_si512(bcast4(hi.add(e)), bias), w);
            }
        }
        let w128 = _mm512_slli_epi32::<7>(wsum);
        let dsc = q6_scales(p, q, d, s);
        for t in 0..T {
            let a = x[t].get_unchecked(8 * sb + s / 2);
            let hs = _mm512_slli_epi32::<8>(_mm512_sub_epi32(high[t], w128));
            let isum = _mm512_cvtepi32_ps(_mm512_add_epi32(hs, low[t]));
            acc[t] = _mm512_fmadd_ps(isum, _mm512_mul_ps(dsc, _mm512_set1_ps(a.d)), acc[t]);
        }
    }
}

impl Tiles<Zmm, ActBlock> for Q6K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        q6_quarter_i8::<0, T>(p, q, x, sb, d, acc);
        q6_quarter_i8::<1, T>(p, q, x, sb, d, acc);
        q6_quarter_i8::<2, T>(p, q, x, sb, d, acc);
        q6_quarter_i8::<3, T>(p, q, x, sb, d, acc);
    }
}

impl Tiles<Zmm, ActSplit16> for Q6K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActSplit16]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        q6_quarter_i16::<0, T>(p, q, x, sb, d, acc);
        q6_quarter_i16::<1, T>(p, q, x, sb, d, acc);
        q6_quarter_i16::<2, T>(p, q, x, sb, d, acc);
        q6_quarter_i16::<3, T>(p, q, x, sb, d, acc);
    }
}

/// Both tiles' MXFP4 scales (the e8m0 bytes at offset 0) as sixteen f32 lanes, as
/// `x86::shared::e8m0_lanes`.
#[inline(always)]
unsafe fn e8m0x2(p: *const u8, q: *const u8) -> __m512 {
    let e = _mm512_cvtepu8_epi32(bytes2(p, q, 0));
    let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
    let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
    let small = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(2), e);
    _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub))
}

/// MXFP4 as in `x86::avx512::tiles`: the codes looked up as unsigned `v + 128`, the offset taken
/// back through the activation's quant sum.
impl Tiles<Zmm, ActBlock> for Mx4 {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let k16 = crate::blocks::MXFP4_VALUES.map(|v| v.wrapping_add(-128));
        let t128 = _mm_setr_epi8(
            k16[0], k16[1], k16[2], k16[3], k16[4], k16[5], k16[6], k16[7], k16[8], k16[9],
            k16[10], k16[11], k16[12], k16[13], k16[14], k16[15],
        );
        let table = _mm512_broadcast_i32x4(t128);
        let mut s = [_mm512_setzero_si512(); T];
        for k in 0..4 {
            let (lo, hi) = nibbles_at(p, q, 8 + 32 * k);
            let (wl, wh) = (
                _mm512_shuffle_epi8(table, lo),
                _mm512_shuffle_epi8(table, hi),
            );
            for t in 0..T {
                let a = x[t].get_unchecked(i).qs.as_ptr() as *const u8;
                s[t] = dp(s[t], wl, bcast4(a.add(4 * k)));
                s[t] = dp(s[t], wh, bcast4(a.add(16 + 4 * k)));
            }
        }
        let d = e8m0x2(p, q);
        for t in 0..T {
            let a = x[t].get_unchecked(i);
            let isum = _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * a.isum));
            let da = _mm512_set1_ps(a.d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, da), acc[t]);
        }
    }
}

/// One block of 32 IQ4 codes of both tiles (the nibble vectors at offset `o`) against
/// activation block `blk`: `x86::avx512::tiles`' exact sums, sixteen rows at once.
#[inline(always)]
unsafe fn iq4_sums2<const T: usize>(
    (p, q): (*const u8, *const u8),
    o: usize,
    x: &[&[ActBlock]; T],
    blk: usize,
) -> [__m512i; T] {
    let k16 = crate::lowbit::IQ4_VALUES.map(|v| v.wrapping_add(-128));
    let t128 = _mm_setr_epi8(
        k16[0], k16[1], k16[2], k16[3], k16[4], k16[5], k16[6], k16[7], k16[8], k16[9], k16[10],
        k16[11], k16[12], k16[13], k16[14], k16[15],
    );
    let table = _mm512_broadcast_i32x4(t128);
    let mut s = [_mm512_setzero_si512(); T];
    for k in 0..4 {
        let (lo, hi) = nibbles_at(p, q, o + 32 * k);
        let (wl, wh) = (
            _mm512_shuffle_epi8(table, lo),
            _mm512_shuffle_epi8(table, hi),
        );
        for t in 0..T {
            let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
            s[t] = dp(s[t], wl, bcast4(a.add(4 * k)));
            s[t] = dp(s[t], wh, bcast4(a.add(16 + 4 * k)));
        }
    }
    std::array::from_fn(|t| {
        let isum = x[t].get_unchecked(blk).isum;
        _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * isum))
    })
}

/// IQ4_XS as in `x86::avx512::tiles`, both tiles' rows per vector: the sub-block scales
/// `d · (ls − 32)` of sixteen rows (as `x86::shared::iq4xs_scale`), then the same steps.
impl Tiles<Zmm, ActBlock> for Iq4Xs {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        let h = _mm512_cvtepu16_epi32(_mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(p.add(16) as *const __m128i)),
            _mm_loadu_si128(q.add(16) as *const __m128i),
        ));
        let l = ld2(p, q, 32);
        for c in 0..8 {
            let s = iq4_sums2((p, q), IQ4XS_QS + 128 * c, x, 8 * sb + c);
            let lo = _mm512_and_si512(
                _mm512_srlv_epi32(l, _mm512_set1_epi32(4 * c as i32)),
                _mm512_set1_epi32(0x0F),
            );
            let hi = _mm512_and_si512(
                _mm512_srlv_epi32(h, _mm512_set1_epi32(2 * c as i32)),
                _mm512_set1_epi32(3),
            );
            let ls = _mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi));
            let sc = _mm512_mul_ps(
                d,
                _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))),
            );
            for t in 0..T {
                let da = _mm512_set1_ps(x[t].get_unchecked(8 * sb + c).d);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(sc, da), acc[t]);
            }
        }
    }
}

/// `x86::shared::q3k_values` of both tiles (sixteen rows).
#[inline(always)]
unsafe fn q3k_values2<const C: usize>(p: *const u8, q: *const u8, k: usize) -> __m512i {
    let qs = ld2(p, q, Q3K_QS + 32 * (8 * (C / 4) + k));
    let hm = ld2(p, q, Q3K_HM + 32 * k);
    // Shift counts from the constant `C` (folded to immediates).
    let low = _mm512_and_si512(
        _mm512_srl_epi16(qs, _mm_cvtsi32_si128(2 * (C % 4) as i32)),
        _mm512_set1_epi8(3),
    );
    let high = if C <= 2 {
        _mm512_sll_epi16(hm, _mm_cvtsi32_si128((2 - C) as i32))
    } else {
        _mm512_srl_epi16(hm, _mm_cvtsi32_si128((C - 2) as i32))
    };
    _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(4)))
}

/// `x86::shared::q3k_scale` of both tiles' scale vectors `v`.
#[inline(always)]
unsafe fn q3k_scale2(v: &[__m512i; 3], s: usize) -> __m512i {
    let shr = |x: __m512i, n: usize| _mm512_srl_epi32(x, _mm_cvtsi32_si128(n as i32));
    let lo = _mm512_and_si512(
        shr(v[(s % 8) / 4], 8 * (s % 4) + 4 * (s / 8)),
        _mm512_set1_epi32(0x0F),
    );
    let hi = _mm512_and_si512(shr(v[2], 8 * (s % 4) + 2 * (s / 4)), _mm512_set1_epi32(3));
    _mm512_sub_epi32(
        _mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)),
        _mm512_set1_epi32(32),
    )
}

/// Half `H` of Q3_K group `C` of both tiles against 8-bit block `blk`: `x86::avx512::tiles`'
/// exact sums, sixteen rows at once.
#[inline(always)]
unsafe fn q3_half2<const C: usize, const H: usize, const T: usize>(
    (p, q): (*const u8, *const u8),
    x: &[&[ActBlock]; T],
    blk: usize,
) -> [__m512i; T] {
    let mut s: [__m512i; T] =
        std::array::from_fn(|t| _mm512_set1_epi32(-(x[t].get_unchecked(blk).off32[H] / 8)));
    for k in 4 * H..4 * H + 4 {
        let w = q3k_values2::<C>(p, q, k);
        for t in 0..T {
            let a = x[t].get_unchecked(blk).qs.as_ptr() as *const u8;
            s[t] = dp(s[t], w, bcast4(a.add(4 * k)));
        }
    }
    s
}

/// Q3_K as in `x86::shared::q3k_tile`, both tiles' rows per vector (the same steps per lane).
impl Tiles<Zmm, ActBlock> for Q3K {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        let sv: [__m512i; 3] = std::array::from_fn(|v| ld2(p, q, Q3K_SC + 32 * v));
        macro_rules! half {
            ($c:literal, $h:literal) => {{
                let blk = 8 * sb + $c;
                let s = q3_half2::<$c, $h, T>((p, q), x, blk);
                let sc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(q3k_scale2(&sv, 2 * $c + $h)));
                for t in 0..T {
                    let da = _mm512_set1_ps(x[t].get_unchecked(blk).d);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(sc, da), acc[t]);
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
}

/// `x86::shared::iq3s_values` of both tiles (sixteen rows): one 16-lane gather.
#[inline(always)]
unsafe fn iq3s_values2<const C: usize, const K: usize>(
    p: *const u8,
    q: *const u8,
    sg: __m512i,
) -> (__m512i, __m512i) {
    let shr = |x: __m512i, n: usize| _mm512_srl_epi32(x, _mm_cvtsi32_si128(n as i32));
    let qs = ld2(p, q, IQ3S_QS + 32 * (2 * C + K / 4));
    let qh = ld2(p, q, IQ3S_QH + 32 * (C / 4));
    let lo = _mm512_and_si512(shr(qs, 8 * (K % 4)), _mm512_set1_epi32(0xFF));
    let hi = _mm512_and_si512(shr(qh, 8 * (C % 4) + K), _mm512_set1_epi32(1));
    let idx = _mm512_or_si512(lo, _mm512_slli_epi32::<8>(hi));
    let g = _mm512_i32gather_epi32::<4>(idx, crate::iq_grids::IQ3S_GRID.as_ptr() as *const i32);
    let b = (K / 2) as i8;
    let half = _mm_setr_epi8(
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
    let pick = _mm512_broadcast_i32x4(half);
    let bits = _mm512_set1_epi32((0x0804_0201u32 << (4 * (K % 2))) as i32);
    let m = _mm512_movm_epi8(_mm512_cmpeq_epi8_mask(
        _mm512_and_si512(_mm512_shuffle_epi8(sg, pick), bits),
        bits,
    ));
    (g, m)
}

/// IQ3_S group `C` of both tiles against 8-bit block `blk`: `x86::avx512::tiles`' exact sums,
/// sixteen rows at once.
#[inline(always)]
unsafe fn iq3_group2<const C: usize, const T: usize>(
    (p, q): (*const u8, *const u8),
    x: &[&[ActBlock]; T],
    blk: usize,
) -> [__m512i; T] {
    let sg = ld2(p, q, IQ3S_SG + 32 * C);
    let mut s = [_mm512_setzero_si512(); T];
    macro_rules! chunk {
        ($k:literal) => {{
            let (g, m) = iq3s_values2::<C, $k>(p, q, sg);
            let ws = _mm512_sub_epi8(_mm512_xor_si512(g, m), m);
            let w = _mm512_xor_si512(ws, _mm512_set1_epi8(-128));
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
        _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * isum))
    })
}

/// IQ3_S as in `x86::shared::iq3s_tile`, both tiles' rows per vector (the same steps per lane).
impl Tiles<Zmm, ActBlock> for Iq3S {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = f16x2(p, q, 0);
        let sv = ld2(p, q, IQ3S_SC);
        macro_rules! group {
            ($c:literal) => {{
                let blk = 8 * sb + $c;
                let s = iq3_group2::<$c, T>((p, q), x, blk);
                let nib = _mm512_and_si512(
                    _mm512_srl_epi32(sv, _mm_cvtsi32_si128(4 * $c)),
                    _mm512_set1_epi32(0x0F),
                );
                let odd = _mm512_add_epi32(_mm512_slli_epi32::<1>(nib), _mm512_set1_epi32(1));
                let sc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(odd));
                for t in 0..T {
                    let da = _mm512_set1_ps(x[t].get_unchecked(blk).d);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(sc, da), acc[t]);
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
}

/// IQ4_NL (Q4_0's tiles) as in `x86::avx512::tiles`, both tiles' rows per vector.
impl Tiles<Zmm, ActBlock> for Iq4Nl {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        i: usize,
        acc: &mut [__m512; T],
    ) {
        let s = iq4_sums2((p, q), 16, x, i);
        let d = f16x2(p, q, 0);
        for t in 0..T {
            let da = _mm512_set1_ps(x[t].get_unchecked(i).d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(d, da), acc[t]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Vnni, Zmm};
    use crate::act::blocks::{quantize16_scalar, Act16Block};
    use crate::tiles::{Mx4, TileIsa, Q80};
    use crate::{blocks, DType, PackedMatrix, WeightMatrix};

    /// The pair passes of Q8_0 and MXFP4 with 16-bit activations (each group through the
    /// 256-bit kernel on half of the 512-bit accumulators) give the 256-bit passes' bits.
    #[test]
    fn pair_passes_over_256_bit_kernels_give_their_bits() {
        if !crate::Isa::detect().avx512() {
            return;
        }
        let (rows, cols) = (16, 128);
        let mut s = 12345u32;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32 - 0.5
        };
        let x: Vec<f32> = (0..3 * cols).map(|_| rnd()).collect();
        let mut a = vec![Act16Block::default(); 3 * cols / 32];
        quantize16_scalar(&x, &mut a);
        let acts: [&[Act16Block]; 3] = std::array::from_fn(|t| &a[t * 4..(t + 1) * 4]);
        for dtype in [DType::Q8_0, DType::MXFP4] {
            let w: Vec<f32> = (0..rows * cols).map(|_| 4.0 * rnd()).collect();
            let data: Vec<u8> = w
                .chunks(cols)
                .flat_map(|r| blocks::quantize_row(dtype, r))
                .collect();
            let m = WeightMatrix::new(dtype, rows, cols, &data).expect("geometry");
            let packed = PackedMatrix::pack(&m).expect("packable");
            let v = packed.view();
            let gb = v.data.len() / 2;
            let (p, q) = (v.data.as_ptr(), v.data[gb..].as_ptr());
            // SAFETY: AVX-512 F/BW/VL/VNNI was detected (an AVX-512 Isa); p and q each point
            // at cols / 32 tiles of the format, one per activation block.
            let (pair, lo, hi) = unsafe {
                match dtype {
                    DType::Q8_0 => (
                        Zmm::run::<_, Q80, 3>((p, q), acts),
                        Vnni::run::<_, Q80, 3>(p, acts),
                        Vnni::run::<_, Q80, 3>(q, acts),
                    ),
                    _ => (
                        Zmm::run::<_, Mx4, 3>((p, q), acts),
                        Vnni::run::<_, Mx4, 3>(p, acts),
                        Vnni::run::<_, Mx4, 3>(q, acts),
                    ),
                }
            };
            for t in 0..3 {
                let want: Vec<u32> = lo[t][..8]
                    .iter()
                    .chain(&hi[t][..8])
                    .map(|v| v.to_bits())
                    .collect();
                let got: Vec<u32> = pair[t].iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{dtype:?} token {t}");
                assert!(
                    pair[t].iter().any(|&v| v != 0.0),
                    "{dtype:?}: a product was computed"
                );
            }
        }
    }

    /// Both tiles' e8m0 bytes, every value including the two subnormal ones, convert as the
    /// scalar reference (`p`'s in lanes 0..8, `q`'s in 8..16).
    #[test]
    fn e8m0x2_matches_the_scalar_conversion_for_every_byte() {
        if !crate::Isa::detect().avx512() {
            return;
        }
        for base in (0..=255u8).step_by(16) {
            let p: [u8; 8] = std::array::from_fn(|i| base.wrapping_add(i as u8));
            let q: [u8; 8] = std::array::from_fn(|i| base.wrapping_add(8 + i as u8));
            let mut got = [0f32; 16];
            // SAFETY: AVX-512 F/BW/VL was detected (an AVX-512 Isa); `p` and `q` hold the bytes
            // read.
            unsafe { run(&p, &q, &mut got) };
            for (g, &e) in got.iter().zip(p.iter().chain(&q)) {
                assert_eq!(
                    g.to_bits(),
                    crate::blocks::e8m0_half(e).to_bits(),
                    "e = {e}"
                );
            }
        }
    }

    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn run(p: &[u8; 8], q: &[u8; 8], out: &mut [f32; 16]) {
        std::arch::x86_64::_mm512_storeu_ps(
            out.as_mut_ptr(),
            super::e8m0x2(p.as_ptr(), q.as_ptr()),
        );
    }
}
