//! AVX-512 kernels (F/BW/VL/VNNI on top of AVX2): the integer tile products with `vpdpbusd`
//! on 256-bit vectors ([`tiles`]) and on pairs of row groups in 512-bit vectors
//! ([`tiles_zmm`]), lattice tiles decoded once per prefill chunk ([`decoded`]), and the grouped
//! attention loop with 32 vector registers ([`attention`]).
//! Everything else an AVX-512 CPU runs is the AVX2 folder's.

pub(crate) mod attention;
mod decoded;
pub(crate) mod tiles;
pub(crate) mod tiles_zmm;

use crate::matmul::acts::{CallActs, Path};
use crate::matrix::WeightMatrix;
use crate::packed::layout::TILE_ROWS;
use crate::pool::SharedMut;
use crate::tiles::{groups, Iq2SDec, Iq3SDec, PassActs};
use crate::DType;
use tiles::{Vnni, MAX_TOKENS};
use tiles_zmm::Zmm;

/// Tokens `0..n` against rows `r0..r1` (whole tile groups) of a tiled matrix: eight tokens
/// per pass, the rest in one pass of 1–7 (a verification step of 3–7 tokens in one pass
/// instead of 2 + 1 or 4 + 2 + 1: the 1.5B's 3-token step 52 → 43 ms, 7 tokens 93 → 70 ms).
/// A token's arithmetic is the same in every group size, so its outputs do not depend on the
/// batch.
///
/// # Safety
/// AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI are available; [`crate::tiles::has_kernel`] holds
/// for `w.dtype` and `a.path`; `a` holds `n` activation rows; rows `r0..r1` are whole groups
/// inside `w` whose outputs in `y` (`n · rows` floats) this caller alone writes.
pub(crate) unsafe fn tiled_chunk(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    if a.path == Path::Int8 && n >= decoded::DECODE_FROM {
        match w.dtype {
            DType::IQ3_S => return decoded::chunk::<Iq3SDec>(w, a, n, r0, r1, y, rows),
            DType::IQ2_S => return decoded::chunk::<Iq2SDec>(w, a, n, r0, r1, y, rows),
            _ => {}
        }
    }
    tiled_tokens(w, a, 0, n, r0, r1, y, rows)
}

/// [`tiled_chunk`] for tokens `t0..n` only (the AMX path's remainder below a whole tile of
/// tokens).
///
/// # Safety
/// As [`tiled_chunk`], with `t0 <= n`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tiled_tokens(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    t0: usize,
    n: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let mut t = t0;
    while t < n {
        let step = (n - t).min(MAX_TOKENS);
        // SAFETY (each arm): this function's contract, with t + step <= n.
        match step {
            1 => tokens::<1>(w, a, t, r0, r1, y, rows),
            2 => tokens::<2>(w, a, t, r0, r1, y, rows),
            3 => tokens::<3>(w, a, t, r0, r1, y, rows),
            4 => tokens::<4>(w, a, t, r0, r1, y, rows),
            5 => tokens::<5>(w, a, t, r0, r1, y, rows),
            6 => tokens::<6>(w, a, t, r0, r1, y, rows),
            7 => tokens::<7>(w, a, t, r0, r1, y, rows),
            _ => tokens::<8>(w, a, t, r0, r1, y, rows),
        }
        t += step;
    }
}

/// Tokens `t..t + T` against the chunk's groups.
///
/// Full eight-token passes over tiles already in cache (every pass over a chunk after its
/// first, as in prefill and batched decode) take pairs of row groups through the 512-bit
/// kernels and a last odd group through the 256-bit ones (the same bits either way): the
/// 1.5B's 512-token prefill 150 → 170 tok/s on a Zen 4 VM. A pass that streams its weights
/// from memory stays at 256 bits: two interleaved streams per task measured slower (Gemma 3
/// decode 249 → 210 tok/s, SmolLM2 505 → 430 on a Zen 5 VM; the 1.5B's 4-token pass 53 → 45
/// ms, 6 tokens 63 → 55 ms, and a lone 8-token pass — a verification of seven guesses —
/// 71–72.5 → 67.1–67.3 ms on the Zen 4, where a streamed 8960×1536 Q6_K product of 8 tokens
/// runs at 166 GMAC/s in 256-bit passes and 140 in pairs). Q8_0 and MXFP4 with 16-bit
/// activations (and the IQ4 formats with them) have 256-bit kernels only, so they stay on
/// [`Vnni`].
///
/// # Safety
/// As [`tiled_chunk`], with `t + T <= n`.
#[allow(clippy::too_many_arguments)]
unsafe fn tokens<const T: usize>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    t: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let acts = PassActs::<T>::of(a, t);
    let i16 = a.path == Path::Int16;
    // Q2_K's and IQ2_S's pairs are not written.
    let halves_only = matches!(w.dtype, DType::Q2_K | DType::IQ2_S)
        || i16
            && matches!(
                w.dtype,
                DType::Q8_0
                    | DType::MXFP4
                    | DType::IQ4_XS
                    | DType::IQ4_NL
                    | DType::Q3_K
                    | DType::IQ3_S
            );
    let pairs = t > 0 && T >= 8 && !halves_only;
    let (mut g, end) = (r0 / TILE_ROWS, r1 / TILE_ROWS);
    if pairs {
        g = groups::<Zmm, T>(w, &acts, t, g, end, y, rows);
    }
    groups::<Vnni, T>(w, &acts, t, g, end, y, rows);
}
