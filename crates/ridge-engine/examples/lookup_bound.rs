//! How fast can prompt lookup (`--speculative ngram`) possibly make a set of prompts on this
//! machine? The answer has two parts that this tool measures separately: what the lookup
//! *could* guess (teacher-forced on the model's own greedy answers: at each position, how
//! many of its guesses the answer then confirms) and what verification *costs* here (a pass
//! of `T` tokens against a plain one-token step, timed on the same model, alternating).
//!
//! From both it prints, per prompt and as the geometric mean the bench reports:
//! - `bound`: the best any drafting policy can do, even one that knows the answer in advance
//!   (dynamic programming over positions: at position `p` draft any `k` up to the guesses that
//!   hold there, pay `c(1 + k)`, move to `p + k + 1`);
//! - `myopic`: drafting exactly the guesses that will hold at each step (clairvoyant, greedy);
//! - `always`: drafting every guess the lookup makes (no policy at all).
//!
//! A bar above `bound` cannot be met by any sizing policy: only better guesses or cheaper
//! verification passes can move it.
//!
//! `cargo run --release -p ridge-engine --example lookup_bound -- MODEL PROMPTS [GEN] [MAX_K]`
//! (PROMPTS: prompts separated by lines of `---`, each sent as one user message through the
//! model's chat template; GEN default 128; MAX_K, the most guesses per step, default 7).
//! `MIN_N=1` also lets single-token suffixes match (the engine's lookup needs two).
use ridge_engine::spec::NgramProposer;
use ridge_model::{Batch, KvCache, Model, Workspace};
use ridge_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use std::time::Instant;

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("lookup_bound: {msg}");
    std::process::exit(1);
}

fn argmax(r: &[f32]) -> u32 {
    let mut b = (0, f32::MIN);
    for (i, &v) in r.iter().enumerate() {
        if v > b.1 {
            b = (i, v);
        }
    }
    b.0 as u32
}

/// The model's greedy answer to `prompt` (at most `gen` tokens, ending at an end-of-generation
/// token, which is kept).
fn greedy(m: &Model, prompt: &[u32], gen: usize, eog: &[u32], ws: &mut Workspace) -> Vec<u32> {
    let mut kv = KvCache::new(m.config(), prompt.len() + gen + 8);
    let s = kv.add_seq();
    let mut b = Batch::new();
    b.push_seq(prompt, 0, s, true);
    let mut next = argmax(m.forward(&b, &mut kv, ws).unwrap_or_else(|e| fail(e)));
    let mut out = Vec::new();
    while out.len() < gen {
        out.push(next);
        if eog.contains(&next) {
            break;
        }
        b.clear();
        b.push(next, prompt.len() + out.len() - 1, s, true);
        next = argmax(m.forward(&b, &mut kv, ws).unwrap_or_else(|e| fail(e)));
    }
    out
}

/// Milliseconds of a `T`-token pass for `T = 1..=max_t` after `at` positions (medians of
/// passes alternating over `T`).
fn pass_costs(m: &Model, at: usize, max_t: usize, ws: &mut Workspace) -> Vec<f64> {
    let mut kv = KvCache::new(m.config(), at + max_t + 8);
    let seq = kv.add_seq();
    let prompt: Vec<u32> = (0..at as u32).map(|i| 100 + (i * 37) % 5000).collect();
    let mut b = Batch::new();
    b.push_seq(&prompt, 0, seq, true);
    m.forward(&b, &mut kv, ws).unwrap_or_else(|e| fail(e));
    let mut ms = vec![Vec::new(); max_t];
    for _ in 0..7 {
        for t in 1..=max_t {
            b.clear();
            for j in 0..t {
                b.push(200 + j as u32, at + j, seq, true);
            }
            let s = Instant::now();
            m.forward(&b, &mut kv, ws).unwrap_or_else(|e| fail(e));
            ms[t - 1].push(s.elapsed().as_secs_f64() * 1e3);
            kv.rewind(seq, at);
        }
    }
    ms.into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect()
}

/// At each position of `answer`: how many guesses the lookup makes (at most `max_k`) and how
/// many of them the answer confirms.
fn guesses(
    lookup: &NgramProposer,
    prompt: &[u32],
    answer: &[u32],
    max_k: usize,
) -> (Vec<usize>, Vec<usize>) {
    let mut seen = prompt.to_vec();
    let mut guess = Vec::new();
    let (mut made, mut out) = (Vec::new(), Vec::new());
    for p in 0..answer.len() {
        guess.clear();
        lookup.lookup(&seen, max_k, &mut guess);
        let ok = guess
            .iter()
            .zip(&answer[p..])
            .take_while(|(g, a)| g == a)
            .count();
        made.push(guess.len());
        out.push(ok);
        seen.push(answer[p]);
    }
    (made, out)
}

/// Speed-ups over plain decoding (`[bound, myopic, always]`) of an answer whose positions hold
/// `held[p]` guesses out of `made[p]`, with `c[m - 1]` the relative cost of an `m`-token pass.
fn speedups(held: &[usize], made: &[usize], c: &[f64]) -> [f64; 3] {
    let n = held.len();
    let mut best = vec![0.0f64; n + 1];
    for p in (0..n).rev() {
        best[p] = (0..=held[p])
            .map(|k| c[k] + best[(p + k + 1).min(n)])
            .fold(f64::INFINITY, f64::min);
    }
    let walk = |k_at: &dyn Fn(usize) -> usize| {
        let (mut p, mut cost) = (0, 0.0);
        while p < n {
            cost += c[k_at(p)];
            p += held[p] + 1;
        }
        cost
    };
    let myopic = walk(&|p| held[p]);
    let always = walk(&|p| made[p]);
    [n as f64 / best[0], n as f64 / myopic, n as f64 / always]
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
    let eog = tok.eog_ids();
    let text = std::fs::read_to_string(&a[2]).unwrap_or_else(|e| fail(e));
    let mut ws = Workspace::new();
    let mut answers = Vec::new();
    for p in text.split("\n---\n").filter(|p| !p.trim().is_empty()) {
        let msg = [ChatMessage::new("user", p.trim())];
        let rendered = tmpl.render(&msg, true).unwrap_or_else(|e| fail(e));
        let prompt = tok
            .encode_chat_prompt(&rendered)
            .unwrap_or_else(|e| fail(e));
        let answer = greedy(&m, &prompt, gen, &eog, &mut ws);
        answers.push((prompt, answer));
    }
    let at = answers
        .iter()
        .map(|(p, g)| p.len() + g.len() / 2)
        .sum::<usize>()
        / answers.len().max(1);
    let ms = pass_costs(&m, at, max_k + 1, &mut ws);
    let c: Vec<f64> = ms.iter().map(|v| v / ms[0]).collect();
    println!(
        "pass of T tokens after {at} positions, in plain steps ({:.1} ms):",
        ms[0]
    );
    for (t, v) in c.iter().enumerate() {
        print!(" T={}:{v:.2}", t + 1);
    }
    println!(
        "\nlookup: suffixes of {}..={} tokens, at most {max_k} guesses",
        lookup.min_n, lookup.max_n
    );
    println!(
        "{:>3} {:>7} {:>7} {:>7} {:>7}",
        "#", "tokens", "bound", "myopic", "always"
    );
    let mut logs = [0.0f64; 3];
    for (i, (prompt, answer)) in answers.iter().enumerate() {
        let (made, h) = guesses(&lookup, prompt, answer, max_k);
        let s = speedups(&h, &made, &c);
        for (l, v) in logs.iter_mut().zip(s) {
            *l += v.ln();
        }
        println!(
            "{i:>3} {:>7} {:>6.2}x {:>6.2}x {:>6.2}x",
            answer.len(),
            s[0],
            s[1],
            s[2]
        );
    }
    let n = answers.len().max(1) as f64;
    println!(
        "geometric mean: bound {:.2}x, myopic {:.2}x, always {:.2}x",
        (logs[0] / n).exp(),
        (logs[1] / n).exp(),
        (logs[2] / n).exp()
    );
}
