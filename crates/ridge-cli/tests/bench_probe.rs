//! `ridge probe` and `ridge bench` through the real binary: the JSON contract and the roofline
//! arithmetic, on a small buffer and a tiny synthetic model so they run in seconds.

mod common;
use common::*;
use ridge_model::synthetic::{synthetic_llama, SyntheticSpec};
use serde_json::Value;
use std::io::Write;

fn synthetic_file(spec: &SyntheticSpec) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".gguf").tempfile().unwrap();
    f.write_all(&synthetic_llama(spec)).unwrap();
    f.flush().unwrap();
    f
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

#[test]
fn probe_json_is_one_line_with_bandwidth() {
    let o = run(&[
        "probe",
        "--json",
        "--buffer-mib",
        "64",
        "--passes",
        "3",
        "--threads",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.trim_end().lines().count(), 1, "one line: {out:?}");
    let v: Value = serde_json::from_str(out.trim()).expect("valid JSON");
    assert!(num(&v, "read_bandwidth_gbs") > 0.0, "{v}");
    assert!(num(&v, "fma_gflops") > 0.0, "{v}");
    assert!(num(&v, "q4_1_matmul_gflops") > 0.0, "{v}");
    assert_eq!(num(&v, "threads"), 2.0);
    assert!(v["isa"].is_string());
    // The int8 roof of the path ridge runs (none on the scalar path), twice as ops.
    match v["isa"].as_str() {
        Some("scalar") => assert!(v["int8_peak_gmacs"].is_null(), "{v}"),
        Some(isa) => {
            // On an AMX CPU the roof is the tile unit's, with the VNNI peak beside it.
            let want = if isa.ends_with("+amx") {
                "amx-int8"
            } else if isa.starts_with("avx512") {
                "avx512-vnni"
            } else {
                "avx2"
            };
            assert_eq!(v["int8_path"], want, "{v}");
            let g = num(&v, "int8_peak_gmacs");
            assert!(g > 0.0 && (num(&v, "int8_peak_gops") - 2.0 * g).abs() < 1e-9 * g);
            if want == "amx-int8" {
                assert_eq!(v["int8_vector_path"], "avx512-vnni", "{v}");
                assert!(num(&v, "int8_vector_peak_gmacs") > 0.0, "{v}");
            } else {
                assert!(v["int8_vector_peak_gmacs"].is_null(), "{v}");
                assert!(v["amx_bf16_peak_gflops"].is_null(), "{v}");
            }
        }
        None => panic!("{v}"),
    }
}

#[test]
fn a_closed_output_pipe_ends_ridge_quietly() {
    // The reader is gone before the probe (a few hundred milliseconds) prints anything.
    let mut child = ridge()
        .args([
            "probe",
            "--buffer-mib",
            "64",
            "--passes",
            "2",
            "--threads",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ridge");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait for ridge");
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert!(err.is_empty(), "stderr: {err}");
}

#[test]
fn bench_json_has_every_key_and_the_right_floor() {
    let spec = SyntheticSpec::default();
    let f = synthetic_file(&spec);
    let p = f.path().to_str().unwrap();
    let o = run(&[
        "bench",
        "--model",
        p,
        "--prompt",
        "8",
        "--gen",
        "4",
        "--batch",
        "1,3",
        "--reps",
        "1",
        "--json",
        "--bandwidth-gbs",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.trim_end().lines().collect();
    assert_eq!(lines.len(), 2, "one line per batch size: {out:?}");

    // The floor from the model's known sizes: weights read per step, plus per sequence the f16
    // K and V of every layer (2 · n_layers · n_kv_heads · head_dim · 2 bytes per token) over
    // the mean decode context P + G/2 = 8 + 2 = 10 positions, at 10 GB/s.
    let weights = ridge_model::Model::load(f.path())
        .unwrap()
        .weight_bytes_per_token() as f64;
    let head_dim = spec.d_model / spec.n_heads;
    let kv_per_token = (2 * spec.n_layers * spec.n_kv_heads * head_dim * 2) as f64;
    assert_eq!(kv_per_token, 256.0);

    for (line, batch) in lines.iter().zip([1.0, 3.0]) {
        let v: Value = serde_json::from_str(line).expect("valid JSON");
        for key in [
            "batch",
            "prompt_tokens",
            "gen_tokens",
            "prefill_tok_s",
            "decode_tok_s",
            "ttft_ms",
            "tpot_ms",
            "roofline_tpot_ms",
            "roofline_efficiency",
        ] {
            num(&v, key);
        }
        assert_eq!(num(&v, "batch"), batch);
        assert_eq!(num(&v, "prompt_tokens"), 8.0);
        assert_eq!(num(&v, "gen_tokens"), 4.0);
        for key in ["prefill_tok_s", "decode_tok_s", "ttft_ms", "tpot_ms"] {
            assert!(num(&v, key) > 0.0, "{key} in {v}");
        }
        let floor_ms = (weights + batch * kv_per_token * 10.0) / 10e9 * 1e3;
        let got = num(&v, "roofline_tpot_ms");
        assert!(
            ((got - floor_ms) / floor_ms).abs() < 1e-6,
            "roofline_tpot_ms {got} vs {floor_ms}"
        );
        let eff = num(&v, "roofline_efficiency");
        assert!((eff - floor_ms / num(&v, "tpot_ms")).abs() < 1e-6 * eff.max(1e-9));
        assert_eq!(num(&v, "read_bandwidth_gbs"), 10.0);
        assert_eq!(num(&v, "weight_bytes"), weights);

        // The compute floors from the roofs the bench probed and the spec's parameters: linear
        // layers at the int8 rate, attention (QK and PV: 2 · n_heads · head_dim per attended
        // layer-position) at the f32 FMA rate; the step floor is the larger one.
        if v["int8_peak_gmacs"].is_null() {
            continue; // the scalar path: no compute roof
        }
        let (int8, f32) = (num(&v, "int8_peak_gmacs"), num(&v, "f32_peak_gmacs"));
        let d = spec.d_model as f64;
        let kv = (spec.n_kv_heads * head_dim) as f64;
        let ffn = spec.ffn_dim as f64;
        let layer = 2.0 * d * d + 2.0 * d * kv + 3.0 * d * ffn;
        let head = d * spec.vocab as f64; // tied: the embedding table
        let params = spec.n_layers as f64 * layer + head;
        let attn = 2.0 * d; // n_heads · head_dim = d_model here
        let layers = spec.n_layers as f64;
        let compute =
            1e3 * (batch * params / (int8 * 1e9) + attn * batch * layers * 10.0 / (f32 * 1e9));
        let close = |a: f64, b: f64| ((a - b) / b).abs() < 1e-6;
        assert!(
            close(num(&v, "compute_floor_ms"), compute),
            "{v} vs {compute}"
        );
        assert!(
            close(num(&v, "step_floor_ms"), floor_ms.max(compute)),
            "{v}"
        );
        let bound = if compute > floor_ms {
            "compute"
        } else {
            "memory"
        };
        assert_eq!(v["decode_bound"], bound, "{v}");
        // Prefill of B × 8 tokens: the head only for the last token of each prompt;
        // Σ_{i=1..8} i = 36 positions per layer per sequence; its memory floor reads the
        // weights once.
        let prefill = 1e3
            * ((batch * 8.0 * (params - head) + batch * head) / (int8 * 1e9)
                + attn * batch * layers * 36.0 / (f32 * 1e9));
        let pf = prefill.max(weights / 10e9 * 1e3);
        assert!(close(num(&v, "prefill_floor_ms"), pf), "{v} vs {pf}");
        let pe = num(&v, "prefill_efficiency");
        assert!(close(pe, pf / num(&v, "prefill_ms")), "{v}");
    }
}

#[test]
fn bench_refuses_bad_arguments_with_one_line() {
    let f = synthetic_file(&SyntheticSpec {
        ctx_len: 32,
        ..Default::default()
    });
    let p = f.path().to_str().unwrap();
    let base = [
        "bench",
        "--model",
        p,
        "--bandwidth-gbs",
        "10",
        "--reps",
        "1",
    ];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        run(&a)
    };
    let cases: [(&[&str], &str); 6] = [
        (&["--batch", "0"], "batch sizes must be at least 1, got 0"),
        (&["--batch", "1,x"], "x"),
        (&["--gen", "1", "--prompt", "4"], "at least 2 output tokens"),
        (&["--prompt", "0"], "at least 1 token"),
        (&["--reps", "0", "--prompt", "4"], "reps"),
        (
            &["--prompt", "30", "--gen", "4"],
            "does not fit the model's context of 32 tokens",
        ),
    ];
    for (extra, needle) in cases {
        assert_clean_failure(&with(extra), needle);
    }
    assert_clean_failure(
        &run(&["bench", "--model", p, "--prompt", "4", "--bandwidth-gbs=-1"]),
        "--bandwidth-gbs must be a positive number",
    );
    assert_clean_failure(
        &run(&["bench", "--model", "/no/such/model.gguf", "--batch", "1"]),
        "/no/such/model.gguf",
    );
    assert_clean_failure(&run(&["probe", "--buffer-mib", "0"]), "--buffer-mib");
}

#[test]
fn the_floor_names_the_memory_level_the_working_set_fits() {
    // `ridge bench` reads a tiny synthetic model's step (a few hundred KB) from the last-level
    // cache when the probe knows one that holds it, else from DRAM, and names the bandwidth it
    // used beside both probed figures. Checked on this machine as it is (or as CI's
    // `RIDGE_LLC_BYTES` presents it), then with the cache forced off and on.
    let f = synthetic_file(&SyntheticSpec::default());
    let bench = |extra: &[&str], envs: &[(&str, &str)]| -> Value {
        let base = [
            "bench",
            "--model",
            f.path().to_str().unwrap(),
            "--prompt",
            "8",
        ];
        let rest = ["--gen", "4", "--batch", "1", "--reps", "1", "--json"];
        let o = run_env(&[&base[..], &rest, extra].concat(), envs);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(stdout(&o).trim()).unwrap()
    };
    let check = |v: &Value| -> String {
        assert!(v["bandwidth_probed"].as_bool().unwrap(), "{v}");
        let working_set = num(v, "weight_bytes") + num(v, "kv_bytes_per_token") * 12.0;
        let dram = num(v, "dram_bandwidth_gbs");
        let fits = v["llc_bytes"]
            .as_f64()
            .is_some_and(|llc| working_set <= llc * 0.75);
        let (level, bw) = if fits {
            ("LLC", num(v, "llc_bandwidth_gbs"))
        } else {
            ("DRAM", dram)
        };
        assert_eq!(v["memory_level"], level, "{v}");
        assert_eq!(num(v, "floor_bandwidth_gbs"), bw, "{v}");
        assert_eq!(num(v, "read_bandwidth_gbs"), bw, "{v}");
        assert!(dram > 0.0 && bw > 0.0, "{v}");
        level.to_string()
    };
    check(&bench(&[], &[]));
    let v = bench(&[], &[("RIDGE_LLC_BYTES", "none")]);
    assert!(v["llc_bytes"].is_null(), "{v}");
    assert_eq!(check(&v), "DRAM");
    let v = bench(&[], &[("RIDGE_LLC_BYTES", "16M")]);
    assert_eq!(num(&v, "llc_bytes"), (16u64 << 20) as f64, "{v}");
    assert_eq!(check(&v), "LLC");
    // Too small a cache for the step: DRAM again.
    assert_eq!(check(&bench(&[], &[("RIDGE_LLC_BYTES", "4K")])), "DRAM");
    // Given a bandwidth, the floor uses it as given.
    let v = bench(&["--bandwidth-gbs", "10"], &[]);
    assert_eq!(v["memory_level"], "given", "{v}");
    assert_eq!(num(&v, "floor_bandwidth_gbs"), 10.0, "{v}");
    assert!(v["dram_bandwidth_gbs"].is_null(), "{v}");
}

#[test]
fn the_probe_reports_the_cache_it_was_told_of() {
    let probe = |envs: &[(&str, &str)]| -> Value {
        let args = [
            "probe",
            "--json",
            "--no-compute",
            "--buffer-mib",
            "64",
            "--passes",
            "2",
        ];
        let o = run_env(&args, envs);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(stdout(&o).trim()).unwrap()
    };
    let p = probe(&[("RIDGE_LLC_BYTES", "8M")]);
    assert_eq!(num(&p, "llc_bytes"), (8u64 << 20) as f64, "{p}");
    assert_eq!(num(&p, "llc_fit_bytes"), (6u64 << 20) as f64, "{p}");
    assert!(num(&p, "llc_bandwidth_gbs") > 0.0, "{p}");
    assert_eq!(num(&p, "dram_bandwidth_gbs"), num(&p, "read_bandwidth_gbs"));
    let p = probe(&[("RIDGE_LLC_BYTES", "0")]);
    assert!(
        p["llc_bytes"].is_null() && p["llc_bandwidth_gbs"].is_null(),
        "{p}"
    );
    // A value that is no size is refused with a warning, and the OS's figure is used.
    let o = run_env(
        &[
            "probe",
            "--json",
            "--no-compute",
            "--buffer-mib",
            "64",
            "--passes",
            "1",
        ],
        &[("RIDGE_LLC_BYTES", "lots")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("RIDGE_LLC_BYTES"), "{}", stderr(&o));
}
