//! AVX2 products of quantized matrices in their stored row layout (matrices not repacked
//! into tiles): rows and tokens grouped so each unpacked weight block serves several of
//! each, dispatched from the format and activation path to the kernels of `dot` and `kquant`.

use super::dot::{self as k, FMT_IQ4_NL, FMT_MXFP4, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q8_0};
use super::{kquant, lowbit};
use crate::act::blocks::{Act16Block, ActBlock};
use crate::dtype::lattice;
use crate::matmul::acts::{Acts, CallActs, Path};
use crate::matrix::WeightMatrix;
use crate::pool::SharedMut;
use crate::DType;

/// Tokens `0..n` against rows `r0..r1` of a quantized matrix in the stored layout, into `y`
/// (row-major, `rows` floats per token); returns false, doing nothing, for a format without
/// AVX2 row kernels (floats, Q5_1), which the caller computes row by row. `G`: the lattice
/// formats fetch their grid entries by gathers (`lowbit::lattice_rows`; the same values).
///
/// # Safety
/// AVX2/FMA/F16C are available; `a` holds `n` activation rows in `w`'s path; `r1 <= w.rows
/// <= rows`; `y` points at `n · rows` floats whose columns `r0..r1` no other thread writes
/// meanwhile.
pub(crate) unsafe fn stored_chunk<const G: bool>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    yp: SharedMut<f32>,
    rows: usize,
) -> bool {
    if !has_rows(w.dtype) {
        return false;
    }
    if a.path == Path::F32 && lowbit::dequantizes_for_f32(w.dtype) {
        // SAFETY: AVX2 is available (function contract), the format qualifies (checked), and
        // the rest is this function's own contract.
        lowbit::dequantized_rows_f32(w, a.f, n, r0, r1, yp, rows);
        return true;
    }
    if a.path == Path::Int8 && n >= 8 && crate::iquant::is_lattice(w.dtype) {
        // SAFETY: AVX2 is available, the format is a lattice one in rows, the path 8-bit
        // (checked); the rest is this function's own contract.
        lowbit::lattice_chunk::<G>(w, a, n, r0, r1, yp, rows);
        return true;
    }
    let mut t = 0;
    // Groups of activation rows share each unpacked weight block: 4 at a time (2 weight
    // rows per call keeps the accumulators in registers), then the last 1, 2 or 3.
    while t + 4 <= n {
        // SAFETY: AVX2 is available and the format is quantized; t + 4 <= n; rows r0..r1
        // lie inside w and belong to this caller (function contract).
        tokens_t::<G, 4, 2>(w, a, t, r0, r1, yp, rows);
        t += 4;
    }
    // The rest in one pass too (a verification step of 3, 6 or 7 tokens is common).
    match n - t {
        // SAFETY (each arm): as above with t + 3, t + 2 or t + 1 == n.
        3 => tokens_t::<G, 3, 2>(w, a, t, r0, r1, yp, rows),
        2 => tokens_t::<G, 2, 4>(w, a, t, r0, r1, yp, rows),
        1 => tokens_t::<G, 1, 4>(w, a, t, r0, r1, yp, rows),
        _ => {}
    }
    true
}

/// Whether `dtype` has AVX2 kernels for the stored row layout (every quantized format but
/// Q5_1). Q5_1 has tile kernels only:
/// its rows (matrices not tiled, the f32 path) take the scalar kernels.
fn has_rows(dtype: DType) -> bool {
    dtype.is_quantized() && dtype != DType::Q5_1
}

/// `R` (≤ 4) consecutive rows of a quantized format against `T` activation rows (prefill,
/// batched decode, speculative verification take `T` > 1): each weight block is unpacked once
/// for all of them. Every output is reduced with the same operations in the same order
/// whatever `R` and `T`, so results are bitwise identical to single rows (batch invariance).
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C; the format is quantized and `path` is what [`Path::of`]
/// gives for it; `base` points at `R` rows of `stride` bytes, each matching every activation
/// row's length in that path's form.
unsafe fn rows_t<const G: bool, const R: usize, const T: usize>(
    dtype: DType,
    path: Path,
    base: *const u8,
    stride: usize,
    a: [Acts<'_>; T],
) -> [[f32; R]; T] {
    let mut o = [[0f32; R]; T];
    let xq = a.map(|a| a.q8);
    let x16 = a.map(|a| a.q16);
    let xf = a.map(|a| a.f);
    match (dtype, path) {
        (DType::IQ4_NL, Path::Int8) if T == 1 => {
            k::dot_rows::<FMT_IQ4_NL, R>(base, stride, xq[0], &mut o[0])
        }
        (DType::IQ4_NL, Path::F32) if T == 1 => {
            k::dot_rows_f32::<FMT_IQ4_NL, R>(base, stride, xf[0], &mut o[0])
        }
        (DType::IQ4_NL, Path::Int8) => {
            k::dot_rows_xt::<ActBlock, FMT_IQ4_NL, R, T>(base, stride, xq, &mut o)
        }
        (DType::IQ4_NL, Path::Int16) => {
            k::dot_rows_xt::<Act16Block, FMT_IQ4_NL, R, T>(base, stride, x16, &mut o)
        }
        (DType::IQ4_NL, _) => k::dot_rows_f32_xt::<FMT_IQ4_NL, R, T>(base, stride, xf, &mut o),
        (DType::Q2_K, Path::Int8) => lowbit::q2k_rows::<R, T>(base, stride, xq, &mut o),
        (DType::Q3_K, Path::Int8) => lowbit::q3k_rows::<R, T>(base, stride, xq, &mut o),
        (DType::IQ4_XS, Path::Int8) => lowbit::iq4xs_rows::<R, T>(base, stride, xq, &mut o),
        (lattice!(), Path::Int8) => {
            lowbit::lattice_rows::<G, R, T>(dtype, base, stride, xq, &mut o)
        }
        (DType::Q2_K | DType::Q3_K | DType::IQ4_XS | lattice!(), Path::Int16) => {
            lowbit::decoded_rows16::<R, T>(dtype, base, stride, x16, &mut o)
        }
        (DType::Q2_K | DType::Q3_K | DType::IQ4_XS | lattice!(), _) => {
            unreachable!("f32 products of {dtype:?} dequantize whole rows (stored_chunk)")
        }
        (DType::Q4_0, Path::Int8) if T == 1 => {
            k::dot_rows::<FMT_Q4_0, R>(base, stride, xq[0], &mut o[0])
        }
        (DType::Q4_1, Path::Int8) if T == 1 => {
            k::dot_rows::<FMT_Q4_1, R>(base, stride, xq[0], &mut o[0])
        }
        (DType::Q5_0, Path::Int8) if T == 1 => {
            k::dot_rows::<FMT_Q5_0, R>(base, stride, xq[0], &mut o[0])
        }
        (DType::Q8_0, Path::Int8) if T == 1 => {
            k::dot_rows::<FMT_Q8_0, R>(base, stride, xq[0], &mut o[0])
        }
        (DType::MXFP4, Path::Int8) if T == 1 => {
            k::dot_rows::<FMT_MXFP4, R>(base, stride, xq[0], &mut o[0])
        }
        (DType::Q4_0, Path::F32) if T == 1 => {
            k::dot_rows_f32::<FMT_Q4_0, R>(base, stride, xf[0], &mut o[0])
        }
        (DType::Q4_1, Path::F32) if T == 1 => {
            k::dot_rows_f32::<FMT_Q4_1, R>(base, stride, xf[0], &mut o[0])
        }
        (DType::Q5_0, Path::F32) if T == 1 => {
            k::dot_rows_f32::<FMT_Q5_0, R>(base, stride, xf[0], &mut o[0])
        }
        (DType::Q8_0, Path::F32) if T == 1 => {
            k::dot_rows_f32::<FMT_Q8_0, R>(base, stride, xf[0], &mut o[0])
        }
        (DType::MXFP4, Path::F32) if T == 1 => {
            k::dot_rows_f32::<FMT_MXFP4, R>(base, stride, xf[0], &mut o[0])
        }
        (DType::Q4_0, Path::Int8) => {
            k::dot_rows_xt::<ActBlock, FMT_Q4_0, R, T>(base, stride, xq, &mut o)
        }
        (DType::Q4_1, Path::Int8) => {
            k::dot_rows_xt::<ActBlock, FMT_Q4_1, R, T>(base, stride, xq, &mut o)
        }
        (DType::Q5_0, Path::Int8) => {
            k::dot_rows_xt::<ActBlock, FMT_Q5_0, R, T>(base, stride, xq, &mut o)
        }
        (DType::Q8_0, Path::Int8) => {
            k::dot_rows_xt::<ActBlock, FMT_Q8_0, R, T>(base, stride, xq, &mut o)
        }
        (DType::MXFP4, Path::Int8) => {
            k::dot_rows_xt::<ActBlock, FMT_MXFP4, R, T>(base, stride, xq, &mut o)
        }
        (DType::Q4_0, Path::Int16) => {
            k::dot_rows_xt::<Act16Block, FMT_Q4_0, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q4_1, Path::Int16) => {
            k::dot_rows_xt::<Act16Block, FMT_Q4_1, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q5_0, Path::Int16) => {
            k::dot_rows_xt::<Act16Block, FMT_Q5_0, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q8_0, Path::Int16) => {
            k::dot_rows_xt::<Act16Block, FMT_Q8_0, R, T>(base, stride, x16, &mut o)
        }
        (DType::MXFP4, Path::Int16) => {
            k::dot_rows_xt::<Act16Block, FMT_MXFP4, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q4_K, Path::Int16) => {
            kquant::q45_rows::<Act16Block, false, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q5_K, Path::Int16) => {
            kquant::q45_rows::<Act16Block, true, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q4_0, _) => k::dot_rows_f32_xt::<FMT_Q4_0, R, T>(base, stride, xf, &mut o),
        (DType::Q4_1, _) => k::dot_rows_f32_xt::<FMT_Q4_1, R, T>(base, stride, xf, &mut o),
        (DType::Q5_0, _) => k::dot_rows_f32_xt::<FMT_Q5_0, R, T>(base, stride, xf, &mut o),
        (DType::Q8_0, _) => k::dot_rows_f32_xt::<FMT_Q8_0, R, T>(base, stride, xf, &mut o),
        (DType::MXFP4, _) => k::dot_rows_f32_xt::<FMT_MXFP4, R, T>(base, stride, xf, &mut o),
        (DType::Q4_K | DType::Q5_K | DType::Q6_K, _) => {
            kquant::rows::<R, T>(dtype, path == Path::Int8, base, stride, xq, xf, &mut o)
        }
        (DType::F32 | DType::F16 | DType::BF16, _) => {
            unreachable!("float formats take the f32 dot products")
        }
        (DType::Q5_1, _) => unreachable!("Q5_1 rows take the scalar kernels (has_rows)"),
    }
    o
}

/// Tokens `t..t + T` against weight rows `r0..r1`, `T` tokens per unpacked block, written into
/// `y` (row-major `n × rows`).
///
/// # Safety
/// An AVX2 Isa was detected; `w` is quantized and `a.path` is its path; `t + T <= n`, `r1 <=
/// w.rows`; `a` holds `n` activation rows; `y` points at `n · w.rows` floats that no other task
/// writes in rows `r0..r1`.
unsafe fn tokens_t<const G: bool, const T: usize, const R: usize>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    t: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    let stride = w.dtype.row_bytes(w.cols);
    let at: [Acts<'_>; T] = std::array::from_fn(|j| a.row(t + j));
    let mut r = r0;
    while r < r1 {
        let base = w.row(r).as_ptr();
        if r + R <= r1 {
            let o = rows_t::<G, R, T>(w.dtype, a.path, base, stride, at);
            for (j, oj) in o.iter().enumerate() {
                for (i, &v) in oj.iter().enumerate() {
                    *y.ptr().add((t + j) * rows + r + i) = v;
                }
            }
            r += R;
        } else {
            let o = rows_t::<G, 1, T>(w.dtype, a.path, base, stride, at);
            for (j, oj) in o.iter().enumerate() {
                *y.ptr().add((t + j) * rows + r) = oj[0];
            }
            r += 1;
        }
    }
}
