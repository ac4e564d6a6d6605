//! `ridge roofline` through the real binary: the issue's bar (SmolLM2-135M on an H100 at batch
//! 1, contexts 0 and 4096) against hand-computed values, the JSON contract, config.json models,
//! charts, and clean errors.

mod common;
use common::*;
use serde_json::Value;

fn lines(o: &std::process::Output) -> Vec<Value> {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

#[test]
fn smollm2_on_h100_meets_the_bar() {
    let path = smollm2();
    let p = path.to_str().unwrap();
    let o = run(&[
        "roofline",
        "--model",
        p,
        "--hardware",
        "h100-sxm",
        "--batch",
        "1",
        "--context",
        "0,4096",
        "--json",
    ]);
    let rows = lines(&o);
    assert_eq!(rows.len(), 2);
    // The weight bytes the analytic model reads from the GGUF tensor index are exactly the
    // bytes ridge's own forward pass reads per token.
    let model = ridge_model::Model::load(&path).unwrap();
    let w = model.weight_bytes_per_token() as f64;
    assert_eq!(w, 96_576_768.0, "SmolLM2-135M Q4_1 weight bytes");
    for row in &rows {
        assert_eq!(num(row, "weights_bytes"), w);
        // 2 (K, V) · 30 layers · 3 KV heads · 64 · 2 bytes.
        assert_eq!(num(row, "kv_bytes_per_token"), 23_040.0);
        assert_eq!(row["bound"], "memory");
        assert_eq!(num(row, "batch"), 1.0);
    }
    // By hand: ctx 0 → 96 576 768 B / 3.35e12 B/s = 0.028 828 886 ms;
    // ctx 4096 → (96 576 768 + 2·30·4096·3·64·2 = 94 371 840) = 190 948 608 B → 0.056 999 584 ms.
    let want = [(0.0, 0.028_828_886), (4096.0, 0.056_999_584)];
    for (row, (ctx, ms)) in rows.iter().zip(want) {
        assert_eq!(num(row, "context"), ctx);
        let got = num(row, "tpot_min_ms");
        assert!(
            (got - ms).abs() / ms < 0.03,
            "ctx {ctx}: {got} vs {ms} (3% bar)"
        );
        assert!(
            (got - ms).abs() / ms < 1e-6,
            "ctx {ctx}: {got} vs {ms} (exact)"
        );
        assert_eq!(
            num(row, "tpot_min_ms"),
            (w + 2.0 * 30.0 * ctx * 3.0 * 64.0 * 2.0) / 3.35e12 * 1e3
        );
        assert!((num(row, "tokens_per_s") - 1e3 / ms).abs() / (1e3 / ms) < 1e-6);
    }
    // Every contract field is there; no price → null cost.
    for k in [
        "batch",
        "context",
        "tpot_min_ms",
        "ttft_min_ms",
        "weights_bytes",
        "kv_bytes_per_token",
        "arithmetic_intensity",
        "bound",
        "tokens_per_s",
        "cost_per_mtok",
    ] {
        assert!(rows[0].get(k).is_some(), "{k} missing");
    }
    assert!(rows[0]["cost_per_mtok"].is_null());
}

#[test]
fn batching_price_and_q8_cache() {
    let path = smollm2();
    let o = run(&[
        "roofline",
        "--model",
        path.to_str().unwrap(),
        "--hardware",
        "a100-80gb",
        "--batch",
        "64",
        "--context",
        "1000",
        "--kv-dtype",
        "q8_0",
        "--price-per-hour",
        "1.8",
        "--prompt-len",
        "100",
        "--json",
    ]);
    let row = &lines(&o)[0];
    // q8_0 KV: 2 · 30 · 192 · 34/32 = 12 240 B/token; 64 sequences × 1000 positions.
    assert_eq!(num(row, "kv_bytes_per_token"), 12_240.0);
    let bytes = 96_576_768.0 + 64.0 * 1000.0 * 12_240.0;
    assert_eq!(num(row, "step_bytes"), bytes);
    let t = bytes / 2.039e12;
    assert!((num(row, "tpot_min_ms") - t * 1e3).abs() < 1e-12);
    // $1.80/h over 64/t tokens/s, per million.
    let cost = 1.8 / 3600.0 / (64.0 / t) * 1e6;
    assert!((num(row, "cost_per_mtok") - cost).abs() < 1e-12 * cost.max(1.0));
    // Prefill of 100 tokens: the body (134 479 872 params less the tied 49 152 × 576 head)
    // for every token, the head for the last one, 2 FLOPs each, plus 4 · 30 · 9 · 64 · 100 ·
    // 101 / 2 of attention, over 312 TFLOP/s — compute-bound.
    let head = 49_152.0 * 576.0;
    let flops = 2.0 * ((134_479_872.0 - head) * 100.0 + head) + 4.0 * 30.0 * 9.0 * 64.0 * 5050.0;
    assert!((num(row, "ttft_min_ms") - flops / 312e12 * 1e3).abs() < 1e-12);
    assert_eq!(row["prefill_bound"], "compute");
}

#[test]
fn hugging_face_config_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
            "tie_word_embeddings": true}"#,
    )
    .unwrap();
    let svg = dir.path().join("roof.svg");
    let o = run(&[
        "roofline",
        "--model",
        dir.path().to_str().unwrap(),
        "--hardware",
        "h200",
        "--batch",
        "1,8",
        "--context",
        "0",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let rows = lines(&o);
    // bf16: (134 479 872 params + 35 136 norm weights) · 2 bytes.
    assert_eq!(num(&rows[0], "weights_bytes"), 269_030_016.0);
    assert!((num(&rows[0], "tpot_min_ms") - 269_030_016.0 / 4.8e12 * 1e3).abs() < 1e-12);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg"), "not an SVG");
    for label in ["Roofline", "ridge point", "B=8", "context 0", "TPOT floor"] {
        assert!(text.contains(label), "{label} not drawn");
    }
    // int4 weights quarter the bytes of bf16 (exactly, up to rounding of the half byte).
    let o = run(&[
        "roofline",
        "--model",
        cfg.to_str().unwrap(),
        "--hardware",
        "h200",
        "--batch",
        "1",
        "--context",
        "0",
        "--weight-dtype",
        "int4",
        "--json",
    ]);
    assert_eq!(num(&lines(&o)[0], "weights_bytes"), 67_257_504.0);
    // A GGUF block format at its stored size: IQ4_XS is 4.25 bits, 17/16 of int4.
    let o = run(&[
        "roofline",
        "--model",
        cfg.to_str().unwrap(),
        "--hardware",
        "h200",
        "--batch",
        "1",
        "--context",
        "0",
        "--weight-dtype",
        "IQ4_XS",
        "--json",
    ]);
    assert_eq!(
        num(&lines(&o)[0], "weights_bytes"),
        67_257_504.0 * 17.0 / 16.0
    );
}

#[test]
fn table_and_png() {
    let path = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("roof.png");
    let o = run(&[
        "roofline",
        "--model",
        path.to_str().unwrap(),
        "--hardware",
        "b200",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("TPOT ms") && out.contains("ridge point"),
        "{out}"
    );
    // Default grid: batches 1, 8, 64 × contexts 0, 4096.
    let rows = out
        .lines()
        .filter(|l| l.contains(" memory ") || l.contains(" compute "))
        .count();
    assert_eq!(rows, 6, "{out}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

/// One `roofline --hardware local` row of SmolLM2 at batch 1, context 0, with `envs` set.
fn local_row(envs: &[(&str, &str)]) -> Value {
    let path = smollm2();
    let args = [
        "roofline",
        "--model",
        path.to_str().unwrap(),
        "--hardware",
        "local",
    ];
    let rest = ["--batch", "1", "--context", "0", "--json", "--threads", "2"];
    lines(&run_env(&[&args[..], &rest].concat(), envs))
        .into_iter()
        .next()
        .expect("one row")
}

/// The row's floor follows from its own probed facts, whatever the machine: the level is the
/// LLC exactly when the weights fit 75% of the cache the row names, the floor's bandwidth is
/// that level's, and the memory time is the weights over it. Returns the level.
fn check_local_row(row: &Value) -> String {
    const WEIGHTS: f64 = 96_576_768.0;
    assert_eq!(row["hardware"], "local");
    let dram = num(row, "dram_bandwidth_gbs");
    assert!(dram > 0.0 && num(row, "peak_tflops") > 0.0, "{row}");
    assert_eq!(num(row, "memory_bandwidth_gbs"), dram, "{row}");
    let fits = row["llc_bytes"]
        .as_f64()
        .is_some_and(|llc| WEIGHTS <= llc * 0.75);
    let (level, bw) = if fits {
        ("LLC", num(row, "llc_bandwidth_gbs"))
    } else {
        ("DRAM", dram)
    };
    assert_eq!(row["memory_level"], level, "{row}");
    assert_eq!(num(row, "floor_bandwidth_gbs"), bw, "{row}");
    let memory = WEIGHTS / (bw * 1e9) * 1e3;
    assert!((num(row, "memory_time_ms") - memory).abs() < 1e-9, "{row}");
    // The floor is the larger of the memory and compute times (on a fast-memory machine whose
    // cores are busy the probed compute peak can make even batch 1 compute-bound).
    let floor = memory.max(num(row, "compute_time_ms"));
    assert!((num(row, "tpot_min_ms") - floor).abs() < 1e-9, "{row}");
    level.to_string()
}

#[test]
fn local_hardware_is_probed() {
    // This machine as it is (or as CI's `RIDGE_LLC_BYTES` presents it).
    check_local_row(&local_row(&[]));
    // No cache known: the floor is DRAM's.
    let row = local_row(&[("RIDGE_LLC_BYTES", "0")]);
    assert!(row["llc_bytes"].is_null(), "{row}");
    assert_eq!(check_local_row(&row), "DRAM");
    // A 200 MiB cache holds SmolLM2's 97 MB: the floor is the cache's bandwidth.
    let row = local_row(&[("RIDGE_LLC_BYTES", "200M")]);
    assert_eq!(num(&row, "llc_bytes"), (200u64 << 20) as f64, "{row}");
    assert_eq!(check_local_row(&row), "LLC");
}

#[test]
fn errors_are_one_line() {
    let path = smollm2();
    let p = path.to_str().unwrap();
    assert_clean_failure(
        &run(&["roofline", "--model", p, "--hardware", "tpu-v9"]),
        "unknown machine `tpu-v9`",
    );
    assert_clean_failure(
        &run(&[
            "roofline",
            "--model",
            p,
            "--hardware",
            "a100-80gb",
            "--precision",
            "fp8",
        ]),
        "a100-80gb has no fp8",
    );
    assert_clean_failure(
        &run(&[
            "roofline",
            "--model",
            p,
            "--hardware",
            "h100-sxm",
            "--plot",
            "x.pdf",
        ]),
        ".svg or .png",
    );
    assert_clean_failure(
        &run(&[
            "roofline",
            "--model",
            p,
            "--hardware",
            "h100-sxm",
            "--batch",
            "0",
        ]),
        "--batch",
    );
    assert_clean_failure(
        &run(&[
            "roofline",
            "--model",
            "/nonexistent/config.json",
            "--hardware",
            "h100-sxm",
        ]),
        "config.json",
    );
    assert_clean_failure(
        &run(&[
            "roofline",
            "--model",
            p,
            "--hardware",
            "h100-sxm",
            "--weight-dtype",
            "int4",
        ]),
        "config.json models",
    );
}

/// A mixture of experts' floor counts the experts a step reads: one token's `k` of `E` (the
/// bytes ridge's forward pass reads, to the byte), a batch of `B` the expected distinct
/// `E · (1 − (1 − k/E)^B)` per layer; the file's total beside it.
#[test]
fn a_mixture_reads_its_chosen_experts() {
    use ridge_model::synthetic::{synthetic_model, SyntheticMoe, SyntheticSpec};
    let spec = SyntheticSpec {
        arch: ridge_model::Architecture::Qwen3Moe,
        dtype: ridge_kernels::DType::Q8_0,
        moe: Some(SyntheticMoe {
            n_expert: 32,
            n_used: 4,
            expert_ffn: 64,
            shared_ffn: None,
            router_scale: 1.0,
            dense_lead: 0,
            sigmoid: false,
            groups: None,
        }),
        ..SyntheticSpec::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("moe.gguf");
    std::fs::write(&path, synthetic_model(&spec)).unwrap();
    let p = path.to_str().unwrap();
    let args = ["roofline", "--model", p, "--hardware", "h100-sxm", "--json"];
    let rows = lines(&run(
        &[&args[..], &["--batch", "1,16", "--context", "0"]].concat()
    ));
    let model = ridge_model::Model::load(&path).unwrap();
    let one = model.weight_bytes_per_token() as f64;
    let expert = model.expert_bytes() as f64;
    let total = std::fs::metadata(&path).unwrap().len() as f64;
    assert_eq!(rows.len(), 2);
    assert_eq!(num(&rows[0], "weights_bytes"), one, "{}", rows[0]);
    assert_eq!(num(&rows[0], "step_weight_bytes"), one);
    assert_eq!(rows[0]["experts"]["n_expert"], 32);
    assert_eq!(rows[0]["experts"]["n_used"], 4);
    assert_eq!(num(&rows[0]["experts"], "bytes_per_expert"), expert);
    let distinct = 32.0 * (1.0 - (1.0 - 4.0 / 32.0f64).powi(16));
    let want = one + (distinct - 4.0) * expert;
    assert!(
        (num(&rows[1], "step_weight_bytes") - want).abs() < 1e-6,
        "{}",
        rows[1]
    );
    assert!((num(&rows[1]["experts"], "distinct_per_layer") - distinct).abs() < 1e-9);
    // The whole file's weights are more than one token reads and less than the file.
    let all = num(&rows[0], "total_weight_bytes");
    assert!(one < all && all < total, "{one} {all} {total}");

    // gpt-oss: its experts' biases (`…_exps.bias`, `[rows, E]`) are read `k` of `E` too, and
    // the floor still counts exactly what the forward pass reads (MXFP4 experts, sinks,
    // biases on attention and router).
    let spec = SyntheticSpec {
        arch: ridge_model::Architecture::GptOss,
        n_heads: 8,
        head_dim: Some(16),
        dtype: ridge_kernels::DType::Q8_0,
        expert_dtype: Some(ridge_kernels::DType::MXFP4),
        moe: Some(SyntheticMoe::new(16, 4, 96, None)),
        ..SyntheticSpec::default()
    };
    std::fs::write(&path, synthetic_model(&spec)).unwrap();
    let rows = lines(&run(
        &[&args[..], &["--batch", "1", "--context", "0"]].concat()
    ));
    let model = ridge_model::Model::load(&path).unwrap();
    assert_eq!(
        num(&rows[0], "weights_bytes"),
        model.weight_bytes_per_token() as f64,
        "{}",
        rows[0]
    );
    assert_eq!(
        num(&rows[0]["experts"], "bytes_per_expert"),
        model.expert_bytes() as f64
    );
}

/// The mixtures people run, from their published config.json (tests/data/configs): active
/// parameters per token counted by hand from each config — attention `d·H·hd + 2·d·KV·hd +
/// H·hd·d`, router `E·d`, `k` experts of `3·d·f` per layer, plus the head `vocab·d` — and the
/// totals (all `E` experts, plus the embedding table the floor does not read) within 2% of
/// the parameter counts the model cards publish. gpt-oss's experts count at MXFP4's 17 bytes
/// per 32 weights, as its config's quantization says.
#[test]
fn named_mixtures_from_their_configs() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/configs");
    // (folder, active params, vocab·d, published total params, MXFP4 experts)
    let cases = [
        // 48·(18 874 368 + 262 144 + 8·4 718 592) + 151 936·2048
        (
            "qwen3-30b-a3b",
            3_041_656_832u64,
            311_164_928u64,
            30.5e9,
            false,
        ),
        // 24·(26 542 080 + 92 160 + 4·24 883 200) + 201 088·2880
        ("gpt-oss-20b", 3_607_142_400, 579_133_440, 20.9e9, true),
        // 36·(26 542 080 + 368 640 + 4·24 883 200) + 201 088·2880
        ("gpt-oss-120b", 5_131_100_160, 579_133_440, 116.8e9, true),
        // 32·(41 943 040 + 32 768 + 2·176 160 768) + 32 000·4096
        ("mixtral-8x7b", 12_748_587_008, 131_072_000, 46.7e9, false),
    ];
    for (name, active, embd, published, mxfp4) in cases {
        let cfg = format!("{dir}/{name}/config.json");
        let args = [
            "roofline",
            "--model",
            &cfg,
            "--hardware",
            "h100-sxm",
            "--json",
        ];
        let rows = lines(&run(
            &[&args[..], &["--batch", "1,16", "--context", "0"]].concat()
        ));
        let r = &rows[0];
        assert_eq!(num(r, "params"), active as f64, "{name}: {r}");
        let (e, k) = (num(&r["experts"], "n_expert"), num(&r["experts"], "n_used"));
        // Bytes: bf16 for all but MXFP4 experts; the total over all E experts.
        let per_expert = num(&r["experts"], "bytes_per_expert");
        let (one, all) = (num(r, "weights_bytes"), num(r, "total_weight_bytes"));
        assert!(
            (all - one - (e - k) * per_expert).abs() < 2.0,
            "{name}: {r}"
        );
        let expert_bpp = if mxfp4 { 17.0 / 32.0 } else { 2.0 };
        let expert_params = per_expert / expert_bpp * e;
        let dense_params = (one - k * per_expert) / 2.0;
        let total = expert_params + dense_params + embd as f64;
        assert!(
            (total / published - 1.0).abs() < 0.02,
            "{name}: {total:.4e} parameters vs {published:.4e} published"
        );
        // Batch 16 reads the expected distinct experts.
        let distinct = e * (1.0 - (1.0 - k / e).powi(16));
        let want = one + (distinct - k) * per_expert;
        assert!(
            (num(&rows[1], "step_weight_bytes") - want).abs() < 1.0,
            "{name}"
        );
    }
}

/// The latent-attention models from their config.json: GLM-4.7-Flash, DeepSeek-V3, Kimi K2.
/// Totals (all experts, embedding table included) within 2% of the published parameter
/// counts (30B, 671B, 1.04T), and the cache is the latent's size — one row of
/// `kv_lora_rank + qk_rope_head_dim` = 576 values per token and layer — not full K/V (which
/// for DeepSeek-V3 would be 2 · 128 heads · 192 / 128 values, 85× more).
#[test]
fn latent_attention_models_from_their_configs() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/configs");
    // (folder, layers, published total params, vocab·d)
    let cases = [
        ("glm-4.7-flash", 47u64, 30e9, 154_880.0 * 2048.0),
        ("deepseek-v3", 61, 671e9, 129_280.0 * 7168.0),
        ("kimi-k2", 61, 1.04e12, 163_840.0 * 7168.0),
    ];
    for (name, layers, published, embd) in cases {
        let cfg = format!("{dir}/{name}/config.json");
        let args = [
            "roofline",
            "--model",
            &cfg,
            "--hardware",
            "h100-sxm",
            "--json",
            "--batch",
            "1",
            "--context",
            "0,4096",
        ];
        let rows = lines(&run(&args));
        let (r0, r1) = (&rows[0], &rows[1]);
        let (e, k) = (
            num(&r0["experts"], "n_expert"),
            num(&r0["experts"], "n_used"),
        );
        let per_expert = num(&r0["experts"], "bytes_per_expert");
        let (one, all) = (num(r0, "weights_bytes"), num(r0, "total_weight_bytes"));
        assert!(
            (all - one - (e - k) * per_expert).abs() < 2.0,
            "{name}: {r0}"
        );
        let total = all / 2.0 + embd;
        assert!(
            (total / published - 1.0).abs() < 0.02,
            "{name}: {total:.4e} parameters vs {published:.4e} published"
        );
        // 4096 positions of one latent row (576 f16 values) per layer.
        let kv = num(r1, "step_bytes") - num(r0, "step_bytes");
        let want = 4096.0 * layers as f64 * 576.0 * 2.0;
        assert!(
            (kv / want - 1.0).abs() < 1e-9,
            "{name}: {kv} KV bytes vs {want}"
        );
    }
}

/// `roofline plan`: SmolLM2 on an H100 at a rate one replica cannot serve within a tight
/// TTFT SLO. The plan's step times are exactly `roofline`'s floors for the same shapes, the
/// fleet is `⌈rate / capacity⌉` replicas, each at its share of the rate within the SLOs, and
/// the cost is the machines' price over the tokens served.
#[test]
fn plan_sizes_a_fleet_from_the_same_floors() {
    let path = smollm2();
    let p = path.to_str().unwrap();
    let (rate, input, output) = (4000.0, 1024.0, 256.0);
    let plan_args = |extra: &[&'static str]| -> Vec<String> {
        let mut args = vec![
            "roofline",
            "plan",
            "--model",
            p,
            "--hardware",
            "h100-sxm",
            "--rate",
            "4000",
            "--input-len",
            "1024",
            "--output-len",
            "256",
            "--ttft-slo",
            "5",
            "--tpot-slo",
            "1",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect()
    };
    let run_plan = |extra: &[&'static str]| {
        let a = plan_args(extra);
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let rows = lines(&run_plan(&["--price-per-hour", "3", "--json"]));
    assert_eq!(rows.len(), 1);
    let v = &rows[0];
    for key in [
        "prefill_ms",
        "decode_step_ms_batch1",
        "capacity_per_replica",
        "ttft_limited_rate",
        "tpot_limited_rate",
        "saturation_rate",
        "replicas",
        "machines",
        "cost_per_mtok_output",
        "cost_per_mtok_total",
    ] {
        assert!(num(v, key) > 0.0, "{key} in {v}");
    }
    assert_eq!(v["hardware"], "h100-sxm");
    assert_eq!(v["meets_slo"], true, "{v}");
    // The step times are `roofline`'s floors: prefill of 1024 tokens, decode at batch 1 at
    // the mean decode context 1024 + 256 / 2.
    let floor = lines(&run(&[
        "roofline",
        "--model",
        p,
        "--hardware",
        "h100-sxm",
        "--batch",
        "1",
        "--context",
        "1152",
        "--prompt-len",
        "1024",
        "--json",
    ]));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(
        close(num(v, "prefill_ms"), num(&floor[0], "ttft_min_ms")),
        "{v}"
    );
    assert!(
        close(
            num(v, "decode_step_ms_batch1"),
            num(&floor[0], "tpot_min_ms")
        ),
        "{v}"
    );
    // Capacity: the smallest of the three limits; replicas cover the rate.
    let cap = num(v, "capacity_per_replica");
    let smallest = ["ttft_limited_rate", "tpot_limited_rate", "saturation_rate"]
        .iter()
        .map(|k| num(v, k))
        .fold(f64::INFINITY, f64::min);
    assert!(close(cap, smallest));
    let replicas = num(v, "replicas");
    assert_eq!(replicas, (rate / cap * (1.0 - 1e-9)).ceil());
    assert!(replicas >= 2.0, "this rate needs more than one H100: {v}");
    assert_eq!(num(v, "machines"), replicas);
    let each = &v["per_replica"];
    assert!(close(num(each, "rate"), rate / replicas));
    assert!(
        num(each, "ttft_ms") <= 5.0 && num(each, "tpot_ms") <= 1.0,
        "{each}"
    );
    assert!(num(each, "utilisation") <= 1.0 + 1e-9);
    // $3 per machine-hour.
    let per_hour = 3.0 * replicas;
    assert!(close(num(v, "cost_per_hour"), per_hour));
    assert!(close(
        num(v, "cost_per_mtok_output"),
        per_hour / (3600.0 * rate * output) * 1e6
    ));
    assert!(close(
        num(v, "cost_per_mtok_total"),
        per_hour / (3600.0 * rate * (input + output)) * 1e6
    ));

    // Two replicas per machine: each gets half the bandwidth; the same rate needs more
    // replicas on fewer or as many machines.
    let half = &lines(&run_plan(&["--replicas-per-machine", "2", "--json"]))[0];
    assert_eq!(num(half, "replica_bandwidth_gbs"), 3350.0 / 2.0);
    assert!(num(half, "replicas") >= replicas);
    assert_eq!(num(half, "machines"), (num(half, "replicas") / 2.0).ceil());
    // A fleet given by count: one replica cannot keep up with this rate.
    let one = &lines(&run_plan(&["--replicas", "1", "--json"]))[0];
    assert_eq!(one["meets_slo"], false, "{one}");
    assert_eq!(num(one, "replicas"), 1.0);

    // The summary names the capacity, its bound and the fleet.
    let o = run_plan(&["--price-per-hour", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("capacity per replica:"), "{text}");
    assert!(
        text.contains(&format!("replicas: {replicas} on {replicas} machine(s)")),
        "{text}"
    );
    assert!(text.contains("per million output tokens"), "{text}");
}

#[test]
fn plan_errors_are_one_line() {
    let path = smollm2();
    let p = path.to_str().unwrap();
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "roofline",
            "plan",
            "--model",
            p,
            "--hardware",
            "a100-80gb",
            "--input-len",
            "4096",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    // A 4096-token prefill of SmolLM2 on an A100 takes more than 0.01 ms on any replica.
    assert_clean_failure(
        &plan(&["--rate", "1", "--ttft-slo", "0.01", "--tpot-slo", "10"]),
        "no number of replicas",
    );
    assert_clean_failure(
        &plan(&["--rate", "0", "--ttft-slo", "100", "--tpot-slo", "10"]),
        "rate must be a positive",
    );
    assert_clean_failure(
        &plan(&[
            "--rate",
            "1",
            "--ttft-slo",
            "100",
            "--tpot-slo",
            "10",
            "--replica-threads",
            "1",
        ]),
        "--replica-threads applies to --hardware local",
    );
    assert_clean_failure(
        &plan(&[
            "--rate",
            "1",
            "--ttft-slo",
            "100",
            "--tpot-slo",
            "10",
            "--efficiency",
            "2",
        ]),
        "efficiency",
    );
}
