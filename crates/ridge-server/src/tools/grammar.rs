//! Forced calls: a Lark grammar (llguidance's dialect) per call syntax.
//!
//! With `tool_choice: "required"` or a named function the output is constrained to calls, and
//! the grammar writes them in the model's own syntax: the model is then asked for what it was
//! trained to write (a forced Hermes-style call on a Mistral model would fight its training),
//! and what it writes parses back through the same [`CallParser`](super::CallParser). The
//! arguments are `%json` against the function's `parameters` schema. Tags are written with
//! [`Tools::lit`], which makes them the model's single tokens where it has them.

use serde_json::{json, Value};

use super::parse::{DS_CALL_BEGIN, DS_CALL_END, DS_SEP, GEMMA_QUOTE};
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
        Syntax::Gemma => gemma(t, &fns),
        Syntax::Harmony => harmony(t, &fns),
        Syntax::Kimi => kimi(t, &fns),
        Syntax::Generic => generic(t, &fns),
        Syntax::Pythonic => pythonic(t, &fns),
    }
}

/// `%json SCHEMA` for arguments (or calls) against a tool's schema, read leniently: a keyword
/// llguidance does not implement (Claude Code's tools use `propertyNames`) is left out of the
/// constraint rather than making the whole grammar unusable — the call may then be looser than
/// its schema there, never refused for it.
fn json_rule(schema: &Value) -> String {
    let mut schema = schema.clone();
    if let Some(o) = schema.as_object_mut() {
        o.insert("x-guidance".into(), json!({"lenient": true}));
    }
    format!("%json {schema}")
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
        "call: {} \"\\n\" {} \"\\n\" {}",
        t.tags.0,
        json_rule(&call_objects(fns, "arguments")),
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
        return format!("{}{nl}", json_rule(schema));
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
        "start: {}\ncall: {}\n",
        repeated(t, "\";\" \" \"?"),
        json_rule(&call_objects(fns, "parameters"))
    )
}

/// Mistral's `[TOOL_CALLS]NAME[ARGS]{…}`, one `[TOOL_CALLS]` per call.
fn mistral_args(t: &Tools, fns: &[Func]) -> String {
    let (alts, rules) = per_function(fns, |f| {
        format!(
            "{} {} {}",
            lark_str(f.name),
            t.lit("[ARGS]"),
            json_rule(&f.params)
        )
    });
    let start = if t.parallel { "call+" } else { "call" };
    format!(
        "start: {start}\ncall: {} {alts}\n{rules}",
        t.lit("[TOOL_CALLS]")
    )
}

/// The schema of a list of call objects `{"name", "arguments"}` (one at most without
/// `parallel_tool_calls`).
fn call_list(t: &Tools, fns: &[Func]) -> Value {
    let mut list = json!({"type": "array", "items": call_objects(fns, "arguments"), "minItems": 1});
    if !t.parallel {
        list["maxItems"] = json!(1);
    }
    list
}

/// Mistral Nemo's `[TOOL_CALLS][{"name", "arguments"}, …]`.
fn tagged_array(t: &Tools, fns: &[Func]) -> String {
    let list = call_list(t, fns);
    let end = if t.format.end.is_empty() {
        String::new()
    } else {
        t.lit(t.format.end)
    };
    format!(
        "start: {} {} {end}\n",
        t.lit(t.format.start),
        json_rule(&list)
    )
}

/// ridge's generic form: `{"tool_calls": [{"name", "arguments"}, …]}` and nothing else.
fn generic(t: &Tools, fns: &[Func]) -> String {
    let list = call_list(t, fns);
    let object = json!({
        "type": "object",
        "properties": {"tool_calls": list},
        "required": ["tool_calls"],
        "additionalProperties": false,
    });
    format!("start: {}\n", json_rule(&object))
}

/// Kimi K2's `<|tool_calls_section_begin|>`, each call `<|tool_call_begin|>functions.NAME:
/// INDEX<|tool_call_argument_begin|>{…}<|tool_call_end|>`, then `<|tool_calls_section_end|>`.
fn kimi(t: &Tools, fns: &[Func]) -> String {
    let (alts, rules) = per_function(fns, |f| {
        format!(
            "{} /[0-9]+/ {} {}",
            lark_str(&format!("functions.{}:", f.name)),
            t.lit("<|tool_call_argument_begin|>"),
            json_rule(&f.params)
        )
    });
    format!(
        "start: {} {} {}\ncall: {} {alts} {}\n{rules}",
        t.tags.0,
        repeated(t, ""),
        t.tags.1,
        t.lit("<|tool_call_begin|>"),
        t.lit("<|tool_call_end|>"),
    )
}

/// LFM2's `<|tool_call_start|>[NAME(key=VALUE, …), …]<|tool_call_end|>`: the required
/// parameters first, in the schema's order, then the optional ones, each value JSON (which
/// the parser reads beside Python's literals, as llama.cpp lets LFM2 write it).
fn pythonic(t: &Tools, fns: &[Func]) -> String {
    let mut rules = String::new();
    let mut alts = Vec::new();
    for (i, f) in fns.iter().enumerate() {
        let mut params = f.params();
        params.sort_by_key(|p| !p.2.is_empty());
        let mut items = Vec::new();
        for (j, (name, schema, _)) in params.iter().enumerate() {
            let rule = format!("p{i}_{j}");
            rules.push_str(&format!(
                "{rule}: {} {}\n",
                lark_str(&format!("{name}=")),
                json_rule(schema)
            ));
            items.push((rule, params[j].2.is_empty()));
        }
        // Required ones joined by commas; each optional one after a comma — or, where
        // nothing is required, any of them may come first.
        let required: Vec<&str> = items.iter().filter(|p| p.1).map(|p| p.0.as_str()).collect();
        let optional: Vec<&str> = items
            .iter()
            .filter(|p| !p.1)
            .map(|p| p.0.as_str())
            .collect();
        let tail = |from: usize| -> String {
            optional[from..]
                .iter()
                .map(|r| format!("(\", \" {r})?"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let args = if !required.is_empty() {
            format!("{} {}", required.join(" \", \" "), tail(0))
        } else if optional.is_empty() {
            String::new()
        } else {
            let firsts: Vec<String> = (0..optional.len())
                .map(|k| format!("{} {}", optional[k], tail(k + 1)))
                .collect();
            format!("({})?", firsts.join(" | "))
        };
        rules.push_str(&format!(
            "f{i}: {} {args} \")\"\n",
            lark_str(&format!("{}(", f.name))
        ));
        alts.push(format!("f{i}"));
    }
    let calls = if t.parallel {
        "call (\", \" call)*"
    } else {
        "call"
    };
    format!(
        "start: {} \"[\" {calls} \"]\" {}\ncall: {}\n{rules}",
        t.tags.0,
        t.tags.1,
        alts.join(" | ")
    )
}

/// DeepSeek's calls between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`: R1's
/// `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>`
/// (newline-separated), or V3.1's `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`.
fn deepseek(t: &Tools, fns: &[Func], r1: bool) -> String {
    let (alts, rules) = per_function(fns, |f| {
        if r1 {
            format!(
                "{} {} {}",
                lark_str(&format!("{}\n```json\n", f.name)),
                json_rule(&f.params),
                lark_str("\n```")
            )
        } else {
            format!(
                "{} {} {}",
                lark_str(f.name),
                t.lit(DS_SEP),
                json_rule(&f.params)
            )
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
            "{} {} \"json\" {} {} {}?",
            lark_str(&format!("{} ", f.name)),
            t.lit("<|constrain|>"),
            t.lit("<|message|>"),
            json_rule(&f.params),
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

/// Gemma 4's `<|tool_call>call:NAME{key:value,…}<tool_call|>`, calls back to back, arguments
/// in Gemma's notation by the function's schema ([`GemmaValues`]).
fn gemma(t: &Tools, fns: &[Func]) -> String {
    let mut g = GemmaValues::new(t);
    let mut alts = Vec::new();
    for (i, f) in fns.iter().enumerate() {
        let args = g.object(&f.params, 0);
        g.rules
            .push_str(&format!("f{i}: {} {args}\n", lark_str(f.name)));
        alts.push(format!("f{i}"));
    }
    let start = if t.parallel { "call+" } else { "call" };
    format!(
        "start: {start}\ncall: {} \"call:\" ({}) {}\n{}",
        t.tags.0,
        alts.join(" | "),
        t.tags.1,
        g.finish()
    )
}

/// Gemma 4's thoughts before a forced call: `<|channel>thought` and text up to `<channel|>`
/// (the rule `gthought`).
pub(super) fn gemma_thought(t: &Tools) -> String {
    let (open, close) = (t.lit("<|channel>"), t.lit("<channel|>"));
    if close.starts_with("<[") {
        format!(
            "gthought: {open} \"thought\" THOUGHT? {close}\nTHOUGHT: /(?s:.+)/ & ~/(?s:.*)<channel\\|>(?s:.*)/\n"
        )
    } else {
        // The closing is text: it ends the thoughts' lexeme.
        format!(
            "gthought: {open} \"thought\" THOUGHTC\nTHOUGHTC: /(?s:.*)<channel\\|>/ & ~/(?s:.*)<channel\\|>(?s:.+)/\n"
        )
    }
}

/// Deepest schema nesting the Gemma grammar follows; deeper values are any Gemma value.
const GEMMA_MAX_SCHEMA_DEPTH: usize = 16;

/// Rules for values in Gemma 4's notation, by JSON Schema, as its template writes them: an
/// object's properties in the template's order (`dictsort`: by lower-cased name), the required
/// ones always, bare keys; strings between `<|"|>` marks (an `enum` or `const` one of its
/// values); JSON numbers; `true`/`false`; `null`; arrays of the `items` schema. `anyOf`,
/// `oneOf` and a list of types are alternatives. An object without `properties`, and a schema
/// without a type, take any Gemma value. String text never holds a mark or `<tool_call|>`,
/// so the call parses back.
struct GemmaValues {
    /// The string mark as the grammar writes it (its token where the vocabulary has one).
    quote: String,
    rules: String,
    next: usize,
    /// `gstr` (a string) is referred to.
    strings: bool,
    /// `gany` (any value) is referred to.
    any: bool,
}

impl GemmaValues {
    fn new(t: &Tools) -> Self {
        GemmaValues {
            quote: t.lit(GEMMA_QUOTE),
            rules: String::new(),
            next: 0,
            strings: false,
            any: false,
        }
    }

    /// A new rule with `body`; its name.
    fn rule(&mut self, body: &str) -> String {
        let name = format!("g{}", self.next);
        self.next += 1;
        self.rules.push_str(&format!("{name}: {body}\n"));
        name
    }

    fn string(&mut self) -> String {
        self.strings = true;
        "gstr".to_string()
    }

    fn any(&mut self) -> String {
        self.any = true;
        self.strings = true;
        "gany".to_string()
    }

    /// One JSON value as the template writes it (`format_argument`); `None` where it cannot be
    /// written (a string holding the mark, or a container).
    fn literal(&self, v: &Value) -> Option<String> {
        match v {
            Value::String(s) if !s.contains(GEMMA_QUOTE) && !s.contains("<tool_call|>") => {
                Some(format!("{q} {} {q}", lark_str(s), q = self.quote))
            }
            Value::Bool(_) | Value::Null | Value::Number(_) => Some(lark_str(&v.to_string())),
            _ => None,
        }
    }

    /// A value of `schema`.
    fn value(&mut self, schema: &Value, depth: usize) -> String {
        if depth > GEMMA_MAX_SCHEMA_DEPTH {
            return self.any();
        }
        let options = match (schema.get("enum"), schema.get("const")) {
            (Some(Value::Array(e)), _) if !e.is_empty() => Some(e.iter().collect::<Vec<_>>()),
            (_, Some(c)) => Some(vec![c]),
            _ => None,
        };
        if let Some(options) = options {
            let lits: Option<Vec<String>> = options.iter().map(|v| self.literal(v)).collect();
            return match lits {
                Some(l) => format!("({})", l.join(" | ")),
                None => self.any(),
            };
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(alts)) = schema.get(key) {
                if !alts.is_empty() {
                    let alts: Vec<String> = alts.iter().map(|a| self.value(a, depth + 1)).collect();
                    return format!("({})", alts.join(" | "));
                }
            }
        }
        match schema.get("type") {
            Some(Value::String(ty)) => self.typed(ty, schema, depth),
            Some(Value::Array(types)) if !types.is_empty() => {
                let alts: Vec<String> = types
                    .iter()
                    .map(|ty| match ty.as_str() {
                        Some(ty) => self.typed(ty, schema, depth),
                        None => self.any(),
                    })
                    .collect();
                format!("({})", alts.join(" | "))
            }
            _ => self.any(),
        }
    }

    /// A value of one JSON type (`schema` for its details).
    fn typed(&mut self, ty: &str, schema: &Value, depth: usize) -> String {
        match ty {
            "string" => self.string(),
            "integer" => "GINT".to_string(),
            "number" => "GNUM".to_string(),
            "boolean" => "(\"true\" | \"false\")".to_string(),
            "null" => "\"null\"".to_string(),
            "object" => self.object(schema, depth + 1),
            "array" => {
                let item = match schema.get("items") {
                    Some(items @ Value::Object(_)) => self.value(items, depth + 1),
                    _ => self.any(),
                };
                self.rule(&format!("\"[\" ({item} (\",\" {item})*)? \"]\""))
            }
            _ => self.any(),
        }
    }

    /// `{key:value,…}` for an object schema: its properties in the template's order, each
    /// required one present, commas between.
    fn object(&mut self, schema: &Value, depth: usize) -> String {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            self.any = true;
            self.strings = true;
            return "gdict".to_string();
        };
        if props.is_empty() {
            return lark_str("{}");
        }
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut sorted: Vec<(&String, &Value)> = props.iter().collect();
        sorted.sort_by_key(|(name, _)| name.to_lowercase());
        let members: Vec<(String, bool)> = sorted
            .into_iter()
            .map(|(name, sub)| {
                let v = self.value(sub, depth);
                let m = self.rule(&format!("{} {v}", lark_str(&format!("{name}:"))));
                (m, required.contains(&name.as_str()))
            })
            .collect();
        // rest[k]: members k.. after one has been written (each with its comma).
        let mut rest: Vec<String> = vec![String::new(); members.len() + 1];
        for (k, (m, req)) in members.iter().enumerate().rev() {
            let part = if *req {
                format!("\",\" {m}")
            } else {
                format!("(\",\" {m})?")
            };
            rest[k] = if rest[k + 1].is_empty() {
                self.rule(&part)
            } else {
                self.rule(&format!("{part} {}", rest[k + 1]))
            };
        }
        // The first member written: any up to the first required one.
        let mut firsts = Vec::new();
        for (k, (m, req)) in members.iter().enumerate() {
            firsts.push(format!("{m} {}", rest[k + 1]).trim_end().to_string());
            if *req {
                break;
            }
        }
        let any_required = members.iter().any(|(_, r)| *r);
        let body = format!("({})", firsts.join(" | "));
        let body = if any_required {
            body
        } else {
            format!("{body}?")
        };
        self.rule(&format!("\"{{\" {body} \"}}\""))
    }

    /// The rules, with the number terminals and the shared rules that were referred to.
    fn finish(self) -> String {
        let mut out = self.rules;
        out.push_str("GINT: /-?(0|[1-9][0-9]*)/\n");
        out.push_str("GNUM: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?/\n");
        // Text that holds neither the mark nor the end of the call.
        const FREE: &str = "~/(?s:.*)(<\\|\"\\|>|<tool_call\\|>)(?s:.*)/";
        if self.strings && self.quote.starts_with("<[") {
            // The mark is a token: the text ends where it comes.
            out.push_str(&format!(
                "gstr: {q} GTEXT? {q}\nGTEXT: /(?s:.+)/ & {FREE}\n",
                q = self.quote
            ));
        } else if self.strings {
            // The mark is text: the closing one is the end of the string's lexeme (a lexeme
            // of free text would run over it).
            out.push_str(&format!(
                "gstr: {} GTEXTQ\nGTEXTQ: /(?s:.*)<\\|\"\\|>/ & ~/(?s:.*)(<\\|\"\\|>|<tool_call\\|>)(?s:.+)/\n",
                self.quote
            ));
        }
        if self.any {
            out.push_str(
                "gany: gstr | gdict | glist | GNUM | \"true\" | \"false\" | \"null\"\n\
                 gdict: \"{\" (gkv (\",\" gkv)*)? \"}\"\n\
                 gkv: GKEY \":\" gany\n\
                 GKEY: /[^:{}\\[\\],<\\s]+/\n\
                 glist: \"[\" (gany (\",\" gany)*)? \"]\"\n",
            );
        }
        out
    }
}
