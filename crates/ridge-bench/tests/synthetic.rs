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

/// `ridge roofline`'s reading of a hybrid GGUF (its own, from the metadata alone) agrees with
/// the model's: the layers that keep K/V, their K/V heads, and the recurrent state a sequence
/// reads and writes per step — for every hybrid family's layout.
#[test]
fn the_roofline_spec_counts_a_hybrids_kv_layers_and_state() {
    use ridge_kernels::DType;
    use ridge_model::synthetic::{SyntheticHybrid, SyntheticMoe};
    use ridge_model::Architecture;
    let mk = |arch, n_k_heads, n_v_heads, head_dim, conv_kernel, interval| SyntheticSpec {
        arch,
        n_layers: 8,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        ffn_dim: 96,
        dtype: DType::Q8_0,
        hybrid: Some(SyntheticHybrid {
            n_k_heads,
            n_v_heads,
            head_dim,
            conv_kernel,
            interval,
            rope_dim: 8,
            sections: [2, 1, 1, 0],
            ..SyntheticHybrid::default()
        }),
        ..SyntheticSpec::default()
    };
    let specs = [
        mk(Architecture::Qwen35, 2, 4, 16, 4, 4),
        SyntheticSpec {
            moe: Some(SyntheticMoe::new(8, 2, 32, Some(32))),
            ..mk(Architecture::Qwen3Next, 1, 4, 16, 4, 2)
        },
        mk(Architecture::GraniteHybrid, 2, 8, 16, 4, 4),
        mk(Architecture::NemotronH, 1, 4, 8, 3, 3),
        mk(Architecture::Lfm2, 0, 0, 0, 3, 3),
    ];
    for spec in specs {
        let (f, m) = model(&spec);
        let g = ridge_gguf::GgufFile::open(f.path()).unwrap();
        let r = ridge_roofline::ModelSpec::from_gguf(&g).unwrap();
        let c = m.config();
        let state = c.recurrent.as_ref().unwrap().state_bytes() as u64;
        assert!(state > 0);
        assert_eq!(
            (r.kv_layers, r.n_kv_heads, r.state_bytes),
            (c.n_kv_layers() as u64, c.n_kv_heads as u64, state),
            "{:?}",
            spec.arch
        );
        assert!(r.kv_layers < r.n_layers, "{:?}", spec.arch);
    }
}
