//! The benchmark end to end on a tiny synthetic model: shapes, invariants and the floor.

use ridge_bench::{bench_batch, roofline_inputs, run, BenchConfig, BenchError};
use ridge_model::synthetic::{synthetic_llama, SyntheticSpec};
use ridge_model::Model;
use std::io::Write;

fn model(spec: &SyntheticSpec) -> (tempfile::NamedTempFile, Model) {
    let mut f = tempfile::Builder::new()
        .suffix(".gguf")
        .tempfile()
        .expect("temp file");
    f.write_all(&synthetic_llama(spec)).expect("write model");
    f.flush().expect("flush");
    let m = Model::load(f.path()).expect("load synthetic model");
    (f, m)
}

#[test]
fn every_batch_size_reports_consistent_metrics() {
    let spec = SyntheticSpec::default();
    let (_f, m) = model(&spec);
    let cfg = BenchConfig {
        prompt_tokens: 8,
        gen_tokens: 4,
        batch_sizes: vec![1, 3],
        reps: 3,
        seed: 5,
    };
    let mut seen = Vec::new();
    let out = run(&m, &cfg, 10.0, |r| seen.push(r.batch)).expect("bench runs");
    assert_eq!(seen, vec![1, 3]);
    // kv bytes per token: 2 (K, V) · 2 layers · (2 KV heads · 16) · 2 bytes = 256.
    assert_eq!(roofline_inputs(&m).kv_bytes_per_token, 256);
    let w = m.weight_bytes_per_token() as f64;
    for r in &out {
        assert_eq!((r.prompt_tokens, r.gen_tokens, r.reps), (8, 4, 3));
        for v in [r.prefill_tok_s, r.decode_tok_s, r.ttft_ms, r.tpot_ms] {
            assert!(v.is_finite() && v > 0.0, "{r:?}");
        }
        // Mean decode context P + G/2 = 10.
        assert_eq!(r.mean_decode_context, 10.0);
        let bytes = w + r.batch as f64 * 256.0 * 10.0;
        assert!((r.step_bytes - bytes).abs() < 1e-6 * bytes);
        let floor = bytes / 10e9 * 1e3;
        assert!((r.roofline_tpot_ms - floor).abs() < 1e-9 * floor, "{r:?}");
        assert!((r.roofline_efficiency - floor / r.tpot_ms).abs() < 1e-9);
    }
}

#[test]
fn arguments_beyond_the_model_are_refused() {
    let (_f, m) = model(&SyntheticSpec {
        ctx_len: 32,
        ..Default::default()
    });
    let cfg = BenchConfig {
        prompt_tokens: 30,
        gen_tokens: 4,
        batch_sizes: vec![1],
        reps: 1,
        seed: 0,
    };
    let e = bench_batch(&m, &cfg, 1, 10.0).unwrap_err();
    assert!(matches!(e, BenchError::InvalidParam(_)));
    assert!(e.to_string().contains("context of 32 tokens"), "{e}");
    let ok = BenchConfig {
        prompt_tokens: 8,
        ..cfg
    };
    let e = bench_batch(&m, &ok, 1, 0.0).unwrap_err();
    assert!(e.to_string().contains("bandwidth"), "{e}");
}
