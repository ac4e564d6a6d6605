//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`, so
//! clients built on the `anthropic` SDK (Claude Code among them) run on a local model.
//!
//! The request is translated into the neutral conversation: `system` (a string or text
//! blocks) becomes the first message; content blocks become the template's messages —
//! `text`, `tool_use` (an assistant's call, its `input` as the template's arguments),
//! `tool_result` (a `tool` message answering the call by id, named after it), `thinking` (the
//! assistant's `reasoning_content`). The shared readers read the body where it stands through
//! its spelling table (`stop_sequences` is the shared `stop`; fields Messages lacks, such as
//! `n`, read as absent; errors name Anthropic's fields), `temperature` in Anthropic's 0–1;
//! `tools` with their `input_schema` become functions, `tool_choice` `any` / `tool` force a call through the same
//! grammar as OpenAI's `required` / named choice, `thinking` sets the template's
//! `enable_thinking`. The answer is `content` blocks with `stop_reason` (`end_turn`,
//! `max_tokens`, `stop_sequence` with the sequence that matched, `tool_use`) and `usage`;
//! a stream is Anthropic's named events (`message_start`, `content_block_start`, `ping`,
//! `content_block_delta` with `text_delta` / `input_json_delta` / `thinking_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`; `error` on failure). Errors are
//! Anthropic error objects.
//!
//! Claude Code's traffic is served unchanged: `system` turns inside `messages` (rendered where
//! they stand, or merged into the leading system message where the template takes only one),
//! a `max_tokens` past the room left clamped to it, its billing-header system block dropped,
//! `cache_control`, `context_management`, `metadata` and beta headers accepted and ignored.
//! Server tools (`web_search_…`, `code_execution_…`) and Anthropic's schema-less tools are
//! left out of the prompt and named in an `x-ridge-dropped-tools` header.
//!
//! Not supported, refused with a 400 naming the block: image and document blocks, and
//! prefilling a final assistant turn.

use serde_json::{json, Map, Value};

use ridge_engine::FinishReason;
use ridge_tokenizer::ChatMessage;

use super::openai::tool_job;
use super::{Adapter, Frame, Rendered, Validator};
use crate::error::{ApiError, ErrorStyle};
use crate::params::{self, Fields, Spelling, MAX_MESSAGES};
use crate::session::{ChoiceState, Delta, Job, Session, Update};
use crate::tools::Tools;

fn invalid(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(param, msg)
}

/// A validated Messages request: the job and the prompt's token count.
pub struct MessagesJob {
    /// What the engine runs.
    pub job: Job,
    /// Tokens in the rendered prompt (`message_start`'s `input_tokens`).
    pub input_tokens: usize,
}

impl Validator<'_> {
    /// Validates a `/v1/messages` body into a job.
    pub fn messages(&self, body: &Map<String, Value>) -> Result<MessagesJob, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
        if f.get("max_tokens").is_none() {
            return Err(invalid("max_tokens", "`max_tokens` is required"));
        }
        // Anthropic's temperature range is 0–1 (the shared reader allows 0–2).
        f.f32_in("temperature", 1.0, 0.0, 1.0)?;
        if f.get("metadata").is_some_and(|m| !m.is_object()) {
            return Err(invalid("metadata", "`metadata` must be an object"));
        }
        let mut translated = self.translated_tools(&f)?;
        if let Some(rf) = output_config(&f)?.0 {
            translated.insert("response_format".into(), rf);
        }
        let sf = Fields::spelled(body, &SPELLING, &translated);
        let mut common = params::common(&sf, self.vocab)?;
        // Anthropic's clients ask the model's largest output (Claude Code: 32000 or 64000)
        // whatever the prompt: what does not fit is clamped to the room left.
        common.clamp_max_tokens = true;
        let tools = crate::tools::read(&sf, self.template, self.tokenizer)?;
        let prompt = self.prompt(&f, tools.as_ref())?;
        let input_tokens = prompt.tokens.len();
        let budget = f
            .object("thinking")?
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("enabled"))
            .and_then(|t| t.get("budget_tokens"))
            .and_then(Value::as_u64)
            .map(|b| b as usize);
        let reasoning = self.reasoning(&prompt, budget);
        let structured = crate::structured::read(&sf)?;
        let job = tool_job(prompt, common, None, structured, tools, reasoning)?;
        Ok(MessagesJob { job, input_tokens })
    }

    /// Validates a `/v1/messages/count_tokens` body: the prompt's token count.
    pub fn count_tokens(&self, body: &Map<String, Value>) -> Result<usize, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
        let translated = self.translated_tools(&f)?;
        let sf = Fields::spelled(body, &SPELLING, &translated);
        let tools = crate::tools::read(&sf, self.template, self.tokenizer)?;
        Ok(self.prompt(&f, tools.as_ref())?.tokens.len())
    }

    /// The tool fields as the shared reader reads them: Anthropic tools as functions, the
    /// choice as the shared choice and whether calls may come in parallel.
    fn translated_tools(&self, f: &Fields) -> Result<Map<String, Value>, ApiError> {
        let mut o = Map::new();
        if let Some(t) = f.get("tools") {
            o.insert("tools".into(), functions(t)?);
        }
        match f.get("tool_choice") {
            None => {}
            Some(Value::Object(c)) => {
                let (choice, parallel) = tool_choice(c, o.contains_key("tools"))?;
                o.insert("tool_choice".into(), choice);
                o.insert("parallel_tool_calls".into(), json!(parallel));
            }
            Some(_) => {
                return Err(invalid(
                    "tool_choice",
                    "`tool_choice` must be an object such as {\"type\": \"auto\"}",
                ))
            }
        }
        Ok(o)
    }

    fn prompt(&self, f: &Fields, tools: Option<&Tools>) -> Result<Rendered, ApiError> {
        let msgs = conversation(f)?;
        let mut extra = Map::new();
        match f.object("thinking")? {
            None => {}
            Some(t) => match t.get("type").and_then(Value::as_str) {
                Some("enabled") => {
                    match t.get("budget_tokens") {
                        None => {}
                        Some(b) if b.as_u64().is_some_and(|b| b >= 1) => {}
                        Some(_) => {
                            return Err(invalid(
                                "thinking",
                                "`thinking.budget_tokens` must be a positive integer",
                            ))
                        }
                    }
                    extra.insert("enable_thinking".into(), json!(true));
                }
                Some("adaptive" | "between_tools") => {
                    extra.insert("enable_thinking".into(), json!(true));
                }
                Some("disabled") => {
                    extra.insert("enable_thinking".into(), json!(false));
                }
                _ => {
                    return Err(invalid(
                        "thinking",
                        "`thinking.type` must be enabled, adaptive, between_tools or disabled",
                    ))
                }
            },
        }
        if let Some(e) = output_config(f)?.1 {
            extra.insert("reasoning_effort".into(), json!(e));
        }
        self.render(&msgs, tools, true, extra)
    }
}

/// `output_config`: its `format` (a JSON schema the answer must match, as the shared
/// `response_format`) and `effort` (as a template's `reasoning_effort`: `xhigh` and `max`
/// are `high`, the most templates know).
fn output_config(f: &Fields) -> Result<(Option<Value>, Option<&'static str>), ApiError> {
    let Some(o) = f.object("output_config")? else {
        return Ok((None, None));
    };
    let format = match o.get("format") {
        None | Some(Value::Null) => None,
        Some(Value::Object(fm))
            if fm.get("type").and_then(Value::as_str) == Some("json_schema") =>
        {
            match fm.get("schema") {
                Some(schema @ Value::Object(_)) => Some(json!({
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": schema},
                })),
                _ => {
                    return Err(invalid(
                        "output_config",
                        "`output_config.format.schema` must be a JSON Schema object",
                    ))
                }
            }
        }
        Some(_) => {
            return Err(invalid(
                "output_config",
                "`output_config.format` must be {\"type\": \"json_schema\", \"schema\": …}",
            ))
        }
    };
    let effort = match o.get("effort") {
        None | Some(Value::Null) => None,
        Some(Value::String(e)) => match e.as_str() {
            "low" => Some("low"),
            "medium" => Some("medium"),
            "high" | "xhigh" | "max" => Some("high"),
            _ => {
                return Err(invalid(
                    "output_config",
                    "`output_config.effort` must be low, medium, high, xhigh or max",
                ))
            }
        },
        Some(_) => {
            return Err(invalid(
                "output_config",
                "`output_config.effort` must be a string",
            ))
        }
    };
    Ok((format, effort))
}

/// The shared fields a Messages body has, as it names them; tools, the choice and the output
/// format are translated ([`Validator::translated_tools`], [`output_config`]).
const SPELLING: [Spelling; 10] = [
    Spelling::same("max_tokens"),
    Spelling::same("temperature"),
    Spelling::same("top_p"),
    Spelling::same("top_k"),
    Spelling::renamed("stop", "stop_sequences"),
    Spelling::same("stream"),
    Spelling::translated("tools", "tools"),
    Spelling::translated("tool_choice", "tool_choice"),
    Spelling::translated("parallel_tool_calls", "tool_choice"),
    Spelling::translated("response_format", "output_config"),
];

/// Anthropic tools (`name`, `description`, `input_schema`) as functions.
fn functions(tools: &Value) -> Result<Value, ApiError> {
    let Value::Array(list) = tools else {
        return Err(invalid("tools", "`tools` must be an array"));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let name = t.get("name").and_then(Value::as_str);
        let kind = t.get("type").and_then(Value::as_str);
        let name = match (name, kind) {
            (Some(name), None | Some("custom")) => name,
            // Server tools (`web_search_20250305`, `code_execution_…`, `web_fetch_…`) and the
            // schema-less tools Anthropic defines (`bash_…`, `text_editor_…`, `computer_…`)
            // are left out of the prompt, named in the log line and a response header.
            (_, Some(other)) if other != "custom" => {
                crate::access_log::note_dropped_tool(other);
                continue;
            }
            _ => {
                return Err(invalid(
                    "tools",
                    format!("tools[{i}] must be {{\"name\", \"input_schema\"}}"),
                ))
            }
        };
        let schema = match t.get("input_schema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => {
                return Err(invalid(
                    "tools",
                    format!("tools[{i}].input_schema must be a JSON Schema object"),
                ))
            }
        };
        let mut func = json!({"name": name, "parameters": schema});
        if let Some(d) = t.get("description") {
            func["description"] = d.clone();
        }
        out.push(json!({"type": "function", "function": func}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` as the shared choice and whether calls may come in parallel.
fn tool_choice(c: &Map<String, Value>, has_tools: bool) -> Result<(Value, bool), ApiError> {
    let parallel = !matches!(c.get("disable_parallel_tool_use"), Some(Value::Bool(true)));
    let choice = match c.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match c.get("name").and_then(Value::as_str) {
            Some(n) => json!({"type": "function", "function": {"name": n}}),
            None => {
                return Err(invalid(
                    "tool_choice",
                    "`tool_choice` of type tool needs `name`",
                ))
            }
        },
        _ => {
            return Err(invalid(
                "tool_choice",
                "`tool_choice.type` must be auto, any, tool or none",
            ))
        }
    };
    if !has_tools && choice != json!("none") && choice != json!("auto") {
        return Err(invalid(
            "tool_choice",
            "`tool_choice` forces a call but the request has no `tools`",
        ));
    }
    Ok((choice, parallel))
}

/// `system` + `messages` as the template's messages.
fn conversation(f: &Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out = Vec::new();
    match f.get("system") {
        None => {}
        Some(Value::String(s)) => out.push(ChatMessage::new("system", s.clone())),
        Some(Value::Array(blocks)) => {
            let text = system_text(blocks)?;
            out.push(ChatMessage::new("system", text));
        }
        Some(_) => {
            return Err(invalid(
                "system",
                "`system` must be a string or text blocks",
            ))
        }
    }
    let list = match f.get("messages") {
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(invalid("messages", "`messages` must not be empty"))
        }
        Some(Value::Array(a)) if a.len() > MAX_MESSAGES => {
            return Err(invalid(
                "messages",
                format!("at most {MAX_MESSAGES} messages"),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(_) => return Err(invalid("messages", "`messages` must be an array")),
        None => return Err(invalid("messages", "`messages` is required")),
    };
    // Tool names by call id, so a `tool_result` can name the tool it answers.
    let mut names: Vec<(String, String)> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        let content = m.get("content");
        match (role, content) {
            (Some(r @ ("user" | "assistant" | "system")), Some(Value::String(s))) => {
                out.push(ChatMessage::new(r, s.clone()))
            }
            // A system turn inside the conversation (Claude Code sends them after the first
            // user turn); the renderer keeps it in place or merges it into the leading one.
            (Some("system"), Some(Value::Array(blocks))) => {
                out.push(ChatMessage::new("system", text_of(blocks, "messages")?))
            }
            (Some("user"), Some(Value::Array(blocks))) => user_blocks(i, blocks, &names, &mut out)?,
            (Some("assistant"), Some(Value::Array(blocks))) => {
                out.push(assistant_blocks(i, blocks, &mut names)?)
            }
            (Some("user" | "assistant" | "system"), _) => {
                return Err(invalid(
                    "messages",
                    format!("messages[{i}].content must be a string or an array of content blocks"),
                ))
            }
            _ => {
                return Err(invalid(
                    "messages",
                    format!("messages[{i}].role must be \"user\", \"assistant\" or \"system\""),
                ))
            }
        }
    }
    if !out.iter().any(|m| m.role == "user" || m.role == "tool") {
        return Err(invalid(
            "messages",
            "`messages` needs at least one user turn",
        ));
    }
    if list
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("assistant")
    {
        return Err(invalid(
            "messages",
            "the last message must be the user's (prefilling an assistant turn is not supported)",
        ));
    }
    Ok(out)
}

/// The text of `system` blocks, one paragraph each, without Claude Code's billing header: a
/// block `x-anthropic-billing-header: cc_version=…; …` is metadata for Anthropic's billing, not
/// an instruction, and its version suffix changes with every conversation — left in, it would
/// be the prompt's first line and no agent session would share a cached prefix with another.
fn system_text(blocks: &[Value]) -> Result<String, ApiError> {
    let mut parts = Vec::with_capacity(blocks.len());
    for b in blocks {
        let t = text_of(std::slice::from_ref(b), "system")?;
        if !t.starts_with("x-anthropic-billing-header:") {
            parts.push(t);
        }
    }
    Ok(parts.join("\n\n"))
}

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

/// The text of text blocks (other block types refused).
fn text_of(blocks: &[Value], param: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for b in blocks {
        match (block_type(b), b.get("text").and_then(Value::as_str)) {
            (Some("text"), Some(t)) => text.push_str(t),
            _ => {
                return Err(invalid(
                    param,
                    format!("`{param}` blocks must be {{\"type\": \"text\", \"text\": …}}"),
                ))
            }
        }
    }
    Ok(text)
}

fn user_blocks(
    i: usize,
    blocks: &[Value],
    names: &[(String, String)],
    out: &mut Vec<ChatMessage>,
) -> Result<(), ApiError> {
    let mut text = String::new();
    for b in blocks {
        match block_type(b) {
            Some("text") => match b.get("text").and_then(Value::as_str) {
                Some(t) => text.push_str(t),
                None => {
                    return Err(invalid(
                        "messages",
                        format!("messages[{i}]: a text block needs `text`"),
                    ))
                }
            },
            Some("tool_result") => {
                let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                    return Err(invalid(
                        "messages",
                        format!("messages[{i}]: a tool_result block needs `tool_use_id`"),
                    ));
                };
                let result = match b.get("content") {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => text_of(parts, "messages")?,
                    Some(_) => {
                        return Err(invalid(
                            "messages",
                            format!(
                            "messages[{i}]: tool_result content must be a string or text blocks"
                        ),
                        ))
                    }
                };
                let result = if b.get("is_error") == Some(&Value::Bool(true)) {
                    format!("Error: {result}")
                } else {
                    result
                };
                let mut msg = ChatMessage::new("tool", result);
                msg.tool_call_id = Some(id.to_string());
                msg.name = names.iter().find(|(k, _)| k == id).map(|(_, n)| n.clone());
                out.push(msg);
            }
            Some(other) => {
                return Err(invalid(
                    "messages",
                    format!(
                    "messages[{i}]: {other} blocks are not supported (text and tool_result are)"
                ),
                ))
            }
            None => {
                return Err(invalid(
                    "messages",
                    format!("messages[{i}]: a block needs `type`"),
                ))
            }
        }
    }
    if !text.is_empty() || !blocks.iter().any(|b| block_type(b) == Some("tool_result")) {
        out.push(ChatMessage::new("user", text));
    }
    Ok(())
}

fn assistant_blocks(
    i: usize,
    blocks: &[Value],
    names: &mut Vec<(String, String)>,
) -> Result<ChatMessage, ApiError> {
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for b in blocks {
        match block_type(b) {
            Some("text") => match b.get("text").and_then(Value::as_str) {
                Some(t) => text.push_str(t),
                None => {
                    return Err(invalid(
                        "messages",
                        format!("messages[{i}]: a text block needs `text`"),
                    ))
                }
            },
            Some("thinking") => {
                if let Some(t) = b.get("thinking").and_then(Value::as_str) {
                    thinking.push_str(t);
                }
            }
            Some("redacted_thinking") => {}
            Some("tool_use") => {
                let (Some(id), Some(name)) = (
                    b.get("id").and_then(Value::as_str),
                    b.get("name").and_then(Value::as_str),
                ) else {
                    return Err(invalid(
                        "messages",
                        format!("messages[{i}]: a tool_use block needs `id` and `name`"),
                    ));
                };
                let input = match b.get("input") {
                    Some(v @ Value::Object(_)) => v.clone(),
                    None => json!({}),
                    Some(_) => {
                        return Err(invalid(
                            "messages",
                            format!("messages[{i}]: tool_use `input` must be an object"),
                        ))
                    }
                };
                names.push((id.to_string(), name.to_string()));
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input}}));
            }
            Some(other) => {
                return Err(invalid(
                    "messages",
                    format!("messages[{i}]: {other} blocks are not supported in assistant turns"),
                ))
            }
            None => {
                return Err(invalid(
                    "messages",
                    format!("messages[{i}]: a block needs `type`"),
                ))
            }
        }
    }
    let mut msg = ChatMessage::new("assistant", text);
    if !calls.is_empty() {
        msg.tool_calls = Some(calls);
    }
    if !thinking.is_empty() {
        msg.reasoning_content = Some(thinking.clone());
        msg.thinking = Some(thinking);
    }
    Ok(msg)
}

/// The content block a stream has open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    /// A `tool_use` block whose arguments are streaming.
    Tool,
}

/// Renders a session as a Messages answer or stream.
pub struct Anthropic {
    id: String,
    input_tokens: usize,
    /// Blocks started so far (the next block's index).
    blocks: usize,
    open: Option<Open>,
    /// When the stream last carried content (or opened).
    last_content: std::time::Instant,
}

/// After this long without content, keep-alives carry content: Claude Code's stream watchdog
/// (300 s, a warning at 150 s) does not count `ping` events, and prefilling its ~19k-token
/// prompt cold on a small CPU can take longer than that.
const PING_ONLY_FOR: std::time::Duration = std::time::Duration::from_secs(60);

impl Anthropic {
    /// An adapter for a response with unique part `id`.
    pub fn new(id: &str, input_tokens: usize) -> Self {
        Anthropic {
            id: format!("msg_{id}"),
            input_tokens,
            blocks: 0,
            open: None,
            last_content: std::time::Instant::now(),
        }
    }

    fn stop_reason(c: &ChoiceState) -> (Value, Value) {
        if c.ended_in_calls() {
            return (json!("tool_use"), Value::Null);
        }
        match (c.finish, &c.stop_sequence) {
            (Some(FinishReason::Length), _) => (json!("max_tokens"), Value::Null),
            (Some(FinishReason::Stop), Some(s)) => (json!("stop_sequence"), json!(s)),
            (Some(_), _) => (json!("end_turn"), Value::Null),
            (None, _) => (Value::Null, Value::Null),
        }
    }

    fn usage(s: &Session) -> Value {
        let (prompt, completion, cached) = s.totals();
        json!({
            "input_tokens": prompt.saturating_sub(cached),
            "output_tokens": completion,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        })
    }

    fn tool_use(s: &Session, name: &str, arguments: &str) -> Value {
        let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
        json!({"type": "tool_use", "id": format!("toolu_{}", s.fresh_id()), "name": name, "input": input})
    }

    fn close(&mut self, out: &mut Vec<Frame>) {
        if self.open.take().is_some() {
            let index = self.blocks - 1;
            out.push(Frame::named(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    /// Opens a block of `kind` unless one is open; returns its index.
    fn open(&mut self, kind: Open, out: &mut Vec<Frame>) -> usize {
        if self.open == Some(kind) {
            return self.blocks - 1;
        }
        self.close(out);
        // Tool blocks are opened with their id and name (`Delta::CallBegin`), never here.
        let block = if kind == Open::Thinking {
            json!({"type": "thinking", "thinking": "", "signature": ""})
        } else {
            json!({"type": "text", "text": ""})
        };
        let index = self.start_block(block, out);
        self.open = Some(kind);
        index
    }

    fn start_block(&mut self, block: Value, out: &mut Vec<Frame>) -> usize {
        let index = self.blocks;
        self.blocks += 1;
        out.push(Frame::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        if index == 0 {
            out.push(Frame::named("ping", &json!({"type": "ping"})));
        }
        index
    }
}

impl Adapter for Anthropic {
    fn error_style(&self) -> ErrorStyle {
        ErrorStyle::Anthropic
    }

    fn full(&mut self, s: &mut Session) -> Value {
        let Some(c) = s.choices.first() else {
            return Value::Null;
        };
        let mut content = Vec::new();
        if !c.reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": c.reasoning, "signature": ""}));
        }
        if !c.content.is_empty() {
            content.push(json!({"type": "text", "text": c.content}));
        }
        for call in &c.calls {
            content.push(Self::tool_use(s, &call.name, &call.arguments));
        }
        let (reason, seq) = Self::stop_reason(c);
        json!({
            "id": self.id, "type": "message", "role": "assistant",
            "model": s.state.model_name, "content": content,
            "stop_reason": reason, "stop_sequence": seq,
            "usage": Self::usage(s), "timings": s.timings(),
        })
    }

    fn start(&mut self, s: &mut Session) -> Vec<Frame> {
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "content": [],
            "model": s.state.model_name, "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        });
        vec![Frame::named(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        )]
    }

    fn update(&mut self, s: &mut Session, u: Update, _last: bool) -> Vec<Frame> {
        let mut out = Vec::new();
        if !u.deltas.is_empty() {
            self.last_content = std::time::Instant::now();
        }
        for d in u.deltas {
            match d {
                Delta::Text(t) => {
                    let index = self.open(Open::Text, &mut out);
                    out.push(Frame::named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
                    ));
                }
                Delta::Reasoning(t) => {
                    let index = self.open(Open::Thinking, &mut out);
                    out.push(Frame::named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": t}}),
                    ));
                }
                Delta::CallBegin(name) => {
                    self.close(&mut out);
                    let block = Self::tool_use(s, &name, "{}");
                    self.start_block(block, &mut out);
                    self.open = Some(Open::Tool);
                }
                Delta::CallArgs(t) => {
                    let index = self.blocks - 1;
                    out.push(Frame::named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": t}}),
                    ));
                }
                Delta::CallEnd(_) => self.close(&mut out),
            }
        }
        if u.finished {
            self.close(&mut out);
            let c = &s.choices[u.choice];
            let (reason, seq) = Self::stop_reason(c);
            let mut usage = Self::usage(s);
            usage["input_tokens"] = json!(self.input_tokens);
            out.push(Frame::named(
                "message_delta",
                &json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq}, "usage": usage, "timings": s.timings()}),
            ));
        }
        out
    }

    fn end(&mut self, _s: &mut Session) -> Vec<Frame> {
        vec![Frame::named(
            "message_stop",
            &json!({"type": "message_stop"}),
        )]
    }

    fn stream_error(&mut self, e: &ApiError) -> Vec<Frame> {
        vec![Frame::named("error", &e.body_in(ErrorStyle::Anthropic))]
    }

    /// A `ping`; after [`PING_ONLY_FOR`] without content, an empty delta of the open block —
    /// or, before any block, an empty text block opened for it (the answer's text continues
    /// in it) — which clients count as stream activity.
    fn keepalive(&mut self) -> Vec<Frame> {
        if self.last_content.elapsed() < PING_ONLY_FOR {
            return vec![Frame::named("ping", &json!({"type": "ping"}))];
        }
        let mut out = Vec::new();
        let (index, delta) = match self.open {
            Some(Open::Thinking) => (
                self.blocks - 1,
                json!({"type": "thinking_delta", "thinking": ""}),
            ),
            Some(Open::Text) => (self.blocks - 1, json!({"type": "text_delta", "text": ""})),
            Some(Open::Tool) => (
                self.blocks - 1,
                json!({"type": "input_json_delta", "partial_json": ""}),
            ),
            None if self.blocks == 0 => (
                self.open(Open::Text, &mut out),
                json!({"type": "text_delta", "text": ""}),
            ),
            // Between blocks (a tool call being held back): a ping is all there is.
            None => return vec![Frame::named("ping", &json!({"type": "ping"}))],
        };
        out.push(Frame::named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        out
    }
}

/// The Messages endpoints' handlers.
pub mod handlers {
    use std::sync::Arc;

    use axum::extract::State;
    use axum::response::{IntoResponse, Response};
    use serde_json::json;

    use super::Anthropic;
    use crate::app::AppState;
    use crate::error::ErrorStyle;
    use crate::protocols::Validator;
    use crate::request::{body_and_model, Body};
    use crate::session;

    /// `POST /v1/messages`.
    pub async fn messages(State(app): State<Arc<AppState>>, body: Body) -> Response {
        let (b, st) = match body_and_model(&app, body).await {
            Ok(x) => x,
            Err(e) => return e.render(ErrorStyle::Anthropic),
        };
        match Validator::of(&st).messages(&b) {
            Ok(m) => {
                let a = Anthropic::new(&st.next_response_id(), m.input_tokens);
                session::run(st.clone(), m.job, a).await
            }
            Err(e) => e.render(ErrorStyle::Anthropic),
        }
    }

    /// `POST /v1/messages/count_tokens`.
    pub async fn count_tokens(State(app): State<Arc<AppState>>, body: Body) -> Response {
        let (b, st) = match body_and_model(&app, body).await {
            Ok(x) => x,
            Err(e) => return e.render(ErrorStyle::Anthropic),
        };
        match Validator::of(&st).count_tokens(&b) {
            Ok(n) => axum::Json(json!({"input_tokens": n})).into_response(),
            Err(e) => e.render(ErrorStyle::Anthropic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| f.event.unwrap_or("")).collect()
    }

    #[test]
    fn long_silences_are_kept_alive_with_content_clients_count() {
        let mut a = Anthropic::new("x", 10);
        assert_eq!(names(&a.keepalive()), ["ping"]);
        // A minute without content: an empty text block opens and empty deltas follow.
        a.last_content = std::time::Instant::now()
            .checked_sub(PING_ONLY_FOR * 2)
            .unwrap();
        let f = a.keepalive();
        assert_eq!(
            names(&f),
            ["content_block_start", "ping", "content_block_delta"]
        );
        let d: Value = serde_json::from_str(&f[2].data).unwrap();
        assert_eq!(
            d,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}})
        );
        assert_eq!(names(&a.keepalive()), ["content_block_delta"]);
        assert_eq!(
            a.open,
            Some(Open::Text),
            "the answer's text continues in block 0"
        );
        // Between blocks (a held-back call after a closed block), pings only.
        let mut out = Vec::new();
        a.close(&mut out);
        assert_eq!(names(&a.keepalive()), ["ping"]);
    }
}
