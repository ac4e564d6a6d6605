//! The request log: one line per request, as vLLM's and llama-server's access logs have it —
//! method, path, the model that served it (and the name it was asked by, when they differ),
//! status, prompt / cached / completion tokens, TTFT, duration, and for an error its message —
//! in text or JSON (`--log-format`). A user whose client fails sees why in the server's log.
//!
//! The line is written when the answer is done: for a JSON answer when the handler returns, for
//! a stream when its body ends or the client drops it (the counts are the ones reached). What a
//! handler learns along the way — the model, what the request was changed to be served (a
//! model name substituted, `max_tokens` clamped to the room left, hosted tools dropped), the
//! usage — it writes into the request's [`Record`], which the middleware creates and holds in a
//! task-local; the stream keeps its own handle, since its body is polled after the handler
//! returned. The same notes go back to the client as `x-ridge-*` response headers, so a client
//! can tell what the server changed without reading its log.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{json, Value};

/// How request lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `key=value` text.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
    /// No request lines.
    Off,
}

impl LogFormat {
    /// Parses `text`, `json` or `off`.
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            "off" => Some(LogFormat::Off),
            _ => None,
        }
    }
}

/// What one request did, filled in while it is served.
#[derive(Default, Debug, Clone)]
pub struct Record {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// The model that served it.
    pub model: Option<String>,
    /// The name the request asked for, when another model served it.
    pub requested_model: Option<String>,
    /// HTTP status.
    pub status: u16,
    /// Prompt tokens (all prompts of the request).
    pub prompt_tokens: Option<usize>,
    /// Prompt tokens read from the prefix cache.
    pub cached_tokens: Option<usize>,
    /// Generated tokens.
    pub completion_tokens: Option<usize>,
    /// Time to the first token, ms.
    pub ttft_ms: Option<f64>,
    /// The error message answered, if any.
    pub error: Option<String>,
    /// `max_tokens` as asked and as served, when it was clamped to the room left.
    pub max_tokens_clamped: Option<(usize, usize)>,
    /// Tools the request offered that this server cannot run and left out of the prompt.
    pub dropped_tools: Vec<String>,
    /// The client closed a stream before it ended (the request was aborted).
    pub client_closed: bool,
    /// Why the calls of a `tool_choice: "auto"` request went unconstrained (their grammar
    /// could not be used).
    pub tool_grammar_off: Option<String>,
}

/// A request's record, shared by the middleware, its handler and its stream.
pub type Handle = Arc<Mutex<Record>>;

tokio::task_local! {
    static CURRENT: Handle;
}

/// The current request's record (inside a handler), to keep for a stream.
pub fn current() -> Option<Handle> {
    CURRENT.try_with(Arc::clone).ok()
}

fn with(f: impl FnOnce(&mut Record)) {
    let _ = CURRENT.try_with(|h| f(&mut lock(h)));
}

fn lock(h: &Handle) -> std::sync::MutexGuard<'_, Record> {
    // Nothing panics while holding it; a poisoned record is still a record.
    h.lock().unwrap_or_else(|p| p.into_inner())
}

/// Notes the model serving the request.
pub fn note_model(name: &str) {
    with(|r| r.model = Some(name.to_string()));
}

/// Notes that `asked` was served by the model `served`.
pub fn note_model_substituted(asked: &str, served: &str) {
    with(|r| {
        r.requested_model = Some(asked.to_string());
        r.model = Some(served.to_string());
    });
}

/// Notes the error answered.
pub fn note_error(message: &str) {
    with(|r| r.error = Some(message.to_string()));
}

/// Notes that `max_tokens` was clamped from `asked` to `served`.
pub fn note_clamped(asked: usize, served: usize) {
    with(|r| r.max_tokens_clamped = Some((asked, served)));
}

/// Notes tools left out of the prompt.
pub fn note_dropped_tool(kind: &str) {
    with(|r| {
        if !r.dropped_tools.iter().any(|t| t == kind) {
            r.dropped_tools.push(kind.to_string());
        }
    });
}

/// Notes that the tool-call grammar of an `auto` request could not be used, and why.
pub fn note_tool_grammar_off(reason: &str) {
    with(|r| r.tool_grammar_off = Some(reason.to_string()));
}

/// Notes the prompt tokens of a request as it is submitted (its final counts replace them).
pub fn note_prompt(prompt: usize) {
    with(|r| r.prompt_tokens = Some(prompt));
}

/// Notes that the client closed the stream of the request `h` before it ended.
pub fn note_client_closed(h: &Handle) {
    lock(h).client_closed = true;
}

/// Notes a request's token counts and TTFT (on `h`, or the current record).
pub fn note_usage(
    h: Option<&Handle>,
    prompt: usize,
    cached: usize,
    completion: usize,
    ttft_ms: Option<f64>,
) {
    let set = |r: &mut Record| {
        r.prompt_tokens = Some(prompt);
        r.cached_tokens = Some(cached);
        r.completion_tokens = Some(completion);
        r.ttft_ms = ttft_ms;
    };
    match h {
        Some(h) => set(&mut lock(h)),
        None => with(set),
    }
}

impl Record {
    /// A successful poll of a monitoring path.
    fn is_poll(&self) -> bool {
        self.method == "GET" && self.status < 400 && POLLED.contains(&self.path.as_str())
    }

    /// The line, in `format`.
    pub fn line(&self, format: LogFormat, duration_ms: f64) -> Option<String> {
        match format {
            LogFormat::Off => None,
            LogFormat::Json => Some(self.json(duration_ms).to_string()),
            LogFormat::Text => Some(self.text(duration_ms)),
        }
    }

    fn json(&self, duration_ms: f64) -> Value {
        let mut v = json!({
            "time": humantime_utc(),
            "method": self.method, "path": self.path, "status": self.status,
            "model": self.model, "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens, "completion_tokens": self.completion_tokens,
            "ttft_ms": self.ttft_ms.map(round1), "duration_ms": round1(duration_ms),
        });
        if let Some(m) = &self.requested_model {
            v["requested_model"] = json!(m);
        }
        if let Some((a, s)) = self.max_tokens_clamped {
            v["max_tokens_requested"] = json!(a);
            v["max_tokens_served"] = json!(s);
        }
        if !self.dropped_tools.is_empty() {
            v["dropped_tools"] = json!(self.dropped_tools);
        }
        if self.client_closed {
            v["client_closed"] = json!(true);
        }
        if let Some(why) = &self.tool_grammar_off {
            v["tool_grammar_off"] = json!(why);
        }
        if let Some(e) = &self.error {
            v["error"] = json!(e);
        }
        v
    }

    fn text(&self, duration_ms: f64) -> String {
        use std::fmt::Write;
        let mut s = format!(
            "ridge serve: {} {} {} model={}",
            self.method,
            self.path,
            self.status,
            self.model.as_deref().unwrap_or("-")
        );
        if let Some(m) = &self.requested_model {
            let _ = write!(s, " requested={m:?}");
        }
        if let Some(p) = self.prompt_tokens {
            let _ = write!(
                s,
                " prompt={p} cached={} completion={}",
                self.cached_tokens.unwrap_or(0),
                self.completion_tokens.unwrap_or(0)
            );
        }
        if let Some(t) = self.ttft_ms {
            let _ = write!(s, " ttft_ms={t:.1}");
        }
        let _ = write!(s, " duration_ms={duration_ms:.1}");
        if let Some((a, b)) = self.max_tokens_clamped {
            let _ = write!(s, " max_tokens={a}->{b}");
        }
        if !self.dropped_tools.is_empty() {
            let _ = write!(s, " dropped_tools={}", self.dropped_tools.join(","));
        }
        if self.client_closed {
            s.push_str(" client_closed");
        }
        if let Some(why) = &self.tool_grammar_off {
            let _ = write!(s, " tool_grammar_off={why:?}");
        }
        if let Some(e) = &self.error {
            let _ = write!(s, " error={e:?}");
        }
        s
    }

    /// The `x-ridge-*` headers that tell a client what the server changed.
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let (Some(asked), Some(m)) = (&self.requested_model, &self.model) {
            h.push(("x-ridge-model", m.clone()));
            h.push(("x-ridge-requested-model", asked.clone()));
        }
        if let Some((a, s)) = self.max_tokens_clamped {
            h.push(("x-ridge-max-tokens-clamped", format!("{a} -> {s}")));
        }
        if !self.dropped_tools.is_empty() {
            h.push(("x-ridge-dropped-tools", self.dropped_tools.join(", ")));
        }
        h
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The time as RFC 3339 in UTC, to the millisecond.
fn humantime_utc() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs() as i64, now.subsec_millis())
}

/// Unix time `secs` + `millis` as RFC 3339 in UTC.
fn rfc3339(secs: i64, millis: u32) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = ridge_tokenizer::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        millis
    )
}

/// Writes the line when dropped: when the answer is written, at the end of a stream's body,
/// or when the client left — before its answer was ready too (its request is aborted then,
/// and the line says `client_closed` with nginx's status 499).
struct LogOnDrop {
    record: Handle,
    format: LogFormat,
    started: Instant,
    /// The handler returned an answer.
    answered: bool,
}

impl Drop for LogOnDrop {
    fn drop(&mut self) {
        let ms = self.started.elapsed().as_secs_f64() * 1e3;
        let mut r = lock(&self.record);
        if !self.answered {
            r.client_closed = true;
            r.status = 499;
        }
        if r.is_poll() {
            return;
        }
        if let Some(line) = r.line(self.format, ms) {
            eprintln!("{line}");
        }
    }
}

/// Paths that monitors and the chat page poll every few seconds: a successful poll is not
/// logged (it would bury the requests), a failed one is.
const POLLED: [&str; 5] = [
    "/health",
    "/metrics",
    "/state",
    "/get_load",
    "/health_generate",
];

/// The middleware: a record per request, the `x-ridge-*` headers on its answer, and its
/// line once the answer is done.
pub async fn log_requests(State(format): State<LogFormat>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let record: Handle = Arc::new(Mutex::new(Record {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        ..Record::default()
    }));
    let mut guard = LogOnDrop {
        record: record.clone(),
        format,
        started,
        answered: false,
    };
    let mut resp = CURRENT.scope(record.clone(), next.run(req)).await;
    guard.answered = true;
    let headers = {
        let mut r = lock(&record);
        r.status = resp.status().as_u16();
        r.headers()
    };
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(HeaderName::from_static(name), v);
        }
    }
    let streaming = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streaming {
        drop(guard);
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _keep = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_lines_carry_every_field() {
        let r = Record {
            method: "POST".into(),
            path: "/v1/messages".into(),
            model: Some("qwen".into()),
            requested_model: Some("claude-sonnet-4-5".into()),
            status: 200,
            prompt_tokens: Some(18_800),
            cached_tokens: Some(18_000),
            completion_tokens: Some(42),
            ttft_ms: Some(123.44),
            error: None,
            max_tokens_clamped: Some((32_000, 13_968)),
            dropped_tools: vec!["web_search".into()],
            client_closed: false,
            tool_grammar_off: Some("too big".into()),
        };
        assert_eq!(
            r.line(LogFormat::Text, 456.78).unwrap(),
            "ridge serve: POST /v1/messages 200 model=qwen requested=\"claude-sonnet-4-5\" \
             prompt=18800 cached=18000 completion=42 ttft_ms=123.4 duration_ms=456.8 \
             max_tokens=32000->13968 dropped_tools=web_search tool_grammar_off=\"too big\""
        );
        let v: Value = serde_json::from_str(&r.line(LogFormat::Json, 456.78).unwrap()).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["requested_model"], "claude-sonnet-4-5");
        assert_eq!(v["prompt_tokens"], 18_800);
        assert_eq!(v["ttft_ms"], 123.4);
        assert_eq!(v["max_tokens_served"], 13_968);
        assert_eq!(v["dropped_tools"], json!(["web_search"]));
        assert_eq!(v["tool_grammar_off"], "too big");
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(r.line(LogFormat::Off, 1.0), None);
        let e = Record {
            status: 400,
            error: Some("messages: bad".into()),
            ..Record::default()
        };
        assert!(e
            .line(LogFormat::Text, 1.0)
            .unwrap()
            .ends_with("duration_ms=1.0 error=\"messages: bad\""));
    }

    #[test]
    fn successful_polls_are_quiet_and_failed_ones_are_not() {
        let poll = |path: &str, status: u16| Record {
            method: "GET".into(),
            path: path.into(),
            status,
            ..Record::default()
        };
        assert!(poll("/metrics", 200).is_poll());
        assert!(poll("/state", 200).is_poll());
        assert!(!poll("/metrics", 401).is_poll());
        assert!(!poll("/v1/models", 200).is_poll());
        let post = Record {
            method: "POST".into(),
            ..poll("/health", 200)
        };
        assert!(!post.is_poll());
    }

    #[test]
    fn civil_time_is_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 7), "2000-02-29T00:00:00.007Z");
        assert_eq!(rfc3339(1_796_595_822, 999), "2026-12-06T22:23:42.999Z");
        assert_eq!(humantime_utc().len(), 24);
    }
}
