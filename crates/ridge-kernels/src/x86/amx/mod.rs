//! AMX tile products (Intel Sapphire Rapids and later): the tiled formats' 8-bit products for
//! whole blocks of 16 tokens, one `tdpbsud`/`tdpbssd` per sub-block of 16 weight rows × 16
//! tokens × 32 (or 16) elements.
//!
//! Why: one tile product is 8,192 multiply-adds in about the time a 512-bit `vpdpbusd` does 64
//! per port; what bounds the VNNI kernels — decoding nibbles for every pass and one `vpdpbusd`
//! per four elements per token — becomes a one-off decode of each weight tile per call and a
//! float epilogue per sub-block. The epilogue stays: every activation block has its own scale,
//! so each sub-block's 16 × 16 integer sums are stored, converted and scaled into the
//! accumulators with exactly the VNNI kernels' float operations in their order. The integer
//! sums are exact on both paths, so the outputs are the VNNI (and AVX2) path's bits.
//!
//! How a call runs: the chunk's weight tiles are built once into a per-thread buffer (for each
//! pair of eight-row tile groups, each sub-block's weight tile and its 16 rows' scales), then
//! every block of 16 tokens walks the pairs, sub-block by sub-block, with two result tiles in
//! turn so that one sub-block's product runs while the previous one's sums are scaled. Tokens
//! past the last whole block of 16, a chunk's odd last group, 16-bit activations and MXFP4 take
//! the VNNI kernels ([`crate::x86::avx512`]), which give the same bits.

pub(crate) mod formats;
pub(crate) mod tile;

use crate::act::blocks::ActBlock;
use crate::matmul::acts::{CallActs, Path};
use crate::matrix::WeightMatrix;
use crate::packed::layout::TILE_ROWS;
use crate::pool::SharedMut;
use crate::tiles::{Q40, Q41, Q4K, Q50, Q51, Q6K, Q80};
use crate::x86::avx512;
use crate::DType;
use formats::{subs, AmxTiles, Constant};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Tokens per tile product (the rows of an activation tile).
pub(crate) const TOKENS: usize = 16;

/// Weight rows per tile product (two eight-row tile groups).
const ROWS: usize = 2 * TILE_ROWS;

/// One cache line of the per-thread buffer.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

thread_local! {
    /// Two result tiles, then the chunk's built weight tiles and scales; grows, never shrinks.
    static BUF: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

/// Tokens `0..n` against rows `r0..r1` (whole tile groups) of a tiled matrix: AMX for whole
/// blocks of 16 tokens over pairs of groups where the format and path have a tile form, the
/// VNNI kernels for the rest (see the module docs). Same contract and bits as
/// [`avx512::tiled_chunk`].
///
/// # Safety
/// AVX2/FMA/F16C, AVX-512 F/BW/VL/VNNI and AMX-TILE/INT8 are available and the tile state was
/// granted (an AMX [`crate::Isa`]); otherwise as [`avx512::tiled_chunk`].
pub(crate) unsafe fn tiled_chunk(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let whole = n / TOKENS * TOKENS;
    let pairs = (r1 - r0) / ROWS;
    if a.path != Path::Int8 || !formats::has(w.dtype) || whole == 0 || pairs == 0 {
        return avx512::tiled_chunk(w, a, n, r0, r1, y, rows);
    }
    let end = r0 + pairs * ROWS;
    // SAFETY (each arm): this function's contract; the arm's format is the matrix's.
    match w.dtype {
        DType::Q4_0 => products::<Q40>(w, a, whole, r0, end, y, rows),
        DType::Q4_1 => products::<Q41>(w, a, whole, r0, end, y, rows),
        DType::Q5_0 => products::<Q50>(w, a, whole, r0, end, y, rows),
        DType::Q5_1 => products::<Q51>(w, a, whole, r0, end, y, rows),
        DType::Q8_0 => products::<Q80>(w, a, whole, r0, end, y, rows),
        DType::Q4_K => products::<Q4K>(w, a, whole, r0, end, y, rows),
        _ => products::<Q6K>(w, a, whole, r0, end, y, rows),
    }
    // SAFETY: the same rows and outputs this call owns, other tokens or rows than above.
    avx512::tiled_tokens(w, a, whole, n, r0, end, y, rows);
    if end < r1 {
        avx512::tiled_chunk(w, a, n, end, r1, y, rows);
    }
}

/// Tokens `0..n` (`n` a multiple of [`TOKENS`]) against rows `r0..r1` (whole pairs of groups)
/// of a tiled matrix of format `F`, 8-bit activations.
///
/// # Safety
/// As [`tiled_chunk`], with `F` the matrix's format.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn products<F: AmxTiles>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let nb = w.cols / 32;
    let tiles = w.cols / w.dtype.block_size();
    let group_bytes = tiles * F::BYTES;
    let weight_bytes = F::K * ROWS;
    // A sub-block's weight tile, then its scales and constant-term factors (64 bytes each).
    let entry = weight_bytes + 128;
    let steps = tiles * subs::<F>();
    let pairs = (r1 - r0) / ROWS;
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        let lines = 32 + pairs * steps * entry / 64;
        if buf.len() < lines {
            buf.resize(lines, Line([0; 64]));
        }
        let results = buf.as_mut_ptr() as *mut u8;
        let built = results.add(2048);
        for pair in 0..pairs {
            let p = w
                .data
                .as_ptr()
                .add((r0 / TILE_ROWS + 2 * pair) * group_bytes);
            let q = p.add(group_bytes);
            for j in 0..steps {
                let (i, s) = (j / subs::<F>(), j % subs::<F>());
                let e = built.add((pair * steps + j) * entry);
                let (scale, second) = F::build(p.add(i * F::BYTES), q.add(i * F::BYTES), s, e);
                _mm512_store_ps(e.add(weight_bytes) as *mut f32, scale);
                _mm512_store_ps(e.add(weight_bytes + 64) as *mut f32, second);
            }
        }
        tile::configure();
        let stride = nb * std::mem::size_of::<ActBlock>();
        // Step `j`'s activation block and the byte where its sub-block starts.
        let block = |j: usize| {
            let (i, s) = (j / subs::<F>(), j % subs::<F>());
            (i * F::SPAN + s * F::K / 32, s * F::K % 32)
        };
        for t0 in (0..n).step_by(TOKENS) {
            let x = a.q8.as_ptr().add(t0 * nb);
            for pair in 0..pairs {
                let mut acc = [_mm512_setzero_ps(); TOKENS];
                let ws = built.add(pair * steps * entry);
                for j in 0..steps {
                    let (b, off) = block(j);
                    let at = (x.add(b) as *const u8).add(off);
                    if j % 2 == 0 {
                        product::<0, F>(at, stride, ws.add(j * entry), results);
                    } else {
                        product::<1, F>(at, stride, ws.add(j * entry), results.add(1024));
                    }
                    if j > 0 {
                        let (pb, _) = block(j - 1);
                        let e = ws.add((j - 1) * entry + weight_bytes);
                        scale_into::<F>(
                            &mut acc,
                            results.add(1024 * ((j - 1) % 2)),
                            e,
                            x.add(pb),
                            nb,
                        );
                    }
                }
                let (pb, _) = block(steps - 1);
                let e = ws.add((steps - 1) * entry + weight_bytes);
                scale_into::<F>(
                    &mut acc,
                    results.add(1024 * ((steps - 1) % 2)),
                    e,
                    x.add(pb),
                    nb,
                );
                for (t, v) in acc.iter().enumerate() {
                    _mm512_storeu_ps(y.ptr().add((t0 + t) * rows + r0 + ROWS * pair), *v);
                }
            }
        }
        tile::release();
    });
}

/// One sub-block's product into result tile `C`, stored at `out`: 16 tokens' activation bytes
/// from `at` (`stride` bytes apart) against the weight tile at `wt`.
///
/// # Safety
/// The tiles are configured on this thread; `at` + 15 strides holds `F::K` readable bytes,
/// `wt` a built weight tile, `out` 1024 writable bytes.
#[inline(always)]
unsafe fn product<const C: u8, F: AmxTiles>(
    at: *const u8,
    stride: usize,
    wt: *const u8,
    out: *mut u8,
) {
    if F::K == 32 {
        tile::load::<2>(at, stride);
        tile::load::<3>(wt, 64);
        tile::zero::<C>();
        match F::SIGNED {
            true => tile::dot::<C, 2, 3, true>(),
            false => tile::dot::<C, 2, 3, false>(),
        }
    } else {
        tile::load::<4>(at, stride);
        tile::load::<5>(wt, 64);
        tile::zero::<C>();
        match F::SIGNED {
            true => tile::dot::<C, 4, 5, true>(),
            false => tile::dot::<C, 4, 5, false>(),
        }
    }
    tile::store::<C>(out);
}

/// A sub-block's stored 16 × 16 sums (`sums`, token-major) into the accumulators with the
/// scales at `sc` (scale, then the constant-term factor), against each token's activation
/// block (`x`, tokens `nb` blocks apart): `acc + isum · (scale · da)`, then the constant term,
/// as the VNNI kernels.
///
/// # Safety
/// AVX-512F; `sums` holds 1024 bytes, `sc` 128 (64-aligned), `x` 16 blocks `nb` apart.
#[inline(always)]
unsafe fn scale_into<F: AmxTiles>(
    acc: &mut [__m512; TOKENS],
    sums: *const u8,
    sc: *const u8,
    x: *const ActBlock,
    nb: usize,
) {
    let scale = _mm512_load_ps(sc as *const f32);
    let second = _mm512_load_ps(sc.add(64) as *const f32);
    for (t, acc) in acc.iter_mut().enumerate() {
        let a = &*x.add(t * nb);
        let isum = _mm512_load_si512(sums.add(64 * t) as *const __m512i);
        let v = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(isum),
            _mm512_mul_ps(scale, _mm512_set1_ps(a.d)),
            *acc,
        );
        *acc = match F::CONSTANT {
            Constant::None => v,
            Constant::Add => _mm512_fmadd_ps(second, _mm512_set1_ps(a.dsum), v),
            Constant::Sub(off) => _mm512_fnmadd_ps(second, _mm512_set1_ps(off * a.dsum), v),
        };
    }
}
