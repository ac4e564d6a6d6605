//! Coding agents' requests, as Claude Code and Codex send them (the captured bodies in
//! `crates/ridge-server/tests/data/agents/`, their texts trimmed to keep the test short), on
//! a real `ridge serve` of Qwen2.5-Coder 0.5B (its template calls tools): the model name they ask for is answered by the one served model, a
//! `max_tokens` past the room left is clamped and said so in a header, hosted tools are left
//! out and named in a header, streams open before the prompt is prefilled and keep alive
//! through it, and every request is one line in the server's log.
//!
//! The real clients themselves (`claude -p`, `codex exec`) are driven by
//! `tools/agents/run_agents.sh`, which installs them from npm; the suite does not.

mod common;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use common::server::Server;
use serde_json::{json, Value};

fn fixture(name: &str) -> Value {
    let p = common::repo()
        .join("crates/ridge-server/tests/data/agents")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Claude Code's first request, its texts cut (a prompt of about 2k tokens).
fn claude_code_body() -> Value {
    let mut b = fixture("claude_code_messages.json");
    for blk in b["system"].as_array_mut().unwrap() {
        let t = cut(blk["text"].as_str().unwrap(), 1200);
        blk["text"] = json!(t);
    }
    for m in b["messages"].as_array_mut().unwrap() {
        match &mut m["content"] {
            Value::String(s) => *s = cut(s, 800),
            Value::Array(blocks) => {
                for blk in blocks {
                    if let Some(t) = blk["text"].as_str() {
                        blk["text"] = json!(cut(t, 800));
                    }
                }
            }
            _ => {}
        }
    }
    let tools: Vec<Value> = b["tools"].as_array().unwrap()[..3]
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t["description"] = json!(cut(t["description"].as_str().unwrap(), 200));
            t
        })
        .collect();
    b["tools"] = json!(tools);
    b
}

/// Codex's first request, trimmed the same way: two functions, its namespace, its web search.
fn codex_body() -> Value {
    let mut b = fixture("codex_responses.json");
    for item in b["input"].as_array_mut().unwrap() {
        for part in item["content"].as_array_mut().unwrap() {
            let t = cut(part["text"].as_str().unwrap(), 600);
            part["text"] = json!(t);
        }
    }
    let keep: Vec<Value> = b["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            matches!(t["name"].as_str(), Some("exec_command" | "multi_agent_v1"))
                || t["type"] == "web_search"
        })
        .map(|t| {
            let mut t = t.clone();
            if let Some(d) = t["description"].as_str() {
                t["description"] = json!(cut(d, 150));
            }
            if let Some(inner) = t["tools"].as_array_mut() {
                for f in inner {
                    let d = cut(f["description"].as_str().unwrap_or(""), 100);
                    f["description"] = json!(d);
                }
            }
            t
        })
        .collect();
    assert_eq!(keep.len(), 3);
    b["tools"] = json!(keep);
    b
}

/// SSE frames as (event name, data) with comments as ("#", text), read until `stop` says so
/// (the response is dropped then, which aborts the request).
fn frames_until(
    resp: reqwest::blocking::Response,
    stop: impl Fn(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut event = String::new();
    for line in BufReader::new(resp).lines() {
        let line = line.unwrap();
        if let Some(c) = line.strip_prefix(':') {
            out.push(("#".to_string(), json!(c.trim())));
        } else if let Some(e) = line.strip_prefix("event: ") {
            event = e.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap_or(json!(d));
            let name = std::mem::take(&mut event);
            let done = stop(&name, &v);
            out.push((name, v));
            if done {
                break;
            }
        }
    }
    out
}

fn header(r: &reqwest::blocking::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

fn served_name_and_ctx(s: &Server) -> (String, usize) {
    let (_, text) = s.get("/model_info");
    let v: Value = serde_json::from_str(&text).unwrap();
    let (_, models) = s.get("/v1/models");
    let m: Value = serde_json::from_str(&models).unwrap();
    (
        m["data"][0]["id"].as_str().unwrap().to_string(),
        v["max_model_len"].as_u64().unwrap() as usize,
    )
}

/// The first server log line that `matches` (a line is written when its answer ends).
fn wait_line(s: &Server, what: &str, matches: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(l) = s.stderr.lock().unwrap().iter().find(|l| matches(l)) {
            return l.clone();
        }
        assert!(Instant::now() < deadline, "no log line: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The text log line of a POST that contains `needle`.
fn log_line(s: &Server, needle: &str) -> String {
    wait_line(s, needle, |l| {
        l.starts_with("ridge serve: POST") && l.contains(needle)
    })
}

#[test]
fn claude_code_and_codex_requests_are_served_unchanged() {
    // A keep-alive every 20 ms: prefilling a prompt of a thousand tokens takes far longer.
    let s = Server::start_model(&common::qwen2_0_5b(), &["--sse-keepalive", "0.02"]);
    let (served, ctx) = served_name_and_ctx(&s);
    let c = Server::client();

    // Claude Code: `claude-opus-4-8`, a system turn inside `messages`, max_tokens 64000.
    let mut body = claude_code_body();
    assert_eq!(body["messages"][1]["role"], "system");
    // Greedy, so the run repeats: at Claude Code's default temperature an answer that is held
    // back whole (it might be a call) sometimes ends before the client hangs up.
    body["temperature"] = json!(0);
    let (code, counted) = s.post("/v1/messages/count_tokens", &body);
    assert_eq!(code, 200, "{counted}");
    let input = counted["input_tokens"].as_u64().unwrap() as usize;
    let r = c
        .post(s.url("/v1/messages?beta=true"))
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            "claude-code-20250219,context-management-2025-06-27",
        )
        .header("x-api-key", "unused")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        header(&r, "x-ridge-model").as_deref(),
        Some(served.as_str())
    );
    assert_eq!(
        header(&r, "x-ridge-requested-model").as_deref(),
        Some("claude-opus-4-8")
    );
    let room = ctx - input;
    assert_eq!(
        header(&r, "x-ridge-max-tokens-clamped"),
        Some(format!("64000 -> {room}"))
    );
    let frames = frames_until(r, |name, _| name == "content_block_delta");
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[0], "message_start", "{names:?}");
    assert_eq!(frames[0].1["message"]["model"], served);
    assert_eq!(frames[0].1["message"]["usage"]["input_tokens"], input);
    let first_block = names
        .iter()
        .position(|n| *n == "content_block_start")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert!(
        names[1..first_block].contains(&"ping"),
        "pings while the prompt is prefilled: {names:?}"
    );
    assert!(
        !names.contains(&"#"),
        "Anthropic keeps alive with ping events"
    );
    let line = log_line(&s, &format!("/v1/messages 200 model={served}"));
    assert!(
        line.contains("requested=\"claude-opus-4-8\"")
            && line.contains(&format!("prompt={input}"))
            && line.contains(&format!("max_tokens=64000->{room}"))
            && line.ends_with("client_closed"),
        "{line}"
    );

    // Codex: a namespace tool, a hosted web search, `store: false`, `include`, …
    let body = codex_body();
    let r = c
        .post(s.url("/v1/responses"))
        .header("accept", "text/event-stream")
        .header("originator", "codex_exec")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        header(&r, "x-ridge-dropped-tools").as_deref(),
        Some("web_search")
    );
    let frames = frames_until(r, |name, _| {
        name == "response.output_item.added" || name == "response.completed"
    });
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..2],
        ["response.created", "response.in_progress"],
        "{names:?}"
    );
    assert_eq!(frames[0].1["response"]["status"], "in_progress");
    assert_eq!(frames[0].1["response"]["store"], false);
    // Keep-alives are `response.in_progress` events (Codex times idleness by events).
    assert!(
        names[2..].contains(&"response.in_progress") && !names.contains(&"#"),
        "keep-alive events while the prompt is prefilled: {names:?}"
    );
    // The first carries the echoed tools; keep-alives leave them out (they repeat every few
    // seconds).
    assert!(!frames[1].1["response"]["tools"]
        .as_array()
        .unwrap()
        .is_empty());
    for (name, v) in &frames[2..] {
        if name == "response.in_progress" {
            assert_eq!(v["response"]["tools"], json!([]), "{v}");
            assert_eq!(v["response"]["status"], "in_progress", "{v}");
        }
    }
    let line = log_line(&s, "/v1/responses 200");
    assert!(
        line.contains("dropped_tools=web_search") && line.contains("requested=\"qwen\""),
        "{line}"
    );

    // A chat stream opens with the role chunk, before any text.
    let r = c
        .post(s.url("/v1/chat/completions"))
        .json(&json!({"model": "gpt-5", "stream": true, "max_tokens": 4,
                      "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .unwrap();
    let frames = frames_until(r, |_, v| v == "[DONE]");
    let chunks: Vec<&Value> = frames
        .iter()
        .filter(|(n, v)| n.is_empty() && v.is_object())
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(chunks[1..]
        .iter()
        .all(|c| c["choices"][0]["delta"].get("role").is_none()));

    // A bad body is a 4xx in the log, with its message.
    let (code, _) = s.post("/v1/messages", &json!({"messages": "hi", "max_tokens": 1}));
    assert_eq!(code, 400);
    let line = log_line(&s, "/v1/messages 400");
    assert!(
        line.contains("error=\"") && line.contains("messages"),
        "{line}"
    );
}

#[test]
fn json_log_lines_carry_the_same_fields() {
    let s = Server::start(&["--log-format", "json"]);
    let (code, _) = s.post(
        "/v1/completions",
        &json!({"model": "davinci", "prompt": "Hello", "max_tokens": 3}),
    );
    assert_eq!(code, 200);
    let line = wait_line(&s, "a JSON line", |l| {
        l.starts_with('{') && l.contains("/v1/completions")
    });
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["method"], "POST");
    assert_eq!(v["status"], 200);
    assert_eq!(v["requested_model"], "davinci");
    assert_eq!(v["completion_tokens"], 3);
    assert!(v["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(v["ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(v["duration_ms"].as_f64().unwrap() >= v["ttft_ms"].as_f64().unwrap());
    // A client that gives up on a JSON answer before it is ready: status 499, client_closed.
    let quick = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let r = quick
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": "Hello", "max_tokens": 1000, "ignore_eos": true}))
        .send();
    assert!(
        r.is_err(),
        "the request should outlast the client's patience"
    );
    let line = wait_line(&s, "the abandoned request", |l| {
        l.contains("\"status\":499")
    });
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["client_closed"], true);
    assert_eq!(v["path"], "/v1/completions");
}

#[test]
fn a_restarted_server_reads_the_agent_prompt_back_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let prompt: String = (0..500).map(|i| format!("tool{i} ")).collect();
    let body = json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 3});
    let ask = |s: &Server| {
        let (code, v) = s.post("/v1/completions", &body);
        assert_eq!(code, 200, "{v}");
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        let n = v["usage"]["prompt_tokens"].as_u64().unwrap();
        (v["choices"][0]["logprobs"].clone(), cached, n)
    };
    let s = Server::start(&["--prefix-cache-dir", d]);
    let (cold, cached, n) = ask(&s);
    assert_eq!(cached, 0);
    let (_, state) = s.get("/state");
    let st: Value = serde_json::from_str(&state).unwrap();
    let full = (n - 1) / 16 * 16;
    assert!(st["kv_disk_blocks"].as_u64().unwrap() >= full / 16, "{st}");
    drop(s);
    // A new process: nothing in memory, every full block before the last token on disk.
    let s = Server::start(&["--prefix-cache-dir", d]);
    let (again, cached, _) = ask(&s);
    assert_eq!(cached, full);
    assert_eq!(again, cold, "the same tokens and log-probabilities");
    let (_, state) = s.get("/state");
    let st: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(st["kv_disk_hits"].as_u64().unwrap(), full / 16, "{st}");
    drop(s);
    // Bad settings are one line.
    let out = common::run(&["serve", "--prefix-cache-dir", d, "--no-prefix-caching"]);
    common::assert_clean_failure(&out, "--prefix-cache-dir");
}
