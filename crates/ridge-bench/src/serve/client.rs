//! One streaming request against an OpenAI-compatible server, timed chunk by chunk.
//!
//! The request asks for exactly `max_tokens` tokens (`ignore_eos: true`) so that every request
//! of a run produces the length the benchmark chose, and for a final `usage` chunk
//! (`stream_options.include_usage`) so that output tokens are *counted by the server* rather
//! than inferred from how many chunks arrived — servers may pack several tokens into one chunk,
//! or send chunks with no text. Nothing here depends on a particular server: only the
//! documented OpenAI streaming shape (`data: {json}` events, `[DONE]`).
//!
//! Timestamps are taken when a network read returns, before any parsing, so JSON work is not
//! billed to the server. Events that arrive in the same read share its timestamp, as they
//! would for any client.

use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;

use super::dataset::{truncate, Prompt};
use super::metrics::RequestRecord;

/// Where and how requests are sent.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Full URL (`…/v1/completions` or `…/v1/chat/completions`).
    pub url: String,
    /// Chat format (messages in, `delta.content` out) instead of completions.
    pub chat: bool,
    /// The `model` field, if any.
    pub model: Option<String>,
}

impl Endpoint {
    /// The JSON body of a streaming request for `p`, asking for `max_tokens` tokens.
    pub fn body(&self, p: &Prompt, max_tokens: usize) -> Value {
        let mut b = serde_json::json!({
            "max_tokens": max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
            "ignore_eos": true,
            "temperature": 0.0,
        });
        if self.chat {
            b["messages"] = serde_json::json!([{"role": "user", "content": p.text}]);
        } else {
            b["prompt"] = Value::String(p.text.clone());
        }
        if let Some(m) = &self.model {
            b["model"] = Value::String(m.clone());
        }
        b
    }
}

/// Splits a Server-Sent Events byte stream into the `data` payloads of its events.
///
/// Handles `\n` and `\r\n` line ends, `data:` with or without the space, several `data` lines
/// per event (joined with `\n`), comment lines, and events split across network reads.
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the payloads of the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(nl) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let mut line = &self.buf[start..start + nl];
            start += nl + 1;
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            if line.is_empty() {
                if let Some(d) = self.data.take() {
                    out.push(d);
                }
            } else if let Some(rest) = line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                let s = String::from_utf8_lossy(rest);
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(&s);
                    }
                    None => self.data = Some(s.into_owned()),
                }
            }
            // Other fields (event:, id:, retry:) and comments (":…") carry nothing we use.
        }
        self.buf.drain(..start);
        out
    }

    /// The payload of a last event the stream ended without a blank line after (the end of
    /// the stream ends the line and the event).
    pub fn finish(&mut self) -> Option<String> {
        self.push(b"\n\n").pop()
    }
}

/// What one event payload says.
#[derive(Debug, Default, PartialEq)]
pub struct Event {
    /// Generated text, if the event carries any (non-empty).
    pub text: Option<String>,
    /// `usage.completion_tokens`, if present.
    pub completion_tokens: Option<usize>,
    /// `usage.prompt_tokens`, if present.
    pub prompt_tokens: Option<usize>,
    /// A `timings` object (the server's own clock), if present.
    pub timings: Option<Value>,
    /// `[DONE]`.
    pub done: bool,
    /// An `error` object or unparseable payload.
    pub error: Option<String>,
}

/// Interprets one `data` payload of a completions (`chat = false`) or chat stream.
pub fn parse_event(payload: &str, chat: bool) -> Event {
    let payload = payload.trim();
    if payload == "[DONE]" {
        return Event {
            done: true,
            ..Event::default()
        };
    }
    let v: Value = match serde_json::from_str(payload) {
        Ok(v) => v,
        Err(e) => {
            return Event {
                error: Some(format!("bad event `{}`: {e}", truncate(payload, 120))),
                ..Event::default()
            }
        }
    };
    let mut ev = Event::default();
    if let Some(err) = v.get("error") {
        ev.error = Some(truncate(&err.to_string(), 300));
        return ev;
    }
    if let Some(choice) = v.get("choices").and_then(|c| c.get(0)) {
        let text = if chat {
            choice.get("delta").and_then(|d| d.get("content"))
        } else {
            choice.get("text")
        };
        ev.text = text
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
    }
    ev.timings = v.get("timings").filter(|t| t.is_object()).cloned();
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).map(|x| x as usize);
        ev.completion_tokens = n("completion_tokens");
        ev.prompt_tokens = n("prompt_tokens");
    }
    ev
}

/// An error with its sources (`reqwest` keeps the useful part — "connection refused",
/// "connection reset" — in the source chain).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Sends `p` and times its stream. `t0` is the start of the run (for `start_s`). Never fails:
/// errors become an unsuccessful record.
pub async fn send(
    client: &reqwest::Client,
    ep: &Endpoint,
    p: &Prompt,
    t0: Instant,
) -> RequestRecord {
    let mut rec = RequestRecord {
        input_len: p.input_len,
        requested_output_len: p.output_len,
        ..RequestRecord::default()
    };
    let body = ep.body(p, p.output_len);
    let st = Instant::now();
    rec.start_s = st.duration_since(t0).as_secs_f64();
    let fail = |mut r: RequestRecord, e: String| {
        r.success = false;
        r.error = Some(e);
        r
    };
    let resp = match client.post(&ep.url).json(&body).send().await {
        Ok(r) => r,
        Err(e) => return fail(rec, format!("request failed: {}", chain(&e))),
    };
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return fail(rec, format!("HTTP {status}: {}", truncate(&text, 300)));
    }
    let mut stream = resp.bytes_stream();
    let mut sse = SseParser::default();
    let mut last: Option<Instant> = None;
    let mut usage: Option<usize> = None;
    let mut handle = |rec: &mut RequestRecord, payload: &str, at: Instant| -> Option<String> {
        let ev = parse_event(payload, ep.chat);
        if let Some(e) = ev.error {
            return Some(e);
        }
        if let Some(t) = ev.text {
            match last {
                None => rec.ttft_s = at.duration_since(st).as_secs_f64(),
                Some(prev) => rec.itl_s.push(at.duration_since(prev).as_secs_f64()),
            }
            last = Some(at);
            rec.chunks += 1;
            rec.text.push_str(&t);
        }
        if ev.completion_tokens.is_some() {
            usage = ev.completion_tokens;
        }
        if ev.prompt_tokens.is_some() {
            rec.server_prompt_tokens = ev.prompt_tokens;
        }
        if ev.timings.is_some() {
            rec.server_timings = ev.timings;
        }
        None
    };
    while let Some(chunk) = stream.next().await {
        let at = Instant::now();
        let bytes = match chunk {
            Ok(b) => b,
            Err(e) => return fail(rec, format!("stream broke: {}", chain(&e))),
        };
        for payload in sse.push(&bytes) {
            if let Some(e) = handle(&mut rec, &payload, at) {
                return fail(rec, e);
            }
        }
    }
    if let Some(payload) = sse.finish() {
        if let Some(e) = handle(&mut rec, &payload, Instant::now()) {
            return fail(rec, e);
        }
    }
    let Some(last) = last else {
        return fail(rec, "the stream carried no text".into());
    };
    rec.e2el_s = last.duration_since(st).as_secs_f64();
    rec.success = true;
    if let Some(n) = usage {
        rec.output_len = n;
        rec.output_len_source = "usage";
    }
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_across_reads() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: {\"a\"").is_empty());
        assert_eq!(
            p.push(b":1}\n\ndata:x\r\n\r\n: comment\n"),
            vec!["{\"a\":1}".to_string(), "x".to_string()]
        );
        // Two data lines in one event join with a newline; `event:` lines are ignored.
        assert_eq!(
            p.push(b"event: message\ndata: a\ndata: b\n\n"),
            vec!["a\nb".to_string()]
        );
        assert_eq!(p.push(b"data: [DONE]"), Vec::<String>::new());
        assert_eq!(p.finish(), Some("[DONE]".to_string()));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn events_of_both_formats() {
        let e = parse_event(r#"{"choices":[{"text":" hi","index":0}]}"#, false);
        assert_eq!(e.text.as_deref(), Some(" hi"));
        let e = parse_event(r#"{"choices":[{"delta":{"content":"yo"}}]}"#, true);
        assert_eq!(e.text.as_deref(), Some("yo"));
        // Empty text (a role-only chat delta, a finish chunk) carries no text.
        assert_eq!(
            parse_event(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#, true).text,
            None
        );
        assert_eq!(
            parse_event(
                r#"{"choices":[{"text":"","finish_reason":"length"}]}"#,
                false
            )
            .text,
            None
        );
        let e = parse_event(
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":32}}"#,
            false,
        );
        assert_eq!((e.completion_tokens, e.prompt_tokens), (Some(32), Some(7)));
        let e = parse_event(r#"{"choices":[],"timings":{"tpot_ms":11.5}}"#, false);
        assert_eq!(e.timings.unwrap()["tpot_ms"], 11.5);
        assert!(parse_event("[DONE]", false).done);
        assert!(parse_event(r#"{"error":{"message":"boom"}}"#, false)
            .error
            .unwrap()
            .contains("boom"));
        assert!(parse_event("{nope", false).error.is_some());
    }

    #[test]
    fn request_body_asks_for_exact_streamed_length() {
        let ep = Endpoint {
            url: "http://x/v1/completions".into(),
            chat: false,
            model: Some("m".into()),
        };
        let p = Prompt {
            text: "hello".into(),
            input_len: 1,
            output_len: 9,
        };
        let b = ep.body(&p, 9);
        assert_eq!(b["prompt"], "hello");
        assert_eq!(b["max_tokens"], 9);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["model"], "m");
        let chat = Endpoint {
            chat: true,
            model: None,
            ..ep
        };
        let b = chat.body(&p, 9);
        assert_eq!(b["messages"][0]["content"], "hello");
        assert!(b.get("model").is_none() && b.get("prompt").is_none());
    }
}
