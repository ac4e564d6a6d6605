//! The 2025–26 families that run on llama's layer — SmolLM3, Granite (dense and routed),
//! Mistral 3, Phi-3/Phi-4 — which have no real weights on this machine: ridge's perplexity on
//! synthetic files in llama.cpp's layout against `llama-perplexity` b11434 on the same files
//! (`tests/data/llama_cpp_families.json`, from
//! `SET=families tools/reference/make_synthetic_llama_cpp_fixtures.sh`), and the one-line
//! refusals of metadata these families must not carry.

#[path = "common/llama_cpp.rs"]
mod llama_cpp;

use llama_cpp::{
    check_against, edit, family_specs, load_with as load, logits_in_chunks, prose_tokens, refused,
    running_perplexity,
};
use ridge_model::synthetic::{synthetic_model, SyntheticSpec};
use ridge_model::ActPolicy;

fn spec(name: &str) -> SyntheticSpec {
    family_specs()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| s)
        .unwrap()
}

/// Ridge's running perplexity on `name` against llama.cpp's, each chunk within `tol`.
fn check(name: &str, policy: ActPolicy, tol: f64) {
    let regen = "SET=families tools/reference/make_synthetic_llama_cpp_fixtures.sh";
    check_against(
        "llama_cpp_families.json",
        regen,
        &spec(name),
        name,
        policy,
        tol,
    );
}

/// f32 activations on f32 weights: the same arithmetic as llama.cpp up to summation order and
/// its f16 rounding of K/V and Q inside attention.
const TOL_F32: f64 = 1e-4;
/// Q4_0 weights: llama.cpp rounds activations to 8-bit blocks as ridge's default does, each
/// its own way.
const TOL_Q4_0: f64 = 1e-2;

#[test]
fn smollm3_matches_llama_cpp() {
    check("smollm3", ActPolicy::F32, TOL_F32);
}

#[test]
fn smollm3_q4_0_matches_llama_cpp() {
    check("smollm3_q4_0", ActPolicy::default(), TOL_Q4_0);
}

#[test]
fn granite_matches_llama_cpp() {
    check("granite", ActPolicy::F32, TOL_F32);
}

#[test]
fn granitemoe_matches_llama_cpp() {
    check("granitemoe_e8_k2_shared", ActPolicy::F32, TOL_F32);
}

#[test]
fn granite_q4_0_matches_llama_cpp() {
    check("granite_q4_0", ActPolicy::default(), TOL_Q4_0);
}

#[test]
fn mistral3_yarn_matches_llama_cpp() {
    check("mistral3_yarn", ActPolicy::F32, TOL_F32);
}

#[test]
fn mistral3_attention_temperature_matches_llama_cpp() {
    check("mistral3_temperature", ActPolicy::F32, TOL_F32);
}

#[test]
fn phi3_long_rope_matches_llama_cpp() {
    check("phi3_long", ActPolicy::F32, TOL_F32);
}

#[test]
fn phi3_short_rope_matches_llama_cpp() {
    check("phi3_short", ActPolicy::F32, TOL_F32);
}

#[test]
fn phi3_q4_0_matches_llama_cpp() {
    check("phi3_q4_0", ActPolicy::default(), TOL_Q4_0);
}

#[test]
fn glm4moe_matches_llama_cpp() {
    check("glm4moe_e16_k4_shared", ActPolicy::F32, TOL_F32);
}

#[test]
fn glm4moe_with_qk_norms_matches_llama_cpp() {
    check("glm4moe_qk_norm", ActPolicy::F32, TOL_F32);
}

#[test]
fn glm4moe_q4_0_matches_llama_cpp() {
    check("glm4moe_q4_0", ActPolicy::default(), TOL_Q4_0);
}

#[test]
fn deepseek2_v3_layout_matches_llama_cpp() {
    check("deepseek2_v3", ActPolicy::F32, TOL_F32);
}

#[test]
fn deepseek2_lite_with_yarn_matches_llama_cpp() {
    check("deepseek2_lite_yarn", ActPolicy::F32, TOL_F32);
}

#[test]
fn deepseek2_q4_0_matches_llama_cpp() {
    check("deepseek2_q4_0", ActPolicy::default(), TOL_Q4_0);
}

/// The pieces these families add are each load-bearing: without them the model is another.
#[test]
fn each_family_differs_from_plain_llama() {
    let ppl = |s: &SyntheticSpec| {
        let (_f, m) = load(&synthetic_model(s), ActPolicy::F32);
        *running_perplexity(&m, &prose_tokens()).last().unwrap()
    };
    for name in ["smollm3", "mistral3_temperature"] {
        let s = spec(name);
        let plain = SyntheticSpec {
            arch: ridge_model::Architecture::Llama,
            ..s.clone()
        };
        let (a, b) = (ppl(&s), ppl(&plain));
        assert!(
            (a - b).abs() / b > 1e-3,
            "{name}: {a} is llama's {b}: its difference is not applied"
        );
    }
}

#[test]
fn bad_family_metadata_is_one_line() {
    use ridge_gguf::MetadataValue;
    let phi3 = synthetic_model(&spec("phi3_long"));
    refused(
        &edit(&phi3, "", None, &[("rope_factors_short.weight", None)]),
        "LongRoPE without its short factors",
        "rope_factors_short.weight",
    );
    refused(
        &edit(
            &phi3,
            "",
            None,
            &[("rope_factors_long.weight", Some("rope_freqs.weight"))],
        ),
        "Llama 3's divisors on phi3",
        "rope_freqs.weight",
    );
    refused(
        &edit(&phi3, "", None, &[("blk.1.attn_qkv.weight", None)]),
        "a layer without Q/K/V",
        "blk.1.attn_q.weight",
    );
    refused(
        &edit(
            &phi3,
            "phi3.rope.scaling.original_context_length",
            Some(MetadataValue::String("long".into())),
            &[],
        ),
        "a string for the original context",
        "phi3.rope.scaling.original_context_length",
    );
    let smollm3 = synthetic_model(&spec("smollm3"));
    refused(
        &edit(&smollm3, "", None, &[("blk.0.ffn_gate.weight", None)]),
        "a fused feed-forward of the wrong width",
        "blk.0.ffn_up.weight",
    );
    let mistral3 = synthetic_model(&spec("mistral3_yarn"));
    for (key, v) in [
        ("mistral3.attention.temperature_scale", f32::NAN),
        ("mistral3.rope.scaling.yarn_beta_fast", -1.0),
        ("mistral3.rope.scaling.yarn_log_multiplier", f32::INFINITY),
    ] {
        refused(
            &edit(&mistral3, key, Some(MetadataValue::F32(v)), &[]),
            key,
            key,
        );
    }
    let granite = synthetic_model(&spec("granite"));
    refused(
        &edit(
            &granite,
            "granite.logit_scale",
            Some(MetadataValue::F32(-2.0)),
            &[],
        ),
        "a negative logit scale",
        "granite.logit_scale",
    );
    // Llama keeps refusing the log multiplier it has no use for.
    refused(
        &edit(
            &smollm3,
            "smollm3.rope.scaling.yarn_log_multiplier",
            Some(MetadataValue::F32(1.0)),
            &[],
        ),
        "YaRN's log multiplier outside mistral3",
        "smollm3.rope.scaling.yarn_log_multiplier",
    );
}

/// Latent attention gives a token the same bits whatever the chunking of its prompt and
/// whatever else shares its batch (each (token, head block) is one task over its positions in
/// order).
#[test]
fn latent_attention_is_chunk_and_batch_invariant() {
    use ridge_model::{Batch, KvCache, Workspace};
    for policy in [ActPolicy::F32, ActPolicy::default()] {
        let (_f, m) = load(&synthetic_model(&spec("deepseek2_q4_0")), policy);
        let text = prose_tokens();
        let whole = logits_in_chunks(&m, &text[..70], 70);
        for chunk in [1, 5, 32] {
            assert!(
                whole == logits_in_chunks(&m, &text[..70], chunk),
                "chunks of {chunk} ({policy:?})"
            );
        }
        // Three sequences interleaved in one batch.
        let vocab = m.config().vocab;
        let mut kv = KvCache::new(m.config(), 512);
        let seqs: Vec<_> = (0..3).map(|_| kv.add_seq()).collect();
        let mut ws = Workspace::new();
        let starts = [0usize, 100, 200];
        let mut b = Batch::new();
        for i in 0..30 {
            for (k, &s) in seqs.iter().enumerate() {
                b.push(text[starts[k] + i], i, s, true);
            }
        }
        let out = m.forward(&b, &mut kv, &mut ws).unwrap();
        for i in 0..30 {
            assert!(
                out[3 * i * vocab..(3 * i + 1) * vocab] == whole[i * vocab..(i + 1) * vocab],
                "token {i} among others ({policy:?})"
            );
        }
    }
}

/// The cache holds the latent and the rotated part, one row per token and layer, no values.
#[test]
fn latent_attention_caches_the_latent_only() {
    let (_f, m) = load(&synthetic_model(&spec("deepseek2_v3")), ActPolicy::F32);
    let c = m.config();
    let mla = c.mla.expect("latent attention");
    assert_eq!((mla.kv_lora, c.rope_dim, c.head_dim), (32, 16, 48));
    assert_eq!(
        (c.n_kv_heads, mla.q_lora, mla.k_head, mla.v_head),
        (1, Some(48), 32, 16)
    );
    // Three layers of one f16 row of 48 per token (a full K/V cache of 4 heads × 32 would be
    // 2 · 4 · 32 per layer).
    assert_eq!(ridge_model::KvDtype::F16.token_bytes(c), 3 * 2 * 48);
    let kv = ridge_model::KvCache::new(c, 64);
    assert_eq!(kv.bytes(), 3 * 64 * 2 * 48);
    // And the file's MTP-free `block_count` is the trunk.
    assert_eq!(c.n_layers, 3);
}

#[test]
fn bad_latent_attention_metadata_is_one_line() {
    use ridge_gguf::MetadataValue;
    let good = synthetic_model(&spec("deepseek2_v3"));
    refused(
        &edit(
            &good,
            "deepseek2.attention.kv_lora_rank",
            Some(MetadataValue::U32(40)),
            &[],
        ),
        "a latent rank that disagrees with the cached row",
        "deepseek2.attention.kv_lora_rank",
    );
    refused(
        &edit(&good, "deepseek2.attention.key_length_mla", None, &[]),
        "a file from before the split",
        "deepseek2.attention.key_length_mla",
    );
    refused(
        &edit(
            &good,
            "",
            None,
            &[("blk.1.attn_k_b.weight", Some("blk.1.attn_kv_b.weight"))],
        ),
        "the unsplit attn_kv_b",
        "blk.1.attn_kv_b.weight",
    );
    refused(
        &edit(
            &good,
            "deepseek2.expert_group_used_count",
            Some(MetadataValue::U32(9)),
            &[],
        ),
        "more groups used than there are",
        "deepseek2.expert_group_used_count",
    );
    refused(
        &edit(
            &good,
            "deepseek2.attention.value_length_mla",
            Some(MetadataValue::U32(24)),
            &[],
        ),
        "a value width the up-projection does not have",
        "blk.0.attn_v_b.weight",
    );
}
