//! Structured outputs and tool calling end to end: the official OpenAI SDK against a real
//! `ridge serve` on Qwen2.5-Coder 1.5B (schemas sampled at temperature 0.8 must parse and
//! validate under an independent validator; `parse` with Pydantic; a tool-calling loop),
//! speculative decoding under a grammar (same output as without), and the CLI's
//! `--json-schema` / `--grammar`.

mod common;

use common::server::Server;
use common::*;
use serde_json::{json, Value};

#[test]
fn schemas_parse_and_tools_get_called_through_the_openai_sdk() {
    let s = Server::start_model(&qwen2_1_5b(), &[]);
    let schemas = repo().join("tests/data/structured_schemas.json");
    let out = python_check(
        "structured_check.py",
        &[s.base.as_ref(), schemas.as_os_str(), "2".as_ref()],
    );
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["answers"], 8);
    assert_eq!(summary["valid"], 8);
}

#[test]
fn speculative_drafts_under_a_grammar_change_nothing() {
    // Prompt lookup drafts copy the prompt's JSON; the grammar rejects what it forbids, and
    // greedy output is exactly what plain constrained decoding gives.
    let s = Server::start(&["--speculative", "ngram"]);
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 30},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
            "size": {"type": "integer", "minimum": 1, "maximum": 9}
        },
        "required": ["name", "tags", "size"],
        "additionalProperties": false
    });
    let prompt = "Copy this record exactly: {\"name\": \"box\", \"tags\": [\"red\", \"blue\"], \"size\": 4}\nRecord:";
    let body = |spec: bool| {
        json!({"prompt": prompt, "max_tokens": 60, "temperature": 0, "speculative": spec,
               "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}})
    };
    let (code, on) = s.post("/v1/completions", &body(true));
    assert_eq!(code, 200, "{on}");
    let (code, off) = s.post("/v1/completions", &body(false));
    assert_eq!(code, 200, "{off}");
    let text = on["choices"][0]["text"].as_str().unwrap();
    assert_eq!(text, off["choices"][0]["text"].as_str().unwrap());
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert!(
        v["size"].as_i64().is_some_and(|n| (1..=9).contains(&n)),
        "{v}"
    );
    assert!(on["timings"]["draft_n"].as_u64().unwrap() > 0, "{on}");
    assert!(on["timings"]["grammar_compile_ms"].is_number());
    // An unconstrained request reports no compile time.
    let (_, plain) = s.post(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 4}),
    );
    assert!(plain["timings"]["grammar_compile_ms"].is_null(), "{plain}");
}

#[test]
fn bad_grammars_are_400s_naming_the_field() {
    let s = Server::start(&[]);
    let cases = [
        (
            json!({"guided_grammar": "start: (unclosed"}),
            "guided_grammar",
        ),
        (json!({"guided_regex": "(["}), "guided_regex"),
        (
            json!({"guided_json": {"type": "object", "required": ["a"], "properties": {"a": false}}}),
            "guided_json",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/nowhere"}}}}),
            "response_format",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}], "tool_choice": "required"}),
            "tools",
        ),
    ];
    for (extra, param) in cases {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (code, v) = s.post("/v1/chat/completions", &body);
        assert_eq!(code, 400, "{extra}: {v}");
        assert_eq!(v["error"]["param"], param, "{extra}: {v}");
    }
    assert_eq!(s.get("/health").0, 200);
}

#[test]
fn run_takes_a_json_schema_or_a_grammar() {
    let m = smollm2();
    let m = m.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"color":{"enum":["red","green"]},"count":{"type":"integer","minimum":1,"maximum":5}},"required":["color","count"],"additionalProperties":false}"#,
    )
    .unwrap();
    let o = run(&[
        "run",
        "--model",
        m,
        "--json-schema",
        schema.to_str().unwrap(),
        "--temperature",
        "0.8",
        "--seed",
        "3",
        "Describe a ball as JSON.",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value =
        serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    assert!(
        ["red", "green"].contains(&v["color"].as_str().unwrap()),
        "{v}"
    );
    assert!((1..=5).contains(&v["count"].as_i64().unwrap()), "{v}");
    assert!(stderr(&o).contains("finish: Stop"), "{}", stderr(&o));
    let grammar = dir.path().join("g.lark");
    std::fs::write(&grammar, "start: (\"yes\" | \"no\") \".\"\n").unwrap();
    let o = run(&[
        "run",
        "--model",
        m,
        "--grammar",
        grammar.to_str().unwrap(),
        "Is the sky blue?",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        ["yes.", "no."].contains(&stdout(&o).trim()),
        "{}",
        stdout(&o)
    );
    // A broken schema file: one line, exit 1.
    std::fs::write(&schema, "{\"type\": ").unwrap();
    assert_clean_failure(
        &run(&[
            "run",
            "--model",
            m,
            "--json-schema",
            schema.to_str().unwrap(),
            "x",
        ]),
        "s.json",
    );
}
