//! `ridge probe [--json] [--buffer-mib N] [--passes N] [--no-compute]`: this machine's roofs —
//! memory read bandwidth and arithmetic rate — as `ridge bench` and the roofline model use them.

use anyhow::{bail, Result};
use ridge_roofline::{probe, ProbeConfig};

/// Arguments of `probe` (threads come from the global `--threads`).
#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Size of the bandwidth buffer in MiB (keep it far above the last-level cache).
    #[arg(long, default_value_t = 1024)]
    buffer_mib: usize,
    /// Timed passes over the buffer (the best counts).
    #[arg(long, default_value_t = 10)]
    passes: usize,
    /// Skip the FMA and matmul probes (bandwidth only).
    #[arg(long)]
    no_compute: bool,
}

/// Runs `probe`.
pub fn main(a: Args) -> Result<()> {
    if a.buffer_mib == 0 {
        bail!("--buffer-mib must be at least 1");
    }
    if a.passes == 0 {
        bail!("--passes must be at least 1");
    }
    let Some(buffer_bytes) = a.buffer_mib.checked_mul(1 << 20) else {
        bail!("--buffer-mib {} is too large", a.buffer_mib);
    };
    let cfg = ProbeConfig {
        threads: ridge_kernels::pool::threads(),
        buffer_bytes,
        passes: a.passes,
        compute: !a.no_compute,
    };
    let r = probe::run(&cfg);
    let shape = probe::MatmulShape::default();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "read_bandwidth_gbs": r.read_bandwidth_gbs,
                "dram_bandwidth_gbs": r.read_bandwidth_gbs,
                "threads": r.threads,
                "buffer_mib": a.buffer_mib,
                "passes": r.passes,
                "fma_gflops": r.fma_gflops,
                "q4_1_matmul_gflops": r.q4_1_matmul_gflops,
                "q4_1_matmul_shape": [shape.batch, shape.rows, shape.cols],
                "int8_peak_gmacs": r.int8.map(|p| p.gmacs),
                "int8_peak_gops": r.int8.map(|p| 2.0 * p.gmacs),
                "int8_path": r.int8.map(|p| p.path),
                "bf16_peak_gflops": r.bf16_gflops,
                "int8_vector_peak_gmacs": r.int8_vector.map(|p| p.gmacs),
                "int8_vector_path": r.int8_vector.map(|p| p.path),
                "amx_bf16_peak_gflops": r.amx_bf16_gflops,
                "isa": r.isa,
                "probe_simd": r.probe_simd,
                "llc_bytes": r.llc.map(|c| c.bytes),
                "llc_read_bandwidth_gbs": r.llc.map(|c| c.read_bandwidth_gbs),
                "llc_bandwidth_gbs": r.llc.map(|c| c.read_bandwidth_gbs),
                "llc_fit_bytes": r.llc.map(|c| (c.bytes as f64 * probe::LLC_FIT) as u64),
            })
        );
    } else {
        println!(
            "read bandwidth: {:.1} GB/s ({} threads, {} MiB buffer, best of {} passes, {} loads)",
            r.read_bandwidth_gbs, r.threads, a.buffer_mib, r.passes, r.probe_simd
        );
        if let Some(c) = r.llc {
            println!(
                "last-level cache: {} MiB, read {:.1} GB/s (a step whose weights + K/V fit in {:.0} MiB reads from it)",
                c.bytes >> 20,
                c.read_bandwidth_gbs,
                c.bytes as f64 * probe::LLC_FIT / (1 << 20) as f64
            );
        }
        if let Some(f) = r.fma_gflops {
            println!(
                "f32 FMA peak:   {f:.1} GFLOP/s ({} threads, {})",
                r.threads, r.probe_simd
            );
        }
        if let Some(p) = r.int8 {
            println!(
                "int8 MAC peak:  {:.1} GOP/s ({:.1} G multiply-adds/s, {} threads, {}): the compute roof of quantized prefill and batched decode",
                2.0 * p.gmacs,
                p.gmacs,
                r.threads,
                p.path
            );
        }
        if let Some(p) = r.int8_vector {
            println!(
                "int8 MAC peak of the vector path: {:.1} GOP/s ({:.1} G multiply-adds/s, {}): steps of fewer than 16 tokens",
                2.0 * p.gmacs,
                p.gmacs,
                p.path
            );
        }
        if let Some(b) = r.amx_bf16_gflops {
            println!(
                "AMX bf16 peak:  {b:.1} GFLOP/s ({} threads; no ridge kernel uses it)",
                r.threads
            );
        }
        if let Some(b) = r.bf16_gflops {
            println!(
                "bf16 dot peak:  {b:.1} GFLOP/s ({} threads, avx512-bf16; no ridge kernel uses it yet)",
                r.threads
            );
        }
        if let Some(m) = r.q4_1_matmul_gflops {
            println!(
                "Q4_1 matmul:    {m:.1} GFLOP/s ({}×{} weights × {} rows, int8 activations, {}){}",
                shape.rows,
                shape.cols,
                shape.batch,
                r.isa,
                r.int8.map_or(String::new(), |p| format!(
                    ": {:.0}% of the int8 peak",
                    100.0 * m / (2.0 * p.gmacs)
                ))
            );
        }
    }
    Ok(())
}
