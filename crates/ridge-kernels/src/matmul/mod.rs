//! Matrix products `y = x · Wᵀ` for a batch of activation rows against a weight matrix in its
//! stored format.
//!
//! Work is split over output rows (weight rows): each task owns a chunk of weight rows and
//! computes them for every activation row, so a chunk's weights are read from memory once per
//! call and reused from cache for the whole batch. Each `y[t][r]` is one dot product whose
//! reduction order does not depend on the batch.

pub(crate) mod acts;

pub use crate::matrix::{Layout, WeightMatrix};
pub use acts::ActPrecision;

use crate::act::{self, Act16Block, ActBlock, ActSplit16};
use crate::dtype::lattice;
use crate::packed::{self, TILE_ROWS};
use crate::pool::{self, SharedMut};
use crate::scalar::dot as dot_scalar;
use crate::scalar::lowbit as lowbit_scalar;
use crate::{tiles, DType, Isa};
use acts::{Acts, CallActs, Path};

/// Reusable buffers for [`matmul`] (quantized activations); grows, never shrinks.
#[derive(Default)]
pub struct MatmulScratch {
    act: Vec<ActBlock>,
    act_pow2: Vec<ActBlock>,
    act16: Vec<Act16Block>,
    split16: Vec<ActSplit16>,
}

/// Whether a `dtype` matrix's 8-bit activations take power-of-two scales
/// ([`act::pow2_scale`]): Q4_K's, whose 512-bit tile kernel then scales each (sub-block,
/// token) sum by an exponent add instead of a multiply on the `vpdpbusd` ports (the 1.5B's
/// 512-token prefill 196.5–196.8 → 205.6–211.4 tok/s on a Zen 4; its perplexity and why that
/// cost is accepted: `ridge_model`'s `act_policy`). Formats whose kernels gain nothing keep
/// each block's own scale.
pub(crate) fn pow2_acts(dtype: DType) -> bool {
    dtype == DType::Q4_K
}

/// One row dot product in the given path: float rows through `isa`'s table, quantized rows
/// (those no SIMD row kernel takes) through the scalar reference.
#[inline]
fn dot_row(isa: Isa, dtype: DType, path: Path, row: &[u8], a: Acts<'_>) -> f32 {
    let k = isa.kernels();
    // SAFETY: the table is `isa`'s, whose kernels run on this CPU (cpu.rs); the slice lengths
    // match the format (checked by WeightMatrix::new and matmul's asserts).
    match dtype {
        DType::F32 => return unsafe { (k.dot_f32)(row, a.f) },
        DType::F16 => return unsafe { (k.dot_f16)(row, a.f) },
        DType::BF16 => return unsafe { (k.dot_bf16)(row, a.f) },
        _ => {}
    }
    use dot_scalar as s;
    use lowbit_scalar as l;
    let (xq, x16, xf) = (a.q8, a.q16, a.f);
    match (dtype, path) {
        (lattice!(), p) => match p {
            Path::Int8 => l::dot_lattice(dtype, row, xq),
            Path::Int16 => l::dot_lattice(dtype, row, x16),
            Path::F32 => l::dot_lattice_f32(dtype, row, xf),
        },
        (DType::Q2_K, Path::Int8) => l::dot_q2_k(row, xq),
        (DType::Q3_K, Path::Int8) => l::dot_q3_k(row, xq),
        (DType::IQ4_NL, Path::Int8) => l::dot_iq4_nl(row, xq),
        (DType::IQ4_XS, Path::Int8) => l::dot_iq4_xs(row, xq),
        (DType::Q2_K, Path::Int16) => l::dot_q2_k(row, x16),
        (DType::Q3_K, Path::Int16) => l::dot_q3_k(row, x16),
        (DType::IQ4_NL, Path::Int16) => l::dot_iq4_nl(row, x16),
        (DType::IQ4_XS, Path::Int16) => l::dot_iq4_xs(row, x16),
        (DType::Q2_K, _) => l::dot_q2_k_f32(row, xf),
        (DType::Q3_K, _) => l::dot_q3_k_f32(row, xf),
        (DType::IQ4_NL, _) => l::dot_iq4_nl_f32(row, xf),
        (DType::IQ4_XS, _) => l::dot_iq4_xs_f32(row, xf),
        (DType::F32 | DType::F16 | DType::BF16, _) => unreachable!("float rows returned above"),
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
    let int8 = |pow2: bool| {
        (ys.iter().zip(paths))
            .any(|((w, _), p)| p == Some(Path::Int8) && pow2_acts(w.dtype) == pow2)
    };
    if int8(false) {
        if scratch.act.len() < n * nb {
            scratch.act.resize(n * nb, ActBlock::default());
        }
        act::quantize(isa, x, &mut scratch.act[..n * nb]);
    }
    if int8(true) {
        if scratch.act_pow2.len() < n * nb {
            scratch.act_pow2.resize(n * nb, ActBlock::default());
        }
        act::quantize_pow2(isa, x, &mut scratch.act_pow2[..n * nb]);
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
    let q8p = &scratch.act_pow2[..];
    let mut jobs: [Job<'_, '_>; MAX_FUSED] = std::array::from_fn(|_| Job::EMPTY);
    for (i, (w, y)) in ys.iter_mut().enumerate() {
        let path = paths[i].unwrap_or(Path::F32);
        let q8 = if pow2_acts(w.dtype) { q8p } else { q8 };
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
            let unit = if job.n > isa.kernels().tile_pairs_above {
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
    let (mut n8, mut np2, mut n16, mut ns16) = (0, 0, 0, 0);
    for (w, x, n, y) in items.iter() {
        assert_eq!(x.len(), n * w.cols, "matmul_each: x shape");
        assert_eq!(y.len(), n * w.rows, "matmul_each: y shape");
        let nb = w.cols / 32;
        match Path::of(w.dtype, precision, w.layout) {
            Path::Int8 if pow2_acts(w.dtype) => np2 += n * nb,
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
    if scratch.act_pow2.len() < np2 {
        scratch.act_pow2.resize(np2, ActBlock::default());
    }
    if scratch.act16.len() < n16 {
        scratch.act16.resize(n16, Act16Block::default());
    }
    if scratch.split16.len() < ns16 {
        scratch.split16.resize(ns16, ActSplit16::default());
    }
    // Per item: its path, its offset in the 8-bit scratch (the power-of-two one for
    // `pow2_acts` formats), the 16-bit and the split scratch, and its block count.
    let (mut o8, mut op2, mut o16, mut os16) = (0, 0, 0, 0);
    let mut spans: Vec<(Path, usize, usize, usize, usize)> = Vec::with_capacity(items.len());
    for (i, (w, x, n, _)) in items.iter().enumerate() {
        let len = n * (w.cols / 32);
        let path = Path::of(w.dtype, precision, w.layout);
        let tiled16 = path == Path::Int16 && w.layout == Layout::Tiles8;
        let pow2 = pow2_acts(w.dtype);
        // Items reading the same activations (an expert's gate and up; at one token every
        // expert's) share one quantized copy: same slice, same path and scales, and the split
        // bytes where this one needs them.
        let same = (0..i).find(|&j| {
            let (wj, xj) = (&items[j].0, items[j].1);
            std::ptr::eq(xj, *x)
                && spans[j].0 == path
                && (path != Path::Int8 || pow2_acts(wj.dtype) == pow2)
                && (!tiled16 || wj.layout == Layout::Tiles8)
        });
        if let Some(j) = same {
            spans.push(spans[j]);
            continue;
        }
        let first8 = if pow2 { op2 } else { o8 };
        let span = (path, first8, o16, os16, len);
        match path {
            Path::Int8 if pow2 => {
                act::quantize_pow2(isa, x, &mut scratch.act_pow2[op2..op2 + len]);
                op2 += len;
            }
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
    let q8p = &scratch.act_pow2[..];
    let jobs: Vec<Job<'_, '_>> = items
        .iter_mut()
        .zip(&spans)
        .map(|((w, x, n, y), &(path, a8, a16, as16, len))| {
            let tiled16 = path == Path::Int16 && w.layout == Layout::Tiles8;
            let q8 = if pow2_acts(w.dtype) { q8p } else { q8 };
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
    if let Some(stored) = isa.kernels().stored_chunk {
        // SAFETY: the table is `isa`'s (its kernels run on this CPU); the rest is this
        // function's own contract.
        if stored(w, a, n, r0, r1, yp, rows) {
            return;
        }
    }
    for t in 0..n {
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
/// a tile kernel run the table's tile driver (`x86::avx2::tiles`, `x86::avx512`); others
/// unpack the chunk's rows to the stored layout and take the row kernels.
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
    if let Some(tiled) = isa
        .kernels()
        .tiled_chunk
        .filter(|_| tiles::has_kernel(w.dtype, a.path))
    {
        // SAFETY: the table is `isa`'s (its kernels run on this CPU); the format and path
        // have tile kernels (checked); r0..r1 are whole tile groups (this function's contract).
        return tiled(w, a, n, r0, r1, yp, rows);
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
