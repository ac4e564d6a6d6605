//! The 2025–26 families that run on llama's layer — SmolLM3, Granite (dense and routed),
//! Mistral 3, Phi-3/Phi-4 — which have no real weights on this machine: ridge's perplexity on
//! synthetic files in llama.cpp's layout against `llama-perplexity` b11434 on the same files
//! (`tests/data/llama_cpp_families.json`, from
//! `SET=families tools/reference/make_synthetic_llama_cpp_fixtures.sh`), and the one-line
//! refusals of metadata these families must not carry.

#[path = "common/llama_cpp.rs"]
mod llama_cpp;

use llama_cpp::{family_specs, load_with as load, prose_tokens, running_perplexity, CTX};
use ridge_model::synthetic::{synthetic_model, SyntheticSpec};
use ridge_model::ActPolicy;
use sha2::{Digest, Sha256};

fn fixture() -> serde_json::Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llama_cpp_families.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn spec(name: &str) -> SyntheticSpec {
    family_specs()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| s)
        .unwrap()
}

/// Ridge's running perplexity on `name` under `policy` against llama.cpp's, each chunk within
/// `tol` (relative).
fn check(name: &str, policy: ActPolicy, tol: f64) {
    let fx = fixture();
    assert_eq!(fx["ctx"].as_u64(), Some(CTX as u64));
    let want = &fx["models"][name];
    let bytes = synthetic_model(&spec(name));
    assert_eq!(
        want["sha256"].as_str(),
        Some(format!("{:x}", Sha256::digest(&bytes)).as_str()),
        "{name}: the synthetic file changed; rerun SET=families tools/reference/make_synthetic_llama_cpp_fixtures.sh"
    );
    let (_f, m) = load(&bytes, policy);
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

/// The file again with metadata `key` set to `v` (`None`: removed) and the tensors `rename`
/// maps renamed (to `None`: dropped).
fn edit(
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
fn refused(bytes: &[u8], what: &str, names: &str) {
    use std::io::Write;
    let mut t = tempfile::NamedTempFile::new().unwrap();
    t.write_all(bytes).unwrap();
    let err = ridge_model::Model::load(t.path())
        .expect_err(what)
        .to_string();
    assert!(err.contains(names), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
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
