//! `ridge perplexity --model M --file F [--ctx 512] [--chunks N] [--json]`.

use anyhow::{Context, Result};
use std::io::Write;

/// Arguments of `perplexity`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name.
    #[arg(long, short)]
    model: String,
    /// Text file to evaluate.
    #[arg(long, short)]
    file: std::path::PathBuf,
    /// Tokens per chunk.
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Evaluate at most this many chunks.
    #[arg(long)]
    chunks: Option<usize>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// KV cache element type: f16 or q8_0.
    #[arg(long, default_value = "f16")]
    kv_cache_dtype: ridge_model::KvDtype,
}

/// Runs `perplexity`.
pub fn main(a: Args) -> Result<()> {
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("{}: cannot read text file", a.file.display()))?;
    let l = crate::load::load(Some(&a.model))?;
    let tokens = l.tokenizer.encode(&text, true, false)?;
    let bos = if l.tokenizer.add_bos() {
        l.tokenizer.bos_id()
    } else {
        None
    };
    let t0 = std::time::Instant::now();
    let r = ridge_engine::perplexity_kv(
        &l.model,
        &tokens,
        a.ctx,
        bos,
        a.chunks,
        a.kv_cache_dtype,
        |i, _, ppl| {
            if !a.json {
                eprint!("[{i}]{ppl:.4},");
                let _ = std::io::stderr().flush();
            }
        },
    )?;
    let secs = t0.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "perplexity": r.perplexity,
                "chunks": r.chunks,
                "tokens_scored": r.tokens_scored,
                "ctx": a.ctx,
                "seconds": secs,
            })
        );
    } else {
        eprintln!();
        println!(
            "perplexity: {:.4} over {} chunks of {} ({} tokens scored, {:.1} s, {:.0} tok/s)",
            r.perplexity,
            r.chunks,
            a.ctx,
            r.tokens_scored,
            secs,
            (r.chunks * a.ctx) as f64 / secs
        );
    }
    Ok(())
}
