//! Tool calling on `/v1/chat/completions`: `tools`, `tool_choice`, `parallel_tool_calls`.
//!
//! The tools go to the model through its own chat template (the `tools` variable, as vLLM and
//! `transformers` pass them). How the model writes a call is read off the template too: each
//! entry of [`FORMATS`] names the tags a family of templates wraps a call in, and the first
//! whose opening tag the template contains is used (adding a family is one entry). What the
//! model writes between the tags is JSON `{"name": …, "arguments": {…}}`; [`CallParser`]
//! splits a choice's text, as it streams, into content and calls, which the server answers as
//! OpenAI's `tool_calls` (streamed as `delta.tool_calls`: index, id and name first, then the
//! arguments).
//!
//! With `tool_choice: "required"` or a named function the output is constrained by a grammar
//! ([`Tools::grammar`]): one or more calls (one when `parallel_tool_calls` is false), each
//! JSON whose `name` is an allowed function and whose `arguments` match that function's
//! `parameters` schema, so the call always parses.

use serde_json::{json, Map, Value};

use ridge_engine::GrammarSpec;
use ridge_tokenizer::{ChatTemplate, Tokenizer};

use crate::error::ApiError;
use crate::params::Fields;

/// Most tools per request.
pub const MAX_TOOLS: usize = 128;

/// How one family of chat templates writes a tool call.
#[derive(Debug, PartialEq, Eq)]
pub struct ToolFormat {
    /// Name, for messages.
    pub name: &'static str,
    /// Text before the call's JSON.
    pub start: &'static str,
    /// Text after it.
    pub end: &'static str,
}

/// The formats ridge knows, tried in order against the template's source.
pub const FORMATS: &[ToolFormat] = &[
    // Qwen 2/2.5/3, Hermes, and the DeepSeek-R1 distills of Qwen.
    ToolFormat {
        name: "hermes",
        start: "<tool_call>",
        end: "</tool_call>",
    },
];

/// The tool-call format of a template, if it has one ridge knows.
pub fn format_of(template: &ChatTemplate) -> Option<&'static ToolFormat> {
    FORMATS.iter().find(|f| template.source().contains(f.start))
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// Never call (the tools are not shown to the model).
    None,
    /// The model decides.
    Auto,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// A request's tools.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The `tools` array as given (each `{"type": "function", "function": {...}}`).
    pub defs: Vec<Value>,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true).
    pub parallel: bool,
    /// How the model writes calls.
    pub format: &'static ToolFormat,
    /// The format's tags in the grammar: a token reference (`<[id]>`) where the vocabulary
    /// has the tag as one token (the model was trained to write that token), else the text.
    pub tags: (String, String),
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::invalid("tools", msg)
}

/// The function name of a tool definition.
fn function_name(def: &Value) -> Option<&str> {
    def.get("function")?.get("name")?.as_str()
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`; `None` when the request has no tools.
pub fn read(
    f: &Fields,
    template: Option<&ChatTemplate>,
    tokenizer: &Tokenizer,
) -> Result<Option<Tools>, ApiError> {
    let defs = match f.get("tools") {
        None => {
            return match f.get("tool_choice") {
                None | Some(Value::String(_)) => Ok(None),
                Some(_) => Err(ApiError::invalid(
                    "tool_choice",
                    "`tool_choice` names a function but the request has no `tools`",
                )),
            }
        }
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) if a.len() <= MAX_TOOLS => a.clone(),
        Some(_) => {
            return Err(bad(format!(
                "`tools` must be an array of at most {MAX_TOOLS} tools"
            )))
        }
    };
    for (i, d) in defs.iter().enumerate() {
        if d.get("type").and_then(Value::as_str) != Some("function") || function_name(d).is_none() {
            return Err(bad(format!(
                "tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": …}}}}"
            )));
        }
        match d["function"].get("parameters") {
            None | Some(Value::Object(_)) => {}
            Some(_) => {
                return Err(bad(format!(
                    "tools[{i}].function.parameters must be a JSON Schema object"
                )))
            }
        }
    }
    let choice = match f.get("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`tool_choice` {other:?} is not none, auto, required or a function"),
                ))
            }
        },
        Some(v) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "tool_choice",
                        "`tool_choice` must be a string or {\"type\": \"function\", \"function\": {\"name\": …}}",
                    )
                })?;
            if !defs.iter().any(|d| function_name(d) == Some(name)) {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`tool_choice` names {name:?}, which is not among the tools"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
    };
    let parallel = f.bool("parallel_tool_calls", true)?;
    let Some(format) = template.and_then(format_of) else {
        return Err(bad(
            "this model's chat template has no tool-call format ridge knows (known: tags <tool_call>…</tool_call>)",
        ));
    };
    let tag = |t: &str| match tokenizer.token_id(t) {
        Some(id) => format!("<[{id}]>"),
        None => lark_str(t),
    };
    Ok(Some(Tools {
        defs,
        choice,
        parallel,
        format,
        tags: (tag(format.start), tag(format.end)),
    }))
}

impl Tools {
    /// The `tools` template variable (absent with `tool_choice: "none"`).
    pub fn template_var(&self) -> Option<Value> {
        (self.choice != ToolChoice::None).then(|| Value::Array(self.defs.clone()))
    }

    /// The grammar that makes the output a valid call, for `required` and named choices.
    pub fn grammar(&self) -> Option<GrammarSpec> {
        let allowed: Vec<&Value> = match &self.choice {
            ToolChoice::None | ToolChoice::Auto => return None,
            ToolChoice::Required => self.defs.iter().collect(),
            ToolChoice::Named(n) => self
                .defs
                .iter()
                .filter(|d| function_name(d) == Some(n))
                .collect(),
        };
        let bodies: Vec<Value> = allowed
            .iter()
            .map(|d| {
                let params = d["function"]
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"}));
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"const": function_name(d)},
                        "arguments": params,
                    },
                    "required": ["name", "arguments"],
                    "additionalProperties": false,
                })
            })
            .collect();
        let schema = json!({"anyOf": bodies});
        let call = format!(
            "call: {} \"\\n\" %json {} \"\\n\" {}",
            self.tags.0, schema, self.tags.1
        );
        // A newline may follow the last call (models write one before deciding whether
        // another call comes), so ending there must stay possible.
        let start = if self.parallel {
            "start: call (\"\\n\" call)* \"\\n\"?"
        } else {
            "start: call \"\\n\"?"
        };
        Some(GrammarSpec::Lark(format!("{start}\n{call}\n")))
    }
}

fn lark_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// OpenAI message `tool_calls` (arguments as JSON strings) → the template's form (arguments
/// as objects); `param` names the message for errors.
pub fn calls_for_template(calls: &Value, i: usize) -> Result<Vec<Value>, ApiError> {
    let bad = || {
        ApiError::invalid(
            "messages",
            format!("messages[{i}].tool_calls must be an array of {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}"),
        )
    };
    let Value::Array(list) = calls else {
        return Err(bad());
    };
    list.iter()
        .map(|c| {
            let func = c
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(bad)?;
            let name = func.get("name").and_then(Value::as_str).ok_or_else(bad)?;
            let args = match func.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                    ApiError::invalid(
                        "messages",
                        format!("messages[{i}].tool_calls: arguments are not valid JSON: {e}"),
                    )
                })?,
                Some(v @ Value::Object(_)) => v.clone(),
                None => Value::Object(Map::new()),
                Some(_) => return Err(bad()),
            };
            let mut out =
                json!({"type": "function", "function": {"name": name, "arguments": args}});
            if let Some(id) = c.get("id") {
                out["id"] = id.clone();
            }
            Ok(out)
        })
        .collect()
}

/// A complete call found in the output.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// Function name.
    pub name: String,
    /// Arguments, as the JSON text OpenAI clients expect.
    pub arguments: String,
}

/// A piece of a choice's output.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// Ordinary text.
    Content(String),
    /// A tool call.
    Call(Call),
}

/// Splits streamed text into content and calls. Text that may be the start of an opening tag
/// is held back until it is known; a call is released when its closing tag arrives.
#[derive(Debug)]
pub struct CallParser {
    format: &'static ToolFormat,
    buf: String,
    in_call: bool,
}

impl CallParser {
    /// A parser for `format`.
    pub fn new(format: &'static ToolFormat) -> Self {
        CallParser {
            format,
            buf: String::new(),
            in_call: false,
        }
    }

    /// Feeds `text`; returns what became final.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.in_call {
                let Some(end) = self.buf.find(self.format.end) else {
                    break;
                };
                let body = self.buf[..end].to_string();
                self.buf.drain(..end + self.format.end.len());
                self.in_call = false;
                match parse_call(&body) {
                    Some(c) => out.push(Piece::Call(c)),
                    // Not a call after all: keep the text as the model wrote it.
                    None => out.push(Piece::Content(format!(
                        "{}{body}{}",
                        self.format.start, self.format.end
                    ))),
                }
            } else if let Some(start) = self.buf.find(self.format.start) {
                if start > 0 {
                    out.push(Piece::Content(self.buf[..start].to_string()));
                }
                self.buf.drain(..start + self.format.start.len());
                self.in_call = true;
            } else {
                // Release all but a suffix that could still become the opening tag.
                let keep = partial_suffix(&self.buf, self.format.start);
                let cut = self.buf.len() - keep;
                if cut > 0 {
                    out.push(Piece::Content(self.buf[..cut].to_string()));
                    self.buf.drain(..cut);
                }
                break;
            }
        }
        merge_content(out)
    }

    /// The end of the output: whatever is held back is content (an unterminated call too).
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.buf);
        let text = if self.in_call {
            self.in_call = false;
            format!("{}{rest}", self.format.start)
        } else {
            rest
        };
        if text.is_empty() {
            Vec::new()
        } else {
            vec![Piece::Content(text)]
        }
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag` (on a char boundary).
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

fn merge_content(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match (out.last_mut(), p) {
            (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
            (_, p) => out.push(p),
        }
    }
    out
}

/// `{"name": …, "arguments": …}` (arguments an object or a JSON string).
fn parse_call(body: &str) -> Option<Call> {
    let v: Value = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::String(s)) => s.clone(),
        Some(a) => a.to_string(),
        None => "{}".to_string(),
    };
    Some(Call { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(chunks: &[&str]) -> Vec<Piece> {
        let mut p = CallParser::new(&FORMATS[0]);
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
            format: &FORMATS[0],
            tags: ("<[7]>".into(), "\"</tool_call>\"".into()),
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
}
