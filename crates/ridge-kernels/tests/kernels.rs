//! Every kernel against a scalar or f64 reference on random shapes and data.

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ridge_kernels::act::{
    pow2_scale, quantize16_scalar, quantize_pow2_scalar, quantize_scalar, Act16Block, ActBlock,
    POW2_MAX, POW2_MIN,
};
use ridge_kernels::attention::{attend_group, attend_head, AttnShape, KvLayer};
use ridge_kernels::blocks::{dequantize_row, quantize_row};
use ridge_kernels::{
    matmul, matmul_each, ActPrecision, DType, Isa, MatmulScratch, PackedMatrix, WeightMatrix,
};

const ALL: [DType; 25] = DType::ALL;

/// The lattice and ternary formats, which ridge reads but does not quantize: their test rows
/// are random blocks with finite scales (any bit pattern is a valid block).
fn is_lattice(dtype: DType) -> bool {
    ridge_kernels::iquant::is_lattice(dtype)
}

/// Random blocks of a lattice format, their f16 scales set to finite values in [-1, 1].
fn lattice_bytes(rng: &mut StdRng, dtype: DType, n_blocks: usize) -> Vec<u8> {
    let mut w: Vec<u8> = (0..n_blocks * dtype.block_bytes())
        .map(|_| rng.random())
        .collect();
    for b in w.chunks_exact_mut(dtype.block_bytes()) {
        let d = f16::from_f32(rng.random_range(-1.0f32..1.0)).to_bits();
        match dtype {
            DType::IQ1_M => {
                // The scale's nibbles are the top nibbles of the four u16 words at 48..56.
                for k in 0..4 {
                    let o = 48 + 2 * k;
                    let v = u16::from_le_bytes([b[o], b[o + 1]]) & 0x0FFF;
                    let v = v | ((d >> (4 * k)) & 0xF) << 12;
                    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {
                let o = match dtype {
                    DType::TQ1_0 => 52,
                    DType::TQ2_0 => 64,
                    _ => 0,
                };
                b[o..o + 2].copy_from_slice(&d.to_le_bytes());
            }
        }
    }
    w
}

/// `cols` rounded up to a whole number of `dtype`'s blocks.
fn cols_for(dtype: DType, cols: usize) -> usize {
    cols.next_multiple_of(dtype.block_size())
}

/// The formats with tile layouts and integer tile kernels on every path (AMX too; MXFP4's
/// looked-up codes have tiles but no AMX form).
const TILED: [DType; 7] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q6_K,
];

const PRECS: [ActPrecision; 3] = [ActPrecision::Int8, ActPrecision::Int16, ActPrecision::F32];

fn randv(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

/// `rows` random rows of `cols` values in `[-2, 2)`, each quantized to `dtype`.
fn random_rows(rng: &mut StdRng, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    if is_lattice(dtype) {
        return lattice_bytes(rng, dtype, rows * cols / dtype.block_size());
    }
    let wf = randv(rng, rows * cols);
    wf.chunks(cols)
        .flat_map(|r| quantize_row(dtype, r))
        .collect()
}

fn isas() -> Vec<Isa> {
    Isa::available()
}

/// The exact value each kernel should produce: weights dequantized, activations either f32
/// (float formats, the f32 path, and 16-bit requests for formats without a 16-bit path) or
/// dequantized from their 8- or 16-bit blocks, summed in f64. `tiled`: the matrix is in tiles
/// (Q6_K then has a 16-bit path).
#[allow(clippy::too_many_arguments)]
fn reference(
    dtype: DType,
    prec: ActPrecision,
    tiled: bool,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    let mut wf = vec![0f32; cols];
    let mut out = vec![0f64; n * rows];
    let mut xa = vec![ActBlock::default(); cols / 32];
    let mut x16 = vec![Act16Block::default(); cols / 32];
    // Every quantized format has a 16-bit path; Q6_K only in tiles.
    let has16 = dtype.is_quantized() && (dtype != DType::Q6_K || tiled);
    for t in 0..n {
        let xt = &x[t * cols..(t + 1) * cols];
        let xe: Vec<f32> = match prec {
            ActPrecision::Int8 if dtype.is_quantized() => {
                // Q4_K's activations take power-of-two scales (`matmul::pow2_acts`).
                if dtype == DType::Q4_K {
                    quantize_pow2_scalar(xt, &mut xa);
                } else {
                    quantize_scalar(xt, &mut xa);
                }
                xa.iter()
                    .flat_map(|b| b.qs.iter().map(move |&q| b.d * q as f32))
                    .collect()
            }
            ActPrecision::Int16 if has16 => {
                quantize16_scalar(xt, &mut x16);
                x16.iter()
                    .flat_map(|b| b.qs.iter().map(move |&q| b.d * q as f32))
                    .collect()
            }
            _ => xt.to_vec(),
        };
        let rb = dtype.row_bytes(cols);
        for r in 0..rows {
            dequantize_row(dtype, &w[r * rb..(r + 1) * rb], &mut wf);
            out[t * rows + r] = wf.iter().zip(&xe).map(|(a, b)| *a as f64 * *b as f64).sum();
        }
    }
    out
}

#[test]
fn matmul_matches_reference_for_every_format_and_path() {
    let mut rng = StdRng::seed_from_u64(7);
    for &dtype in &ALL {
        for &(rows, cols, n) in &[(1, 32, 1), (17, 64, 3), (40, 576, 5), (300, 96, 2)] {
            let cols = cols_for(dtype, cols);
            let w = random_rows(&mut rng, dtype, rows, cols);
            let x = randv(&mut rng, n * cols);
            let wm = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
            for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
                let want = reference(dtype, prec, false, &w, rows, cols, &x, n);
                let mut y = vec![0f32; n * rows];
                matmul(isa, prec, &wm, &x, n, &mut y, &mut MatmulScratch::default());
                for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
                    let tol = 1e-4 * (1.0 + b.abs()) * (cols as f64).sqrt();
                    assert!(
                        (a as f64 - b).abs() < tol,
                        "{dtype:?} {isa:?} {prec:?} {rows}x{cols} n={n} elem {i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

/// Fused products (Q/K/V, gate/up) give exactly the bits of separate calls, whatever the mix
/// of formats (each matrix takes its own path) and the number of activation rows.
#[test]
fn fused_matmuls_equal_separate_ones_bitwise() {
    let mut rng = StdRng::seed_from_u64(19);
    let cols = 256;
    let mats: Vec<(DType, usize, Vec<u8>)> = [
        (DType::Q4_1, 70),
        (DType::Q8_0, 33),
        (DType::Q4_K, 20),
        (DType::F16, 9),
    ]
    .into_iter()
    .map(|(dt, rows)| {
        let wf = randv(&mut rng, rows * cols);
        (
            dt,
            rows,
            wf.chunks(cols).flat_map(|r| quantize_row(dt, r)).collect(),
        )
    })
    .collect();
    for n in [1, 3, 6] {
        let x = randv(&mut rng, n * cols);
        for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
            let mut views: Vec<WeightMatrix<'_>> = mats
                .iter()
                .map(|(dt, rows, w)| WeightMatrix::new(*dt, *rows, cols, w).unwrap())
                .collect();
            // A tiled matrix in the mix (the Q4_1 one, cut to whole tiles).
            let q41 = WeightMatrix::new(DType::Q4_1, 64, cols, &mats[0].2[..64 * 160]).unwrap();
            let packed = PackedMatrix::pack(&q41).expect("packable");
            views[1] = packed.view();
            let mut outs: Vec<Vec<f32>> = views.iter().map(|w| vec![0f32; n * w.rows]).collect();
            {
                let mut ys: Vec<(WeightMatrix<'_>, &mut [f32])> = views
                    .iter()
                    .copied()
                    .zip(outs.iter_mut().map(|o| &mut o[..]))
                    .collect();
                ridge_kernels::matmul_many(
                    isa,
                    prec,
                    &mut ys,
                    &x,
                    n,
                    &mut MatmulScratch::default(),
                );
            }
            for (w, got) in views.iter().zip(&outs) {
                let mut want = vec![0f32; n * w.rows];
                matmul(
                    isa,
                    prec,
                    w,
                    &x,
                    n,
                    &mut want,
                    &mut MatmulScratch::default(),
                );
                assert_eq!(got, &want, "{:?} {isa:?} {prec:?} n={n}", w.dtype);
            }
        }
    }
}

#[test]
fn batch_rows_are_bitwise_independent_of_batch() {
    let mut rng = StdRng::seed_from_u64(11);
    for &dtype in &ALL {
        let (rows, cols) = (70, cols_for(dtype, 128).max(2 * dtype.block_size()));
        let w = random_rows(&mut rng, dtype, rows, cols);
        let wm = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let x = randv(&mut rng, 13 * cols);
        // 6 rows take the 4- and 2-row kernels, 7 rows the 4- and 3-row ones, 13 rows the
        // 4- and 1-row ones.
        for n in [6, 7, 13] {
            for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
                let mut all = vec![0f32; n * rows];
                matmul(
                    isa,
                    prec,
                    &wm,
                    &x[..n * cols],
                    n,
                    &mut all,
                    &mut MatmulScratch::default(),
                );
                for t in 0..n {
                    let mut one = vec![0f32; rows];
                    matmul(
                        isa,
                        prec,
                        &wm,
                        &x[t * cols..(t + 1) * cols],
                        1,
                        &mut one,
                        &mut MatmulScratch::default(),
                    );
                    assert_eq!(
                        &all[t * rows..(t + 1) * rows],
                        &one[..],
                        "{dtype:?} {isa:?} n={n}"
                    );
                }
            }
        }
    }
}

/// Random Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS, Q3_K, Q2_K, IQ3_S and IQ2_S matrices
/// packed into tiles of eight rows: every path (the tile
/// kernels, the unpacking fallback where a format has none and the scalar ISA) against the
/// f64 reference; the scalar path, which unpacks rows, gives exactly the stored layout's bits;
/// and each activation row's outputs are bitwise the same alone or in a batch of any size
/// (1..=17 takes every token-group kernel, chunk boundaries included, and an eight-token pass
/// both first over a chunk, at 256 bits, and after one, in 512-bit pairs); and every SIMD path
/// (AVX2, AVX-512 VNNI where the CPU has it) gives the same bits.
#[test]
fn packed_tiles_match_reference_and_are_batch_invariant() {
    let mut rng = StdRng::seed_from_u64(23);
    let shapes = [(8, 256), (40, 768), (64, 512), (272, 1536)];
    let formats = TILED.into_iter().chain([
        DType::MXFP4,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::Q3_K,
        DType::Q2_K,
        DType::IQ3_S,
        DType::IQ2_S,
    ]);
    for (dtype, (rows, cols)) in formats.flat_map(|d| shapes.map(|s| (d, s))) {
        let w = random_rows(&mut rng, dtype, rows, cols);
        let plain = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let packed = PackedMatrix::pack(&plain).expect("packable");
        let tiles = packed.view();
        let n = 17;
        let x = randv(&mut rng, n * cols);
        let mut simd: Vec<(Isa, ActPrecision, Vec<f32>)> = Vec::new();
        for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
            let want = reference(dtype, prec, true, &w, rows, cols, &x, n);
            let mut all = vec![0f32; n * rows];
            matmul(
                isa,
                prec,
                &tiles,
                &x,
                n,
                &mut all,
                &mut MatmulScratch::default(),
            );
            for (i, (&a, &b)) in all.iter().zip(&want).enumerate() {
                let tol = 1e-4 * (1.0 + b.abs()) * (cols as f64).sqrt();
                assert!(
                    (a as f64 - b).abs() < tol,
                    "tiles {dtype:?} {isa:?} {prec:?} {rows}x{cols} elem {i}: {a} vs {b}"
                );
            }
            // (Q6_K takes 16-bit blocks only in tiles; in rows that request runs in f32.)
            if isa == Isa::SCALAR && !(dtype == DType::Q6_K && prec == ActPrecision::Int16) {
                let mut y = vec![0f32; n * rows];
                matmul(
                    isa,
                    prec,
                    &plain,
                    &x,
                    n,
                    &mut y,
                    &mut MatmulScratch::default(),
                );
                assert_eq!(
                    all, y,
                    "scalar tiles vs rows {dtype:?} {prec:?} {rows}x{cols}"
                );
            }
            for m in 1..n {
                let mut some = vec![0f32; m * rows];
                let xm = &x[(n - m) * cols..];
                matmul(
                    isa,
                    prec,
                    &tiles,
                    xm,
                    m,
                    &mut some,
                    &mut MatmulScratch::default(),
                );
                assert_eq!(
                    &all[(n - m) * rows..],
                    &some[..],
                    "tiles {dtype:?} {isa:?} {prec:?} {rows}x{cols}: last {m} rows alone"
                );
            }
            if isa != Isa::SCALAR {
                simd.push((isa, prec, all));
            }
        }
        // The AVX-512 VNNI kernels compute the AVX2 kernels' exact integer sums and then the
        // same float steps: the same bits.
        for (i, (isa, prec, y)) in simd.iter().enumerate() {
            for (isa2, prec2, y2) in &simd[i + 1..] {
                if prec == prec2 {
                    assert_eq!(
                        y, y2,
                        "{dtype:?} {prec:?} {rows}x{cols}: {isa:?} vs {isa2:?}"
                    );
                }
            }
        }
    }
    let odd = WeightMatrix::new(DType::Q4_1, 12, 32, &[0u8; 12 * 20]).unwrap();
    assert!(
        PackedMatrix::pack(&odd).is_none(),
        "12 rows are not whole tiles"
    );
    let k = WeightMatrix::new(DType::Q5_K, 8, 256, &[0u8; 8 * 176]).unwrap();
    assert!(PackedMatrix::pack(&k).is_none(), "Q5_K has no tile layout");
}

/// Several whole blocks of 16 tokens (the AMX path's unit, where the CPU has it: each block
/// regrouped into its own activation panels) and a remainder, over chunks of several row pairs:
/// every SIMD path gives the same bits, and each token's outputs are those it gets alone.
#[test]
fn many_token_blocks_give_every_paths_bits() {
    let mut rng = StdRng::seed_from_u64(41);
    let (rows, cols, n) = (96, 768, 51);
    for dtype in TILED {
        let w = random_rows(&mut rng, dtype, rows, cols);
        let plain = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let packed = PackedMatrix::pack(&plain).expect("packable");
        let x = randv(&mut rng, n * cols);
        let want = reference(dtype, ActPrecision::Int8, true, &w, rows, cols, &x, n);
        let mut first: Option<Vec<f32>> = None;
        for isa in isas().into_iter().filter(|&i| i != Isa::SCALAR) {
            let mut y = vec![0f32; n * rows];
            let mut scratch = MatmulScratch::default();
            matmul(
                isa,
                ActPrecision::Int8,
                &packed.view(),
                &x,
                n,
                &mut y,
                &mut scratch,
            );
            for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
                let tol = 1e-4 * (1.0 + b.abs()) * (cols as f64).sqrt();
                assert!(
                    (a as f64 - b).abs() < tol,
                    "{dtype:?} {isa:?} elem {i}: {a} vs {b}"
                );
            }
            // Token 37 (in the third block of 16) alone.
            let mut one = vec![0f32; rows];
            let x1 = &x[37 * cols..38 * cols];
            matmul(
                isa,
                ActPrecision::Int8,
                &packed.view(),
                x1,
                1,
                &mut one,
                &mut scratch,
            );
            assert_eq!(
                &y[37 * rows..38 * rows],
                &one[..],
                "{dtype:?} {isa:?}: token 37 alone"
            );
            match &first {
                None => first = Some(y),
                Some(f) => assert_eq!(f, &y, "{dtype:?}: {isa:?} vs the first SIMD path"),
            }
        }
    }
}

#[test]
fn quantize_round_trip_error_is_bounded() {
    let mut rng = StdRng::seed_from_u64(3);
    let x = randv(&mut rng, 256);
    for &(dtype, tol) in &[
        (DType::F32, 0.0),
        (DType::F16, 2e-3),
        (DType::BF16, 1.6e-2),
        (DType::Q8_0, 2.0 / 127.0),
        (DType::Q4_0, 2.0 / 7.0),
        (DType::Q4_1, 4.0 / 15.0),
        // Largest magnitude maps to −16: the opposite end may clip by one step (2/16).
        (DType::Q5_0, 2.0 / 16.0),
        (DType::Q5_1, 4.0 / 31.0),
        // Half a sub-block step ((range/15 + d)/2), or the minimum's rounding (≤ dmin ≈ 2/63).
        (DType::Q4_K, 0.15),
        (DType::Q5_K, 0.08),
        // Half a step of 2/31 per 16 elements (scales rounded up, so nothing clips).
        (DType::Q6_K, 0.035),
        // The scale is the smallest power of two with 12·d ≥ max |x| (so d < max/6 = 1/3
        // here), and the widest gap between the values, 8d to 12d, rounds by up to 2d.
        (DType::MXFP4, 2.0 / 3.0),
    ] {
        let q = quantize_row(dtype, &x);
        assert_eq!(q.len(), dtype.row_bytes(x.len()));
        let mut back = vec![0f32; x.len()];
        dequantize_row(dtype, &q, &mut back);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= tol + 1e-6, "{dtype:?}: {a} vs {b}");
        }
    }
}

#[test]
fn activation_quantization_simd_equals_scalar() {
    let mut rng = StdRng::seed_from_u64(5);
    // 43 blocks: five groups of eight (the SIMD path's batches) and three alone.
    let mut x = randv(&mut rng, 32 * 43);
    x[0..32].fill(0.0); // an all-zero block
    x[40] = 127.5; // a tie case after scaling
    x[32 * 9..32 * 10].iter_mut().for_each(|v| *v *= 1e-30); // tiny scales (reciprocal large)
    x[32 * 41..32 * 42].fill(-0.0); // a zero block among the last ones
    let mut a = vec![ActBlock::default(); 43];
    let mut b = vec![ActBlock::default(); 43];
    quantize_scalar(&x, &mut a);
    ridge_kernels::act::quantize(Isa::detect(), &x, &mut b);
    for (p, q) in a.iter().zip(&b) {
        assert_eq!(p.d, q.d);
        assert_eq!(p.isum, q.isum);
        assert_eq!(p.qs, q.qs);
        assert_eq!(p.isum, p.qs.iter().map(|&v| v as i32).sum::<i32>());
        // The tile kernels' precomputed d·Σq: the product they used to round per use.
        assert_eq!(p.dsum.to_bits(), (p.d * p.isum as f32).to_bits());
        assert_eq!(p.dsum.to_bits(), q.dsum.to_bits());
        assert_eq!(p.off32, q.off32);
    }
}

/// Power-of-two activation scales (Q4_K's): every path gives the scalar quantizer's bits; each
/// scale is the smallest power of two at or above the block's own (clamped to
/// `POW2_MIN..=POW2_MAX`), so its quants stay within ±127 and every value is reconstructed
/// within half a step; the exponent field the tile kernels add is the scale's.
#[test]
fn power_of_two_activation_scales_are_tight_and_the_same_on_every_path() {
    let mut rng = StdRng::seed_from_u64(9);
    let mut x = randv(&mut rng, 32 * 43);
    x[0..32].fill(0.0); // an all-zero block
    x[40] = 127.5; // a tie case after scaling
    x[32 * 9..32 * 10].iter_mut().for_each(|v| *v *= 1e-30); // below the smallest scale
    x[32 * 11..32 * 12].iter_mut().for_each(|v| *v *= 1e33); // above the largest
    x[32 * 12..32 * 13].fill(0.0);
    x[32 * 12] = 127.0 * 0.25; // an ideal scale that is a power of two already
    x[32 * 41..32 * 42].fill(-0.0);
    let mut want = vec![ActBlock::default(); 43];
    quantize_pow2_scalar(&x, &mut want);
    for isa in isas() {
        let mut got = vec![ActBlock::default(); 43];
        ridge_kernels::act::quantize_pow2(isa, &x, &mut got);
        for (i, (p, q)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                (p.d.to_bits(), p.qs, p.isum, p.off32, p.dsum.to_bits(), p.se),
                (q.d.to_bits(), q.qs, q.isum, q.off32, q.dsum.to_bits(), q.se),
                "{isa:?} block {i}"
            );
        }
    }
    for (i, (b, xb)) in want.iter().zip(x.chunks(32)).enumerate() {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            assert_eq!((b.d, b.qs, b.se), (0.0, [0; 32], 0), "block {i}");
            continue;
        }
        let ideal = amax / 127.0;
        assert_eq!(b.d, pow2_scale(ideal));
        assert_eq!(b.d.to_bits() & 0x7F_FFFF, 0, "block {i}: a power of two");
        assert!((POW2_MIN..=POW2_MAX).contains(&b.d), "block {i}");
        if (POW2_MIN..POW2_MAX).contains(&ideal) {
            assert!(
                b.d >= ideal && b.d < 2.0 * ideal,
                "block {i}: {} for {ideal}",
                b.d
            );
        }
        assert_eq!(
            b.se,
            (((b.d.to_bits() >> 23) as i32) - 127) << 23,
            "block {i}"
        );
        for (v, &q) in xb.iter().zip(&b.qs) {
            assert!((-127..=127).contains(&q));
            if b.d >= ideal {
                let err = (*v as f64 - b.d as f64 * q as f64).abs();
                assert!(
                    err <= 0.5 * b.d as f64 * (1.0 + 1e-6),
                    "block {i}: {v} vs {q}"
                );
            }
        }
    }
    assert_eq!(want[12].d, 0.25, "an exact power of two is kept");
    assert_eq!(want[9].d, POW2_MIN);
    assert_eq!(want[11].d, POW2_MAX);
}

/// Q4_K tiles against power-of-two activations at the ends of their range: the 512-bit kernel's
/// exponent add stays bitwise the multiply of the other paths (results normal floats), with
/// sub-block scales of zero among the rows (the kernel's other branch).
#[test]
fn q4_k_tiles_take_the_extreme_activation_scales_bitwise() {
    let mut rng = StdRng::seed_from_u64(29);
    let (rows, cols, n) = (32, 512, 16);
    let mut w = random_rows(&mut rng, DType::Q4_K, rows, cols);
    // Zero the 6-bit scales of every super-block of rows 0..4 (bytes 4..16 of each block).
    for r in 0..4 {
        for sb in 0..cols / 256 {
            let o = (r * cols / 256 + sb) * 144;
            w[o + 4..o + 16].fill(0);
        }
    }
    let plain = WeightMatrix::new(DType::Q4_K, rows, cols, &w).unwrap();
    let packed = PackedMatrix::pack(&plain).expect("packable");
    let mut x = randv(&mut rng, n * cols);
    for (t, row) in x.chunks_mut(cols).enumerate() {
        let s = [1e-25f32, 1e-12, 1.0, 1e12, 1e30, 3e-17][t % 6];
        row.iter_mut().for_each(|v| *v *= s);
    }
    let mut outs: Vec<(Isa, Vec<f32>)> = Vec::new();
    for isa in isas() {
        let mut y = vec![0f32; n * rows];
        let tiles = packed.view();
        matmul(
            isa,
            ActPrecision::Int8,
            &tiles,
            &x,
            n,
            &mut y,
            &mut MatmulScratch::default(),
        );
        assert!(y.iter().all(|v| v.is_finite()), "{isa:?}");
        outs.push((isa, y));
    }
    let simd: Vec<&(Isa, Vec<f32>)> = outs.iter().filter(|(i, _)| *i != Isa::SCALAR).collect();
    for pair in simd.windows(2) {
        assert_eq!(pair[0].1, pair[1].1, "{:?} vs {:?}", pair[0].0, pair[1].0);
    }
}

#[test]
fn activation_quantization_16_bit_simd_equals_scalar_and_is_fine() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut x = randv(&mut rng, 32 * 40);
    x[0..32].fill(0.0); // an all-zero block
    x[40] = -1e-30; // a tiny value beside large ones
    x[64..96].fill(3.0); // a constant block: every quant is the maximum
    let mut a = vec![Act16Block::default(); 40];
    let mut b = vec![Act16Block::default(); 40];
    quantize16_scalar(&x, &mut a);
    ridge_kernels::act::quantize16(Isa::detect(), &x, &mut b);
    for (k, (p, q)) in a.iter().zip(&b).enumerate() {
        assert_eq!(p.d, q.d);
        assert_eq!(p.isum, q.isum);
        assert_eq!(p.qs, q.qs);
        assert_eq!(p.isum, p.qs.iter().map(|&v| v as i32).sum::<i32>());
        let amax = x[32 * k..32 * k + 32]
            .iter()
            .fold(0f32, |m, v| m.max(v.abs()));
        for (j, &v) in x[32 * k..32 * k + 32].iter().enumerate() {
            // Half a quantization step: amax / 65534 (plus f32 rounding).
            assert!(
                (p.d * p.qs[j] as f32 - v).abs() <= amax * 1.6e-5,
                "block {k} elem {j}"
            );
        }
    }
    assert!(a[2].qs.iter().all(|&q| q == 32767));
}

#[test]
fn paged_attention_matches_f64_reference() {
    let mut rng = StdRng::seed_from_u64(9);
    let shape = AttnShape {
        n_heads: 6,
        n_kv_heads: 2,
        head_dim: 16,
        scale: 0.25,
    };
    let kv_dim = shape.n_kv_heads * shape.head_dim;
    let (block, n_blocks, n_ctx) = (4, 8, 13);
    let k: Vec<f16> = (0..block * n_blocks * kv_dim)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let v: Vec<f16> = (0..block * n_blocks * kv_dim)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let table = [5u32, 2, 7, 0];
    let kvl = KvLayer::f16(&k, &v, kv_dim, block);
    let q = randv(&mut rng, shape.head_dim);
    for first in [0usize, 5] {
        for head in 0..shape.n_heads {
            let g = head / 3;
            let slot = |p: usize| table[p / block] as usize * block + p % block;
            // Head-major within a block: KV head g's rows of a block are consecutive.
            let hrow = |s: usize, g: usize| (s / block * 2 + g) * block + s % block;
            let s: Vec<f64> = (first..n_ctx)
                .map(|p| {
                    (0..16)
                        .map(|i| k[hrow(slot(p), g) * 16 + i].to_f64() * q[i] as f64)
                        .sum::<f64>()
                        * 0.25
                })
                .collect();
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            let want: Vec<f64> = (0..16)
                .map(|i| {
                    (first..n_ctx)
                        .zip(&e)
                        .map(|(p, w)| w / z * v[hrow(slot(p), g) * 16 + i].to_f64())
                        .sum()
                })
                .collect();
            let mut out = vec![0f32; 16];
            attend_head(&kvl, &table, first, n_ctx, &shape, head, &q, &mut out);
            for (a, b) in out.iter().zip(&want) {
                assert!(
                    (*a as f64 - b).abs() < 1e-5,
                    "reference head {head}: {a} vs {b}"
                );
            }
            // The grouped kernels, one head at a time (as decode runs them).
            for isa in isas() {
                attend_group(
                    isa, &kvl, &table, first, n_ctx, &shape, g, 1, &q, None, &mut out,
                );
                for (a, b) in out.iter().zip(&want) {
                    assert!(
                        (*a as f64 - b).abs() < 1e-5,
                        "{isa:?} head {head}: {a} vs {b}"
                    );
                }
            }
            // With a sink logit (gpt-oss), below, near and above the scores: the same values
            // scaled by z / (z + e^(sink − m)).
            for sink in [m as f32 - 3.0, m as f32, m as f32 + 2.0] {
                let shrink = z / (z + (sink as f64 - m).exp());
                for isa in isas() {
                    let sk = [sink];
                    attend_group(
                        isa,
                        &kvl,
                        &table,
                        first,
                        n_ctx,
                        &shape,
                        g,
                        1,
                        &q,
                        Some(&sk),
                        &mut out,
                    );
                    for (a, b) in out.iter().zip(&want) {
                        assert!(
                            (*a as f64 - b * shrink).abs() < 1e-5,
                            "{isa:?} head {head} sink {sink}: {a} vs {}",
                            b * shrink
                        );
                    }
                }
            }
        }
    }
}

/// Every group size and head width the kernels specialise (1–8 heads in registers, 8/16/32
/// dimensions per chunk) and the general loop (9 heads): a head computed inside its group
/// gives exactly the bits it gives alone (batch invariance: decode runs heads one at a time,
/// prefill whole groups), and both match the per-head reference.
#[test]
fn grouped_attention_is_bitwise_the_same_alone_or_in_its_group() {
    let mut rng = StdRng::seed_from_u64(23);
    for (n_heads, n_kv_heads, hd) in [
        (9, 3, 64),
        (8, 2, 32),
        (4, 1, 256),
        (2, 1, 48),
        (10, 2, 16),
        (12, 2, 8),
        (12, 2, 128),
        (14, 2, 64),
        (8, 1, 32),
        (9, 1, 32),
    ] {
        let shape = AttnShape {
            n_heads,
            n_kv_heads,
            head_dim: hd,
            scale: 0.3,
        };
        let gs = n_heads / n_kv_heads;
        let kv_dim = n_kv_heads * hd;
        let (block, n_blocks) = (8, 13);
        let mut mk = || -> Vec<f16> {
            (0..block * n_blocks * kv_dim)
                .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
                .collect()
        };
        let (k, v) = (mk(), mk());
        let kvl = KvLayer::f16(&k, &v, kv_dim, block);
        let table = [4u32, 1, 3, 0, 2, 12, 7, 9, 5, 11, 6, 10, 8];
        let q = randv(&mut rng, n_heads * hd);
        for (first, n_ctx) in [(0usize, 1usize), (0, 29), (7, 40), (20, 96)] {
            for g in 0..n_kv_heads {
                let qg = &q[g * gs * hd..(g + 1) * gs * hd];
                // The SIMD paths (256-bit, and 512-bit where the CPU has it) give one set of bits.
                let mut simd: Option<(Isa, Vec<f32>)> = None;
                for isa in isas() {
                    let mut group = vec![0f32; gs * hd];
                    attend_group(
                        isa, &kvl, &table, first, n_ctx, &shape, g, gs, qg, None, &mut group,
                    );
                    if isa != Isa::SCALAR {
                        match &simd {
                            Some((first_isa, bits)) => assert_eq!(
                                bits, &group,
                                "{isa:?} vs {first_isa:?}: gs {gs} hd {hd} ctx {first}..{n_ctx}"
                            ),
                            None => simd = Some((isa, group.clone())),
                        }
                    }
                    for h in 0..gs {
                        let qh = &qg[h * hd..(h + 1) * hd];
                        let mut alone = vec![0f32; hd];
                        attend_group(
                            isa, &kvl, &table, first, n_ctx, &shape, g, 1, qh, None, &mut alone,
                        );
                        assert_eq!(
                            &group[h * hd..(h + 1) * hd],
                            &alone[..],
                            "{isa:?} gs {gs} hd {hd}"
                        );
                        let mut want = vec![0f32; hd];
                        attend_head(
                            &kvl,
                            &table,
                            first,
                            n_ctx,
                            &shape,
                            g * gs + h,
                            qh,
                            &mut want,
                        );
                        for (a, b) in alone.iter().zip(&want) {
                            assert!((a - b).abs() < 1e-5, "{isa:?} gs {gs} hd {hd}: {a} vs {b}");
                        }
                    }
                }
            }
        }
    }
}

/// Dequantization of Q5_0, Q5_1, MXFP4, the k-quants (Q2_K..Q6_K), IQ4_NL/IQ4_XS and the
/// lattice and ternary formats (IQ1_S..IQ3_S, TQ1_0, TQ2_0: their codebooks too) against the `gguf` Python package's dequantizer on
/// random blocks (fixtures from `tools/reference/quant_fixtures.py`). Both evaluate the same
/// f32 operations (d·sc in f32, times q, minus dmin·m), so the values agree to the bit.
#[test]
fn dequantize_matches_gguf_reference_fixtures() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");
    for (name, dtype) in [
        ("q5_0", DType::Q5_0),
        ("q4_k", DType::Q4_K),
        ("q5_k", DType::Q5_K),
        ("q6_k", DType::Q6_K),
        ("q5_1", DType::Q5_1),
        ("mxfp4", DType::MXFP4),
        ("q2_k", DType::Q2_K),
        ("q3_k", DType::Q3_K),
        ("iq4_nl", DType::IQ4_NL),
        ("iq4_xs", DType::IQ4_XS),
        ("iq2_xxs", DType::IQ2_XXS),
        ("iq2_xs", DType::IQ2_XS),
        ("iq2_s", DType::IQ2_S),
        ("iq3_xxs", DType::IQ3_XXS),
        ("iq3_s", DType::IQ3_S),
        ("iq1_s", DType::IQ1_S),
        ("iq1_m", DType::IQ1_M),
        ("tq1_0", DType::TQ1_0),
        ("tq2_0", DType::TQ2_0),
    ] {
        let blocks = std::fs::read(format!("{dir}{name}.blocks")).unwrap();
        let want: Vec<f32> = std::fs::read(format!("{dir}{name}.f32"))
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(blocks.len(), dtype.row_bytes(want.len()), "{name}");
        let mut got = vec![0f32; want.len()];
        dequantize_row(dtype, &blocks, &mut got);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name} element {i}: {a} vs {b}");
        }
    }
}

/// Each SIMD dot product against the scalar reference, row by row, on random bytes (any bit
/// pattern is a valid block once the f16 scales are finite), both activation precisions.
#[test]
fn simd_dot_products_match_scalar_on_random_blocks() {
    let isa = Isa::detect();
    if isa == Isa::SCALAR {
        return;
    }
    let mut rng = StdRng::seed_from_u64(13);
    for dtype in [
        DType::Q5_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::MXFP4,
        DType::Q2_K,
        DType::Q3_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
    ] {
        let (rows, cols) = (9, 3 * 256);
        let mut w: Vec<u8> = (0..rows * dtype.row_bytes(cols))
            .map(|_| rng.random())
            .collect();
        // Finite f16 scales in [-1, 1] at each block's scale offsets.
        let scale_offsets: &[usize] = match dtype {
            DType::Q5_0 | DType::IQ4_NL | DType::IQ4_XS => &[0],
            DType::Q4_K | DType::Q5_K => &[0, 2],
            DType::Q2_K => &[80, 82],
            DType::Q3_K => &[108],
            DType::MXFP4 => &[],
            _ => &[208],
        };
        for b in w.chunks_exact_mut(dtype.block_bytes()) {
            if dtype == DType::MXFP4 {
                // An e8m0 scale between 2^-32 and 2^0.
                b[0] = rng.random_range(96..=128);
            }
            for &o in scale_offsets {
                let v = f16::from_f32(rng.random_range(-1.0f32..1.0));
                b[o..o + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let wm = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let x = randv(&mut rng, 3 * cols);
        for prec in PRECS {
            let mut want = vec![0f32; 3 * rows];
            let mut got = vec![0f32; 3 * rows];
            let mut s = MatmulScratch::default();
            matmul(Isa::SCALAR, prec, &wm, &x, 3, &mut want, &mut s);
            matmul(isa, prec, &wm, &x, 3, &mut got, &mut s);
            let scale = want.iter().fold(1f32, |a, v| a.max(v.abs()));
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * scale,
                    "{dtype:?} {prec:?} elem {i}: {a} vs {b}"
                );
            }
        }
    }
}

/// Attention over a Q8_0 cache: every path against the scalar reference on the same blocks, and
/// the result close to attention over the unquantized values (Q8_0 keeps ~2 decimal digits).
#[test]
fn q8_0_kv_attention_matches_reference_and_f16() {
    let mut rng = StdRng::seed_from_u64(77);
    let shape = AttnShape {
        n_heads: 6,
        n_kv_heads: 2,
        head_dim: 64,
        scale: 0.125,
    };
    let kv_dim = shape.n_kv_heads * shape.head_dim;
    let (block, n_blocks) = (16, 5);
    let n = block * n_blocks * kv_dim;
    let kf: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let vf: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let (k16, v16): (Vec<f16>, Vec<f16>) = (
        kf.iter().map(|&x| f16::from_f32(x)).collect(),
        vf.iter().map(|&x| f16::from_f32(x)).collect(),
    );
    let (k8, v8) = (
        quantize_row(DType::Q8_0, &kf),
        quantize_row(DType::Q8_0, &vf),
    );
    let q8 = KvLayer::q8_0(&k8, &v8, kv_dim, block);
    let f16l = KvLayer::f16(&k16, &v16, kv_dim, block);
    let table = [4u32, 1, 3, 0, 2];
    let hd = shape.head_dim;
    let q = randv(&mut rng, shape.n_heads * hd);
    for (first, n_ctx) in [(0usize, 1usize), (0, 50), (17, 80)] {
        for g in 0..shape.n_kv_heads {
            let qg = &q[g * 3 * hd..(g + 1) * 3 * hd];
            for isa in isas() {
                let mut got = vec![0f32; 3 * hd];
                attend_group(
                    isa, &q8, &table, first, n_ctx, &shape, g, 3, qg, None, &mut got,
                );
                for h in 0..3 {
                    let (mut want, mut exact) = (vec![0f32; hd], vec![0f32; hd]);
                    let head = g * 3 + h;
                    let qh = &qg[h * hd..(h + 1) * hd];
                    attend_head(&q8, &table, first, n_ctx, &shape, head, qh, &mut want);
                    attend_head(&f16l, &table, first, n_ctx, &shape, head, qh, &mut exact);
                    for ((a, b), e) in got[h * hd..(h + 1) * hd].iter().zip(&want).zip(&exact) {
                        assert!((a - b).abs() < 1e-5, "{isa:?} g{g} h{h}: {a} vs {b}");
                        assert!((a - e).abs() < 0.02, "q8 {a} vs f16 {e}");
                    }
                }
            }
        }
    }
}

/// A matrix's first rows (a draft model's head cut to the frequent end of its vocabulary) give
/// exactly the first outputs of the whole matrix, in the stored layout and in tiles; a cut
/// that splits a tile group or passes the end is refused.
#[test]
fn first_rows_give_the_leading_outputs_bitwise() {
    let mut rng = StdRng::seed_from_u64(41);
    let (rows, cols) = (72, 256);
    for dtype in [DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16] {
        let w = random_rows(&mut rng, dtype, rows, cols);
        let plain = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let packed = PackedMatrix::pack(&plain);
        let mut views = vec![(plain, 40)];
        if let Some(p) = &packed {
            views.push((p.view(), 48));
            assert!(p.view().first_rows(44).is_none(), "{dtype:?}: half a group");
        }
        assert!(plain.first_rows(rows + 1).is_none());
        let n = 3;
        let x = randv(&mut rng, n * cols);
        for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
            for &(m, cut) in &views {
                let mut all = vec![0f32; n * rows];
                matmul(
                    isa,
                    prec,
                    &m,
                    &x,
                    n,
                    &mut all,
                    &mut MatmulScratch::default(),
                );
                let head = m.first_rows(cut).expect("a whole number of groups");
                assert_eq!(head.rows, cut);
                let mut some = vec![0f32; n * cut];
                let mut s = MatmulScratch::default();
                matmul(isa, prec, &head, &x, n, &mut some, &mut s);
                for t in 0..n {
                    assert_eq!(
                        &some[t * cut..(t + 1) * cut],
                        &all[t * rows..t * rows + cut],
                        "{dtype:?} {:?} {isa:?} {prec:?} token {t}",
                        m.layout
                    );
                }
            }
        }
    }
}

/// Re-encoding a matrix (a draft model's, `--draft-quant q4_0`) gives exactly the tiles of its
/// rows dequantized and quantized again, whether it starts in the stored layout or in tiles.
#[test]
fn requantized_tiles_are_the_rows_quantized_again() {
    let mut rng = StdRng::seed_from_u64(43);
    let (rows, cols) = (24, 512);
    for from in [DType::Q8_0, DType::Q5_0, DType::Q6_K] {
        let w = random_rows(&mut rng, from, rows, cols);
        let plain = WeightMatrix::new(from, rows, cols, &w).unwrap();
        let rb = from.row_bytes(cols);
        let mut f = vec![0f32; cols];
        let want: Vec<u8> = w
            .chunks(rb)
            .flat_map(|r| {
                dequantize_row(from, r, &mut f);
                quantize_row(DType::Q4_0, &f)
            })
            .collect();
        let want = WeightMatrix::new(DType::Q4_0, rows, cols, &want).unwrap();
        let want = PackedMatrix::pack(&want).unwrap();
        let tiled = PackedMatrix::pack(&plain).unwrap();
        for src in [plain, tiled.view()] {
            let got = PackedMatrix::requantize(&src, DType::Q4_0).expect("Q4_0 has tiles");
            assert_eq!(got.view().dtype, DType::Q4_0);
            assert_eq!(
                got.view().data,
                want.view().data,
                "{from:?} {:?}",
                src.layout
            );
        }
    }
    // Formats without tiles are refused.
    let w = vec![0u8; 8 * DType::F16.row_bytes(64)];
    let m = WeightMatrix::new(DType::F16, 8, 64, &w).unwrap();
    assert!(PackedMatrix::requantize(&m, DType::F16).is_none());
}

/// A range of a matrix's rows (one expert of a mixture's stacked expert tensor) gives exactly
/// those outputs of the whole matrix, in the stored layout and in tiles; a range off the tile
/// groups or past the end is refused.
#[test]
fn row_ranges_give_their_outputs_bitwise() {
    let mut rng = StdRng::seed_from_u64(43);
    let (rows, cols) = (96, 256);
    for dtype in [DType::Q4_0, DType::Q4_K, DType::Q5_0, DType::F32] {
        let w = random_rows(&mut rng, dtype, rows, cols);
        let plain = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let packed = PackedMatrix::pack(&plain);
        let mut views = vec![(plain, 13usize, 21usize)];
        if let Some(p) = &packed {
            views.push((p.view(), 24, 32));
            assert!(
                p.view().row_range(4, 8).is_none(),
                "{dtype:?}: off the groups"
            );
            assert!(
                p.view().row_range(8, 12).is_none(),
                "{dtype:?}: half a group"
            );
        }
        assert!(plain.row_range(90, 7).is_none());
        assert!(plain.row_range(usize::MAX, 2).is_none());
        let n = 2;
        let x = randv(&mut rng, n * cols);
        for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
            for &(m, r0, len) in &views {
                let mut all = vec![0f32; n * rows];
                let mut s = MatmulScratch::default();
                matmul(isa, prec, &m, &x, n, &mut all, &mut s);
                let part = m.row_range(r0, len).expect("on the groups");
                let mut some = vec![0f32; n * len];
                matmul(isa, prec, &part, &x, n, &mut some, &mut s);
                for t in 0..n {
                    assert_eq!(
                        &some[t * len..(t + 1) * len],
                        &all[t * rows + r0..t * rows + r0 + len],
                        "{dtype:?} {:?} {isa:?} {prec:?} token {t}",
                        m.layout
                    );
                }
            }
        }
    }
}

/// Several products with their own activations in one loop (a mixture's experts) give each
/// product's outputs exactly as a lone `matmul` does: tiled and stored layouts, every path,
/// different token counts per product (none too).
/// Each matrix's tiled view where it packs, else the matrix itself.
fn tiled_views<'a>(
    plain: &[WeightMatrix<'a>],
    packed: &'a [Option<PackedMatrix>],
) -> Vec<WeightMatrix<'a>> {
    plain
        .iter()
        .zip(packed)
        .map(|(p, t)| t.as_ref().map_or(*p, |t| t.view()))
        .collect()
}

#[test]
fn matmul_each_is_bitwise_each_matmul() {
    let mut rng = StdRng::seed_from_u64(47);
    let cols = 256;
    for dtype in [
        DType::Q4_0,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q6_K,
        DType::F32,
    ] {
        let mats: Vec<(Vec<u8>, usize)> = [24, 40, 16]
            .into_iter()
            .map(|rows| (random_rows(&mut rng, dtype, rows, cols), rows))
            .collect();
        let plain: Vec<WeightMatrix<'_>> = mats
            .iter()
            .map(|(w, rows)| WeightMatrix::new(dtype, *rows, cols, w).unwrap())
            .collect();
        let packed: Vec<Option<PackedMatrix>> = plain.iter().map(PackedMatrix::pack).collect();
        let tiled = tiled_views(&plain, &packed);
        let ns = [3usize, 0, 9];
        let xs: Vec<Vec<f32>> = ns.iter().map(|&n| randv(&mut rng, n * cols)).collect();
        for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
            for ws in [&plain, &tiled] {
                let mut outs: Vec<Vec<f32>> = ws
                    .iter()
                    .zip(&ns)
                    .map(|(w, &n)| vec![0f32; n * w.rows])
                    .collect();
                let mut items: Vec<_> = ws
                    .iter()
                    .zip(&xs)
                    .zip(&ns)
                    .zip(outs.iter_mut())
                    .map(|(((w, x), &n), y)| (*w, &x[..], n, &mut y[..]))
                    .collect();
                matmul_each(isa, prec, &mut items, &mut MatmulScratch::default());
                for (i, (w, &n)) in ws.iter().zip(&ns).enumerate() {
                    let mut want = vec![0f32; n * w.rows];
                    let mut s = MatmulScratch::default();
                    matmul(isa, prec, w, &xs[i], n, &mut want, &mut s);
                    assert_eq!(
                        outs[i], want,
                        "{dtype:?} {:?} {isa:?} {prec:?} item {i}",
                        w.layout
                    );
                }
            }
        }
    }
}

/// Items of different formats reading one slice in `matmul_each` share a quantized copy only
/// where their activations take the same scales: a Q4_K item (power-of-two scales) beside a
/// Q4_0 or Q6_K one (each block's own scale), in either order, gives each product's outputs
/// exactly as a lone `matmul` does.
#[test]
fn matmul_each_keeps_power_of_two_scales_apart() {
    let mut rng = StdRng::seed_from_u64(59);
    let (cols, n) = (256, 3);
    let formats = [DType::Q4_0, DType::Q4_K, DType::Q6_K];
    let raw: Vec<Vec<u8>> = formats
        .iter()
        .map(|&d| random_rows(&mut rng, d, 16, cols))
        .collect();
    let mats: Vec<WeightMatrix<'_>> = formats
        .iter()
        .zip(&raw)
        .map(|(&d, w)| WeightMatrix::new(d, 16, cols, w).unwrap())
        .collect();
    let x = randv(&mut rng, n * cols);
    for order in [[0, 1, 2], [1, 0, 2], [2, 1, 0]] {
        for isa in isas() {
            let mut outs: Vec<Vec<f32>> = order.iter().map(|_| vec![0f32; n * 16]).collect();
            let mut items: Vec<_> = order
                .iter()
                .zip(outs.iter_mut())
                .map(|(&m, y)| (mats[m], &x[..], n, &mut y[..]))
                .collect();
            matmul_each(
                isa,
                ActPrecision::Int8,
                &mut items,
                &mut MatmulScratch::default(),
            );
            for (&m, got) in order.iter().zip(&outs) {
                let mut want = vec![0f32; n * 16];
                let mut scratch = MatmulScratch::default();
                matmul(
                    isa,
                    ActPrecision::Int8,
                    &mats[m],
                    &x,
                    n,
                    &mut want,
                    &mut scratch,
                );
                assert_eq!(got, &want, "{:?} {isa:?} order {order:?}", formats[m]);
            }
        }
    }
}

/// Products sharing one activation slice (an expert's gate and up; every expert's at one
/// token) share its quantized copy in `matmul_each`; stored and tiled layouts mixed in one call
/// (so a shared 16-bit copy must still carry its split bytes for the tiled ones) give each
/// product's outputs exactly as a lone `matmul` does.
#[test]
fn matmul_each_with_shared_activations_is_bitwise_each_matmul() {
    let mut rng = StdRng::seed_from_u64(53);
    let cols = 256;
    for dtype in [DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::F32] {
        let raw: Vec<Vec<u8>> = [16, 24]
            .map(|rows| random_rows(&mut rng, dtype, rows, cols))
            .into();
        let plain: Vec<WeightMatrix<'_>> = raw
            .iter()
            .zip([16, 24])
            .map(|(w, rows)| WeightMatrix::new(dtype, rows, cols, w).unwrap())
            .collect();
        let packed: Vec<Option<PackedMatrix>> = plain.iter().map(PackedMatrix::pack).collect();
        let tiled = tiled_views(&plain, &packed);
        let (n, m) = (2usize, 5usize);
        let (a, b) = (randv(&mut rng, n * cols), randv(&mut rng, m * cols));
        // (matrix, activations, tokens): a stored product first, then tiled ones on the same
        // slice, another slice between, and the first slice again.
        let plan: Vec<(WeightMatrix<'_>, &[f32], usize)> = vec![
            (plain[0], &a, n),
            (tiled[0], &a, n),
            (plain[1], &b, m),
            (tiled[1], &a, n),
            (plain[1], &a, n),
        ];
        for (isa, prec) in isas().into_iter().flat_map(|i| PRECS.map(|p| (i, p))) {
            let mut outs: Vec<Vec<f32>> = plan
                .iter()
                .map(|(w, _, k)| vec![0f32; k * w.rows])
                .collect();
            let mut items: Vec<_> = plan
                .iter()
                .zip(outs.iter_mut())
                .map(|((w, x, k), y)| (*w, *x, *k, &mut y[..]))
                .collect();
            matmul_each(isa, prec, &mut items, &mut MatmulScratch::default());
            for (i, (w, x, k)) in plan.iter().enumerate() {
                let mut want = vec![0f32; k * w.rows];
                matmul(
                    isa,
                    prec,
                    w,
                    x,
                    *k,
                    &mut want,
                    &mut MatmulScratch::default(),
                );
                assert_eq!(
                    outs[i], want,
                    "{dtype:?} {:?} {isa:?} {prec:?} item {i}",
                    w.layout
                );
            }
        }
    }
}

/// A prefill-sized input is quantized and gated across the pool in pieces: the same bits as
/// the scalar quantizers, and as the same path's gated activation run piece by piece on one
/// thread (sizes chosen so the pieces do not divide evenly; an input shorter than its output).
#[test]
fn pieces_across_the_pool_give_one_calls_bits() {
    let mut rng = StdRng::seed_from_u64(61);
    let nb = 3 * 1024 + 37;
    let x = randv(&mut rng, 32 * nb);
    for isa in isas() {
        let (mut a, mut b) = (vec![ActBlock::default(); nb], vec![ActBlock::default(); nb]);
        quantize_scalar(&x, &mut a);
        ridge_kernels::act::quantize(isa, &x, &mut b);
        assert!(
            a.iter()
                .zip(&b)
                .all(|(p, q)| p.d == q.d && p.qs == q.qs && p.isum == q.isum),
            "{isa:?}"
        );
        let (mut a16, mut b16) = (
            vec![Act16Block::default(); nb],
            vec![Act16Block::default(); nb],
        );
        quantize16_scalar(&x, &mut a16);
        ridge_kernels::act::quantize16(isa, &x, &mut b16);
        assert!(
            a16.iter()
                .zip(&b16)
                .all(|(p, q)| p.d == q.d && p.qs == q.qs && p.isum == q.isum),
            "{isa:?}"
        );
        // More output blocks than the input fills: only the filled ones are written.
        let mut c = vec![ActBlock::default(); nb + 5];
        ridge_kernels::act::quantize(isa, &x, &mut c);
        assert!(
            c[..nb]
                .iter()
                .zip(&a)
                .all(|(p, q)| p.qs == q.qs && p.d == q.d),
            "{isa:?}"
        );
        assert!(c[nb..].iter().all(|p| p.d == 0.0 && p.isum == 0), "{isa:?}");

        let n = 3 * (1 << 15) + 1000;
        let up = randv(&mut rng, n);
        let gate0: Vec<f32> = randv(&mut rng, n).iter().map(|v| 4.0 * v).collect();
        let mut whole = gate0.clone();
        ridge_kernels::ops::silu_mul(isa, &mut whole, &up);
        let mut bits = gate0.clone();
        for (g, u) in bits.chunks_mut(4096).zip(up.chunks(4096)) {
            ridge_kernels::ops::silu_mul(isa, g, u);
        }
        assert!(
            whole
                .iter()
                .zip(&bits)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "silu {isa:?}"
        );
        let mut whole = gate0.clone();
        ridge_kernels::ops::gelu_tanh_mul(isa, &mut whole, &up);
        let mut bits = gate0;
        for (g, u) in bits.chunks_mut(4096).zip(up.chunks(4096)) {
            ridge_kernels::ops::gelu_tanh_mul(isa, g, u);
        }
        assert!(
            whole
                .iter()
                .zip(&bits)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "gelu {isa:?}"
        );
    }
}

/// The low-bit formats in their stored rows (the lattice and ternary ones, Q2_K, Q3_K) give each
/// token the same bits alone or among many (a prefill chunk decodes a lattice row once for all
/// its tokens, a decode step per token), on every path, and stay near the f64 reference.
#[test]
fn stored_low_bit_rows_are_batch_invariant() {
    let mut rng = StdRng::seed_from_u64(29);
    let (rows, cols, n) = (11, 512, 19);
    let low_bit = ALL
        .into_iter()
        .filter(|&d| is_lattice(d) || matches!(d, DType::Q2_K | DType::Q3_K));
    for dtype in low_bit {
        let w = random_rows(&mut rng, dtype, rows, cols);
        let wm = WeightMatrix::new(dtype, rows, cols, &w).unwrap();
        let x = randv(&mut rng, n * cols);
        for isa in isas() {
            let mut all = vec![0f32; n * rows];
            let mut s = MatmulScratch::default();
            matmul(isa, ActPrecision::Int8, &wm, &x, n, &mut all, &mut s);
            let want = reference(dtype, ActPrecision::Int8, false, &w, rows, cols, &x, n);
            for (i, (&a, &b)) in all.iter().zip(&want).enumerate() {
                let tol = 1e-4 * (1.0 + b.abs()) * (cols as f64).sqrt();
                assert!(
                    (a as f64 - b).abs() < tol,
                    "{dtype:?} {isa:?} elem {i}: {a} vs {b}"
                );
            }
            for t in [0, 5, n - 1] {
                let mut one = vec![0f32; rows];
                let xt = &x[t * cols..(t + 1) * cols];
                matmul(isa, ActPrecision::Int8, &wm, xt, 1, &mut one, &mut s);
                assert_eq!(
                    &all[t * rows..(t + 1) * rows],
                    &one[..],
                    "{dtype:?} {isa:?}: token {t} alone"
                );
            }
        }
    }
}
