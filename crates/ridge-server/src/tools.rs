//! Tool calling on `/v1/chat/completions`: `tools`, `tool_choice`, `parallel_tool_calls`.
//!
//! The tools go to the model through its own chat template (the `tools` variable, as vLLM and
//! `transformers` pass them). How the model writes a call is read off the template too: model
//! families were trained on different call syntaxes, and each writes only its own. Each entry
//! of [`FORMATS`] is one syntax with the strings that identify its templates; the first entry
//! whose strings all occur in the template's source is used. [`CallParser`] splits a choice's
//! text, as it streams, into content and calls, which the server answers as OpenAI's
//! `tool_calls` (streamed as `delta.tool_calls`: index, id and name first, then the arguments).
//! Where the request's tools are known ([`Tools::parser`]) it also accepts the one drift small
//! models really show: a call written as a Markdown-fenced or bare JSON object naming an
//! offered function.
//!
//! With `tool_choice: "required"` or a named function the output is constrained by a grammar
//! ([`Tools::grammar`]) in the format's own syntax: one or more calls (one when
//! `parallel_tool_calls` is false), each naming an allowed function with arguments that match
//! its `parameters` schema, so the call always parses back through the same parser. The
//! format's tags are the model's own tokens in the grammar where the vocabulary has them as
//! one token (the model was trained to write that token, not its spelling). Under `auto` the
//! same grammar is lazy ([`Tools::lazy_grammar_after`]): free text until the format's opening
//! token, a valid call of an offered tool from there.

use serde_json::{json, Map, Value};

use ridge_engine::GrammarSpec;
use ridge_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

use crate::error::ApiError;
use crate::params::Fields;

mod generic;
mod grammar;
mod parse;
mod partial;

use parse::GEMMA_QUOTE;
pub use parse::{Call, CallParser, Piece};

/// Most tools per request.
pub const MAX_TOOLS: usize = 128;

pub use crate::reasoning::HARMONY_CALL_START;

/// A call syntax (how [`CallParser`] reads calls and [`Tools::grammar`] writes them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>`; the body may also be an array
    /// of calls, `arguments` a JSON string, or Qwen3-Coder's XML.
    Hermes,
    /// Qwen3-Coder: `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…
    /// </function>\n</tool_call>`, values typed by the parameter's schema; several functions
    /// in one block, a missing `</parameter>`, and a JSON body are accepted.
    QwenXml,
    /// Llama 3.1–3.3: `{"name": …, "parameters": {…}}` as the whole output (optionally after
    /// `<|python_tag|>`), several separated by `;`; `arguments` is accepted for `parameters`.
    Llama,
    /// Mistral Small 3.2, Devstral, Ministral 3, Magistral: `[TOOL_CALLS]NAME[ARGS]{…}`, one
    /// `[TOOL_CALLS]` per call, optionally `[CALL_ID]ID` before `[ARGS]`; the older array form
    /// is accepted too.
    MistralArgs,
    /// Mistral Nemo, Mistral 7B v0.3: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`; the
    /// newer `NAME[ARGS]` form is accepted too.
    MistralArray,
    /// GLM-4.5 / 4.6 / 4.7: `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V
    /// </arg_value>` per argument (newlines between optional), `</tool_call>`; string values
    /// as they are, others as JSON, typed by the tool's schema as Qwen3-Coder's are.
    GlmXml,
    /// Granite 3.x: the format's start tag (`<|tool_call|>`), then a JSON array of
    /// `{"name": …, "arguments": {…}}` to the end of the output; Nemotron-H (Nemotron Nano
    /// v2): the same between `<TOOLCALL>` and `</TOOLCALL>`.
    TaggedArray,
    /// Kimi K2: `<|tool_calls_section_begin|>` then per call `<|tool_call_begin|>functions.
    /// NAME:INDEX<|tool_call_argument_begin|>{…}<|tool_call_end|>`, then
    /// `<|tool_calls_section_end|>`; the id's `functions.` prefix and `:INDEX` are optional.
    Kimi,
    /// ridge's own, for templates that show no tools ([`GENERIC`]): the answer is only
    /// `{"tool_calls": [{"name": …, "arguments": {…}}, …]}`, as llama-server's generic
    /// fallback asks.
    Generic,
    /// LFM2 / LFM2.5: `<|tool_call_start|>[NAME(key=VALUE, …), …]<|tool_call_end|>`, Python
    /// call syntax with Python or JSON literals (`'s'`/`"s"`, numbers, `True`/`true`,
    /// `None`/`null`, lists, dicts).
    Pythonic,
    /// DeepSeek-R1 and its distills: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
    /// <｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`; the
    /// V3.1 form is accepted too.
    DeepSeekR1,
    /// DeepSeek-V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}
    /// <｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`; the R1 form is accepted too.
    DeepSeekV31,
    /// Gemma 4: `<|tool_call>call:NAME{key:value,…}<tool_call|>`, one call per block, the
    /// arguments in Gemma's notation: strings between `<|"|>` marks, numbers, `true`/`false`,
    /// `null` (or `None`, as the template prints Python's), `{key:…}` and `[…]`, nested; read
    /// back into JSON with their types.
    Gemma,
    /// gpt-oss's harmony: a message to `functions.NAME` on the commentary channel, arguments
    /// after `<|message|>` up to `<|call|>`. The reasoning parser reads harmony's channels
    /// and passes each call on in the form of [`HARMONY_CALL_START`], which this reads.
    Harmony,
}

/// How one family of chat templates writes a tool call.
#[derive(Debug, PartialEq, Eq)]
pub struct ToolFormat {
    /// Name, for messages.
    pub name: &'static str,
    /// How calls are written.
    pub syntax: Syntax,
    /// Strings that all occur in the family's templates (and together in no earlier entry's).
    pub detect: &'static [&'static str],
    /// Text that opens a call (or a block of calls).
    pub start: &'static str,
    /// Text that closes it; empty where calls end with the output or their JSON.
    pub end: &'static str,
    /// The special strings the format's grammar writes, each a single token in the family's
    /// vocabularies.
    pub tags: &'static [&'static str],
}

const DEEPSEEK_TAGS: &[&str] = &[
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
];

/// The formats ridge knows, tried in order against the template's source.
pub const FORMATS: &[ToolFormat] = &[
    ToolFormat {
        name: "qwen3-coder",
        syntax: Syntax::QwenXml,
        detect: &["<tool_call>", "<function="],
        start: "<tool_call>",
        end: "</tool_call>",
        tags: &["<tool_call>", "</tool_call>"],
    },
    ToolFormat {
        name: "glm",
        syntax: Syntax::GlmXml,
        detect: &["<tool_call>", "<arg_key>"],
        start: "<tool_call>",
        end: "</tool_call>",
        tags: &[
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
        ],
    },
    // Gemma 4 (31B, 26B-A4B, E4B, E2B).
    ToolFormat {
        name: "gemma4",
        syntax: Syntax::Gemma,
        detect: &["<|tool_call>call:"],
        start: "<|tool_call>",
        end: "<tool_call|>",
        tags: &[
            "<|tool_call>",
            "<tool_call|>",
            GEMMA_QUOTE,
            "<|channel>",
            "<channel|>",
        ],
    },
    // Nemotron-H (Nemotron Nano v2, Nemotron-H 8B/47B/56B).
    ToolFormat {
        name: "nemotron",
        syntax: Syntax::TaggedArray,
        detect: &["<TOOLCALL>"],
        start: "<TOOLCALL>",
        end: "</TOOLCALL>",
        tags: &["<TOOLCALL>", "</TOOLCALL>"],
    },
    ToolFormat {
        name: "kimi-k2",
        syntax: Syntax::Kimi,
        detect: &["<|tool_calls_section_begin|>", "<|tool_call_begin|>"],
        start: "<|tool_calls_section_begin|>",
        end: "<|tool_calls_section_end|>",
        tags: &[
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
        ],
    },
    // LFM2 lists its tools between `<|tool_list_start|>` and `<|tool_list_end|>`, LFM2.5 as
    // plain `List of tools: [`; both write Python-style calls.
    ToolFormat {
        name: "lfm2",
        syntax: Syntax::Pythonic,
        detect: &["<|tool_list_start|>", "<|tool_list_end|>"],
        start: "<|tool_call_start|>",
        end: "<|tool_call_end|>",
        tags: &["<|tool_call_start|>", "<|tool_call_end|>"],
    },
    ToolFormat {
        name: "lfm2.5",
        syntax: Syntax::Pythonic,
        detect: &["List of tools: ["],
        start: "<|tool_call_start|>",
        end: "<|tool_call_end|>",
        tags: &["<|tool_call_start|>", "<|tool_call_end|>"],
    },
    // Qwen 2/2.5/3, QwQ, Hermes 2 Pro / 3.
    ToolFormat {
        name: "hermes",
        syntax: Syntax::Hermes,
        detect: &["<tool_call>"],
        start: "<tool_call>",
        end: "</tool_call>",
        tags: &["<tool_call>", "</tool_call>"],
    },
    ToolFormat {
        name: "deepseek-r1",
        syntax: Syntax::DeepSeekR1,
        detect: &["<｜tool▁calls▁begin｜>", "```json"],
        start: "<｜tool▁calls▁begin｜>",
        end: "<｜tool▁calls▁end｜>",
        tags: DEEPSEEK_TAGS,
    },
    ToolFormat {
        name: "deepseek-v3.1",
        syntax: Syntax::DeepSeekV31,
        detect: &["<｜tool▁calls▁begin｜>"],
        start: "<｜tool▁calls▁begin｜>",
        end: "<｜tool▁calls▁end｜>",
        tags: DEEPSEEK_TAGS,
    },
    ToolFormat {
        name: "mistral",
        syntax: Syntax::MistralArgs,
        detect: &["[TOOL_CALLS]", "[ARGS]"],
        start: "[TOOL_CALLS]",
        end: "",
        tags: &["[TOOL_CALLS]", "[ARGS]"],
    },
    ToolFormat {
        name: "mistral-nemo",
        syntax: Syntax::MistralArray,
        detect: &["[TOOL_CALLS]"],
        start: "[TOOL_CALLS]",
        end: "",
        tags: &["[TOOL_CALLS]"],
    },
    ToolFormat {
        name: "granite3",
        syntax: Syntax::TaggedArray,
        detect: &["<|tool_call|>"],
        start: "<|tool_call|>",
        end: "",
        tags: &["<|tool_call|>"],
    },
    ToolFormat {
        name: "harmony",
        syntax: Syntax::Harmony,
        detect: &["<|channel|>", "to=", "functions."],
        start: HARMONY_CALL_START,
        end: "<|call|>",
        tags: &[
            "<|channel|>",
            "<|message|>",
            "<|constrain|>",
            "<|end|>",
            "<|start|>",
            "<|call|>",
        ],
    },
    // Llama 3.1, 3.2, 3.3 (and 3.2's template, which has no `<|python_tag|>`).
    ToolFormat {
        name: "llama3",
        syntax: Syntax::Llama,
        detect: &["<|start_header_id|>", "\"parameters\""],
        start: "",
        end: "",
        tags: &[],
    },
];

/// The format for a template that shows no tools (SmolLM2, Gemma 3, Phi-3, …): the tools go
/// into the system message with how to call them (see `generic.rs`), and a call is the
/// answer `{"tool_calls": [...]}`. Never detected: [`read`] falls back to it.
pub const GENERIC: ToolFormat = ToolFormat {
    name: "generic",
    syntax: Syntax::Generic,
    detect: &[],
    start: "",
    end: "",
    tags: &[],
};

/// The tool-call format of a template, if it has one ridge knows.
pub fn format_of(template: &ChatTemplate) -> Option<&'static ToolFormat> {
    format_of_source(template.source())
}

fn format_of_source(src: &str) -> Option<&'static ToolFormat> {
    FORMATS
        .iter()
        .find(|f| f.detect.iter().all(|d| src.contains(d)))
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
    /// Each of the format's [`ToolFormat::tags`] as the grammar writes it (a token reference
    /// or the text, as for `tags`).
    pub tag_refs: Vec<(&'static str, String)>,
    /// The token that opens a call, where the format has a start tag and the vocabulary has
    /// it as one token: the trigger of the lazy grammar under `tool_choice: "auto"`.
    pub start_token: Option<u32>,
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
    read_tools(f, template, tokenizer).map_err(|e| f.spell(e))
}

fn read_tools(
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
    let format = match template {
        Some(t) => format_of(t).unwrap_or(&GENERIC),
        None => {
            return Err(bad(
                "this model has no chat template; tools need one (use /v1/completions with a plain prompt)",
            ))
        }
    };
    Ok(Some(Tools::new(defs, choice, parallel, format, |t| {
        tokenizer.token_id(t)
    })))
}

impl Tools {
    /// Tools in `format`; `token_id` finds a tag's single token, where there is one.
    fn new(
        defs: Vec<Value>,
        choice: ToolChoice,
        parallel: bool,
        format: &'static ToolFormat,
        token_id: impl Fn(&str) -> Option<u32>,
    ) -> Tools {
        let tag = |t: &str| match token_id(t) {
            Some(id) => format!("<[{id}]>"),
            None => lark_str(t),
        };
        Tools {
            tags: (tag(format.start), tag(format.end)),
            tag_refs: format.tags.iter().map(|t| (*t, tag(t))).collect(),
            start_token: (!format.start.is_empty())
                .then(|| token_id(format.start))
                .flatten(),
            defs,
            choice,
            parallel,
            format,
        }
    }

    /// A parser for this request's output: the format's syntax, and the fallbacks that need
    /// the offered names ([`CallParser::with_tools`]); calls released as they are written
    /// ([`CallParser::streaming`]).
    pub fn parser(&self) -> CallParser {
        CallParser::with_tools(self.format, &self.defs).streaming()
    }

    /// `s` in the grammar: its token where it is one of the format's tags, else the text.
    fn lit(&self, s: &str) -> String {
        self.tag_refs
            .iter()
            .find(|(t, _)| *t == s)
            .map_or_else(|| lark_str(s), |(_, r)| r.clone())
    }

    /// The `tools` template variable (absent with `tool_choice: "none"`).
    pub fn template_var(&self) -> Option<Value> {
        (self.choice != ToolChoice::None).then(|| Value::Array(self.defs.clone()))
    }

    /// The conversation as the template should see it: unchanged where the template shows
    /// tools itself, else with the tools and how to call them in the system message, calls
    /// as their JSON and results as user turns ([`GENERIC`]); `None` when unchanged.
    pub fn conversation(&self, msgs: &[ChatMessage]) -> Option<Vec<ChatMessage>> {
        (self.format.syntax == Syntax::Generic).then(|| generic::conversation(self, msgs))
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
        Some(GrammarSpec::Lark(grammar::lark(self, &allowed)))
    }

    /// Under `tool_choice: "auto"`, the grammar of calls to any offered tool and the token
    /// that triggers it (llama.cpp's lazy grammars): text stays free, but once the model
    /// opens a call it can only call an offered tool with arguments its schema allows — a
    /// small model's misspelt or invented tool names and broken JSON become valid calls.
    /// `None` where the format has no start tag that is a single token, for harmony (its
    /// channel tokens open thoughts and answers too), and where the prompt leaves thoughts
    /// open (a call tag written while thinking is not a call).
    pub fn lazy_grammar_after(&self, prompt: &str) -> Option<(GrammarSpec, u32)> {
        let trigger = self.start_token?;
        if self.choice != ToolChoice::Auto
            || self.format.syntax == Syntax::Harmony
            || crate::reasoning::opens_thoughts(prompt)
        {
            return None;
        }
        let all: Vec<&Value> = self.defs.iter().collect();
        Some((GrammarSpec::Lark(grammar::lark(self, &all)), trigger))
    }

    /// [`grammar`](Tools::grammar) for output that follows `prompt` (the rendered prompt):
    /// where the prompt leaves `<think>` open (DeepSeek-R1 and its distills, QwQ, the thinking
    /// Qwen3 and DeepSeek-V3.1 templates), the model's thoughts and `</think>` come first, then
    /// the calls. Without this the forced call would begin inside the thoughts, where the
    /// reasoning parser keeps it from the call parser. Gemma 4 may think first
    /// (`<|channel>thought\n…<channel|>`) wherever its prompt has not closed an empty thought
    /// (thinking off), as llama.cpp lets it.
    pub fn grammar_after(&self, prompt: &str) -> Option<GrammarSpec> {
        let spec = self.grammar()?;
        match spec {
            GrammarSpec::Lark(g) if crate::reasoning::opens_thoughts(prompt) => {
                let calls = g.replacen("start:", "calls:", 1);
                Some(GrammarSpec::Lark(format!(
                    "start: thoughts /\\n*/ calls\nthoughts[stop=\"</think>\"]: /(?s:.*)/\n{calls}"
                )))
            }
            GrammarSpec::Lark(g)
                if self.format.syntax == Syntax::Gemma
                    && !prompt
                        .trim_end()
                        .ends_with(crate::reasoning::GEMMA_THOUGHT_CLOSE) =>
            {
                let calls = g.replacen("start:", "calls:", 1);
                Some(GrammarSpec::Lark(format!(
                    "start: gthought? calls\n{}{calls}",
                    grammar::gemma_thought(self)
                )))
            }
            spec => Some(spec),
        }
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

/// Gemma 4's earlier template (the variant for interleaved thinking) reads a call's results
/// from the assistant turn that made the call (`tool_responses`), never from `tool` messages,
/// which it would render as turns of a `tool` role the model was not trained on. For a
/// template that writes Gemma's calls, reads `tool_responses` and never checks for a `tool`
/// role, the conversation comes back folded (as llama.cpp folds it for that template): an
/// assistant turn with calls takes the `tool` messages right after it as its
/// `tool_responses`, each `{"name", "response"}` (the name of the call it answers, by id, else
/// by position, else the message's `name`; the content parsed where it is JSON, else the
/// text), and the text of the next assistant turn when that turn makes no calls. `None`: the
/// template needs no folding, or the conversation has nothing to fold.
pub fn fold_tool_results(
    template: &ChatTemplate,
    msgs: &[ChatMessage],
) -> Option<Vec<ChatMessage>> {
    let src = template.source();
    let reads_results_on_the_turn = src.contains("<|tool_call>call:")
        && src.contains("tool_responses")
        && !src.contains("['role'] != 'tool'")
        && !src.contains("['role'] == 'tool'");
    if !reads_results_on_the_turn || !msgs.iter().any(|m| m.role == "tool") {
        return None;
    }
    let call_name = |c: &Value| {
        c.get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut out = Vec::with_capacity(msgs.len());
    let mut i = 0;
    while i < msgs.len() {
        let mut m = msgs[i].clone();
        i += 1;
        let calls = match &m.tool_calls {
            Some(c) if m.role == "assistant" && !c.is_empty() => c.clone(),
            _ => {
                out.push(m);
                continue;
            }
        };
        let mut results = Vec::new();
        while let Some(t) = msgs.get(i).filter(|t| t.role == "tool") {
            let by_id = calls.iter().find(|c| {
                t.tool_call_id.is_some()
                    && c.get("id").and_then(Value::as_str) == t.tool_call_id.as_deref()
            });
            let name = by_id
                .or_else(|| calls.get(results.len()))
                .and_then(call_name)
                .or_else(|| t.name.clone())
                .or_else(|| t.tool_call_id.clone())
                .unwrap_or_default();
            let response = serde_json::from_str::<Value>(&t.content)
                .unwrap_or_else(|_| Value::String(t.content.clone()));
            results.push(json!({"name": name, "response": response}));
            i += 1;
        }
        if !results.is_empty() {
            m.tool_responses = Some(results);
            let answer = msgs.get(i).filter(|n| {
                n.role == "assistant"
                    && n.tool_calls.as_ref().is_none_or(Vec::is_empty)
                    && !n.content.is_empty()
            });
            if let Some(n) = answer {
                if !m.content.is_empty() {
                    m.content.push('\n');
                }
                m.content.push_str(&n.content);
                i += 1;
            }
        }
        out.push(m);
    }
    Some(out)
}

/// A template from the test data, by file name (`crates/ridge-server/tests/data/templates`,
/// or the ones `ridge-tokenizer`'s tests hold).
#[cfg(test)]
pub(crate) fn test_template(name: &str) -> ChatTemplate {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let paths = [
        root.join("tests/data/templates").join(name),
        root.join("../ridge-tokenizer/tests/data/templates")
            .join(name),
    ];
    let source = paths
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| panic!("no template {name}"));
    ChatTemplate::new(source, "<s>", "</s>")
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .with_fixed_time(0)
}

#[cfg(test)]
mod tests;
