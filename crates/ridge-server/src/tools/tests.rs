//! Tool-call tests: each family's real template is detected as its family, the calls it
//! renders parse back (whole, one character at a time, and split anywhere), forced-call
//! grammars compile in llguidance and accept a call in the family's syntax that parses back,
//! and malformed or merely call-like text stays content.

use std::sync::Arc;

use ridge_engine::{Constraint, Grammars};
use ridge_tokenizer::ChatMessage;

use super::parse::merge_content;
use super::*;
use crate::reasoning::{self, ReasoningParser, Segment};

fn feed(chunks: &[&str]) -> Vec<Piece> {
    let mut p = CallParser::new(&FORMATS[1]);
    let mut out: Vec<Piece> = chunks.iter().flat_map(|c| p.push(c)).collect();
    out.extend(p.finish());
    merge_content(out)
}

#[test]
fn calls_split_out_of_streamed_text_at_any_boundary() {
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    let want = vec![
        Piece::Content("Let me check.\n".into()),
        Piece::Call(Call {
            name: "get_weather".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
        }),
        Piece::Content("\n".into()),
        Piece::Call(Call {
            name: "now".into(),
            arguments: "{}".into(),
        }),
    ];
    assert_eq!(feed(&[text]), want);
    // One character at a time, and in uneven chunks: the same pieces.
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(feed(&refs), want);
    let (a, b) = text.split_at(17);
    assert_eq!(feed(&[a, b]), want);
}

#[test]
fn text_that_only_looks_like_a_call_stays_text() {
    assert_eq!(
        feed(&["a <tool", "_c", "x> b"]),
        vec![Piece::Content("a <tool_cx> b".into())]
    );
    assert_eq!(
        feed(&["<tool_call>not json</tool_call>"]),
        vec![Piece::Content("<tool_call>not json</tool_call>".into())]
    );
    assert_eq!(
        feed(&["x<tool_call>{\"name\": \"f\""]),
        vec![Piece::Content("x<tool_call>{\"name\": \"f\"".into())]
    );
}

#[test]
fn the_required_grammar_names_every_function() {
    let t = Tools {
        defs: vec![
            json!({"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "b"}}),
        ],
        choice: ToolChoice::Required,
        parallel: false,
        format: format("hermes"),
        tags: ("<[7]>".into(), "\"</tool_call>\"".into()),
        tag_refs: Vec::new(),
        start_token: None,
    };
    let Some(GrammarSpec::Lark(g)) = t.grammar() else {
        panic!("no grammar");
    };
    assert!(
        g.starts_with("start: call \"\\n\"?\ncall: <[7]> \"\\n\" %json {"),
        "{g}"
    );
    assert!(g.trim_end().ends_with("\"\\n\" \"</tool_call>\""), "{g}");
    assert!(
        g.contains("{\"const\":\"a\"}") && g.contains("{\"const\":\"b\"}"),
        "{g}"
    );
    let named = Tools {
        choice: ToolChoice::Named("b".into()),
        ..t
    };
    let Some(GrammarSpec::Lark(g)) = named.grammar() else {
        panic!("no grammar");
    };
    assert!(!g.contains("{\"const\":\"a\"}"), "{g}");
}

/// A call by function name, with its arguments.
type Named<'a> = (&'a str, Value);

fn weather_tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        }}),
        json!({"type": "function", "function": {
            "name": "now",
            "description": "The current time.",
            "parameters": {"type": "object", "properties": {}},
        }}),
    ]
}

fn format(name: &str) -> &'static ToolFormat {
    FORMATS
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no format {name}"))
}

/// `text` through fresh parsers whole, one character at a time, and in two pieces split at
/// every character boundary; all must agree. Returns the whole-text result.
fn parse_all(make: impl Fn() -> CallParser, text: &str) -> Vec<Piece> {
    let run = |pieces: &[&str], stream: bool| {
        let mut p = if stream { make().streaming() } else { make() };
        let mut out: Vec<Piece> = pieces.iter().flat_map(|c| p.push(c)).collect();
        out.extend(p.finish());
        collapse(merge_content(out))
    };
    let whole = run(&[text], false);
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(run(&refs, false), whole, "one char at a time: {text:?}");
    agrees(&run(&refs, true), &whole, text);
    for (i, _) in text.char_indices().skip(1) {
        let (a, b) = text.split_at(i);
        assert_eq!(run(&[a, b], false), whole, "split at {i}: {text:?}");
        agrees(&run(&[a, b], true), &whole, text);
    }
    whole
}

/// A streamed reading (collapsed) is the whole reading, or — where the whole reading found a
/// malformed block and left it as text — a reading that began a call there and ended it with
/// what it had (a begun call cannot be taken back).
fn agrees(streamed: &[Piece], whole: &[Piece], text: &str) {
    let calls = |p: &[Piece]| p.iter().filter(|p| matches!(p, Piece::Call(_))).count();
    if streamed != whole {
        assert!(
            calls(streamed) > calls(whole),
            "streamed {streamed:?}\n  whole {whole:?}\n  text {text:?}"
        );
    }
}

/// Streamed calls (`CallBegin`, `CallArgs`…, `CallEnd`) as whole `Call`s, checking that the
/// pieces spell the call.
fn collapse(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for p in pieces {
        match p {
            Piece::CallBegin(name) => {
                assert!(open.is_none(), "a call began inside another");
                open = Some((name, String::new()));
            }
            Piece::CallArgs(t) => open
                .as_mut()
                .expect("arguments outside a call")
                .1
                .push_str(&t),
            Piece::CallEnd(c) => {
                let (name, args) = open.take().expect("an end without a begin");
                assert_eq!(
                    (&name, &args),
                    (&c.name, &c.arguments),
                    "streamed pieces differ"
                );
                out.push(Piece::Call(c));
            }
            p => {
                assert!(open.is_none(), "{p:?} inside a streamed call");
                out.push(p);
            }
        }
    }
    assert!(open.is_none(), "a call never ended");
    merge_content(out)
}

/// The content of `text` after the reasoning parser (checked at every split as well).
fn content_after_reasoning(format: reasoning::ReasoningFormat, prompt: &str, text: &str) -> String {
    let run = |pieces: &[&str]| {
        let mut p = ReasoningParser::new(format, prompt);
        let mut segs: Vec<Segment> = pieces.iter().flat_map(|c| p.push(c)).collect();
        segs.extend(p.finish());
        segs.into_iter()
            .filter_map(|s| match s {
                Segment::Content(c) => Some(c),
                Segment::Reasoning(_) => None,
            })
            .collect::<String>()
    };
    let whole = run(&[text]);
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(run(&refs), whole, "one char at a time: {text:?}");
    whole
}

/// The calls among `pieces`, arguments parsed, and the rest as text.
fn calls_and_text(pieces: &[Piece]) -> (Vec<(String, Value)>, String) {
    let mut calls = Vec::new();
    let mut text = String::new();
    for p in pieces {
        match p {
            Piece::Call(c) => calls.push((
                c.name.clone(),
                serde_json::from_str(&c.arguments).unwrap_or_else(|e| panic!("{c:?}: {e}")),
            )),
            Piece::Content(t) => text.push_str(t),
            p => panic!("{p:?} after collapse"),
        }
    }
    (calls, text)
}

/// The generation prompt and the assistant turn `template` renders for `calls` (the text
/// the model writes for that turn: after the prompt, without the end-of-turn marker).
fn rendered_turn(template: &ChatTemplate, calls: &[(&str, Value)]) -> (String, String) {
    rendered_turn_with(template, calls, Map::new())
}

/// [`rendered_turn`] with extra template variables.
fn rendered_turn_with(
    template: &ChatTemplate,
    calls: &[(&str, Value)],
    mut vars: Map<String, Value>,
) -> (String, String) {
    vars.insert("tools".into(), Value::Array(weather_tools()));
    let user = ChatMessage::new(
        "user",
        "What is the weather in Paris for 3 days, and the time?",
    );
    let mut turn = ChatMessage::new("assistant", "");
    turn.tool_calls = Some(
        calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": format!("call{i:04}x"), "type": "function",
                       "function": {"name": name, "arguments": args}})
            })
            .collect(),
    );
    let prompt = template
        .render_with(std::slice::from_ref(&user), true, &vars)
        .unwrap();
    let full = template.render_with(&[user, turn], false, &vars).unwrap();
    let cut = if full.starts_with(&prompt) {
        prompt.len()
    } else {
        // The generation prompt differs from the history's turn header (an opened
        // `<think>`): cut after the last tag or line the two share.
        let common = prompt
            .char_indices()
            .zip(full.chars())
            .find(|((_, a), b)| a != b)
            .map_or(prompt.len(), |((i, _), _)| i);
        full[..common].rfind(['>', '\n']).map_or(0, |i| i + 1)
    };
    let mut out = full[cut..].to_string();
    // The turn ends at its first end-of-turn marker (what follows is the template's own).
    let end = [
        "<|im_end|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "</s>",
        "<｜end▁of▁sentence｜>",
        "<|end_of_text|>",
        // Gemma 4: the turn's end, or the results the calls wait for.
        "<turn|>",
        "<|tool_response>",
        // Nemotron-H: `<SPECIAL_12>` is its end of turn (the template writes it by name).
        "<SPECIAL_12>",
    ]
    .iter()
    .filter_map(|m| out.find(m))
    .min();
    if let Some(e) = end {
        out.truncate(e);
    }
    (prompt, out)
}

#[test]
fn each_family_is_detected_from_its_template() {
    let cases = [
        ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
        ("Qwen-Qwen3-0.6B.jinja", "hermes"),
        ("Qwen-QwQ-32B.jinja", "hermes"),
        ("Qwen3-Coder.jinja", "qwen3-coder"),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"),
        ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3"),
        ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3"),
        ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"),
        ("unsloth-mistral-Devstral-Small-2507.jinja", "mistral"),
        ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral"),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo"),
        (
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
            "deepseek-r1",
        ),
        ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1"),
        ("openai-gpt-oss-120b.jinja", "harmony"),
        // The 2026 hybrids whose templates write a format ridge reads.
        ("Qwen3.5-4B.jinja", "qwen3-coder"),
        ("ibm-granite-granite-4.0.jinja", "hermes"),
        // Granite 3.x asks for `<|tool_call|>` and a JSON list in its system prompt (its
        // template renders no calls back, so the round trip below cannot cover it).
        ("ibm-granite-granite-3.3-2B-Instruct.jinja", "granite3"),
        ("GLM-4.6.jinja", "glm"),
        ("GLM-4.7-Flash.jinja", "glm"),
        ("google-gemma-4-31B-it.jinja", "gemma4"),
        ("google-gemma-4-31B-it-interleaved.jinja", "gemma4"),
        ("moonshotai-Kimi-K2.jinja", "kimi-k2"),
        ("NVIDIA-Nemotron-Nano-v2.jinja", "nemotron"),
        // LFM2.5 lists its tools as plain text and renders no calls back (the parse tests
        // below cover it).
        ("LFM2.5-Instruct.jinja", "lfm2.5"),
    ];
    for (file, want) in cases {
        let t = test_template(file);
        assert_eq!(format_of(&t).map(|f| f.name), Some(want), "{file}");
    }
    assert_eq!(
        reasoning::format_of(&test_template(
            "mistralai-Ministral-3-14B-Reasoning-2512.jinja"
        )),
        Some(reasoning::ReasoningFormat::MistralThink)
    );
    for file in [
        "google-gemma-4-31B-it.jinja",
        "google-gemma-4-31B-it-interleaved.jinja",
    ] {
        assert_eq!(
            reasoning::format_of(&test_template(file)),
            Some(reasoning::ReasoningFormat::GemmaChannel),
            "{file}"
        );
    }
}

#[test]
fn calls_each_template_renders_parse_back() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let paris = json!({"city": "Paris", "days": 3});
    let two = [("get_weather", paris.clone()), ("now", json!({}))];
    let one = [("get_weather", paris.clone())];
    let cases: [(&str, &[Named], Option<reasoning::ReasoningFormat>); 21] = [
        ("moonshotai-Kimi-K2.jinja", &two, None),
        ("NVIDIA-Nemotron-Nano-v2.jinja", &two, None),
        ("Qwen-Qwen2.5-7B-Instruct.jinja", &two, None),
        (
            "Qwen-Qwen3-0.6B.jinja",
            &two,
            Some(reasoning::ReasoningFormat::Think),
        ),
        ("Qwen3-Coder.jinja", &two, None),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", &one, None),
        ("meta-llama-Llama-3.2-3B-Instruct.jinja", &one, None),
        ("meta-llama-Llama-3.3-70B-Instruct.jinja", &one, None),
        ("Mistral-Small-3.2-24B-Instruct-2506.jinja", &two, None),
        ("unsloth-mistral-Devstral-Small-2507.jinja", &two, None),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", &two, None),
        (
            "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
            &two,
            Some(reasoning::ReasoningFormat::MistralThink),
        ),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", &two, None),
        ("deepseek-ai-DeepSeek-V3.1.jinja", &two, None),
        (
            "openai-gpt-oss-120b.jinja",
            &one,
            Some(reasoning::ReasoningFormat::Harmony),
        ),
        // Qwen3.5 opens `<think>` in its generation prompt (thinking on by default).
        (
            "Qwen3.5-4B.jinja",
            &two,
            Some(reasoning::ReasoningFormat::Think),
        ),
        ("ibm-granite-granite-4.0.jinja", &two, None),
        // GLM-4.6 writes newlines between the parts of a call, GLM-4.7 none; 4.7 opens
        // `<think>` in its generation prompt.
        (
            "GLM-4.6.jinja",
            &two,
            Some(reasoning::ReasoningFormat::Think),
        ),
        (
            "GLM-4.7-Flash.jinja",
            &two,
            Some(reasoning::ReasoningFormat::Think),
        ),
        // Gemma 4 closes an empty thought in its generation prompt (thinking off).
        (
            "google-gemma-4-31B-it.jinja",
            &two,
            Some(reasoning::ReasoningFormat::GemmaChannel),
        ),
        (
            "google-gemma-4-31B-it-interleaved.jinja",
            &two,
            Some(reasoning::ReasoningFormat::GemmaChannel),
        ),
    ];
    for (file, calls, thinking) in cases {
        let t = test_template(file);
        let Some(fmt) = format_of(&t) else {
            panic!("{file}: no format");
        };
        let (prompt, turn) = rendered_turn(&t, calls);
        let text = match thinking {
            Some(r) => content_after_reasoning(r, &prompt, &turn),
            None => turn.clone(),
        };
        let want: Vec<(String, Value)> = calls
            .iter()
            .map(|(n, a)| (n.to_string(), a.clone()))
            .collect();
        // The forced-call grammar writes what the template writes (except where the template
        // adds what models do not generate: Mistral's call ids, harmony's recipient placement).
        let ids = file.contains("Mistral-") || file.contains("gpt-oss");
        if !ids {
            let tools = Tools::new(weather_tools(), ToolChoice::Required, true, fmt, |t| {
                tok.token_id(t)
            });
            let Some(spec) = tools.grammar() else {
                panic!("{file}: no grammar");
            };
            assert!(accepts(&grammars, &tok, &spec, &text), "{file}: {text:?}");
        }
        // Without the tools (types unknown), and with them.
        let defs = weather_tools();
        for with_tools in [false, true] {
            let pieces = if with_tools {
                parse_all(|| CallParser::with_tools(fmt, &defs), &text)
            } else {
                parse_all(|| CallParser::new(fmt), &text)
            };
            let (got, rest) = calls_and_text(&pieces);
            if with_tools || !matches!(fmt.syntax, Syntax::QwenXml | Syntax::GlmXml) {
                assert_eq!(got, want, "{file} ({with_tools}): {turn:?}");
            } else {
                // Untyped XML values stay strings.
                assert_eq!(got[0].1["days"], json!("3"), "{file}");
            }
            assert!(rest.trim().is_empty(), "{file}: left {rest:?} of {turn:?}");
        }
    }
}

#[test]
fn qwq_thoughts_then_a_call() {
    let t = test_template("Qwen-QwQ-32B.jinja");
    let mut vars = Map::new();
    vars.insert("enable_thinking".into(), true.into());
    let (prompt, turn) = rendered_turn_with(&t, &[("now", json!({}))], vars);
    assert!(prompt.ends_with("<think>\n"), "{prompt}");
    let out = format!("The user wants the time.\n</think>\n\n{turn}");
    let text = content_after_reasoning(reasoning::ReasoningFormat::Think, &prompt, &out);
    let (calls, rest) = calls_and_text(&parse_all(|| CallParser::new(format("hermes")), &text));
    assert_eq!(calls, vec![("now".to_string(), json!({}))]);
    assert!(rest.trim().is_empty(), "{rest:?}");
}

#[test]
fn call_variants_models_write() {
    let tools = weather_tools();
    let cases: &[(&str, &str, &[&str])] = &[
        // Mistral's older array form under a newer template, and with a call id.
        ("mistral", "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]", &["now"]),
        ("mistral", "[TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{}", &["now"]),
        ("mistral-nemo", "[TOOL_CALLS]now[ARGS]{}", &["now"]),
        // Granite 3.x: a space after the tag, `arguments` as a JSON string.
        (
            "granite3",
            "<|tool_call|> [{\"name\": \"now\", \"arguments\": \"{}\"}]",
            &["now"],
        ),
        // Llama: after `<|python_tag|>`, several separated by `;`, `arguments` for `parameters`.
        ("llama3", "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}", &["now"]),
        (
            "llama3",
            "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"arguments\": {}}",
            &["now", "now"],
        ),
        // DeepSeek: V3.1's form under R1's template, and the reverse.
        (
            "deepseek-r1",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            &["now"],
        ),
        (
            "deepseek-v3.1",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            &["now"],
        ),
        // Hermes with an array body, and Qwen3-Coder's XML under a Hermes template.
        (
            "hermes",
            "<tool_call>\n[{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": \"{}\"}]\n</tool_call>",
            &["now", "now"],
        ),
        ("hermes", "<tool_call>\n<function=now>\n</function>\n</tool_call>", &["now"]),
        // Qwen3-Coder: a missing `</parameter>`, and a JSON body.
        (
            "qwen3-coder",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n3\n</function>\n</tool_call>",
            &["get_weather"],
        ),
        ("qwen3-coder", "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", &["now"]),
        // The fallbacks: a fenced call (Qwen2.5-Coder 1.5B), a bare one, a fenced array.
        (
            "hermes",
            "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
            &["get_weather"],
        ),
        ("hermes", "\n{\"name\": \"now\", \"arguments\": {}}\n", &["now"]),
        (
            "deepseek-v3.1",
            "```\n[{\"name\": \"now\", \"parameters\": {}}, {\"name\": \"now\", \"arguments\": {}}]\n```",
            &["now", "now"],
        ),
        ("harmony", "```json\n{\"name\": \"now\", \"arguments\": {}}\n```", &["now"]),
    ];
    for (fmt, text, names) in cases {
        let pieces = parse_all(|| CallParser::with_tools(format(fmt), &tools), text);
        let (calls, rest) = calls_and_text(&pieces);
        let got: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(&got, names, "{fmt}: {text:?}");
        assert!(rest.trim().is_empty(), "{fmt}: {text:?} left {rest:?}");
    }
    // Qwen3-Coder's values are typed by the schema.
    let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\n3\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    let pieces = parse_all(
        || CallParser::with_tools(format("qwen3-coder"), &tools),
        text,
    );
    let (calls, _) = calls_and_text(&pieces);
    assert_eq!(calls[0].1, json!({"city": "3", "days": 3}));
}

#[test]
fn a_fenced_call_after_text_is_a_call_and_the_text_content() {
    let tools = weather_tools();
    let text = "I'll check.\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```\n";
    let pieces = parse_all(|| CallParser::with_tools(format("hermes"), &tools), text);
    assert_eq!(
        pieces,
        vec![
            Piece::Content("I'll check.\n".into()),
            Piece::Call(Call {
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into()
            }),
            Piece::Content("\n".into()),
        ]
    );
}

#[test]
fn call_like_text_stays_content() {
    let tools = weather_tools();
    let cases: &[(&str, &str)] = &[
        // An unknown name, fenced or bare.
        ("hermes", "```json\n{\"name\": \"get_wether\", \"arguments\": {}}\n```"),
        ("hermes", "{\"name\": \"delete_all\", \"arguments\": {}}"),
        // A bare call that is not the whole output.
        ("hermes", "{\"name\": \"now\", \"arguments\": {}} is how you would call it."),
        ("llama3", "{\"name\": \"now\", \"parameters\": {}} then more"),
        // Text that mentions JSON, and JSON that is no call.
        ("hermes", "Call it as {\"name\": \"now\", \"arguments\": {}} in your code."),
        ("hermes", "{\"city\": \"Paris\"}"),
        ("llama3", "{\"name\": \"Ada\", \"age\": 36}"),
        // Code blocks that are not calls, with JSON-looking text after them.
        ("hermes", "```python\nprint(1)\n```\n{\"name\": \"now\", \"arguments\": {}}"),
        ("hermes", "```json\n{\"a\": 1}\n```"),
        ("hermes", "```json\n{\"name\": \"now\", \"arguments\": {}}\nmore\n```"),
        // Malformed native calls.
        ("hermes", "<tool_call>\n{\"name\": \"now\", \"arguments\": {</tool_call> after"),
        ("qwen3-coder", "<tool_call>\n<function=>\n</function>\n</tool_call>"),
        ("mistral", "[TOOL_CALLS]now[ARGS]not json at all"),
        ("mistral", "[TOOL_CALLS] hello"),
        ("mistral-nemo", "[TOOL_CALLS][1, 2]"),
        ("deepseek-r1", "<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜>"),
        ("deepseek-v3.1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
        ("llama3", "<|python_tag|>print(1)"),
    ];
    for (fmt, text) in cases {
        let pieces = parse_all(|| CallParser::with_tools(format(fmt), &tools), text);
        assert_eq!(pieces, vec![Piece::Content(text.to_string())], "{fmt}");
    }
    // Without the tools, no fallback applies.
    let text = "```json\n{\"name\": \"now\", \"arguments\": {}}\n```";
    let pieces = parse_all(|| CallParser::new(format("hermes")), text);
    assert_eq!(pieces, vec![Piece::Content(text.to_string())]);
    // A malformed harmony call is its arguments' text, without control tokens.
    let text = format!("{HARMONY_CALL_START}now<|channel|>commentary json<|message|>oops<|call|>");
    let pieces = parse_all(|| CallParser::with_tools(format("harmony"), &tools), &text);
    assert_eq!(pieces, vec![Piece::Content("oops".into())]);
}

#[test]
fn every_prefix_of_every_call_is_safe() {
    let tools = weather_tools();
    let samples = [
        ("hermes", "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"),
        ("qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
        ("llama3", "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}"),
        ("mistral", "[TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{\"a\": [1, \"]\"]}"),
        ("mistral-nemo", "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"),
        ("deepseek-r1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
        ("harmony", "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>"),
        ("hermes", "```json\n{\"name\": \"now\", \"arguments\": {\"s\": \"\\\"}```\"}}\n```"),
        ("gemma4", "<|tool_call>call:get_weather{city:<|\"|>a,}:<|\"|>,n:[1,{x:null}]}<tool_call|>"),
    ];
    for (fmt, text) in samples {
        for (i, _) in text.char_indices() {
            // A truncated call (max_tokens) is content or a call, never lost or a panic.
            let pieces = parse_all(|| CallParser::with_tools(format(fmt), &tools), &text[..i]);
            let (calls, rest) = calls_and_text(&pieces);
            if fmt != "harmony" && calls.is_empty() {
                assert_eq!(rest, &text[..i], "{fmt}");
            }
        }
    }
}

/// A byte-level vocabulary with every format's tags as control tokens (as the families'
/// vocabularies have them), so that grammars refer to the tags by token.
fn synthetic_tokenizer() -> Arc<Tokenizer> {
    use ridge_gguf::{ArrayValue, GgufFile, GgufWriter, MetadataValue};
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| ridge_model::synthetic::gpt2_byte_char(b).to_string())
        .collect();
    tokens.push("<|endoftext|>".into());
    // With harmony's `<|return|>` and `<|call|>` ending the turn, `<|end|>` does not (as in
    // gpt-oss's vocabulary).
    tokens.push("<|return|>".into());
    for f in FORMATS {
        for t in f.tags {
            if !tokens.iter().any(|x| x == t) {
                tokens.push(t.to_string());
            }
        }
    }
    let mut types = vec![1i32; 256];
    types.resize(tokens.len(), 3);
    // Two ordinary tokens that end a tag written out and carry a byte past it (no merges
    // make them: tests feed them by id).
    for t in [">Ċ", ">x"] {
        tokens.push(t.into());
        types.push(1);
    }
    let mut w = GgufWriter::new();
    w.meta(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .meta("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
    .meta("tokenizer.ggml.pre", MetadataValue::String("gpt-2".into()))
    .meta(
        "tokenizer.ggml.tokens",
        MetadataValue::Array(ArrayValue::String(tokens)),
    )
    .meta(
        "tokenizer.ggml.token_type",
        MetadataValue::Array(ArrayValue::I32(types)),
    )
    .meta(
        "tokenizer.ggml.merges",
        MetadataValue::Array(ArrayValue::String(vec![])),
    )
    .meta("tokenizer.ggml.bos_token_id", MetadataValue::U32(256))
    .meta("tokenizer.ggml.eos_token_id", MetadataValue::U32(256))
    .meta("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false));
    let g = GgufFile::from_bytes("<memory>", w.to_bytes()).unwrap();
    Arc::new(Tokenizer::from_gguf(&g).unwrap())
}

/// Whether the compiled `spec` accepts `text` whole.
fn accepts(grammars: &Grammars, tok: &Tokenizer, spec: &GrammarSpec, text: &str) -> bool {
    accepts_spelled(grammars, tok, spec, text, &[])
}

/// [`accepts`], with the tags in `spelled` written as their text, not as their tokens (as a
/// vocabulary without them as tokens would have them).
fn accepts_spelled(
    grammars: &Grammars,
    tok: &Tokenizer,
    spec: &GrammarSpec,
    text: &str,
    spelled: &[&str],
) -> bool {
    let mut c = grammars
        .compile(spec)
        .unwrap_or_else(|e| panic!("{e}: {spec:?}"));
    let mut ids = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let next = spelled
            .iter()
            .filter_map(|t| rest.find(t).map(|i| (i, *t)))
            .min_by_key(|&(i, _)| i);
        let (head, tag, tail) = match next {
            Some((i, t)) => (&rest[..i], t, &rest[i + t.len()..]),
            None => (rest, "", ""),
        };
        ids.extend(tok.encode(head, false, true).unwrap());
        ids.extend(tok.encode(tag, false, false).unwrap());
        rest = tail;
    }
    for t in ids {
        if c.commit(t).is_err() {
            return false;
        }
    }
    c.is_accepting()
}

/// Two calls in each format's own syntax (`weather_tools`).
const CALL_CASES: [(&str, &str); 14] = [
    ("hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"),
    ("qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>"),
    ("llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}; {\"name\": \"now\", \"parameters\": {}}"),
    ("mistral", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 3}[TOOL_CALLS]now[ARGS]{}"),
    ("mistral-nemo", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, {\"name\": \"now\", \"arguments\": {}}]"),
    ("glm", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>now\n</tool_call>"),
    ("granite3", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, {\"name\": \"now\", \"arguments\": {}}]"),
    ("deepseek-r1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    ("deepseek-v3.1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    ("harmony", "<|channel|>analysis<|message|>Need the forecast.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}<|call|>"),
    ("gemma4", "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|><|tool_call>call:now{}<tool_call|>"),
    ("nemotron", "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, {\"name\": \"now\", \"arguments\": {}}]</TOOLCALL>"),
    ("kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3}<|tool_call_end|><|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"),
    ("lfm2", "<|tool_call_start|>[get_weather(city=\"Paris\", days=3), now()]<|tool_call_end|>"),
];

/// Whether `c` lets the model write `text`: each token allowed by the mask when it is
/// written, and the whole accepted.
fn writes(tok: &Tokenizer, c: &mut Constraint, text: &str, vocab: usize) -> bool {
    writes_ids(c, &tok.encode(text, false, true).unwrap(), vocab)
}

/// Whether the grammar lets these tokens be written, one by one, and accepts the result.
fn writes_ids(c: &mut Constraint, ids: &[u32], vocab: usize) -> bool {
    let mut logits = vec![0.0f32; vocab];
    for &t in ids {
        logits.iter_mut().for_each(|l| *l = 0.0);
        if c.apply(&mut logits).is_err() || logits[t as usize] == f32::NEG_INFINITY {
            return false;
        }
        if c.commit(t).is_err() {
            return false;
        }
    }
    c.is_accepting()
}

#[test]
fn under_auto_text_is_free_until_a_call_opens_and_the_call_is_then_a_valid_one() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let vocab = tok.vocab_size();
    for (name, call) in CALL_CASES {
        let tools = Tools::new(weather_tools(), ToolChoice::Auto, true, format(name), |t| {
            tok.token_id(t)
        });
        let lazy = tools.lazy_grammar_after("<|im_start|>assistant\n");
        if matches!(name, "harmony" | "llama3") {
            assert!(
                lazy.is_none(),
                "{name}: no single start token, no lazy grammar"
            );
            continue;
        }
        let Some((GrammarSpec::Lark(g), trigger)) = lazy else {
            panic!("{name}: no lazy grammar")
        };
        let fresh = || {
            grammars
                .compile(&GrammarSpec::Lark(g.clone()))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .after_trigger(trigger)
                .unwrap_or_else(|| panic!("{name}: the grammar does not begin with its trigger"))
        };
        // Text, even text that looks like JSON or names a tool, is free until the trigger.
        let text = "Let me look: {\"name\": \"weather\"} or `now()`? ";
        let mut c = fresh();
        assert!(!c.is_active());
        assert!(writes(&tok, &mut c, text, vocab), "{name}");
        assert!(writes(&tok, &mut c, call, vocab), "{name}: {call}");
        assert!(c.is_active(), "{name}");
        // Once opened, an unoffered tool cannot be called.
        let unoffered = call.replacen("get_weather", "get_forecast", 1);
        let mut c = fresh();
        assert!(
            !writes(&tok, &mut c, &unoffered, vocab),
            "{name}: {unoffered}"
        );
        // The trigger spelled by ordinary tokens opens the grammar as the token does (a
        // small model that saw the tag written out may write it out): the call is then held
        // to the grammar too.
        let tag = tok.token_str(trigger).unwrap().to_string();
        let rest = call
            .strip_prefix(tag.as_str())
            .unwrap_or_else(|| panic!("{name}: {call}"));
        let spelled = |body: &str| {
            let mut ids = tok.encode(text, false, true).unwrap();
            ids.extend(tok.encode(&tag, false, false).unwrap());
            ids.extend(tok.encode(body, false, true).unwrap());
            ids
        };
        assert!(tok.encode(&tag, false, false).unwrap().len() > 1, "{name}");
        let mut c = fresh();
        assert!(writes_ids(&mut c, &spelled(rest), vocab), "{name}: spelled");
        assert!(c.is_active(), "{name}: spelled");
        let mut c = fresh();
        let unoffered_rest = rest.replacen("get_weather", "get_forecast", 1);
        assert!(
            !writes_ids(&mut c, &spelled(&unoffered_rest), vocab),
            "{name}: spelled {unoffered_rest}"
        );
        // With `parallel_tool_calls: false` the grammar ends after one call.
        let mut single = tools.clone();
        single.parallel = false;
        let (spec, _) = single.lazy_grammar_after("").unwrap();
        let mut c = grammars
            .compile(&spec)
            .unwrap()
            .after_trigger(trigger)
            .unwrap();
        assert!(
            !writes(&tok, &mut c, call, vocab),
            "{name}: two calls, one allowed"
        );
    }
    let hermes = |choice| {
        Tools::new(weather_tools(), choice, true, format("hermes"), |t| {
            tok.token_id(t)
        })
    };
    // A tag written out whose last token carries more: the rest is fed to the grammar (a
    // newline is where a call's JSON may begin) or, where the grammar refuses it, the lazy
    // grammar is given up and the output stays free.
    let tools = hermes(ToolChoice::Auto);
    let (spec, trigger) = tools.lazy_grammar_after("").unwrap();
    let ids = |tail: &str, body: &str| {
        let mut v = tok.encode("<tool_call", false, false).unwrap();
        v.push(tok.token_id(tail).unwrap());
        v.extend(tok.encode(body, false, true).unwrap());
        v
    };
    let lazy = || {
        grammars
            .compile(&spec)
            .unwrap()
            .after_trigger(trigger)
            .unwrap()
    };
    let good = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let bad = good.replace("get_weather", "get_forecast");
    let mut c = lazy();
    assert!(writes_ids(&mut c, &ids(">Ċ", good), vocab) && c.is_active());
    assert!(!writes_ids(&mut lazy(), &ids(">Ċ", &bad), vocab));
    let mut c = lazy();
    assert!(writes_ids(&mut c, &ids(">x", &bad), vocab) && !c.is_active());
    // A prompt that leaves thoughts open has no lazy grammar (a tag while thinking is no call).
    assert!(tools
        .lazy_grammar_after("<|im_start|>assistant\n<think>\n")
        .is_none());
    assert!(hermes(ToolChoice::Required)
        .lazy_grammar_after("")
        .is_none());
    // A trigger the grammar does not begin with is refused.
    let (spec, trigger) = tools.lazy_grammar_after("").unwrap();
    let other = tok.token_id("<|endoftext|>").unwrap();
    assert_ne!(other, trigger);
    assert!(grammars
        .compile(&spec)
        .unwrap()
        .after_trigger(other)
        .is_none());
}

/// Claude Code's real tools (their schemas use `propertyNames`, which llguidance does not
/// implement) compile, leniently, for forced and lazy calls alike — the forced choice was a 400.
#[test]
fn claude_code_s_own_tool_schemas_compile() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let body: Value = serde_json::from_str(include_str!(
        "../../tests/data/agents/claude_code_messages.json"
    ))
    .unwrap();
    let defs: Vec<Value> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}})
        })
        .collect();
    assert!(defs.len() > 10);
    assert!(body["tools"].to_string().contains("propertyNames"));
    for choice in [ToolChoice::Required, ToolChoice::Auto] {
        let tools = Tools::new(defs.clone(), choice.clone(), true, format("hermes"), |t| {
            tok.token_id(t)
        });
        let spec = match choice {
            ToolChoice::Auto => tools.lazy_grammar_after("").unwrap().0,
            _ => tools.grammar().unwrap(),
        };
        let mut c = grammars
            .compile(&spec)
            .unwrap_or_else(|e| panic!("{choice:?}: {e}"));
        let call = "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"/tmp/a.txt\"}}\n</tool_call>";
        if choice == ToolChoice::Auto {
            c = c
                .after_trigger(tok.token_id("<tool_call>").unwrap())
                .unwrap();
            assert!(writes(
                &tok,
                &mut c,
                &format!("Reading it. {call}"),
                tok.vocab_size()
            ));
        } else {
            assert!(writes(&tok, &mut c, call, tok.vocab_size()));
        }
    }
}

#[test]
fn forced_calls_in_each_syntax_compile_accept_and_parse_back() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let cases = CALL_CASES;
    for (name, text) in cases {
        let fmt = format(name);
        let tools = Tools::new(weather_tools(), ToolChoice::Required, true, fmt, |t| {
            tok.token_id(t)
        });
        let Some(spec) = tools.grammar() else {
            panic!("{name}: no grammar");
        };
        if let GrammarSpec::Lark(g) = &spec {
            // The tags are the vocabulary's tokens, not their spelling.
            assert_eq!(fmt.tags.is_empty(), !g.contains("<["), "{name}: {g}");
        }
        assert!(
            accepts(&grammars, &tok, &spec, text),
            "{name}: {spec:?}\n{text}"
        );
        // A name that is not offered, and arguments against the schema, are not accepted.
        let wrong = text.replace("get_weather", "get_climate");
        assert!(!accepts(&grammars, &tok, &spec, &wrong), "{name}: {wrong}");
        let wrong = text.replace('3', "\"three\"");
        assert!(!accepts(&grammars, &tok, &spec, &wrong), "{name}: {wrong}");
        // What the grammar accepts parses back to the calls.
        let content = if fmt.syntax == Syntax::Harmony {
            content_after_reasoning(
                reasoning::ReasoningFormat::Harmony,
                "<|start|>assistant",
                text,
            )
        } else {
            text.to_string()
        };
        let (calls, rest) = calls_and_text(&parse_all(|| tools.parser(), &content));
        let mut want = vec![(
            "get_weather".to_string(),
            json!({"city": "Paris", "days": 3}),
        )];
        if fmt.syntax != Syntax::Harmony {
            want.push(("now".to_string(), json!({})));
        }
        assert_eq!(calls, want, "{name}");
        assert!(rest.trim().is_empty(), "{name}: {rest:?}");
        // A named choice admits that function only; without parallel calls, one call.
        let named = Tools {
            choice: ToolChoice::Named("now".into()),
            parallel: false,
            ..tools.clone()
        };
        let Some(spec) = named.grammar() else {
            panic!("{name}: no grammar");
        };
        assert!(!accepts(&grammars, &tok, &spec, text), "{name}: named");
    }
}

/// Pieces of every syntax, for random texts.
const FRAGMENTS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "\n",
    " ",
    "x",
    "é",
    "{",
    "}",
    "[",
    "]",
    ";",
    "<",
    "```",
    "json\n",
    "\"name\": \"now\"",
    ", ",
    "\"arguments\": {}",
    "\"parameters\": {}",
    "<function=now>",
    "</function>",
    "<parameter=days>",
    "3",
    "</parameter>",
    "[TOOL_CALLS]",
    "<|tool_call|>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "now",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "function",
    "<|channel|>",
    "commentary",
    "<|message|>",
    "<|call|>",
    "<|end|>",
    "<|start|>assistant",
    " to=functions.now",
    HARMONY_CALL_START,
    "<think>",
    "</think>",
    "[THINK]",
    "[/THINK]",
    "<|tool_call>",
    "<tool_call|>",
    "call:now{",
    "<|\"|>",
    ":",
    "<|channel>",
    "thought\n",
    "<channel|>",
];

/// Random texts made of [`FRAGMENTS`] (a fixed linear congruential sequence).
fn random_texts(n: usize) -> Vec<String> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |m: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize % m
    };
    (0..n)
        .map(|_| {
            let len = 1 + next(14);
            (0..len).map(|_| FRAGMENTS[next(FRAGMENTS.len())]).collect()
        })
        .collect()
}

#[test]
fn random_text_parses_alike_at_every_split_and_loses_nothing() {
    let tools = weather_tools();
    for text in random_texts(150) {
        for f in FORMATS {
            for with_tools in [false, true] {
                let pieces = if with_tools {
                    parse_all(|| CallParser::with_tools(f, &tools), &text)
                } else {
                    parse_all(|| CallParser::new(f), &text)
                };
                let calls = pieces
                    .iter()
                    .filter(|p| matches!(p, Piece::Call(_)))
                    .count();
                if calls == 0 && f.syntax != Syntax::Harmony {
                    let (_, rest) = calls_and_text(&pieces);
                    assert_eq!(rest, text, "{}", f.name);
                }
            }
        }
        for r in [
            reasoning::ReasoningFormat::Think,
            reasoning::ReasoningFormat::MistralThink,
            reasoning::ReasoningFormat::Harmony,
            reasoning::ReasoningFormat::GemmaChannel,
        ] {
            content_after_reasoning(r, "", &text);
            content_after_reasoning(r, "<think>\n", &text);
        }
    }
}

#[test]
fn forced_calls_after_a_prompt_that_opens_the_thoughts_let_the_model_think_first() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let tools = Tools::new(
        weather_tools(),
        ToolChoice::Named("now".into()),
        false,
        format("hermes"),
        |t| tok.token_id(t),
    );
    let call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    // QwQ's and DeepSeek-R1's generation prompts leave `<think>` open.
    let prompt = "<|im_start|>user\nWhat time is it?<|im_end|>\n<|im_start|>assistant\n<think>\n";
    let Some(spec) = tools.grammar_after(prompt) else {
        panic!("no grammar");
    };
    for thoughts in ["", "The user wants the time. <tags> are fine.\n"] {
        let text = format!("{thoughts}</think>\n\n{call}");
        assert!(accepts(&grammars, &tok, &spec, &text), "{text}");
        let content = content_after_reasoning(reasoning::ReasoningFormat::Think, prompt, &text);
        let (calls, _) = calls_and_text(&parse_all(|| tools.parser(), &content));
        assert_eq!(calls, vec![("now".to_string(), json!({}))]);
    }
    // The call without closing the thoughts would be read as thoughts: not allowed.
    assert!(!accepts(&grammars, &tok, &spec, call));
    // Where the prompt does not open them, the grammar is the plain one.
    assert_eq!(
        tools.grammar_after("<|im_start|>assistant\n"),
        tools.grammar()
    );
}

/// Gemma 4's calls: one or several, arguments typed by the notation itself (strings between
/// marks, numbers, booleans, null and Python's `None`, nested objects and arrays), whitespace
/// where models put it, strings holding the notation's own characters.
#[test]
fn gemma_calls_parse_with_their_types() {
    let q = "<|\"|>";
    let cases: Vec<(String, Vec<(&str, Value)>)> = vec![
        (
            format!("<|tool_call>call:get_weather{{city:{q}Paris{q},days:3}}<tool_call|>"),
            vec![("get_weather", json!({"city": "Paris", "days": 3}))],
        ),
        (
            "<|tool_call>call:now{}<tool_call|><|tool_call>call:now{}<tool_call|>".to_string(),
            vec![("now", json!({})), ("now", json!({}))],
        ),
        (
            format!(
                "<|tool_call>call:plan{{stops:[{{city:{q}Rome{q},nights:2}},{{city:{q}Nice{q}}}],\
                 budget:{{amount:1200.5,currency:{q}EUR{q}}},flexible:true,note:null,tags:[],\
                 extra:None,ratio:-1e-05,off:false}}<tool_call|>"
            ),
            vec![(
                "plan",
                json!({"stops": [{"city": "Rome", "nights": 2}, {"city": "Nice"}],
                       "budget": {"amount": 1200.5, "currency": "EUR"}, "flexible": true,
                       "note": null, "tags": [], "extra": null, "ratio": -1e-05, "off": false}),
            )],
        ),
        // Strings hold commas, braces, colons, brackets, quotes, newlines and tags.
        (
            format!(
                "<|tool_call>call:run_shell{{command:{q}echo \"a, b}}: {{c}}\" 'd' [e]\n<b>{q},\
                 timeout:30.5}}<tool_call|>"
            ),
            vec![(
                "run_shell",
                json!({"command": "echo \"a, b}: {c}\" 'd' [e]\n<b>", "timeout": 30.5}),
            )],
        ),
        // Whitespace after brackets, commas and colons; marked keys (the template's nested
        // keys with escape_keys); a trailing comma; a bare word for a string.
        (
            format!(
                "<|tool_call>call:f{{ a: {q}x{q}, {q}b c{q}: [ 1, 2 ], d: {{ e: {q}{q} }}, g: word, }}<tool_call|>"
            ),
            vec![(
                "f",
                json!({"a": "x", "b c": [1, 2], "d": {"e": ""}, "g": "word"}),
            )],
        ),
    ];
    for (text, want) in cases {
        let want: Vec<(String, Value)> = want
            .iter()
            .map(|(n, a)| (n.to_string(), a.clone()))
            .collect();
        let defs = weather_tools();
        for with_tools in [false, true] {
            let pieces = if with_tools {
                parse_all(|| CallParser::with_tools(format("gemma4"), &defs), &text)
            } else {
                parse_all(|| CallParser::new(format("gemma4")), &text)
            };
            let (calls, rest) = calls_and_text(&pieces);
            assert_eq!(calls, want, "{text}");
            assert!(rest.is_empty(), "{text}: left {rest:?}");
        }
    }
    // Text around the calls is content.
    let text = "Let me look.<|tool_call>call:now{}<tool_call|>".to_string();
    let pieces = parse_all(|| CallParser::new(format("gemma4")), &text);
    assert_eq!(
        pieces,
        vec![
            Piece::Content("Let me look.".into()),
            Piece::Call(Call {
                name: "now".into(),
                arguments: "{}".into()
            }),
        ]
    );
}

#[test]
fn malformed_gemma_calls_stay_content() {
    let q = "<|\"|>";
    let cases = [
        "<|tool_call>now{}<tool_call|>".to_string(),
        "<|tool_call>call:{}<tool_call|>".to_string(),
        "<|tool_call>call:now<tool_call|>".to_string(),
        "<|tool_call>call:now{a:}<tool_call|>".to_string(),
        format!("<|tool_call>call:now{{a:{q}open}}<tool_call|>"),
        "<|tool_call>call:now{a:1 b:2}<tool_call|>".to_string(),
        "<|tool_call>call:now{a:[1,2}<tool_call|>".to_string(),
        "<|tool_call>call:now{}} trailing<tool_call|>".to_string(),
        "<|tool_call>call:bad name{}<tool_call|>".to_string(),
        format!("<|tool_call>call:now{{{}}}<tool_call|>", "a:[".repeat(100)),
        // Unfinished at the end of the output.
        "<|tool_call>call:now{a:1".to_string(),
    ];
    for text in &cases {
        let pieces = parse_all(|| CallParser::new(format("gemma4")), text);
        assert_eq!(pieces, vec![Piece::Content(text.clone())], "{text}");
    }
    // A nesting deeper than ridge reads is text, not a stack overflow.
    let deep = format!(
        "<|tool_call>call:now{{a:{}1{}}}<tool_call|>",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut p = CallParser::new(format("gemma4"));
    let mut out = p.push(&deep);
    out.extend(p.finish());
    assert_eq!(merge_content(out), vec![Piece::Content(deep)]);
}

/// The calls jinja2 rendered through Gemma 4's templates (the fixtures of ridge-tokenizer's
/// template tests) read back to the arguments the conversations gave, value for value.
#[test]
fn gemma_calls_jinja2_rendered_parse_back_to_their_arguments() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ridge-tokenizer/tests/data/chat_template_renders.json");
    let renders: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut checked = 0;
    for t in renders["templates"].as_array().unwrap() {
        let file = t["template"].as_str().unwrap();
        if !file.starts_with("google-gemma-4") {
            continue;
        }
        assert_eq!(
            format_of(&test_template(file)).map(|f| f.name),
            Some("gemma4")
        );
        for case in t["cases"].as_array().unwrap() {
            let want: Vec<(String, Value)> = case["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|m| m.get("tool_calls")?.as_array())
                .flatten()
                .map(|c| {
                    let f = &c["function"];
                    (
                        f["name"].as_str().unwrap().to_string(),
                        f["arguments"].clone(),
                    )
                })
                .collect();
            if want.is_empty() {
                continue;
            }
            // The calls as the template wrote them, each block in order.
            let rendered = case["rendered"].as_str().unwrap();
            let blocks: String = rendered
                .split("<|tool_call>")
                .skip(1)
                .map(|b| {
                    let end = b.find("<tool_call|>").unwrap() + "<tool_call|>".len();
                    format!("<|tool_call>{}", &b[..end])
                })
                .collect();
            let pieces = parse_all(|| CallParser::new(format("gemma4")), &blocks);
            let (got, rest) = calls_and_text(&pieces);
            assert_eq!(got, want, "{file} {}", case["name"]);
            assert!(rest.is_empty(), "{file}: {rest:?}");
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked}");
}

/// Gemma 4's forced calls follow nested schemas in its notation, with the mark as a token or
/// as text, and what they accept parses back; the template's own rendering of typed
/// arguments is accepted.
#[test]
fn gemma_grammar_follows_nested_schemas() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let trip = json!({"type": "function", "function": {
    "name": "plan_trip",
    "parameters": {
        "type": "object",
        "properties": {
            "stops": {"type": "array", "items": {"type": "object",
                      "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}},
                      "required": ["city"]}},
            "Budget": {"type": "object",
                       "properties": {"amount": {"type": "number"},
                                      "currency": {"type": "string", "enum": ["EUR", "USD"]}},
                       "required": ["amount"]},
            "flexible": {"type": ["boolean", "null"]},
            "mode": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "meta": {"type": "object"},
            "any": {},
        },
        "required": ["stops"],
    }}});
    let q = "<|\"|>";
    let good = [
        // dictsort's order: case-insensitive.
        format!("<|tool_call>call:plan_trip{{any:[1,{q}x{q},{{k:null}}],Budget:{{amount:12.5,currency:{q}EUR{q}}},flexible:null,meta:{{a:{{b:[true]}}}},mode:7,stops:[{{city:{q}Rome, \"IT\"{q},nights:2}},{{city:{q}{q}}}]}}<tool_call|>"),
        "<|tool_call>call:plan_trip{stops:[]}<tool_call|>".to_string(),
        format!("<|tool_call>call:plan_trip{{flexible:false,mode:{q}fast{q},stops:[{{city:{q}a{q}}}]}}<tool_call|>"),
    ];
    let bad = [
        // Missing the required `stops`, out of order, an enum value not listed, a wrong type,
        // a mark inside a string, JSON's quotes.
        "<|tool_call>call:plan_trip{flexible:true}<tool_call|>".to_string(),
        "<|tool_call>call:plan_trip{stops:[],flexible:true}<tool_call|>".to_string(),
        format!("<|tool_call>call:plan_trip{{Budget:{{amount:1,currency:{q}GBP{q}}},stops:[]}}<tool_call|>"),
        format!("<|tool_call>call:plan_trip{{stops:[{{city:{q}a{q},nights:1.5}}]}}<tool_call|>"),
        format!("<|tool_call>call:plan_trip{{stops:[{{city:{q}a{q}b{q}}}]}}<tool_call|>"),
        "<|tool_call>call:plan_trip{\"stops\":[]}<tool_call|>".to_string(),
    ];
    let defs = vec![trip];
    for quote_token in [true, false] {
        let tools = Tools::new(
            defs.clone(),
            ToolChoice::Required,
            true,
            format("gemma4"),
            |t| {
                if t == GEMMA_QUOTE && !quote_token {
                    None
                } else {
                    tok.token_id(t)
                }
            },
        );
        let Some(spec) = tools.grammar() else {
            panic!("no grammar");
        };
        let spelled: &[&str] = if quote_token { &[] } else { &[GEMMA_QUOTE] };
        for text in &good {
            assert!(
                accepts_spelled(&grammars, &tok, &spec, text, spelled),
                "{quote_token}: {text}\n{spec:?}"
            );
            let (calls, rest) = calls_and_text(&parse_all(|| tools.parser(), text));
            assert_eq!(calls.len(), 1, "{text}");
            assert!(rest.is_empty(), "{rest:?}");
        }
        for text in &bad {
            assert!(
                !accepts_spelled(&grammars, &tok, &spec, text, spelled),
                "{quote_token}: {text}"
            );
        }
    }
    // The call the template renders for the fixtures' tools is what the grammar forces.
    let t = test_template("google-gemma-4-31B-it.jinja");
    let args = json!({"stops": [{"city": "Rome", "nights": 2}], "flexible": true,
                      "Budget": {"amount": 900, "currency": "USD"}, "mode": "slow"});
    let user = ChatMessage::new("user", "Plan.");
    let mut turn = ChatMessage::new("assistant", "");
    turn.tool_calls = Some(vec![
        json!({"type": "function", "function": {"name": "plan_trip", "arguments": args}}),
    ]);
    let mut vars = Map::new();
    vars.insert("tools".into(), Value::Array(defs.clone()));
    let full = t.render_with(&[user, turn], false, &vars).unwrap();
    let start = full.find("<|tool_call>").unwrap();
    let end = full.find("<tool_call|>").unwrap() + "<tool_call|>".len();
    let call = &full[start..end];
    let tools = Tools::new(defs, ToolChoice::Required, false, format("gemma4"), |t| {
        tok.token_id(t)
    });
    let spec = tools.grammar().unwrap();
    assert!(accepts(&grammars, &tok, &spec, call), "{call}");
    let (calls, _) = calls_and_text(&parse_all(|| tools.parser(), call));
    assert_eq!(calls, vec![("plan_trip".to_string(), args)]);
}

/// With thinking on, Gemma 4 may think before a forced call; with it off (the prompt closed
/// an empty thought) the grammar is the plain one.
#[test]
fn gemma_forced_calls_may_follow_thoughts() {
    let tok = synthetic_tokenizer();
    let grammars = Grammars::new(tok.clone()).unwrap();
    let t = test_template("google-gemma-4-31B-it.jinja");
    let user = [ChatMessage::new("user", "What time is it?")];
    let mut vars = Map::new();
    vars.insert("tools".into(), Value::Array(weather_tools()));
    let off = t.render_with(&user, true, &vars).unwrap();
    vars.insert("enable_thinking".into(), true.into());
    let on = t.render_with(&user, true, &vars).unwrap();
    assert!(on.ends_with("<|turn>model\n"), "{on}");
    for close_token in [true, false] {
        let spelled: &[&str] = if close_token { &[] } else { &["<channel|>"] };
        let tools = Tools::new(
            weather_tools(),
            ToolChoice::Named("now".into()),
            false,
            format("gemma4"),
            |t| {
                if t == "<channel|>" && !close_token {
                    None
                } else {
                    tok.token_id(t)
                }
            },
        );
        assert_eq!(tools.grammar_after(&off), tools.grammar());
        let Some(spec) = tools.grammar_after(&on) else {
            panic!("no grammar");
        };
        let call = "<|tool_call>call:now{}<tool_call|>";
        for thoughts in [
            "",
            "<|channel>thought\nThe user wants the <time>.\n<channel|>",
        ] {
            let text = format!("{thoughts}{call}");
            assert!(
                accepts_spelled(&grammars, &tok, &spec, &text, spelled),
                "{text}\n{spec:?}"
            );
            let content =
                content_after_reasoning(reasoning::ReasoningFormat::GemmaChannel, &on, &text);
            let (calls, rest) = calls_and_text(&parse_all(|| tools.parser(), &content));
            assert_eq!(calls, vec![("now".to_string(), json!({}))]);
            assert!(rest.is_empty(), "{rest:?}");
        }
        assert!(!accepts_spelled(
            &grammars,
            &tok,
            &spec,
            "<|channel>thought\nhm<|tool_call>call:now{}<tool_call|>",
            spelled
        ));
    }
}

/// Gemma 4's interleaved variant reads a call's results on the calling turn: an OpenAI-style
/// conversation (`tool` messages) folds into what jinja2 rendered for the same conversation
/// written that way; the current template, which reads `tool` messages, is left alone.
#[test]
fn gemma_tool_messages_fold_into_the_calling_turn_for_the_interleaved_template() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ridge-tokenizer/tests/data/chat_template_renders.json");
    let renders: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let want = |file: &str| -> (Value, String) {
        let t = renders["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["template"] == file)
            .unwrap();
        let c = t["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "tool_responses_field")
            .unwrap();
        (
            c["extra"].clone(),
            c["rendered"].as_str().unwrap().to_string(),
        )
    };
    let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let tool = |id: &str, content: &str| {
        let mut m = ChatMessage::new("tool", content);
        m.tool_call_id = Some(id.into());
        m
    };
    let mut calling = ChatMessage::new("assistant", "");
    calling.reasoning_content = Some("Two tools.".into());
    calling.tool_calls = Some(vec![
        call("call_1", "get_weather", json!({"city": "Paris"})),
        call("call_2", "now", json!({})),
    ]);
    let msgs = vec![
        ChatMessage::new("user", "Weather in Paris and the time?"),
        calling,
        // Answered out of order: matched by id.
        tool("call_2", "14:05"),
        tool("call_1", "{\"temp\": 21, \"sky\": \"clear\"}"),
        ChatMessage::new("assistant", "21 °C, 14:05."),
        ChatMessage::new("user", "Thanks."),
    ];
    let file = "google-gemma-4-31B-it-interleaved.jinja";
    let t = test_template(file);
    let Some(folded) = fold_tool_results(&t, &msgs) else {
        panic!("not folded");
    };
    assert_eq!(folded.len(), 3);
    assert_eq!(
        folded[1].tool_responses,
        Some(vec![
            json!({"name": "now", "response": "14:05"}),
            json!({"name": "get_weather", "response": {"temp": 21, "sky": "clear"}}),
        ])
    );
    // jinja2 rendered the results in the calls' order.
    let mut in_order = folded.clone();
    if let Some(r) = in_order[1].tool_responses.as_mut() {
        r.reverse();
    }
    let (extra, rendered) = want(file);
    let t = ChatTemplate::new(t.source(), "<bos>", "<eos>").unwrap();
    let extra = extra.as_object().cloned().unwrap_or_default();
    assert_eq!(t.render_with(&in_order, true, &extra).unwrap(), rendered);
    // The current template reads tool messages itself.
    let current = test_template("google-gemma-4-31B-it.jinja");
    assert!(fold_tool_results(&current, &msgs).is_none());
    // Other families are never folded; nor is a conversation without results.
    assert!(fold_tool_results(&test_template("Qwen-Qwen3-0.6B.jinja"), &msgs).is_none());
    assert!(fold_tool_results(&test_template(file), &msgs[..2]).is_none());
}

/// A long call written one character at a time: its name goes out long before its end, and
/// its arguments in many pieces (the JSON formats by the character, the XML ones a parameter
/// at a time) that spell the final arguments.
#[test]
fn long_arguments_stream_as_they_are_written() {
    let tools = vec![
        json!({"type": "function", "function": {"name": "write", "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}, "n": {"type": "integer"}},
        }}}),
    ];
    let content = "line one\nline \"two\" é\n".repeat(20);
    let args = json!({"path": "a.txt", "content": content, "n": 3});
    let xml_content = content.trim_end();
    let cases: Vec<(&str, String, usize)> = vec![
        (
            "hermes",
            format!("<tool_call>\n{{\"name\": \"write\", \"arguments\": {args}}}\n</tool_call>"),
            300,
        ),
        (
            "deepseek-v3.1",
            format!("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write<｜tool▁sep｜>{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            300,
        ),
        (
            "deepseek-r1",
            format!("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write\n```json\n{args}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            300,
        ),
        ("mistral", format!("[TOOL_CALLS]write[ARGS]{args}"), 300),
        (
            "kimi-k2",
            format!("<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>"),
            300,
        ),
        (
            "nemotron",
            format!("<TOOLCALL>[{{\"name\": \"write\", \"arguments\": {args}}}]</TOOLCALL>"),
            300,
        ),
        (
            "mistral-nemo",
            format!("[TOOL_CALLS][{{\"name\": \"write\", \"arguments\": {args}}}]"),
            300,
        ),
        (
            "harmony",
            format!("{HARMONY_CALL_START}write<|channel|>commentary json<|message|>{args}<|call|>"),
            300,
        ),
        (
            "qwen3-coder",
            format!("<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\n{xml_content}\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>"),
            3,
        ),
        (
            "glm",
            format!("<tool_call>write\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n<arg_key>content</arg_key>\n<arg_value>{xml_content}</arg_value>\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"),
            3,
        ),
    ];
    for (name, text, min_pieces) in cases {
        let format = FORMATS.iter().find(|f| f.name == name).unwrap();
        let mut p = CallParser::with_tools(format, &tools).streaming();
        let mut begun_at = None;
        let mut pieces = 0;
        let mut spelled = String::new();
        let mut ended = None;
        let mut fed = 0;
        for ch in text.chars() {
            fed += ch.len_utf8();
            for piece in p.push(&ch.to_string()) {
                match piece {
                    Piece::CallBegin(n) => {
                        assert_eq!(n, "write", "{name}");
                        begun_at = Some(fed);
                    }
                    Piece::CallArgs(t) => {
                        pieces += 1;
                        spelled.push_str(&t);
                    }
                    Piece::CallEnd(c) => ended = Some(c),
                    Piece::Content(t) => assert!(t.trim().is_empty(), "{name}: {t:?}"),
                    Piece::Call(c) => panic!("{name}: whole call {c:?}"),
                }
            }
        }
        assert!(p
            .finish()
            .iter()
            .all(|p| matches!(p, Piece::Content(t) if t.trim().is_empty())));
        let begun_at = begun_at.unwrap_or_else(|| panic!("{name}: never began"));
        assert!(begun_at < 120, "{name}: began only after {begun_at} bytes");
        assert!(pieces >= min_pieces, "{name}: {pieces} pieces");
        let call = ended.unwrap_or_else(|| panic!("{name}: never ended"));
        assert_eq!(spelled, call.arguments, "{name}");
        let expect = if name == "qwen3-coder" || name == "glm" {
            json!({"path": "a.txt", "content": xml_content, "n": 3})
        } else {
            args.clone()
        };
        assert_eq!(
            serde_json::from_str::<Value>(&call.arguments).unwrap(),
            expect,
            "{name}"
        );
    }
}

/// Two calls in one block: the first ends when the second begins, each spelled whole.
#[test]
fn calls_in_one_block_end_one_after_another() {
    let format = FORMATS.iter().find(|f| f.name == "deepseek-v3.1").unwrap();
    let text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{\"x\": 1}<｜tool▁call▁end｜><｜tool▁call▁begin｜>b<｜tool▁sep｜>{\"y\": \"z\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    let mut p = CallParser::new(format).streaming();
    let mut out: Vec<Piece> = text.chars().flat_map(|c| p.push(&c.to_string())).collect();
    out.extend(p.finish());
    let kinds: Vec<String> = out
        .iter()
        .map(|p| match p {
            Piece::CallBegin(n) => format!("begin {n}"),
            Piece::CallArgs(_) => "args".into(),
            Piece::CallEnd(c) => format!("end {} {}", c.name, c.arguments),
            other => format!("{other:?}"),
        })
        .fold(Vec::<String>::new(), |mut v, k| {
            if v.last() != Some(&k) {
                v.push(k);
            }
            v
        });
    assert_eq!(
        kinds,
        [
            "begin a",
            "args",
            "end a {\"x\":1}",
            "begin b",
            "args",
            "end b {\"y\":\"z\"}"
        ]
    );
}

/// A call cut off mid-arguments (the output ended) ends with what it had, closed; a block
/// that goes wrong after its call began does the same, and text after it is text.
#[test]
fn a_begun_call_that_breaks_off_ends_with_what_it_had() {
    let format = FORMATS.iter().find(|f| f.name == "hermes").unwrap();
    let feed = |text: &str| {
        let mut p = CallParser::new(format).streaming();
        let mut out: Vec<Piece> = text.chars().flat_map(|c| p.push(&c.to_string())).collect();
        out.extend(p.finish());
        collapse(merge_content(out))
    };
    let call = |a: &str| {
        Piece::Call(Call {
            name: "w".into(),
            arguments: a.into(),
        })
    };
    assert_eq!(
        feed("<tool_call>\n{\"name\": \"w\", \"arguments\": {\"path\": \"a\", \"text\": \"hel"),
        [call("{\"path\":\"a\",\"text\":\"hel\"}")]
    );
    assert_eq!(
        feed("<tool_call>{\"name\": \"w\", \"arguments\": {\"a\": 1, oops</tool_call> after"),
        [call("{\"a\":1}"), Piece::Content(" after".into())]
    );
}

/// LFM2's Python-style calls: Python's literals and JSON's, several calls, nested values;
/// what does not read as calls stays text.
#[test]
fn lfm2_python_calls_read_as_json() {
    let fmt = format("lfm2");
    let text = "Sure.<|tool_call_start|>[write(path='a b.txt', text=\"it's \\\"ok\\\"\\n\", n=-2.5e1, on=True, off=false, none=None, list=[1, 'x', (2, 3)], obj={'k': {\"j\": null}}), now()]<|tool_call_end|>";
    let (calls, rest) = calls_and_text(&parse_all(|| CallParser::new(fmt), text));
    assert_eq!(rest, "Sure.");
    assert_eq!(
        calls,
        vec![
            (
                "write".to_string(),
                json!({"path": "a b.txt", "text": "it's \"ok\"\n", "n": -25.0, "on": true,
                       "off": false, "none": null, "list": [1, "x", [2, 3]], "obj": {"k": {"j": null}}})
            ),
            ("now".to_string(), json!({})),
        ]
    );
    for bad in [
        "<|tool_call_start|>[write(path=)]<|tool_call_end|>",
        "<|tool_call_start|>[write(path='a')<|tool_call_end|>",
        "<|tool_call_start|>write(path='a')<|tool_call_end|>",
        "<|tool_call_start|>[write('a')]<|tool_call_end|>",
    ] {
        let (calls, rest) = calls_and_text(&parse_all(|| CallParser::new(fmt), bad));
        assert!(calls.is_empty(), "{bad}");
        assert_eq!(rest, bad);
    }
}

/// A template that shows no tools (Phi-3.5) gets ridge's generic form: the tools and how to
/// call them in the system message, earlier calls as that JSON, results as user turns; the
/// answer `{"tool_calls": [...]}` (bare or fenced) reads as calls and streams, prose stays
/// prose, and the forced grammar writes exactly that object.
#[test]
fn templates_without_tools_get_the_generic_form() {
    let t = test_template("microsoft-Phi-3.5-mini-instruct.jinja");
    assert!(format_of(&t).is_none());
    let tok = synthetic_tokenizer();
    let mut f = Map::new();
    f.insert("tools".into(), Value::Array(weather_tools()));
    let tools = read(&Fields::new(&f), Some(&t), &tok).unwrap().unwrap();
    assert_eq!(tools.format.name, "generic");
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = Some(vec![json!({"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}})]);
    let mut result = ChatMessage::new("tool", "12 degrees");
    result.tool_call_id = Some("c1".into());
    let msgs = vec![
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Weather in Oslo?"),
        call,
        result,
    ];
    let shown = tools.conversation(&msgs).unwrap();
    let text = t.render_with(&shown, true, &Map::new()).unwrap();
    assert!(text.contains("Be brief.\n\nYou can call tools."), "{text}");
    assert!(text.contains("{\"name\":\"get_weather\",\"description\":\"The weather forecast for a city.\",\"parameters\":"), "{text}");
    assert!(
        text.contains(
            "{\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}]}"
        ),
        "{text}"
    );
    assert!(
        text.contains("<|user|>\nResult of c1:\n12 degrees"),
        "{text}"
    );
    // With tool_choice "none" the tools are not shown; earlier calls still are.
    let mut none = tools.clone();
    none.choice = ToolChoice::None;
    let text = t
        .render_with(&none.conversation(&msgs).unwrap(), true, &Map::new())
        .unwrap();
    assert!(
        !text.contains("You can call tools.") && text.contains("{\"tool_calls\":"),
        "{text}"
    );

    let answer = "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, {\"name\": \"now\", \"arguments\": {}}]}";
    let want = vec![
        (
            "get_weather".to_string(),
            json!({"city": "Paris", "days": 3}),
        ),
        ("now".to_string(), json!({})),
    ];
    let defs = weather_tools();
    for text in [answer.to_string(), format!("```json\n{answer}\n```")] {
        let (calls, rest) = calls_and_text(&parse_all(|| tools.parser(), &text));
        assert_eq!((calls, rest.trim()), (want.clone(), ""), "{text}");
    }
    // Streamed: the first call begins before the answer ends.
    let mut p = tools.parser();
    let early = answer
        .char_indices()
        .find(|&(i, _)| {
            p.push(&answer[i..i + 1])
                .iter()
                .any(|x| matches!(x, Piece::CallBegin(_)))
        })
        .map(|(i, _)| i);
    assert!(early.is_some_and(|i| i < 60), "{early:?}");
    // Another name, or prose, stays text.
    for text in [
        "{\"tool_calls\": [{\"name\": \"rm\", \"arguments\": {}}]}",
        "It is sunny.",
    ] {
        let (calls, rest) =
            calls_and_text(&parse_all(|| CallParser::with_tools(&GENERIC, &defs), text));
        assert!(calls.is_empty() && rest == text, "{text}");
    }
    let grammars = Grammars::new(tok.clone()).unwrap();
    let forced = Tools::new(weather_tools(), ToolChoice::Required, true, &GENERIC, |t| {
        tok.token_id(t)
    });
    let spec = forced.grammar().unwrap();
    assert!(accepts(&grammars, &tok, &spec, answer));
    assert!(!accepts(
        &grammars,
        &tok,
        &spec,
        &answer.replace("get_weather", "get_climate")
    ));
    assert!(!accepts(&grammars, &tok, &spec, "It is sunny."));
}
