//! Writes a synthetic mixture of experts with a real model's shape, for speed runs against
//! llama.cpp where no weights of that model reach the machine (random weights, the synthetic
//! byte vocabulary padded to the real head size):
//!
//!     cargo run --release -p ridge-model --example write_moe_shape -- OUT.gguf [LAYERS] [DTYPE] [SHAPE]
//!
//! `SHAPE` `qwen3-30b-a3b` (default): d_model 2048, 32 query / 4 KV heads of 128, 128 experts
//! of width 768, 8 used, vocabulary 151 936, `LAYERS` of its 48 layers (default 12), every
//! matrix in `DTYPE` (`q4_0` default, `q4_k`, `q8_0`), the embedding table too; the router is
//! f32 as in the real files.
//!
//! `SHAPE` `qwen3.5-35b-a3b`: the hybrid (`qwen35moe`), d_model 2048, `LAYERS` of its 40 of
//! which every fourth attends (16 query / 2 KV heads of 256) and the others are Gated
//! DeltaNet (16 query/key and 32 value heads of 128), 256 experts of 512, 8 used, a shared
//! expert of 512, vocabulary 248 320.
//!
//! `SHAPE` `lfm2-1.2b`: LFM2-1.2B's shape (dense): d_model 2048, `LAYERS` of its 16 of which
//! every third attends (32 query / 8 KV heads of 64), the others gated short convolutions of 3
//! taps; feed-forward 8192, vocabulary 65 536.
//!
//! `SHAPE` `granite-4.0-h-tiny`: Granite 4.0-H-Tiny's shape (7B-A1B): d_model 1536, `LAYERS`
//! of its 40 of which every tenth attends (12 query / 4 KV heads of 128, no positions), the
//! others Mamba2 (48 heads of 64, one group, 128 state entries, 4 taps); 64 experts of 512, 6
//! used, an ungated shared expert of 1024; vocabulary 100 352.
//!
//! `SHAPE` `gpt-oss-20b`: d_model 2880, 64 query / 8 KV heads of 64, 32 experts of width 2880,
//! 4 used, a window of 128 on even layers, vocabulary 201 088, `LAYERS` of its 24; attention,
//! embeddings and head in `DTYPE`, the experts in MXFP4 as in the published files.
//!
//! `SHAPE` `glm-4.7-flash`: GLM-4.7-Flash (`deepseek2`, latent attention: 20 heads, query rank
//! 768, a 512 + 64 latent, heads of 192 + 64, values of 256), a leading dense layer of 10 240,
//! 64 experts of 1536, 4 used (sigmoid routing, selection bias), a shared expert of 1536,
//! vocabulary 154 880, `LAYERS` of its 47.
//!
//! `SHAPE` `gemma-4-e4b`: Gemma 4 E4B (`gemma4`, dense) as its published configuration gives
//! it (no config.json reaches this machine; from memory of it, so approximate): d_model 2560,
//! 8 query heads; five sliding layers (2 K/V heads of 256, a window of 512) to one global (2
//! K/V heads of 512, a quarter of each head rotated); feed-forward 10 240; per-layer
//! embeddings of 256; vocabulary 262 144; `LAYERS` of its 42, of which the last ~43% read an
//! earlier layer's K/V (rounded so the sharing starts after a global layer, as in the model).

use ridge_kernels::DType;
use ridge_model::synthetic::{
    synthetic_model, SyntheticGemma4, SyntheticHybrid, SyntheticMla, SyntheticMoe, SyntheticSpec,
};
use ridge_model::Architecture;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args.next().ok_or(
        "usage: write_moe_shape OUT.gguf [LAYERS] [q4_0|q4_k|q8_0] [qwen3-30b-a3b|qwen3.5-35b-a3b|lfm2-1.2b|granite-4.0-h-tiny|gpt-oss-20b|glm-4.7-flash|gemma-4-e4b]",
    )?;
    let layers: usize = args.next().map_or(Ok(12), |s| s.parse())?;
    let dtype = match args.next().as_deref().unwrap_or("q4_0") {
        "q4_0" => DType::Q4_0,
        "q4_k" => DType::Q4_K,
        "q8_0" => DType::Q8_0,
        other => return Err(format!("unknown DTYPE {other}").into()),
    };
    let shape = args.next().unwrap_or_else(|| "qwen3-30b-a3b".into());
    let qwen3 = SyntheticSpec {
        arch: Architecture::Qwen3Moe,
        n_layers: layers,
        d_model: 2048,
        n_heads: 32,
        n_kv_heads: 4,
        head_dim: Some(128),
        ffn_dim: 6144,
        ctx_len: 4096,
        dtype,
        embd_dtype: dtype,
        separate_output: true,
        seed: 30,
        vocab: 151_936,
        moe: Some(SyntheticMoe::new(128, 8, 768, None)),
        ..SyntheticSpec::default()
    };
    let spec = match shape.as_str() {
        "qwen3-30b-a3b" => qwen3,
        "gpt-oss-20b" => SyntheticSpec {
            arch: Architecture::GptOss,
            d_model: 2880,
            n_heads: 64,
            n_kv_heads: 8,
            head_dim: Some(64),
            ffn_dim: 2880,
            sliding_window: 128,
            vocab: 201_088,
            expert_dtype: Some(DType::MXFP4),
            moe: Some(SyntheticMoe::new(32, 4, 2880, None)),
            ..qwen3
        },
        // The Qwen3.5-35B-A3B: every fourth layer attends (16 query / 2 KV heads of
        // 256, 64 rotated dimensions), the others are Gated DeltaNet (16 query/key heads and 32
        // value heads of 128, 4 taps); 256 experts of 512, 8 used, a shared expert of 512.
        "qwen3.5-35b-a3b" => SyntheticSpec {
            arch: Architecture::Qwen35Moe,
            n_heads: 16,
            n_kv_heads: 2,
            head_dim: Some(256),
            ffn_dim: 512,
            vocab: 248_320,
            moe: Some(SyntheticMoe::new(256, 8, 512, Some(512))),
            hybrid: Some(SyntheticHybrid {
                n_k_heads: 16,
                n_v_heads: 32,
                head_dim: 128,
                conv_kernel: 4,
                interval: 4,
                rope_dim: 64,
                sections: [11, 11, 10, 0],
                legacy_qkvz: false,
            }),
            ..qwen3
        },
        "lfm2-1.2b" => SyntheticSpec {
            arch: Architecture::Lfm2,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: Some(64),
            ffn_dim: 8192,
            vocab: 65_536,
            moe: None,
            hybrid: Some(SyntheticHybrid {
                conv_kernel: 3,
                interval: 3,
                ..SyntheticHybrid::default()
            }),
            ..qwen3
        },
        "granite-4.0-h-tiny" => SyntheticSpec {
            arch: Architecture::GraniteHybrid,
            d_model: 1536,
            n_heads: 12,
            n_kv_heads: 4,
            head_dim: Some(128),
            ffn_dim: 512,
            vocab: 100_352,
            moe: Some(SyntheticMoe::new(64, 6, 512, Some(1024))),
            hybrid: Some(SyntheticHybrid {
                n_k_heads: 1,
                n_v_heads: 48,
                head_dim: 128,
                conv_kernel: 4,
                interval: 10,
                ..SyntheticHybrid::default()
            }),
            ..qwen3
        },
        // GLM-4.7-Flash (30B-A3B): latent attention (20 heads, query rank 768, latent 512 +
        // 64 rotated, heads of 192 + 64 and values of 256), a leading dense layer of 10 240,
        // then 64 experts of 1536, 4 used, sigmoid routing with the selection bias, a shared
        // expert; vocabulary 154 880.
        "glm-4.7-flash" => SyntheticSpec {
            arch: Architecture::Deepseek2,
            n_heads: 20,
            n_kv_heads: 1,
            head_dim: None,
            ffn_dim: 10_240,
            vocab: 154_880,
            mla: Some(SyntheticMla {
                q_lora: Some(768),
                kv_lora: 512,
                nope: 192,
                rope: 64,
                v_head: 256,
            }),
            moe: Some(SyntheticMoe {
                dense_lead: 1,
                sigmoid: true,
                ..SyntheticMoe::new(64, 4, 1536, Some(1536))
            }),
            ..qwen3
        },
        // Gemma 4 E4B: the 24 of 42 layers that keep K/V, scaled to `LAYERS` and ending on a
        // global layer (every sixth).
        "gemma-4-e4b" => SyntheticSpec {
            arch: Architecture::Gemma4,
            d_model: 2560,
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: Some(512),
            sliding_window: 512,
            ffn_dim: 10_240,
            vocab: 262_144,
            moe: None,
            gemma4: Some(SyntheticGemma4 {
                period: 6,
                head_dim_swa: 256,
                n_kv_heads_swa: 2,
                rope_dim_swa: 256,
                rotated_pairs: 64,
                shared_kv_layers: layers - (layers * 24 / 42 / 6 * 6).max(6).min(layers),
                ple_dim: 256,
                double_wide: false,
                k_eq_v: false,
                softcap: Some(30.0),
            }),
            ..qwen3
        },
        other => return Err(format!("unknown SHAPE {other}").into()),
    };
    let t = std::time::Instant::now();
    std::fs::write(&out, synthetic_model(&spec))?;
    eprintln!("wrote {out} in {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}
