//! OpenAI's Chat Completions (`/v1/chat/completions`) and Completions (`/v1/completions`):
//! their request fields, their `chat.completion` / `text_completion` answers, and their
//! streams of `data:` chunks ending in `data: [DONE]`.
//!
//! A chunk carries text, a tool call or a finish reason — never nothing. A tool call streams as
//! OpenAI's clients expect: one chunk with its index, id and name (arguments empty), then one
//! with the arguments; a choice that called a tool and stopped finishes with `tool_calls`.

use serde_json::{json, Map, Value};

use ridge_engine::{FinishReason, TokenLogprobs};
use ridge_tokenizer::ChatMessage;

use super::{Adapter, Frame, Rendered, Validator};
use crate::error::{ApiError, ErrorStyle};
use crate::params::{self, Fields, MAX_LOGPROBS, MAX_MESSAGES, MAX_PROMPTS};
use crate::session::{Delta, Job, Reasoning, Session, Update};
use crate::structured::Structured;
use crate::tools::Tools;

/// Which API shape to answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

impl Validator<'_> {
    /// `prompt` of a completions request: a string, strings, token ids, or lists of token ids.
    fn prompts(&self, f: &Fields) -> Result<Vec<Vec<u32>>, ApiError> {
        let wrong = || {
            ApiError::invalid(
                "prompt",
                "`prompt` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids",
            )
        };
        let out = match f.get("prompt") {
            None => return Err(ApiError::invalid("prompt", "`prompt` is required")),
            Some(Value::String(s)) => vec![self.tokenize_text(s, "prompt")?],
            Some(Value::Array(a)) if a.is_empty() => return Err(wrong()),
            Some(Value::Array(a)) if a.len() > MAX_PROMPTS && !a[0].is_number() => {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("at most {MAX_PROMPTS} prompts per request"),
                ))
            }
            Some(Value::Array(a)) => match &a[0] {
                Value::Number(_) => vec![self.token_ids(a, "prompt")?],
                Value::String(_) => a
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => self.tokenize_text(s, "prompt"),
                        _ => Err(wrong()),
                    })
                    .collect::<Result<_, _>>()?,
                Value::Array(_) => a
                    .iter()
                    .map(|v| match v {
                        Value::Array(ids) => self.token_ids(ids, "prompt"),
                        _ => Err(wrong()),
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err(wrong()),
            },
            Some(_) => return Err(wrong()),
        };
        if out.iter().any(Vec::is_empty) {
            return Err(ApiError::invalid("prompt", "a prompt is empty"));
        }
        Ok(out)
    }

    /// Validates a `/v1/completions` body into a [`Job`] (prompts tokenized).
    pub fn completion(&self, body: &Map<String, Value>) -> Result<Job, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
        let common = params::common(&f, self.vocab)?;
        let logprobs = f
            .int_in("logprobs", 0, MAX_LOGPROBS as i64)?
            .map(|k| k as usize);
        let prompts = self.prompts(&f)?;
        Ok(Job {
            prompts,
            common,
            default_max: Some(16),
            logprobs,
            structured: crate::structured::read(&f)?,
            tools: None,
            reasoning: None,
        })
    }

    /// Validates a `/v1/chat/completions` body into a [`Job`] (template rendered, tokenized).
    pub fn chat(&self, body: &Map<String, Value>) -> Result<Job, ApiError> {
        let f = Fields::new(body);
        params::check_model(&f)?;
        let common = params::common(&f, self.vocab)?;
        let top = f.int_in("top_logprobs", 0, MAX_LOGPROBS as i64)?;
        let logprobs = if f.bool("logprobs", false)? {
            Some(top.unwrap_or(0) as usize)
        } else if top.is_some_and(|t| t > 0) {
            return Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ));
        } else {
            None
        };
        let tools = crate::tools::read(&f, self.template, self.tokenizer)?;
        let structured = crate::structured::read(&f)?;
        let prompt = self.render_chat(&f, tools.as_ref())?;
        let budget = super::effort_budget(f.str("reasoning_effort")?);
        let reasoning = self.reasoning(&prompt, budget);
        tool_job(prompt, common, logprobs, structured, tools, reasoning)
    }

    /// The prompt of a body with `messages` (chat, `/tokenize`).
    pub(crate) fn render_chat(
        &self,
        f: &Fields,
        tools: Option<&Tools>,
    ) -> Result<Rendered, ApiError> {
        let msgs = messages(f)?;
        let add_gen = f.bool("add_generation_prompt", true)?;
        self.render(&msgs, tools, add_gen, template_vars(f)?)
    }
}

/// Template variables a chat request may set: vLLM's `chat_template_kwargs` (e.g.
/// `{"enable_thinking": false}` for Qwen3) and `reasoning_effort` (gpt-oss's harmony
/// template reads it).
fn template_vars(f: &Fields) -> Result<Map<String, Value>, ApiError> {
    let mut extra = f
        .object("chat_template_kwargs")?
        .cloned()
        .unwrap_or_default();
    extra.remove("tools");
    if let Some(e) = f.str("reasoning_effort")? {
        if !matches!(e, "minimal" | "low" | "medium" | "high") {
            return Err(ApiError::invalid(
                "reasoning_effort",
                "`reasoning_effort` must be one of minimal, low, medium, high",
            ));
        }
        extra.insert("reasoning_effort".into(), json!(e));
    }
    Ok(extra)
}

/// The job of a templated conversation: tools that force a call become its grammar (and
/// cannot be combined with another output constraint), and call and reasoning tags stay in
/// the text the parsers read.
pub(crate) fn tool_job(
    prompt: Rendered,
    mut common: params::Common,
    logprobs: Option<usize>,
    mut structured: Option<Structured>,
    tools: Option<Tools>,
    reasoning: Option<Reasoning>,
) -> Result<Job, ApiError> {
    if reasoning.is_some() {
        // Thinking tags (and harmony's channels) are control tokens in some vocabularies.
        common.render_special = true;
    }
    if tools.as_ref().is_some_and(|t| t.template_var().is_some()) {
        // The call tags are special tokens in some vocabularies: keep them in the text the
        // call parser reads (vLLM's Hermes parser does the same).
        common.render_special = true;
    }
    if let Some(spec) = tools.as_ref().and_then(|t| t.grammar_after(&prompt.text)) {
        if let Some(s) = &structured {
            return Err(ApiError::invalid(
                s.param,
                format!(
                    "`{}` cannot be combined with a tool_choice that forces a call",
                    s.param
                ),
            ));
        }
        structured = Some(Structured {
            spec,
            param: "tools",
            trigger: None,
        });
    } else if structured.is_none() {
        if let Some((spec, trigger)) = tools
            .as_ref()
            .and_then(|t| t.lazy_grammar_after(&prompt.text))
        {
            structured = Some(Structured {
                spec,
                param: "tools",
                trigger: Some(trigger),
            });
        }
    }
    Ok(Job {
        prompts: vec![prompt.tokens],
        common,
        default_max: None,
        logprobs,
        structured,
        tools,
        reasoning,
    })
}

fn messages(f: &Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match f.get("messages") {
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "`messages` must not be empty",
            ))
        }
        Some(Value::Array(a)) if a.len() > MAX_MESSAGES => {
            return Err(ApiError::invalid(
                "messages",
                format!("at most {MAX_MESSAGES} messages"),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid("messages", "`messages` must be an array")),
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect()
}

fn message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let Value::Object(m) = m else {
        return Err(ApiError::invalid(
            "messages",
            format!("messages[{i}] must be an object"),
        ));
    };
    let mf = Fields::new(m);
    let role = match mf.str("role")? {
        Some(r @ ("system" | "user" | "assistant" | "tool")) => r,
        Some("developer") => "system",
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!("messages[{i}].role {other:?} is not one of system, user, assistant, tool, developer"),
            ))
        }
        None => return Err(ApiError::invalid("messages", format!("messages[{i}].role is required"))),
    };
    let content = match mf.get("content") {
        None | Some(Value::Null) if role == "assistant" => String::new(),
        None => {
            return Err(ApiError::invalid(
                "messages",
                format!("messages[{i}].content is required"),
            ))
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!("messages[{i}].content parts must be {{\"type\": \"text\", \"text\": ...}} (only text is supported)"),
                        ))
                    }
                }
            }
            text
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "messages",
                format!("messages[{i}].content must be a string or an array of text parts"),
            ))
        }
    };
    let mut msg = ChatMessage::new(role, content);
    if role == "assistant" {
        if let Some(calls) = mf.get("tool_calls") {
            msg.tool_calls = Some(crate::tools::calls_for_template(calls, i)?);
        }
        let reasoning = match mf.str("reasoning_content")? {
            Some(r) => Some(r),
            None => mf.str("reasoning")?,
        };
        if let Some(r) = reasoning {
            msg.reasoning_content = Some(r.to_string());
            msg.thinking = Some(r.to_string());
        }
    }
    if role == "tool" {
        msg.tool_call_id = mf.str("tool_call_id")?.map(str::to_string);
        msg.name = mf.str("name")?.map(str::to_string);
    }
    Ok(msg)
}

/// Renders a session as Chat Completions or Completions.
pub struct OpenAi {
    kind: Kind,
    id: String,
    include_usage: bool,
    /// Per choice: the role was sent (chat streams send it once).
    sent_role: Vec<bool>,
    /// Per choice: tool calls streamed so far.
    calls: Vec<usize>,
}

impl OpenAi {
    /// An adapter for `kind`; `id` is the response's unique part, `include_usage` is
    /// `stream_options.include_usage`.
    pub fn new(kind: Kind, id: &str, include_usage: bool) -> Self {
        let prefix = match kind {
            Kind::Completion => "cmpl",
            Kind::Chat => "chatcmpl",
        };
        OpenAi {
            kind,
            id: format!("{prefix}-{id}"),
            include_usage,
            sent_role: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    fn usage(s: &Session) -> Value {
        let (prompt, completion, cached) = s.totals();
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        })
    }

    fn finish_str(c: &crate::session::ChoiceState) -> Value {
        if c.ended_in_calls() {
            return json!("tool_calls");
        }
        match c.finish {
            Some(FinishReason::Stop) => json!("stop"),
            Some(FinishReason::Length) => json!("length"),
            Some(FinishReason::Aborted) => json!("abort"),
            None => Value::Null,
        }
    }

    /// Logprobs of `items` in the endpoint's shape.
    fn logprobs_json(&self, s: &Session, items: &[(u32, TokenLogprobs, usize)]) -> Value {
        if items.is_empty() {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat => {
                let entry = |t: u32, lp: f32| {
                    let p = s.piece(t);
                    json!({"token": p, "logprob": lp, "bytes": p.as_bytes()})
                };
                let content: Vec<Value> = items
                    .iter()
                    .map(|(t, lp, _)| {
                        let mut e = entry(*t, lp.logprob);
                        e["top_logprobs"] = lp
                            .top
                            .iter()
                            .map(|&(a, l)| entry(a, l))
                            .collect::<Vec<_>>()
                            .into();
                        e
                    })
                    .collect();
                json!({ "content": content })
            }
            Kind::Completion => {
                let tokens: Vec<String> = items.iter().map(|(t, _, _)| s.piece(*t)).collect();
                let lps: Vec<f32> = items.iter().map(|(_, lp, _)| lp.logprob).collect();
                let tops: Vec<Value> = items
                    .iter()
                    .map(|(_, lp, _)| {
                        let m: Map<String, Value> = lp
                            .top
                            .iter()
                            .map(|&(a, l)| (s.piece(a), json!(l)))
                            .collect();
                        Value::Object(m)
                    })
                    .collect();
                let offsets: Vec<usize> = items.iter().map(|(_, _, o)| *o).collect();
                json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
            }
        }
    }

    /// One call as OpenAI's `tool_calls` entry, with a fresh id.
    fn call_json(s: &Session, name: &str, arguments: &str) -> Value {
        json!({
            "id": format!("call_{}", s.fresh_id()),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        })
    }

    /// A chunk with one choice.
    fn chunk(&self, s: &Session, choice: Value, with_timings: bool) -> Value {
        let mut v = json!({
            "id": self.id, "object": self.object(true), "created": s.created,
            "model": s.state.model_name, "choices": [choice],
        });
        if with_timings {
            v["timings"] = s.timings();
        }
        v
    }

    /// A chat delta, with the role on the choice's first chunk.
    fn delta(&mut self, ci: usize) -> Map<String, Value> {
        let mut delta = Map::new();
        if !self.sent_role[ci] {
            self.sent_role[ci] = true;
            delta.insert("role".into(), json!("assistant"));
        }
        delta
    }
}

impl Adapter for OpenAi {
    fn error_style(&self) -> ErrorStyle {
        ErrorStyle::OpenAi
    }

    fn full(&mut self, s: &mut Session) -> Value {
        let choices: Vec<Value> = s
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let lp = self.logprobs_json(s, &c.logprobs);
                let finish = Self::finish_str(c);
                match self.kind {
                    Kind::Completion => json!({
                        "index": i, "text": c.text, "logprobs": lp, "finish_reason": finish,
                    }),
                    Kind::Chat => {
                        let mut message = json!({"role": "assistant", "content": c.content});
                        if !c.reasoning.is_empty() {
                            message["reasoning_content"] = json!(c.reasoning);
                            message["reasoning"] = json!(c.reasoning);
                        }
                        if !c.calls.is_empty() {
                            if c.content.is_empty() {
                                message["content"] = Value::Null;
                            }
                            message["tool_calls"] = c
                                .calls
                                .iter()
                                .map(|call| Self::call_json(s, &call.name, &call.arguments))
                                .collect::<Vec<_>>()
                                .into();
                        }
                        json!({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
                    }
                }
            })
            .collect();
        json!({
            "id": self.id, "object": self.object(false), "created": s.created,
            "model": s.state.model_name, "choices": choices,
            "usage": Self::usage(s), "timings": s.timings(),
        })
    }

    /// A chat stream opens with each choice's role chunk (`content: ""`), as OpenAI's does.
    fn start(&mut self, s: &mut Session) -> Vec<Frame> {
        if self.kind != Kind::Chat {
            return Vec::new();
        }
        self.sent_role = vec![true; s.choices.len()];
        self.calls.resize(s.choices.len(), 0);
        (0..s.choices.len())
            .map(|ci| {
                let choice = json!({"index": ci, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": null, "finish_reason": null});
                Frame::data(self.chunk(s, choice, false))
            })
            .collect()
    }

    fn update(&mut self, s: &mut Session, u: Update, last: bool) -> Vec<Frame> {
        let ci = u.choice;
        if self.sent_role.len() < s.choices.len() {
            self.sent_role.resize(s.choices.len(), false);
            self.calls.resize(s.choices.len(), 0);
        }
        let with_timings = last && !self.include_usage;
        let mut out: Vec<Value> = Vec::new();
        // Logprobs ride on the first chunk that carries text after them.
        let mut pending = std::mem::take(&mut s.choices[ci].logprobs);
        for d in u.deltas {
            match d {
                Delta::Text(t) => {
                    let lp = self.logprobs_json(s, &pending);
                    pending.clear();
                    let choice = match self.kind {
                        Kind::Completion => {
                            json!({"index": ci, "text": t, "logprobs": lp, "finish_reason": null})
                        }
                        Kind::Chat => {
                            let mut delta = self.delta(ci);
                            delta.insert("content".into(), json!(t));
                            json!({"index": ci, "delta": delta, "logprobs": lp, "finish_reason": null})
                        }
                    };
                    out.push(self.chunk(s, choice, false));
                }
                Delta::Reasoning(t) => {
                    let choice = match self.kind {
                        Kind::Completion => {
                            json!({"index": ci, "text": t, "logprobs": null, "finish_reason": null})
                        }
                        Kind::Chat => {
                            let mut delta = self.delta(ci);
                            delta.insert("reasoning_content".into(), json!(t));
                            delta.insert("reasoning".into(), json!(t));
                            json!({"index": ci, "delta": delta, "logprobs": null, "finish_reason": null})
                        }
                    };
                    out.push(self.chunk(s, choice, false));
                }
                Delta::CallBegin(name) => {
                    let index = self.calls[ci];
                    self.calls[ci] += 1;
                    let mut head = Self::call_json(s, &name, "");
                    head["index"] = json!(index);
                    let mut delta = self.delta(ci);
                    delta.insert("tool_calls".into(), json!([head]));
                    let choice = json!({"index": ci, "delta": delta, "logprobs": null, "finish_reason": null});
                    out.push(self.chunk(s, choice, false));
                }
                Delta::CallArgs(t) => {
                    let index = self.calls[ci].saturating_sub(1);
                    let args = json!([{"index": index, "function": {"arguments": t}}]);
                    let choice = json!({"index": ci, "delta": {"tool_calls": args}, "logprobs": null, "finish_reason": null});
                    out.push(self.chunk(s, choice, false));
                }
                Delta::CallEnd(_) => {}
            }
        }
        if !pending.is_empty() {
            // Tokens whose text is still held back keep their logprobs for the next chunk.
            s.choices[ci].logprobs = pending;
        }
        if u.finished {
            let finish = Self::finish_str(&s.choices[ci]);
            // Without tools the finish rides on the last text chunk, as OpenAI sends it.
            let merge = !s.has_tools && !out.is_empty();
            match out.last_mut() {
                Some(v) if merge => {
                    v["choices"][0]["finish_reason"] = finish;
                    if with_timings {
                        v["timings"] = s.timings();
                    }
                }
                _ => {
                    let items = std::mem::take(&mut s.choices[ci].logprobs);
                    let lp = self.logprobs_json(s, &items);
                    let choice = match self.kind {
                        Kind::Completion => {
                            json!({"index": ci, "text": "", "logprobs": lp, "finish_reason": finish})
                        }
                        Kind::Chat => {
                            let delta = self.delta(ci);
                            json!({"index": ci, "delta": delta, "logprobs": lp, "finish_reason": finish})
                        }
                    };
                    out.push(self.chunk(s, choice, with_timings));
                }
            }
        }
        out.into_iter().map(Frame::data).collect()
    }

    fn end(&mut self, s: &mut Session) -> Vec<Frame> {
        let mut out = Vec::new();
        if self.include_usage {
            out.push(Frame::data(json!({
                "id": self.id, "object": self.object(true), "created": s.created,
                "model": s.state.model_name, "choices": [],
                "usage": Self::usage(s), "timings": s.timings(),
            })));
        }
        out.push(Frame::data("[DONE]"));
        out
    }

    fn stream_error(&mut self, e: &ApiError) -> Vec<Frame> {
        vec![Frame::data(e.body()), Frame::data("[DONE]")]
    }
}
