//! Matrix products `y = x · Wᵀ` for a batch of activation rows against a weight matrix in its
//! stored format.
//!
//! Work is split over output rows (weight rows): each task owns a chunk of weight rows and
//! computes them for every activation row, so a chunk's weights are read from memory once per
//! call and reused from cache for the whole batch. Each `y[t][r]` is one dot product whose
//! reduction order does not depend on the batch.

use crate::act::{self, ActBlock};
use crate::pool::{self, SharedMut};
use crate::{dot_scalar, DType, Isa};

/// A borrowed weight matrix: `rows` rows of `cols` elements in `dtype` layout.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    /// Storage format.
    pub dtype: DType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// `rows * dtype.row_bytes(cols)` bytes.
    pub data: &'a [u8],
}

impl<'a> WeightMatrix<'a> {
    /// Checks the geometry; `None` if `data` does not hold exactly `rows` rows of `cols`.
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> Option<Self> {
        if !cols.is_multiple_of(dtype.block_size()) || data.len() != rows * dtype.row_bytes(cols) {
            return None;
        }
        Some(WeightMatrix {
            dtype,
            rows,
            cols,
            data,
        })
    }

    /// The bytes of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.dtype.row_bytes(self.cols);
        &self.data[r * rb..(r + 1) * rb]
    }
}

/// How activations meet quantized weights.
///
/// `Int8` quantizes each activation row to 8-bit blocks once per call and runs integer dot
/// products (fast); `F32` keeps activations in f32 and dequantizes weights in registers (exact
/// up to f32 rounding, for the matrices where 8-bit activations cost measurable accuracy).
/// Float weight formats always use f32 activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActPrecision {
    /// 8-bit activation blocks.
    Int8,
    /// f32 activations.
    F32,
}

/// Reusable buffers for [`matmul`] (quantized activations); grows, never shrinks.
#[derive(Default)]
pub struct MatmulScratch {
    act: Vec<ActBlock>,
}

/// One row dot product in the given path.
#[inline]
fn dot_row(isa: Isa, dtype: DType, int8: bool, row: &[u8], xq: &[ActBlock], xf: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: Isa::Avx2 exists only after Isa::detect verified avx2, fma and f16c; the
        // slice lengths match the format (checked by WeightMatrix::new and matmul's asserts),
        // and a single row needs no stride.
        return unsafe {
            use crate::dot_avx2 as k;
            match dtype {
                DType::F32 => k::dot_f32(row, xf),
                DType::F16 => k::dot_f16(row, xf),
                DType::BF16 => k::dot_bf16(row, xf),
                _ => rows1::<1>(dtype, int8, row.as_ptr(), 0, xq, xf)[0],
            }
        };
    }
    let _ = isa;
    use dot_scalar as s;
    match (dtype, int8) {
        (DType::F32, _) => s::dot_f32(row, xf),
        (DType::F16, _) => s::dot_f16(row, xf),
        (DType::BF16, _) => s::dot_bf16(row, xf),
        (DType::Q8_0, true) => s::dot_q8_0(row, xq),
        (DType::Q4_0, true) => s::dot_q4_0(row, xq),
        (DType::Q4_1, true) => s::dot_q4_1(row, xq),
        (DType::Q5_0, true) => s::dot_q5_0(row, xq),
        (DType::Q4_K, true) => s::dot_q4_k(row, xq),
        (DType::Q5_K, true) => s::dot_q5_k(row, xq),
        (DType::Q6_K, true) => s::dot_q6_k(row, xq),
        (DType::Q8_0, false) => s::dot_q8_0_f32(row, xf),
        (DType::Q4_0, false) => s::dot_q4_0_f32(row, xf),
        (DType::Q4_1, false) => s::dot_q4_1_f32(row, xf),
        (DType::Q5_0, false) => s::dot_q5_0_f32(row, xf),
        (DType::Q4_K, false) => s::dot_q4_k_f32(row, xf),
        (DType::Q5_K, false) => s::dot_q5_k_f32(row, xf),
        (DType::Q6_K, false) => s::dot_q6_k_f32(row, xf),
    }
}

/// `R` (1 or 4) consecutive rows of a quantized format against one activation row (int8
/// blocks `xq` or f32 `xf`).
///
/// # Safety
/// The CPU supports AVX2/FMA/F16C; `base` points at `R` rows of `stride` bytes, each matching
/// the activation length.
#[cfg(target_arch = "x86_64")]
unsafe fn rows1<const R: usize>(
    dtype: DType,
    int8: bool,
    base: *const u8,
    stride: usize,
    xq: &[ActBlock],
    xf: &[f32],
) -> [f32; R] {
    use crate::dot_avx2::{self as k, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q8_0};
    let mut o = [0f32; R];
    match (dtype, int8) {
        (DType::Q4_0, true) => k::dot_rows::<FMT_Q4_0, R>(base, stride, xq, &mut o),
        (DType::Q4_1, true) => k::dot_rows::<FMT_Q4_1, R>(base, stride, xq, &mut o),
        (DType::Q5_0, true) => k::dot_rows::<FMT_Q5_0, R>(base, stride, xq, &mut o),
        (DType::Q8_0, true) => k::dot_rows::<FMT_Q8_0, R>(base, stride, xq, &mut o),
        (DType::Q4_0, false) => k::dot_rows_f32::<FMT_Q4_0, R>(base, stride, xf, &mut o),
        (DType::Q4_1, false) => k::dot_rows_f32::<FMT_Q4_1, R>(base, stride, xf, &mut o),
        (DType::Q5_0, false) => k::dot_rows_f32::<FMT_Q5_0, R>(base, stride, xf, &mut o),
        (DType::Q8_0, false) => k::dot_rows_f32::<FMT_Q8_0, R>(base, stride, xf, &mut o),
        (DType::Q4_K | DType::Q5_K | DType::Q6_K, _) => {
            let mut oo = [o];
            crate::dot_kquant_avx2::rows::<R, 1>(dtype, int8, base, stride, [xq], [xf], &mut oo);
            o = oo[0];
        }
        (DType::F32 | DType::F16 | DType::BF16, _) => {
            unreachable!("float formats take the f32 dot products")
        }
    }
    o
}

/// As [`rows1`] for `T` activation rows at once (prefill, batched decode, speculative
/// verification): each weight block is unpacked once for all of them. Every output is reduced
/// with exactly the operations of [`rows1`], in the same order, so results are bitwise
/// identical to `T` single calls.
///
/// # Safety
/// As [`rows1`], for every activation row.
#[cfg(target_arch = "x86_64")]
unsafe fn rows_t<const R: usize, const T: usize>(
    dtype: DType,
    int8: bool,
    base: *const u8,
    stride: usize,
    xq: [&[ActBlock]; T],
    xf: [&[f32]; T],
) -> [[f32; R]; T] {
    use crate::dot_avx2::{self as k, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q8_0};
    let mut o = [[0f32; R]; T];
    match (dtype, int8) {
        (DType::Q4_0, true) => k::dot_rows_xt::<FMT_Q4_0, R, T>(base, stride, xq, &mut o),
        (DType::Q4_1, true) => k::dot_rows_xt::<FMT_Q4_1, R, T>(base, stride, xq, &mut o),
        (DType::Q5_0, true) => k::dot_rows_xt::<FMT_Q5_0, R, T>(base, stride, xq, &mut o),
        (DType::Q8_0, true) => k::dot_rows_xt::<FMT_Q8_0, R, T>(base, stride, xq, &mut o),
        (DType::Q4_0, false) => k::dot_rows_f32_xt::<FMT_Q4_0, R, T>(base, stride, xf, &mut o),
        (DType::Q4_1, false) => k::dot_rows_f32_xt::<FMT_Q4_1, R, T>(base, stride, xf, &mut o),
        (DType::Q5_0, false) => k::dot_rows_f32_xt::<FMT_Q5_0, R, T>(base, stride, xf, &mut o),
        (DType::Q8_0, false) => k::dot_rows_f32_xt::<FMT_Q8_0, R, T>(base, stride, xf, &mut o),
        (DType::Q4_K | DType::Q5_K | DType::Q6_K, _) => {
            crate::dot_kquant_avx2::rows::<R, T>(dtype, int8, base, stride, xq, xf, &mut o)
        }
        (DType::F32 | DType::F16 | DType::BF16, _) => {
            unreachable!("float formats take the f32 dot products")
        }
    }
    o
}

/// Tokens `t..t + T` against weight rows `r0..r1`, `T` tokens per unpacked block, written into
/// `y` (row-major `n × rows`).
///
/// # Safety
/// Isa::Avx2 was detected; `w` is quantized; `t + T <= n`, `r1 <= w.rows`; `xq` (int8) or `x`
/// (f32) hold `n` activation rows; `y` points at `n · w.rows` floats that no other task writes
/// in rows `r0..r1`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn tokens_t<const T: usize, const R: usize>(
    w: &WeightMatrix<'_>,
    int8: bool,
    xq: &[ActBlock],
    x: &[f32],
    t: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
) {
    let (cols, rows) = (w.cols, w.rows);
    let nb = cols / 32;
    let stride = w.dtype.row_bytes(cols);
    let xq_t: [&[ActBlock]; T] = std::array::from_fn(|j| {
        if int8 {
            &xq[(t + j) * nb..(t + j + 1) * nb]
        } else {
            &[][..]
        }
    });
    let xf_t: [&[f32]; T] = std::array::from_fn(|j| &x[(t + j) * cols..(t + j + 1) * cols]);
    let mut r = r0;
    while r < r1 {
        let base = w.row(r).as_ptr();
        if r + R <= r1 {
            let o = rows_t::<R, T>(w.dtype, int8, base, stride, xq_t, xf_t);
            for (j, oj) in o.iter().enumerate() {
                for (i, &v) in oj.iter().enumerate() {
                    *y.ptr().add((t + j) * rows + r + i) = v;
                }
            }
            r += R;
        } else {
            let o = rows_t::<1, T>(w.dtype, int8, base, stride, xq_t, xf_t);
            for (j, oj) in o.iter().enumerate() {
                *y.ptr().add((t + j) * rows + r) = oj[0];
            }
            r += 1;
        }
    }
}

/// `y[t][r] = Σ_k x[t][k] · W[r][k]` for `t < n`: `x` is `n × w.cols`, `y` is `n × w.rows`.
///
/// Panics if the slice lengths do not match the shapes (a caller bug, not input-driven).
pub fn matmul(
    isa: Isa,
    precision: ActPrecision,
    w: &WeightMatrix<'_>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    assert_eq!(x.len(), n * w.cols, "matmul: x shape");
    assert_eq!(y.len(), n * w.rows, "matmul: y shape");
    let nb = w.cols / 32;
    let int8 = w.dtype.is_quantized() && precision == ActPrecision::Int8;
    if int8 {
        if scratch.act.len() < n * nb {
            scratch.act.resize(n * nb, ActBlock::default());
        }
        act::quantize(isa, x, &mut scratch.act[..n * nb]);
    }
    let xq: &[ActBlock] = if int8 { &scratch.act[..n * nb] } else { &[] };
    let threads = pool::threads();
    // Enough chunks to balance, each big enough to amortise the task overhead.
    let chunk = (w.rows / (threads * 4)).clamp(16, 256).min(w.rows.max(1));
    let n_chunks = w.rows.div_ceil(chunk);
    let out = SharedMut(y.as_mut_ptr());
    let rows = w.rows;
    let cols = w.cols;
    pool::parallel_for(n_chunks, |c| {
        let r0 = c * chunk;
        let r1 = (r0 + chunk).min(rows);
        let yp = out;
        let mut t = 0;
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx2 && w.dtype.is_quantized() {
            // Groups of activation rows share each unpacked weight block: 4 at a time (2 weight
            // rows per call keeps the accumulators in registers), then the last 2 or 3.
            while t + 4 <= n {
                // SAFETY: Isa::Avx2 was detected and the format is quantized; t + 4 <= n;
                // rows r0..r1 lie inside w; chunks partition the rows, so this task alone
                // writes rows r0..r1 of y, which outlives parallel_for.
                unsafe { tokens_t::<4, 2>(w, int8, xq, x, t, r0, r1, yp) };
                t += 4;
            }
            // The rest in one pass too (a verification step of 3, 6 or 7 tokens is common).
            match n - t {
                3 => {
                    // SAFETY: as above with t + 3 == n.
                    unsafe { tokens_t::<3, 2>(w, int8, xq, x, t, r0, r1, yp) };
                    t += 3;
                }
                2 => {
                    // SAFETY: as above with t + 2 == n.
                    unsafe { tokens_t::<2, 4>(w, int8, xq, x, t, r0, r1, yp) };
                    t += 2;
                }
                _ => {}
            }
        }
        for t in t..n {
            let xf = if int8 {
                &[][..]
            } else {
                &x[t * cols..(t + 1) * cols]
            };
            let xqt = if int8 {
                &xq[t * nb..(t + 1) * nb]
            } else {
                &[][..]
            };
            let mut r = r0;
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx2 && w.dtype.is_quantized() {
                let stride = w.dtype.row_bytes(cols);
                while r + 4 <= r1 {
                    // SAFETY: Isa::Avx2 was detected; rows r..r+4 lie inside w.data (r + 4 <=
                    // r1 <= rows) and each holds `nb` blocks, matching xqt (int8) or xf (f32).
                    let out =
                        unsafe { rows1::<4>(w.dtype, int8, w.row(r).as_ptr(), stride, xqt, xf) };
                    for (j, v) in out.into_iter().enumerate() {
                        // SAFETY: rows r..r+4 of token t lie inside y; chunks are disjoint.
                        unsafe { *yp.ptr().add(t * rows + r + j) = v };
                    }
                    r += 4;
                }
            }
            for r in r..r1 {
                let v = dot_row(isa, w.dtype, int8, w.row(r), xqt, xf);
                // SAFETY: t < n and r < rows, so the index is inside y (length n·rows, asserted
                // above); chunks partition the rows, so no two tasks write the same element; y
                // outlives parallel_for, which returns only when every task is done.
                unsafe { *yp.ptr().add(t * rows + r) = v };
            }
        }
    });
}
