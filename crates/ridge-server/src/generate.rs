//! Running a completion or chat request through the engine and shaping what comes back:
//! one JSON response, or an SSE stream of OpenAI chunks.
//!
//! Every prompt of a request is one engine request (with its `n` choices); their events arrive
//! on one channel, tagged with the prompt index, and choice `i` of prompt `p` is answered as
//! index `p·n + i`. A chunk is sent only when it carries text or a finish reason — the first
//! one is what clients time as TTFT, so nothing is sent before prefill is done. If the client
//! goes away (the response future or the stream is dropped), an [`AbortGuard`] aborts the
//! engine requests at once and their KV blocks are freed within one engine step.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use ridge_engine::{
    ChoiceTimings, Constraint, EngineError, Event, EventSink, FinishReason, RequestId,
    TokenLogprobs, Usage,
};

use crate::error::ApiError;
use crate::metrics::Observer;
use crate::params::{engine_request, Common};
use crate::state::AppState;
use crate::tools::{Call, CallParser, Piece, ToolFormat};

/// Which API shape to answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

/// A validated request, ready for the engine.
pub struct Job {
    /// Response shape.
    pub kind: Kind,
    /// Tokenized prompts.
    pub prompts: Vec<Vec<u32>>,
    /// Shared parameters.
    pub common: Common,
    /// `max_tokens` when the request gives none (`None`: up to the context).
    pub default_max: Option<usize>,
    /// Alternatives per token when logprobs are asked for.
    pub logprobs: Option<usize>,
    /// A grammar the output must match (compiled at submission).
    pub structured: Option<crate::structured::Structured>,
    /// Tools the model may call (chat only): its output is parsed for calls.
    pub tools: Option<crate::tools::Tools>,
}

/// Aborts the engine requests it holds when dropped, unless disarmed.
struct AbortGuard {
    state: Arc<AppState>,
    ids: Vec<RequestId>,
    armed: bool,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if self.armed {
            for &id in &self.ids {
                self.state.engine.abort(id);
            }
        }
    }
}

fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::QueueFull(_) => ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "queue_full",
            e.to_string(),
        ),
        EngineError::Stopped => ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            e.to_string(),
        ),
        EngineError::Model(_) => ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.to_string(),
        ),
        other => ApiError::bad_request(other.to_string()),
    }
}

/// Per-choice accumulated output.
#[derive(Default)]
struct Choice {
    text: String,
    finish: Option<FinishReason>,
    usage: Usage,
    timings: Option<ChoiceTimings>,
    /// (token, logprobs, text offset) of tokens not yet sent (streaming) or all (non-streaming).
    logprobs: Vec<(u32, TokenLogprobs, usize)>,
    sent_role: bool,
    /// Splits the streamed text into content and tool calls (requests with tools).
    parser: Option<CallParser>,
    /// Tool calls streamed so far.
    calls: usize,
}

/// The state of one response while events arrive.
struct Answer {
    state: Arc<AppState>,
    kind: Kind,
    id: String,
    created: u64,
    n: usize,
    choices: Vec<Choice>,
    finished: usize,
    error: Option<String>,
    /// Time spent compiling the request's grammar, ms.
    compile_ms: Option<f64>,
    /// How the model writes tool calls, when the request has tools.
    tool_format: Option<&'static ToolFormat>,
}

impl Answer {
    fn new(state: Arc<AppState>, kind: Kind, prompts: usize, n: usize) -> Self {
        let prefix = match kind {
            Kind::Completion => "cmpl",
            Kind::Chat => "chatcmpl",
        };
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let id = format!("{prefix}-{}", state.next_response_id());
        Answer {
            state,
            kind,
            id,
            created,
            n,
            choices: (0..prompts * n).map(|_| Choice::default()).collect(),
            finished: 0,
            error: None,
            compile_ms: None,
            tool_format: None,
        }
    }

    fn done(&self) -> bool {
        self.finished == self.choices.len() || self.error.is_some()
    }

    /// Folds one event in; returns the index of the choice it touched and the new text.
    fn apply(&mut self, prompt: usize, ev: Event) -> Option<(usize, String)> {
        match ev {
            Event::Token(t) => {
                let ci = prompt * self.n + t.index;
                let c = self.choices.get_mut(ci)?;
                if let Some(lp) = t.logprobs {
                    c.logprobs.push((t.token, lp, c.text.len()));
                }
                c.text.push_str(&t.text);
                Some((ci, t.text))
            }
            Event::Finish(f) => {
                let ci = prompt * self.n + f.index;
                let c = self.choices.get_mut(ci)?;
                if c.finish.is_some() {
                    return None;
                }
                if let Some(e) = f.error {
                    self.error = Some(e);
                }
                c.finish = Some(f.reason);
                c.text.push_str(&f.text);
                c.usage = f.usage;
                c.timings = Some(f.timings);
                self.finished += 1;
                Some((ci, f.text))
            }
        }
    }

    fn usage(&self) -> Value {
        let mut prompt = 0;
        let mut completion = 0;
        let mut cached = 0;
        for (i, c) in self.choices.iter().enumerate() {
            completion += c.usage.completion_tokens;
            if i % self.n == 0 {
                prompt += c.usage.prompt_tokens;
                cached += c.usage.cached_tokens;
            }
        }
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        })
    }

    /// The `timings` object (choice 0's clock; `predicted_n` counts its tokens).
    fn timings(&self) -> Value {
        let Some(c) = self.choices.first() else {
            return Value::Null;
        };
        let Some(t) = &c.timings else {
            return Value::Null;
        };
        let prompt_ms = match (t.scheduled, t.first_token) {
            (Some(s), Some(f)) => Some(f.saturating_duration_since(s).as_secs_f64() * 1e3),
            _ => None,
        };
        let predicted_ms = t.decode_ms();
        let per_second = match (predicted_ms, t.tokens) {
            (Some(ms), n) if ms > 0.0 && n > 1 => Some((n - 1) as f64 * 1e3 / ms),
            _ => None,
        };
        json!({
            "prompt_n": c.usage.prompt_tokens,
            "cached_n": c.usage.cached_tokens,
            "prompt_ms": prompt_ms,
            "predicted_n": c.usage.completion_tokens,
            "predicted_ms": predicted_ms,
            "queue_ms": t.queue_ms(),
            "ttft_ms": t.ttft_ms(),
            "tpot_ms": t.tpot_ms(),
            "predicted_per_second": per_second,
            "roofline_tpot_ms": t.roofline_tpot_ms,
            "roofline_efficiency": t.roofline_efficiency(),
            "roofline_memory_level": self.state.engine.info().config.memory_level,
            "roofline_bandwidth_gbs": self.state.engine.info().config.bandwidth_gbs,
            "dram_bandwidth_gbs": self.state.engine.info().config.dram_bandwidth_gbs,
            "llc_bandwidth_gbs": self.state.engine.info().config.llc_bandwidth_gbs,
            "draft_n": t.draft_tokens,
            "draft_accepted_n": t.accepted_tokens,
            "grammar_compile_ms": self.compile_ms,
        })
    }

    fn finish_str(r: Option<FinishReason>) -> Value {
        match r {
            Some(FinishReason::Stop) => json!("stop"),
            Some(FinishReason::Length) => json!("length"),
            Some(FinishReason::Aborted) => json!("abort"),
            None => Value::Null,
        }
    }

    fn piece(&self, token: u32) -> String {
        String::from_utf8_lossy(self.state.tokenizer.token_to_piece(token, true)).into_owned()
    }

    /// Logprobs of `items` in the endpoint's shape.
    fn logprobs_json(&self, items: &[(u32, TokenLogprobs, usize)]) -> Value {
        match self.kind {
            Kind::Chat => {
                let entry = |t: u32, lp: f32| {
                    let s = self.piece(t);
                    json!({"token": s, "logprob": lp, "bytes": s.as_bytes()})
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
                let tokens: Vec<String> = items.iter().map(|(t, _, _)| self.piece(*t)).collect();
                let lps: Vec<f32> = items.iter().map(|(_, lp, _)| lp.logprob).collect();
                let tops: Vec<Value> = items
                    .iter()
                    .map(|(_, lp, _)| {
                        let m: serde_json::Map<String, Value> = lp
                            .top
                            .iter()
                            .map(|&(a, l)| (self.piece(a), json!(l)))
                            .collect();
                        Value::Object(m)
                    })
                    .collect();
                let offsets: Vec<usize> = items.iter().map(|(_, _, o)| *o).collect();
                json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
            }
        }
    }

    /// The whole non-streaming response.
    fn full(&self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let lp = if c.logprobs.is_empty() {
                    Value::Null
                } else {
                    self.logprobs_json(&c.logprobs)
                };
                match self.kind {
                    Kind::Completion => json!({
                        "index": i, "text": c.text, "logprobs": lp,
                        "finish_reason": Self::finish_str(c.finish),
                    }),
                    Kind::Chat => {
                        let (content, calls) = self.split_calls(&c.text);
                        let mut message = json!({"role": "assistant", "content": content});
                        let mut finish = Self::finish_str(c.finish);
                        if !calls.is_empty() {
                            if content.is_empty() {
                                message["content"] = Value::Null;
                            }
                            message["tool_calls"] = calls
                                .iter()
                                .map(|call| self.call_json(call))
                                .collect::<Vec<_>>()
                                .into();
                            if c.finish == Some(FinishReason::Stop) {
                                finish = json!("tool_calls");
                            }
                        }
                        json!({
                            "index": i,
                            "message": message,
                            "logprobs": lp,
                            "finish_reason": finish,
                        })
                    }
                }
            })
            .collect();
        let object = match self.kind {
            Kind::Completion => "text_completion",
            Kind::Chat => "chat.completion",
        };
        json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.state.model_name, "choices": choices,
            "usage": self.usage(), "timings": self.timings(),
        })
    }

    /// A whole output's content and tool calls (no calls without tools).
    fn split_calls(&self, text: &str) -> (String, Vec<Call>) {
        let Some(format) = self.tool_format else {
            return (text.to_string(), Vec::new());
        };
        let mut p = CallParser::new(format);
        let mut pieces = p.push(text);
        pieces.extend(p.finish());
        let mut content = String::new();
        let mut calls = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Content(t) => content.push_str(&t),
                Piece::Call(c) => calls.push(c),
            }
        }
        (content.trim().to_string(), calls)
    }

    /// One call as OpenAI's `tool_calls` entry, with a fresh id.
    fn call_json(&self, call: &Call) -> Value {
        json!({
            "id": format!("call_{}", self.state.next_response_id()),
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        })
    }

    /// The streaming chunks of choice `ci` for new `text` when the request has tools: content
    /// as usual, each call as OpenAI streams it (id and name, then the arguments), and the
    /// finish reason (`tool_calls` when it made any) once the choice ends.
    fn tool_chunks(&mut self, ci: usize, text: String, with_timings: bool) -> Vec<Value> {
        let finished = self.choices[ci].finish.is_some();
        let Some(parser) = self.choices[ci].parser.as_mut() else {
            return vec![self.chunk(ci, text, with_timings)];
        };
        let mut pieces = parser.push(&text);
        if finished {
            pieces.extend(parser.finish());
        }
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                // Whitespace between calls is layout, not an answer.
                Piece::Content(t) if t.trim().is_empty() && self.choices[ci].calls > 0 => {}
                Piece::Content(t) => {
                    let delta = self.role_delta(ci, Some(t));
                    out.push(self.delta_chunk(ci, delta, Value::Null, false));
                }
                Piece::Call(call) => {
                    let index = self.choices[ci].calls;
                    self.choices[ci].calls += 1;
                    let mut head = self.call_json(&call);
                    head["index"] = json!(index);
                    head["function"]["arguments"] = json!("");
                    let mut delta = self.role_delta(ci, None);
                    delta.insert("tool_calls".into(), json!([head]));
                    out.push(self.delta_chunk(ci, delta, Value::Null, false));
                    let mut delta = serde_json::Map::new();
                    delta.insert(
                        "tool_calls".into(),
                        json!([{"index": index, "function": {"arguments": call.arguments}}]),
                    );
                    out.push(self.delta_chunk(ci, delta, Value::Null, false));
                }
            }
        }
        if finished {
            let c = &self.choices[ci];
            let finish = if c.calls > 0 && c.finish == Some(FinishReason::Stop) {
                json!("tool_calls")
            } else {
                Self::finish_str(c.finish)
            };
            let delta = self.role_delta(ci, None);
            out.push(self.delta_chunk(ci, delta, finish, with_timings));
        }
        out
    }

    /// A chat delta, with the role on the choice's first chunk.
    fn role_delta(&mut self, ci: usize, content: Option<String>) -> serde_json::Map<String, Value> {
        let mut delta = serde_json::Map::new();
        let c = &mut self.choices[ci];
        if !c.sent_role {
            c.sent_role = true;
            delta.insert("role".into(), json!("assistant"));
        }
        if let Some(t) = content {
            delta.insert("content".into(), json!(t));
        }
        delta
    }

    /// A `chat.completion.chunk` of choice `ci` with `delta`.
    fn delta_chunk(
        &self,
        ci: usize,
        delta: serde_json::Map<String, Value>,
        finish: Value,
        with_timings: bool,
    ) -> Value {
        let mut v = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.state.model_name,
            "choices": [{"index": ci, "delta": delta, "logprobs": Value::Null, "finish_reason": finish}],
        });
        if with_timings {
            v["timings"] = self.timings();
        }
        v
    }

    /// One streaming chunk for choice `ci` carrying `text` (and its finish reason if ended).
    fn chunk(&mut self, ci: usize, text: String, with_timings: bool) -> Value {
        let items = std::mem::take(&mut self.choices[ci].logprobs);
        let lp = if items.is_empty() {
            Value::Null
        } else {
            self.logprobs_json(&items)
        };
        let finish = Self::finish_str(self.choices[ci].finish);
        let (object, choice) = match self.kind {
            Kind::Completion => (
                "text_completion",
                json!({"index": ci, "text": text, "logprobs": lp, "finish_reason": finish}),
            ),
            Kind::Chat => {
                let c = &mut self.choices[ci];
                let mut delta = serde_json::Map::new();
                if !c.sent_role {
                    c.sent_role = true;
                    delta.insert("role".into(), json!("assistant"));
                }
                if !text.is_empty() || finish.is_null() {
                    delta.insert("content".into(), json!(text));
                }
                (
                    "chat.completion.chunk",
                    json!({"index": ci, "delta": delta, "logprobs": lp, "finish_reason": finish}),
                )
            }
        };
        let mut v = json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.state.model_name, "choices": [choice],
        });
        if with_timings {
            v["timings"] = self.timings();
        }
        v
    }

    fn usage_chunk(&self) -> Value {
        let object = match self.kind {
            Kind::Completion => "text_completion",
            Kind::Chat => "chat.completion.chunk",
        };
        json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.state.model_name, "choices": [],
            "usage": self.usage(), "timings": self.timings(),
        })
    }
}

/// Compiles the job's grammar on a blocking thread (a large schema takes milliseconds to
/// seconds); returns the constraint and the compile time in ms. A schema or grammar that
/// cannot be compiled, or exceeds the compile limits, is a 400 naming the field.
async fn compile(
    state: &Arc<AppState>,
    s: &crate::structured::Structured,
) -> Result<(Constraint, f64), ApiError> {
    let st = state.clone();
    let spec = s.spec.clone();
    let started = Instant::now();
    let compiled = tokio::task::spawn_blocking(move || st.grammars()?.compile(&spec))
        .await
        .map_err(|e| {
            ApiError::invalid(s.param, format!("`{}` could not be compiled: {e}", s.param))
        })?;
    let c = compiled
        .map_err(|e| ApiError::invalid(s.param, format!("`{}` cannot be used: {e}", s.param)))?;
    Ok((c, started.elapsed().as_secs_f64() * 1e3))
}

/// Submits the job and answers it, streaming or not.
pub async fn run(state: Arc<AppState>, job: Job) -> Result<Response, ApiError> {
    let ctx = state.engine.info().ctx_len;
    let compiled = match &job.structured {
        Some(s) => Some(compile(&state, s).await?),
        None => None,
    };
    let mut reqs = Vec::with_capacity(job.prompts.len());
    for p in job.prompts {
        let mut r = engine_request(p, &job.common, job.default_max, job.logprobs, ctx)?;
        r.constraint = compiled.as_ref().map(|(c, _)| c.clone());
        reqs.push(r);
    }
    let (tx, rx) = unbounded_channel::<(usize, Event)>();
    let mut guard = AbortGuard {
        state: state.clone(),
        ids: Vec::with_capacity(reqs.len()),
        armed: true,
    };
    let n_prompts = reqs.len();
    for (i, r) in reqs.into_iter().enumerate() {
        let tx = tx.clone();
        let observer = Observer::new(state.clone(), job.common.n);
        let sink: EventSink = Arc::new(move |e| {
            observer.observe(&e);
            tx.send((i, e)).is_ok()
        });
        let id = state.engine.submit(r, sink).map_err(engine_error)?;
        guard.ids.push(id);
    }
    drop(tx);
    let mut answer = Answer::new(state, job.kind, n_prompts, job.common.n);
    answer.compile_ms = compiled.map(|(_, ms)| ms);
    if let Some(t) = &job.tools {
        answer.tool_format = Some(t.format);
        for c in &mut answer.choices {
            c.parser = Some(CallParser::new(t.format));
        }
    }
    if job.common.stream {
        Ok(stream_response(answer, rx, guard, job.common.include_usage).into_response())
    } else {
        collect(answer, rx, guard).await
    }
}

async fn collect(
    mut answer: Answer,
    mut rx: UnboundedReceiver<(usize, Event)>,
    mut guard: AbortGuard,
) -> Result<Response, ApiError> {
    while !answer.done() {
        match rx.recv().await {
            Some((p, ev)) => {
                answer.apply(p, ev);
            }
            None => break,
        }
    }
    guard.armed = !answer.done() || answer.error.is_some();
    if let Some(e) = &answer.error {
        return Err(ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.clone(),
        ));
    }
    if !answer.done() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the engine stopped before the request finished",
        ));
    }
    Ok(axum::Json(answer.full()).into_response())
}

struct StreamState {
    answer: Answer,
    rx: UnboundedReceiver<(usize, Event)>,
    guard: AbortGuard,
    include_usage: bool,
    out: VecDeque<String>,
    ended: bool,
}

fn stream_response(
    answer: Answer,
    rx: UnboundedReceiver<(usize, Event)>,
    guard: AbortGuard,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let st = StreamState {
        answer,
        rx,
        guard,
        include_usage,
        out: VecDeque::new(),
        ended: false,
    };
    Sse::new(stream::unfold(st, |mut st| async move {
        loop {
            if let Some(s) = st.out.pop_front() {
                return Some((Ok(SseEvent::default().data(s)), st));
            }
            if st.ended {
                return None;
            }
            match st.rx.recv().await {
                Some((p, ev)) => {
                    if let Some((ci, text)) = st.answer.apply(p, ev) {
                        let finished = st.answer.choices[ci].finish.is_some();
                        if !text.is_empty() || finished {
                            let last = st.answer.done() && !st.include_usage;
                            if st.answer.tool_format.is_some() {
                                for chunk in st.answer.tool_chunks(ci, text, last) {
                                    st.out.push_back(chunk.to_string());
                                }
                            } else {
                                let chunk = st.answer.chunk(ci, text, last);
                                st.out.push_back(chunk.to_string());
                            }
                        }
                    }
                    if let Some(e) = st.answer.error.clone() {
                        let err = ApiError::new(
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            "internal_error",
                            e,
                        );
                        st.out.push_back(err.body().to_string());
                        st.out.push_back("[DONE]".into());
                        st.ended = true;
                    } else if st.answer.done() {
                        if st.include_usage {
                            st.out.push_back(st.answer.usage_chunk().to_string());
                        }
                        st.out.push_back("[DONE]".into());
                        st.guard.armed = false;
                        st.ended = true;
                    }
                }
                None => {
                    // The engine went away (shutdown) before every choice ended.
                    st.out.push_back("[DONE]".into());
                    st.ended = true;
                }
            }
        }
    }))
}
