//! OpenAI's Responses API: `POST /v1/responses`, `GET /v1/responses/{id}`,
//! `DELETE /v1/responses/{id}` — what the Agents SDK and Codex-style clients speak.
//!
//! The request becomes the neutral conversation: `instructions` is the system message,
//! `input` (a string, or items: messages with text parts, `function_call`,
//! `function_call_output`, `reasoning`) the rest; with `previous_response_id` the stored
//! conversation of that response (its input and output, without its instructions, as OpenAI
//! specifies) comes first. `tools` (functions), `tool_choice`, `parallel_tool_calls`,
//! `text.format` (`json_schema`, `json_object`), `max_output_tokens`, `temperature`, `top_p`
//! and `reasoning.effort` map onto the shared fields: the shared readers read the body where
//! it stands through its spelling table (`max_output_tokens` is the shared `max_tokens`; tools
//! and `text.format` are translated first), and their errors name the Responses fields. The
//! answer is a `response` object whose `output` holds `reasoning`, `message` and
//! `function_call` items; a stream is the typed events (`response.created`,
//! `response.in_progress`, `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`, `response.reasoning_text.delta`,
//! `response.function_call_arguments.delta`, their `.done` events,
//! `response.output_item.done`, `response.completed` or `response.incomplete`), each with its
//! `sequence_number`.
//!
//! Stored responses (`store`, default true) live in memory in a [`ResponseStore`]: at most
//! [`MAX_STORED`] responses, the oldest evicted first; a server restart forgets them. An
//! unknown or evicted `previous_response_id` is a 404, never a silent fresh start.
//!
//! Tools other than functions — `namespace` groups, free-text `custom` tools, and the hosted
//! tools this server cannot run, which are left out of the prompt — are translated in
//! [`super::responses_tools`]. A `max_output_tokens` past the context is clamped to the room
//! left. Fields that only matter to OpenAI's service (`include`, `prompt_cache_key`,
//! `client_metadata`, `reasoning.summary`, `text.verbosity`, `service_tier`, …) are accepted
//! and change nothing.
//!
//! Not supported (400): input images and files, `background`, `n`.

use serde_json::{json, Map, Value};

use ridge_engine::FinishReason;
use ridge_tokenizer::ChatMessage;

use super::openai::tool_job;
use super::responses_tools::{NamedCall, ToolMap};
use super::{Adapter, Frame, Validator};
use crate::error::{ApiError, ErrorStyle};
use crate::params::{self, Fields, Spelling, MAX_MESSAGES};
use crate::response_store::{ResponseStore, Stored, MAX_STORED};
use crate::session::{ChoiceState, Delta, Job, Session, Update};

/// A validated Responses request.
pub struct ResponsesJob {
    /// What the engine runs.
    pub job: Job,
    /// The conversation before the answer (for the store).
    pub conversation: Vec<ChatMessage>,
    /// Request fields the response object echoes.
    pub echo: Map<String, Value>,
    /// Whether to keep the response.
    pub store: bool,
    /// How the offered tools' calls are named back.
    pub tools: ToolMap,
}

fn invalid(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(param, msg)
}

impl Validator<'_> {
    /// Validates a `/v1/responses` body; `previous` finds a stored conversation by id.
    pub fn responses(
        &self,
        body: &Map<String, Value>,
        previous: &dyn Fn(&str) -> Option<Vec<ChatMessage>>,
    ) -> Result<ResponsesJob, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
        for unsupported in ["background", "n"] {
            if f.get(unsupported)
                .is_some_and(|v| !v.is_null() && v != &json!(false) && v != &json!(1))
            {
                return Err(invalid(
                    unsupported,
                    format!("`{unsupported}` is not supported"),
                ));
            }
        }
        let mut translated = Map::new();
        let mut tool_map = ToolMap::default();
        if let Some(t) = f.get("tools") {
            let (functions, map) = ToolMap::translate(t)?;
            tool_map = map;
            translated.insert("tools".into(), functions);
        }
        if let Some(c) = f.get("tool_choice") {
            translated.insert("tool_choice".into(), tool_map.choice(c)?);
        }
        if let Some(format) = f.object("text")?.and_then(|t| t.get("format")) {
            if let Some(rf) = response_format(format)? {
                translated.insert("response_format".into(), rf);
            }
        }
        let sf = Fields::spelled(body, &SPELLING, &translated);
        let mut common = params::common(&sf, self.vocab)?;
        common.clamp_max_tokens = true;
        let tools = crate::tools::read(&sf, self.template, self.tokenizer)?;
        let structured = crate::structured::read(&sf)?;
        let mut extra = Map::new();
        if let Some(r) = f.object("reasoning")? {
            match r.get("effort") {
                None | Some(Value::Null) => {}
                Some(Value::String(e))
                    if matches!(e.as_str(), "minimal" | "low" | "medium" | "high") =>
                {
                    extra.insert("reasoning_effort".into(), json!(e));
                }
                Some(_) => {
                    return Err(invalid(
                        "reasoning",
                        "`reasoning.effort` must be one of minimal, low, medium, high",
                    ))
                }
            }
        }
        let previous_id = f.str("previous_response_id")?;
        let mut conversation = match previous_id {
            None => Vec::new(),
            Some(id) => previous(id).ok_or_else(|| ApiError {
                status: axum::http::StatusCode::NOT_FOUND,
                message: format!(
                    "Previous response with id '{id}' not found (it was never stored, was deleted, or was evicted: this server keeps the last {MAX_STORED})."
                ),
                param: Some("previous_response_id".into()),
                code: Some("previous_response_not_found"),
            })?,
        };
        input_items(&f, &tool_map, &mut conversation)?;
        let mut msgs = Vec::with_capacity(conversation.len() + 1);
        let instructions = f.str("instructions")?;
        if let Some(i) = instructions {
            msgs.push(ChatMessage::new("system", i));
        }
        msgs.extend(conversation.iter().cloned());
        let prompt = self.render(&msgs, tools.as_ref(), true, extra)?;
        let mut echo = Map::new();
        echo.insert("instructions".into(), json!(instructions));
        echo.insert("max_output_tokens".into(), json!(common.max_tokens));
        echo.insert("previous_response_id".into(), json!(previous_id));
        echo.insert("temperature".into(), json!(common.sampling.temperature));
        echo.insert("top_p".into(), json!(common.sampling.top_p));
        echo.insert(
            "parallel_tool_calls".into(),
            json!(tools.as_ref().is_none_or(|t| t.parallel)),
        );
        echo.insert(
            "tool_choice".into(),
            f.get("tool_choice").cloned().unwrap_or(json!("auto")),
        );
        echo.insert("tools".into(), f.get("tools").cloned().unwrap_or(json!([])));
        echo.insert(
            "text".into(),
            f.get("text")
                .cloned()
                .unwrap_or(json!({"format": {"type": "text"}})),
        );
        echo.insert(
            "reasoning".into(),
            json!({"effort": f.object("reasoning")?.and_then(|r| r.get("effort")).cloned(), "summary": null}),
        );
        echo.insert(
            "metadata".into(),
            f.get("metadata").cloned().unwrap_or(json!({})),
        );
        echo.insert("user".into(), f.get("user").cloned().unwrap_or(Value::Null));
        echo.insert("truncation".into(), json!("disabled"));
        let store = f.bool("store", true)?;
        echo.insert("store".into(), json!(store));
        let effort = f
            .object("reasoning")?
            .and_then(|r| r.get("effort"))
            .and_then(Value::as_str);
        let reasoning = self.reasoning(&prompt, super::effort_budget(effort));
        let job = tool_job(prompt, common, None, structured, tools, reasoning)?;
        Ok(ResponsesJob {
            job,
            conversation,
            echo,
            store,
            tools: tool_map,
        })
    }
}

/// The shared fields a Responses body has, as it names them; tools, the choice and
/// `text.format` are translated ([`ToolMap::translate`], [`response_format`]).
const SPELLING: [Spelling; 8] = [
    Spelling::renamed("max_tokens", "max_output_tokens"),
    Spelling::same("temperature"),
    Spelling::same("top_p"),
    Spelling::same("stream"),
    Spelling::translated("tools", "tools"),
    Spelling::translated("tool_choice", "tool_choice"),
    Spelling::same("parallel_tool_calls"),
    Spelling::translated("response_format", "text.format"),
];

/// `text.format` as a chat `response_format` (`None` for plain text).
fn response_format(format: &Value) -> Result<Option<Value>, ApiError> {
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut js = json!({
                "name": format.get("name").cloned().unwrap_or(json!("response")),
                "schema": format.get("schema").cloned().unwrap_or(Value::Null),
            });
            if let Some(s) = format.get("strict") {
                js["strict"] = s.clone();
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        _ => Err(invalid(
            "text.format",
            "`text.format.type` must be text, json_object or json_schema",
        )),
    }
}

/// The text of a message's content: a string or text parts.
fn text_content(c: &Value, i: usize) -> Result<String, ApiError> {
    match c {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for p in parts {
                match (
                    p.get("type").and_then(Value::as_str),
                    p.get("text").and_then(Value::as_str),
                ) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                    (Some(other), _) => {
                        return Err(invalid(
                            "input",
                            format!("input[{i}]: {other} content is not supported (text is)"),
                        ))
                    }
                    _ => {
                        return Err(invalid(
                            "input",
                            format!("input[{i}]: a content part needs `type` and `text`"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(invalid(
            "input",
            format!("input[{i}].content must be a string or text parts"),
        )),
    }
}

/// Appends `input` to the conversation.
fn input_items(f: &Fields, tools: &ToolMap, conv: &mut Vec<ChatMessage>) -> Result<(), ApiError> {
    let items = match f.get("input") {
        Some(Value::String(s)) => {
            conv.push(ChatMessage::new("user", s.clone()));
            return Ok(());
        }
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(invalid("input", "`input` must not be empty"))
        }
        Some(Value::Array(a)) if a.len() > MAX_MESSAGES => {
            return Err(invalid(
                "input",
                format!("at most {MAX_MESSAGES} input items"),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(invalid(
                "input",
                "`input` must be a string or an array of items",
            ))
        }
        None => return Err(invalid("input", "`input` is required")),
    };
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str);
        match kind {
            None | Some("message") => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some(r @ ("user" | "assistant" | "system")) => r,
                    Some("developer") => "system",
                    _ => {
                        return Err(invalid(
                            "input",
                            format!("input[{i}].role must be user, assistant, system or developer"),
                        ))
                    }
                };
                let content = match item.get("content") {
                    Some(c) => text_content(c, i)?,
                    None => return Err(invalid("input", format!("input[{i}].content is required"))),
                };
                let mut msg = ChatMessage::new(role, content);
                if role == "assistant" {
                    if let Some(r) = reasoning.take() {
                        msg.reasoning_content = Some(r.clone());
                        msg.thinking = Some(r);
                    }
                }
                conv.push(msg);
            }
            Some(kind @ ("function_call" | "custom_tool_call")) => {
                let (Some(call_id), Some(name)) = (
                    item.get("call_id").and_then(Value::as_str),
                    item.get("name").and_then(Value::as_str),
                ) else {
                    return Err(invalid("input", format!("input[{i}]: a {kind} needs `call_id` and `name`")));
                };
                let args: Value = match (kind, item.get("arguments"), item.get("input")) {
                    ("custom_tool_call", _, Some(Value::String(s))) => json!({"input": s}),
                    ("custom_tool_call", _, _) => {
                        return Err(invalid("input", format!("input[{i}].input must be a string")))
                    }
                    (_, Some(Value::String(s)), _) => serde_json::from_str(s).map_err(|e| {
                        invalid("input", format!("input[{i}].arguments is not valid JSON: {e}"))
                    })?,
                    (_, None, _) => json!({}),
                    (_, Some(_), _) => return Err(invalid("input", format!("input[{i}].arguments must be a JSON string"))),
                };
                let ns = item.get("namespace").and_then(Value::as_str);
                let name = tools.presented(ns, name);
                let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}});
                // Consecutive calls belong to one assistant turn.
                match conv.last_mut() {
                    Some(m) if m.role == "assistant" && m.tool_calls.is_some() => {
                        if let Some(calls) = m.tool_calls.as_mut() {
                            calls.push(call);
                        }
                    }
                    _ => {
                        let mut msg = ChatMessage::new("assistant", "");
                        msg.tool_calls = Some(vec![call]);
                        if let Some(r) = reasoning.take() {
                            msg.reasoning_content = Some(r.clone());
                            msg.thinking = Some(r);
                        }
                        conv.push(msg);
                    }
                }
            }
            Some(kind @ ("function_call_output" | "custom_tool_call_output")) => {
                let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                    return Err(invalid("input", format!("input[{i}]: a {kind} needs `call_id`")));
                };
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => text_content(v, i)?,
                    _ => return Err(invalid("input", format!("input[{i}].output must be a string"))),
                };
                let name = conv
                    .iter()
                    .rev()
                    .filter_map(|m| m.tool_calls.as_ref())
                    .flatten()
                    .find(|c| c.get("id").and_then(Value::as_str) == Some(call_id))
                    .and_then(|c| c["function"]["name"].as_str())
                    .map(str::to_string);
                let mut msg = ChatMessage::new("tool", output);
                msg.tool_call_id = Some(call_id.to_string());
                msg.name = name;
                conv.push(msg);
            }
            Some("reasoning") => {
                let text: String = item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                reasoning = Some(text);
            }
            // Calls of hosted tools and their results (this server runs none of them, so a
            // conversation holds them only from elsewhere), and references to stored items.
            Some(
                "web_search_call" | "file_search_call" | "code_interpreter_call"
                | "image_generation_call" | "computer_call" | "computer_call_output"
                | "local_shell_call" | "local_shell_call_output" | "mcp_call" | "mcp_list_tools"
                | "mcp_approval_request" | "mcp_approval_response" | "tool_search_call"
                | "tool_search_output" | "item_reference" | "compaction",
            ) => {}
            Some(other) => {
                return Err(invalid(
                    "input",
                    format!("input[{i}]: {other} items are not supported (message, function_call, function_call_output, custom_tool_call, custom_tool_call_output and reasoning are)"),
                ))
            }
        }
    }
    Ok(())
}

/// The output item a stream has open.
enum OpenItem {
    Message {
        id: String,
        index: usize,
        text: String,
    },
    Reasoning {
        id: String,
        index: usize,
        text: String,
    },
    /// A call whose arguments are streaming (a custom tool's input is held to the end: it is
    /// the decoded string inside the arguments).
    Call {
        item: Value,
        index: usize,
        custom: bool,
    },
}

/// Renders a session as a Responses object or stream, and stores it when asked.
pub struct Responses {
    id: String,
    echo: Map<String, Value>,
    conversation: Vec<ChatMessage>,
    store: bool,
    store_ref: std::sync::Arc<ResponseStore>,
    seq: u64,
    items: Vec<Value>,
    open: Option<OpenItem>,
    tools: ToolMap,
    /// The response object as `response.created` sent it (keep-alives resend it).
    echo_object: Value,
}

impl Responses {
    /// An adapter for the validated request, keeping its answer in `store` when asked to.
    pub fn new(store: std::sync::Arc<ResponseStore>, r: &mut ResponsesJob) -> Self {
        Responses {
            id: format!("resp_{}", crate::state::next_id()),
            echo: std::mem::take(&mut r.echo),
            conversation: std::mem::take(&mut r.conversation),
            store: r.store,
            store_ref: store,
            seq: 0,
            items: Vec::new(),
            open: None,
            tools: std::mem::take(&mut r.tools),
            echo_object: Value::Null,
        }
    }

    fn frame(&mut self, kind: &'static str, mut v: Value) -> Frame {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        Frame::named(kind, &v)
    }

    fn usage(s: &Session) -> Value {
        let (prompt, completion, cached) = s.totals();
        json!({
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        })
    }

    fn status(c: Option<&ChoiceState>) -> (&'static str, Value) {
        match c.and_then(|c| c.finish) {
            None => ("in_progress", Value::Null),
            Some(FinishReason::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(FinishReason::Aborted) => ("cancelled", Value::Null),
            Some(FinishReason::Stop) => ("completed", Value::Null),
        }
    }

    /// The response object around `output`.
    fn object(&self, s: &Session, output: Vec<Value>, usage: Value) -> Value {
        let (status, incomplete) = Self::status(s.choices.first());
        let mut v = json!({
            "id": self.id, "object": "response", "created_at": s.created,
            "status": status, "error": null, "incomplete_details": incomplete,
            "model": s.state.model_name, "output": output, "usage": usage,
        });
        for (k, e) in &self.echo {
            v[k.as_str()] = e.clone();
        }
        v
    }

    fn message_item(id: &str, text: &str, status: &str) -> Value {
        json!({"type": "message", "id": id, "status": status, "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
    }

    fn reasoning_item(id: &str, text: &str) -> Value {
        json!({"type": "reasoning", "id": id, "summary": [],
               "content": [{"type": "reasoning_text", "text": text}]})
    }

    /// A call's output item: a `function_call` (with its `namespace` when it has one) or a
    /// `custom_tool_call` carrying its raw `input`.
    fn call_item(s: &Session, c: &NamedCall, status: &str) -> Value {
        let n = s.fresh_id();
        let mut v = if c.custom {
            json!({"type": "custom_tool_call", "id": format!("ctc_{n}"), "call_id": format!("call_{n}"),
                   "name": c.name, "input": c.arguments, "status": status})
        } else {
            json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
                   "name": c.name, "arguments": c.arguments, "status": status})
        };
        if let Some(ns) = &c.namespace {
            v["namespace"] = json!(ns);
        }
        v
    }

    /// Output items of a finished choice, in the order the model wrote them.
    fn output_of(&self, s: &Session, c: &ChoiceState) -> Vec<Value> {
        let mut out = Vec::new();
        if !c.reasoning.is_empty() {
            out.push(Self::reasoning_item(
                &format!("rs_{}", s.fresh_id()),
                &c.reasoning,
            ));
        }
        if !c.content.is_empty() || c.calls.is_empty() {
            out.push(Self::message_item(
                &format!("msg_{}", s.fresh_id()),
                &c.content,
                "completed",
            ));
        }
        for call in &c.calls {
            let named = self.tools.call(&call.name, &call.arguments);
            out.push(Self::call_item(s, &named, "completed"));
        }
        out
    }

    /// Keeps the response and its conversation, when the request asked to.
    fn keep(&self, response: &Value, output: &[Value]) {
        if !self.store {
            return;
        }
        let mut conversation = self.conversation.clone();
        let mut msg = ChatMessage::new("assistant", "");
        let mut calls = Vec::new();
        for item in output {
            match item["type"].as_str() {
                Some("message") => {
                    if let Some(t) = item["content"][0]["text"].as_str() {
                        msg.content.push_str(t);
                    }
                }
                Some("reasoning") => {
                    if let Some(t) = item["content"][0]["text"].as_str() {
                        msg.reasoning_content = Some(t.to_string());
                        msg.thinking = Some(t.to_string());
                    }
                }
                Some(kind @ ("function_call" | "custom_tool_call")) => {
                    let args: Value = if kind == "custom_tool_call" {
                        json!({"input": item["input"]})
                    } else {
                        item["arguments"]
                            .as_str()
                            .and_then(|a| serde_json::from_str(a).ok())
                            .unwrap_or_else(|| json!({}))
                    };
                    let name = self.tools.presented(
                        item["namespace"].as_str(),
                        item["name"].as_str().unwrap_or(""),
                    );
                    calls.push(json!({"id": item["call_id"], "type": "function",
                                      "function": {"name": name, "arguments": args}}));
                }
                _ => {}
            }
        }
        if !calls.is_empty() {
            msg.tool_calls = Some(calls);
        }
        conversation.push(msg);
        self.store_ref.insert(
            self.id.clone(),
            Stored {
                response: response.clone(),
                conversation,
            },
        );
    }

    fn close(&mut self, out: &mut Vec<Frame>) {
        match self.open.take() {
            None => {}
            Some(OpenItem::Message { id, index, text }) => {
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                let f = self.frame("response.output_text.done", json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
                out.push(f);
                let f = self.frame(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
                out.push(f);
                let item = Self::message_item(&id, &text, "completed");
                let f = self.frame(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                out.push(f);
                self.items.push(item);
            }
            // A call is closed by its own end (`Delta::CallEnd`); one cut off stays as it went.
            Some(OpenItem::Call { item, .. }) => self.items.push(item),
            Some(OpenItem::Reasoning { id, index, text }) => {
                let f = self.frame(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                out.push(f);
                let item = Self::reasoning_item(&id, &text);
                let f = self.frame(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                out.push(f);
                self.items.push(item);
            }
        }
    }
}

impl Adapter for Responses {
    fn error_style(&self) -> ErrorStyle {
        ErrorStyle::OpenAi
    }

    fn full(&mut self, s: &mut Session) -> Value {
        let output = match s.choices.first() {
            Some(c) => self.output_of(s, c),
            None => Vec::new(),
        };
        let mut v = self.object(s, output.clone(), Self::usage(s));
        v["timings"] = s.timings();
        self.keep(&v, &output);
        v
    }

    fn start(&mut self, s: &mut Session) -> Vec<Frame> {
        let created = self.object(s, Vec::new(), Value::Null);
        self.echo_object = created.clone();
        vec![
            self.frame("response.created", json!({"response": created.clone()})),
            self.frame("response.in_progress", json!({"response": created})),
        ]
    }

    fn update(&mut self, s: &mut Session, u: Update, _last: bool) -> Vec<Frame> {
        let mut out = Vec::new();
        for d in u.deltas {
            match d {
                Delta::Text(t) => {
                    if !matches!(self.open, Some(OpenItem::Message { .. })) {
                        self.close(&mut out);
                        let id = format!("msg_{}", s.fresh_id());
                        let index = self.items.len();
                        let mut item = Self::message_item(&id, "", "in_progress");
                        item["content"] = json!([]);
                        let f = self.frame(
                            "response.output_item.added",
                            json!({"output_index": index, "item": item}),
                        );
                        out.push(f);
                        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                        let f = self.frame("response.content_part.added", json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}));
                        out.push(f);
                        self.open = Some(OpenItem::Message {
                            id,
                            index,
                            text: String::new(),
                        });
                    }
                    if let Some(OpenItem::Message { id, index, text }) = &mut self.open {
                        text.push_str(&t);
                        let v = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t, "logprobs": []});
                        out.push(self.frame("response.output_text.delta", v));
                    }
                }
                Delta::Reasoning(t) => {
                    if !matches!(self.open, Some(OpenItem::Reasoning { .. })) {
                        self.close(&mut out);
                        let id = format!("rs_{}", s.fresh_id());
                        let index = self.items.len();
                        let item =
                            json!({"type": "reasoning", "id": id, "summary": [], "content": []});
                        let f = self.frame(
                            "response.output_item.added",
                            json!({"output_index": index, "item": item}),
                        );
                        out.push(f);
                        self.open = Some(OpenItem::Reasoning {
                            id,
                            index,
                            text: String::new(),
                        });
                    }
                    if let Some(OpenItem::Reasoning { id, index, text }) = &mut self.open {
                        text.push_str(&t);
                        let v = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t});
                        out.push(self.frame("response.reasoning_text.delta", v));
                    }
                }
                Delta::CallBegin(name) => {
                    self.close(&mut out);
                    let index = self.items.len();
                    let named = self.tools.call(&name, "");
                    let field = if named.custom { "input" } else { "arguments" };
                    let mut item = Self::call_item(s, &named, "in_progress");
                    item[field] = json!("");
                    let f = self.frame(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item.clone()}),
                    );
                    out.push(f);
                    self.open = Some(OpenItem::Call {
                        item,
                        index,
                        custom: named.custom,
                    });
                }
                Delta::CallArgs(t) => {
                    if let Some(OpenItem::Call {
                        item,
                        index,
                        custom: false,
                    }) = &self.open
                    {
                        let v = json!({"item_id": item["id"], "output_index": index, "delta": t});
                        out.push(self.frame("response.function_call_arguments.delta", v));
                    }
                }
                Delta::CallEnd(call) => {
                    let Some(OpenItem::Call {
                        mut item,
                        index,
                        custom,
                    }) = self.open.take()
                    else {
                        continue;
                    };
                    let named = self.tools.call(&call.name, &call.arguments);
                    let id = item["id"].clone();
                    let mut d = json!({"item_id": id, "output_index": index});
                    if custom {
                        let v =
                            json!({"item_id": id, "output_index": index, "delta": named.arguments});
                        out.push(self.frame("response.custom_tool_call_input.delta", v));
                        d["input"] = json!(named.arguments);
                        item["input"] = json!(named.arguments);
                        out.push(self.frame("response.custom_tool_call_input.done", d));
                    } else {
                        d["name"] = json!(named.name);
                        d["arguments"] = json!(named.arguments);
                        item["arguments"] = json!(named.arguments);
                        out.push(self.frame("response.function_call_arguments.done", d));
                    }
                    item["status"] = json!("completed");
                    let f = self.frame(
                        "response.output_item.done",
                        json!({"output_index": index, "item": item.clone()}),
                    );
                    out.push(f);
                    self.items.push(item);
                }
            }
        }
        if u.finished {
            self.close(&mut out);
            if self.items.is_empty() {
                // An empty answer is still one (empty) message, as in the full response.
                let item = Self::message_item(&format!("msg_{}", s.fresh_id()), "", "completed");
                let f = self.frame(
                    "response.output_item.added",
                    json!({"output_index": 0, "item": item.clone()}),
                );
                out.push(f);
                let f = self.frame(
                    "response.output_item.done",
                    json!({"output_index": 0, "item": item.clone()}),
                );
                out.push(f);
                self.items.push(item);
            }
            let mut v = self.object(s, self.items.clone(), Self::usage(s));
            v["timings"] = s.timings();
            self.keep(&v, &self.items.clone());
            let kind = if v["status"] == "incomplete" {
                "response.incomplete"
            } else {
                "response.completed"
            };
            out.push(self.frame(kind, json!({"response": v})));
        }
        out
    }

    fn end(&mut self, _s: &mut Session) -> Vec<Frame> {
        Vec::new()
    }

    /// `response.in_progress` again: the Responses stream has no ping event, and clients time
    /// idleness by events (Codex gives up after 300 s without one; SSE comments do not count).
    /// The object is the response so far without the request's echoed `tools` and
    /// `instructions`: Codex's 9 tool schemas made each keep-alive 18.8 KB (3.2 MB of them
    /// for one cold 8.6k-token prompt); `response.created` and the final object carry them.
    fn keepalive(&mut self) -> Vec<Frame> {
        let mut response = self.echo_object.clone();
        response["output"] = Value::Array(self.items.clone());
        response["tools"] = json!([]);
        response["instructions"] = Value::Null;
        vec![self.frame("response.in_progress", json!({"response": response}))]
    }

    fn stream_error(&mut self, e: &ApiError) -> Vec<Frame> {
        let body = e.body();
        let v = json!({"code": e.code, "message": body["error"]["message"], "param": e.param});
        vec![self.frame("error", v)]
    }
}

/// The Responses endpoints' handlers.
pub mod handlers {
    use std::sync::Arc;

    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use serde_json::json;

    use super::Responses;
    use crate::app::AppState;
    use crate::error::ApiError;
    use crate::protocols::Validator;
    use crate::request::{body_and_model, Body};
    use crate::session;

    fn not_found(id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "response_not_found",
            format!("Response with id '{id}' not found."),
        )
    }

    /// `POST /v1/responses`.
    pub async fn create(State(app): State<Arc<AppState>>, body: Body) -> Response {
        let (b, st) = match body_and_model(&app, body).await {
            Ok(x) => x,
            Err(e) => return e.into_response(),
        };
        let store = app.clone();
        let lookup = move |id: &str| store.responses.conversation(id);
        match Validator::of(&st).responses(&b, &lookup) {
            Ok(mut r) => {
                let a = Responses::new(app.responses.clone(), &mut r);
                session::run(st.clone(), r.job, a).await
            }
            Err(e) => e.into_response(),
        }
    }

    /// `GET /v1/responses/{id}`.
    pub async fn get(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
        match st.responses.get(&id) {
            Some(v) => axum::Json(v).into_response(),
            None => not_found(&id).into_response(),
        }
    }

    /// `DELETE /v1/responses/{id}`.
    pub async fn delete(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
        if st.responses.remove(&id) {
            axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
        } else {
            not_found(&id).into_response()
        }
    }
}
