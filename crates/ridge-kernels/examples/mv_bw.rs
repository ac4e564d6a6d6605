use ridge_kernels::*;
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let threads: usize = a[1].parse().unwrap();
    let dt = match a[2].as_str() {
        "q8_0" => DType::Q8_0,
        "q4_1" => DType::Q4_1,
        "q5_0" => DType::Q5_0,
        _ => DType::Q4_K,
    };
    let rows: usize = a[3].parse().unwrap();
    let cols: usize = a[4].parse().unwrap();

    pool::init(threads);
    let isa = Isa::detect();
    let rb = dt.row_bytes(cols);
    // several copies so the total is far beyond the LLC
    let n: usize = a.get(6).map_or(1, |s| s.parse().unwrap());
    let copies = (if n > 1 { 4_000_000 } else { 400_000_000 } / (rows * rb)).max(1);
    let mut data = vec![0u8; rows * rb * copies];
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i * 7 % 13) as u8;
    }
    // keep f16 scales sane: set every block's first 2 bytes to 0x3c00 is format-specific; ignore (ints only)
    let x: Vec<f32> = (0..cols * n).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut y = vec![0f32; rows * n];
    let mut s = MatmulScratch::default();
    let prec = match a.get(5).map(|s| s.as_str()) {
        Some("f32") => ActPrecision::F32,
        Some("i16") => ActPrecision::Int16,
        _ => ActPrecision::Int8,
    };
    let mut best = f64::MAX;
    for _ in 0..if n > 1 { 30 } else { 5 } {
        let t = Instant::now();
        for c in 0..copies {
            let w = WeightMatrix::new(dt, rows, cols, &data[c * rows * rb..(c + 1) * rows * rb])
                .unwrap();
            matmul(isa, prec, &w, &x, n, &mut y, &mut s);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let bytes = (rows * rb * copies) as f64;
    println!(
        "{:?} {}x{} n={} x{} threads {}: {:.2} GB/s, {:.1} us/matrix, {:.1} GMAC/s",
        dt,
        rows,
        cols,
        n,
        copies,
        threads,
        bytes / best / 1e9,
        best / copies as f64 * 1e6,
        (rows * cols * n * copies) as f64 / best / 1e9
    );
}
