//! What one forward pass of `T` new tokens costs a single sequence, for `T` = 1..=MAX_T, after a
//! prompt of `P` positions: the price of a speculative verification step of `T − 1` guesses
//! against a plain decode step (`T` = 1).
//!
//! `cargo run --release -p ridge-model --example step_cost -- MODEL [P] [REPS] [THREADS]
//! [HEAD_ROWS] [MAX_T] [q4_0]` (HEAD_ROWS restricts the head as a draft model's may be; 0
//! keeps it whole; MAX_T, default 8, is the longest pass timed; `q4_0` re-encodes the wider
//! matrices as `--draft-quant q4_0` does) prints the median milliseconds per pass of each `T` (the passes alternate over `T`, so a
//! change in the machine's speed touches every `T` alike). `ONLY=1` times `T = MAX_T` alone,
//! for a profile of one pass length (`perf record -e cpu-clock`).
use ridge_model::{Batch, KvCache, Model, Workspace};
use std::time::Instant;

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("step_cost: {msg}");
    std::process::exit(1);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let Some(path) = a.get(1) else {
        fail("usage: step_cost MODEL [PROMPT_LEN] [REPS] [THREADS]")
    };
    let num = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (p, reps, threads) = (num(2, 256), num(3, 9), num(4, 2));
    ridge_kernels::pool::init(threads);
    let mut m = Model::load(path).unwrap_or_else(|e| fail(e));
    let max_t = num(6, 8).clamp(1, 64);
    if let Some(rows) = a.get(5).and_then(|s| s.parse().ok()).filter(|&r| r > 0) {
        m.restrict_head(rows);
    }
    if a.get(7).is_some_and(|s| s == "q4_0") {
        let saved = m.requantize(ridge_kernels::DType::Q4_0);
        println!("requantized: {:.1} MB less per step", saved as f64 / 1e6);
    }
    for t in m
        .gguf()
        .tensors()
        .iter()
        .filter(|t| !t.name.starts_with("blk."))
    {
        println!("{} {:?} {:.1} MB", t.name, t.ty, t.size as f64 / 1e6);
    }
    let mut kv = KvCache::new(m.config(), p + max_t + 16);
    let mut ws = Workspace::new();
    let seq = kv.add_seq();
    let prompt: Vec<u32> = (0..p as u32).map(|i| 100 + (i * 37) % 5000).collect();
    let mut b = Batch::new();
    b.push_seq(&prompt, 0, seq, true);
    m.forward(&b, &mut kv, &mut ws).unwrap_or_else(|e| fail(e));
    let mut ms = vec![Vec::new(); max_t];
    // `ONLY=1`: time MAX_T-token passes alone (to profile one pass length).
    let first_t = if std::env::var_os("ONLY").is_some() {
        max_t
    } else {
        1
    };
    for _ in 0..reps {
        for t in first_t..=max_t {
            b.clear();
            for j in 0..t {
                b.push(200 + j as u32, p + j, seq, true);
            }
            let s = Instant::now();
            m.forward(&b, &mut kv, &mut ws).unwrap_or_else(|e| fail(e));
            ms[t - 1].push(s.elapsed().as_secs_f64() * 1e3);
            kv.rewind(seq, p);
        }
    }
    for (t, v) in ms.iter_mut().enumerate().filter(|(_, v)| !v.is_empty()) {
        v.sort_by(f64::total_cmp);
        let med = v[v.len() / 2];
        println!(
            "T={} {:7.2} ms  ({:5.2} ms per token)",
            t + 1,
            med,
            med / (t + 1) as f64
        );
    }
}
