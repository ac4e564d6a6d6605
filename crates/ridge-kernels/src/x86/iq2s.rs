//! The IQ2_S tile pieces both x86 instruction sets share (see
//! [`crate::packed::layout::IQ2_S_TILE`]): the grid indices, the scales, the sums against
//! 16-bit activations and the tile body, written once over two per-ISA steps — how eight rows'
//! grid entries are fetched ([`Iq2Grid`]) and how 8-bit activations meet them ([`Iq2Sums`]).
//!
//! Why its own file: an IQ2_S grid entry is eight values (a `u64`), where every other tiled
//! format's lanes hold four per row. The AVX-512 path fetches the eight rows' entries with one
//! 64-bit gather and splits them into the two four-value vectors the tile kernels' 32-bit
//! lanes take (one permute); the AVX2 path gathers the two halves as 32-bit words. Either way
//! the vectors, the integer sums and the float steps are the same, so the same bits.
#![allow(clippy::needless_range_loop)]

use crate::act::blocks::{Act16Block, ActBlock};
use crate::packed::layout::{IQ2S_QH, IQ2S_QS, IQ2S_SC, IQ2S_SG};
use crate::x86::shared::{lattice_signs, word_sums, IntDot};
use std::arch::x86_64::*;

/// The grid indices of chunk `L` (elements `8L..8L + 8`) of element group `C` of the eight rows
/// of the IQ2_S tile at `p`: `qs[4C + L] | ((qh[C] >> 2L) & 3) << 8` in lane `j` (0..1024).
#[inline(always)]
pub(crate) unsafe fn iq2s_index<const C: usize, const L: usize>(p: *const u8) -> __m256i {
    let shr = |x: __m256i, n: usize| _mm256_srl_epi32(x, _mm_cvtsi32_si128(n as i32));
    let qs = _mm256_loadu_si256(p.add(IQ2S_QS + 32 * C) as *const __m256i);
    let qh = _mm256_loadu_si256(p.add(IQ2S_QH + 32 * (C / 4)) as *const __m256i);
    let lo = _mm256_and_si256(shr(qs, 8 * L), _mm256_set1_epi32(0xFF));
    let hi = _mm256_and_si256(shr(qh, 8 * (C % 4) + 2 * L), _mm256_set1_epi32(3));
    _mm256_or_si256(lo, _mm256_slli_epi32::<8>(hi))
}

/// An instruction set's fetch of IQ2_S grid entries.
pub(crate) trait Iq2Grid {
    /// The magnitudes (8, 25 or 43, unsigned bytes) of chunk `L` of group `C` of the eight rows
    /// of the IQ2_S tile at `p`: elements `8L..8L + 4` and `8L + 4..8L + 8`, lane `j` row `j`'s
    /// four values.
    ///
    /// # Safety
    /// The instruction set's features are available; `p` points at an IQ2_S tile.
    unsafe fn magnitudes<const C: usize, const L: usize>(p: *const u8) -> (__m256i, __m256i);
}

/// Chunk `L` of group `C` as signed bytes (elements `8L..8L + 4`, `8L + 4..8L + 8`): the
/// magnitudes with their sign bits (`sg`, group `C`'s sign vector) applied.
#[inline(always)]
pub(crate) unsafe fn iq2s_signed<G: Iq2Grid, const C: usize, const L: usize>(
    p: *const u8,
    sg: __m256i,
) -> (__m256i, __m256i) {
    let (g0, g1) = G::magnitudes::<C, L>(p);
    let apply = |g: __m256i, m: __m256i| _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
    // Sub-chunks 2L and 2L + 1 of the group's eight four-value chunks.
    let (m0, m1) = match L {
        0 => (lattice_signs::<0>(sg), lattice_signs::<1>(sg)),
        1 => (lattice_signs::<2>(sg), lattice_signs::<3>(sg)),
        2 => (lattice_signs::<4>(sg), lattice_signs::<5>(sg)),
        _ => (lattice_signs::<6>(sg), lattice_signs::<7>(sg)),
    };
    (apply(g0, m0), apply(g1, m1))
}

/// Half `H` (elements `16H..16H + 16`) of group `C` as signed bytes: four four-value chunks.
#[inline(always)]
pub(crate) unsafe fn iq2s_half<G: Iq2Grid, const C: usize, const H: usize>(
    p: *const u8,
) -> [__m256i; 4] {
    let sg = _mm256_loadu_si256(p.add(IQ2S_SG + 32 * C) as *const __m256i);
    let ((a, b), (c, d)) = match H {
        0 => (iq2s_signed::<G, C, 0>(p, sg), iq2s_signed::<G, C, 1>(p, sg)),
        _ => (iq2s_signed::<G, C, 2>(p, sg), iq2s_signed::<G, C, 3>(p, sg)),
    };
    [a, b, c, d]
}

/// The eight rows' odd scale factors `2s + 1` of half `h` of group `c` (lane `j`: `s` nibble
/// `h` of row `j`'s `scales[c]`): the value of an element is `d / 8 · (2s + 1) · v` (the
/// reference's `d · (0.5 + s) · 0.25 · v`).
#[inline(always)]
pub(crate) unsafe fn iq2s_odd(p: *const u8, c: usize, h: usize) -> __m256i {
    let v = _mm256_loadu_si256(p.add(IQ2S_SC + 32 * (c / 4)) as *const __m256i);
    let s = _mm256_and_si256(
        _mm256_srl_epi32(v, _mm_cvtsi32_si128((8 * (c % 4) + 4 * h) as i32)),
        _mm256_set1_epi32(0x0F),
    );
    _mm256_add_epi32(_mm256_slli_epi32::<1>(s), _mm256_set1_epi32(1))
}

/// The eight rows' `d / 8` (exact: an f16 times a power of two).
#[inline(always)]
pub(crate) unsafe fn iq2s_d(p: *const u8) -> __m256 {
    let d8 = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    _mm256_mul_ps(d8, _mm256_set1_ps(0.125))
}

/// A group's exact integer sum over its two halves, each half's sum times its odd scale factor
/// (below 2³¹: 2 · 31 · 16 · 43 · 32 768 with 16-bit activations; exact in f32 with 8-bit
/// ones, below 2 · 31 · 16 · 43 · 128 < 2²⁴).
#[inline(always)]
pub(crate) unsafe fn iq2s_combine(
    s0: __m256i,
    odd0: __m256i,
    s1: __m256i,
    odd1: __m256i,
) -> __m256i {
    _mm256_add_epi32(_mm256_mullo_epi32(s0, odd0), _mm256_mullo_epi32(s1, odd1))
}

/// An activation block type's IQ2_S sums on instruction set `I`: the exact integer sums of half
/// `H` of element group `C` of the eight rows of an IQ2_S tile (signed values, −43..43)
/// against block `blk` of each token.
pub(crate) trait Iq2Sums<I>: Sized {
    /// The block's scale.
    fn scale(&self) -> f32;
    /// The sums (see the trait).
    ///
    /// # Safety
    /// `I`'s features are available; `p` points at an IQ2_S tile; every `x[t]` holds block
    /// `blk`.
    unsafe fn sums<const C: usize, const H: usize, const T: usize>(
        p: *const u8,
        x: &[&[Self]; T],
        blk: usize,
    ) -> [__m256i; T];
}

/// IQ2_S against 16-bit activations: the signed values widened once for all tokens (each
/// half's sum below 16 · 43 · 32 768 < 2³¹).
impl<I: IntDot + Iq2Grid> Iq2Sums<I> for Act16Block {
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
        let w = iq2s_half::<I, C, H>(p);
        word_sums::<I, T>(x, blk, 4 * H..4 * H + 4, |k| w[k - 4 * H])
    }
}

/// `128 · Σq` over elements `16h..16h + 16` of an 8-bit block: what `v + 128` values add to a
/// half's sum.
#[inline(always)]
pub(crate) fn half_offset(a: &ActBlock, h: usize) -> i32 {
    4 * a.off32[h]
}

/// Eight tiled IQ2_S rows (the super-block tile at `p`), group by group: the group's exact
/// integer sum ([`iq2s_combine`]) times the rows' `d / 8` times the activation scale, one FMA.
#[inline(always)]
pub(crate) unsafe fn iq2s_tile<I, A: Iq2Sums<I>, const T: usize>(
    p: *const u8,
    x: &[&[A]; T],
    sb: usize,
    acc: &mut [__m256; T],
) {
    let d = iq2s_d(p);
    // Group as a constant: every shift an immediate, every accumulator a register.
    macro_rules! group {
        ($c:literal) => {{
            let blk = 8 * sb + $c;
            let s0 = A::sums::<$c, 0, T>(p, x, blk);
            let s1 = A::sums::<$c, 1, T>(p, x, blk);
            let (odd0, odd1) = (iq2s_odd(p, $c, 0), iq2s_odd(p, $c, 1));
            for t in 0..T {
                let s = iq2s_combine(s0[t], odd0, s1[t], odd1);
                let da = _mm256_set1_ps(x[t].get_unchecked(blk).scale());
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, da), acc[t]);
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
