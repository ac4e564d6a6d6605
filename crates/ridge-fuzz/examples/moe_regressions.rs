//! Writes the mixture-of-experts regression inputs of the `gguf` target, broken variants of
//! the qwen3moe seed ([`ridge_fuzz::moe_seed_specs`]), into `<dir>` (default
//! `fuzz/regressions/gguf`), and prints what the loader says of each:
//! `cargo run --release -p ridge-fuzz --example moe_regressions [-- DIR]`.
//!
//! * `moe-qwen3moe-topk-over-experts`: `expert_used_count` 5 of 4 experts.
//! * `moe-qwen3moe-short-expert-stack`: `blk.0.ffn_down_exps.weight` holds 3 of the 4 experts.
//! * `moe-qwen3moe-truncated-in-experts`: the file cut off inside the expert stacks.
//! * `moe-qwen3moe-nan-router`: a router of NaNs, which the routed forward pass must survive.

use std::path::PathBuf;
use std::sync::Arc;

use ridge_gguf::{GgufFile, GgufWriter, MetadataValue, TensorInfo};

/// `bytes` written again, metadata through `meta`, each tensor's dims and data through
/// `tensor`.
fn rewrite(
    bytes: &[u8],
    meta: impl Fn(&str, &MetadataValue) -> MetadataValue,
    tensor: impl Fn(&TensorInfo, &[u8]) -> (Vec<u64>, Vec<u8>),
) -> Vec<u8> {
    let f = GgufFile::from_bytes("<seed>", bytes.to_vec()).expect("the seed parses");
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.meta(k, meta(k, v));
    }
    for t in f.tensors() {
        let (dims, data) = tensor(t, f.tensor_data(t));
        w.tensor(&t.name, &dims, t.ty, data);
    }
    w.to_bytes()
}

fn same(t: &TensorInfo, data: &[u8]) -> (Vec<u64>, Vec<u8>) {
    (t.dims.clone(), data.to_vec())
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/regressions/gguf".into()),
    );
    let spec = ridge_fuzz::moe_seed_specs().remove(0);
    let seed = ridge_model::synthetic::synthetic_model(&spec);
    let seed_file = GgufFile::from_bytes("<seed>", seed.clone()).expect("the seed parses");
    let expert_data_start = seed_file
        .tensor("blk.0.ffn_gate_exps.weight")
        .expect("an expert stack")
        .offset;
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        (
            "moe-qwen3moe-topk-over-experts",
            rewrite(
                &seed,
                |k, v| match k {
                    "qwen3moe.expert_used_count" => MetadataValue::U32(5),
                    _ => v.clone(),
                },
                same,
            ),
        ),
        (
            "moe-qwen3moe-short-expert-stack",
            rewrite(
                &seed,
                |_, v| v.clone(),
                |t, data| match t.name.as_str() {
                    "blk.0.ffn_down_exps.weight" => {
                        let n = t.dims[2] as usize;
                        let dims = vec![t.dims[0], t.dims[1], t.dims[2] - 1];
                        (dims, data[..data.len() / n * (n - 1)].to_vec())
                    }
                    _ => same(t, data),
                },
            ),
        ),
        (
            "moe-qwen3moe-truncated-in-experts",
            seed[..expert_data_start + 100].to_vec(),
        ),
        (
            "moe-qwen3moe-nan-router",
            rewrite(
                &seed,
                |_, v| v.clone(),
                |t, data| match t.name.as_str() {
                    "blk.0.ffn_gate_inp.weight" => (
                        t.dims.clone(),
                        data.chunks(4)
                            .flat_map(|_| f32::NAN.to_le_bytes())
                            .collect(),
                    ),
                    _ => same(t, data),
                },
            ),
        ),
    ];
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in &inputs {
        let verdict = match GgufFile::from_bytes(*name, bytes.clone()) {
            Err(e) => format!("not a GGUF file: {e}"),
            Ok(f) => match ridge_model::Model::from_gguf(Arc::new(f)) {
                Ok(_) => "loads".to_string(),
                Err(e) => format!("refused: {e}"),
            },
        };
        ridge_fuzz::gguf(bytes);
        std::fs::write(dir.join(name), bytes)?;
        println!("{name} ({} bytes): {verdict}", bytes.len());
    }
    Ok(())
}
