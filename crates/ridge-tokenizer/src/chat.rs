//! Chat templates: the Jinja template a model ships in `tokenizer.chat_template`, rendered
//! with minijinja the way Hugging Face `transformers` renders it.
//!
//! Compatibility with `transformers` (`apply_chat_template`):
//! * `trim_blocks` and `lstrip_blocks` are on, `{% break %}`/`{% continue %}` work;
//! * variables `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, plus any extra
//!   context the caller passes (e.g. `enable_thinking`);
//! * functions `raise_exception(msg)` (fails the render with `msg`) and `strftime_now(fmt)`
//!   (UTC time; [`ChatTemplate::with_fixed_time`] pins it for reproducible renders);
//! * values print as Python's `str()` prints them, with `{{ x }}` and `x | string` alike:
//!   `['a', 'b']`, `{'k': True}`, `None`, `1e-05` (a template that writes a schema's
//!   `"type": ["string", "null"]` with `| string` gets `['string', 'null']`, as under jinja2);
//! * Python string/list/dict methods (`.strip()`, `.startswith()`, `.items()`, ...) through
//!   `minijinja-contrib`'s pycompat callback;
//! * `tojson` prints like Python's `json.dumps` (`", "` and `": "` separators, no HTML
//!   escaping, non-ASCII kept), since templates that embed JSON were written against that.
//!
//! Sandbox: there is no template loader (`include`/`import` of other files cannot reach the
//! file system), every render has a fuel budget of [`FUEL`] instructions, and the recursion
//! depth is capped at [`RECURSION_LIMIT`], and the output at [`MAX_RENDER_BYTES`], so a hostile
//! template in a downloaded model cannot read files, hang the server or fill memory with its
//! output. Intermediate values are not metered: minijinja has no allocation hook, so a template
//! that doubles a string in a loop (`{% set ns.s = ns.s ~ ns.s %}`) can still allocate without
//! bound before anything is written. `RELIABILITY.md` records this residual risk; the template
//! is part of the model file, which the operator chose, not of any request.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind};
use ridge_gguf::GgufFile;
use serde::{Deserialize, Serialize};

use crate::{Tokenizer, TokenizerError};

/// Instructions one render may execute. The largest conversation a request can carry (4096
/// messages) renders well inside it; a hostile template stops in under a second. (Bytes copied
/// per instruction are not metered: with 20 M a template doubling macro output took 15 s and
/// 1 GB — see RELIABILITY.md.)
pub const FUEL: u64 = 2_000_000;

/// Maximum template recursion depth (nested loops, macro calls).
pub const RECURSION_LIMIT: usize = 200;

/// Most bytes one render may produce. A prompt this long is far beyond any supported context
/// (16 MiB is about 4 million tokens), so a template that writes more is runaway; the render
/// stops with an error as soon as the output passes the bound.
pub const MAX_RENDER_BYTES: usize = 16 << 20;

/// Widest indentation the `indent` filter accepts (minijinja's own allocates `width` spaces
/// for any `width`, so `indent(10**18)` would abort the process on allocation failure).
const MAX_INDENT: usize = 1024;

const KEY_TEMPLATE: &str = "tokenizer.chat_template";
const NAME: &str = "chat_template";

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text.
    pub content: String,
    /// The calls an assistant message made, as templates read them: `{"type": "function",
    /// "function": {"name", "arguments"}}` with `arguments` an object (OpenAI sends a JSON
    /// string; the server parses it, as templates print it with `tojson`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The tool's name, on a `tool` message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant turn's reasoning, apart from its `content` (Qwen3's and DeepSeek's
    /// templates read `reasoning_content`; absent, Qwen3's takes it from `<think>` tags in the
    /// content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// An assistant turn's reasoning under the name gpt-oss's harmony template reads
    /// (`thinking`, its analysis channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// The results of an assistant turn's calls carried on the turn itself, each
    /// `{"name", "response"}`, as Gemma 4's earlier template (the variant for interleaved
    /// thinking) reads them instead of `tool` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_responses: Option<Vec<serde_json::Value>>,
}

impl ChatMessage {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
            reasoning_content: None,
            thinking: None,
            tool_responses: None,
        }
    }
}

/// A compiled chat template with the model's BOS/EOS token texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

fn template_error(e: Error) -> TokenizerError {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    TokenizerError::ChatTemplate(msg)
}

impl ChatTemplate {
    /// The template in `tokenizer.chat_template`, with `bos_token`/`eos_token` taken from the
    /// tokenizer (empty strings when the vocabulary has no such token).
    pub fn from_gguf(gguf: &GgufFile, tokenizer: &Tokenizer) -> Result<Self, TokenizerError> {
        let source = match gguf.get(KEY_TEMPLATE) {
            None => return Err(TokenizerError::MissingChatTemplate),
            Some(v) => v
                .as_str()
                .ok_or_else(|| TokenizerError::malformed(KEY_TEMPLATE, "expected a string"))?,
        };
        let text = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_str(i))
                .unwrap_or("")
                .to_string()
        };
        Self::new(source, text(tokenizer.bos_id()), text(tokenizer.eos_id()))
    }

    /// Compiles `source`. Syntax errors are reported here, not at render time.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_filter("indent", bounded_indent);
        env.add_filter("string", py_string);
        env.add_filter("upper", |v: &Value| py_text(v).map(|s| s.to_uppercase()));
        env.add_filter("lower", |v: &Value| py_text(v).map(|s| s.to_lowercase()));
        env.set_formatter(py_formatter);
        let source = source.into();
        env.add_template_owned(NAME, source.clone())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            source,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// Pins the clock `strftime_now` reads to `unix_secs` (UTC) instead of the current time, so
    /// that renders of templates that print the date (gpt-oss's "Current date: ...") are
    /// reproducible: for tests and comparisons with a reference renderer. Servers keep the
    /// default, the current time.
    pub fn with_fixed_time(mut self, unix_secs: i64) -> Self {
        self.env
            .add_function("strftime_now", move |format: String| {
                strftime(unix_secs, &format)
            });
        self
    }

    /// Renders a conversation. With `add_generation_prompt`, the text ends with the header of
    /// an assistant turn, ready for generation.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.render_with(messages, add_generation_prompt, &serde_json::Map::new())
    }

    /// As [`render`](ChatTemplate::render), with extra template variables (e.g.
    /// `enable_thinking`, `tools`). The standard variables take precedence over `extra`.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, TokenizerError> {
        let tmpl = self.env.get_template(NAME).map_err(template_error)?;
        let base = minijinja::context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let ctx = minijinja::context! { ..base, ..Value::from_serialize(extra) };
        let mut out = CappedOutput {
            bytes: Vec::new(),
            over: false,
        };
        // minijinja can panic on some inputs (2.24: a reversed slice of an empty string or
        // list, `''[::-1]`, indexes past the end). A template or message that trips the
        // engine is a failed render, not a crashed caller. Nothing is shared across the
        // boundary but `out`, which is discarded on a panic.
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tmpl.render_captured_to(ctx, &mut out).map(|_| ())
        }));
        let rendered = match rendered {
            Ok(r) => r,
            Err(_) => {
                return Err(TokenizerError::ChatTemplate(
                    "the template engine failed on this template and conversation".into(),
                ))
            }
        };
        match rendered {
            Ok(()) => {}
            Err(_) if out.over => {
                return Err(TokenizerError::ChatTemplate(format!(
                    "the chat template's output is longer than {MAX_RENDER_BYTES} bytes"
                )))
            }
            Err(e) => return Err(template_error(e)),
        }
        String::from_utf8(out.bytes).map_err(|_| {
            TokenizerError::ChatTemplate("the chat template's output is not UTF-8".into())
        })
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The BOS token text given to the template.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The EOS token text given to the template.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// The render's output buffer; a write past [`MAX_RENDER_BYTES`] fails (and so does the render).
struct CappedOutput {
    bytes: Vec<u8>,
    over: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > MAX_RENDER_BYTES {
            self.over = true;
            return Err(std::io::Error::other("chat template output limit reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// minijinja's `indent` with the width bounded by [`MAX_INDENT`].
fn bounded_indent(
    value: &Value,
    width: Option<Value>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let too_wide = |w: &Value| w.as_usize().is_none_or(|n| n > MAX_INDENT);
    if width.as_ref().is_some_and(too_wide) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("indent: width must be at most {MAX_INDENT}"),
        ));
    }
    let kw_width: Option<Value> = kwargs.get("width")?;
    if kw_width.as_ref().is_some_and(too_wide) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("indent: width must be at most {MAX_INDENT}"),
        ));
    }
    let width = width.or(kw_width).and_then(|w| w.as_usize()).unwrap_or(4);
    let first = match first {
        Some(f) => f,
        None => kwargs.get::<Option<bool>>("first")?.unwrap_or(false),
    };
    let blank = match blank {
        Some(b) => b,
        None => kwargs.get::<Option<bool>>("blank")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let input = value.to_string();
    let trim = |mut s: &str| {
        s = s.strip_suffix('\n').unwrap_or(s);
        s.strip_suffix('\r').unwrap_or(s).len()
    };
    let input = &input[..trim(&input)];
    let pad = " ".repeat(width);
    let mut out = String::with_capacity(input.len() + 16);
    let mut lines = input.split('\n');
    if !first {
        out.push_str(lines.next().unwrap_or(""));
        out.push('\n');
    }
    for line in lines {
        if !line.is_empty() || blank {
            out.push_str(&pad);
        }
        out.push_str(line);
        out.push('\n');
    }
    let keep = trim(&out);
    out.truncate(keep);
    Ok(Value::from(out))
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `tojson(value, indent=None, sort_keys=False, ensure_ascii=False)` with Python's output.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            None => Some(v.as_str().map(str::to_string).ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an int")
            })?),
        },
    };
    let opts = JsonOpts {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    write_json(value, &opts, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

struct JsonOpts {
    indent: Option<String>,
    sort_keys: bool,
    ensure_ascii: bool,
}

fn newline(opts: &JsonOpts, level: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn write_json(v: &Value, opts: &JsonOpts, level: usize, out: &mut String) -> Result<(), Error> {
    if level > 256 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: nesting too deep",
        ));
    }
    let item_sep = if opts.indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = v.as_i64().filter(|_| v.is_integer()) {
                out.push_str(&i.to_string());
            } else if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                out.push_str(&py_float(f));
            }
        }
        ValueKind::String => write_json_str(v.as_str().unwrap_or(""), opts.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(opts, level + 1, out);
                write_json(item, opts, level + 1, out)?;
            }
            newline(opts, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(opts, level + 1, out);
                let key = match k.as_str() {
                    Some(s) => s.to_string(),
                    None => k.to_string(),
                };
                write_json_str(&key, opts.ensure_ascii, out);
                out.push_str(": ");
                write_json(&v.get_item(k)?, opts, level + 1, out)?;
            }
            newline(opts, level, out);
            out.push('}');
        }
        _ => write_json_str(&v.to_string(), opts.ensure_ascii, out),
    }
    Ok(())
}

fn write_json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (c as u32) > 0x7E) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Python's `json.dumps` writes it: `repr(float)`, with `NaN` and `Infinity`.
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    py_float_repr(f)
}

/// Python's `repr(float)`: the shortest round-trip digits, in exponent form below 1e-4 and from
/// 1e16 on (`1e-05`, `1e+16`; Rust's `{:?}` switches at the same points but writes `1e-5`,
/// `1e16`), `nan`, `inf`.
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let s = format!("{f:?}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// The `string` filter as jinja2's: Python's `str(value)`, so containers print as Python
/// prints them (`['a', 'b']`, `{'k': True}`), not as minijinja does (`["a", "b"]`).
fn py_string(value: &Value) -> Result<Value, Error> {
    Ok(match value.kind() {
        ValueKind::String => value.clone(),
        ValueKind::Undefined => Value::from(""),
        _ => Value::from(py_str(value)?),
    })
}

/// The text jinja2's string filters (`upper`, `lower`) work on: Python's `str(value)`, and
/// nothing for an undefined value; so a list upper-cases as `['STRING', 'NULL']` (Gemma 4's
/// template upper-cases a schema's `type`, which may be a list or missing).
fn py_text(value: &Value) -> Result<String, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(String::new()),
        _ => py_str(value),
    }
}

/// How `{{ value }}` prints: as jinja2 does, Python's `str(value)` for lists, dicts and floats;
/// everything else as minijinja prints it (already Python's for strings, integers, `True`,
/// `None`).
fn py_formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Seq | ValueKind::Map => out.write_str(&py_str(value)?).map_err(Error::from),
        ValueKind::Number if !value.is_integer() => {
            out.write_str(&py_str(value)?).map_err(Error::from)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// Python's `str(value)`: a string as is, anything else as [`py_repr`]. A text longer than
/// [`MAX_RENDER_BYTES`] is an error (shared nested lists print exponentially long).
fn py_str(value: &Value) -> Result<String, Error> {
    if let (ValueKind::String, Some(s)) = (value.kind(), value.as_str()) {
        return Ok(s.to_string());
    }
    let mut out = String::new();
    py_repr(value, 0, &mut out)?;
    Ok(out)
}

/// Python's `repr(value)` for the values JSON and templates make: `None`, `True`, numbers,
/// quoted strings, lists and dicts (nested deeper than 256 levels: `...`); an error once `out`
/// passes [`MAX_RENDER_BYTES`].
fn py_repr(value: &Value, level: usize, out: &mut String) -> Result<(), Error> {
    if out.len() > MAX_RENDER_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("a printed value is longer than {MAX_RENDER_BYTES} bytes"),
        ));
    }
    if level > 256 {
        out.push_str("...");
        return Ok(());
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
        ValueKind::Number => out.push_str(&py_float_repr(
            f64::try_from(value.clone()).unwrap_or(f64::NAN),
        )),
        ValueKind::String => py_repr_str(value.as_str().unwrap_or(""), out),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&item, level + 1, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&key, level + 1, out)?;
                out.push_str(": ");
                py_repr(&value.get_item(&key)?, level + 1, out)?;
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
    Ok(())
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`; backslash escapes
/// for the quote, `\\`, `\t`, `\n`, `\r`; `\xNN`/`\uNNNN`/`\UNNNNNNNN` for the characters
/// Python deems unprintable (control and format characters, separators other than the
/// space, private use; unassigned code points are kept as they are).
fn py_repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if py_unprintable(c) => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Whether Python's `str.isprintable()` is false for `c`: categories Cc, Cf, Co, Zl, Zp and Zs
/// but the space (Cn, unassigned, is not tabulated).
fn py_unprintable(c: char) -> bool {
    matches!(c as u32,
        0x00..=0x1f | 0x7f..=0xa0 | 0xad
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2 | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000
        | 0xe000..=0xf8ff | 0xfeff | 0xfff9..=0xfffb | 0x110bd | 0x110cd | 0x13430..=0x1343f
        | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f
        | 0xf0000..=0xffffd | 0x100000..=0x10fffd)
}

/// `strftime_now(format)`: the current UTC time formatted with the common `strftime`
/// directives (`%Y %m %d %H %M %S %y %j %b %B %a %A %p %I %%`, plus `%-d`/`%-m`).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(secs, &format)
}

fn strftime(unix_secs: i64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = unix_secs.div_euclid(86_400);
    let rem = unix_secs.rem_euclid(86_400);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (y, m, d) = civil_from_days(days);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let month = MONTHS[(m - 1) as usize];
    let day = DAYS[weekday];

    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let no_pad = chars.peek() == Some(&'-');
        if no_pad {
            chars.next();
        }
        let num = |v: i64, w: usize| {
            if no_pad {
                v.to_string()
            } else {
                format!("{v:0w$}")
            }
        };
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&num(y.rem_euclid(100), 2)),
            Some('m') => out.push_str(&num(m, 2)),
            Some('d') => out.push_str(&num(d, 2)),
            Some('H') => out.push_str(&num(h, 2)),
            Some('I') => out.push_str(&num(if h % 12 == 0 { 12 } else { h % 12 }, 2)),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&num(mi, 2)),
            Some('S') => out.push_str(&num(s, 2)),
            Some('j') => out.push_str(&num(yday, 3)),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('A') => out.push_str(day),
            Some('a') => out.push_str(&day[..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Proleptic Gregorian date `(year, month, day)` of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm; templates' `strftime_now` and the server's log timestamps use it).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Day count since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ]
    }

    #[test]
    fn chatml_with_trim_blocks() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\n<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\n{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            "",
            "<|im_end|>",
        )
        .unwrap();
        assert_eq!(
            t.render(&msgs(), true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn bos_eos_and_pycompat() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{% if m.content.startswith('Be') %}[{{ m.content.strip('.').upper() }}]{% else %}{{ m['content'] }}{% endif %}{% endfor %}{{ eos_token }}",
            "<s>",
            "</s>",
        )
        .unwrap();
        assert_eq!(t.render(&msgs(), false).unwrap(), "<s>[BE BRIEF]Hi</s>");
    }

    #[test]
    fn raise_exception_is_an_error_with_the_message() {
        let t = ChatTemplate::new(
            "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
            "",
            "",
        )
        .unwrap();
        let e = t.render(&msgs(), false).unwrap_err().to_string();
        assert!(e.contains("System role not supported"), "{e}");
    }

    #[test]
    fn syntax_error_is_reported_at_compile_time() {
        let e = ChatTemplate::new("{% for %}", "", "").unwrap_err();
        assert!(matches!(e, TokenizerError::ChatTemplate(_)), "{e}");
    }

    #[test]
    fn runaway_template_runs_out_of_fuel() {
        let t = ChatTemplate::new(
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let e = t.render(&msgs(), false).unwrap_err().to_string();
        assert!(e.to_lowercase().contains("fuel"), "{e}");
    }

    #[test]
    fn recursion_is_limited() {
        let t = ChatTemplate::new(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "",
            "",
        )
        .unwrap();
        assert!(t.render(&msgs(), false).is_err());
    }

    #[test]
    fn no_file_access() {
        let t = ChatTemplate::new("{% include '/etc/passwd' %}", "", "").unwrap();
        assert!(t.render(&msgs(), false).is_err());
    }

    /// Renders a hostile template; it must fail, quickly, with a message containing `needle`.
    fn hostile(source: &str, needle: &str) {
        let t = ChatTemplate::new(source, "", "").unwrap();
        let start = std::time::Instant::now();
        let e = t.render(&msgs(), true).unwrap_err().to_string();
        let secs = start.elapsed().as_secs_f64();
        assert!(e.to_lowercase().contains(needle), "{source}: {e}");
        // Fuel runs out in about a second in a release build; allow for a loaded machine.
        assert!(secs < 20.0, "{source}: took {secs:.1} s");
    }

    #[test]
    fn sandbox_stops_infinite_loops_recursion_and_huge_output() {
        // Unbounded work: nested loops and recursive loops run out of fuel.
        hostile(
            "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
            "fuel",
        );
        hostile(
            "{% for m in [[1]] recursive %}{{ loop([m]) }}{% endfor %}",
            "recursion",
        );
        // Unbounded recursion: macros and nested loops hit the recursion limit.
        hostile(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "recursion",
        );
        // Output: 100 000 × 200 bytes = 20 MB, over the cap long before fuel runs out.
        hostile(
            "{% for i in range(100000) %}{{ 'x' * 200 }}{% endfor %}",
            "longer than",
        );
        hostile("{{ 'x' * 50000000 }}", "longer than");
        // Printing a list that holds itself twice, 40 levels deep (2^40 leaves, all shared).
        let doubled = "{% set ns = namespace(a=['x' * 1000]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}";
        hostile(&format!("{doubled}{{{{ ns.a }}}}"), "longer than");
        hostile(&format!("{doubled}{{{{ ns.a | string }}}}"), "longer than");
        // Filters that would allocate a client- or template-chosen width.
        hostile("{{ 'a\nb' | indent(1000000000000) }}", "indent");
        hostile("{{ 'a\nb' | indent(width=99999) }}", "indent");
        // No loader: nothing outside the one template can be reached.
        hostile("{% include '/etc/passwd' %}", "not found");
        hostile("{% import '/etc/passwd' as p %}", "not found");
        hostile("{% extends '../../secret' %}", "not found");
        // An engine panic (minijinja 2.24 on a reversed empty slice) is a failed render.
        hostile("{{ messages[0].content[5:5][::-1] }}", "engine failed");
        hostile("{{ [][::-1] }}", "engine failed");
    }

    #[test]
    fn indent_still_works() {
        let t = ChatTemplate::new(
            "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(width=3, first=true) }}|{{ 'a\n\nb' | indent(1, blank=true) }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&[], false).unwrap(),
            "a\n  b\n\n  c|   a\n   b|a\n \n b"
        );
    }

    #[test]
    fn long_conversations_render_within_the_bounds() {
        // The largest conversation a request can carry (4096 messages, a 4 MiB body) renders
        // well inside the fuel and output bounds with a ChatML template.
        let t = ChatTemplate::new(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let body = "word ".repeat(200);
        let many: Vec<ChatMessage> = (0..4096).map(|_| ChatMessage::new("user", &body)).collect();
        let out = t.render(&many, true).unwrap();
        assert!(out.len() > 4096 * 999);
    }

    #[test]
    fn tojson_is_python_like() {
        let t = ChatTemplate::new("{{ x | tojson }}|{{ x | tojson(indent=2) }}", "", "").unwrap();
        let mut extra = serde_json::Map::new();
        extra.insert(
            "x".into(),
            serde_json::json!({"a": [1, 2.5, "é<"], "b": null, "c": true}),
        );
        assert_eq!(
            t.render_with(&[], false, &extra).unwrap(),
            "{\"a\": [1, 2.5, \"é<\"], \"b\": null, \"c\": true}|{\n  \"a\": [\n    1,\n    2.5,\n    \"é<\"\n  ],\n  \"b\": null,\n  \"c\": true\n}"
        );
    }

    #[test]
    fn tojson_keeps_the_key_order_of_parsed_json() {
        // Python's json.dumps writes a dict in insertion order; a tool schema parsed from a
        // request must reach the template the same way (serde_json's `preserve_order`).
        let t = ChatTemplate::new("{{ tools | tojson }}", "", "").unwrap();
        let text =
            r#"{"tools": {"type": "function", "function": {"name": "f", "description": "d"}}}"#;
        let extra: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).unwrap();
        assert_eq!(
            t.render_with(&[], false, &extra).unwrap(),
            r#"{"type": "function", "function": {"name": "f", "description": "d"}}"#
        );
    }

    #[test]
    fn strftime_formats_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(strftime(t, "%Y-%m-%d %H:%M:%S"), "2024-02-29 13:05:09");
        assert_eq!(strftime(t, "%d %b %Y"), "29 Feb 2024");
        assert_eq!(
            strftime(t, "%A %B %-d, %j %I%p %%"),
            "Thursday February 29, 060 01PM %"
        );
        assert_eq!(strftime(0, "%Y-%m-%d %a"), "1970-01-01 Thu");
    }
}
