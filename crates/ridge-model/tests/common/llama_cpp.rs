//! The synthetic models checked against llama.cpp: shared by the test (`tests/llama_cpp.rs`)
//! and the example that writes them for `tools/reference/make_synthetic_llama_cpp_fixtures.sh`.
//! Changing a spec changes the file's bytes; the test notices (its SHA-256 is in the fixture)
//! and asks for the fixture to be regenerated.

use ridge_kernels::DType;
use ridge_model::synthetic::{
    SyntheticGemma4, SyntheticHybrid, SyntheticMla, SyntheticMoe, SyntheticSpec,
};
use ridge_model::{ActPolicy, Architecture, Batch, KvCache, Model, Workspace};

/// Context length of the perplexity protocol (llama-perplexity's `-c`).
pub const CTX: usize = 64;
/// Chunks of `CTX` tokens scored (llama-perplexity's `--chunks`).
pub const CHUNKS: usize = 8;

/// `(name, spec)` of every model with a llama.cpp fixture. F32 weights, so that neither side
/// rounds activations to 8 bits and the two agree to the f16 rounding of the KV cache.
#[allow(dead_code)]
pub fn specs() -> Vec<(&'static str, SyntheticSpec)> {
    let base = SyntheticSpec {
        n_layers: 2,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        ffn_dim: 96,
        ctx_len: 2 * CTX,
        dtype: DType::F32,
        embd_dtype: DType::F32,
        separate_output: true,
        ..SyntheticSpec::default()
    };
    vec![
        // Control: an architecture already verified against a float64 reference.
        (
            "qwen2",
            SyntheticSpec {
                arch: Architecture::Qwen2,
                seed: 5,
                ..base.clone()
            },
        ),
        // Head dimension 32 from `attention.key_length` (not 64 / 4).
        (
            "qwen3",
            SyntheticSpec {
                arch: Architecture::Qwen3,
                head_dim: Some(32),
                seed: 7,
                ..base.clone()
            },
        ),
        // RoPE scaling by metadata, as llama.cpp reads it for any architecture: YaRN on qwen3
        // (factor 4 over an original context of 32: the ramp spans the head's pairs), and
        // Gemma 3's linear scaling of its global layers (its local ones stay unscaled).
        (
            "qwen3_yarn",
            SyntheticSpec {
                arch: Architecture::Qwen3,
                head_dim: Some(32),
                rope_scaling: Some(("yarn", 4.0)),
                seed: 31,
                ..base.clone()
            },
        ),
        (
            "gemma3_linear",
            SyntheticSpec {
                arch: Architecture::Gemma3,
                n_layers: 6,
                head_dim: Some(16),
                sliding_window: 12,
                separate_output: false,
                rope_scaling: Some(("linear", 8.0)),
                seed: 33,
                ..base.clone()
            },
        ),
        (
            "llama_rope_freqs",
            SyntheticSpec {
                arch: Architecture::Llama,
                rope_freqs: true,
                seed: 9,
                ..base.clone()
            },
        ),
    ]
    .into_iter()
    .chain(moe_specs(&base))
    .collect()
}

/// The mixtures of experts: every routed architecture, expert counts 8–128, top-k 1–8,
/// expert widths that are and are not multiples of eight (tiled or not), f32 weights, and two
/// quantized files for the default (integer) activations.
#[allow(dead_code)]
fn moe_specs(base: &SyntheticSpec) -> Vec<(&'static str, SyntheticSpec)> {
    vec![
        (
            "qwen3moe_e8_k2",
            SyntheticSpec {
                arch: Architecture::Qwen3Moe,
                head_dim: Some(32),
                moe: Some(SyntheticMoe::new(8, 2, 44, None)),
                seed: 11,
                ..base.clone()
            },
        ),
        (
            "qwen3moe_e128_k8",
            SyntheticSpec {
                arch: Architecture::Qwen3Moe,
                moe: Some(SyntheticMoe::new(128, 8, 40, None)),
                seed: 13,
                ..base.clone()
            },
        ),
        (
            "qwen2moe_e16_k4_shared",
            SyntheticSpec {
                arch: Architecture::Qwen2Moe,
                moe: Some(SyntheticMoe::new(16, 4, 32, Some(80))),
                seed: 15,
                ..base.clone()
            },
        ),
        (
            "llama_moe_e8_k1",
            SyntheticSpec {
                arch: Architecture::Llama,
                moe: Some(SyntheticMoe::new(8, 1, base.ffn_dim, None)),
                seed: 17,
                ..base.clone()
            },
        ),
        (
            "olmoe_e64_k8",
            SyntheticSpec {
                arch: Architecture::Olmoe,
                n_kv_heads: 4,
                moe: Some(SyntheticMoe::new(64, 8, base.ffn_dim, None)),
                seed: 19,
                ..base.clone()
            },
        ),
        (
            "qwen3moe_q4_0_e32_k4",
            SyntheticSpec {
                arch: Architecture::Qwen3Moe,
                dtype: DType::Q4_0,
                embd_dtype: DType::Q8_0,
                moe: Some(SyntheticMoe::new(32, 4, 96, None)),
                seed: 21,
                ..base.clone()
            },
        ),
        // Control for the quantized mixtures: the same attention and widths, dense, so the gap
        // llama.cpp's 8-bit activations leave is measured without experts.
        (
            "qwen3_q4_0_dense",
            SyntheticSpec {
                arch: Architecture::Qwen3,
                dtype: DType::Q4_0,
                embd_dtype: DType::Q8_0,
                ffn_dim: 96,
                seed: 21,
                ..base.clone()
            },
        ),
        (
            "qwen2moe_q8_0_e16_k2_shared",
            SyntheticSpec {
                arch: Architecture::Qwen2Moe,
                dtype: DType::Q8_0,
                embd_dtype: DType::Q8_0,
                moe: Some(SyntheticMoe::new(16, 2, 64, Some(96))),
                seed: 23,
                ..base.clone()
            },
        ),
        // gpt-oss: biases everywhere, sinks, a window of 12 on even layers, YaRN; 16-wide heads
        // (q_dim 128 over d_model 64). f32, then its real layout: MXFP4 experts (widths 96
        // and 32, not multiples of 256) beside 8-bit attention.
        (
            "gpt_oss_e8_k2",
            SyntheticSpec {
                arch: Architecture::GptOss,
                n_heads: 8,
                head_dim: Some(16),
                sliding_window: 12,
                moe: Some(SyntheticMoe::new(8, 2, 48, None)),
                seed: 25,
                ..base.clone()
            },
        ),
        (
            "gpt_oss_mxfp4_e32_k4",
            SyntheticSpec {
                arch: Architecture::GptOss,
                n_heads: 8,
                head_dim: Some(16),
                sliding_window: 12,
                dtype: DType::Q8_0,
                embd_dtype: DType::Q8_0,
                expert_dtype: Some(DType::MXFP4),
                moe: Some(SyntheticMoe::new(32, 4, 96, None)),
                seed: 27,
                ..base.clone()
            },
        ),
        (
            "gpt_oss_mxfp4_e128_k8",
            SyntheticSpec {
                arch: Architecture::GptOss,
                n_layers: 3,
                head_dim: Some(16),
                sliding_window: 20,
                dtype: DType::Q8_0,
                embd_dtype: DType::Q8_0,
                expert_dtype: Some(DType::MXFP4),
                moe: Some(SyntheticMoe::new(128, 8, 32, None)),
                seed: 29,
                ..base.clone()
            },
        ),
    ]
}

/// The hybrids checked against llama.cpp b11434 (`tests/data/llama_cpp_hybrid.json`): Qwen3.5's
/// layout in several shapes — value heads sharing query/key heads, attention every fourth or
/// every second layer, M-RoPE sections that cover every rotated pair or leave some unrotated
/// for text — in f32, and in Q4_0 beside 8-bit embeddings for the default activations.
#[allow(dead_code)]
pub fn hybrid_specs() -> Vec<(&'static str, SyntheticSpec)> {
    let base = SyntheticSpec {
        arch: Architecture::Qwen35,
        n_layers: 8,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: Some(32),
        ffn_dim: 96,
        ctx_len: 2 * CTX,
        dtype: DType::F32,
        embd_dtype: DType::F32,
        separate_output: true,
        hybrid: Some(SyntheticHybrid {
            n_k_heads: 2,
            n_v_heads: 4,
            head_dim: 16,
            conv_kernel: 4,
            interval: 4,
            rope_dim: 16,
            sections: [3, 3, 2, 0],
            legacy_qkvz: false,
        }),
        ..SyntheticSpec::default()
    };
    let lfm2_conv = SyntheticHybrid {
        conv_kernel: 3,
        interval: 3,
        ..base.hybrid.clone().unwrap()
    };
    let lfm2 = SyntheticSpec {
        arch: Architecture::Lfm2,
        hybrid: Some(lfm2_conv.clone()),
        head_dim: None,
        seed: 51,
        ..base.clone()
    };
    vec![
        (
            "qwen35_f32",
            SyntheticSpec {
                seed: 41,
                ..base.clone()
            },
        ),
        (
            "qwen35_f32_interval2",
            SyntheticSpec {
                n_layers: 4,
                n_heads: 2,
                n_kv_heads: 1,
                separate_output: false,
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 1,
                    n_v_heads: 2,
                    head_dim: 32,
                    conv_kernel: 3,
                    interval: 2,
                    rope_dim: 16,
                    sections: [4, 1, 1, 0],
                    legacy_qkvz: false,
                }),
                seed: 43,
                ..base.clone()
            },
        ),
        (
            "qwen35moe_e16_k4_shared",
            SyntheticSpec {
                arch: Architecture::Qwen35Moe,
                moe: Some(SyntheticMoe::new(16, 4, 32, Some(48))),
                seed: 47,
                ..base.clone()
            },
        ),
        (
            "qwen35_q4_0",
            SyntheticSpec {
                dtype: DType::Q4_0,
                embd_dtype: DType::Q8_0,
                seed: 45,
                ..base.clone()
            },
        ),
        // Qwen3-Next: key heads repeated in place, β/α from `ssm_ba`, no M-RoPE sections;
        // one file in the current converter's layout, one in the first's (`ssm_in`).
        (
            "qwen3next_e16_k4_shared",
            SyntheticSpec {
                arch: Architecture::Qwen3Next,
                moe: Some(SyntheticMoe::new(16, 4, 32, Some(48))),
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 2,
                    n_v_heads: 4,
                    ..base.hybrid.clone().unwrap()
                }),
                seed: 59,
                ..base.clone()
            },
        ),
        (
            "qwen3next_legacy_ssm_in",
            SyntheticSpec {
                arch: Architecture::Qwen3Next,
                n_layers: 4,
                moe: Some(SyntheticMoe::new(8, 2, 32, Some(32))),
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 1,
                    n_v_heads: 4,
                    interval: 2,
                    legacy_qkvz: true,
                    ..base.hybrid.clone().unwrap()
                }),
                seed: 61,
                ..base.clone()
            },
        ),
        // Granite 4.0-H: Mamba2 (8 heads of 16 rows in 2 groups, 16 state entries) with every
        // fourth layer attending without positions, dense; then routed with an ungated shared
        // expert, one group, RoPE on, one K/V head.
        (
            "granitehybrid_f32",
            SyntheticSpec {
                arch: Architecture::GraniteHybrid,
                head_dim: None,
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 2,
                    n_v_heads: 8,
                    head_dim: 16,
                    conv_kernel: 4,
                    interval: 4,
                    rope_dim: 0,
                    ..SyntheticHybrid::default()
                }),
                seed: 63,
                ..base.clone()
            },
        ),
        (
            "granitehybrid_moe_rope",
            SyntheticSpec {
                arch: Architecture::GraniteHybrid,
                head_dim: None,
                n_layers: 6,
                n_kv_heads: 1,
                moe: Some(SyntheticMoe::new(8, 2, 96, Some(32))),
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 1,
                    n_v_heads: 4,
                    head_dim: 8,
                    conv_kernel: 3,
                    interval: 3,
                    rope_dim: 16,
                    ..SyntheticHybrid::default()
                }),
                seed: 65,
                ..base.clone()
            },
        ),
        // Nemotron-H: Mamba2 on even layers, squared-ReLU MLPs on odd ones, every fourth layer
        // attention without positions; then a Q4_0 file with one group and 3 taps.
        (
            "nemotron_h_f32",
            SyntheticSpec {
                arch: Architecture::NemotronH,
                head_dim: None,
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 2,
                    n_v_heads: 8,
                    head_dim: 16,
                    conv_kernel: 4,
                    interval: 4,
                    ..SyntheticHybrid::default()
                }),
                seed: 69,
                ..base.clone()
            },
        ),
        (
            "nemotron_h_q4_0",
            SyntheticSpec {
                arch: Architecture::NemotronH,
                head_dim: None,
                dtype: DType::Q4_0,
                embd_dtype: DType::Q8_0,
                hybrid: Some(SyntheticHybrid {
                    n_k_heads: 1,
                    n_v_heads: 4,
                    head_dim: 16,
                    conv_kernel: 3,
                    interval: 3,
                    ..SyntheticHybrid::default()
                }),
                seed: 71,
                ..base.clone()
            },
        ),
        // LFM2: gated short convolutions (3 taps, as LFM2 ships) with every third layer
        // attending; a second shape with 4 taps, one K/V head, every other layer, tied head.
        ("lfm2_f32", lfm2.clone()),
        (
            "lfm2_f32_kv1_taps4",
            SyntheticSpec {
                n_layers: 6,
                n_kv_heads: 1,
                separate_output: false,
                hybrid: Some(SyntheticHybrid {
                    conv_kernel: 4,
                    interval: 2,
                    ..lfm2_conv.clone()
                }),
                seed: 53,
                ..lfm2.clone()
            },
        ),
        (
            "lfm2_q4_0",
            SyntheticSpec {
                dtype: DType::Q4_0,
                embd_dtype: DType::Q8_0,
                seed: 55,
                ..lfm2
            },
        ),
    ]
}

/// `(name, spec)` of the Gemma 4 models with a llama.cpp fixture
/// (`SET=gemma4 tools/reference/make_synthetic_llama_cpp_fixtures.sh`): six layers, layers 2
/// and 5 global with 32-wide heads and one K/V head, the others sliding (a window of 16) with
/// 16-wide heads and two.
#[allow(dead_code)]
pub fn gemma4_specs() -> Vec<(&'static str, SyntheticSpec)> {
    let base = SyntheticSpec {
        arch: Architecture::Gemma4,
        n_layers: 6,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: Some(32),
        sliding_window: 16,
        ffn_dim: 96,
        ctx_len: 2 * CTX,
        dtype: DType::F32,
        embd_dtype: DType::F32,
        ..SyntheticSpec::default()
    };
    // E2B/E4B's layout: the last three layers read layers 1 (sliding) and 2 (global)'s K/V,
    // per-layer token embeddings, the sharing layers' feed-forward twice as wide.
    let e4b = SyntheticGemma4 {
        shared_kv_layers: 3,
        ple_dim: 16,
        double_wide: true,
        ..SyntheticGemma4::default()
    };
    vec![
        (
            "gemma4_e4b_layout",
            SyntheticSpec {
                gemma4: Some(e4b.clone()),
                seed: 101,
                ..base.clone()
            },
        ),
        // 31B's: every layer keeps its K/V, values are the keys, the sliding layers rotate
        // half of each head, no per-layer embeddings.
        (
            "gemma4_31b_layout",
            SyntheticSpec {
                gemma4: Some(SyntheticGemma4 {
                    k_eq_v: true,
                    rope_dim_swa: 8,
                    ..SyntheticGemma4::default()
                }),
                seed: 102,
                ..base.clone()
            },
        ),
        // 26B-A4B's: every layer a dense feed-forward beside 8 experts of which 2 route,
        // values-are-keys, no per-layer embeddings.
        (
            "gemma4_26b_a4b_layout",
            SyntheticSpec {
                gemma4: Some(SyntheticGemma4 {
                    k_eq_v: true,
                    ..SyntheticGemma4::default()
                }),
                // Gemma 4's router reads a residual normed to 1/√d: logits spread enough that
                // no chunk meets a near-tie both sides round apart.
                moe: Some(SyntheticMoe {
                    router_scale: 32.0,
                    ..SyntheticMoe::new(8, 2, 32, None)
                }),
                seed: 104,
                ..base.clone()
            },
        ),
        (
            "gemma4_e4b_q4_0",
            SyntheticSpec {
                gemma4: Some(SyntheticGemma4 { ple_dim: 32, ..e4b }),
                dtype: DType::Q4_0,
                embd_dtype: DType::Q8_0,
                seed: 103,
                ..base
            },
        ),
    ]
}

/// The 2025–26 families on llama's layer checked against llama.cpp b11434
/// (`tests/data/llama_cpp_families.json`): SmolLM3's layers without positions, dense and
/// routed Granite with its multipliers, Mistral 3's YaRN (betas and log multiplier from the
/// metadata) and attention temperature, Phi-3's fused projections with partial RoPE and
/// LongRoPE's long and short factors; f32, and Q4_0 beside 8-bit embeddings for the default
/// activations.
#[allow(dead_code)]
pub fn family_specs() -> Vec<(&'static str, SyntheticSpec)> {
    let base = SyntheticSpec {
        n_layers: 4,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        ffn_dim: 96,
        ctx_len: 2 * CTX,
        dtype: DType::F32,
        embd_dtype: DType::F32,
        separate_output: true,
        ..SyntheticSpec::default()
    };
    let q4 = |s: SyntheticSpec, seed| SyntheticSpec {
        dtype: DType::Q4_0,
        embd_dtype: DType::Q8_0,
        seed,
        ..s
    };
    let smollm3 = SyntheticSpec {
        arch: Architecture::Smollm3,
        seed: 61,
        ..base.clone()
    };
    let granite = SyntheticSpec {
        arch: Architecture::Granite,
        n_layers: 2,
        seed: 62,
        ..base.clone()
    };
    let phi3 = SyntheticSpec {
        arch: Architecture::Phi3,
        n_kv_heads: 1,
        rope_dim: Some(12),
        seed: 66,
        ..base.clone()
    };
    let glm = SyntheticSpec {
        arch: Architecture::Glm4Moe,
        n_layers: 3,
        head_dim: Some(32),
        rope_dim: Some(16),
        moe: Some(SyntheticMoe {
            dense_lead: 1,
            ..SyntheticMoe::new(16, 4, 48, Some(48))
        }),
        seed: 81,
        ..base.clone()
    };
    let ds_mla = SyntheticMla {
        q_lora: Some(48),
        kv_lora: 32,
        nope: 16,
        rope: 16,
        v_head: 16,
    };
    let ds = SyntheticSpec {
        arch: Architecture::Deepseek2,
        n_layers: 3,
        n_kv_heads: 1,
        mla: Some(ds_mla.clone()),
        moe: Some(SyntheticMoe {
            dense_lead: 1,
            sigmoid: true,
            groups: Some((4, 2)),
            ..SyntheticMoe::new(16, 4, 32, Some(32))
        }),
        seed: 91,
        ..base.clone()
    };
    vec![
        ("smollm3", smollm3.clone()),
        ("smollm3_q4_0", q4(smollm3, 71)),
        ("granite", granite.clone()),
        (
            "granitemoe_e8_k2_shared",
            SyntheticSpec {
                arch: Architecture::GraniteMoe,
                moe: Some(SyntheticMoe::new(8, 2, base.ffn_dim, Some(64))),
                seed: 63,
                ..granite.clone()
            },
        ),
        ("granite_q4_0", q4(granite, 72)),
        (
            "mistral3_yarn",
            SyntheticSpec {
                arch: Architecture::Mistral3,
                rope_scaling: Some(("yarn", 4.0)),
                // An original context long enough that YaRN's ramp depends on the betas.
                rope_orig_ctx: Some(4096),
                head_dim: Some(32),
                seed: 64,
                ..base.clone()
            },
        ),
        (
            "mistral3_temperature",
            SyntheticSpec {
                arch: Architecture::Mistral3,
                seed: 65,
                ..base.clone()
            },
        ),
        // The original context (32) is below the context: LongRoPE's long factors.
        ("phi3_long", phi3.clone()),
        // At or above it: the short factors (llama-perplexity runs its chunks in a context of
        // 256 per sequence, which is what it compares with the original one).
        (
            "phi3_short",
            SyntheticSpec {
                rope_orig_ctx: Some(4 * CTX),
                seed: 67,
                ..phi3.clone()
            },
        ),
        ("phi3_q4_0", q4(phi3, 73)),
        // GLM-4.5's layout: a leading dense layer, sigmoid routing with a selection bias, an
        // ungated shared expert, Q/K/V biases, RoPE over half of each head, and a
        // multi-token-prediction layer counted in `block_count` but not in the file.
        ("glm4moe_e16_k4_shared", glm.clone()),
        (
            "glm4moe_qk_norm",
            SyntheticSpec {
                qk_norm: true,
                // Two shared experts' width, no leading dense layer.
                moe: Some(SyntheticMoe::new(8, 2, 48, Some(96))),
                seed: 82,
                ..glm.clone()
            },
        ),
        (
            "glm4moe_q4_0",
            SyntheticSpec {
                moe: Some(SyntheticMoe {
                    dense_lead: 1,
                    ..SyntheticMoe::new(16, 4, 64, Some(64))
                }),
                ..q4(glm, 83)
            },
        ),
        // DeepSeek-V3's layout: low-rank queries, a 32-wide latent with a 16-wide rotated part,
        // a leading dense layer, sigmoid routing with the selection bias over 4 groups of which
        // 2 open, one shared expert.
        ("deepseek2_v3", ds.clone()),
        // DeepSeek-V2-Lite's: queries from one matrix, softmax routing, no groups, YaRN with
        // its log multiplier (the score scale takes mscale²). 26 layers: llama.cpp reads a
        // file without `q_lora_rank` only at V2-Lite's depth.
        (
            "deepseek2_lite_yarn",
            SyntheticSpec {
                n_layers: 26,
                mla: Some(SyntheticMla {
                    q_lora: None,
                    ..ds_mla.clone()
                }),
                moe: Some(SyntheticMoe {
                    dense_lead: 1,
                    ..SyntheticMoe::new(8, 2, 32, Some(64))
                }),
                rope_scaling: Some(("yarn", 4.0)),
                rope_orig_ctx: Some(4096),
                seed: 92,
                ..ds.clone()
            },
        ),
        (
            "deepseek2_q4_0",
            SyntheticSpec {
                mla: Some(SyntheticMla {
                    q_lora: Some(64),
                    kv_lora: 64,
                    nope: 32,
                    v_head: 32,
                    ..ds_mla.clone()
                }),
                moe: Some(SyntheticMoe {
                    dense_lead: 1,
                    sigmoid: true,
                    groups: Some((4, 2)),
                    ..SyntheticMoe::new(16, 4, 64, Some(64))
                }),
                ..q4(ds, 93)
            },
        ),
    ]
}

/// The tokens of `tests/data/prose.txt`: the synthetic vocabulary has one token per byte (the
/// fixture script checks that llama.cpp tokenizes this text so).
#[allow(dead_code)]
pub fn prose_tokens() -> Vec<u32> {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/prose.txt");
    std::fs::read(p)
        .unwrap()
        .into_iter()
        .map(u32::from)
        .collect()
}

/// `bytes` in a temporary file (kept alive beside the model), loaded with `policy`.
#[allow(dead_code)]
pub fn load_with(bytes: &[u8], policy: ActPolicy) -> (tempfile::NamedTempFile, Model) {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    let mut m = Model::load(f.path()).unwrap();
    m.set_act_policy(policy);
    (f, m)
}

/// llama-perplexity's protocol: chunks of `CTX` tokens, each evaluated from an empty cache,
/// scoring the predictions of its second half; the running perplexity after every chunk.
#[allow(dead_code)]
pub fn running_perplexity(m: &Model, tokens: &[u32]) -> Vec<f64> {
    let vocab = m.config().vocab;
    let (mut nll, mut count, mut running) = (0f64, 0usize, Vec::new());
    let mut ws = Workspace::new();
    for chunk in tokens.chunks_exact(CTX).take(CHUNKS) {
        let mut kv = KvCache::new(m.config(), CTX);
        let s = kv.add_seq();
        let mut b = Batch::new();
        for (i, &t) in chunk.iter().enumerate() {
            b.push(t, i, s, true);
        }
        let logits = m.forward(&b, &mut kv, &mut ws).unwrap();
        for j in CTX / 2..CTX - 1 {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let max = row.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
            let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            nll += max + z.ln() - row[chunk[j + 1] as usize] as f64;
            count += 1;
        }
        running.push((nll / count as f64).exp());
    }
    running
}

/// Ridge's running perplexity on `spec` (named `name` in `tests/data/{fixture}`) under `policy`
/// against llama.cpp's, each chunk within `tol` (relative); `regen` is the command that
/// rewrites the fixture, named when the synthetic file's bytes changed.
#[allow(dead_code)]
pub fn check_against(
    fixture: &str,
    regen: &str,
    spec: &SyntheticSpec,
    name: &str,
    policy: ActPolicy,
    tol: f64,
) {
    use sha2::{Digest, Sha256};
    let p = format!("{}/tests/data/{fixture}", env!("CARGO_MANIFEST_DIR"));
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(fx["ctx"].as_u64(), Some(CTX as u64));
    let want = &fx["models"][name];
    let bytes = ridge_model::synthetic::synthetic_model(spec);
    assert_eq!(
        want["sha256"].as_str(),
        Some(format!("{:x}", Sha256::digest(&bytes)).as_str()),
        "{name}: the synthetic file changed; rerun {regen}"
    );
    let (_f, m) = load_with(&bytes, policy);
    let got = running_perplexity(&m, &prose_tokens());
    let lcpp: Vec<f64> = want["perplexity_llama_cpp_running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(got.len(), lcpp.len());
    for (i, (g, l)) in got.iter().zip(&lcpp).enumerate() {
        let rel = (g - l).abs() / l;
        eprintln!(
            "{name} [{}] ridge {g:.5} llama.cpp {l:.5} rel {rel:.2e}",
            i + 1
        );
        assert!(
            rel < tol,
            "{name} chunk {}: ridge {g} vs llama.cpp {l} ({policy:?})",
            i + 1
        );
    }
}

/// Logits of every token of `prompt`, fed in pieces of `chunk` tokens.
#[allow(dead_code)]
pub fn logits_in_chunks(m: &Model, prompt: &[u32], chunk: usize) -> Vec<f32> {
    let mut kv = KvCache::new(m.config(), 256);
    let s = kv.add_seq();
    let mut ws = Workspace::new();
    let mut out = Vec::new();
    for (c, piece) in prompt.chunks(chunk).enumerate() {
        let mut b = Batch::new();
        for (i, &t) in piece.iter().enumerate() {
            b.push(t, c * chunk + i, s, true);
        }
        out.extend_from_slice(m.forward(&b, &mut kv, &mut ws).unwrap());
    }
    out
}

/// The file again with metadata `key` set to `v` (`None`: removed) and the tensors `rename`
/// maps renamed (to `None`: dropped).
#[allow(dead_code)]
pub fn edit(
    good: &[u8],
    key: &str,
    v: Option<ridge_gguf::MetadataValue>,
    rename: &[(&str, Option<&str>)],
) -> Vec<u8> {
    use ridge_gguf::{GgufFile, GgufWriter};
    let f = GgufFile::from_bytes("<memory>", good.to_vec()).unwrap();
    let mut w = GgufWriter::new();
    for (k, old) in f.metadata() {
        match (k == key, &v) {
            (true, Some(v)) => w.meta(k, v.clone()),
            (true, None) => &mut w,
            (false, _) => w.meta(k, old.clone()),
        };
    }
    if let (false, Some(v)) = (f.metadata().iter().any(|(k, _)| k == key), &v) {
        w.meta(key, v.clone());
    }
    for t in f.tensors() {
        let name = match rename.iter().find(|(from, _)| *from == t.name) {
            Some((_, None)) => continue,
            Some((_, Some(to))) => to.to_string(),
            None => t.name.clone(),
        };
        w.tensor(&name, &t.dims, t.ty, f.tensor_data(t).to_vec());
    }
    w.to_bytes()
}

/// Loading `bytes` fails with one line containing `names`.
#[allow(dead_code)]
pub fn refused(bytes: &[u8], what: &str, names: &str) {
    use std::io::Write;
    let mut t = tempfile::NamedTempFile::new().unwrap();
    t.write_all(bytes).unwrap();
    let err = ridge_model::Model::load(t.path())
        .expect_err(what)
        .to_string();
    assert!(err.contains(names), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
