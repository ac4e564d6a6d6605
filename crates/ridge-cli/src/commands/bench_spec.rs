//! `ridge bench spec --prompts FILE --speculative M …`: what speculative decoding buys on a set
//! of prompts. Each prompt is generated greedily twice through the same engine path, plain and
//! speculating (alternating, plain first); the outputs must be identical (checked), and the
//! table reports both decode rates, the speed-up and the draft acceptance. For prompt lookup
//! it also reports the ceiling: the speed-up the best possible drafting schedule would reach
//! on each answer with this machine's pass costs (`ridge_engine::spec::spec_bound`), so a
//! measured speed-up reads as a fraction of what lookup can give here at all.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use ridge_engine::spec::{lookup_guesses, pass_costs, spec_bound, NgramProposer, SpecMethod};
use ridge_engine::{EngineConfig, EngineCore, GenerateParams, Generation, SamplingParams};
use ridge_tokenizer::ChatMessage;

use crate::spec_args::SpecArgs;

/// Arguments of `bench spec`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name (default: smollm2-135m).
    #[arg(long, short)]
    model: Option<String>,
    /// Prompts, separated by lines holding only `---`.
    #[arg(long)]
    prompts: PathBuf,
    /// Wrap each prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Most tokens generated per prompt (greedy; stops at end of generation).
    #[arg(long, default_value_t = 128)]
    gen: usize,
    /// Runs per prompt and mode; rates are medians.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// One JSON object per prompt per line, then a summary object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    spec: SpecArgs,
}

/// Decode rate after the first token, tokens/s.
fn rate(g: &Generation) -> f64 {
    g.timings.decode_tok_s().unwrap_or(0.0)
}

/// Runs `bench spec`.
pub fn main(a: Args) -> Result<()> {
    if a.spec.speculative.is_none() {
        bail!("bench spec needs --speculative ngram|draft|self");
    }
    if a.reps == 0 || a.gen < 2 {
        bail!("--reps must be at least 1 and --gen at least 2");
    }
    let text = std::fs::read_to_string(&a.prompts)
        .with_context(|| format!("cannot read {}", a.prompts.display()))?;
    let prompts: Vec<&str> = text
        .split("\n---\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if prompts.is_empty() {
        bail!("{}: no prompts", a.prompts.display());
    }
    let l = crate::load::load(a.model.as_deref())?;
    let mut ids = Vec::new();
    for p in &prompts {
        ids.push(if a.chat {
            super::run::chat_prompt(&l, &[ChatMessage::new("user", p.to_string())])?
        } else {
            l.tokenizer.encode(p, true, true)?
        });
    }
    let params = GenerateParams {
        max_tokens: a.gen,
        sampling: SamplingParams::greedy(),
        stop_tokens: l.tokenizer.eog_ids(),
        constraint: None,
    };
    let longest = ids.iter().map(Vec::len).max().unwrap_or(0);
    let kv_tokens = longest + a.gen + 64;
    let spec = a.spec.build(&l.model, &l.tokenizer, kv_tokens)?;
    // Prompt lookup's ceiling needs this machine's cost of each verification length, timed
    // midway through a typical answer.
    let max_k = a.spec.num_speculative_tokens;
    let costs = match spec.as_ref().map(|s| s.proposer.method()) {
        Some(SpecMethod::Ngram) => {
            let at = ids.iter().map(Vec::len).sum::<usize>() / ids.len() + a.gen / 2;
            Some(pass_costs(&l.model, at, max_k + 1, 5)?)
        }
        _ => None,
    };
    let tok = Arc::new(l.tokenizer);
    let cfg = EngineConfig {
        max_seqs: 1,
        kv_cache_tokens: kv_tokens,
        prefix_caching: false,
        ..EngineConfig::default()
    };
    let mut core = EngineCore::new(l.model, tok, cfg)?;
    let Some(spec) = spec else {
        bail!("bench spec needs --speculative");
    };
    let method = spec.proposer.method().name();
    // One core: the speculator is switched on and off between runs (same model, same cache).
    let mut spec = Some(spec);
    let (mut plain_all, mut spec_all) = (Vec::new(), Vec::new());
    let (mut drafted, mut accepted, mut tokens) = (0usize, 0usize, 0usize);
    let mut ceilings = Vec::new();
    if !a.json {
        println!(
            "{:>3} {:>7} {:>7} {:>11} {:>11} {:>8} {:>9}{}",
            "#",
            "prompt",
            "tokens",
            "plain tok/s",
            "spec tok/s",
            "speedup",
            "accepted",
            if costs.is_some() { "   ceiling" } else { "" }
        );
    }
    for (i, p) in ids.iter().enumerate() {
        let (mut rp, mut rs) = (Vec::new(), Vec::new());
        let mut last = None;
        for _ in 0..a.reps {
            let s = core.take_speculator();
            spec = spec.or(s);
            let g0 = ridge_engine::generate_in(&mut core, p, &params, |_| true)?;
            if let Some(s) = spec.take() {
                core.set_speculator(s)?;
            }
            let g1 = ridge_engine::generate_in(&mut core, p, &params, |_| true)?;
            if g0.tokens != g1.tokens {
                bail!("prompt {i}: speculative output differs from plain decoding");
            }
            rp.push(rate(&g0));
            rs.push(rate(&g1));
            last = Some(g1);
        }
        let Some(g) = last else { continue };
        // `--reps` is at least 1, so neither is empty.
        let (p_rate, s_rate) = (ridge_bench::median(rp), ridge_bench::median(rs));
        let acc = if g.draft_tokens > 0 {
            g.accepted_tokens as f64 / g.draft_tokens as f64
        } else {
            0.0
        };
        drafted += g.draft_tokens;
        accepted += g.accepted_tokens;
        tokens += g.tokens.len();
        plain_all.push(p_rate);
        spec_all.push(s_rate);
        let speedup = if p_rate > 0.0 { s_rate / p_rate } else { 0.0 };
        // The decode rate counts the tokens after the first (which prefill makes), so the
        // ceiling does too.
        let ceiling = costs.as_ref().map(|c| {
            let gs = lookup_guesses(&NgramProposer::default(), p, &g.tokens, 1, max_k);
            spec_bound(&gs, c)
        });
        if let Some(b) = ceiling {
            ceilings.push(b.ceiling);
        }
        if a.json {
            let mut row = serde_json::json!({"prompt": i, "method": method,
                "prompt_tokens": p.len(), "tokens": g.tokens.len(), "plain_tok_s": p_rate,
                "spec_tok_s": s_rate, "speedup": speedup, "draft_tokens": g.draft_tokens,
                "accepted_tokens": g.accepted_tokens, "acceptance": acc});
            if let Some(b) = ceiling {
                row["ceiling"] = b.ceiling.into();
                row["ceiling_stepwise"] = b.stepwise.into();
                row["every_guess"] = b.every_guess.into();
            }
            println!("{row}");
        } else {
            println!(
                "{i:>3} {:>7} {:>7} {p_rate:>11.1} {s_rate:>11.1} {speedup:>7.2}x {:>8.0}%{}",
                p.len(),
                g.tokens.len(),
                acc * 100.0,
                ceiling.map_or(String::new(), |b| format!(" {:>8.2}x", b.ceiling))
            );
        }
    }
    let speedups: Vec<f64> = plain_all
        .iter()
        .zip(&spec_all)
        .map(|(p, s)| if *p > 0.0 { s / p } else { 0.0 })
        .collect();
    let geomean =
        |v: &[f64]| (v.iter().map(|s| s.max(1e-9).ln()).sum::<f64>() / v.len() as f64).exp();
    let geo = geomean(&speedups);
    let ceiling = (!ceilings.is_empty()).then(|| geomean(&ceilings));
    let acc = if drafted > 0 {
        accepted as f64 / drafted as f64
    } else {
        0.0
    };
    if a.json {
        let mut sum = serde_json::json!({"summary": true, "method": method, "prompts": ids.len(),
            "tokens": tokens, "speedup_geomean": geo, "speedup_min": speedups.iter().copied().fold(f64::INFINITY, f64::min),
            "acceptance": acc, "draft_tokens": drafted, "accepted_tokens": accepted});
        if let (Some(c), Some(costs)) = (ceiling, &costs) {
            sum["ceiling_geomean"] = c.into();
            sum["pass_costs"] = costs.clone().into();
        }
        println!("{sum}");
    } else {
        println!(
            "{method}: speed-up {geo:.2}x (geometric mean over {} prompts), acceptance {:.0}% ({accepted}/{drafted}), outputs identical",
            ids.len(),
            acc * 100.0
        );
        if let (Some(c), Some(costs)) = (ceiling, &costs) {
            let passes: Vec<String> = costs
                .iter()
                .enumerate()
                .skip(1)
                .map(|(m, v)| format!("{}:{v:.2}", m + 1))
                .collect();
            println!(
                "ceiling: {c:.2}x (the best drafting schedule, knowing each answer; measured {:.0}% of it) with passes of m tokens costing [{}] plain steps",
                100.0 * geo / c,
                passes.join(" ")
            );
        }
    }
    Ok(())
}
