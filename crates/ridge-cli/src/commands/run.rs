//! `ridge run [--model M] [options] PROMPT`: streams generated text to stdout, then one stats
//! line on stderr. The prompt goes through the model's chat template when it has one (`--raw`
//! completes the text as given).

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};
use ridge_engine::{
    Constraint, EngineConfig, EngineCore, GenerateParams, Generation, GrammarSpec, Grammars,
    SamplingParams,
};
use ridge_tokenizer::{ChatMessage, ChatTemplate, IncrementalDecoder, Tokenizer, TokenizerError};

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
            constraint: None,
        }
    }
}

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name (default: smollm2-135m, pulled on first use).
    #[arg(long, short)]
    model: Option<String>,
    /// Complete the prompt text as given, without the model's chat template.
    #[arg(long, conflicts_with_all = ["chat", "system"])]
    raw: bool,
    /// Require the chat template (an error for a model without one). Without `--raw` the
    /// template is already applied whenever the model has one.
    #[arg(long)]
    chat: bool,
    /// A system message to put before the prompt (chat models only).
    #[arg(long)]
    system: Option<String>,
    #[command(flatten)]
    gen: GenArgs,
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
    /// Constrain the output to JSON valid against the JSON Schema in this file.
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    json_schema: Option<std::path::PathBuf>,
    /// Constrain the output to the Lark grammar in this file (llguidance's dialect).
    #[arg(long, value_name = "FILE")]
    grammar: Option<std::path::PathBuf>,
    /// The prompt.
    prompt: String,
}

/// Generates from `prompt` ids, printing text as it arrives; returns the generation.
pub fn stream(l: &Loaded, prompt: &[u32], gen: &GenArgs) -> Result<Generation> {
    stream_with(l, prompt, gen.params(l.tokenizer.eog_ids()))
}

/// As [`stream`], with the parameters given.
fn stream_with(l: &Loaded, prompt: &[u32], params: GenerateParams) -> Result<Generation> {
    let mut p = Printer::new(&l.tokenizer);
    let g = ridge_engine::generate(&l.model, prompt, &params, |id| p.token(id))?;
    p.finish();
    Ok(g)
}

/// Prints tokens as text as they arrive.
struct Printer<'a> {
    tok: &'a Tokenizer,
    dec: IncrementalDecoder,
    out: std::io::StdoutLock<'static>,
    piece: String,
}

impl<'a> Printer<'a> {
    fn new(tok: &'a Tokenizer) -> Self {
        Printer {
            tok,
            dec: IncrementalDecoder::new(true),
            out: std::io::stdout().lock(),
            piece: String::new(),
        }
    }

    /// Prints one token; false when stdout is closed (e.g. piped into `head`): stop quietly.
    fn token(&mut self, id: u32) -> bool {
        self.piece.clear();
        self.dec.push_into(self.tok, id, &mut self.piece);
        self.out
            .write_all(self.piece.as_bytes())
            .and_then(|_| self.out.flush())
            .is_ok()
    }

    fn finish(mut self) {
        let _ = self.out.write_all(self.dec.finish().as_bytes());
        let _ = self.out.flush();
    }
}

/// Generates through an engine core with speculative decoding; prints like [`stream`] and
/// adds the draft acceptance to the stats line.
fn stream_speculative(l: Loaded, prompt: &[u32], a: &Args) -> Result<String> {
    let mut params = a.gen.params(l.tokenizer.eog_ids());
    params.constraint = constraint(&l, a)?;
    let kv_tokens = (prompt.len() + a.gen.max_tokens + 64).min(l.model.config().ctx_len + 64);
    let spec = a.spec.build(&l.model, &l.tokenizer, kv_tokens)?;
    let tok = Arc::new(l.tokenizer);
    let mut core = EngineCore::new(
        l.model,
        tok.clone(),
        EngineConfig {
            max_seqs: 1,
            kv_cache_tokens: kv_tokens,
            ..EngineConfig::default()
        },
    )?;
    if let Some(s) = spec {
        core.set_speculator(s)?;
    }
    let mut p = Printer::new(&tok);
    let g = ridge_engine::generate_in(&mut core, prompt, &params, |id| p.token(id))?;
    p.finish();
    let rate = if g.draft_tokens > 0 {
        100.0 * g.accepted_tokens as f64 / g.draft_tokens as f64
    } else {
        0.0
    };
    Ok(format!(
        "{} | drafted: {} | accepted: {} ({rate:.0}%)",
        stats_line(&g),
        g.draft_tokens,
        g.accepted_tokens
    ))
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

/// The prompt's token ids: the messages rendered through the model's chat template when it has
/// one (as ollama and `llama-cli` do: an instruct model given a bare question often ends at
/// once), else the text as given. `--raw` always takes the text as given; `--chat` makes a
/// missing template an error.
fn prompt_ids(l: &Loaded, a: &Args) -> Result<Vec<u32>> {
    if a.raw {
        return Ok(l.tokenizer.encode(&a.prompt, true, true)?);
    }
    let tmpl = match ChatTemplate::from_gguf(l.model.gguf(), &l.tokenizer) {
        Ok(t) => t,
        Err(TokenizerError::MissingChatTemplate) if !a.chat && a.system.is_none() => {
            return Ok(l.tokenizer.encode(&a.prompt, true, true)?)
        }
        Err(e) => return Err(e.into()),
    };
    let mut messages: Vec<ChatMessage> = a
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.clone()))
        .collect();
    messages.push(ChatMessage::new("user", a.prompt.clone()));
    render(l, &tmpl, &messages)
}

/// Renders messages through the model's chat template (an error when it has none).
pub fn chat_prompt(l: &Loaded, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    let tmpl = ChatTemplate::from_gguf(l.model.gguf(), &l.tokenizer)?;
    render(l, &tmpl, messages)
}

fn render(l: &Loaded, tmpl: &ChatTemplate, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    let text = tmpl.render(messages, true)?;
    Ok(l.tokenizer.encode_chat_prompt(&text)?)
}

/// The `--json-schema` / `--grammar` constraint, compiled for the model's vocabulary.
fn constraint(l: &Loaded, a: &Args) -> Result<Option<Constraint>> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let spec = match (&a.json_schema, &a.grammar) {
        (Some(p), _) => {
            let schema = serde_json::from_str(&read(p)?)
                .with_context(|| format!("{}: not valid JSON", p.display()))?;
            GrammarSpec::JsonSchema(schema)
        }
        (None, Some(p)) => GrammarSpec::Lark(read(p)?),
        (None, None) => return Ok(None),
    };
    let file = a
        .json_schema
        .as_ref()
        .or(a.grammar.as_ref())
        .map(|p| p.display().to_string());
    // The grammar compiler keeps a tokenizer of its own (the engine path shares one Arc).
    let tok = Tokenizer::from_gguf(l.model.gguf())?;
    let grammars = Grammars::new(Arc::new(tok))?;
    let c = grammars
        .compile(&spec)
        .with_context(|| format!("{}: cannot be used", file.unwrap_or_default()))?;
    Ok(Some(c))
}

/// Runs `run`.
pub fn main(a: Args) -> Result<()> {
    let l = crate::load::load(a.model.as_deref())?;
    let prompt = prompt_ids(&l, &a)?;
    if a.spec.speculative.is_some() {
        let line = stream_speculative(l, &prompt, &a)?;
        println!();
        eprintln!("{line}");
        return Ok(());
    }
    let mut params = a.gen.params(l.tokenizer.eog_ids());
    params.constraint = constraint(&l, &a)?;
    let g = stream_with(&l, &prompt, params)?;
    println!();
    eprintln!("{}", stats_line(&g));
    Ok(())
}
