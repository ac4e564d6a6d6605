//! How far can self-speculation by early exit go on a given model? For each exit layer `e`,
//! the draft is the target's first `e` layers, its final norm and its head (optionally only the
//! first `n` token ids, the frequent end of a BPE vocabulary); this tool measures, on the
//! model's own greedy continuations of a set of prompts, how often the draft's argmax equals
//! the target's (teacher-forced, which is exactly greedy acceptance) and how often among the
//! positions where the draft's top probability reaches a threshold τ.
//!
//! From those rates it prints an *optimistic* bound on the speed-up of the cheapest scheme
//! (Kangaroo-style: the draft's layers are the target's own, so a position's first `e` layers
//! are computed once whatever happens; a guess is made only when the draft is confident, one
//! guess per step, and verifying it costs nothing beyond a plain step):
//! `S = (1 + q·p) / (1 + h + q·f)`, with `q` the share of confident positions, `p` their
//! acceptance, `f` the first `e` layers' share of a step's bytes (a rejected guess wastes
//! them) and `h` the restricted head's share (paid at every position). Any real scheme does
//! worse: verifying two tokens costs more than one, and chained guesses are accepted less.
//!
//! `cargo run --release -p ridge-engine --example exit_agree -- MODEL PROMPTS [GEN]`, where
//! PROMPTS holds prompts separated by lines of `---`. `TEMPLATE=chatml|gemma|plain` (default
//! chatml) wraps each prompt; `STEP=N` tries every N-th exit layer (default 3).
use ridge_model::{Batch, KvCache, Model, Workspace};
use ridge_tokenizer::Tokenizer;

fn argmax(r: &[f32]) -> (usize, f32) {
    let mut b = (0, f32::MIN);
    for (i, &v) in r.iter().enumerate() {
        if v > b.1 {
            b = (i, v);
        }
    }
    b
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("exit_agree: {msg}");
    std::process::exit(1);
}

fn wrap(prompt: &str) -> String {
    match std::env::var("TEMPLATE").as_deref() {
        Ok("gemma") => {
            format!("<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n")
        }
        Ok("plain") => prompt.to_string(),
        _ => format!("<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"),
    }
}

/// Bytes of the output head (its own tensor, or the embeddings it is tied to).
fn head_bytes(m: &Model) -> usize {
    let t = m.gguf().tensors();
    let find = |name: &str| t.iter().find(|x| x.name == name).map(|x| x.size);
    find("output.weight")
        .or_else(|| find("token_embd.weight"))
        .unwrap_or(0)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        fail("usage: exit_agree MODEL PROMPTS [GEN]");
    }
    let m = Model::load(&a[1]).unwrap_or_else(|e| fail(e));
    let tok = Tokenizer::from_gguf(m.gguf()).unwrap_or_else(|e| fail(e));
    let gen: usize = match a.get(3).map(|s| s.parse()) {
        None => 128,
        Some(Ok(g)) => g,
        Some(Err(e)) => fail(format!("GEN: {e}")),
    };
    let step: usize = std::env::var("STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let text = std::fs::read_to_string(&a[2]).unwrap_or_else(|e| fail(e));
    let cfg = m.config().clone();
    let (nl, vocab) = (cfg.n_layers, cfg.vocab);
    let exits: Vec<usize> = (1..nl).filter(|e| e % step == 0).collect();
    let subs: Vec<usize> = [vocab, 65536, 32768, 16384, 8192]
        .into_iter()
        .filter(|&x| x <= vocab)
        .collect();
    let taus = [0.0f32, 0.5, 0.7, 0.8, 0.9, 0.95];
    // [exit][sub][tau] = (confident positions, of which accepted)
    let mut stats = vec![vec![vec![(0usize, 0usize); taus.len()]; subs.len()]; exits.len()];
    let mut total = 0usize;
    let mut ws = Workspace::new();
    for p in text.split("\n---\n").filter(|p| !p.trim().is_empty()) {
        let mut ids = tok
            .encode_chat_prompt(&wrap(p.trim()))
            .unwrap_or_else(|e| fail(e));
        let plen = ids.len();
        let mut kv = KvCache::new(&cfg, plen + gen + 8);
        let s = kv.add_seq();
        let mut b = Batch::new();
        b.push_seq(&ids, 0, s, true);
        let mut next = argmax(m.forward(&b, &mut kv, &mut ws).unwrap_or_else(|e| fail(e))).0;
        for i in 0..gen {
            ids.push(next as u32);
            b.clear();
            b.push(next as u32, plen + i, s, true);
            next = argmax(m.forward(&b, &mut kv, &mut ws).unwrap_or_else(|e| fail(e))).0;
        }
        // The draft at position j guesses ids[j + 1]; score the generated part.
        let n = ids.len();
        for (ei, &e) in exits.iter().enumerate() {
            let skip: Vec<bool> = (0..nl).map(|i| i >= e).collect();
            let mut kv2 = KvCache::new(&cfg, n + 8);
            let s2 = kv2.add_seq();
            let mut b2 = Batch::new();
            for (j, &t) in ids.iter().enumerate() {
                b2.push(t, j, s2, j + 1 >= plen && j + 1 < n);
            }
            let logits = m
                .forward_skipping(&b2, &mut kv2, &mut ws, Some(&skip))
                .unwrap_or_else(|e| fail(e));
            for (r, row) in logits.chunks_exact(vocab).enumerate() {
                let want = ids[plen + r] as usize;
                for (si, &sub) in subs.iter().enumerate() {
                    let (am, mx) = argmax(&row[..sub]);
                    let conf = 1.0 / row[..sub].iter().map(|v| (v - mx).exp()).sum::<f32>();
                    for (ti, &tau) in taus.iter().enumerate() {
                        if conf >= tau {
                            stats[ei][si][ti].0 += 1;
                            stats[ei][si][ti].1 += usize::from(am == want);
                        }
                    }
                }
            }
        }
        total += gen;
    }
    let step_bytes = m.weight_bytes_per_token() as f64;
    let head = head_bytes(&m) as f64;
    let layers = step_bytes - head;
    println!(
        "{} positions; head {:.1}% of a step's bytes; q = confident share, p = their acceptance, S = bound",
        total,
        100.0 * head / step_bytes
    );
    let mut best = (0.0f64, 0, 0, 0.0f32);
    for (ei, &e) in exits.iter().enumerate() {
        for (si, &sub) in subs.iter().enumerate() {
            let f = layers * e as f64 / nl as f64 / step_bytes;
            let h = head * sub as f64 / vocab as f64 / step_bytes;
            let cells: Vec<String> = taus
                .iter()
                .zip(&stats[ei][si])
                .map(|(tau, &(g, ok))| {
                    let q = g as f64 / total.max(1) as f64;
                    let p = ok as f64 / g.max(1) as f64;
                    let bound = (1.0 + q * p) / (1.0 + h + q * f);
                    if bound > best.0 {
                        best = (bound, e, sub, *tau);
                    }
                    format!("τ{tau}: q{q:.2} p{p:.2} S{bound:.2}")
                })
                .collect();
            println!("exit {e:2} head {sub:6} | {}", cells.join(" | "));
        }
    }
    println!(
        "best bound {:.3}x at exit {}, head {}, τ {}",
        best.0, best.1, best.2, best.3
    );
}
