//! Criterion benchmarks of the matrix products.
//!
//! - `matmul_*`: SmolLM2-135M's shapes, decode (one activation row) and prefill (64 rows), each
//!   weight format, int8 and f32 activations, scalar and SIMD (throughput in multiply-adds).
//! - `gemma_*`: Gemma 3 270M Q4_K_M's matrices in their stored formats (Q5_0 gate/up, Q4_K and
//!   Q6_K down, the Q8_0 262144 × 640 embedding/head), SIMD path, throughput in weight bytes
//!   streamed per second. The small matrices stay in cache between iterations (kernel speed);
//!   the head and the `stream_*` matrices (over 100 MB) stream from memory (bandwidth).
//!
//! `cargo bench -p ridge-kernels` (results in target/criterion); `RIDGE_BENCH_THREADS=N` sets
//! the kernel thread count (default: the pool's default, physical cores).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ridge_kernels::blocks::quantize_row;
use ridge_kernels::{matmul, pool, ActPrecision, DType, Isa, MatmulScratch, WeightMatrix};
use std::time::Duration;

fn init_threads() -> usize {
    match std::env::var("RIDGE_BENCH_THREADS").map(|v| v.parse::<usize>()) {
        Ok(Ok(n)) if n > 0 => pool::init(n),
        _ => pool::threads(),
    }
}

/// A `rows × cols` matrix in `dtype`, from a cheap deterministic pattern (quantized one row at
/// a time, then repeated: quantizing 100+ MB element by element would dominate the run).
fn weights(dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let distinct = rows.min(64);
    let q: Vec<Vec<u8>> = (0..distinct)
        .map(|r| {
            let row: Vec<f32> = (0..cols)
                .map(|i| (((r * 131 + i) * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            quantize_row(dtype, &row)
        })
        .collect();
    (0..rows)
        .flat_map(|r| q[r % distinct].iter().copied())
        .collect()
}

fn gemma(c: &mut Criterion) {
    let threads = init_threads();
    let isa = Isa::detect();
    let shapes: &[(&str, DType, usize, usize, &[usize])] = &[
        ("gate_up", DType::Q5_0, 2048, 640, &[1, 64]),
        ("down", DType::Q4_K, 640, 2048, &[1, 64]),
        ("down", DType::Q6_K, 640, 2048, &[1, 64]),
        ("attn_out", DType::Q4_K, 640, 1024, &[1]),
        ("head", DType::Q8_0, 262144, 640, &[1]),
        ("stream", DType::Q5_0, 65536, 2048, &[1]),
        ("stream", DType::Q4_K, 65536, 2048, &[1]),
        ("stream", DType::Q6_K, 65536, 2048, &[1]),
    ];
    for &(name, dtype, rows, cols, ns) in shapes {
        let w = weights(dtype, rows, cols);
        let wm = WeightMatrix::new(dtype, rows, cols, &w).expect("shape");
        let big = w.len() > 64 << 20;
        for &n in ns {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 31) % 200) as f32 / 100.0 - 1.0)
                .collect();
            let mut y = vec![0f32; n * rows];
            let mut g = c.benchmark_group(format!(
                "gemma_{name}_{dtype:?}_{rows}x{cols}_n{n}_t{threads}"
            ));
            g.throughput(Throughput::Bytes(w.len() as u64));
            if big {
                g.sample_size(10).measurement_time(Duration::from_secs(3));
            }
            for prec in [ActPrecision::Int8, ActPrecision::Int16, ActPrecision::F32] {
                let mut s = MatmulScratch::default();
                g.bench_function(
                    BenchmarkId::new(format!("{isa:?}"), format!("{prec:?}")),
                    |b| b.iter(|| matmul(isa, prec, &wm, &x, n, &mut y, &mut s)),
                );
            }
            g.finish();
        }
    }
}

fn bench(c: &mut Criterion) {
    init_threads();
    let (rows, cols) = (1536usize, 576usize);
    let wf: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut isas = vec![Isa::SCALAR];
    if Isa::detect() != Isa::SCALAR {
        isas.push(Isa::detect());
    }
    for dtype in [
        DType::Q4_1,
        DType::Q4_0,
        DType::Q8_0,
        DType::Q5_0,
        DType::F16,
    ] {
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
                for prec in [ActPrecision::Int8, ActPrecision::Int16, ActPrecision::F32] {
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

criterion_group!(benches, bench, gemma);
criterion_main!(benches);
