//! End-to-end on the real Gemma 3 270M (Q4_K_M: Q5_0, Q4_K, Q6_K, Q8_0 weights, SentencePiece
//! vocabulary, sliding-window layers): perplexity against the float64 reference
//! (`tools/reference/gemma3_ref.py`), the greedy answer to a factual prompt against the
//! reference's greedy ids, and `chat` on a model without a chat template.

mod common;
use common::*;
use serde_json::Value;

fn perplexity(activations: &str, chunks: usize) -> (f64, f64) {
    perplexity_vs_reference(&gemma3(), "gemma3_reference.json", activations, chunks, &[])
}

#[test]
fn perplexity_is_within_half_a_percent_of_the_f64_reference() {
    // The bar, on the whole fixture (4 chunks), with the default activation policy (16-bit
    // blocks or f32 into the attention output and FFN down, 8-bit elsewhere; see
    // act_policy.rs — 8-bit everywhere misses the bar on this model). Measured 22.3795
    // against 22.3799 (−0.002%).
    let (ppl, rel) = perplexity("mixed", 4);
    assert!(
        rel < 0.005,
        "mixed: perplexity {ppl} is {:.3}% off",
        rel * 100.0
    );
}

#[test]
fn f32_activations_reproduce_the_f64_reference() {
    // With f32 activations the only approximations left are f32 arithmetic and the f16 KV
    // cache: the result agrees with the exact evaluation to a few parts per million (the
    // reference's running values are printed to 8 significant digits).
    let (ppl, rel) = perplexity("f32", 2);
    assert!(
        rel < 1e-4,
        "f32: perplexity {ppl} is {:.5}% off",
        rel * 100.0
    );
}

#[test]
fn greedy_answer_matches_the_f64_reference() {
    let model = gemma3();
    let r = fixture("gemma3_reference.json");
    let prompt = r["prompt"].as_str().unwrap();
    let o = run(&["tokenize", "--model", model.to_str().unwrap(), prompt]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ids: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(ids, r["prompt_ids"]);
    // The reference's top two logits after the prompt differ by 0.07, so the exact
    // continuation is asserted with f32 activations (exact up to f32 rounding); every policy
    // must still answer Paris.
    for policy in ["f32", "mixed", "int8"] {
        let o = run(&[
            "--activations",
            policy,
            "run",
            "--model",
            model.to_str().unwrap(),
            "--temperature",
            "0",
            "--max-tokens",
            "8",
            prompt,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains("Paris"), "{policy}: {text:?}");
        if policy == "f32" {
            // The reference's 8 greedy tokens, decoded: " The capital of France is Paris.\n".
            let want = r["greedy_8_text"].as_str().unwrap();
            assert!(text.starts_with(want), "{text:?} vs {want:?}");
        }
    }
}

#[test]
fn chat_without_a_template_says_so_and_completes_plainly() {
    let model = gemma3();
    let o = run_with_stdin(
        &[
            "chat",
            "--model",
            model.to_str().unwrap(),
            "--temperature",
            "0",
            "--max-tokens",
            "6",
        ],
        b"The Eiffel Tower is located in the city of\n/exit\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no chat template") && err.contains("plain completion"),
        "{err}"
    );
    let text = stdout(&o);
    assert!(text.trim_start().starts_with("Paris"), "{text:?}");
}
