//! Reading calls out of a choice's text, as it streams.
//!
//! The text is scanned for the places a call can begin in the model's format (its opening
//! tag; for the JSON formats also a `{` that opens the whole output) and, when the request's
//! tools are known, for a Markdown fence. Text before such a place is content at once; from
//! it on the text is held as a *block* until the block's end is known (a closing tag, the end
//! of a JSON value, the closing fence, or the end of the output), and then the block is read
//! as calls. A block that does not read as calls is content exactly as the model wrote it
//! (harmony's without its control tokens): model output is untrusted, and a malformed call
//! must not be lost or crash anything.

use serde_json::{Map, Value};

use super::partial::{json_progress, object_prefix, string_end, Progress};
use super::{Syntax, ToolFormat, HARMONY_CALL_START};
use crate::reasoning::partial_suffix;

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
    /// A whole tool call (nothing of it was released before).
    Call(Call),
    /// A call begins: its function's name (parsers made with [`CallParser::streaming`]).
    CallBegin(String),
    /// More of the begun call's arguments text.
    CallArgs(String),
    /// The begun call is complete: the [`Piece::CallArgs`] since its [`Piece::CallBegin`]
    /// spell `arguments` exactly.
    CallEnd(Call),
}

/// A call released before its end: what went out of it.
#[derive(Clone, Debug)]
struct Begun {
    name: String,
    /// The arguments text released so far.
    sent: String,
    /// `sent` completed into a valid object (what the call is, should its text break off).
    healed: String,
}

/// A tool the request offered: its name, and its parameters' schema (Qwen3-Coder's XML
/// values are typed by it).
#[derive(Clone, Debug)]
struct Offered {
    name: String,
    params: Value,
}

/// What kind of block is being held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// Opening tag … closing tag (`end`); the end of the output closes it too.
    Tagged(&'static str),
    /// `[TOOL_CALLS]` and one call, either a JSON array or `NAME[ARGS]{…}`.
    Mistral,
    /// An opening tag of this many bytes, then a JSON array of calls (Granite 3.x).
    Array(usize),
    /// JSON calls `{…}` separated by `;`, optionally after `<|python_tag|>`: the whole output.
    Json,
    /// A Markdown fence holding a call object (or an array of them).
    Fence,
}

/// How a held block turned out.
enum Outcome {
    /// Its end has not come yet.
    Wait,
    /// The first `len` bytes are these calls.
    Calls(usize, Vec<Call>),
    /// The first `len` bytes are text; `code`: they open a code block that is still open.
    Text { len: usize, code: bool },
}

const PYTHON_TAG: &str = "<|python_tag|>";
const FENCE: &str = "```";
const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";
pub(super) const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub(super) const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
pub(super) const DS_SEP: &str = "<｜tool▁sep｜>";
const MESSAGE: &str = "<|message|>";
const CALL_TOKEN: &str = "<|call|>";
/// Gemma 4's string mark: a string value is `<|"|>TEXT<|"|>`.
pub(super) const GEMMA_QUOTE: &str = "<|\"|>";
/// Deepest nesting of a Gemma value ridge reads (model output is untrusted; deeper is text).
const GEMMA_MAX_DEPTH: usize = 64;

/// Splits streamed text into content and calls. Text that may be the start of a call is held
/// back until it is known; a call is released when its end arrives.
#[derive(Debug)]
pub struct CallParser {
    format: &'static ToolFormat,
    /// The request's tools, when known: enables the fallbacks (fenced or bare JSON calls of
    /// an offered function) and types Qwen3-Coder's values.
    offered: Option<Vec<Offered>>,
    buf: String,
    block: Option<Block>,
    /// Nothing but whitespace released yet (a bare JSON call must be the whole output).
    at_start: bool,
    /// Inside a Markdown code block that is not a call: its closing fence opens nothing.
    in_code: bool,
    /// Release calls' names and arguments as they are written ([`CallParser::streaming`]).
    stream: bool,
    /// The held block's calls already begun, in order.
    begun: Vec<Begun>,
    /// How many of `begun` already ended (a call ends once the next one in its block begins).
    ended: usize,
}

impl CallParser {
    /// A parser for `format` that does not know the request's tools: the format's own syntax
    /// only, any function name.
    pub fn new(format: &'static ToolFormat) -> Self {
        CallParser {
            format,
            offered: None,
            buf: String::new(),
            block: None,
            at_start: true,
            in_code: false,
            stream: false,
            begun: Vec::new(),
            ended: 0,
        }
    }

    /// This parser, releasing a call as it is written where the format allows: the call's
    /// [`Piece::CallBegin`] once its name is complete (and offered, when the tools are known),
    /// its arguments as [`Piece::CallArgs`] — prefixes of the final text, see
    /// [`partial`](super::partial) — and [`Piece::CallEnd`] when it is read whole. Calls in
    /// the JSON-argument formats (Hermes' object form, DeepSeek, Kimi K2, Mistral's
    /// `NAME[ARGS]`, the `[{"name", "arguments"}, …]` arrays, harmony) stream character by
    /// character, Qwen3-Coder's and GLM's XML a parameter at a time; the others (fences,
    /// bare JSON, Gemma's notation, LFM2's Python calls) come whole. A block
    /// whose calls began and that then does not read as calls ends them with the arguments
    /// read so far, closed; its text is not released as content (the client already shows the
    /// call).
    pub fn streaming(mut self) -> Self {
        self.stream = true;
        self
    }

    /// A parser for `format` that knows the request's tools (`tools`: the request's `tools`
    /// array, each `{"type": "function", "function": {"name", "parameters"}}`). Besides the
    /// format's own syntax it accepts what models write when they drift from it: a Markdown
    /// fence holding `{"name": …, "arguments"|"parameters": {…}}` (or an array of such), or that
    /// object as the whole output, where `name` is one of `tools`. Qwen3-Coder's XML values
    /// are converted by their parameter's schema type.
    pub fn with_tools(format: &'static ToolFormat, tools: &[Value]) -> Self {
        let offered = tools
            .iter()
            .filter_map(|d| {
                let f = d.get("function")?;
                Some(Offered {
                    name: f.get("name")?.as_str()?.to_string(),
                    params: f.get("parameters").cloned().unwrap_or(Value::Null),
                })
            })
            .collect();
        CallParser {
            offered: Some(offered),
            ..CallParser::new(format)
        }
    }

    /// Feeds `text`; returns what became final.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        self.run(false)
    }

    /// The end of the output: whatever is held back is read as it stands (a block whose end
    /// never came is read as if it ended here; what does not read as calls is content).
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = self.run(true);
        self.end_begun(0, &mut out);
        self.block = None;
        self.at_start = true;
        self.in_code = false;
        out
    }

    fn run(&mut self, finished: bool) -> Vec<Piece> {
        let mut out = Vec::new();
        loop {
            let progressed = match self.block {
                Some(b) => self.block_step(b, finished, &mut out),
                None => self.text_step(finished, &mut out),
            };
            if !progressed {
                break;
            }
        }
        merge_content(out)
    }

    /// Where calls may begin in running text, and the block each begins.
    fn triggers(&self) -> Vec<(&'static str, Block)> {
        let f = self.format;
        let mut t = match f.syntax {
            Syntax::Hermes
            | Syntax::QwenXml
            | Syntax::GlmXml
            | Syntax::DeepSeekR1
            | Syntax::DeepSeekV31
            | Syntax::Gemma
            | Syntax::Harmony
            | Syntax::Kimi
            | Syntax::Pythonic => vec![(f.start, Block::Tagged(f.end))],
            Syntax::MistralArgs | Syntax::MistralArray => vec![(TOOL_CALLS, Block::Mistral)],
            Syntax::TaggedArray => vec![(f.start, Block::Array(f.start.len()))],
            Syntax::Llama => vec![(PYTHON_TAG, Block::Json)],
            // The call is the whole answer, `{"tool_calls": …}` (see `bare_json`).
            Syntax::Generic => Vec::new(),
        };
        if self.offered.is_some() {
            t.push((FENCE, Block::Fence));
        }
        t
    }

    /// Whether a `{` opening the output may be a call.
    fn bare_json(&self) -> bool {
        matches!(self.format.syntax, Syntax::Llama | Syntax::Generic) || self.offered.is_some()
    }

    fn release(&mut self, len: usize, out: &mut Vec<Piece>) {
        if len == 0 {
            return;
        }
        let text: String = self.buf.drain(..len).collect();
        if !text.trim().is_empty() {
            self.at_start = false;
        }
        out.push(Piece::Content(text));
    }

    /// Running text: releases it up to the next possible call; false when it needs more.
    fn text_step(&mut self, finished: bool, out: &mut Vec<Piece>) -> bool {
        if self.buf.is_empty() {
            return false;
        }
        if self.at_start && self.bare_json() {
            let t = self.buf.trim_start();
            if t.starts_with('{') {
                self.block = Some(Block::Json);
                return true;
            }
            if t.is_empty() && !finished {
                return false;
            }
        }
        let triggers = self.triggers();
        let first = triggers
            .iter()
            .filter_map(|&(tag, b)| self.buf.find(tag).map(|i| (i, tag, b)))
            .min_by_key(|&(i, _, _)| i);
        match first {
            Some((i, tag, Block::Fence)) if self.in_code => {
                self.in_code = false;
                self.release(i + tag.len(), out);
                true
            }
            Some((i, _, b)) => {
                self.release(i, out);
                self.block = Some(b);
                true
            }
            None => {
                let tags: Vec<&str> = triggers.iter().map(|t| t.0).collect();
                let keep = if finished {
                    0
                } else {
                    partial_suffix(&self.buf, &tags)
                };
                self.release(self.buf.len() - keep, out);
                false
            }
        }
    }

    /// A held block: reads it once its end is known; false when it needs more.
    fn block_step(&mut self, block: Block, finished: bool, out: &mut Vec<Piece>) -> bool {
        let outcome = match block {
            Block::Tagged(end) => self.tagged(end, finished),
            Block::Mistral => self.mistral(finished),
            Block::Array(tag) => self.array(tag, finished),
            Block::Json => self.json(finished),
            Block::Fence => self.fence(finished),
        };
        match outcome {
            Outcome::Wait => {
                if self.stream {
                    self.advance(block, out);
                }
                return false;
            }
            Outcome::Calls(len, calls) => {
                self.buf.drain(..len);
                self.at_start = false;
                let n = calls.len();
                for (i, c) in calls.into_iter().enumerate().skip(self.ended) {
                    match self.begun.get(i) {
                        Some(b) => {
                            let c = match c.arguments.strip_prefix(b.sent.as_str()) {
                                Some(rest) if c.name == b.name => {
                                    if !rest.is_empty() {
                                        out.push(Piece::CallArgs(rest.to_string()));
                                    }
                                    c
                                }
                                // A key written twice moved an earlier value: what went out
                                // stands, closed.
                                _ => Self::healed_call(b, out),
                            };
                            out.push(Piece::CallEnd(c));
                        }
                        None => out.push(Piece::Call(c)),
                    }
                }
                self.end_begun(n, out);
            }
            Outcome::Text { len, .. } if !self.begun.is_empty() => {
                self.buf.drain(..len.max(1).min(self.buf.len()));
                self.at_start = false;
                self.end_begun(0, out);
            }
            Outcome::Text { len, code } => {
                // Every block starts with at least one character of its own; releasing none
                // would find the same block again.
                let len = len.max(self.buf.chars().next().map_or(0, char::len_utf8));
                let text: String = self.buf.drain(..len).collect();
                let text = if self.format.syntax == Syntax::Harmony {
                    harmony_text(&text)
                } else {
                    text
                };
                if !text.trim().is_empty() {
                    self.at_start = false;
                }
                self.in_code = code;
                if !text.is_empty() {
                    out.push(Piece::Content(text));
                }
            }
        }
        self.block = None;
        true
    }

    /// Ends the begun calls from the `from`-th on with what went out of them, closed.
    fn end_begun(&mut self, from: usize, out: &mut Vec<Piece>) {
        let begun = std::mem::take(&mut self.begun);
        let from = from.max(std::mem::take(&mut self.ended));
        for b in begun.iter().skip(from) {
            let c = Self::healed_call(b, out);
            out.push(Piece::CallEnd(c));
        }
    }

    /// A begun call completed by its healed arguments (the rest of them released).
    fn healed_call(b: &Begun, out: &mut Vec<Piece>) -> Call {
        let rest = &b.healed[b.sent.len()..];
        if !rest.is_empty() {
            out.push(Piece::CallArgs(rest.to_string()));
        }
        Call {
            name: b.name.clone(),
            arguments: b.healed.clone(),
        }
    }

    /// Releases what became known of the held block's calls.
    fn advance(&mut self, block: Block, out: &mut Vec<Piece>) {
        let calls = self.partial_calls(block);
        for (i, (name, p)) in calls.into_iter().enumerate() {
            if i == self.begun.len() {
                if let Some(tools) = &self.offered {
                    if !tools.iter().any(|t| t.name == name) {
                        return;
                    }
                }
                // The call before it in the block is complete: it ends here.
                if let Some(prev) = self.begun.get(self.ended) {
                    let c = Self::healed_call(prev, out);
                    out.push(Piece::CallEnd(c));
                    self.ended += 1;
                }
                out.push(Piece::CallBegin(name.clone()));
                self.begun.push(Begun {
                    name: name.clone(),
                    sent: String::new(),
                    healed: "{}".to_string(),
                });
            }
            let b = &mut self.begun[i];
            if b.name != name || !p.stable.starts_with(b.sent.as_str()) {
                // The call changed under what went out (a repeated key): it stays as sent.
                continue;
            }
            if p.stable.len() > b.sent.len() {
                out.push(Piece::CallArgs(p.stable[b.sent.len()..].to_string()));
                b.sent = p.stable;
            }
            if p.healed.starts_with(b.sent.as_str()) {
                b.healed = p.healed;
            }
        }
    }

    /// The calls of a held block whose names are complete, with their arguments' progress.
    fn partial_calls(&self, block: Block) -> Vec<(String, Progress)> {
        match block {
            Block::Tagged(_) => {
                let body = &self.buf[self.format.start.len()..];
                match self.format.syntax {
                    Syntax::Hermes => hermes_partial(body).into_iter().collect(),
                    Syntax::QwenXml => self.xml_partial(body),
                    Syntax::GlmXml => self.glm_partial(body).into_iter().collect(),
                    Syntax::DeepSeekR1 | Syntax::DeepSeekV31 => deepseek_partial(body),
                    Syntax::Harmony => harmony_partial(body).into_iter().collect(),
                    Syntax::Kimi => kimi_partial(body),
                    _ => Vec::new(),
                }
            }
            Block::Mistral => {
                let p = skip_ws(&self.buf, TOOL_CALLS.len());
                if self.buf[p..].starts_with('[') {
                    array_partial(&self.buf[p..])
                } else {
                    self.mistral_partial().into_iter().collect()
                }
            }
            Block::Array(tag) => array_partial(&self.buf[tag..]),
            Block::Json if self.format.syntax == Syntax::Generic => generic_partial(&self.buf),
            _ => Vec::new(),
        }
    }

    /// Qwen3-Coder's `<function=NAME>` calls so far, each up to its last complete parameter.
    fn xml_partial(&self, body: &str) -> Vec<(String, Progress)> {
        let mut calls = Vec::new();
        let mut rest = body.trim_start();
        while let Some(r) = rest.strip_prefix("<function=") {
            let Some(gt) = r.find('>') else { break };
            let name = r[..gt].trim();
            if name.is_empty() {
                break;
            }
            let r = &r[gt + 1..];
            let (inner, done, after) = match r.find("</function>") {
                Some(i) => (&r[..i], true, &r[i + "</function>".len()..]),
                None => (r, false, ""),
            };
            let cut = if done {
                inner.len()
            } else {
                match inner.rfind("<parameter=") {
                    None => 0,
                    Some(p) => match inner[p..].find("</parameter>") {
                        Some(e) => p + e + "</parameter>".len(),
                        None => p,
                    },
                }
            };
            let Some(args) = self.xml_params(name, &inner[..cut]) else {
                break;
            };
            calls.push((name.to_string(), object_prefix(args, done)));
            if !done {
                break;
            }
            rest = after.trim_start();
        }
        calls
    }

    /// GLM's call so far, up to its last complete `<arg_value>`.
    fn glm_partial(&self, body: &str) -> Option<(String, Progress)> {
        const VALUE_END: &str = "</arg_value>";
        let start = body.find("<arg_key>")?;
        let cut = body[start..]
            .rfind(VALUE_END)
            .map_or(start, |e| start + e + VALUE_END.len());
        let call = self.glm_call(&body[..cut])?;
        Some((call.name, object_prefix(call.arguments, false)))
    }

    /// `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…` so far.
    fn mistral_partial(&self) -> Option<(String, Progress)> {
        let buf = &self.buf;
        let p = skip_ws(buf, TOOL_CALLS.len());
        let name_end = p + buf[p..].find(|c| !is_name_char(c))?;
        let mut q = name_end;
        if buf[q..].starts_with(CALL_ID) {
            q += CALL_ID.len();
            q += buf[q..].find(|c| !is_name_char(c))?;
        }
        let a = skip_ws(buf, q + buf[q..].strip_prefix(ARGS).map(|_| ARGS.len())?);
        Some((buf[p..name_end].to_string(), json_progress(&buf[a..])?))
            .filter(|(n, _)| !n.is_empty())
    }

    /// Waiting for more text, or at the end, the whole held text as text.
    fn wait_or_text(&self, finished: bool) -> Outcome {
        if finished {
            Outcome::Text {
                len: self.buf.len(),
                code: false,
            }
        } else {
            Outcome::Wait
        }
    }

    /// `START body END` (the buffer starts with the format's opening tag).
    fn tagged(&self, end: &str, finished: bool) -> Outcome {
        let start = self.format.start.len();
        let rest = &self.buf[start..];
        let (body, len) = match rest.find(end) {
            Some(i) => (&rest[..i], start + i + end.len()),
            None if finished => (rest, self.buf.len()),
            None => return Outcome::Wait,
        };
        match self.body_calls(body) {
            Some(calls) => Outcome::Calls(len, calls),
            None => Outcome::Text { len, code: false },
        }
    }

    /// The calls between a tagged format's tags.
    fn body_calls(&self, body: &str) -> Option<Vec<Call>> {
        let calls = match self.format.syntax {
            Syntax::Hermes => json_calls(body).or_else(|| self.xml_calls(body)),
            Syntax::QwenXml => self.xml_calls(body).or_else(|| json_calls(body)),
            Syntax::GlmXml => self
                .glm_call(body)
                .map(|c| vec![c])
                .or_else(|| json_calls(body)),
            Syntax::DeepSeekR1 | Syntax::DeepSeekV31 => deepseek_calls(body),
            Syntax::Harmony => harmony_call(body).map(|c| vec![c]),
            Syntax::Gemma => gemma_call(body).map(|c| vec![c]),
            Syntax::Kimi => kimi_calls(body),
            Syntax::Pythonic => pythonic_calls(body),
            _ => None,
        }?;
        (!calls.is_empty()).then_some(calls)
    }

    /// `[TOOL_CALLS]` then `[{"name", "arguments"}, …]` or `NAME[CALL_ID]ID[ARGS]{…}`.
    fn mistral(&self, finished: bool) -> Outcome {
        let p = skip_ws(&self.buf, TOOL_CALLS.len());
        if p == self.buf.len() {
            return self.wait_or_text(finished);
        }
        if self.buf[p..].starts_with('[') {
            return self.array(TOOL_CALLS.len(), finished);
        }
        self.mistral_named(p, finished)
    }

    /// A tag of `tag` bytes, then `[{"name", "arguments"}, …]` (and the format's closing
    /// tag, where it has one).
    fn array(&self, tag: usize, finished: bool) -> Outcome {
        let p = skip_ws(&self.buf, tag);
        if p == self.buf.len() {
            return self.wait_or_text(finished);
        }
        let Some(e) = json_end(&self.buf[p..]) else {
            return self.wait_or_text(finished);
        };
        let calls = serde_json::from_str::<Value>(&self.buf[p..p + e])
            .ok()
            .and_then(|v| v.as_array().cloned())
            .and_then(|a| a.iter().map(loose_call).collect::<Option<Vec<Call>>>())
            .filter(|c| !c.is_empty());
        // A closing tag after the array (Nemotron's `</TOOLCALL>`) belongs to the calls.
        let mut len = p + e;
        let end = self.format.end;
        if calls.is_some() && !end.is_empty() && self.format.syntax == Syntax::TaggedArray {
            let q = skip_ws(&self.buf, len);
            let rest = &self.buf[q..];
            if rest.starts_with(end) {
                len = q + end.len();
            } else if end.starts_with(rest) && !finished {
                return Outcome::Wait;
            }
        }
        match calls {
            Some(c) => Outcome::Calls(len, c),
            None => Outcome::Text {
                len: p + e,
                code: false,
            },
        }
    }

    /// `NAME[CALL_ID]ID[ARGS]{…}` from `p` (the `[CALL_ID]` part optional).
    fn mistral_named(&self, p: usize, finished: bool) -> Outcome {
        let buf = &self.buf;
        let name_end = p + buf[p..].find(|c| !is_name_char(c)).unwrap_or(buf.len() - p);
        if name_end == buf.len() {
            return self.wait_or_text(finished);
        }
        let fail = |len| Outcome::Text { len, code: false };
        if name_end == p {
            return fail(p);
        }
        let mut q = name_end;
        if buf[q..].starts_with(CALL_ID) {
            q += CALL_ID.len();
            q += buf[q..].find(|c| !is_name_char(c)).unwrap_or(buf.len() - q);
        }
        let rest = &buf[q..];
        if !rest.starts_with(ARGS) {
            return if ARGS.starts_with(rest) || CALL_ID.starts_with(rest) {
                self.wait_or_text(finished)
            } else {
                fail(q)
            };
        }
        let a = skip_ws(buf, q + ARGS.len());
        if a == buf.len() {
            return self.wait_or_text(finished);
        }
        if !buf[a..].starts_with('{') {
            return fail(a);
        }
        let Some(e) = json_end(&buf[a..]) else {
            return self.wait_or_text(finished);
        };
        match object_text(&buf[a..a + e]) {
            Some(arguments) => Outcome::Calls(
                a + e,
                vec![Call {
                    name: buf[p..name_end].to_string(),
                    arguments,
                }],
            ),
            None => fail(a + e),
        }
    }

    /// JSON calls separated by `;`, optionally after `<|python_tag|>`, as the whole output.
    fn json(&self, finished: bool) -> Outcome {
        let buf = &self.buf;
        let mut p = skip_ws(buf, 0);
        if buf[p..].starts_with(PYTHON_TAG) {
            p = skip_ws(buf, p + PYTHON_TAG.len());
        }
        let mut calls = Vec::new();
        loop {
            if !calls.is_empty() && buf[p..].starts_with(';') {
                p = skip_ws(buf, p + 1);
            }
            if p == buf.len() {
                if !finished {
                    return Outcome::Wait;
                }
                return if calls.is_empty() {
                    self.wait_or_text(true)
                } else {
                    Outcome::Calls(p, calls)
                };
            }
            if !buf[p..].starts_with('{') {
                return Outcome::Text {
                    len: p,
                    code: false,
                };
            }
            let Some(e) = json_end(&buf[p..]) else {
                return self.wait_or_text(finished);
            };
            let call = serde_json::from_str::<Value>(&buf[p..p + e]).ok();
            match call.and_then(|v| self.object_calls(&v)) {
                Some(c) => calls.extend(c),
                None => {
                    return Outcome::Text {
                        len: p + e,
                        code: false,
                    }
                }
            }
            p = skip_ws(buf, p + e);
        }
    }

    /// A Markdown fence (an optional language word) holding a call object or an array of
    /// them, then the closing fence.
    fn fence(&self, finished: bool) -> Outcome {
        let buf = &self.buf;
        let lang = FENCE.len()
            + buf[FENCE.len()..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(buf.len() - FENCE.len());
        let p = skip_ws(buf, lang);
        if p == buf.len() {
            return self.wait_or_text(finished);
        }
        if !(buf[p..].starts_with('{') || buf[p..].starts_with('[')) {
            // A code block of something else: its closing fence must not open a block.
            return Outcome::Text { len: p, code: true };
        }
        let Some(e) = json_end(&buf[p..]) else {
            return self.wait_or_text(finished);
        };
        let q = skip_ws(buf, p + e);
        if !buf[q..].starts_with(FENCE) {
            return if FENCE.starts_with(&buf[q..]) && !finished {
                Outcome::Wait
            } else {
                Outcome::Text {
                    len: p + e,
                    code: true,
                }
            };
        }
        let len = q + FENCE.len();
        let calls = match serde_json::from_str::<Value>(&buf[p..p + e]) {
            Ok(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| self.strict_call(v))
                .collect::<Option<Vec<Call>>>(),
            Ok(v @ Value::Object(_)) => self.object_calls(&v),
            _ => None,
        };
        match calls {
            Some(c) => Outcome::Calls(len, c),
            None => Outcome::Text { len, code: false },
        }
    }

    /// The calls a whole-answer JSON object holds: ridge's generic `{"tool_calls": [{"name",
    /// "arguments"}, …]}` (each as [`Self::strict_call`] reads it), or one call object.
    fn object_calls(&self, v: &Value) -> Option<Vec<Call>> {
        if let (Syntax::Generic, Some(o)) = (self.format.syntax, v.as_object()) {
            if let (1, Some(Value::Array(list))) = (o.len(), o.get("tool_calls")) {
                return list
                    .iter()
                    .map(|c| self.strict_call(c))
                    .collect::<Option<Vec<Call>>>()
                    .filter(|c| !c.is_empty());
            }
        }
        self.strict_call(v).map(|c| vec![c])
    }

    /// `{"name", "arguments"|"parameters"}` as a fallback or Llama call: the name must be an
    /// offered tool (without the tools, the object must have just those two keys), and the
    /// arguments an object.
    fn strict_call(&self, v: &Value) -> Option<Call> {
        let o = v.as_object()?;
        let name = o.get("name")?.as_str()?;
        let args = o.get("arguments").or_else(|| o.get("parameters"))?;
        match &self.offered {
            Some(tools) if !tools.iter().any(|t| t.name == name) => return None,
            None if o.len() != 2 => return None,
            _ => {}
        }
        let arguments = match args {
            Value::Object(_) => args.to_string(),
            Value::String(s) => object_text(s)?,
            _ => return None,
        };
        Some(Call {
            name: name.to_string(),
            arguments,
        })
    }

    /// Qwen3-Coder's `<function=NAME><parameter=P>VALUE</parameter>…</function>`, one or more.
    fn xml_calls(&self, body: &str) -> Option<Vec<Call>> {
        let mut calls = Vec::new();
        let mut rest = body.trim();
        while !rest.is_empty() {
            let r = rest.strip_prefix("<function=")?;
            let gt = r.find('>')?;
            let name = r[..gt].trim();
            if name.is_empty() {
                return None;
            }
            let r = &r[gt + 1..];
            let (inner, after) = match r.find("</function>") {
                Some(i) => (&r[..i], &r[i + "</function>".len()..]),
                None => (r, ""),
            };
            calls.push(Call {
                name: name.to_string(),
                arguments: self.xml_params(name, inner)?,
            });
            rest = after.trim();
        }
        Some(calls)
    }

    /// GLM's `NAME<arg_key>K</arg_key><arg_value>V</arg_value>…` (whitespace between the
    /// parts ignored), values typed as [`Self::typed`] types them.
    fn glm_call(&self, body: &str) -> Option<Call> {
        const KEY: &str = "<arg_key>";
        const KEY_END: &str = "</arg_key>";
        const VALUE: &str = "<arg_value>";
        const VALUE_END: &str = "</arg_value>";
        let body = body.trim();
        let name_end = body.find(KEY).unwrap_or(body.len());
        let name = body[..name_end].trim();
        if name.is_empty() || !name.chars().all(is_name_char) {
            return None;
        }
        let mut args = Map::new();
        let mut rest = body[name_end..].trim_start();
        while !rest.is_empty() {
            let r = rest.strip_prefix(KEY)?;
            let e = r.find(KEY_END)?;
            let key = r[..e].trim();
            let r = r[e + KEY_END.len()..].trim_start().strip_prefix(VALUE)?;
            let e = r.find(VALUE_END)?;
            args.insert(key.to_string(), self.typed(name, key, &r[..e]));
            rest = r[e + VALUE_END.len()..].trim_start();
        }
        Some(Call {
            name: name.to_string(),
            arguments: Value::Object(args).to_string(),
        })
    }

    /// The `<parameter=P>VALUE</parameter>` list of one function, as a JSON object's text. A
    /// missing `</parameter>` ends the value at the next parameter.
    fn xml_params(&self, function: &str, inner: &str) -> Option<String> {
        let mut args = Map::new();
        let mut rest = inner.trim();
        while !rest.is_empty() {
            let r = rest.strip_prefix("<parameter=")?;
            let gt = r.find('>')?;
            let name = r[..gt].trim();
            let r = &r[gt + 1..];
            let close = r.find("</parameter>");
            let next = r.find("<parameter=");
            let (raw, after) = match (close, next) {
                (Some(c), Some(n)) if n < c => (&r[..n], &r[n..]),
                (Some(c), _) => (&r[..c], &r[c + "</parameter>".len()..]),
                (None, Some(n)) => (&r[..n], &r[n..]),
                (None, None) => (r, ""),
            };
            let raw = raw.strip_prefix('\n').unwrap_or(raw);
            let raw = raw.strip_suffix('\n').unwrap_or(raw);
            args.insert(name.to_string(), self.typed(function, name, raw));
            rest = after.trim_start();
        }
        Some(Value::Object(args).to_string())
    }

    /// An XML value as its parameter's schema types it: numbers, booleans, null, objects and
    /// arrays parse as JSON; strings, values that do not parse as their type, and parameters
    /// the schema does not describe stay strings. A described parameter without a `type`
    /// parses as JSON where it can.
    fn typed(&self, function: &str, param: &str, raw: &str) -> Value {
        let schema = self
            .offered
            .iter()
            .flatten()
            .find(|t| t.name == function)
            .and_then(|t| t.params.get("properties")?.get(param));
        let Some(schema) = schema else {
            return Value::String(raw.to_string());
        };
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec!["any"],
        };
        let json = serde_json::from_str::<Value>(raw.trim()).ok();
        for t in types {
            let fits = |v: &Value| match t {
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                "null" => v.is_null(),
                "object" => v.is_object(),
                "array" => v.is_array(),
                "any" => true,
                _ => false,
            };
            if let Some(v) = json.as_ref().filter(|v| fits(v)) {
                return v.clone();
            }
        }
        Value::String(raw.to_string())
    }
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-' || c == '.'
}

/// The first byte at or after `p` that is not whitespace.
fn skip_ws(s: &str, p: usize) -> usize {
    s.len() - s[p..].trim_start().len()
}

/// The length of the JSON object or array `s` starts with, once it is closed (brackets
/// counted outside strings; whether it is valid JSON is for the parser to say).
pub(super) fn json_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `s` as compact JSON text when it is a JSON object.
fn object_text(s: &str) -> Option<String> {
    match serde_json::from_str::<Value>(s.trim()) {
        Ok(v @ Value::Object(_)) => Some(v.to_string()),
        _ => None,
    }
}

/// `{"name": …, "arguments": …}` inside a format's own tags: arguments an object or a JSON
/// string (kept as given), absent meaning none.
fn loose_call(v: &Value) -> Option<Call> {
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::String(s)) => s.clone(),
        Some(a) => a.to_string(),
        None => "{}".to_string(),
    };
    Some(Call { name, arguments })
}

/// Hermes's `{"name": NAME, "arguments": {…` so far: the name must come first, complete, and
/// the arguments be an object.
fn hermes_partial(body: &str) -> Option<(String, Progress)> {
    let b = body.trim_start();
    let mut p = skip_ws(b, b.strip_prefix('{').map(|_| 1)?);
    let mut name = None;
    loop {
        let key_len = value_len(&b[p..])?;
        let key: String = serde_json::from_str(&b[p..p + key_len]).ok()?;
        p = skip_ws(b, p + key_len);
        p = skip_ws(b, p + b[p..].strip_prefix(':').map(|_| 1)?);
        match key.as_str() {
            "arguments" | "parameters" => {
                return Some((name?, json_progress(&b[p..])?));
            }
            _ => {
                let v = value_len(&b[p..])?;
                if key == "name" {
                    name = Some(serde_json::from_str::<String>(&b[p..p + v]).ok()?);
                }
                p = skip_ws(b, p + v);
                p = skip_ws(b, p + b[p..].strip_prefix(',').map(|_| 1)?);
            }
        }
    }
}

/// ridge's generic `{"tool_calls": [{"name": …, "arguments": {…}}, …` so far.
fn generic_partial(s: &str) -> Vec<(String, Progress)> {
    let Some(b) = s.trim_start().strip_prefix('{') else {
        return Vec::new();
    };
    let b = b.trim_start();
    let Some(rest) = b.strip_prefix("\"tool_calls\"") else {
        return Vec::new();
    };
    match rest.trim_start().strip_prefix(':') {
        Some(r) => array_partial(r),
        None => Vec::new(),
    }
}

/// `[{"name": …, "arguments": {…}}, …` so far (Granite 3, Nemotron-H, Mistral Nemo).
fn array_partial(s: &str) -> Vec<(String, Progress)> {
    let mut calls = Vec::new();
    let Some(mut rest) = s.trim_start().strip_prefix('[') else {
        return calls;
    };
    loop {
        rest = rest.trim_start();
        if !rest.starts_with('{') {
            break;
        }
        match hermes_partial(rest) {
            Some(c) => calls.push(c),
            None => break,
        }
        let Some(n) = value_len(rest) else { break };
        match rest[n..].trim_start().strip_prefix(',') {
            Some(r) => rest = r,
            None => break,
        }
    }
    calls
}

/// The length of the complete JSON value `s` starts with (a string, an object or array, or
/// a scalar followed by a delimiter).
fn value_len(s: &str) -> Option<usize> {
    match s.as_bytes().first()? {
        b'{' | b'[' => json_end(s),
        b'"' => string_end(s.as_bytes()),
        _ => s
            .find(|c: char| c == ',' || c == '}' || c == ']' || c.is_whitespace())
            .filter(|&n| n > 0),
    }
}

/// DeepSeek's calls so far (R1's or V3.1's form).
fn deepseek_partial(body: &str) -> Vec<(String, Progress)> {
    let mut calls = Vec::new();
    let mut rest = body.trim_start();
    while let Some(r) = rest.strip_prefix(DS_CALL_BEGIN) {
        if let Some(i) = r.find(DS_CALL_END) {
            match deepseek_call(&r[..i]) {
                Some(c) => calls.push((c.name, object_prefix(c.arguments, true))),
                None => break,
            }
            rest = r[i + DS_CALL_END.len()..].trim_start();
            continue;
        }
        let Some((left, right)) = r.split_once(DS_SEP) else {
            break;
        };
        let open = right.trim_start();
        let (name, args) = if open.starts_with('{') {
            (left.trim(), open)
        } else {
            let Some((name, fenced)) = right.split_once('\n') else {
                break;
            };
            match fenced.find('{') {
                Some(i)
                    if fenced[..i]
                        .trim()
                        .trim_start_matches(FENCE)
                        .chars()
                        .all(char::is_alphanumeric) =>
                {
                    (name.trim(), &fenced[i..])
                }
                _ => break,
            }
        };
        if let (false, Some(p)) = (name.is_empty(), json_progress(args)) {
            calls.push((name.to_string(), p));
        }
        break;
    }
    calls
}

const KIMI_CALL_BEGIN: &str = "<|tool_call_begin|>";
const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";
const KIMI_CALL_END: &str = "<|tool_call_end|>";

/// A Kimi call id's function name: `functions.NAME:INDEX` (prefix and index optional).
fn kimi_name(id: &str) -> Option<&str> {
    let id = id.trim();
    let id = id.strip_prefix("functions.").unwrap_or(id);
    let name = match id.rsplit_once(':') {
        Some((n, i)) if i.chars().all(|c| c.is_ascii_digit()) => n,
        _ => id,
    };
    (!name.is_empty() && name.chars().all(is_name_char)).then_some(name)
}

/// Kimi K2's calls inside its section: `<|tool_call_begin|>ID<|tool_call_argument_begin|>{…}
/// <|tool_call_end|>` each.
fn kimi_calls(body: &str) -> Option<Vec<Call>> {
    delimited_calls(body, KIMI_CALL_BEGIN, KIMI_CALL_END, |inner| {
        let (id, args) = inner.split_once(KIMI_ARGS)?;
        Some(Call {
            name: kimi_name(id)?.to_string(),
            arguments: object_text(args)?,
        })
    })
}

/// Kimi K2's calls so far.
fn kimi_partial(body: &str) -> Vec<(String, Progress)> {
    let mut calls = Vec::new();
    let mut rest = body.trim_start();
    while let Some(r) = rest.strip_prefix(KIMI_CALL_BEGIN) {
        let Some((id, args)) = r.split_once(KIMI_ARGS) else {
            break;
        };
        let Some(name) = kimi_name(id) else { break };
        let (args, after) = match args.find(KIMI_CALL_END) {
            Some(i) => (&args[..i], Some(&args[i + KIMI_CALL_END.len()..])),
            None => (args, None),
        };
        let Some(p) = json_progress(args.trim_start()) else {
            break;
        };
        calls.push((name.to_string(), p));
        match after {
            Some(a) => rest = a.trim_start(),
            None => break,
        }
    }
    calls
}

/// LFM2's `[NAME(key=VALUE, …), …]`: the calls, each's arguments a JSON object.
fn pythonic_calls(body: &str) -> Option<Vec<Call>> {
    let mut r = PyReader {
        s: body.trim(),
        pos: 0,
    };
    r.expect('[')?;
    let mut calls = Vec::new();
    loop {
        r.ws();
        let start = r.pos;
        while r.peek().is_some_and(is_name_char) {
            r.bump();
        }
        let name = &r.s[start..r.pos];
        if name.is_empty() {
            return None;
        }
        r.expect('(')?;
        let mut args = Map::new();
        r.ws();
        if r.peek() != Some(')') {
            loop {
                r.ws();
                let k = r.pos;
                while r.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    r.bump();
                }
                let key = r.s[k..r.pos].to_string();
                if key.is_empty() {
                    return None;
                }
                r.expect('=')?;
                r.ws();
                args.insert(key, r.value(0)?);
                r.ws();
                match r.bump()? {
                    ',' => continue,
                    ')' => break,
                    _ => return None,
                }
            }
        } else {
            r.bump();
        }
        calls.push(Call {
            name: name.to_string(),
            arguments: Value::Object(args).to_string(),
        });
        r.ws();
        match r.bump()? {
            ',' => continue,
            ']' => break,
            _ => return None,
        }
    }
    r.ws();
    (r.pos == r.s.len()).then_some(calls)
}

/// Reads Python literals (and JSON's): strings in either quote with Python's escapes,
/// numbers, `True`/`False`/`None` and `true`/`false`/`null`, `[…]`, `(…)` (as lists) and
/// `{key: value, …}` with string keys.
struct PyReader<'a> {
    s: &'a str,
    pos: usize,
}

impl PyReader<'_> {
    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn expect(&mut self, c: char) -> Option<()> {
        self.ws();
        (self.bump()? == c).then_some(())
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > GEMMA_MAX_DEPTH {
            return None;
        }
        self.ws();
        match self.peek()? {
            q @ ('"' | '\'') => self.string(q).map(Value::String),
            open @ ('[' | '(') => {
                let close = if open == '[' { ']' } else { ')' };
                self.bump();
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.peek()? == close {
                        self.bump();
                        return Some(Value::Array(items));
                    }
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.bump()? {
                        ',' => {}
                        c if c == close => return Some(Value::Array(items)),
                        _ => return None,
                    }
                }
            }
            '{' => {
                self.bump();
                let mut m = Map::new();
                loop {
                    self.ws();
                    if self.peek()? == '}' {
                        self.bump();
                        return Some(Value::Object(m));
                    }
                    let key = match self.value(depth + 1)? {
                        Value::String(k) => k,
                        _ => return None,
                    };
                    self.expect(':')?;
                    m.insert(key, self.value(depth + 1)?);
                    self.ws();
                    match self.bump()? {
                        ',' => {}
                        '}' => return Some(Value::Object(m)),
                        _ => return None,
                    }
                }
            }
            _ => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_alphanumeric() || matches!(c, '-' | '+' | '.' | '_'))
                {
                    self.bump();
                }
                match &self.s[start..self.pos] {
                    "True" | "true" => Some(Value::Bool(true)),
                    "False" | "false" => Some(Value::Bool(false)),
                    "None" | "null" => Some(Value::Null),
                    word => serde_json::from_str::<serde_json::Number>(word)
                        .ok()
                        .map(Value::Number)
                        .or_else(|| {
                            // Python spellings JSON lacks: `1.`, `.5`, `1_000`.
                            let f: f64 = word.replace('_', "").parse().ok()?;
                            serde_json::Number::from_f64(f).map(Value::Number)
                        }),
                }
            }
        }
    }

    /// A string in quote `q`, with Python's escapes.
    fn string(&mut self, q: char) -> Option<String> {
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump()? {
                c if c == q => return Some(out),
                '\\' => match self.bump()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    '0' => out.push('\0'),
                    'u' => {
                        let hex = self.s.get(self.pos..self.pos + 4)?;
                        let mut code = u32::from_str_radix(hex, 16).ok()?;
                        self.pos += 4;
                        // A surrogate pair, as JSON writes characters past U+FFFF.
                        if (0xD800..0xDC00).contains(&code) && self.s[self.pos..].starts_with("\\u")
                        {
                            let low =
                                u32::from_str_radix(self.s.get(self.pos + 2..self.pos + 6)?, 16)
                                    .ok()?;
                            if (0xDC00..0xE000).contains(&low) {
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                                self.pos += 6;
                            }
                        }
                        out.push(char::from_u32(code)?);
                    }
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
    }
}

/// A harmony call so far: `NAME<|channel|>commentary json<|message|>{…`.
fn harmony_partial(body: &str) -> Option<(String, Progress)> {
    let name = body[..body.find("<|")?].trim();
    let args = &body[body.find(MESSAGE)? + MESSAGE.len()..];
    if name.is_empty() {
        return None;
    }
    Some((name.to_string(), json_progress(args.trim_start())?))
}

/// Hermes's body: one call object, or an array of them.
fn json_calls(body: &str) -> Option<Vec<Call>> {
    match serde_json::from_str::<Value>(body.trim()).ok()? {
        Value::Array(a) => a.iter().map(loose_call).collect(),
        v => loose_call(&v).map(|c| vec![c]),
    }
}

/// DeepSeek's calls between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`: each
/// `<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>`, in R1's or V3.1's form ([`deepseek_call`]).
fn deepseek_calls(body: &str) -> Option<Vec<Call>> {
    delimited_calls(body, DS_CALL_BEGIN, DS_CALL_END, deepseek_call)
}

/// Calls each written `BEGIN…END` back to back (whitespace between; the last `END` may be
/// missing), each inside read by `read`; `None` when anything else is there or a call does
/// not read.
fn delimited_calls(
    body: &str,
    begin: &str,
    end: &str,
    read: impl Fn(&str) -> Option<Call>,
) -> Option<Vec<Call>> {
    let mut calls = Vec::new();
    let mut rest = body.trim_start();
    while !rest.is_empty() {
        let r = rest.strip_prefix(begin)?;
        let (inner, after) = match r.find(end) {
            Some(i) => (&r[..i], &r[i + end.len()..]),
            None => (r, ""),
        };
        calls.push(read(inner)?);
        rest = after.trim_start();
    }
    Some(calls)
}

/// R1: `function<｜tool▁sep｜>NAME\n```json\n{…}\n```` (the type, then the name and fenced
/// arguments); V3.1: `NAME<｜tool▁sep｜>{…}`.
fn deepseek_call(inner: &str) -> Option<Call> {
    let (left, right) = inner.split_once(DS_SEP)?;
    let (name, args) = if right.trim_start().starts_with('{') {
        (left.trim(), right)
    } else {
        let (name, rest) = right.split_once('\n')?;
        (name.trim(), strip_fence(rest))
    };
    if name.is_empty() {
        return None;
    }
    Some(Call {
        name: name.to_string(),
        arguments: object_text(args)?,
    })
}

/// The inside of a Markdown fence (` ```json … ``` `), or the text when it has none.
fn strip_fence(s: &str) -> &str {
    let s = s.trim();
    let Some(inner) = s.strip_prefix(FENCE) else {
        return s;
    };
    let inner = inner.trim_start_matches(|c: char| c.is_alphanumeric());
    inner.strip_suffix(FENCE).unwrap_or(inner).trim()
}

/// The canonical harmony call's body, `NAME<|channel|>commentary json<|message|>ARGS` (see
/// `crate::reasoning`).
fn harmony_call(body: &str) -> Option<Call> {
    let name_end = body.find("<|").unwrap_or(body.len());
    let name = body[..name_end].trim();
    let args = &body[body.find(MESSAGE)? + MESSAGE.len()..];
    if name.is_empty() {
        return None;
    }
    Some(Call {
        name: name.to_string(),
        arguments: object_text(args)?,
    })
}

/// Gemma 4's call body, `call:NAME{key:value,…}` (whitespace around it allowed): the name,
/// and the arguments read by [`GemmaReader`] into a JSON object.
fn gemma_call(body: &str) -> Option<Call> {
    let rest = body.trim().strip_prefix("call:")?;
    let brace = rest.find('{')?;
    let name = rest[..brace].trim();
    if name.is_empty() || !name.chars().all(is_name_char) {
        return None;
    }
    let mut r = GemmaReader {
        s: &rest[brace..],
        pos: 0,
    };
    let args = r.dict(0)?;
    r.ws();
    (r.pos == r.s.len()).then(|| Call {
        name: name.to_string(),
        arguments: args.to_string(),
    })
}

/// Reads Gemma 4's value notation (what its template's `format_argument` writes, and llama.cpp
/// reads): `<|"|>TEXT<|"|>` strings (TEXT as it stands: any character but the mark), numbers,
/// `true`, `false`, `null` (and `None`, Python's, which the template prints for a null),
/// `{key:value,…}` with keys bare or marked like strings, `[value,…]`; whitespace after
/// brackets, commas and colons; a trailing comma is forgiven. A bare word that is none of
/// these (and holds no `:`, which would be a missing comma) is read as a string (a model that
/// dropped the marks).
struct GemmaReader<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> GemmaReader<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn ws(&mut self) {
        self.pos = skip_ws(self.s, self.pos);
    }

    fn eat(&mut self, prefix: &str) -> bool {
        let hit = self.rest().starts_with(prefix);
        if hit {
            self.pos += prefix.len();
        }
        hit
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        self.ws();
        if self.rest().starts_with('{') {
            return self.dict(depth + 1);
        }
        if self.rest().starts_with('[') {
            return self.list(depth + 1);
        }
        if self.rest().starts_with(GEMMA_QUOTE) {
            return self.marked().map(Value::String);
        }
        self.scalar()
    }

    /// `<|"|>TEXT<|"|>` at the cursor (the cursor stays where it is when there is none).
    fn marked(&mut self) -> Option<String> {
        let text = self.rest().strip_prefix(GEMMA_QUOTE)?;
        let end = text.find(GEMMA_QUOTE)?;
        self.pos += 2 * GEMMA_QUOTE.len() + end;
        Some(text[..end].to_string())
    }

    /// A bare value, up to the next `,`, `}` or `]`.
    fn scalar(&mut self) -> Option<Value> {
        let len = self
            .rest()
            .find([',', '}', ']'])
            .unwrap_or(self.rest().len());
        let word = self.rest()[..len].trim();
        if word.is_empty() || word.contains(GEMMA_QUOTE) || word.contains(['{', '[', ':']) {
            return None;
        }
        self.pos += len;
        Some(match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" | "None" => Value::Null,
            _ => match serde_json::from_str::<serde_json::Number>(word) {
                Ok(n) => Value::Number(n),
                Err(_) => Value::String(word.to_string()),
            },
        })
    }

    /// `{key:value,…}` at the cursor (after whitespace).
    fn dict(&mut self, depth: usize) -> Option<Value> {
        if depth > GEMMA_MAX_DEPTH {
            return None;
        }
        self.ws();
        if !self.eat("{") {
            return None;
        }
        let mut map = Map::new();
        loop {
            self.ws();
            if self.eat("}") {
                return Some(Value::Object(map));
            }
            let key = match self.marked() {
                Some(k) => k,
                None if self.rest().starts_with(GEMMA_QUOTE) => return None,
                None => {
                    let len = self.rest().find([':', '}', ',', '{', '[', ']'])?;
                    let key = self.rest()[..len].trim();
                    if key.is_empty() || key.contains(GEMMA_QUOTE) {
                        return None;
                    }
                    let key = key.to_string();
                    self.pos += len;
                    key
                }
            };
            self.ws();
            if !self.eat(":") {
                return None;
            }
            let v = self.value(depth)?;
            map.insert(key, v);
            self.ws();
            if !self.eat(",") && !self.rest().starts_with('}') {
                return None;
            }
        }
    }

    /// `[value,…]` at the cursor.
    fn list(&mut self, depth: usize) -> Option<Value> {
        if depth > GEMMA_MAX_DEPTH || !self.eat("[") {
            return None;
        }
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.eat("]") {
                return Some(Value::Array(items));
            }
            items.push(self.value(depth)?);
            self.ws();
            if !self.eat(",") && !self.rest().starts_with(']') {
                return None;
            }
        }
    }
}

/// A harmony call that did not read as one, as text: its arguments, without control tokens.
fn harmony_text(block: &str) -> String {
    let text = match block.find(MESSAGE) {
        Some(i) => &block[i + MESSAGE.len()..],
        None => {
            let head = block.strip_prefix(HARMONY_CALL_START).unwrap_or(block);
            &head[..head.find("<|").unwrap_or(head.len())]
        }
    };
    text.strip_suffix(CALL_TOKEN).unwrap_or(text).to_string()
}

pub(super) fn merge_content(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match (out.last_mut(), p) {
            (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
            (_, Piece::Content(b)) if b.is_empty() => {}
            (_, p) => out.push(p),
        }
    }
    out
}
