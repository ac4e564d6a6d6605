//! Criterion benchmarks of the matrix products at SmolLM2-135M's shapes: decode (one activation
//! row) and prefill (64 rows), each weight format, int8 and f32 activations, scalar and SIMD.
//!
//! `cargo bench -p ridge-kernels` (results in target/criterion).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ridge_kernels::blocks::quantize_row;
use ridge_kernels::{matmul, ActPrecision, DType, Isa, MatmulScratch, WeightMatrix};

fn bench(c: &mut Criterion) {
    let (rows, cols) = (1536usize, 576usize);
    let wf: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut isas = vec![Isa::Scalar];
    if Isa::detect() != Isa::Scalar {
        isas.push(Isa::detect());
    }
    for dtype in [DType::Q4_1, DType::Q4_0, DType::Q8_0, DType::F16] {
        let w: Vec<u8> = wf
            .chunks(cols)
            .flat_map(|r| quantize_row(dtype, r))
            .collect();
        let wm = WeightMatrix::new(dtype, rows, cols, &w).expect("shape");
        for n in [1usize, 64] {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 31) % 200) as f32 / 100.0 - 1.0)
                .collect();
            let mut y = vec![0f32; n * rows];
            let mut g = c.benchmark_group(format!("matmul_{dtype:?}_{rows}x{cols}_n{n}"));
            g.throughput(Throughput::Elements((2 * rows * cols * n) as u64));
            for &isa in &isas {
                for prec in [ActPrecision::Int8, ActPrecision::F32] {
                    if !dtype.is_quantized() && prec == ActPrecision::F32 {
                        continue;
                    }
                    let mut s = MatmulScratch::default();
                    g.bench_function(
                        BenchmarkId::new(format!("{isa:?}"), format!("{prec:?}")),
                        |b| b.iter(|| matmul(isa, prec, &wm, &x, n, &mut y, &mut s)),
                    );
                }
            }
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
