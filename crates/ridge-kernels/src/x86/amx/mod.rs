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
//! pair of eight-row tile groups, each sub-block's weight tile and its 16 rows' scales); each
//! block of 16 tokens is copied into activation panels (one contiguous 16 × 32-byte tile per
//! activation block, the 16 scales and constant-term factors in a line each), then walks the
//! pairs sub-block by sub-block, three sub-blocks in flight: one multiplied, the one before
//! stored, the one before that scaled into the accumulators, its scaling cut into quarters
//! between the tile instructions. Two result tiles take the products in turn: on the Xeon
//! measured, products rotating through four result tiles ran slower than through two, and one
//! accumulator chained ran fastest of all (`tools/amx/costs.c`, history session 26). Tokens
//! past the last whole block of 16, a chunk's odd last group, 16-bit activations and MXFP4
//! take the VNNI kernels ([`crate::x86::avx512`]), which give the same bits.
//!
//! What bounds it (measured on an Intel Xeon, family 6 model 207, under KVM): the tile
//! instructions do not overlap the vector work around them — a sub-block's two tile loads,
//! product and 1 KiB result store take about as long as its float scaling (16 tokens × four
//! 512-bit operations), and the two add up. Interleaving by hand recovers some of it. A tile
//! product of 32-element sub-blocks runs at half the unit's peak (a 64-byte row costs the same
//! time), but every activation block and weight sub-block has its own scale, so sums wider
//! than 32 elements would change the bits; the kernel runs at about 1.5× the VNNI one.

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
    /// Four stored result tiles, the token block's activation panels, then the chunk's built
    /// weight tiles and scales; grows, never shrinks.
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

/// One 32-element activation block of 16 tokens, laid out for the tile unit and the
/// epilogue: the tokens' quants one after another (a contiguous 16 × 32-byte activation tile,
/// where the tokens' own blocks lie a whole row of blocks apart), then their scales and their
/// constant-term factors (one cache line each, so a sub-block's epilogue broadcasts from two
/// lines instead of sixteen blocks).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Panel {
    /// Token `t`'s quants.
    qs: [[i8; 32]; TOKENS],
    /// Token `t`'s scale `da`.
    d: [f32; TOKENS],
    /// Token `t`'s constant-term factor: `dsum` ([`Constant::Add`]), `off · dsum`
    /// ([`Constant::Sub`], rounded as the VNNI kernels round it) or unused.
    dsum: [f32; TOKENS],
}

/// Lines of one [`Panel`].
const PANEL_LINES: usize = std::mem::size_of::<Panel>() / 64;

/// Tokens `t0..t0 + 16`'s activation blocks (`nb` per token, token-major in `x`) as `nb`
/// panels at `out`, with format `F`'s constant-term factor.
///
/// # Safety
/// AVX2; `x` holds tokens `t0..t0 + 16`; `out` points at `nb` writable, 64-aligned panels.
#[inline(always)]
unsafe fn panelize<F: AmxTiles>(x: &[ActBlock], t0: usize, nb: usize, out: *mut Panel) {
    for b in 0..nb {
        let p = &mut *out.add(b);
        for t in 0..TOKENS {
            let a = x.get_unchecked((t0 + t) * nb + b);
            let q = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
            _mm256_store_si256(p.qs[t].as_mut_ptr() as *mut __m256i, q);
            p.d[t] = a.d;
            p.dsum[t] = match F::CONSTANT {
                Constant::Sub(off) => off * a.dsum,
                _ => a.dsum,
            };
        }
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
        let lines = 64 + nb * PANEL_LINES + pairs * steps * entry / 64;
        if buf.len() < lines {
            buf.resize(lines, Line([0; 64]));
        }
        let results = buf.as_mut_ptr() as *mut u8;
        let panels = results.add(4096) as *mut Panel;
        let built = results.add(4096 + nb * PANEL_LINES * 64);
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
        tile::configure(F::K);
        // Step `j`'s activation block and the byte where its sub-block starts.
        let block = |j: usize| {
            let (i, s) = (j / subs::<F>(), j % subs::<F>());
            (i * F::SPAN + s * F::K / 32, s * F::K % 32)
        };
        for t0 in (0..n).step_by(TOKENS) {
            panelize::<F>(a.q8, t0, nb, panels);
            for pair in 0..pairs {
                let mut acc = [_mm512_setzero_ps(); TOKENS];
                let ws = built.add(pair * steps * entry);
                // Step `j`'s scales and its stored sums (four buffers in turn, so a store
                // never writes the buffer being scaled).
                let scales = |j: usize| ws.add(j * entry + weight_bytes);
                let sums = |j: usize| results.add(1024 * (j % 4)) as *const u8;
                // Three steps in flight: step `j`'s product, step `j − 1`'s result stored (its
                // product finished while step `j − 2`'s sums were scaled), step `j − 2`'s
                // sums scaled (stored a whole step earlier, so the loads do not wait on the
                // tile store).
                for j in 0..steps + 2 {
                    // Step `j − 2`'s scaling in four quarters between the tile instructions:
                    // on the Xeons measured, tile loads and stores do not overlap vector work
                    // issued after them, so it is interleaved by hand.
                    let (sum2, sc2, x2) = match j >= 2 {
                        true => (sums(j - 2), scales(j - 2), panels.add(block(j - 2).0)),
                        false => (sums(0), scales(0), panels),
                    };
                    macro_rules! quarter {
                        ($acc:expr, $q:expr) => {
                            if j >= 2 {
                                scale_into::<F, { 4 * $q }>($acc, sum2, sc2, &*x2);
                            }
                        };
                    }
                    if j < steps {
                        let (b, off) = block(j);
                        let at = ((*panels.add(b)).qs.as_ptr() as *const u8).add(off);
                        let wt = ws.add(j * entry);
                        // Even steps take result tile 0 and operands 2/3, odd ones 1 and 4/5.
                        macro_rules! step {
                            ($c:literal, $a:literal, $b:literal) => {{
                                tile::load::<$a>(at, 32);
                                quarter!(&mut acc, 0);
                                tile::load::<$b>(wt, 64);
                                quarter!(&mut acc, 1);
                                product::<$c, $a, $b, F>();
                            }};
                        }
                        if j % 2 == 0 {
                            step!(0, 2, 3);
                        } else {
                            step!(1, 4, 5);
                        }
                    } else {
                        quarter!(&mut acc, 0);
                        quarter!(&mut acc, 1);
                    }
                    quarter!(&mut acc, 2);
                    if (1..=steps).contains(&j) {
                        // Step `j − 1`'s result tile (the other one of the two), into the
                        // buffer step `j − 5` used.
                        let out = results.add(1024 * ((j - 1) % 4));
                        match (j - 1) % 2 {
                            0 => tile::store::<0>(out),
                            _ => tile::store::<1>(out),
                        }
                    }
                    quarter!(&mut acc, 3);
                }
                for (t, v) in acc.iter().enumerate() {
                    _mm512_storeu_ps(y.ptr().add((t0 + t) * rows + r0 + ROWS * pair), *v);
                }
            }
        }
        tile::release();
    });
}

/// One sub-block's product into result tile `C` from the operands loaded into `A` and `B`.
///
/// # Safety
/// The tiles are configured on this thread; `A` and `B` hold a sub-block's operands.
#[inline(always)]
unsafe fn product<const C: u8, const A: u8, const B: u8, F: AmxTiles>() {
    tile::zero::<C>();
    match F::SIGNED {
        true => tile::dot::<C, A, B, true>(),
        false => tile::dot::<C, A, B, false>(),
    }
}

/// A sub-block's stored 16 × 16 sums (`sums`, token-major) into the accumulators with the
/// scales at `sc` (scale, then the constant-term factor), against the tokens' activation
/// panel `x`: `acc + isum · (scale · da)`, then the constant term, as the VNNI kernels.
///
/// # Safety
/// AVX-512F; `sums` holds 1024 bytes, `sc` 128 (64-aligned).
#[inline(always)]
unsafe fn scale_into<F: AmxTiles, const T0: usize>(
    acc: &mut [__m512; TOKENS],
    sums: *const u8,
    sc: *const u8,
    x: &Panel,
) {
    let scale = _mm512_load_ps(sc as *const f32);
    let second = _mm512_load_ps(sc.add(64) as *const f32);
    for t in T0..T0 + 4 {
        let acc = &mut acc[t];
        let isum = _mm512_load_si512(sums.add(64 * t) as *const __m512i);
        let v = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(isum),
            _mm512_mul_ps(scale, _mm512_set1_ps(x.d[t])),
            *acc,
        );
        *acc = match F::CONSTANT {
            Constant::None => v,
            Constant::Add => _mm512_fmadd_ps(second, _mm512_set1_ps(x.dsum[t]), v),
            Constant::Sub(_) => _mm512_fnmadd_ps(second, _mm512_set1_ps(x.dsum[t]), v),
        };
    }
}
