//! `ridge run [--model M] [options] PROMPT`: streams generated text to stdout, then one stats
//! line on stderr.

use anyhow::Result;
use ridge_engine::{GenerateParams, Generation, SamplingParams};
use ridge_tokenizer::{ChatMessage, ChatTemplate, IncrementalDecoder};
use std::io::Write;

use crate::load::Loaded;

/// Sampling and length options shared by `run` and `chat`.
#[derive(clap::Args, Clone)]
pub struct GenArgs {
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// RNG seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
}

impl GenArgs {
    /// Engine parameters for a model whose end-of-generation ids are `eog`.
    pub fn params(&self, eog: Vec<u32>) -> GenerateParams {
        GenerateParams {
            max_tokens: self.max_tokens,
            sampling: SamplingParams {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                seed: self.seed,
                ..SamplingParams::default()
            },
            stop_tokens: if self.ignore_eos { Vec::new() } else { eog },
        }
    }
}

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name (default: smollm2-135m, pulled on first use).
    #[arg(long, short)]
    model: Option<String>,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    #[command(flatten)]
    gen: GenArgs,
    /// The prompt.
    prompt: String,
}

/// Generates from `prompt` ids, printing text as it arrives; returns the generation.
pub fn stream(l: &Loaded, prompt: &[u32], gen: &GenArgs) -> Result<Generation> {
    let params = gen.params(l.tokenizer.eog_ids());
    let mut dec = IncrementalDecoder::new(true);
    let mut out = std::io::stdout().lock();
    let mut piece = String::new();
    let g = ridge_engine::generate(&l.model, prompt, &params, |id| {
        piece.clear();
        dec.push_into(&l.tokenizer, id, &mut piece);
        // A closed stdout (e.g. piped into `head`) stops generation quietly.
        out.write_all(piece.as_bytes())
            .and_then(|_| out.flush())
            .is_ok()
    })?;
    let _ = out.write_all(dec.finish().as_bytes());
    let _ = out.flush();
    Ok(g)
}

/// The stats line printed after a generation.
pub fn stats_line(g: &Generation) -> String {
    let t = &g.timings;
    let f = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.2}"));
    format!(
        "prompt tokens: {} | generated: {} | TTFT: {} ms | TPOT: {} ms | decode: {} tok/s | prefill: {} tok/s | finish: {:?}",
        t.prompt_tokens,
        g.tokens.len(),
        f(t.ttft_ms()),
        f(t.tpot_ms()),
        f(t.decode_tok_s()),
        f(t.prefill_tok_s()),
        g.finish
    )
}

/// Renders one user message through the template.
pub fn chat_prompt(l: &Loaded, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    let tmpl = ChatTemplate::from_gguf(l.model.gguf(), &l.tokenizer)?;
    let text = tmpl.render(messages, true)?;
    Ok(l.tokenizer.encode_chat_prompt(&text)?)
}

/// Runs `run`.
pub fn main(a: Args) -> Result<()> {
    let l = crate::load::load(a.model.as_deref())?;
    let prompt = if a.chat {
        chat_prompt(&l, &[ChatMessage::new("user", a.prompt.clone())])?
    } else {
        l.tokenizer.encode(&a.prompt, true, true)?
    };
    let g = stream(&l, &prompt, &a.gen)?;
    println!();
    eprintln!("{}", stats_line(&g));
    Ok(())
}
