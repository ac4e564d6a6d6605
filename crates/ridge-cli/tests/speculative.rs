//! Speculative decoding end to end on the real models: `ridge run` prints byte-identical
//! greedy text with and without each proposer, and `ridge serve` speculates per request (with
//! an opt-out), reports draft counts in `timings` and in `/metrics`, and answers the same text.

mod common;

use common::server::{sse, Server};
use common::*;
use serde_json::json;

const PASSAGE: &str = "Rewrite the following passage, keeping every sentence but fixing the spelling.\n\nThe quick brown fox jumpd over the lazy dog. It was a sunny day in the vilage, and the children were playing in the park near the old church. Their parents watched from the benches, talking about the harvest and the wether.";

/// stdout and the stats line of a greedy `ridge run`.
fn greedy_run(model: &str, extra: &[&str], chat: bool, prompt: &str) -> (String, String) {
    let mut args = vec![
        "run",
        "--model",
        model,
        "--temperature",
        "0",
        "--max-tokens",
        "40",
    ];
    args.push(if chat { "--chat" } else { "--raw" });
    args.extend_from_slice(extra);
    args.push(prompt);
    let o = run(&args);
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    (stdout(&o), stderr(&o))
}

/// (drafted, accepted) from a speculative stats line.
fn drafts(line: &str) -> (usize, usize) {
    let num = |key: &str| -> usize {
        let i = line
            .find(key)
            .unwrap_or_else(|| panic!("no {key} in {line}"))
            + key.len();
        line[i..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num("drafted:"), num("accepted:"))
}

#[test]
fn run_output_is_identical_with_every_proposer() {
    let m = smollm2();
    let m = m.to_str().unwrap();
    let (plain, _) = greedy_run(m, &[], true, PASSAGE);
    assert!(plain.contains("quick brown fox"), "{plain}");
    for extra in [
        &["--speculative", "ngram"][..],
        &["--speculative", "self"][..],
        &[
            "--speculative",
            "draft",
            "--draft-model",
            m,
            "--draft-quant",
            "keep",
        ][..],
        // The default draft re-encodes its Q4_1/Q8_0 matrices as Q4_0: another model.
        &["--speculative", "draft", "--draft-model", m][..],
        &["--speculative", "ngram", "--num-speculative-tokens", "2"][..],
    ] {
        let (out, err) = greedy_run(m, extra, true, PASSAGE);
        assert_eq!(out, plain, "{extra:?}");
        let (d, a) = drafts(&err);
        assert!(d > 0 && a > 0 && a <= d, "{extra:?}: {err}");
        if extra.contains(&"keep") {
            // The model as its own draft: every guess holds.
            assert_eq!(a, d, "{err}");
        }
    }
    // Gemma 3 (another architecture, sliding-window layers) with the n-gram proposer and
    // layer skipping.
    let g = gemma3();
    let g = g.to_str().unwrap();
    let prompt =
        "Copy this sentence three times: The cat sat on the mat.\n1. The cat sat on the mat.\n2.";
    let (plain, _) = greedy_run(g, &[], false, prompt);
    for extra in [
        &["--speculative", "ngram"][..],
        &["--speculative", "self"][..],
    ] {
        let (out, err) = greedy_run(g, extra, false, prompt);
        assert_eq!(out, plain, "gemma3 {extra:?}");
        assert!(drafts(&err).0 > 0, "{err}");
    }
}

#[test]
fn bad_speculative_arguments_fail_cleanly() {
    let m = smollm2();
    let m = m.to_str().unwrap();
    let o = run(&["run", "--model", m, "--speculative", "draft", "hi"]);
    assert_clean_failure(&o, "--draft-model");
    let o = run(&["run", "--model", m, "--speculative", "sometimes", "hi"]);
    assert_clean_failure(&o, "sometimes");
    let o = run(&[
        "run",
        "--model",
        m,
        "--speculative",
        "self",
        "--spec-skip-layers",
        "99",
        "hi",
    ]);
    assert_clean_failure(&o, "layer 99");
    let g = gemma3();
    let o = run(&[
        "run",
        "--model",
        m,
        "--speculative",
        "draft",
        "--draft-model",
        g.to_str().unwrap(),
        "hi",
    ]);
    assert_clean_failure(&o, "vocabulary");
}

#[test]
fn serve_speculates_per_request_and_reports_drafts() {
    let s = Server::start(&["--speculative", "ngram"]);
    let prompt = format!("{PASSAGE}\n\nCorrected passage:\nThe quick brown fox");
    let body = |spec: bool| json!({"prompt": prompt, "max_tokens": 40, "temperature": 0, "speculative": spec});
    let (code, on) = s.post("/v1/completions", &body(true));
    assert_eq!(code, 200, "{on}");
    let (code, off) = s.post("/v1/completions", &body(false));
    assert_eq!(code, 200, "{off}");
    assert_eq!(on["choices"][0]["text"], off["choices"][0]["text"]);
    let (d_on, a_on) = (
        on["timings"]["draft_n"].as_u64().unwrap(),
        on["timings"]["draft_accepted_n"].as_u64().unwrap(),
    );
    assert!(d_on > 0 && a_on > 0 && a_on <= d_on, "{}", on["timings"]);
    assert_eq!(off["timings"]["draft_n"], 0, "opted out");
    // Streaming carries the same text.
    let resp = Server::client()
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": prompt, "max_tokens": 40, "temperature": 0, "stream": true}))
        .send()
        .unwrap();
    let (events, done) = sse(resp);
    assert!(done);
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, on["choices"][0]["text"].as_str().unwrap());
    assert_eq!(
        s.metric("ridge:spec_decode_num_draft_tokens_total") as u64,
        d_on + events
            .iter()
            .filter_map(|e| e["timings"]["draft_n"].as_u64())
            .sum::<u64>()
    );
    assert!(s.metric("ridge:spec_decode_num_accepted_tokens_total") >= a_on as f64);
}

#[test]
fn bench_spec_reports_prompt_lookups_ceiling() {
    // `ridge bench spec` with prompt lookup: per prompt the speed-up, and the ceiling of any
    // drafting schedule on that answer with this machine's measured pass costs.
    let m = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(
        &prompts,
        format!("{PASSAGE}\n---\nRepeat exactly: one two three four five six seven eight."),
    )
    .unwrap();
    let o = run(&[
        "bench",
        "spec",
        "--model",
        m.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "--chat",
        "--speculative",
        "ngram",
        "--num-speculative-tokens",
        "4",
        "--gen",
        "32",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for row in &lines[..2] {
        let f = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("no {k}: {row}"));
        // Decoding plainly is one schedule, drafting what holds another, drafting every guess
        // a third: the best schedule is at least each of them.
        assert!(f("ceiling") >= 1.0 - 1e-9, "{row}");
        assert!(f("ceiling") >= f("ceiling_stepwise") - 1e-9, "{row}");
        assert!(f("ceiling") >= f("every_guess") - 1e-9, "{row}");
    }
    // The first answer copies its prompt: some of the lookup's guesses hold.
    assert!(
        lines[0]["accepted_tokens"].as_u64().unwrap() > 0,
        "{}",
        lines[0]
    );
    let sum = &lines[2];
    assert_eq!(sum["summary"], true);
    let costs = sum["pass_costs"].as_array().unwrap();
    assert_eq!(costs.len(), 5, "{sum}");
    assert_eq!(costs[0].as_f64(), Some(1.0));
    let c = sum["ceiling_geomean"].as_f64().unwrap();
    assert!(c >= 1.0 - 1e-9, "{sum}");
}
