//! Lattice tiles (IQ3_S, IQ2_S) decoded once per prefill chunk: their grid entries gathered,
//! signs applied and scales computed into plain bytes, which every eight-token pass of the
//! chunk then multiplies like any 8-bit tile — in pairs of row groups on 512-bit vectors.
//!
//! Why: a lattice tile's products are cheap, its decoding is not (one gather per four or eight
//! values of eight rows). A chunk of 64 tokens would decode every tile eight times, once per
//! pass; decoded once, the gathers cost an eighth of that. The decoded bytes are ~3–4× the
//! stored ones, so a chunk is decoded slab by slab (a few row groups, [`SLAB_BYTES`]) that
//! stays in L2 while the passes read it. The integer sums and float steps are the gathering
//! kernels' own, so the outputs are their bits (the packed-tiles test runs one token alone and
//! among 17).

// Token index `t` and half `h` address accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::tiles::{self, Vnni, MAX_TOKENS};
use super::tiles_zmm::{bcast4, dp, ld2, Zmm};
use crate::act::blocks::ActBlock;
use crate::matmul::acts::CallActs;
use crate::matrix::WeightMatrix;
use crate::packed::layout::TILE_ROWS;
use crate::pool::SharedMut;
use crate::tiles::{Iq2SDec, Iq3SDec, PassActs, TileFormat, TileIsa, Tiles};
use crate::x86::iq2s::half_offset;
use crate::x86::shared::each_token;
use std::arch::x86_64::*;

/// Tokens from which a lattice chunk is decoded once ([`chunk`]) instead of gathering its grid
/// entries in every eight-token pass.
pub(super) const DECODE_FROM: usize = 16;

/// Bytes of decoded tiles [`chunk`] keeps per slab of row groups.
const SLAB_BYTES: usize = 256 << 10;

thread_local! {
    /// The decoded lattice tiles of the slab being multiplied; grows, never shrinks.
    static DECODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A lattice format's tiles decoded for a prefill chunk: the stored tile's size, the decoder
/// into this format's bytes, and its kernels on one and on two row groups.
pub(super) trait DecodedTiles:
    TileFormat + Tiles<Vnni, ActBlock> + Tiles<Zmm, ActBlock>
{
    /// Bytes of one stored tile.
    const STORED: usize;
    /// Decodes the stored tile at `p` into `Self::BYTES` bytes at `out`.
    ///
    /// # Safety
    /// AVX2 and AVX-512 F/BW/VL are available; `p` points at one stored tile, `out` at
    /// `Self::BYTES` writable bytes.
    unsafe fn decode(p: *const u8, out: *mut u8);
}

impl DecodedTiles for Iq3SDec {
    const STORED: usize = crate::packed::layout::IQ3_S_TILE;
    #[inline(always)]
    unsafe fn decode(p: *const u8, out: *mut u8) {
        tiles::iq3s_decode_tile(p, out)
    }
}

impl DecodedTiles for Iq2SDec {
    const STORED: usize = crate::packed::layout::IQ2_S_TILE;
    #[inline(always)]
    unsafe fn decode(p: *const u8, out: *mut u8) {
        tiles::iq2s_decode_tile(p, out)
    }
}

/// `super::tiled_chunk` for a lattice format with many 8-bit tokens: slab by slab of row groups,
/// the slab's tiles decoded, then every pass of up to eight tokens over them.
///
/// # Safety
/// As `super::tiled_chunk`, with `D` the decoded form of `w`'s format.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn chunk<D: DecodedTiles>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let nb = w.cols / 256;
    let slab = (SLAB_BYTES / (nb * D::BYTES)).max(1);
    DECODED.with(|b| {
        let mut buf = b.borrow_mut();
        let need = slab.min((r1 - r0) / TILE_ROWS) * nb * D::BYTES;
        if buf.len() < need {
            buf.resize(need, 0);
        }
        let mut g0 = r0 / TILE_ROWS;
        while g0 < r1 / TILE_ROWS {
            let g1 = (g0 + slab).min(r1 / TILE_ROWS);
            for g in g0..g1 {
                for i in 0..nb {
                    // SAFETY: tile i of group g lies inside w (whole groups, this function's
                    // contract); its decoded copy lies inside the buffer sized above.
                    D::decode(
                        w.data.as_ptr().add((g * nb + i) * D::STORED),
                        buf.as_mut_ptr().add(((g - g0) * nb + i) * D::BYTES),
                    );
                }
            }
            let mut t = 0;
            while t < n {
                let step = (n - t).min(MAX_TOKENS);
                // SAFETY (each arm): the buffer holds the slab's decoded groups; t + step <= n.
                match step {
                    1 => tokens::<D, 1>(&buf, nb, a, t, g0, g1, y, rows),
                    2 => tokens::<D, 2>(&buf, nb, a, t, g0, g1, y, rows),
                    3 => tokens::<D, 3>(&buf, nb, a, t, g0, g1, y, rows),
                    4 => tokens::<D, 4>(&buf, nb, a, t, g0, g1, y, rows),
                    5 => tokens::<D, 5>(&buf, nb, a, t, g0, g1, y, rows),
                    6 => tokens::<D, 6>(&buf, nb, a, t, g0, g1, y, rows),
                    7 => tokens::<D, 7>(&buf, nb, a, t, g0, g1, y, rows),
                    _ => tokens::<D, 8>(&buf, nb, a, t, g0, g1, y, rows),
                }
                t += step;
            }
            g0 = g1;
        }
    });
}

/// Tokens `t..t + T` against the decoded groups `g0..g1` in `buf`: pairs of groups on 512-bit
/// vectors, a last odd group on 256-bit ones (the same steps per lane, so the same bits).
///
/// # Safety
/// As [`chunk`]; `buf` holds the groups' decoded tiles; `t + T <= n`.
#[allow(clippy::too_many_arguments)]
unsafe fn tokens<D: DecodedTiles, const T: usize>(
    buf: &[u8],
    nb: usize,
    a: &CallActs<'_>,
    t: usize,
    g0: usize,
    g1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let acts = PassActs::<T>::of(a, t);
    let group_bytes = nb * D::BYTES;
    let mut g = g0;
    while g < g1 {
        let src = buf.as_ptr().add((g - g0) * group_bytes);
        let (done, out): (usize, [[f32; 16]; T]) = if g + 2 <= g1 {
            let o = <Zmm as TileIsa>::run::<_, D, T>(Zmm::src(src, group_bytes), acts.x8);
            (2, o)
        } else {
            let o = <Vnni as TileIsa>::run::<_, D, T>(src, acts.x8);
            (
                1,
                std::array::from_fn(|j| {
                    let mut v = [0f32; 16];
                    v[..8].copy_from_slice(&o[j]);
                    v
                }),
            )
        };
        for (j, oj) in out.iter().enumerate() {
            let dst = y.ptr().add((t + j) * rows + g * TILE_ROWS);
            std::ptr::copy_nonoverlapping(oj.as_ptr(), dst, done * TILE_ROWS);
        }
        g += done;
    }
}

/// Two decoded IQ3_S tiles (sixteen rows) against 8-bit activations: the 256-bit kernel's
/// steps (`x86::avx512::tiles`) on both halves of every vector. A group's eight value vectors
/// are loaded once and stay in registers while the tokens pass (token by token, so each
/// token's sums live only for its own steps: no spills with eight tokens).
impl Tiles<Zmm, ActBlock> for Iq3SDec {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        for c in 0..8 {
            let o = 288 * c;
            let blk = 8 * sb + c;
            let w: [__m512i; 8] = std::array::from_fn(|k| ld2(p, q, o + 32 + 32 * k));
            let sc = _mm512_castsi512_ps(ld2(p, q, o));
            each_token!(T, |t| {
                let a = x[t].get_unchecked(blk);
                let qs = a.qs.as_ptr() as *const u8;
                let mut s = _mm512_set1_epi32(-128 * a.isum);
                for k in 0..8 {
                    s = dp(s, w[k], bcast4(qs.add(4 * k)));
                }
                let da = _mm512_set1_ps(a.d);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, da), acc[t]);
            });
        }
    }
}

/// Two decoded IQ2_S tiles (sixteen rows) against 8-bit activations: the 256-bit kernel's
/// steps (`x86::avx512::tiles`) on both halves of every vector, token by token as IQ3_S's.
impl Tiles<Zmm, ActBlock> for Iq2SDec {
    #[inline(always)]
    unsafe fn tile<const T: usize>(
        (p, q): (*const u8, *const u8),
        x: &[&[ActBlock]; T],
        sb: usize,
        acc: &mut [__m512; T],
    ) {
        let d = _mm512_castsi512_ps(ld2(p, q, 0));
        for c in 0..8 {
            let o = 32 + 320 * c;
            let blk = 8 * sb + c;
            let w: [__m512i; 8] = std::array::from_fn(|k| ld2(p, q, o + 64 + 32 * k));
            let (odd0, odd1) = (ld2(p, q, o), ld2(p, q, o + 32));
            each_token!(T, |t| {
                let a = x[t].get_unchecked(blk);
                let qs = a.qs.as_ptr() as *const u8;
                let mut s0 = _mm512_set1_epi32(-half_offset(a, 0));
                let mut s1 = _mm512_set1_epi32(-half_offset(a, 1));
                for k in 0..4 {
                    s0 = dp(s0, w[k], bcast4(qs.add(4 * k)));
                    s1 = dp(s1, w[4 + k], bcast4(qs.add(16 + 4 * k)));
                }
                let si =
                    _mm512_add_epi32(_mm512_mullo_epi32(s0, odd0), _mm512_mullo_epi32(s1, odd1));
                let da = _mm512_set1_ps(a.d);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(d, da), acc[t]);
            });
        }
    }
}
