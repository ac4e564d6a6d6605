//! Streaming rate of one matrix product, in isolation: how close a kernel gets to the memory
//! bandwidth (`ridge probe`) with one activation row (decode), or its arithmetic rate with many
//! (prefill). The weights are synthetic bytes in several copies of the matrix, far larger than
//! the caches when `n = 1`, so every call streams from memory as a decode step does.
//!
//! ```sh
//! cargo run --release -p ridge-kernels --example mv_bw -- THREADS FORMAT ROWS COLS [i8|i16|f32] [N]
//! cargo run --release -p ridge-kernels --example mv_bw -- 2 q8_0 262144 640      # gemma's head
//! cargo run --release -p ridge-kernels --example mv_bw -- 1 q4_1 576 1536 i16 64
//! ```
//!
//! Prints GB/s of weights read, microseconds per matrix and GMAC/s (best of several passes),
//! and the median pass's microseconds per matrix. `BUDGET=BYTES` sets the total size of the
//! copies (default 400 MB for one activation row, 4 MB for more); below the last-level cache
//! it measures cache bandwidth instead.
//! `TILES=1` in the environment repacks the matrix into tiles of eight rows first (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K).
//!
//! Single runs on a shared VM vary by 10–30%: compare medians of alternating runs.

use ridge_kernels::{
    matmul, pool, ActPrecision, DType, Isa, MatmulScratch, PackedMatrix, WeightMatrix,
};
use std::time::Instant;

fn parse() -> Result<(usize, DType, usize, usize, ActPrecision, usize), String> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, what: &str| -> Result<usize, String> {
        a.get(i)
            .ok_or(format!("missing {what}"))?
            .parse()
            .map_err(|_| format!("{what} must be a positive integer"))
    };
    let threads = num(0, "THREADS")?;
    let dtype = match a.get(1).and_then(|f| DType::from_name(f)) {
        Some(d) if d.is_quantized() => d,
        _ => return Err("FORMAT: a block format (q8_0, q4_k, q3_k, iq4_xs, iq3_s, …)".into()),
    };
    let (rows, cols) = (num(2, "ROWS")?, num(3, "COLS")?);
    if rows == 0 || cols == 0 || !cols.is_multiple_of(dtype.block_size()) {
        return Err(format!(
            "ROWS > 0; COLS a multiple of {}",
            dtype.block_size()
        ));
    }
    let prec = match a.get(4).map(String::as_str) {
        None | Some("i8") => ActPrecision::Int8,
        Some("i16") => ActPrecision::Int16,
        Some("f32") => ActPrecision::F32,
        Some(p) => return Err(format!("unknown activation precision `{p}` (i8, i16, f32)")),
    };
    let n = if a.len() > 5 { num(5, "N")?.max(1) } else { 1 };
    Ok((threads.max(1), dtype, rows, cols, prec, n))
}

fn main() {
    let (threads, dtype, rows, cols, prec, n) = match parse() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("mv_bw: {e}\nusage: mv_bw THREADS FORMAT ROWS COLS [i8|i16|f32] [N]");
            std::process::exit(1);
        }
    };
    pool::init(threads);
    let isa = Isa::detect();
    let rb = dtype.row_bytes(cols);
    // Decode streams ~400 MB of copies (far beyond the last-level cache); prefill-like calls
    // are compute-bound and need only a few.
    let budget = std::env::var("BUDGET")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(if n > 1 { 4_000_000 } else { 400_000_000 });
    let copies = (budget / (rows * rb)).max(1);
    // Arbitrary bytes, but every f16 scale field (and any other 16-bit word) stays finite:
    // bytes below 0x78 never form an f16 exponent of all ones.
    let data: Vec<u8> = (0..rows * rb * copies)
        .map(|i| (i * 7 % 13) as u8)
        .collect();
    let x: Vec<f32> = (0..cols * n).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut y = vec![0f32; rows * n];
    let mut scratch = MatmulScratch::default();
    let tiles = std::env::var("TILES").is_ok_and(|v| v == "1");
    let packed: Vec<PackedMatrix> = data
        .chunks_exact(rows * rb)
        .filter(|_| tiles)
        .filter_map(|c| WeightMatrix::new(dtype, rows, cols, c))
        .filter_map(|w| PackedMatrix::pack(&w))
        .collect();
    if tiles && packed.is_empty() {
        eprintln!(
            "mv_bw: this matrix cannot be tiled (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K or Q6_K; rows a multiple of 8)"
        );
        std::process::exit(1);
    }
    let mut passes = Vec::new();
    for _ in 0..if n > 1 { 30 } else { 15 } {
        let t = Instant::now();
        if tiles {
            for p in &packed {
                matmul(isa, prec, &p.view(), &x, n, &mut y, &mut scratch);
            }
        } else {
            for c in data.chunks_exact(rows * rb) {
                if let Some(w) = WeightMatrix::new(dtype, rows, cols, c) {
                    matmul(isa, prec, &w, &x, n, &mut y, &mut scratch);
                }
            }
        }
        passes.push(t.elapsed().as_secs_f64());
    }
    passes.sort_by(f64::total_cmp);
    let (best, median) = (passes[0], passes[passes.len() / 2]);
    let bytes = (rows * rb * copies) as f64;
    println!(
        "{dtype:?} {rows}x{cols} n={n} {prec:?} x{copies} threads {threads}: {:.2} GB/s, {:.1} us/matrix, {:.1} GMAC/s (median pass {:.1} us/matrix)",
        bytes / best / 1e9,
        best / copies as f64 * 1e6,
        (rows * cols * n * copies) as f64 / best / 1e9,
        median / copies as f64 * 1e6
    );
}
