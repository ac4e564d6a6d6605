//! Times `Tokenizer::encode` on ~10 KB of the test corpus.
//!
//! `cargo run -p ridge-tokenizer --release --example encode_bench -- MODEL.gguf`

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: encode_bench MODEL.gguf")?;
    let gguf = ridge_gguf::GgufFile::open(path)?;
    let start = Instant::now();
    let tok = ridge_tokenizer::Tokenizer::from_gguf(&gguf)?;
    println!("from_gguf: {:?}", start.elapsed());
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/corpus.json");
    let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(corpus)?)?;
    let mut text = String::new();
    for c in cases.iter().cycle().take(10_000) {
        if text.len() >= 10 * 1024 {
            break;
        }
        text.push_str(c["text"].as_str().unwrap_or(""));
    }
    // First call on a fresh tokenizer: the BPE word cache is empty.
    let start = Instant::now();
    let n = tok.encode(&text, true, true)?.len();
    println!("first (cold cache) encode: {:?}", start.elapsed());
    let iters = 200;
    let start = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(tok.encode(std::hint::black_box(&text), true, true)?);
    }
    let per = start.elapsed() / iters;
    println!(
        "encode {} bytes -> {n} tokens: {per:?} per call ({:.1} MB/s)",
        text.len(),
        text.len() as f64 / per.as_secs_f64() / 1e6
    );
    Ok(())
}
