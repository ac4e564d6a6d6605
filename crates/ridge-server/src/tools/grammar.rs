//! Forced calls: a Lark grammar (llguidance's dialect) per call syntax.
//!
//! With `tool_choice: "required"` or a named function the output is constrained to calls, and
//! the grammar writes them in the model's own syntax: the model is then asked for what it was
//! trained to write (a forced Hermes-style call on a Mistral model would fight its training),
//! and what it writes parses back through the same [`CallParser`](super::CallParser). The
//! arguments are `%json` against the function's `parameters` schema. Tags are written with
//! [`Tools::lit`], which makes them the model's single tokens where it has them.

use serde_json::{json, Value};

use super::parse::{DS_CALL_BEGIN, DS_CALL_END, DS_SEP};
use super::{function_name, lark_str, Syntax, Tools};

/// A function the grammar may call.
struct Func<'a> {
    name: &'a str,
    params: Value,
}

impl Func<'_> {
    /// Its parameters in the schema's order: name, schema, and `""` where required, `"?"`
    /// where optional (the Lark suffix).
    fn params(&self) -> Vec<(&str, &Value, &'static str)> {
        let required: Vec<&str> = self
            .params
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = self.params.get("properties").and_then(Value::as_object);
        props
            .into_iter()
            .flatten()
            .map(|(name, schema)| {
                let optional = if required.contains(&name.as_str()) {
                    ""
                } else {
                    "?"
                };
                (name.as_str(), schema, optional)
            })
            .collect()
    }
}

/// The grammar for calls of `allowed` (tool definitions) in `t`'s format.
pub(super) fn lark(t: &Tools, allowed: &[&Value]) -> String {
    let fns: Vec<Func> = allowed
        .iter()
        .filter_map(|d| {
            Some(Func {
                name: function_name(d)?,
                params: d["function"]
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            })
        })
        .collect();
    match t.format.syntax {
        Syntax::Hermes => hermes(t, &fns),
        Syntax::QwenXml => qwen_xml(t, &fns),
        Syntax::GlmXml => glm_xml(t, &fns),
        Syntax::Llama => llama(t, &fns),
        Syntax::MistralArgs => mistral_args(t, &fns),
        Syntax::MistralArray | Syntax::TaggedArray => tagged_array(t, &fns),
        Syntax::DeepSeekR1 => deepseek(t, &fns, true),
        Syntax::DeepSeekV31 => deepseek(t, &fns, false),
        Syntax::Harmony => harmony(t, &fns),
    }
}

/// The schema of one call object `{"name": NAME, key: ARGS}`, any of `fns`.
fn call_objects(fns: &[Func], key: &str) -> Value {
    let bodies: Vec<Value> = fns
        .iter()
        .map(|f| {
            json!({
                "type": "object",
                "properties": {"name": {"const": f.name}, key: f.params},
                "required": ["name", key],
                "additionalProperties": false,
            })
        })
        .collect();
    json!({ "anyOf": bodies })
}

/// Rules `f0 … fN` (one per function, each `body(function)`) and their alternation.
fn per_function(fns: &[Func], body: impl Fn(&Func) -> String) -> (String, String) {
    let names: Vec<String> = (0..fns.len()).map(|i| format!("f{i}")).collect();
    let rules: String = fns
        .iter()
        .zip(&names)
        .map(|(f, n)| format!("{n}: {}\n", body(f)))
        .collect();
    (format!("({})", names.join(" | ")), rules)
}

/// `call` once, or (parallel) `call (sep call)*`.
fn repeated(t: &Tools, sep: &str) -> String {
    if t.parallel {
        format!("call ({sep} call)*")
    } else {
        "call".to_string()
    }
}

/// `<tool_call>\n{"name", "arguments"}\n</tool_call>`, calls separated by newlines.
fn hermes(t: &Tools, fns: &[Func]) -> String {
    let call = format!(
        "call: {} \"\\n\" %json {} \"\\n\" {}",
        t.tags.0,
        call_objects(fns, "arguments"),
        t.tags.1
    );
    // A newline may follow the last call (models write one before deciding whether
    // another call comes), so ending there must stay possible.
    format!("start: {} \"\\n\"?\n{call}\n", repeated(t, "\"\\n\""))
}

/// Qwen3-Coder's XML: `<tool_call>\n<function=NAME>\n` then each parameter as
/// `<parameter=P>\nVALUE\n</parameter>\n` (required ones always, the others optional, in the
/// schema's order), then `</function>\n</tool_call>`.
fn qwen_xml(t: &Tools, fns: &[Func]) -> String {
    let mut rules = String::new();
    let mut alts = Vec::new();
    for (i, f) in fns.iter().enumerate() {
        let mut seq = vec![lark_str(&format!("<function={}>\n", f.name))];
        for (j, (name, schema, optional)) in f.params().into_iter().enumerate() {
            let rule = format!("p{i}_{j}");
            seq.push(format!("{rule}{optional}"));
            rules.push_str(&format!(
                "{rule}: {} {} {}\n",
                lark_str(&format!("<parameter={name}>\n")),
                xml_value(schema, true),
                lark_str("</parameter>\n"),
            ));
        }
        seq.push(lark_str("</function>\n"));
        rules.push_str(&format!("f{i}: {}\n", seq.join(" ")));
        alts.push(format!("f{i}"));
    }
    format!(
        "start: {} \"\\n\"?\ncall: {} \"\\n\" ({}) {}\n{rules}",
        repeated(t, "\"\\n\""),
        t.tags.0,
        alts.join(" | "),
        t.tags.1
    )
}

/// GLM's `<tool_call>NAME\n` then `<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n` per
/// parameter (required ones always, the others optional, in the schema's order), then
/// `</tool_call>` — as GLM-4.6's template writes a call; GLM-4.7 writes no newlines, so
/// each is optional.
fn glm_xml(t: &Tools, fns: &[Func]) -> String {
    let tag = |s: &str| t.lit(s);
    let mut rules = String::new();
    let mut alts = Vec::new();
    for (i, f) in fns.iter().enumerate() {
        let mut seq = vec![lark_str(f.name), "\"\\n\"?".to_string()];
        for (j, (name, schema, optional)) in f.params().into_iter().enumerate() {
            let rule = format!("p{i}_{j}");
            seq.push(format!("{rule}{optional}"));
            let value = xml_value(schema, false);
            rules.push_str(&format!(
                "{rule}: {} {} {} \"\\n\"? {} {value} {} \"\\n\"?\n",
                tag("<arg_key>"),
                lark_str(name),
                tag("</arg_key>"),
                tag("<arg_value>"),
                tag("</arg_value>"),
            ));
        }
        rules.push_str(&format!("f{i}: {}\n", seq.join(" ")));
        alts.push(format!("f{i}"));
    }
    format!(
        "start: {} \"\\n\"?\ncall: {} ({}) {}\n{rules}",
        repeated(t, "\"\\n\"?"),
        t.tags.0,
        alts.join(" | "),
        t.tags.1
    )
}

/// One XML value: text without `<` for strings (one of the listed strings for an `enum`),
/// else JSON against the parameter's schema; then, with `newline`, the newline before the
/// closing tag (Qwen3-Coder's; free text takes it in).
fn xml_value(schema: &Value, newline: bool) -> String {
    let nl = if newline { " \"\\n\"" } else { "" };
    let is_string = match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        _ => false,
    };
    if !is_string {
        return format!("%json {schema}{nl}");
    }
    let options: Option<Vec<String>> = schema.get("enum").and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.contains('<'))
            .map(lark_str)
            .collect()
    });
    match options {
        Some(o) if !o.is_empty() => format!("({}){nl}", o.join(" | ")),
        _ => "/[^<]*/".to_string(),
    }
}

/// Llama 3: `{"name", "parameters"}`, several separated by `; `.
fn llama(t: &Tools, fns: &[Func]) -> String {
    format!(
        "start: {}\ncall: %json {}\n",
        repeated(t, "\";\" \" \"?"),
        call_objects(fns, "parameters")
    )
}

/// Mistral's `[TOOL_CALLS]NAME[ARGS]{…}`, one `[TOOL_CALLS]` per call.
fn mistral_args(t: &Tools, fns: &[Func]) -> String {
    let (alts, rules) = per_function(fns, |f| {
        format!(
            "{} {} %json {}",
            lark_str(f.name),
            t.lit("[ARGS]"),
            f.params
        )
    });
    let start = if t.parallel { "call+" } else { "call" };
    format!(
        "start: {start}\ncall: {} {alts}\n{rules}",
        t.lit("[TOOL_CALLS]")
    )
}

/// Mistral Nemo's `[TOOL_CALLS][{"name", "arguments"}, …]`.
fn tagged_array(t: &Tools, fns: &[Func]) -> String {
    let mut list = json!({"type": "array", "items": call_objects(fns, "arguments"), "minItems": 1});
    if !t.parallel {
        list["maxItems"] = json!(1);
    }
    format!("start: {} %json {list}\n", t.lit(t.format.start))
}

/// DeepSeek's calls between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`: R1's
/// `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>`
/// (newline-separated), or V3.1's `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`.
fn deepseek(t: &Tools, fns: &[Func], r1: bool) -> String {
    let (alts, rules) = per_function(fns, |f| {
        if r1 {
            format!(
                "{} %json {} {}",
                lark_str(&format!("{}\n```json\n", f.name)),
                f.params,
                lark_str("\n```")
            )
        } else {
            format!("{} {} %json {}", lark_str(f.name), t.lit(DS_SEP), f.params)
        }
    });
    let (head, sep) = if r1 {
        (format!("\"function\" {}", t.lit(DS_SEP)), "\"\\n\"")
    } else {
        (String::new(), "")
    };
    format!(
        "start: {} {} {}\ncall: {} {head} {alts} {}\n{rules}",
        t.tags.0,
        repeated(t, sep),
        t.tags.1,
        t.lit(DS_CALL_BEGIN),
        t.lit(DS_CALL_END),
    )
}

/// gpt-oss: an optional analysis message, then
/// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>` (one call:
/// `<|call|>` ends the turn; it is optional here, as an end-of-generation token may end the
/// output before the grammar sees it).
fn harmony(t: &Tools, fns: &[Func]) -> String {
    let (alts, rules) = per_function(fns, |f| {
        format!(
            "{} {} \"json\" {} %json {} {}?",
            lark_str(&format!("{} ", f.name)),
            t.lit("<|constrain|>"),
            t.lit("<|message|>"),
            f.params,
            t.lit("<|call|>"),
        )
    });
    format!(
        "start: analysis? {} \"commentary to=functions.\" {alts}\nanalysis: {} \"analysis\" {} /[^<]*/ {} {} \"assistant\"\n{rules}",
        t.lit("<|channel|>"),
        t.lit("<|channel|>"),
        t.lit("<|message|>"),
        t.lit("<|end|>"),
        t.lit("<|start|>"),
    )
}
