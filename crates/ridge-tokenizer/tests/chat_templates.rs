//! The published chat templates of Qwen3 (`<think>` reasoning, tool calls), Qwen3-Coder
//! (XML-style tool calls), gpt-oss (the harmony format) and the 2026 hybrids — Qwen3.5 (thinking
//! on by default, Qwen3-Coder's tool calls), Granite 4.0, LFM2.5 and Nemotron Nano v2 — and the
//! families on llama's layer — SmolLM3, Granite 3.3, Ministral 3, Mistral Small 3.2, Phi-3.5,
//! GLM-4.6, GLM-4.7-Flash and Gemma 4 (and its variant for interleaved thinking) — render
//! as Python's jinja2 renders them. The templates are llama.cpp's copies (`data/templates/`); the expected renders, and the
//! errors of the conversations the templates reject, were produced by jinja2 set up as Hugging
//! Face transformers sets it up (`data/regen_chat_templates.sh`, `data/render_chat_templates.py`).
//! None of it is produced by ridge.

use ridge_tokenizer::{ChatMessage, ChatTemplate};
use serde::Deserialize;

#[derive(Deserialize)]
struct Renders {
    /// The instant jinja2's `strftime_now` formatted (UTC).
    now_unix: i64,
    templates: Vec<TemplateRenders>,
    probes: Vec<Probe>,
}

/// A small template probing one Python behaviour the real templates rely on.
#[derive(Deserialize)]
struct Probe {
    name: String,
    source: String,
    context: serde_json::Map<String, serde_json::Value>,
    rendered: String,
}

#[derive(Deserialize)]
struct TemplateRenders {
    template: String,
    bos_token: String,
    eos_token: String,
    cases: Vec<Case>,
    errors: Vec<ErrorCase>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    messages: Vec<ChatMessage>,
    extra: serde_json::Map<String, serde_json::Value>,
    add_generation_prompt: bool,
    rendered: String,
}

#[derive(Deserialize)]
struct ErrorCase {
    name: String,
    messages: Vec<ChatMessage>,
    extra: serde_json::Map<String, serde_json::Value>,
    add_generation_prompt: bool,
    /// `raise_exception` when the template raised `error` itself, else the Python exception.
    error_kind: String,
    error: String,
}

fn data(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn renders() -> Renders {
    serde_json::from_str(&data("chat_template_renders.json")).unwrap()
}

fn template(t: &TemplateRenders, now_unix: i64) -> ChatTemplate {
    let source = data(&format!("templates/{}", t.template));
    ChatTemplate::new(source, &t.bos_token, &t.eos_token)
        .unwrap_or_else(|e| panic!("{}: {e}", t.template))
        .with_fixed_time(now_unix)
}

/// Where two strings first differ, with some context of each, for a readable failure.
fn first_difference(got: &str, want: &str) -> Option<String> {
    let at = got
        .bytes()
        .zip(want.bytes())
        .position(|(a, b)| a != b)
        .or((got.len() != want.len()).then(|| got.len().min(want.len())))?;
    let around = |s: &str| {
        let mut start = at.saturating_sub(80);
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (at + 80).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        format!("{:?}", &s[start..end])
    };
    Some(format!(
        "first difference at byte {at} (ridge {} bytes, jinja2 {} bytes)\n  ridge:  ...{}...\n  jinja2: ...{}...",
        got.len(),
        want.len(),
        around(got),
        around(want)
    ))
}

#[test]
fn fixtures_cover_the_families() {
    let r = renders();
    let names: Vec<&str> = r.templates.iter().map(|t| t.template.as_str()).collect();
    assert_eq!(
        names,
        [
            "Qwen-Qwen3-0.6B.jinja",
            "Qwen3-Coder.jinja",
            "openai-gpt-oss-120b.jinja",
            "Qwen3.5-4B.jinja",
            "ibm-granite-granite-4.0.jinja",
            "LFM2.5-Instruct.jinja",
            "NVIDIA-Nemotron-Nano-v2.jinja",
            "HuggingFaceTB-SmolLM3-3B.jinja",
            "ibm-granite-granite-3.3-2B-Instruct.jinja",
            "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
            "Mistral-Small-3.2-24B-Instruct-2506.jinja",
            "microsoft-Phi-3.5-mini-instruct.jinja",
            "GLM-4.6.jinja",
            "GLM-4.7-Flash.jinja",
            "google-gemma-4-31B-it.jinja",
            "google-gemma-4-31B-it-interleaved.jinja",
            "deepseek-ai-DeepSeek-V3.1.jinja",
            "moonshotai-Kimi-K2.jinja",
        ]
    );
    for t in &r.templates {
        assert!(t.cases.len() >= 8, "{}", t.template);
    }
}

/// Every conversation of every template: ridge's render is jinja2's, byte for byte.
#[test]
fn templates_render_as_jinja2() {
    let r = renders();
    let mut failures = Vec::new();
    let mut count = 0;
    for t in &r.templates {
        let chat = template(t, r.now_unix);
        for c in &t.cases {
            count += 1;
            match chat.render_with(&c.messages, c.add_generation_prompt, &c.extra) {
                Err(e) => failures.push(format!("{} {}: render failed: {e}", t.template, c.name)),
                Ok(got) => {
                    if let Some(d) = first_difference(&got, &c.rendered) {
                        failures.push(format!("{} {}: {d}", t.template, c.name));
                    }
                }
            }
        }
    }
    assert!(count >= 30, "{count} cases");
    assert!(
        failures.is_empty(),
        "{} of {count} renders differ from jinja2:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The Python behaviours the templates lean on, one at a time: `str()` of lists, dicts and
/// floats (printed and through the `string` filter), `repr` escapes, `tojson`, string methods,
/// `items`, namespaces, slices, loop controls and neighbours, `strftime_now`.
#[test]
fn python_behaviours_match_jinja2() {
    let r = renders();
    let mut failures = Vec::new();
    for p in &r.probes {
        let t = ChatTemplate::new(p.source.as_str(), "", "")
            .unwrap_or_else(|e| panic!("{}: {e}", p.name))
            .with_fixed_time(r.now_unix);
        match t.render_with(&[], false, &p.context) {
            Err(e) => failures.push(format!("{}: render failed: {e}", p.name)),
            Ok(got) => {
                if let Some(d) = first_difference(&got, &p.rendered) {
                    failures.push(format!("{}: {d}", p.name));
                }
            }
        }
    }
    assert!(r.probes.len() >= 9);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The renders depend on what they should: reasoning, kwargs and the date reach the template.
#[test]
fn renders_carry_reasoning_kwargs_and_the_date() {
    let r = renders();
    let case = |file: &str, name: &str| -> String {
        let t = r.templates.iter().find(|t| t.template == file).unwrap();
        let c = t.cases.iter().find(|c| c.name == name).unwrap();
        c.rendered.clone()
    };
    let q = "Qwen-Qwen3-0.6B.jinja";
    assert!(case(q, "enable_thinking_false")
        .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert!(case(q, "enable_thinking_true").ends_with("<|im_start|>assistant\n"));
    // Earlier turns lose their reasoning, the last answer keeps it.
    let m = case(q, "multi_turn_last_assistant_keeps_think");
    assert!(!m.contains("greet") && m.contains("<think>\nSimple sum.\n</think>\n\n4"));
    assert!(case(q, "reasoning_content_field").contains("<think>\nNo divisor up to 9.\n</think>"));
    let g = "openai-gpt-oss-120b.jinja";
    assert!(case(g, "user_only").contains("Current date: 2025-08-05\n"));
    assert!(case(g, "user_only").contains("Reasoning: medium\n"));
    assert!(case(g, "developer_reasoning_high").contains("Reasoning: high\n"));
    assert!(case(g, "final_turn_keeps_thinking")
        .ends_with("<|channel|>analysis<|message|>Simple sum.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>"));
    // Gemma 4: thinking off closes an empty thought in the generation prompt; on, the system
    // turn asks for it; a pending call's reasoning is kept, and its results are awaited.
    let g = "google-gemma-4-31B-it.jinja";
    assert!(case(g, "user_only").ends_with("<|turn>model\n<|channel>thought\n<channel|>"));
    assert!(case(g, "enable_thinking_true").starts_with("<bos><|turn>system\n<|think|>\n"));
    assert!(case(g, "enable_thinking_true").ends_with("<|turn>model\n"));
    assert!(case(g, "tool_call_pending").ends_with(
        "<|turn>model\n<|channel>thought\nNeed the clock.\n<channel|><|tool_call>call:now{}<tool_call|><|tool_response>"
    ));
    assert!(case(g, "tool_call_typed_arguments").contains(
        "call:search_files{case_sensitive:true,filters:[{ext:<|\"|>rs<|\"|>,min_size:-1}],label:None,"
    ));
}

/// The conversations the templates reject fail the render with an error (never a panic or a
/// render); where the template raised, the error carries its message.
#[test]
fn rejected_conversations_are_errors() {
    let r = renders();
    let mut count = 0;
    for t in &r.templates {
        let chat = template(t, r.now_unix);
        for c in &t.errors {
            count += 1;
            let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                chat.render_with(&c.messages, c.add_generation_prompt, &c.extra)
            }));
            let got = rendered.unwrap_or_else(|_| panic!("{} {}: panicked", t.template, c.name));
            let e = match got {
                Ok(text) => panic!(
                    "{} {}: rendered, jinja2 failed with {}: {}\n{text}",
                    t.template, c.name, c.error_kind, c.error
                ),
                Err(e) => e.to_string(),
            };
            if c.error_kind == "raise_exception" {
                assert!(e.contains(&c.error), "{} {}: {e}", t.template, c.name);
            }
        }
    }
    assert!(count >= 5, "{count} error cases");
}

/// Without a pinned clock, `strftime_now` formats the current date (servers keep that).
#[test]
fn the_clock_is_the_current_time_unless_pinned() {
    let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
    let year: i64 = t.render(&[], false).unwrap().parse().unwrap();
    assert!(year >= 2025, "{year}");
    let pinned = t.with_fixed_time(0);
    assert_eq!(pinned.render(&[], false).unwrap(), "1970");
}
