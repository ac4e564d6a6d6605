//! `ridge roofline --model M --hardware NAME|local [--batch 1,8,64] [--context 0,4096]
//! [--prompt-len N] [--kv-dtype f16|q8_0] [--precision bf16|fp8|int8] [--price-per-hour USD]
//! [--json] [--plot FILE]`: the analytic floor of `ridge_roofline::analytic` for a GGUF model
//! (path or known name) or a Hugging Face `config.json`, on a built-in machine or this one.
//!
//! `ridge roofline plan --model M --hardware H --rate R --input-len I --output-len O
//! --ttft-slo MS --tpot-slo MS [--replica-threads T | --replicas-per-machine K]
//! [--efficiency F] [--max-batch B] [--price-per-hour USD] [--replicas N] [--json]`: how many
//! replicas that traffic needs, from the same floors (`ridge_roofline::plan`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ridge_roofline::analytic::Setup;
use ridge_roofline::chart::{self, RooflineChart};
use ridge_roofline::{Hardware, KvDtype, ModelSpec, OperatingPoint, Precision};

/// Arguments of `roofline`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    /// Size a fleet instead: `roofline plan`.
    #[command(subcommand)]
    plan: Option<Box<Sub>>,
    /// GGUF path or known name, or a Hugging Face config.json (or a folder holding one).
    #[arg(long, short, default_value = ridge_model::registry::DEFAULT_MODEL)]
    model: String,
    /// Machine: h100-sxm, h200, a100-80gb, b200, mi300x, or local (probed, about 2 s).
    #[arg(long, required = true)]
    hardware: Option<String>,
    /// Batch sizes, comma-separated: sequences decoded together.
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 8, 64])]
    batch: Vec<u64>,
    /// Context lengths, comma-separated: cached positions each sequence attends over.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 4096])]
    context: Vec<u64>,
    /// Prompt length of the TTFT floor (default: each row's context, at least 1).
    #[arg(long)]
    prompt_len: Option<u64>,
    #[command(flatten)]
    floor: FloorArgs,
    /// One JSON object per (batch, context) per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Draw the roofline chart into FILE (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Bytes per parameter of the formats `--weight-dtype` accepts: the checkpoint formats, and
/// every GGUF block format ridge computes with, at its stored size (`q4_k` 4.5 bits, `iq2_xxs`
/// 2.0625: scales included).
fn bytes_per_param(name: &str) -> Result<f64> {
    Ok(match name {
        "bf16" | "f16" => 2.0,
        "fp8" | "int8" => 1.0,
        "int4" => 0.5,
        "f32" => 4.0,
        other => match ridge_kernels::DType::from_name(other) {
            Some(d) => d.bits_per_weight() / 8.0,
            None => bail!(
                "--weight-dtype: unknown format `{other}` (expected bf16, f16, fp8, int8, int4, \
                 f32 or a GGUF block format such as q4_k, q3_k, iq4_xs, iq2_xxs)"
            ),
        },
    })
}

/// The config.json that `arg` names, if it names one (a `.json` file or a folder with one).
fn hf_config_path(arg: &str) -> Option<PathBuf> {
    let p = Path::new(arg);
    if p.is_dir() {
        let c = p.join("config.json");
        return c.is_file().then_some(c);
    }
    p.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        .then(|| p.to_path_buf())
}

fn load_spec(model: &str, weight_dtype: Option<&str>) -> Result<ModelSpec> {
    if let Some(path) = hf_config_path(model) {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let format = weight_dtype.unwrap_or("bf16");
        let spec = ModelSpec::from_hf_config(
            &text,
            &path.display().to_string(),
            bytes_per_param(format)?,
            format,
        )?;
        return Ok(spec);
    }
    if weight_dtype.is_some() {
        bail!("--weight-dtype applies to config.json models; a GGUF file's tensor index already says how its weights are stored");
    }
    let path = crate::models::resolve(model, false)?;
    let file = ridge_gguf::GgufFile::open(&path)?;
    Ok(ModelSpec::from_gguf(&file)?)
}

fn hardware(name: &str) -> Result<Hardware> {
    if name.eq_ignore_ascii_case("local") {
        return Ok(Hardware::probe_local(ridge_kernels::pool::threads()));
    }
    Hardware::builtin(name).with_context(|| {
        format!(
            "--hardware: unknown machine `{name}` (known: {}, local)",
            Hardware::builtin_names().join(", ")
        )
    })
}

/// Runs `roofline`.
pub fn main(a: Args) -> Result<()> {
    if let Some(Sub::Plan(p)) = a.plan.map(|b| *b) {
        return plan_main(p);
    }
    if a.batch.is_empty() || a.batch.contains(&0) {
        bail!("--batch: give batch sizes of at least 1");
    }
    if a.context.is_empty() {
        bail!("--context: give at least one context length");
    }
    if let Some(p) = a.plot.as_deref() {
        chart::ChartFormat::from_path(p)?;
    }
    let spec = load_spec(&a.model, a.floor.weight_dtype.as_deref())?;
    let setup = Setup {
        hardware: hardware(a.hardware.as_deref().unwrap_or_default())?,
        precision: a.floor.precision,
        kv_dtype: a.floor.kv_dtype,
        price_per_hour: a.floor.price_per_hour,
    };
    let mut points: Vec<OperatingPoint> = Vec::new();
    for &ctx in &a.context {
        for &b in &a.batch {
            let prompt = a.prompt_len.unwrap_or(ctx.max(1));
            points.push(setup.point(&spec, b, ctx, prompt)?);
        }
    }
    let hw = &setup.hardware;
    let peak = hw.peak_tflops(setup.precision).unwrap_or(0.0);
    if a.json {
        for p in &points {
            println!(
                "{}",
                serde_json::json!({
                    "model": spec.name,
                    "hardware": hw.name,
                    "batch": p.batch,
                    "context": p.context,
                    "prompt_len": p.prompt_len,
                    "tpot_min_ms": p.tpot_min_ms,
                    "ttft_min_ms": p.ttft_min_ms,
                    "weights_bytes": p.weights_bytes,
                    "total_weight_bytes": spec.total_weight_bytes,
                    "step_weight_bytes": spec.weight_bytes_for(p.batch),
                    "experts": spec.experts.map(|x| serde_json::json!({
                        "n_expert": x.n_expert,
                        "n_used": x.n_used,
                        "bytes_per_expert": x.bytes_per_expert,
                        "distinct_per_layer": x.expected_distinct(p.batch as usize),
                    })),
                    "kv_bytes_per_token": p.kv_bytes_per_token,
                    "kv_bytes": p.kv_bytes,
                    "step_bytes": p.step_bytes,
                    "step_flops": p.step_flops,
                    "params": spec.params,
                    "arithmetic_intensity": p.arithmetic_intensity,
                    "ridge_point": p.ridge_point,
                    "bound": p.bound.name(),
                    "memory_level": p.memory_level,
                    "prefill_bound": p.prefill_bound.name(),
                    "memory_time_ms": p.memory_time_ms,
                    "compute_time_ms": p.compute_time_ms,
                    "tokens_per_s": p.tokens_per_s,
                    "tokens_per_s_per_user": p.tokens_per_s_per_user,
                    "attained_tflops": p.attained_tflops,
                    "cost_per_mtok": p.cost_per_mtok,
                    "price_per_hour": setup.price_per_hour,
                    "memory_bandwidth_gbs": hw.memory_bandwidth_gbs,
                    "floor_bandwidth_gbs": p.floor_bandwidth_gbs,
                    "dram_bandwidth_gbs": hw.memory_bandwidth_gbs,
                    "llc_bandwidth_gbs": hw.llc.map(|c| c.read_bandwidth_gbs),
                    "llc_bytes": hw.llc.map(|c| c.bytes),
                    "peak_tflops": peak,
                    "precision": setup.precision.name(),
                    "kv_dtype": setup.kv_dtype.name(),
                })
            );
        }
    } else {
        print_table(&spec, &setup, &points);
    }
    if let Some(path) = a.plot.as_deref() {
        let c = RooflineChart {
            model: &spec,
            setup: &setup,
            points: &points,
        };
        chart::render(&c, path)?;
        if !a.json {
            println!("chart written to {}", path.display());
        }
    }
    Ok(())
}

fn print_table(spec: &ModelSpec, setup: &Setup, points: &[OperatingPoint]) {
    let hw = &setup.hardware;
    let peak = hw.peak_tflops(setup.precision).unwrap_or(0.0);
    println!(
        "{}: {:.1} MB of {} weights read per step, {:.1}M params, {} B of {} KV cache per token",
        spec.name,
        spec.weight_bytes as f64 / 1e6,
        spec.weights_format,
        spec.params as f64 / 1e6,
        setup.kv_bytes_per_token(spec),
        setup.kv_dtype.name()
    );
    if let Some(x) = spec.experts {
        println!(
            "mixture of experts: {} of {} experts per token; {:.1} MB of {:.1} MB read by one token, a batch of B reads E·(1 − (1 − k/E)^B) experts per layer",
            x.n_used,
            x.n_expert,
            spec.weight_bytes as f64 / 1e6,
            spec.total_weight_bytes as f64 / 1e6
        );
    }
    println!(
        "{} ({}): {:.1} GB/s, {:.1} TFLOP/s {}; ridge point {:.1} FLOP/byte",
        hw.description,
        hw.source,
        hw.memory_bandwidth_gbs,
        peak,
        setup.precision,
        points.first().map(|p| p.ridge_point).unwrap_or(0.0)
    );
    if let Some(c) = hw.llc {
        println!(
            "last-level cache: {:.0} MiB, read {:.1} GB/s; a step whose bytes fit {:.0} MiB of it \
             (bound \"LLC\") has its floor at that bandwidth, every other at {:.1} GB/s (DRAM)",
            c.bytes as f64 / (1 << 20) as f64,
            c.read_bandwidth_gbs,
            c.bytes as f64 * ridge_roofline::probe::LLC_FIT / (1 << 20) as f64,
            hw.memory_bandwidth_gbs
        );
    }
    println!(
        "{:>6} {:>8} {:>11} {:>11} {:>9} {:>8} {:>10} {:>11} {:>12} {:>7} {:>11} {:>9}",
        "batch",
        "context",
        "MB/step",
        "GFLOP/step",
        "FLOP/B",
        "bound",
        "TPOT ms",
        "tok/s/user",
        "tok/s total",
        "prompt",
        "TTFT ms",
        "$/Mtok"
    );
    for p in points {
        let cost = p
            .cost_per_mtok
            .map(|c| format!("{c:.4}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:>6} {:>8} {:>11.2} {:>11.3} {:>9.2} {:>8} {:>10.4} {:>11.1} {:>12.1} {:>7} {:>11.4} {:>9}",
            p.batch,
            p.context,
            p.step_bytes / 1e6,
            p.step_flops / 1e9,
            p.arithmetic_intensity,
            // Memory-bound from the last-level cache reads "LLC"; "memory" is DRAM.
            if p.memory_level == "LLC" && p.bound.name() == "memory" {
                "LLC"
            } else {
                p.bound.name()
            },
            p.tpot_min_ms,
            p.tokens_per_s_per_user,
            p.tokens_per_s,
            p.prompt_len,
            p.ttft_min_ms,
            cost
        );
    }
    println!("floors: datasheet peaks, zero overhead; TTFT is one prompt prefilled alone");
}

/// How the floors are computed: shared by `roofline` and `roofline plan`.
#[derive(clap::Args)]
struct FloorArgs {
    /// KV cache element format: f16 (2 bytes) or q8_0 (34 bytes per 32).
    #[arg(long, default_value = "f16")]
    kv_dtype: KvDtype,
    /// Whose peak bounds compute: bf16, fp8, or int8 (`local`: the probed int8 multiply-add
    /// peak of ridge's quantized kernels).
    #[arg(long, default_value = "bf16")]
    precision: Precision,
    /// Weight format of a config.json model: bf16, f16, fp8, int8, int4, f32, or a GGUF block
    /// format (q8_0, q4_k, q3_k, q2_k, iq4_xs, iq3_s, iq2_xxs, …) at its stored bits per weight.
    #[arg(long)]
    weight_dtype: Option<String>,
    /// Price of one machine in USD per hour, for cost per million tokens.
    #[arg(long)]
    price_per_hour: Option<f64>,
}

/// Subcommands of `roofline`.
#[derive(clap::Subcommand)]
enum Sub {
    /// How many replicas a traffic needs: the largest request rate one replica serves within
    /// the TTFT and TPOT SLOs (a queueing model on the analytic floors), the replicas and
    /// machines for `--rate`, and their cost per million tokens.
    Plan(PlanArgs),
}

/// Arguments of `roofline plan`.
#[derive(clap::Args)]
struct PlanArgs {
    /// GGUF path or known name, or a Hugging Face config.json (or a folder holding one).
    #[arg(long, short, default_value = ridge_model::registry::DEFAULT_MODEL)]
    model: String,
    /// Machine: h100-sxm, h200, a100-80gb, b200, mi300x, or local (probed, about 2 s, with
    /// the global --threads).
    #[arg(long)]
    hardware: String,
    /// Requests per second to serve (Poisson arrivals).
    #[arg(long)]
    rate: f64,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 512)]
    input_len: u64,
    /// Output tokens per request.
    #[arg(long, default_value_t = 128)]
    output_len: u64,
    /// Mean time-to-first-token target, ms.
    #[arg(long)]
    ttft_slo: f64,
    /// Mean time-per-output-token target, ms.
    #[arg(long)]
    tpot_slo: f64,
    /// `--hardware local` only: kernel threads per replica; the probed threads are split into
    /// threads / T replicas, each with its share of bandwidth and compute.
    #[arg(long, conflicts_with = "replicas_per_machine")]
    replica_threads: Option<usize>,
    /// Replicas sharing one machine, each with 1/K of its bandwidth and compute.
    #[arg(long)]
    replicas_per_machine: Option<u32>,
    /// Fraction of the floors an engine attains (0 < F ≤ 1; 1: plan on the floors, an upper
    /// bound on capacity).
    #[arg(long, default_value_t = 1.0)]
    efficiency: f64,
    /// Most requests one replica decodes at once (ridge serve's --max-seqs).
    #[arg(long, default_value_t = 64)]
    max_batch: u64,
    /// Evaluate this many replicas instead of sizing the fleet.
    #[arg(long)]
    replicas: Option<u64>,
    #[command(flatten)]
    floor: FloorArgs,
    /// One JSON object instead of the summary.
    #[arg(long)]
    json: bool,
}

fn plan_main(a: PlanArgs) -> Result<()> {
    use ridge_roofline::plan::{self, ReplicaShape, Slo, Traffic};
    let local = a.hardware.eq_ignore_ascii_case("local");
    if a.replica_threads.is_some() && !local {
        bail!("--replica-threads applies to --hardware local; give --replicas-per-machine for other machines");
    }
    if a.replica_threads == Some(0) {
        bail!("--replica-threads must be at least 1");
    }
    let spec = load_spec(&a.model, a.floor.weight_dtype.as_deref())?;
    let hw = hardware(&a.hardware)?;
    let threads = ridge_kernels::pool::threads();
    let per_machine = match (a.replica_threads, a.replicas_per_machine) {
        (Some(t), _) if t > threads => {
            bail!("--replica-threads {t}: this machine runs {threads} kernel threads (--threads)")
        }
        (Some(t), _) => (threads / t) as u32,
        (None, Some(k)) => k,
        (None, None) => 1,
    };
    let setup = Setup {
        hardware: hw,
        precision: a.floor.precision,
        kv_dtype: a.floor.kv_dtype,
        price_per_hour: a.floor.price_per_hour,
    };
    let shape = ReplicaShape {
        replicas_per_machine: per_machine,
        efficiency: a.efficiency,
        max_batch: a.max_batch,
    };
    let traffic = Traffic {
        rate: a.rate,
        input_len: a.input_len,
        output_len: a.output_len,
    };
    let slo = Slo {
        ttft_ms: a.ttft_slo,
        tpot_ms: a.tpot_slo,
    };
    let p = plan::plan(&setup, &spec, traffic, slo, shape, a.replicas)?;
    let r = &p.replica;
    let hw = &setup.hardware;
    let at = p.per_replica;
    if a.json {
        let point = |l: &ridge_roofline::plan::LoadPoint| {
            serde_json::json!({
                "rate": l.rate,
                "ttft_ms": l.ttft_ms,
                "tpot_ms": l.tpot_ms,
                "batch": l.batch,
                "prefill_share": l.prefill_share,
                "decode_share": l.decode_share,
                "utilisation": l.utilisation(),
            })
        };
        println!(
            "{}",
            serde_json::json!({
                "model": spec.name,
                "hardware": hw.name,
                "rate": a.rate,
                "input_len": a.input_len,
                "output_len": a.output_len,
                "ttft_slo_ms": a.ttft_slo,
                "tpot_slo_ms": a.tpot_slo,
                "efficiency": a.efficiency,
                "max_batch": a.max_batch,
                "replicas_per_machine": per_machine,
                "precision": setup.precision.name(),
                "replica_bandwidth_gbs": r.bandwidth_gbs,
                "replica_peak_tflops": r.peak_tflops,
                "prefill_ms": r.prefill_s * 1e3,
                "prefill_bound": r.prefill_bound,
                "decode_step_ms_batch1": r.decode_s[0] * 1e3,
                "ttft_limited_rate": p.ttft_rate,
                "tpot_limited_rate": p.tpot_rate,
                "saturation_rate": p.saturation_rate,
                "capacity_per_replica": p.capacity,
                "limit": p.limit.name(),
                "replicas": p.replicas,
                "machines": p.machines,
                "meets_slo": p.meets_slo,
                "per_replica": at.as_ref().map(point),
                "price_per_hour": a.floor.price_per_hour,
                "cost_per_hour": p.cost_per_hour,
                "cost_per_mtok_output": p.cost_per_mtok_output,
                "cost_per_mtok_total": p.cost_per_mtok_total,
            })
        );
        return Ok(());
    }
    println!(
        "{} on {} ({}), {} replica(s) per machine: {:.1} GB/s and {:.3} TFLOP/s each",
        spec.name, hw.description, hw.source, per_machine, r.bandwidth_gbs, r.peak_tflops
    );
    println!(
        "traffic: {} req/s of {} prompt + {} output tokens; SLOs (means): TTFT {} ms, TPOT {} ms; \
         efficiency {} of the floors; batch at most {}",
        a.rate, a.input_len, a.output_len, a.ttft_slo, a.tpot_slo, a.efficiency, a.max_batch
    );
    println!(
        "one replica: prefill {:.2} ms ({}-bound), decode step {:.3} ms at batch 1, {:.3} ms at batch {}",
        r.prefill_s * 1e3,
        r.prefill_bound,
        r.decode_s[0] * 1e3,
        r.decode_s.last().copied().unwrap_or(0.0) * 1e3,
        r.max_batch()
    );
    println!(
        "capacity per replica: {:.3} req/s, bound by {} (TTFT allows {:.3}, TPOT {:.3}, saturation {:.3})",
        p.capacity,
        match p.limit {
            ridge_roofline::plan::Limit::Ttft => "the TTFT SLO",
            ridge_roofline::plan::Limit::Tpot => "the TPOT SLO",
            ridge_roofline::plan::Limit::Saturation => "saturation",
        },
        p.ttft_rate,
        p.tpot_rate,
        p.saturation_rate
    );
    match at {
        Some(l) => println!(
            "replicas: {} on {} machine(s); each at {:.3} req/s: TTFT {:.1} ms, TPOT {:.2} ms, \
             batch {:.2}, busy {:.0}%{}",
            p.replicas,
            p.machines,
            l.rate,
            l.ttft_ms,
            l.tpot_ms,
            l.batch,
            100.0 * l.utilisation(),
            if p.meets_slo { "" } else { " — misses the SLOs" }
        ),
        None => println!(
            "replicas: {} on {} machine(s) cannot keep up with {} req/s (each would get {:.3}, past saturation)",
            p.replicas,
            p.machines,
            a.rate,
            a.rate / p.replicas as f64
        ),
    }
    if let (Some(h), Some(o), Some(t)) = (
        p.cost_per_hour,
        p.cost_per_mtok_output,
        p.cost_per_mtok_total,
    ) {
        println!(
            "cost: ${h:.2}/h → ${o:.4} per million output tokens, ${t:.4} per million tokens (prompt + output)"
        );
    }
    println!(
        "floors: datasheet (or probed) peaks divided by the efficiency; mean latencies, not tails"
    );
    Ok(())
}
