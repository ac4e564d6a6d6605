//! Writes a synthetic mixture of experts with a real model's shape, for speed runs against
//! llama.cpp where no weights of that model reach the machine (random weights, the synthetic
//! byte vocabulary padded to the real head size):
//!
//!     cargo run --release -p ridge-model --example write_moe_shape -- OUT.gguf [LAYERS] [DTYPE]
//!
//! The shape is Qwen3-30B-A3B's (d_model 2048, 32 query / 4 KV heads of 128, 128 experts of
//! width 768, 8 used, vocabulary 151 936), `LAYERS` of its 48 layers (default 12), every
//! matrix in `DTYPE` (`q4_0` default, `q4_k`, `q8_0`), the embedding table too; the router is
//! f32 as in the real files.

use ridge_kernels::DType;
use ridge_model::synthetic::{synthetic_model, SyntheticMoe, SyntheticSpec};
use ridge_model::Architecture;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: write_moe_shape OUT.gguf [LAYERS] [q4_0|q4_k|q8_0]")?;
    let layers: usize = args.next().map_or(Ok(12), |s| s.parse())?;
    let dtype = match args.next().as_deref().unwrap_or("q4_0") {
        "q4_0" => DType::Q4_0,
        "q4_k" => DType::Q4_K,
        "q8_0" => DType::Q8_0,
        other => return Err(format!("unknown DTYPE {other}").into()),
    };
    let spec = SyntheticSpec {
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
        moe: Some(SyntheticMoe {
            n_expert: 128,
            n_used: 8,
            expert_ffn: 768,
            shared_ffn: None,
            router_scale: 4.0,
        }),
        ..SyntheticSpec::default()
    };
    let t = std::time::Instant::now();
    std::fs::write(&out, synthetic_model(&spec))?;
    eprintln!("wrote {out} in {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}
