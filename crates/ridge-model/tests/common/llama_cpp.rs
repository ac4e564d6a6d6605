//! The synthetic models checked against llama.cpp: shared by the test (`tests/llama_cpp.rs`)
//! and the example that writes them for `tools/reference/make_synthetic_llama_cpp_fixtures.sh`.
//! Changing a spec changes the file's bytes; the test notices (its SHA-256 is in the fixture)
//! and asks for the fixture to be regenerated.

use ridge_kernels::DType;
use ridge_model::synthetic::SyntheticSpec;
use ridge_model::Architecture;

/// Context length of the perplexity protocol (llama-perplexity's `-c`).
pub const CTX: usize = 64;
/// Chunks of `CTX` tokens scored (llama-perplexity's `--chunks`).
pub const CHUNKS: usize = 8;

/// `(name, spec)` of every model with a llama.cpp fixture. F32 weights, so that neither side
/// rounds activations to 8 bits and the two agree to the f16 rounding of the KV cache.
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
        (
            "llama_rope_freqs",
            SyntheticSpec {
                arch: Architecture::Llama,
                rope_freqs: true,
                seed: 9,
                ..base
            },
        ),
    ]
}
