//! The ceiling of prompt lookup (`--speculative ngram`) on a prompt set on this machine, with
//! the lookup's sizes open to change: `ridge bench spec --speculative ngram` reports the same
//! ceiling for the engine's own lookup beside the measured speed-up; this tool lets `MIN_N`
//! (shortest suffix matched, default 2) and `MAX_K` (most guesses per step) vary without a
//! speculative run. See `ridge_engine::spec::spec_bound` for the method.
//!
//! `cargo run --release -p ridge-engine --example lookup_bound -- MODEL PROMPTS [GEN] [MAX_K]`
//! (PROMPTS: prompts separated by lines of `---`, each sent as one user message through the
//! model's chat template; GEN default 128; MAX_K default 7). It prints, per prompt and as the
//! geometric mean: the ceiling (the best schedule, knowing the answer), drafting exactly what
//! holds step by step, and drafting every guess.
use ridge_engine::spec::{lookup_guesses, pass_costs, spec_bound, NgramProposer};
use ridge_engine::{generate, GenerateParams, SamplingParams};
use ridge_model::Model;
use ridge_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("lookup_bound: {msg}");
    std::process::exit(1);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        fail("usage: lookup_bound MODEL PROMPTS [GEN] [MAX_K]");
    }
    let num = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (gen, max_k) = (num(3, 128), num(4, 7).clamp(1, 31));
    let min_n = std::env::var("MIN_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(NgramProposer::default().min_n);
    let lookup = NgramProposer {
        min_n,
        ..NgramProposer::default()
    };
    ridge_kernels::pool::init(2);
    let m = Model::load(&a[1]).unwrap_or_else(|e| fail(e));
    let tok = Tokenizer::from_gguf(m.gguf()).unwrap_or_else(|e| fail(e));
    let tmpl = ChatTemplate::from_gguf(m.gguf(), &tok).unwrap_or_else(|e| fail(e));
    let params = GenerateParams {
        max_tokens: gen,
        sampling: SamplingParams::greedy(),
        stop_tokens: tok.eog_ids(),
        constraint: None,
    };
    let text = std::fs::read_to_string(&a[2]).unwrap_or_else(|e| fail(e));
    let mut answers = Vec::new();
    for p in text.split("\n---\n").filter(|p| !p.trim().is_empty()) {
        let msg = [ChatMessage::new("user", p.trim())];
        let rendered = tmpl.render(&msg, true).unwrap_or_else(|e| fail(e));
        let prompt = tok
            .encode_chat_prompt(&rendered)
            .unwrap_or_else(|e| fail(e));
        // The engine's own greedy answer, as `ridge bench spec` makes it.
        let answer = generate(&m, &prompt, &params, |_| true)
            .unwrap_or_else(|e| fail(e))
            .tokens;
        answers.push((prompt, answer));
    }
    let at = answers
        .iter()
        .map(|(p, g)| p.len() + g.len() / 2)
        .sum::<usize>()
        / answers.len().max(1);
    let c = pass_costs(&m, at, max_k + 1, 7).unwrap_or_else(|e| fail(e));
    print!("pass of T tokens after {at} positions, in plain steps:");
    for (t, v) in c.iter().enumerate().skip(1) {
        print!(" T={}:{v:.2}", t + 1);
    }
    println!(
        "\nlookup: suffixes of {}..={} tokens, at most {max_k} guesses",
        lookup.min_n, lookup.max_n
    );
    println!(
        "{:>3} {:>7} {:>8} {:>8} {:>8}",
        "#", "tokens", "ceiling", "stepwise", "every"
    );
    let mut logs = [0.0f64; 3];
    for (i, (prompt, answer)) in answers.iter().enumerate() {
        // As `ridge bench spec`: the tokens after the first, which prefill makes.
        let b = spec_bound(&lookup_guesses(&lookup, prompt, answer, 1, max_k), &c);
        let s = [b.ceiling, b.stepwise, b.every_guess];
        for (l, v) in logs.iter_mut().zip(s) {
            *l += v.ln();
        }
        println!(
            "{i:>3} {:>7} {:>7.2}x {:>7.2}x {:>7.2}x",
            answer.len(),
            s[0],
            s[1],
            s[2]
        );
    }
    let n = answers.len().max(1) as f64;
    println!(
        "geometric mean: ceiling {:.2}x, stepwise {:.2}x, every guess {:.2}x",
        (logs[0] / n).exp(),
        (logs[1] / n).exp(),
        (logs[2] / n).exp()
    );
}
