//! Decode attention in isolation: one query token against `CTX` cached positions, every head of
//! one layer, over several layers' caches so the K/V rows come from memory as they do between
//! weight streams. By default one task per head runs the whole context; `SPLIT=1` runs it as a
//! decode step does (`Model::attention_by_chunks`): one task per KV group and position chunk,
//! whole groups per task, partials merged after the loop.
//!
//! ```sh
//! cargo run --release -p ridge-kernels --example attn_bw -- THREADS CTX [HEADS KV_HEADS HEAD_DIM]
//! cargo run --release -p ridge-kernels --example attn_bw -- 2 80 9 3 64     # SmolLM2
//! ```
//!
//! Prints microseconds per layer (median of many passes). `LAYERS=N` sets how many layers'
//! caches the passes cycle through (default 64), `WARM=1` skips the eviction between passes
//! (with `LAYERS=1`: the kernel's arithmetic alone), `GROUPS=N` runs N query heads of a KV
//! group per task instead of one.

use half::f16;
use ridge_kernels::attention::{attend_group, AttnShape, KvLayer, ATTN_CHUNK};
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::Isa;
use std::time::Instant;

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let get = |i: usize, d: usize| a.get(i).copied().filter(|&v| v > 0).unwrap_or(d);
    let (threads, ctx) = (get(0, 2), get(1, 80));
    let (n_heads, n_kv, hd) = (get(2, 9), get(3, 3), get(4, 64));
    pool::init(threads);
    let isa = Isa::detect();
    let kv_dim = n_kv * hd;
    let bs = 16;
    let blocks = ctx.div_ceil(bs);
    // Many layers' worth of cache, so each pass reads rows the caches no longer hold.
    let layers = std::env::var("LAYERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let cache: Vec<(Vec<f16>, Vec<f16>)> = (0..layers)
        .map(|l| {
            let mk = |s: f32| {
                (0..blocks * bs * kv_dim)
                    .map(|i| f16::from_f32(((i as f32 + l as f32) * s).sin()))
                    .collect::<Vec<_>>()
            };
            (mk(0.37), mk(0.11))
        })
        .collect();
    let table: Vec<u32> = (0..blocks as u32).rev().collect();
    let shape = AttnShape {
        n_heads,
        n_kv_heads: n_kv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let q: Vec<f32> = (0..n_heads * hd).map(|i| (i as f32 * 0.3).cos()).collect();
    let mut out = vec![0f32; n_heads * hd];
    let group = n_heads / n_kv;
    // GROUPS=N: N query heads per task (a divisor of the group size; default 1).
    let per_task = std::env::var("GROUPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&g| g > 0 && group % g == 0)
        .unwrap_or(1);
    let split = std::env::var("SPLIT").is_ok_and(|v| v == "1");
    let mut parts = vec![
        0f32;
        n_kv * ctx.div_ceil(ATTN_CHUNK)
            * ridge_kernels::attention::partial_len(group, hd)
    ];
    let mut times = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for (k, v) in &cache {
            let layer = KvLayer::f16(k, v, kv_dim, bs);
            let o = SharedMut(out.as_mut_ptr());
            if split {
                let ks = ridge_kernels::attention::chunks(0, ctx);
                let nk = ks.len();
                let plen = ridge_kernels::attention::partial_len(group, hd);
                let pp = SharedMut(parts.as_mut_ptr());
                pool::parallel_for(n_kv * nk, |i| {
                    let (g, c) = (i / nk, i % nk);
                    // SAFETY: task i alone writes record i.
                    let part =
                        unsafe { std::slice::from_raw_parts_mut(pp.ptr().add(i * plen), plen) };
                    ridge_kernels::attention::attend_chunk(
                        isa,
                        &layer,
                        &table,
                        0,
                        ctx,
                        &shape,
                        g,
                        group,
                        &q[g * group * hd..(g + 1) * group * hd],
                        ks.start + c,
                        part,
                    );
                });
                for g in 0..n_kv {
                    ridge_kernels::attention::merge_chunks(
                        &parts[g * nk * plen..(g + 1) * nk * plen],
                        group,
                        hd,
                        None,
                        &mut out[g * group * hd..(g + 1) * group * hd],
                    );
                }
                continue;
            }
            pool::parallel_for(n_heads / per_task, |i| {
                let h = i * per_task;
                // SAFETY: task i alone writes the heads h..h + per_task of out.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(o.ptr().add(h * hd), per_task * hd) };
                attend_group(
                    isa,
                    &layer,
                    &table,
                    0,
                    ctx,
                    &shape,
                    h / group,
                    per_task,
                    &q[h * hd..(h + per_task) * hd],
                    None,
                    out,
                );
            });
        }
        times.push(t.elapsed().as_secs_f64() / layers as f64);
        // Evict: stream something larger than the last-level cache.
        if std::env::var("WARM").is_ok() {
            continue;
        }
        let junk: Vec<u8> = vec![1; 64 << 20];
        std::hint::black_box(junk.iter().map(|&b| b as u64).sum::<u64>());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "ctx {ctx}, {n_heads} heads / {n_kv} kv, head_dim {hd}, threads {threads}: median {:.2} us/layer, best {:.2}",
        times[times.len() / 2] * 1e6,
        times[0] * 1e6
    );
}
