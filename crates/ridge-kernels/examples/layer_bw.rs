//! A decode step's matrix products in isolation: SmolLM2's layer sequence (Q/K/V fused, output
//! projection with 16-bit activations, gate/up fused, down with 16-bit activations) over 30
//! distinct layers of synthetic tiled Q4_1 weights, back to back, with nothing in between.
//! Compares with the same products inside the model (an instrumented decode step) to tell the
//! products' own cost from what the rest of the step does to them.
//!
//! ```sh
//! cargo run --release -p ridge-kernels --example layer_bw -- [THREADS] [LAYERS]
//! ```
//! Prints the median microseconds per layer of each product and of the whole sequence.

use ridge_kernels::{
    matmul, matmul_many, pool, ActPrecision, DType, Isa, MatmulScratch, PackedMatrix, WeightMatrix,
};
use std::time::Instant;

fn packed(rows: usize, cols: usize, seed: usize) -> PackedMatrix {
    let rb = DType::Q4_1.row_bytes(cols);
    let data: Vec<u8> = (0..rows * rb)
        .map(|i| ((i + seed) * 7 % 13) as u8)
        .collect();
    WeightMatrix::new(DType::Q4_1, rows, cols, &data)
        .and_then(|w| PackedMatrix::pack(&w))
        .expect("Q4_1 with rows a multiple of 8 tiles")
}

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let threads = a.first().copied().filter(|&t| t > 0).unwrap_or(2);
    let layers = a.get(1).copied().filter(|&l| l > 0).unwrap_or(30);
    pool::init(threads);
    let isa = Isa::detect();
    let (d, ff, kvd) = (576, 1536, 192);
    let w: Vec<[PackedMatrix; 6]> = (0..layers)
        .map(|l| {
            [
                packed(d, d, l),
                packed(kvd, d, l + 1),
                packed(kvd, d, l + 2),
                packed(d, d, l + 3),
                packed(2 * ff, d, l + 4),
                packed(d, ff, l + 5),
            ]
        })
        .collect();
    let x: Vec<f32> = (0..ff).map(|i| (i as f32 * 0.37).sin()).collect();
    let (mut q, mut k, mut v) = (vec![0f32; d], vec![0f32; kvd], vec![0f32; kvd]);
    let (mut o, mut gu, mut dn) = (vec![0f32; d], vec![0f32; 2 * ff], vec![0f32; d]);
    let mut s = MatmulScratch::default();
    let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..20 {
        let mut sums = [0f64; 5];
        let t_all = Instant::now();
        for l in &w {
            let t0 = Instant::now();
            let mut ys = [
                (l[0].view(), &mut q[..]),
                (l[1].view(), &mut k[..]),
                (l[2].view(), &mut v[..]),
            ];
            matmul_many(isa, ActPrecision::Int8, &mut ys, &x[..d], 1, &mut s);
            let t1 = Instant::now();
            matmul(
                isa,
                ActPrecision::Int16,
                &l[3].view(),
                &x[..d],
                1,
                &mut o,
                &mut s,
            );
            let t2 = Instant::now();
            matmul(
                isa,
                ActPrecision::Int8,
                &l[4].view(),
                &x[..d],
                1,
                &mut gu,
                &mut s,
            );
            let t3 = Instant::now();
            matmul(
                isa,
                ActPrecision::Int16,
                &l[5].view(),
                &x[..ff],
                1,
                &mut dn,
                &mut s,
            );
            let t4 = Instant::now();
            for (i, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4)].iter().enumerate() {
                sums[i] += (*b - *a).as_secs_f64();
            }
        }
        sums[4] = t_all.elapsed().as_secs_f64();
        for (ti, si) in t.iter_mut().zip(sums) {
            ti.push(si / layers as f64 * 1e6);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m: Vec<String> = t.iter_mut().map(|v| format!("{:.1}", med(v))).collect();
    println!(
        "threads {threads}, {layers} layers: us/layer qkv, o, gate/up, down, all: {}",
        m.join(" ")
    );
}
