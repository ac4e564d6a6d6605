//! Matrix products `y = x · Wᵀ` for a batch of activation rows against a weight matrix in its
//! stored format.
//!
//! Work is split over output rows (weight rows): each task owns a chunk of weight rows and
//! computes them for every activation row, so a chunk's weights are read from memory once per
//! call and reused from cache for the whole batch. Each `y[t][r]` is one dot product whose
//! reduction order does not depend on the batch.

use crate::act::{self, Act16Block, ActBlock, ActSplit16};
use crate::packed::{self, TILE_ROWS};
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
    /// How the blocks are arranged in `data`.
    pub layout: Layout,
}

/// The arrangement of a matrix's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// As stored in GGUF: row after row.
    Rows,
    /// Tiles of eight rows ([`crate::packed`]), made at load by
    /// [`PackedMatrix::pack`](crate::packed::PackedMatrix::pack).
    Tiles8,
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
            layout: Layout::Rows,
        })
    }

    /// The matrix of its first `n` rows (a prefix of the data in either layout), or `None`
    /// when `n` exceeds the rows or, for tiles, is not a whole number of tile groups.
    pub fn first_rows(&self, n: usize) -> Option<WeightMatrix<'a>> {
        self.row_range(0, n)
    }

    /// The matrix of rows `r0 .. r0 + n` (one expert of a mixture's stacked expert tensor,
    /// a restricted head), or `None` when they exceed the rows or, for tiles, do not start
    /// and end on tile groups.
    pub fn row_range(&self, r0: usize, n: usize) -> Option<WeightMatrix<'a>> {
        let bytes_of = |rows: usize| match self.layout {
            Layout::Rows => Some(rows * self.dtype.row_bytes(self.cols)),
            Layout::Tiles8 if rows.is_multiple_of(TILE_ROWS) => Some(
                rows / TILE_ROWS
                    * (self.cols / self.dtype.block_size())
                    * packed::tile_bytes(self.dtype),
            ),
            Layout::Tiles8 => None,
        };
        let end = r0.checked_add(n).filter(|&e| e <= self.rows)?;
        let (b0, b1) = (bytes_of(r0)?, bytes_of(end)?);
        Some(WeightMatrix {
            rows: n,
            data: &self.data[b0..b1],
            ..*self
        })
    }

    /// The bytes of row `r` (stored layout only).
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        debug_assert_eq!(self.layout, Layout::Rows);
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
    /// 16-bit activation blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, MXFP4): integer dot products
    /// nearly as fast as 8-bit, with rounding ~256× finer. Other formats take the f32 path.
    Int16,
    /// f32 activations.
    F32,
}

/// The dot-product path one call takes (resolved from the format and the precision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Int8,
    Int16,
    F32,
}

impl Path {
    fn of(dtype: DType, precision: ActPrecision, layout: Layout) -> Path {
        // Q6_K has a 16-bit kernel only in tiles.
        let simple = matches!(
            dtype,
            DType::Q8_0
                | DType::Q4_0
                | DType::Q4_1
                | DType::Q5_0
                | DType::Q5_1
                | DType::Q4_K
                | DType::Q5_K
                | DType::MXFP4
        ) || (dtype == DType::Q6_K && layout == Layout::Tiles8);
        match precision {
            _ if !dtype.is_quantized() => Path::F32,
            ActPrecision::Int8 => Path::Int8,
            ActPrecision::Int16 if simple => Path::Int16,
            ActPrecision::Int16 | ActPrecision::F32 => Path::F32,
        }
    }
}

/// Reusable buffers for [`matmul`] (quantized activations); grows, never shrinks.
#[derive(Default)]
pub struct MatmulScratch {
    act: Vec<ActBlock>,
    act16: Vec<Act16Block>,
    split16: Vec<ActSplit16>,
}

/// One activation row in the form its path reads: 8-bit blocks, 16-bit blocks or f32.
#[derive(Clone, Copy)]
struct Acts<'x> {
    q8: &'x [ActBlock],
    q16: &'x [Act16Block],
    f: &'x [f32],
}

/// Whether `dtype` has AVX2 kernels for the stored row layout. Q5_1 has tile kernels only:
/// its rows (matrices not tiled, the f32 path) take the scalar kernels.
fn has_avx2_rows(dtype: DType) -> bool {
    dtype != DType::Q5_1
}

/// One row dot product in the given path.
#[inline]
fn dot_row(isa: Isa, dtype: DType, path: Path, row: &[u8], a: Acts<'_>) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() && has_avx2_rows(dtype) {
        // SAFETY: an Isa whose avx2() holds exists only after Isa::detect verified avx2, fma and f16c; the
        // slice lengths match the format (checked by WeightMatrix::new and matmul's asserts),
        // and a single row needs no stride.
        return unsafe {
            use crate::dot_avx2 as k;
            match dtype {
                DType::F32 => k::dot_f32(row, a.f),
                DType::F16 => k::dot_f16(row, a.f),
                DType::BF16 => k::dot_bf16(row, a.f),
                _ => rows_t::<1, 1>(dtype, path, row.as_ptr(), 0, [a])[0][0],
            }
        };
    }
    let _ = isa;
    use dot_scalar as s;
    let (xq, x16, xf) = (a.q8, a.q16, a.f);
    match (dtype, path) {
        (DType::F32, _) => s::dot_f32(row, xf),
        (DType::F16, _) => s::dot_f16(row, xf),
        (DType::BF16, _) => s::dot_bf16(row, xf),
        (DType::Q8_0, Path::Int8) => s::dot_q8_0(row, xq),
        (DType::Q4_0, Path::Int8) => s::dot_q4_0(row, xq),
        (DType::Q4_1, Path::Int8) => s::dot_q4_1(row, xq),
        (DType::Q5_0, Path::Int8) => s::dot_q5_0(row, xq),
        (DType::Q5_1, Path::Int8) => s::dot_q5_1(row, xq),
        (DType::Q4_K, Path::Int8) => s::dot_q4_k(row, xq),
        (DType::Q5_K, Path::Int8) => s::dot_q5_k(row, xq),
        (DType::Q6_K, Path::Int8) => s::dot_q6_k(row, xq),
        (DType::MXFP4, Path::Int8) => s::dot_mxfp4(row, xq),
        (DType::MXFP4, Path::Int16) => s::dot_mxfp4(row, x16),
        (DType::MXFP4, _) => s::dot_mxfp4_f32(row, xf),
        (DType::Q8_0, Path::Int16) => s::dot_q8_0(row, x16),
        (DType::Q4_0, Path::Int16) => s::dot_q4_0(row, x16),
        (DType::Q4_1, Path::Int16) => s::dot_q4_1(row, x16),
        (DType::Q5_0, Path::Int16) => s::dot_q5_0(row, x16),
        (DType::Q5_1, Path::Int16) => s::dot_q5_1(row, x16),
        (DType::Q4_K, Path::Int16) => s::dot_q4_k(row, x16),
        (DType::Q5_K, Path::Int16) => s::dot_q5_k(row, x16),
        (DType::Q6_K, Path::Int16) => s::dot_q6_k(row, x16),
        (DType::Q8_0, _) => s::dot_q8_0_f32(row, xf),
        (DType::Q4_0, _) => s::dot_q4_0_f32(row, xf),
        (DType::Q4_1, _) => s::dot_q4_1_f32(row, xf),
        (DType::Q5_0, _) => s::dot_q5_0_f32(row, xf),
        (DType::Q5_1, _) => s::dot_q5_1_f32(row, xf),
        (DType::Q4_K, _) => s::dot_q4_k_f32(row, xf),
        (DType::Q5_K, _) => s::dot_q5_k_f32(row, xf),
        (DType::Q6_K, _) => s::dot_q6_k_f32(row, xf),
    }
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
#[cfg(target_arch = "x86_64")]
unsafe fn rows_t<const R: usize, const T: usize>(
    dtype: DType,
    path: Path,
    base: *const u8,
    stride: usize,
    a: [Acts<'_>; T],
) -> [[f32; R]; T] {
    use crate::dot_avx2::{self as k, FMT_MXFP4, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q8_0};
    let mut o = [[0f32; R]; T];
    let xq = a.map(|a| a.q8);
    let x16 = a.map(|a| a.q16);
    let xf = a.map(|a| a.f);
    match (dtype, path) {
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
            crate::dot_kquant_avx2::q45_rows::<Act16Block, false, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q5_K, Path::Int16) => {
            crate::dot_kquant_avx2::q45_rows::<Act16Block, true, R, T>(base, stride, x16, &mut o)
        }
        (DType::Q4_0, _) => k::dot_rows_f32_xt::<FMT_Q4_0, R, T>(base, stride, xf, &mut o),
        (DType::Q4_1, _) => k::dot_rows_f32_xt::<FMT_Q4_1, R, T>(base, stride, xf, &mut o),
        (DType::Q5_0, _) => k::dot_rows_f32_xt::<FMT_Q5_0, R, T>(base, stride, xf, &mut o),
        (DType::Q8_0, _) => k::dot_rows_f32_xt::<FMT_Q8_0, R, T>(base, stride, xf, &mut o),
        (DType::MXFP4, _) => k::dot_rows_f32_xt::<FMT_MXFP4, R, T>(base, stride, xf, &mut o),
        (DType::Q4_K | DType::Q5_K | DType::Q6_K, _) => crate::dot_kquant_avx2::rows::<R, T>(
            dtype,
            path == Path::Int8,
            base,
            stride,
            xq,
            xf,
            &mut o,
        ),
        (DType::F32 | DType::F16 | DType::BF16, _) => {
            unreachable!("float formats take the f32 dot products")
        }
        (DType::Q5_1, _) => unreachable!("Q5_1 rows take the scalar kernels (has_avx2_rows)"),
    }
    o
}

/// The activations of one call, every row in its path's form.
#[derive(Clone, Copy)]
struct CallActs<'x> {
    path: Path,
    cols: usize,
    q8: &'x [ActBlock],
    q16: &'x [Act16Block],
    s16: &'x [ActSplit16],
    f: &'x [f32],
}

impl<'x> CallActs<'x> {
    /// Activation row `t` (only the slice its path reads is non-empty).
    #[inline]
    fn row(&self, t: usize) -> Acts<'x> {
        let (cols, nb) = (self.cols, self.cols / 32);
        Acts {
            q8: if self.path == Path::Int8 {
                &self.q8[t * nb..(t + 1) * nb]
            } else {
                &[]
            },
            q16: if self.path == Path::Int16 {
                &self.q16[t * nb..(t + 1) * nb]
            } else {
                &[]
            },
            f: if self.path == Path::F32 {
                &self.f[t * cols..(t + 1) * cols]
            } else {
                &[]
            },
        }
    }
}

/// Tokens `t..t + T` against weight rows `r0..r1`, `T` tokens per unpacked block, written into
/// `y` (row-major `n × rows`).
///
/// # Safety
/// An AVX2 Isa was detected; `w` is quantized and `a.path` is its path; `t + T <= n`, `r1 <=
/// w.rows`; `a` holds `n` activation rows; `y` points at `n · w.rows` floats that no other task
/// writes in rows `r0..r1`.
#[cfg(target_arch = "x86_64")]
unsafe fn tokens_t<const T: usize, const R: usize>(
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
            let o = rows_t::<R, T>(w.dtype, a.path, base, stride, at);
            for (j, oj) in o.iter().enumerate() {
                for (i, &v) in oj.iter().enumerate() {
                    *y.ptr().add((t + j) * rows + r + i) = v;
                }
            }
            r += R;
        } else {
            let o = rows_t::<1, T>(w.dtype, a.path, base, stride, at);
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
    matmul_many(isa, precision, &mut [(*w, y)], x, n, scratch);
}

/// Most matrices one [`matmul_many`] call takes.
pub const MAX_FUSED: usize = 4;

/// Several products of the same activations in one parallel loop: `ys[i].1 = x · ys[i].0ᵀ`
/// (Q/K/V, or gate/up). The activations are quantized once per path instead of once per
/// matrix, and the threads meet once instead of once per matrix, which in decode (a few tens
/// of microseconds per matrix) is a measurable share of the step. Each output element is
/// computed exactly as [`matmul`] computes it alone.
///
/// Panics if a slice length does not match the shapes, the matrices' `cols` differ, or there
/// are more than [`MAX_FUSED`] of them (caller bugs, not input-driven).
pub fn matmul_many(
    isa: Isa,
    precision: ActPrecision,
    ys: &mut [(WeightMatrix<'_>, &mut [f32])],
    x: &[f32],
    n: usize,
    scratch: &mut MatmulScratch,
) {
    assert!(
        !ys.is_empty() && ys.len() <= MAX_FUSED,
        "matmul: 1..=4 matrices"
    );
    let cols = ys[0].0.cols;
    assert_eq!(x.len(), n * cols, "matmul: x shape");
    for (w, y) in ys.iter() {
        assert_eq!(w.cols, cols, "matmul: fused matrices share their input");
        assert_eq!(y.len(), n * w.rows, "matmul: y shape");
    }
    let nb = cols / 32;
    let paths: [Option<Path>; MAX_FUSED] = std::array::from_fn(|i| {
        ys.get(i)
            .map(|(w, _)| Path::of(w.dtype, precision, w.layout))
    });
    if paths.contains(&Some(Path::Int8)) {
        if scratch.act.len() < n * nb {
            scratch.act.resize(n * nb, ActBlock::default());
        }
        act::quantize(isa, x, &mut scratch.act[..n * nb]);
    }
    if paths.contains(&Some(Path::Int16)) {
        if scratch.act16.len() < n * nb {
            scratch.act16.resize(n * nb, Act16Block::default());
        }
        act::quantize16(isa, x, &mut scratch.act16[..n * nb]);
        let tiled16 = (ys.iter().zip(paths))
            .any(|((w, _), p)| w.layout == Layout::Tiles8 && p == Some(Path::Int16));
        if tiled16 {
            if scratch.split16.len() < n * nb {
                scratch.split16.resize(n * nb, ActSplit16::default());
            }
            act::split16(&scratch.act16[..n * nb], &mut scratch.split16[..n * nb]);
        }
    }
    let (q8, q16, s16) = (&scratch.act[..], &scratch.act16[..], &scratch.split16[..]);
    let mut jobs: [Job<'_, '_>; MAX_FUSED] = std::array::from_fn(|_| Job::EMPTY);
    for (i, (w, y)) in ys.iter_mut().enumerate() {
        let path = paths[i].unwrap_or(Path::F32);
        let acts = CallActs {
            path,
            cols,
            q8: &q8[..if path == Path::Int8 { n * nb } else { 0 }],
            q16: &q16[..if path == Path::Int16 { n * nb } else { 0 }],
            s16: &s16[..if path == Path::Int16 && w.layout == Layout::Tiles8 {
                n * nb
            } else {
                0
            }],
            f: x,
        };
        jobs[i] = Job {
            w: *w,
            y: SharedMut(y.as_mut_ptr()),
            n,
            acts,
        };
    }
    run_jobs(isa, &jobs[..ys.len()]);
}

/// One product of a [`run_jobs`] loop: `n` activation rows (in `acts`) times `w`, into `y`.
struct Job<'w, 'x> {
    w: WeightMatrix<'w>,
    y: SharedMut<f32>,
    n: usize,
    acts: CallActs<'x>,
}

impl Job<'_, '_> {
    const EMPTY: Job<'static, 'static> = Job {
        w: WeightMatrix {
            dtype: DType::F32,
            rows: 0,
            cols: 0,
            data: &[],
            layout: Layout::Rows,
        },
        y: SharedMut(std::ptr::null_mut()),
        n: 0,
        acts: CallActs {
            path: Path::F32,
            cols: 0,
            q8: &[],
            q16: &[],
            s16: &[],
            f: &[],
        },
    };
}

/// Runs every job's rows in one parallel loop: per matrix, enough chunks to balance, each big
/// enough to amortise the task overhead; task numbers run through the matrices' chunks in
/// order, so each thread's range of tasks (see `pool`) is consecutive rows.
fn run_jobs(isa: Isa, jobs: &[Job<'_, '_>]) {
    let threads = pool::threads();
    // (chunk rows, first task) per job.
    let mut plan: [(usize, usize); MAX_FUSED] = [(0, 0); MAX_FUSED];
    let mut heap: Vec<(usize, usize)> = Vec::new();
    let plan: &mut [(usize, usize)] = if jobs.len() <= MAX_FUSED {
        &mut plan[..jobs.len()]
    } else {
        heap.resize(jobs.len(), (0, 0));
        &mut heap
    };
    let mut n_tasks = 0;
    for (job, p) in jobs.iter().zip(plan.iter_mut()) {
        let w = &job.w;
        let mut chunk = (w.rows / (threads * 8)).clamp(8, 256).min(w.rows.max(1));
        if w.layout == Layout::Tiles8 {
            // Whole tile groups; pairs of them where later passes over a chunk take the
            // 512-bit kernels (an odd group per chunk would go through the 256-bit ones).
            let unit = if isa.avx512() && job.n > crate::dot_tiles_vnni::MAX_TOKENS {
                2 * TILE_ROWS
            } else {
                TILE_ROWS
            };
            chunk = chunk.next_multiple_of(unit);
        }
        *p = (chunk, n_tasks);
        n_tasks += w.rows.div_ceil(chunk);
    }
    let plan = &*plan;
    pool::parallel_for(n_tasks, |task| {
        // The job whose tasks include `task`: the last one starting at or before it.
        let j = plan.partition_point(|&(_, first)| first <= task) - 1;
        let (job, (chunk, first)) = (&jobs[j], plan[j]);
        let r0 = (task - first) * chunk;
        let r1 = (r0 + chunk).min(job.w.rows);
        // SAFETY: chunks partition each matrix's rows and each job has its own output, so
        // this task alone writes rows r0..r1 of its y (n · w.rows floats, checked by the
        // callers), which outlives parallel_for.
        unsafe { rows_of_chunk(isa, &job.w, &job.acts, job.n, r0, r1, job.y, job.w.rows) };
    });
}

/// Several products, each of its own activations: `items[i].3 = items[i].1 · items[i].0ᵀ`
/// for the `items[i].2` rows of `items[i].1` — a mixture's experts, each over the tokens the
/// router sent to it, in one parallel loop (the threads meet once for all the experts, not
/// once per expert). Each output element is computed exactly as [`matmul`] computes it alone.
///
/// Panics if a slice length does not match the shapes (caller bugs, not input-driven).
#[allow(clippy::type_complexity)]
pub fn matmul_each(
    isa: Isa,
    precision: ActPrecision,
    items: &mut [(WeightMatrix<'_>, &[f32], usize, &mut [f32])],
    scratch: &mut MatmulScratch,
) {
    // Each item's activations in its path's form, one after another in the scratch.
    let (mut n8, mut n16, mut ns16) = (0, 0, 0);
    for (w, x, n, y) in items.iter() {
        assert_eq!(x.len(), n * w.cols, "matmul_each: x shape");
        assert_eq!(y.len(), n * w.rows, "matmul_each: y shape");
        let nb = w.cols / 32;
        match Path::of(w.dtype, precision, w.layout) {
            Path::Int8 => n8 += n * nb,
            Path::Int16 if w.layout == Layout::Tiles8 => {
                n16 += n * nb;
                ns16 += n * nb;
            }
            Path::Int16 => n16 += n * nb,
            Path::F32 => {}
        }
    }
    if scratch.act.len() < n8 {
        scratch.act.resize(n8, ActBlock::default());
    }
    if scratch.act16.len() < n16 {
        scratch.act16.resize(n16, Act16Block::default());
    }
    if scratch.split16.len() < ns16 {
        scratch.split16.resize(ns16, ActSplit16::default());
    }
    let (mut o8, mut o16, mut os16) = (0, 0, 0);
    let mut spans = Vec::with_capacity(items.len());
    for (w, x, n, _) in items.iter() {
        let len = n * (w.cols / 32);
        let path = Path::of(w.dtype, precision, w.layout);
        let span = (path, o8, o16, os16, len);
        match path {
            Path::Int8 => {
                act::quantize(isa, x, &mut scratch.act[o8..o8 + len]);
                o8 += len;
            }
            Path::Int16 => {
                act::quantize16(isa, x, &mut scratch.act16[o16..o16 + len]);
                if w.layout == Layout::Tiles8 {
                    let (src, dst) = (&scratch.act16[o16..o16 + len], &mut scratch.split16);
                    act::split16(src, &mut dst[os16..os16 + len]);
                    os16 += len;
                }
                o16 += len;
            }
            Path::F32 => {}
        }
        spans.push(span);
    }
    let (q8, q16, s16) = (&scratch.act[..], &scratch.act16[..], &scratch.split16[..]);
    let jobs: Vec<Job<'_, '_>> = items
        .iter_mut()
        .zip(&spans)
        .map(|((w, x, n, y), &(path, a8, a16, as16, len))| {
            let tiled16 = path == Path::Int16 && w.layout == Layout::Tiles8;
            Job {
                w: *w,
                y: SharedMut(y.as_mut_ptr()),
                n: *n,
                acts: CallActs {
                    path,
                    cols: w.cols,
                    q8: &q8[a8..a8 + if path == Path::Int8 { len } else { 0 }],
                    q16: &q16[a16..a16 + if path == Path::Int16 { len } else { 0 }],
                    s16: &s16[as16..as16 + if tiled16 { len } else { 0 }],
                    f: x,
                },
            }
        })
        .collect();
    run_jobs(isa, &jobs);
}

/// Rows `r0..r1` of `w` for all `n` activation rows, into `y` (row-major, `rows` floats per
/// activation row: output `(t, r)` at `t · rows + r`).
///
/// # Safety
/// `a` holds `n` activation rows in `w`'s path; `r1 <= w.rows <= rows`; `y` points at `n ·
/// rows` floats whose columns `r0..r1` no other thread writes meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn rows_of_chunk(
    isa: Isa,
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    yp: SharedMut<f32>,
    rows: usize,
) {
    if w.layout == Layout::Tiles8 {
        return tiled_rows_of_chunk(isa, w, a, n, r0, r1, yp, rows);
    }
    let mut t = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() && w.dtype.is_quantized() && has_avx2_rows(w.dtype) {
        // Groups of activation rows share each unpacked weight block: 4 at a time (2 weight
        // rows per call keeps the accumulators in registers), then the last 1, 2 or 3.
        while t + 4 <= n {
            // SAFETY: an AVX2 Isa was detected and the format is quantized; t + 4 <= n; rows
            // r0..r1 lie inside w and belong to this caller (function contract).
            tokens_t::<4, 2>(w, a, t, r0, r1, yp, rows);
            t += 4;
        }
        // The rest in one pass too (a verification step of 3, 6 or 7 tokens is common).
        match n - t {
            // SAFETY (each arm): as above with t + 3, t + 2 or t + 1 == n.
            3 => tokens_t::<3, 2>(w, a, t, r0, r1, yp, rows),
            2 => tokens_t::<2, 4>(w, a, t, r0, r1, yp, rows),
            1 => tokens_t::<1, 4>(w, a, t, r0, r1, yp, rows),
            _ => {}
        }
        t = n;
    }
    for t in t..n {
        let at = a.row(t);
        for r in r0..r1 {
            let v = dot_row(isa, w.dtype, a.path, w.row(r), at);
            // SAFETY: t < n and r < rows, so the index is inside y; this caller owns rows
            // r0..r1 (function contract).
            *yp.ptr().add(t * rows + r) = v;
        }
    }
}

/// [`rows_of_chunk`] for a tiled matrix (`r0`, `r1` multiples of [`TILE_ROWS`]): paths with
/// a tile kernel on AVX2 run it, four tokens per pass over the chunk's tiles; others unpack
/// the chunk's rows to the stored layout and take the row kernels.
///
/// # Safety
/// As [`rows_of_chunk`].
#[allow(clippy::too_many_arguments)]
unsafe fn tiled_rows_of_chunk(
    isa: Isa,
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    n: usize,
    r0: usize,
    r1: usize,
    yp: SharedMut<f32>,
    rows: usize,
) {
    // Tile kernels: every tiled format with 8- or 16-bit activations.
    #[cfg(target_arch = "x86_64")]
    if isa.avx512()
        && matches!(
            (w.dtype, a.path),
            (
                DType::Q4_0
                    | DType::Q4_1
                    | DType::Q5_0
                    | DType::Q5_1
                    | DType::Q8_0
                    | DType::Q4_K
                    | DType::Q6_K
                    | DType::MXFP4,
                Path::Int8 | Path::Int16
            )
        )
    {
        // Eight tokens per pass, the rest in one pass of 1–7 (a verification step of 3–7
        // tokens in one pass instead of 2 + 1 or 4 + 2 + 1: the 1.5B's 3-token step 52 → 43
        // ms, 7 tokens 93 → 70 ms): a token's arithmetic is the same in every group size, so
        // its outputs do not depend on the batch.
        let mut t = 0;
        while t < n {
            // SAFETY (each arm): an AVX-512 Isa was detected; t + T <= n; rows r0..r1 are whole
            // tile groups of w owned by this caller.
            let step = (n - t).min(crate::dot_tiles_vnni::MAX_TOKENS);
            match step {
                1 => tiles_t_vnni::<1>(w, a, t, r0, r1, yp, rows),
                2 => tiles_t_vnni::<2>(w, a, t, r0, r1, yp, rows),
                3 => tiles_t_vnni::<3>(w, a, t, r0, r1, yp, rows),
                4 => tiles_t_vnni::<4>(w, a, t, r0, r1, yp, rows),
                5 => tiles_t_vnni::<5>(w, a, t, r0, r1, yp, rows),
                6 => tiles_t_vnni::<6>(w, a, t, r0, r1, yp, rows),
                7 => tiles_t_vnni::<7>(w, a, t, r0, r1, yp, rows),
                _ => tiles_t_vnni::<8>(w, a, t, r0, r1, yp, rows),
            }
            t += step;
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2()
        && matches!(
            (w.dtype, a.path),
            (
                DType::Q4_0
                    | DType::Q4_1
                    | DType::Q5_0
                    | DType::Q5_1
                    | DType::Q8_0
                    | DType::Q4_K
                    | DType::Q6_K
                    | DType::MXFP4,
                Path::Int8 | Path::Int16
            )
        )
    {
        let mut t = 0;
        while t < n {
            // SAFETY (each arm): AVX2 was detected; t + T <= n; rows r0..r1 are whole tile
            // groups of w owned by this caller.
            match n - t {
                1 => tiles_t::<1>(w, a, t, r0, r1, yp, rows),
                2 => tiles_t::<2>(w, a, t, r0, r1, yp, rows),
                3 => tiles_t::<3>(w, a, t, r0, r1, yp, rows),
                _ => tiles_t::<4>(w, a, t, r0, r1, yp, rows),
            }
            t += (n - t).min(4);
        }
        return;
    }
    // The chunk's rows back in the stored layout, as a matrix of their own whose row 0 is
    // row r0 (outputs shifted by r0 columns).
    let rb = w.dtype.row_bytes(w.cols);
    let mut data = vec![0u8; (r1 - r0) * rb];
    for (r, row) in (r0..r1).zip(data.chunks_exact_mut(rb)) {
        packed::unpack_row(w, r, row);
    }
    let plain = WeightMatrix {
        rows: r1 - r0,
        data: &data,
        layout: Layout::Rows,
        ..*w
    };
    // SAFETY: the plain matrix's rows 0..r1-r0 are rows r0..r1 of w, whose outputs this
    // caller owns (contract), at columns r0.. of y: the shifted pointer stays inside y.
    rows_of_chunk(
        isa,
        &plain,
        a,
        n,
        0,
        r1 - r0,
        SharedMut(yp.ptr().add(r0)),
        rows,
    );
}

/// [`tiles_t`] with the AVX-512 VNNI kernels. Passes after the first (`t > 0`) find the
/// chunk's tiles in cache, where the 512-bit pairs pay.
///
/// # Safety
/// As [`tiles_t`], with AVX-512 F/BW/VL/VNNI detected (an [`Isa`] whose `avx512()` holds).
#[cfg(target_arch = "x86_64")]
unsafe fn tiles_t_vnni<const T: usize>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    t: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    use crate::dot_tiles_avx2 as f;
    use crate::dot_tiles_vnni as k;
    use crate::dot_tiles_zmm as z;
    let nb = w.cols / 32;
    let group_bytes = w.cols / w.dtype.block_size() * packed::tile_bytes(w.dtype);
    let i16 = a.path == Path::Int16;
    let x8: [&[ActBlock]; T] = std::array::from_fn(|j| a.row(t + j).q8);
    let x16: [&[ActSplit16]; T] = std::array::from_fn(|j| match i16 {
        true => &a.s16[(t + j) * nb..(t + j + 1) * nb],
        false => &[],
    });
    // Full eight-token passes over tiles already in cache (every pass over a chunk after its
    // first, as in prefill and batched decode) take pairs of row groups through the
    // 512-bit kernels and a last odd group through the 256-bit ones (the same bits either
    // way): the 1.5B's 512-token prefill 150 → 170 tok/s on a Zen 4 VM. A pass that streams
    // its weights from memory stays at 256 bits: two interleaved streams per task measured
    // slower (Gemma 3 decode 249 → 210 tok/s, SmolLM2 505 → 430 on a Zen 5 VM; the 1.5B's
    // 4-token pass 53 → 45 ms, 6 tokens 63 → 55 ms, and a lone 8-token pass — a verification
    // of seven guesses — 71–72.5 → 67.1–67.3 ms on the Zen 4, where a streamed 8960×1536
    // Q6_K product of 8 tokens runs at 166 GMAC/s in 256-bit passes and 140 in pairs).
    // Q8_0 with 16-bit activations has 256-bit kernels only.
    let pairs = t > 0 && T >= 8 && !(i16 && matches!(w.dtype, DType::Q8_0 | DType::MXFP4));
    let x16w: [&[Act16Block]; T] = std::array::from_fn(|j| a.row(t + j).q16);
    let (mut g, end) = (r0 / TILE_ROWS, r1 / TILE_ROWS);
    while pairs && g + 2 <= end {
        let p = w.data.as_ptr().add(g * group_bytes);
        let q = p.add(group_bytes);
        let o = match w.dtype {
            DType::Q8_0 => z::tiles2::<_, f::Q80, T>(p, q, x8),
            DType::MXFP4 => z::tiles2::<_, f::Mx4, T>(p, q, x8),
            DType::Q5_0 if i16 => z::tiles2::<_, f::Q50, T>(p, q, x16),
            DType::Q5_0 => z::tiles2::<_, f::Q50, T>(p, q, x8),
            DType::Q5_1 if i16 => z::tiles2::<_, f::Q51, T>(p, q, x16),
            DType::Q5_1 => z::tiles2::<_, f::Q51, T>(p, q, x8),
            DType::Q4_0 if i16 => z::tiles2::<_, f::Q40, T>(p, q, x16),
            DType::Q4_0 => z::tiles2::<_, f::Q40, T>(p, q, x8),
            DType::Q4_1 if i16 => z::tiles2::<_, f::Q41, T>(p, q, x16),
            DType::Q4_1 => z::tiles2::<_, f::Q41, T>(p, q, x8),
            DType::Q4_K if i16 => z::tiles2::<_, f::Q4K, T>(p, q, x16),
            DType::Q4_K => z::tiles2::<_, f::Q4K, T>(p, q, x8),
            DType::Q6_K if i16 => z::tiles2::<_, f::Q6K, T>(p, q, x16),
            _ => z::tiles2::<_, f::Q6K, T>(p, q, x8),
        };
        for (j, oj) in o.iter().enumerate() {
            let dst = y.ptr().add((t + j) * rows + g * TILE_ROWS);
            std::ptr::copy_nonoverlapping(oj.as_ptr(), dst, 2 * TILE_ROWS);
        }
        g += 2;
    }
    for g in g..end {
        let tiles = w.data.as_ptr().add(g * group_bytes);
        let o = match w.dtype {
            DType::Q8_0 if i16 => k::tiles::<_, f::Q80, T>(tiles, x16w),
            DType::Q8_0 => k::tiles::<_, f::Q80, T>(tiles, x8),
            DType::MXFP4 if i16 => k::tiles::<_, f::Mx4, T>(tiles, x16w),
            DType::MXFP4 => k::tiles::<_, f::Mx4, T>(tiles, x8),
            DType::Q5_0 if i16 => k::tiles::<_, f::Q50, T>(tiles, x16),
            DType::Q5_0 => k::tiles::<_, f::Q50, T>(tiles, x8),
            DType::Q5_1 if i16 => k::tiles::<_, f::Q51, T>(tiles, x16),
            DType::Q5_1 => k::tiles::<_, f::Q51, T>(tiles, x8),
            DType::Q4_0 if i16 => k::tiles::<_, f::Q40, T>(tiles, x16),
            DType::Q4_0 => k::tiles::<_, f::Q40, T>(tiles, x8),
            DType::Q4_1 if i16 => k::tiles::<_, f::Q41, T>(tiles, x16),
            DType::Q4_1 => k::tiles::<_, f::Q41, T>(tiles, x8),
            DType::Q4_K if i16 => k::tiles::<_, f::Q4K, T>(tiles, x16),
            DType::Q4_K => k::tiles::<_, f::Q4K, T>(tiles, x8),
            DType::Q6_K if i16 => k::tiles::<_, f::Q6K, T>(tiles, x16),
            _ => k::tiles::<_, f::Q6K, T>(tiles, x8),
        };
        for (j, oj) in o.iter().enumerate() {
            let dst = y.ptr().add((t + j) * rows + g * TILE_ROWS);
            std::ptr::copy_nonoverlapping(oj.as_ptr(), dst, TILE_ROWS);
        }
    }
}

/// Tokens `t..t + T` against the tile groups of rows `r0..r1` of a tiled matrix.
///
/// # Safety
/// AVX2 was detected; `(w.dtype, a.path)` has a tile kernel; `t + T <= n`; `r0..r1` are whole groups
/// inside `w`, written by this caller alone; `y` as in [`rows_of_chunk`].
#[cfg(target_arch = "x86_64")]
unsafe fn tiles_t<const T: usize>(
    w: &WeightMatrix<'_>,
    a: &CallActs<'_>,
    t: usize,
    r0: usize,
    r1: usize,
    y: SharedMut<f32>,
    rows: usize,
) {
    use crate::dot_tiles_avx2 as k;
    let nb = w.cols / 32;
    let group_bytes = w.cols / w.dtype.block_size() * packed::tile_bytes(w.dtype);
    let i16 = a.path == Path::Int16;
    // The path's activation rows (the other path's are empty).
    let x8: [&[ActBlock]; T] = std::array::from_fn(|j| a.row(t + j).q8);
    let x16: [&[ActSplit16]; T] = std::array::from_fn(|j| match i16 {
        true => &a.s16[(t + j) * nb..(t + j + 1) * nb],
        false => &[],
    });
    let x16w: [&[Act16Block]; T] = std::array::from_fn(|j| a.row(t + j).q16);
    for g in r0 / TILE_ROWS..r1 / TILE_ROWS {
        let tiles = w.data.as_ptr().add(g * group_bytes);
        let o = match w.dtype {
            DType::Q8_0 if i16 => k::tiles::<_, k::Q80, T>(tiles, x16w),
            DType::Q8_0 => k::tiles::<_, k::Q80, T>(tiles, x8),
            DType::MXFP4 if i16 => k::tiles::<_, k::Mx4, T>(tiles, x16w),
            DType::MXFP4 => k::tiles::<_, k::Mx4, T>(tiles, x8),
            DType::Q5_0 if i16 => k::tiles::<_, k::Q50, T>(tiles, x16),
            DType::Q5_0 => k::tiles::<_, k::Q50, T>(tiles, x8),
            DType::Q5_1 if i16 => k::tiles::<_, k::Q51, T>(tiles, x16),
            DType::Q5_1 => k::tiles::<_, k::Q51, T>(tiles, x8),
            DType::Q4_0 if i16 => k::tiles::<_, k::Q40, T>(tiles, x16),
            DType::Q4_0 => k::tiles::<_, k::Q40, T>(tiles, x8),
            DType::Q4_1 if i16 => k::tiles::<_, k::Q41, T>(tiles, x16),
            DType::Q4_1 => k::tiles::<_, k::Q41, T>(tiles, x8),
            DType::Q4_K if i16 => k::tiles::<_, k::Q4K, T>(tiles, x16),
            DType::Q4_K => k::tiles::<_, k::Q4K, T>(tiles, x8),
            DType::Q6_K if i16 => k::tiles::<_, k::Q6K, T>(tiles, x16),
            _ => k::tiles::<_, k::Q6K, T>(tiles, x8),
        };
        for (j, oj) in o.iter().enumerate() {
            let dst = y.ptr().add((t + j) * rows + g * TILE_ROWS);
            std::ptr::copy_nonoverlapping(oj.as_ptr(), dst, TILE_ROWS);
        }
    }
}
