//! One generation path for every protocol: a validated [`Job`] goes to the engine, and its
//! events are folded into a protocol-neutral [`Session`] — per choice, the text split into
//! reasoning, content and tool calls ([`Delta`]s), the finish reason, the stop string that
//! matched, usage and timings. The protocol adapters in [`crate::protocols`] only translate:
//! a request body into a [`Job`], and the session's deltas into their own JSON answer or
//! stream framing. Streaming, parsing, usage and `timings` are written here once.
//!
//! Every prompt of a job is one engine request (with its `n` choices); their events arrive on
//! one channel, tagged with the prompt index, and choice `i` of prompt `p` is choice
//! `p·n + i`. A stream opens as soon as the request is admitted (the adapter's opening
//! frames: `message_start`, `response.created`, the role chunk), so a client sees its request
//! taken before a long prompt is prefilled; after that a frame is sent when a delta or a finish
//! exists, and a keep-alive (Anthropic's `ping`, else an SSE comment) whenever the stream was
//! silent for the server's `sse_keepalive` — through prefill, and while text that may be a
//! tool call is held back. No opening frame carries text, so clients that time TTFT by the
//! first text still time the first token. If the client goes away (the response future or the
//! stream is dropped), an [`AbortGuard`] aborts the engine requests at once and their KV
//! blocks are freed within one engine step.

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
use crate::error::ErrorStyle;
use crate::metrics::Observer;
use crate::params::{engine_request, Common};
use crate::reasoning::{ReasoningParser, Segment};
use crate::state::ModelState;
use crate::tools::{Call, CallParser, Piece};

/// One server-sent event: an optional event name (Anthropic and Responses name theirs;
/// OpenAI's chunks are bare `data:` lines) and its data — or a comment line, which clients
/// ignore and proxies and idle watchdogs see as traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The `event:` field.
    pub event: Option<&'static str>,
    /// The `data:` field (the comment's text for a comment).
    pub data: String,
    /// A `: comment` line instead of an event.
    pub comment: bool,
}

impl Frame {
    /// A bare `data:` frame.
    pub fn data(v: impl ToString) -> Self {
        Frame {
            event: None,
            data: v.to_string(),
            comment: false,
        }
    }

    /// A named event.
    pub fn named(event: &'static str, v: &Value) -> Self {
        Frame {
            event: Some(event),
            data: v.to_string(),
            comment: false,
        }
    }

    /// A comment line.
    pub fn comment(text: &str) -> Self {
        Frame {
            event: None,
            data: text.to_string(),
            comment: true,
        }
    }
}

/// How one protocol renders a session. The session calls `start` once before the first
/// update it streams, `update` for each event that produced output or ended a choice, and
/// `end` (or `stream_error`) last; a non-streaming request gets `full` once every choice ended.
pub trait Adapter: Send + 'static {
    /// The protocol's error objects.
    fn error_style(&self) -> ErrorStyle;
    /// The whole answer of a non-streaming request.
    fn full(&mut self, s: &mut Session) -> Value;
    /// Frames that open a stream, sent as soon as the request is admitted (before the prompt
    /// is prefilled: a client sees its request taken at once).
    fn start(&mut self, _s: &mut Session) -> Vec<Frame> {
        Vec::new()
    }
    /// A frame that keeps an idle stream alive while the prompt is prefilled or a tool call is
    /// held back until complete (an SSE comment unless the protocol has its own).
    fn keepalive(&mut self) -> Vec<Frame> {
        vec![Frame::comment("keep-alive")]
    }
    /// Frames for one update; `last` is true when it ended the last choice.
    fn update(&mut self, s: &mut Session, u: Update, last: bool) -> Vec<Frame>;
    /// Frames that close a stream after every choice ended.
    fn end(&mut self, s: &mut Session) -> Vec<Frame>;
    /// Frames that report a failure mid-stream and close it.
    fn stream_error(&mut self, e: &ApiError) -> Vec<Frame>;
}

/// A validated request, ready for the engine: what every protocol's request becomes.
pub struct Job {
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
    /// Tools the model may call: its output is parsed for calls.
    pub tools: Option<crate::tools::Tools>,
    /// How the output splits into reasoning and answer (thinking models).
    pub reasoning: Option<Reasoning>,
}

/// A job's reasoning split.
#[derive(Clone, Debug)]
pub struct Reasoning {
    /// The model family's syntax.
    pub format: crate::reasoning::ReasoningFormat,
    /// The end of the rendered prompt (it may leave a `<think>` open).
    pub prompt_tail: String,
    /// Reasoning goes apart from the answer (else it is answer text, tags removed).
    pub keep_apart: bool,
    /// The engine's cap on the thoughts, when there is one.
    pub budget: Option<ridge_engine::ThinkBudget>,
}

/// A piece of one choice's output, as the parsers split it.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// Answer text.
    Text(String),
    /// Reasoning text (a thinking model's thoughts, apart from its answer).
    Reasoning(String),
    /// A tool call begins: its function's name.
    CallBegin(String),
    /// More of the open call's arguments text.
    CallArgs(String),
    /// The open call is complete; its arguments are exactly the [`Delta::CallArgs`] since
    /// its [`Delta::CallBegin`] (a call whose format cannot be read in part arrives as the
    /// three at once).
    CallEnd(Call),
}

/// What one engine event changed: the choice, its new deltas, whether it ended.
#[derive(Debug)]
pub struct Update {
    /// Choice index (`prompt·n + i`).
    pub choice: usize,
    /// New output, in order.
    pub deltas: Vec<Delta>,
    /// The choice ended with this event.
    pub finished: bool,
}

/// One choice's accumulated output.
#[derive(Default)]
pub struct ChoiceState {
    /// Every byte of text the engine released, unparsed.
    pub text: String,
    /// The answer text (without tool calls or reasoning).
    pub content: String,
    /// The reasoning text.
    pub reasoning: String,
    /// Tool calls, in order.
    pub calls: Vec<Call>,
    /// Why it ended, once it has.
    pub finish: Option<FinishReason>,
    /// The stop string that ended it.
    pub stop_sequence: Option<String>,
    /// Token counts (at the end).
    pub usage: Usage,
    /// The engine's clock for it (at the end).
    pub timings: Option<ChoiceTimings>,
    /// (token, logprobs, text offset) not yet taken by the adapter.
    pub logprobs: Vec<(u32, TokenLogprobs, usize)>,
    /// Splits the text into content and calls (requests with tools).
    parser: Option<CallParser>,
    /// Splits the text into reasoning and the rest (thinking models), before `parser`.
    thinking: Option<(ReasoningParser, bool)>,
}

impl ChoiceState {
    /// Whether it ended by making tool calls (a natural stop after at least one call).
    pub fn ended_in_calls(&self) -> bool {
        !self.calls.is_empty() && self.finish == Some(FinishReason::Stop)
    }

    /// Runs `text` (and, at the end, what the parsers still hold) through the reasoning
    /// parser, then its answer part through the call parser.
    fn parse(&mut self, text: &str, end: bool) -> Vec<Delta> {
        let Some((thinking, apart)) = self.thinking.as_mut() else {
            return self.parse_answer(text, end);
        };
        let apart = *apart;
        let mut segments = thinking.push(text);
        if end {
            segments.extend(thinking.finish());
        }
        let mut out = Vec::new();
        for seg in segments {
            match seg {
                Segment::Reasoning(t) if t.is_empty() => {}
                Segment::Reasoning(t) if apart => {
                    self.reasoning.push_str(&t);
                    out.push(Delta::Reasoning(t));
                }
                Segment::Reasoning(t) | Segment::Content(t) => {
                    out.extend(self.parse_answer(&t, false));
                }
            }
        }
        if end {
            out.extend(self.parse_answer("", true));
        }
        out
    }

    /// Runs answer text through the call parser (requests with tools).
    fn parse_answer(&mut self, text: &str, end: bool) -> Vec<Delta> {
        let Some(parser) = self.parser.as_mut() else {
            if text.is_empty() {
                return Vec::new();
            }
            self.content.push_str(text);
            return vec![Delta::Text(text.to_string())];
        };
        let mut pieces = parser.push(text);
        if end {
            pieces.extend(parser.finish());
        }
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                // Whitespace around calls is layout, not an answer.
                Piece::Content(t) if t.trim().is_empty() && !self.calls.is_empty() => {}
                Piece::Content(t) if t.is_empty() => {}
                Piece::Content(t) => {
                    self.content.push_str(&t);
                    out.push(Delta::Text(t));
                }
                Piece::Call(c) => {
                    out.push(Delta::CallBegin(c.name.clone()));
                    out.push(Delta::CallArgs(c.arguments.clone()));
                    self.calls.push(c.clone());
                    out.push(Delta::CallEnd(c));
                }
                Piece::CallBegin(name) => out.push(Delta::CallBegin(name)),
                Piece::CallArgs(t) => out.push(Delta::CallArgs(t)),
                Piece::CallEnd(c) => {
                    self.calls.push(c.clone());
                    out.push(Delta::CallEnd(c));
                }
            }
        }
        out
    }
}

/// The neutral state of one response while events arrive.
pub struct Session {
    /// The server.
    pub state: Arc<ModelState>,
    /// Choices per prompt.
    pub n: usize,
    /// Every choice (`prompts · n`).
    pub choices: Vec<ChoiceState>,
    /// Set when the engine failed a choice.
    pub error: Option<String>,
    /// Time spent compiling the request's grammar, ms.
    pub compile_ms: Option<f64>,
    /// Unix time the response was created.
    pub created: u64,
    /// Whether the request had tools (its output is parsed for calls).
    pub has_tools: bool,
    finished: usize,
}

impl Session {
    fn new(state: Arc<ModelState>, prompts: usize, n: usize) -> Self {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Session {
            state,
            n,
            choices: (0..prompts * n).map(|_| ChoiceState::default()).collect(),
            error: None,
            compile_ms: None,
            created,
            has_tools: false,
            finished: 0,
        }
    }

    /// Every choice ended, or the engine failed.
    pub fn done(&self) -> bool {
        self.finished == self.choices.len() || self.error.is_some()
    }

    /// Folds one event in.
    fn apply(&mut self, prompt: usize, ev: Event) -> Option<Update> {
        match ev {
            Event::Token(t) => {
                let ci = prompt * self.n + t.index;
                let c = self.choices.get_mut(ci)?;
                if let Some(lp) = t.logprobs {
                    c.logprobs.push((t.token, lp, c.text.len()));
                }
                c.text.push_str(&t.text);
                let deltas = c.parse(&t.text, false);
                Some(Update {
                    choice: ci,
                    deltas,
                    finished: false,
                })
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
                c.stop_sequence = f.stop_sequence;
                c.text.push_str(&f.text);
                c.usage = f.usage;
                c.timings = Some(f.timings);
                let deltas = c.parse(&f.text, true);
                if c.parser.is_some() || c.thinking.is_some() {
                    let t = c.content.trim().to_string();
                    c.content = t;
                }
                self.finished += 1;
                Some(Update {
                    choice: ci,
                    deltas,
                    finished: true,
                })
            }
        }
    }

    /// Prompt, completion and cached token totals over the request (each prompt once).
    pub fn totals(&self) -> (usize, usize, usize) {
        let (mut prompt, mut completion, mut cached) = (0, 0, 0);
        for (i, c) in self.choices.iter().enumerate() {
            completion += c.usage.completion_tokens;
            if i % self.n == 0 {
                prompt += c.usage.prompt_tokens;
                cached += c.usage.cached_tokens;
            }
        }
        (prompt, completion, cached)
    }

    /// ridge's `timings` object (choice 0's clock; `predicted_n` counts its tokens): how close
    /// the request ran to the hardware's limit. Every protocol's answer carries it.
    pub fn timings(&self) -> Value {
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
        let info = self.state.engine.info();
        let config = &info.config;
        // The floor's bandwidth now: raised past the start-up probe when a request beat it.
        let bandwidth = info
            .floor
            .as_ref()
            .map(|f| f.gbs())
            .or(config.bandwidth_gbs);
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
            "roofline_memory_level": config.memory_level,
            "roofline_bandwidth_gbs": bandwidth,
            "roofline_floor_remeasured": t.floor_remeasured,
            "dram_bandwidth_gbs": config.dram_bandwidth_gbs,
            "llc_bandwidth_gbs": config.llc_bandwidth_gbs,
            "draft_n": t.draft_tokens,
            "draft_accepted_n": t.accepted_tokens,
            "grammar_compile_ms": self.compile_ms,
        })
    }

    /// A token's text (special tokens rendered), for logprobs.
    pub fn piece(&self, token: u32) -> String {
        String::from_utf8_lossy(self.state.tokenizer.token_to_piece(token, true)).into_owned()
    }

    /// A fresh id, unique within the server's life.
    pub fn fresh_id(&self) -> String {
        self.state.next_response_id()
    }

    /// Writes the token counts and TTFT so far into the request's log record.
    fn log_usage(&self, record: Option<&crate::access_log::Handle>) {
        let (prompt, completion, cached) = self.totals();
        let ttft = self
            .choices
            .first()
            .and_then(|c| c.timings.as_ref())
            .and_then(|t| t.ttft_ms());
        crate::access_log::note_usage(record, prompt, cached, completion, ttft);
    }
}

/// Aborts the engine requests it holds when dropped, unless disarmed.
struct AbortGuard {
    state: Arc<ModelState>,
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

/// An engine submission error as the client sees it.
pub fn engine_error(e: EngineError) -> ApiError {
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

/// Compiles the job's grammar on a blocking thread (a large schema takes milliseconds to
/// seconds); returns the constraint and the compile time in ms. A schema or grammar that
/// cannot be compiled, or exceeds the compile limits, is a 400 naming the field — except a
/// lazy grammar (tool calls under `tool_choice: "auto"`), which is a help, not a demand: one
/// that cannot be used leaves the output unconstrained, as it was.
async fn compile(
    state: &Arc<ModelState>,
    s: &crate::structured::Structured,
) -> Result<Option<(Constraint, f64)>, ApiError> {
    let st = state.clone();
    let spec = s.spec.clone();
    let started = Instant::now();
    let compiled = tokio::task::spawn_blocking(move || st.grammars()?.compile(&spec))
        .await
        .map_err(|e| {
            ApiError::invalid(s.param, format!("`{}` could not be compiled: {e}", s.param))
        })?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match (compiled, s.trigger) {
        (Ok(c), None) => Ok(Some((c, ms))),
        (Err(e), None) => Err(ApiError::invalid(
            s.param,
            format!("`{}` cannot be used: {e}", s.param),
        )),
        (Ok(c), Some(trigger)) => Ok(c.after_trigger(trigger).map(|c| (c, ms))),
        (Err(e), Some(_)) => {
            crate::access_log::note_tool_grammar_off(&e.to_string());
            Ok(None)
        }
    }
}

/// Submits the job and answers it through `adapter`, streaming or not; every error is
/// rendered in the adapter's protocol.
pub async fn run<A: Adapter>(state: Arc<ModelState>, job: Job, adapter: A) -> Response {
    let style = adapter.error_style();
    match submit(state, job, adapter).await {
        Ok(r) => r,
        Err(e) => e.render(style),
    }
}

async fn submit<A: Adapter>(
    state: Arc<ModelState>,
    job: Job,
    adapter: A,
) -> Result<Response, ApiError> {
    let ctx = state.engine.info().ctx_len;
    let compiled = match &job.structured {
        Some(s) => compile(&state, s).await?,
        None => None,
    };
    let mut reqs = Vec::with_capacity(job.prompts.len());
    for p in job.prompts {
        let mut r = engine_request(p, &job.common, job.default_max, job.logprobs, ctx)?;
        r.constraint = compiled.as_ref().map(|(c, _)| c.clone());
        r.think_budget = job.reasoning.as_ref().and_then(|x| x.budget.clone());
        reqs.push(r);
    }
    crate::access_log::note_prompt(reqs.iter().map(|r| r.prompt.len()).sum());
    let (tx, rx) = unbounded_channel::<(usize, Event)>();
    let mut guard = AbortGuard {
        state: state.clone(),
        ids: Vec::with_capacity(reqs.len()),
        armed: true,
    };
    let n_prompts = reqs.len();
    for (i, r) in reqs.into_iter().enumerate() {
        let tx = tx.clone();
        let observer = Observer::new(state.metrics.clone(), job.common.n);
        let sink: EventSink = Arc::new(move |e| {
            observer.observe(&e);
            tx.send((i, e)).is_ok()
        });
        let id = state.engine.submit(r, sink).map_err(engine_error)?;
        guard.ids.push(id);
    }
    drop(tx);
    let mut session = Session::new(state, n_prompts, job.common.n);
    session.compile_ms = compiled.map(|(_, ms)| ms);
    if let Some(t) = &job.tools {
        session.has_tools = true;
        for c in &mut session.choices {
            c.parser = Some(t.parser());
        }
    }
    if let Some(r) = &job.reasoning {
        for c in &mut session.choices {
            c.thinking = Some((ReasoningParser::new(r.format, &r.prompt_tail), r.keep_apart));
        }
    }
    if job.common.stream {
        Ok(stream_response(session, adapter, rx, guard).into_response())
    } else {
        collect(session, adapter, rx, guard).await
    }
}

async fn collect<A: Adapter>(
    mut session: Session,
    mut adapter: A,
    mut rx: UnboundedReceiver<(usize, Event)>,
    mut guard: AbortGuard,
) -> Result<Response, ApiError> {
    while !session.done() {
        match rx.recv().await {
            Some((p, ev)) => {
                session.apply(p, ev);
            }
            None => break,
        }
    }
    guard.armed = !session.done() || session.error.is_some();
    session.log_usage(None);
    if let Some(e) = &session.error {
        return Err(ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.clone(),
        ));
    }
    if !session.done() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the engine stopped before the request finished",
        ));
    }
    Ok(axum::Json(adapter.full(&mut session)).into_response())
}

struct StreamState<A> {
    session: Session,
    adapter: A,
    rx: UnboundedReceiver<(usize, Event)>,
    guard: AbortGuard,
    out: VecDeque<Frame>,
    started: bool,
    ended: bool,
    /// The request's log record (the body is polled after the handler returned).
    record: Option<crate::access_log::Handle>,
    /// When the last frame went out (keep-alives follow silences).
    last_sent: tokio::time::Instant,
}

impl<A> Drop for StreamState<A> {
    fn drop(&mut self) {
        if let (false, Some(r)) = (self.ended, &self.record) {
            crate::access_log::note_client_closed(r);
        }
    }
}

fn sse_event(f: Frame) -> SseEvent {
    if f.comment {
        return SseEvent::default().comment(f.data);
    }
    // The name goes first: a client reading line by line knows the event before its data.
    let e = match f.event {
        Some(name) => SseEvent::default().event(name),
        None => SseEvent::default(),
    };
    e.data(f.data)
}

fn stream_response<A: Adapter>(
    session: Session,
    adapter: A,
    rx: UnboundedReceiver<(usize, Event)>,
    guard: AbortGuard,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let st = StreamState {
        session,
        adapter,
        rx,
        guard,
        out: VecDeque::new(),
        started: false,
        ended: false,
        record: crate::access_log::current(),
        last_sent: tokio::time::Instant::now(),
    };
    Sse::new(stream::unfold(st, |mut st| async move {
        loop {
            if !st.started {
                st.started = true;
                st.out.extend(st.adapter.start(&mut st.session));
            }
            if let Some(f) = st.out.pop_front() {
                st.last_sent = tokio::time::Instant::now();
                return Some((Ok(sse_event(f)), st));
            }
            if st.ended {
                return None;
            }
            let quiet_until = st.last_sent + st.session.state.sse_keepalive;
            let next = match tokio::time::timeout_at(quiet_until, st.rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    st.out.extend(st.adapter.keepalive());
                    continue;
                }
            };
            match next {
                Some((p, ev)) => {
                    if let Some(u) = st.session.apply(p, ev) {
                        if !u.deltas.is_empty() || u.finished {
                            let last = st.session.done();
                            st.out.extend(st.adapter.update(&mut st.session, u, last));
                        }
                    }
                    if st.session.done() {
                        st.session.log_usage(st.record.as_ref());
                    }
                    if let Some(e) = st.session.error.clone() {
                        let err = ApiError::new(
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            "internal_error",
                            e,
                        );
                        st.out.extend(st.adapter.stream_error(&err));
                        st.ended = true;
                    } else if st.session.done() {
                        st.out.extend(st.adapter.end(&mut st.session));
                        st.guard.armed = false;
                        st.ended = true;
                    }
                }
                None => {
                    // The engine went away (shutdown) before every choice ended.
                    let err = ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "shutting_down",
                        "the engine stopped before the request finished",
                    );
                    st.out.extend(st.adapter.stream_error(&err));
                    st.ended = true;
                }
            }
        }
    }))
}
