//! `ridge bench --model M [--prompt 512] [--gen 128] [--batch 1,16,64] [--reps 3] [--json]
//! [--bandwidth-gbs X]`: the offline benchmark of `ridge-bench`, judged against this machine's
//! probed read bandwidth (or a given one).

use anyhow::{bail, Result};
use ridge_bench::{roofline_inputs, BenchConfig, BenchResult};
use ridge_roofline::{probe, ProbeConfig};

/// Arguments of `bench` (threads come from the global `--threads`).
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name (default: smollm2-135m, pulled on first use).
    #[arg(long, short)]
    model: Option<String>,
    /// Prompt tokens per sequence (random ids).
    #[arg(long, default_value_t = 512)]
    prompt: usize,
    /// Output tokens per sequence: the first from prefill, then gen − 1 decode steps.
    #[arg(long, default_value_t = 128)]
    gen: usize,
    /// Batch sizes, comma-separated: sequences decoded together.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 16, 64])]
    batch: Vec<usize>,
    /// Repetitions per batch size; each metric is the median.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seed of the random prompt ids.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Memory read bandwidth in GB/s for the roofline (default: probe it first, about 1 s).
    #[arg(long)]
    bandwidth_gbs: Option<f64>,
    /// One JSON object per batch size per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `bench`.
pub fn main(a: Args) -> Result<()> {
    let cfg = BenchConfig {
        prompt_tokens: a.prompt,
        gen_tokens: a.gen,
        batch_sizes: a.batch.clone(),
        reps: a.reps,
        seed: a.seed,
    };
    cfg.validate()?;
    if let Some(bw) = a.bandwidth_gbs {
        if !(bw.is_finite() && bw > 0.0) {
            bail!("--bandwidth-gbs must be a positive number of GB/s, got {bw}");
        }
    }
    let loaded = crate::load::load(a.model.as_deref())?;
    let model = &loaded.model;
    cfg.validate_for(model.config())?;

    let threads = ridge_kernels::pool::threads();
    let (bw, probed) = match a.bandwidth_gbs {
        Some(bw) => (bw, false),
        None => (
            probe::run(&ProbeConfig::quick(threads)).read_bandwidth_gbs,
            true,
        ),
    };
    let inputs = roofline_inputs(model);
    let name = &model.config().name;
    if !a.json {
        println!(
            "{name}: {:.1} MB of weights read per step, {} B of KV cache per token; {threads} threads, {}; read bandwidth {bw:.1} GB/s ({})",
            inputs.weight_bytes as f64 / 1e6,
            inputs.kv_bytes_per_token,
            model.isa().name(),
            if probed { "probed" } else { "given" },
        );
        println!(
            "{:>5} {:>6} {:>5} {:>13} {:>10} {:>12} {:>9} {:>10} {:>10}",
            "batch",
            "prompt",
            "gen",
            "prefill tok/s",
            "TTFT ms",
            "decode tok/s",
            "TPOT ms",
            "floor ms",
            "efficiency"
        );
    }
    let print = |r: &BenchResult| {
        if a.json {
            println!(
                "{}",
                serde_json::json!({
                    "batch": r.batch,
                    "prompt_tokens": r.prompt_tokens,
                    "gen_tokens": r.gen_tokens,
                    "prefill_tok_s": r.prefill_tok_s,
                    "decode_tok_s": r.decode_tok_s,
                    "ttft_ms": r.ttft_ms,
                    "tpot_ms": r.tpot_ms,
                    "roofline_tpot_ms": r.roofline_tpot_ms,
                    "roofline_efficiency": r.roofline_efficiency,
                    "reps": r.reps,
                    "prefill_ms": r.prefill_ms,
                    "decode_ms": r.decode_ms,
                    "step_bytes": r.step_bytes,
                    "mean_decode_context": r.mean_decode_context,
                    "weight_bytes": inputs.weight_bytes,
                    "kv_bytes_per_token": inputs.kv_bytes_per_token,
                    "read_bandwidth_gbs": bw,
                    "bandwidth_probed": probed,
                    "threads": threads,
                    "isa": model.isa().name(),
                    "model": name,
                })
            );
        } else {
            println!(
                "{:>5} {:>6} {:>5} {:>13.1} {:>10.2} {:>12.1} {:>9.3} {:>10.3} {:>9.1}%",
                r.batch,
                r.prompt_tokens,
                r.gen_tokens,
                r.prefill_tok_s,
                r.ttft_ms,
                r.decode_tok_s,
                r.tpot_ms,
                r.roofline_tpot_ms,
                100.0 * r.roofline_efficiency
            );
        }
    };
    ridge_bench::run(model, &cfg, bw, print)?;
    Ok(())
}
