//! The protocols beside Chat Completions, end to end on a real `ridge serve`: the official
//! `anthropic` SDK (Messages: answers, streams, stop sequences, tools, count_tokens, errors)
//! and the official `openai` SDK's Responses API (store, continuation, streams, `parse` with
//! Pydantic, function calls) on Qwen2.5-Coder 1.5B; and on SmolLM2 the wire shapes clients
//! without an SDK see — Anthropic's named SSE events with `ping`, `x-api-key`, and every bad
//! body answered with the protocol's own 4xx error object.

mod common;

use std::io::{BufRead, BufReader};

use common::server::{sse, Server};
use common::*;
use serde_json::{json, Value};

fn served_name(s: &Server) -> String {
    let (_, text) = s.get("/v1/models");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["data"][0]["id"].as_str().unwrap().to_string()
}

#[test]
fn the_official_sdks_speak_messages_and_responses() {
    let s = Server::start_model(&qwen2_1_5b(), &[]);
    let name = served_name(&s);
    let out = python_check("anthropic_sdk_check.py", &[s.base.as_ref(), name.as_ref()]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["answer"].as_str().unwrap().contains('4'), "{v}");
    let out = python_check("responses_sdk_check.py", &[s.base.as_ref(), name.as_ref()]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["parsed"]["name"], "Paris", "{v}");
}

/// (event name, data) of every SSE frame.
fn named_events(resp: reqwest::blocking::Response) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut event = String::new();
    for line in BufReader::new(resp).lines() {
        let line = line.unwrap();
        if let Some(e) = line.strip_prefix("event: ") {
            event = e.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((std::mem::take(&mut event), serde_json::from_str(d).unwrap()));
        }
    }
    out
}

#[test]
fn anthropic_streams_are_named_events_and_keys_go_in_x_api_key() {
    let s = Server::start(&["--api-key", "sekret"]);
    let body = json!({"max_tokens": 8, "stream": true, "temperature": 0,
                      "messages": [{"role": "user", "content": "Hello"}]});
    // No key, a wrong key: Anthropic's 401 object.
    for key in [None, Some("wrong")] {
        let mut req = Server::client().post(s.url("/v1/messages")).json(&body);
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        let r = req.send().unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let v: Value = r.json().unwrap();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    }
    // The OpenAI routes take the same key in x-api-key or as a bearer token.
    let r = Server::client()
        .get(s.url("/v1/models"))
        .header("x-api-key", "sekret")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = Server::client()
        .post(s.url("/v1/messages"))
        .header("x-api-key", "sekret")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let events = named_events(r);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..3],
        ["message_start", "content_block_start", "ping"],
        "{names:?}"
    );
    assert_eq!(
        &names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    for (n, d) in &events {
        assert_eq!(
            d["type"],
            n.as_str(),
            "the data's type names its event: {d}"
        );
    }
    let start = &events[0].1["message"];
    assert!(start["id"].as_str().unwrap().starts_with("msg_"), "{start}");
    assert!(
        start["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{start}"
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens", "{delta}");
    assert_eq!(delta["usage"]["output_tokens"], 8, "{delta}");
    // The same request without streaming: the text equals the streamed deltas.
    let mut plain = body.clone();
    plain["stream"] = json!(false);
    let r = Server::client()
        .post(s.url("/v1/messages"))
        .bearer_auth("sekret")
        .json(&plain)
        .send()
        .unwrap();
    let v: Value = r.json().unwrap();
    let streamed: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(v["content"][0]["text"].as_str().unwrap(), streamed, "{v}");
    assert_eq!(v["stop_reason"], "max_tokens");
}

#[test]
fn bad_bodies_get_each_protocols_own_error_object() {
    let s = Server::start(&[]);
    let msg = |extra: Value| {
        let mut b = json!({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        b
    };
    let anthropic_cases = [
        (msg(json!({"max_tokens": null})), 400, "max_tokens"),
        (msg(json!({"messages": []})), 400, "messages"),
        (
            msg(json!({"messages": [{"role": "system", "content": "x"}]})),
            400,
            "user turn",
        ),
        (
            msg(json!({"messages": [{"role": "wizard", "content": "x"}]})),
            400,
            "role",
        ),
        (
            msg(
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            ),
            400,
            "image",
        ),
        (
            msg(
                json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
            ),
            400,
            "prefill",
        ),
        (msg(json!({"temperature": 1.5})), 400, "temperature"),
        (msg(json!({"stop_sequences": [""]})), 400, "stop_sequences"),
        (
            msg(json!({"tool_choice": {"type": "any"}})),
            400,
            "tool_choice",
        ),
        (
            msg(json!({"tools": [{"type": "custom", "input_schema": {}}]})),
            400,
            "tools[0]",
        ),
        (msg(json!({"tools": [{"name": "f"}]})), 400, "input_schema"),
        (
            msg(json!({"thinking": {"type": "sometimes"}})),
            400,
            "thinking",
        ),
        (msg(json!({"model": 7})), 400, "model"),
        // The shared readers' errors name Anthropic's fields: a schema that cannot be
        // compiled is `output_config`'s, and so is one constraint too many.
        (
            msg(
                json!({"output_config": {"format": {"type": "json_schema", "schema": {"$ref": "#/$defs/missing"}}}}),
            ),
            400,
            "`output_config` cannot be used",
        ),
        (
            msg(
                json!({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}, "guided_regex": "a+"}),
            ),
            400,
            "output_config and guided_regex",
        ),
    ];
    for (body, status, needle) in anthropic_cases {
        let (code, v) = s.post("/v1/messages", &body);
        assert_eq!(code, status, "{body} → {v}");
        assert_eq!(v["type"], "error", "{v}");
        let t = v["error"]["type"].as_str().unwrap();
        assert!(
            t == "invalid_request_error" || (status == 404 && t == "not_found_error"),
            "{v}"
        );
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{needle}: {v}"
        );
    }
    // Not JSON at all.
    let r = Server::client()
        .post(s.url("/v1/messages"))
        .body("{nope")
        .header("content-type", "application/json")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(
        r.json::<Value>().unwrap()["error"]["type"],
        "invalid_request_error"
    );
    let (code, v) = s.post("/v1/messages/count_tokens", &json!({"messages": "hi"}));
    assert_eq!((code, v["type"].as_str()), (400, Some("error")), "{v}");

    let resp_cases = [
        (json!({}), 400, "input"),
        (json!({"input": []}), 400, "input"),
        (json!({"input": [{"type": "wizard_call"}]}), 400, "input"),
        (
            json!({"input": "x", "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "file_search"}]}]}),
            400,
            "tools",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "yaml"}}}),
            400,
            "text.format",
        ),
        (
            json!({"input": "x", "max_output_tokens": 0}),
            400,
            "max_output_tokens",
        ),
        (
            json!({"input": "x", "reasoning": {"effort": "extreme"}}),
            400,
            "reasoning",
        ),
        (
            json!({"input": "x", "previous_response_id": "resp_nope"}),
            404,
            "previous_response_id",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": {"$ref": "#/$defs/missing"}}}}),
            400,
            "text.format",
        ),
        (
            json!({"input": "x", "stream": true, "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}}, "structured_outputs": {"regex": "a+"}}),
            400,
            "structured_outputs",
        ),
    ];
    for (body, status, param) in resp_cases {
        let (code, v) = s.post("/v1/responses", &body);
        assert_eq!(code, status, "{body} → {v}");
        assert_eq!(v["error"]["param"], param, "{body} → {v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    let (code, text) = s.get("/v1/responses/resp_nope");
    assert_eq!(code, 404, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "not_found_error");
    let r = Server::client()
        .delete(s.url("/v1/responses/resp_nope"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // A good request still works after all that.
    let (code, v) = s.post(
        "/v1/responses",
        &json!({"input": "Hi", "max_output_tokens": 2}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"], "incomplete", "{v}");
    assert_eq!(v["usage"]["output_tokens"], 2, "{v}");
    let id = v["id"].as_str().unwrap();
    let (code, got) = s.get(&format!("/v1/responses/{id}"));
    assert_eq!(code, 200);
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["output"], v["output"]);
    assert!(s.drained());
}

/// The thinking split, end to end on a real model: Qwen2.5-Coder 0.5B served through Qwen3's
/// real template (the same ChatML turns, plus `<think>` handling), its output forced by a
/// regex to think first — so every protocol must carry the thoughts apart from the answer.
#[test]
fn thinking_goes_apart_from_the_answer_in_every_protocol() {
    let template = repo().join("crates/ridge-tokenizer/tests/data/templates/Qwen-Qwen3-0.6B.jinja");
    let s = Server::start_model(
        &qwen2_0_5b(),
        &["--chat-template-file", template.to_str().unwrap()],
    );
    let regex = "<think>\n[a-z ]{5,40}\n</think>\n\nThe answer is [0-9]+\\.";
    let question = json!([{"role": "user", "content": "What is 2 + 3?"}]);
    let chat =
        json!({"messages": question, "max_tokens": 60, "temperature": 0, "guided_regex": regex});
    let (code, v) = s.post("/v1/chat/completions", &chat);
    assert_eq!(code, 200, "{v}");
    let msg = &v["choices"][0]["message"];
    let thought = msg["reasoning_content"].as_str().unwrap().to_string();
    assert_eq!(msg["reasoning"], msg["reasoning_content"], "{v}");
    let t = thought.trim();
    assert!(
        t.len() >= 5 && t.chars().all(|c| c.is_ascii_lowercase() || c == ' '),
        "{v}"
    );
    let answer = msg["content"].as_str().unwrap().to_string();
    assert!(
        answer.starts_with("The answer is ") && answer.ends_with('.'),
        "{v}"
    );
    assert!(!answer.contains("think"), "{v}");

    // Streamed: the same thoughts as `delta.reasoning_content`, then the same answer.
    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    let r = Server::client()
        .post(s.url("/v1/chat/completions"))
        .json(&stream)
        .send()
        .unwrap();
    let (chunks, done) = sse(r);
    assert!(done);
    let delta = |k: &str| -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][k].as_str())
            .collect()
    };
    assert_eq!(delta("reasoning_content"), thought);
    assert_eq!(delta("reasoning"), thought);
    assert_eq!(delta("content"), answer);

    // Anthropic: a thinking block, then the text block; streamed as thinking_delta.
    let body =
        json!({"max_tokens": 60, "messages": question, "temperature": 0, "guided_regex": regex});
    let (code, v) = s.post("/v1/messages", &body);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["content"][0]["type"], "thinking", "{v}");
    assert_eq!(v["content"][0]["thinking"], thought.as_str(), "{v}");
    assert_eq!(
        v["content"][1],
        json!({"type": "text", "text": answer}),
        "{v}"
    );
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = Server::client()
        .post(s.url("/v1/messages"))
        .json(&sb)
        .send()
        .unwrap();
    let events = named_events(r);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| &d["content_block"]["type"])
        .collect();
    assert_eq!(starts, [&json!("thinking"), &json!("text")], "{events:?}");
    let thinking: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(thinking, thought);

    // Responses: a reasoning item, then the message; streamed as reasoning_text deltas.
    let body = json!({"input": "What is 2 + 3?", "max_output_tokens": 60, "temperature": 0, "guided_regex": regex});
    let (code, v) = s.post("/v1/responses", &body);
    assert_eq!(code, 200, "{v}");
    let kinds: Vec<&str> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "message"], "{v}");
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        thought.as_str(),
        "{v}"
    );
    assert_eq!(v["output"][1]["content"][0]["text"], answer.as_str(), "{v}");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = Server::client()
        .post(s.url("/v1/responses"))
        .json(&sb)
        .send()
        .unwrap();
    let events = named_events(r);
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.reasoning_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(deltas, thought);

    // The switches reach the template: Qwen3's renders an empty thought block when thinking
    // is off (chat_template_kwargs, Anthropic's `thinking: disabled`).
    let tokens = |extra: Value| {
        let mut b = json!({"messages": question});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (_, v) = s.post("/tokenize", &b);
        v["count"].as_u64().unwrap()
    };
    assert!(
        tokens(json!({"chat_template_kwargs": {"enable_thinking": false}})) > tokens(json!({}))
    );
    let count = |thinking: &str| {
        let (_, v) = s.post(
            "/v1/messages/count_tokens",
            &json!({"messages": question, "thinking": {"type": thinking}}),
        );
        v["input_tokens"].as_u64().unwrap()
    };
    assert!(count("disabled") > count("enabled"));
    drop(s);

    // `--reasoning-format none` leaves the thoughts in the content.
    let s = Server::start_model(
        &qwen2_0_5b(),
        &[
            "--chat-template-file",
            template.to_str().unwrap(),
            "--reasoning-format",
            "none",
        ],
    );
    let (_, v) = s.post("/v1/chat/completions", &chat);
    let msg = &v["choices"][0]["message"];
    assert!(msg.get("reasoning_content").is_none(), "{v}");
    assert_eq!(
        msg["content"].as_str().unwrap(),
        format!("<think>{thought}</think>\n\n{answer}")
    );
}

/// A thinking budget, end to end: DeepSeek-R1's template opens the thoughts in the prompt;
/// with `thinking.budget_tokens` the engine writes `</think>` itself once the budget is spent,
/// so the answer begins; without one the model thinks to `max_tokens`.
#[test]
fn a_thinking_budget_closes_the_thoughts() {
    let template = repo().join(
        "crates/ridge-server/tests/data/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    );
    let s = Server::start_model(
        &qwen2_0_5b(),
        &["--chat-template-file", template.to_str().unwrap()],
    );
    let ask = |thinking: Value| {
        let body = json!({"max_tokens": 40, "temperature": 0, "thinking": thinking,
                          "messages": [{"role": "user", "content": "What is 2 + 3?"}]});
        let (code, v) = s.post("/v1/messages", &body);
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["usage"]["output_tokens"], 40, "{v}");
        v
    };
    let tokens = |text: &str| {
        let (_, v) = s.post(
            "/tokenize",
            &json!({"prompt": text, "add_special_tokens": false}),
        );
        v["count"].as_u64().unwrap()
    };
    let free = ask(json!({"type": "enabled"}));
    assert_eq!(free["content"][0]["type"], "thinking", "{free}");
    assert!(
        tokens(free["content"][0]["thinking"].as_str().unwrap()) > 6,
        "{free}"
    );
    let capped = ask(json!({"type": "enabled", "budget_tokens": 6}));
    assert_eq!(capped["content"][0]["type"], "thinking", "{capped}");
    let thought = capped["content"][0]["thinking"].as_str().unwrap();
    assert!(!thought.is_empty() && tokens(thought) <= 6, "{capped}");
    // The first six tokens are the same thoughts as without a budget.
    assert!(
        free["content"][0]["thinking"]
            .as_str()
            .unwrap()
            .starts_with(thought),
        "{free} {capped}"
    );
    assert_eq!(capped["content"][1]["type"], "text", "{capped}");
    assert!(
        !capped["content"][1]["text"].as_str().unwrap().is_empty(),
        "{capped}"
    );
}

/// A streamed Chat Completions tool call on a real model: the call's id, type and name come
/// first with empty arguments, then the arguments in pieces as the model writes them (index
/// only), which spell exactly the arguments of the same request answered whole.
#[test]
fn chat_tool_call_arguments_stream_as_they_are_written() {
    let s = Server::start_model(&qwen2_0_5b(), &[]);
    let tools = json!([{"type": "function", "function": {
        "name": "write_file",
        "description": "Write text to a file",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]},
    }}]);
    let body = |stream: bool| {
        json!({"messages": [{"role": "user", "content": "Write a two-line poem about the sea into sea.txt."}],
               "tools": tools, "tool_choice": {"type": "function", "function": {"name": "write_file"}},
               "temperature": 0, "max_tokens": 400, "stream": stream})
    };
    let (status, whole) = s.post("/v1/chat/completions", &body(false));
    assert_eq!(status, 200, "{whole}");
    let call = &whole["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "write_file", "{whole}");
    let r = Server::client()
        .post(s.url("/v1/chat/completions"))
        .json(&body(true))
        .send()
        .unwrap();
    let (chunks, done) = sse(r);
    assert!(done);
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    let head = deltas[0];
    assert_eq!(head["index"], 0);
    assert!(head["id"].as_str().unwrap().starts_with("call_"), "{head}");
    assert_eq!(head["type"], "function");
    assert_eq!(head["function"]["name"], "write_file");
    assert_eq!(head["function"]["arguments"], "");
    let mut args = String::new();
    for d in &deltas[1..] {
        assert_eq!(d["index"], 0, "{d}");
        assert!(
            d.get("id").is_none() && d["function"].get("name").is_none(),
            "{d}"
        );
        args.push_str(d["function"]["arguments"].as_str().unwrap());
    }
    assert!(
        deltas.len() > 5,
        "{} argument pieces: {args}",
        deltas.len() - 1
    );
    assert_eq!(args, call["function"]["arguments"].as_str().unwrap());
    let parsed: Value = serde_json::from_str(&args).unwrap();
    assert!(parsed["content"].as_str().unwrap().len() > 20, "{parsed}");
    let last = chunks
        .iter()
        .rev()
        .find(|c| !c["choices"][0]["finish_reason"].is_null());
    assert_eq!(last.unwrap()["choices"][0]["finish_reason"], "tool_calls");
}

/// Under `tool_choice: "auto"` a call, once the model opens one, is held to the offered tools
/// and their schemas (the lazy grammar). The bias pushes the model to open a call at once and
/// would, unconstrained, make it write nothing but call tags; the grammar takes over after the
/// first and makes it a valid call of the one tool, a name the model was never shown elsewhere.
#[test]
fn under_auto_an_opened_call_is_a_valid_call_of_an_offered_tool() {
    let s = Server::start_model(&qwen2_0_5b(), &[]);
    // Qwen2.5's `<tool_call>` token.
    const TOOL_CALL: &str = "151657";
    let tools = json!([{"type": "function", "function": {
        "name": "zq_fetch_v7", "description": "Fetch a record",
        "parameters": {"type": "object", "properties": {"record": {"type": "integer"}},
                       "required": ["record"], "additionalProperties": false},
    }}]);
    let body = json!({"messages": [{"role": "user", "content": "Get record forty-two."}],
        "tools": tools, "tool_choice": "auto", "parallel_tool_calls": false,
        "logit_bias": {TOOL_CALL: 100}, "temperature": 0, "max_tokens": 80});
    let (status, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "zq_fetch_v7", "{v}");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    let args = args.as_object().unwrap();
    assert!(args.len() == 1 && args["record"].is_i64(), "{args:?}");
}

/// SmolLM2's template shows no tools: requests with tools are served in ridge's generic form
/// instead of refused — a forced call comes back as a call, `auto` answers (with whatever the
/// model chose), on Chat Completions and Messages (what an agent on the default model sends).
#[test]
fn tools_on_a_template_without_them_are_served_in_the_generic_form() {
    let s = Server::start(&[]);
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": false},
    }}]);
    let ask = |choice: Value| {
        json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
               "tools": tools, "tool_choice": choice, "parallel_tool_calls": false,
               "temperature": 0, "max_tokens": 60})
    };
    let (status, v) = s.post("/v1/chat/completions", &ask(json!("required")));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    let (status, v) = s.post("/v1/chat/completions", &ask(json!("auto")));
    assert_eq!(status, 200, "{v}");
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 40,
        "messages": [{"role": "user", "content": "Hello"}],
        "tools": [{"name": "Write", "description": "Write a file",
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]});
    let (status, v) = s.post("/v1/messages", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["type"], "message", "{v}");
}
