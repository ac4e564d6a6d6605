//! `ridge serve` on the real model, driven over loopback HTTP: OpenAI shapes, streaming,
//! validation of hostile input, auth, concurrency with clients that vanish, prefix reuse,
//! queue limits and a graceful SIGTERM drain.

mod common;

use common::server::{sse, Server};
use serde_json::{json, Value};

fn assert_error(status: u16, body: &Value, want: u16, what: &str) {
    assert_eq!(status, want, "{what}: {body}");
    let e = &body["error"];
    assert!(e["message"].is_string(), "{what}: {body}");
    assert!(e["type"].is_string(), "{what}: {body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{what}: {body}"
    );
}

#[test]
fn openai_shapes_streaming_and_tools() {
    let s = Server::start(&["--served-model-name", "smol"]);
    // Models.
    let (st, m) = s.get("/v1/models");
    assert_eq!(st, 200);
    let m: Value = serde_json::from_str(&m).unwrap();
    let d = &m["data"][0];
    assert_eq!(
        (d["id"].as_str(), d["object"].as_str()),
        (Some("smol"), Some("model"))
    );
    assert_eq!(d["max_model_len"], 8192);
    for k in ["created", "owned_by", "root"] {
        assert!(d.get(k).is_some(), "{k}");
    }
    assert_eq!(s.get("/health").0, 200);

    // Completions, greedy: the same text as `ridge run` gives (tests/smollm2.rs checks Paris).
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"model": "smol", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    assert!(
        r["choices"][0]["text"].as_str().unwrap().contains("Paris"),
        "{r}"
    );
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["completion_tokens"], 8);
    assert_eq!(
        r["usage"]["total_tokens"],
        r["usage"]["prompt_tokens"].as_u64().unwrap() + 8
    );
    assert!(r["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());
    let t = &r["timings"];
    for k in [
        "prompt_n",
        "prompt_ms",
        "predicted_n",
        "predicted_ms",
        "ttft_ms",
        "tpot_ms",
        "predicted_per_second",
        "roofline_tpot_ms",
        "roofline_efficiency",
    ] {
        assert!(t[k].is_number(), "timings.{k}: {t}");
    }
    assert_eq!(t["predicted_n"], 8);
    // The test server is given its bandwidth: the floor says so rather than naming a level.
    assert_eq!(t["roofline_memory_level"], "given", "{t}");
    // 20 GB/s, or what a request proved when one beat that floor (never a lower figure).
    assert!(t["roofline_bandwidth_gbs"].as_f64().unwrap() >= 20.0, "{t}");
    assert!(t["roofline_efficiency"].as_f64().unwrap() <= 1.0, "{t}");
    assert!(t["roofline_floor_remeasured"].is_boolean(), "{t}");
    assert!(
        t["dram_bandwidth_gbs"].is_null() && t["llc_bandwidth_gbs"].is_null(),
        "{t}"
    );

    // Token-id prompts and several prompts: choices indexed prompt·n + i.
    let ids = s
        .post("/tokenize", &json!({"prompt": "The capital of France is"}))
        .1;
    let toks = ids["tokens"].clone();
    assert_eq!(ids["count"], toks.as_array().unwrap().len());
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"prompt": [toks.clone(), toks.clone()], "max_tokens": 8, "temperature": 0, "n": 2}),
    );
    assert_eq!(st, 200, "{r}");
    let ch = r["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 4);
    for (i, c) in ch.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["text"], ch[0]["text"], "greedy choices agree");
    }
    assert_eq!(r["usage"]["completion_tokens"], 32);
    let de = s.post("/detokenize", &json!({"tokens": toks})).1;
    assert!(de["prompt"]
        .as_str()
        .unwrap()
        .ends_with("The capital of France is"));

    // Chat streaming with usage: first chunk carries role and text, usage chunk last.
    let resp = Server::client()
        .post(s.url("/v1/chat/completions"))
        .json(&json!({
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is the capital of France? Answer in one word."}]}],
            "max_tokens": 24, "temperature": 0, "stream": true,
            "stream_options": {"include_usage": true}
        }))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let (chunks, done) = sse(resp);
    assert!(done);
    // The role chunk opens the stream when the request is admitted (content "", as OpenAI's
    // first chunk); text follows, without the role again.
    let first = &chunks[0]["choices"][0];
    assert_eq!(first["delta"], json!({"role": "assistant", "content": ""}));
    let second = &chunks[1]["choices"][0];
    assert!(second["delta"].get("role").is_none());
    assert!(!second["delta"]["content"].as_str().unwrap().is_empty());
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter_map(|c| c["delta"]["content"].as_str())
        .collect();
    assert!(text.contains("Paris"), "{text}");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    assert_eq!(last["object"], "chat.completion.chunk");
    let n_out = last["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=24).contains(&n_out));
    assert!(last["timings"]["ttft_ms"].is_number());
    let fin: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter(|c| !c["finish_reason"].is_null())
        .collect();
    assert_eq!(fin.len(), 1);

    // Stop strings: cut before the stop, finish_reason stop.
    let (_, full) = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
    );
    let full = full["choices"][0]["text"].as_str().unwrap().to_string();
    let (_, r) = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "stop": ["ari"]}),
    );
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        r["choices"][0]["text"].as_str().unwrap(),
        &full[..full.find("ari").unwrap()]
    );

    // Seeds reproduce; logprobs in both shapes.
    let seeded = json!({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.0, "seed": 7, "logprobs": 3});
    let a = s.post("/v1/completions", &seeded).1;
    let b = s.post("/v1/completions", &seeded).1;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    let lp = &a["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 16);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 3);
    assert!(lp["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    let (_, c) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "logprobs": true, "top_logprobs": 2, "temperature": 0}),
    );
    let content = c["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!content.is_empty());
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 2);
    // Greedy picks the most likely token: its logprob is the top alternative's.
    assert_eq!(
        content[0]["logprob"],
        content[0]["top_logprobs"][0]["logprob"]
    );

    // Metrics.
    let (_, metrics) = s.get("/metrics");
    for name in [
        "ridge:num_requests_running",
        "ridge:num_requests_waiting",
        "ridge:kv_cache_usage_perc",
        "ridge:kv_cache_window_usage_perc",
        "ridge:prompt_tokens_total",
        "ridge:generation_tokens_total",
        "ridge:request_success_total",
        "ridge:num_preemptions_total",
        "ridge:prefix_cache_queries_total",
        "ridge:prefix_cache_hits_total",
        "ridge:time_to_first_token_seconds",
        "ridge:inter_token_latency_seconds",
        "ridge:request_time_per_output_token_seconds",
        "ridge:e2e_request_latency_seconds",
        "ridge:request_queue_time_seconds",
        "ridge:roofline_efficiency",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
    assert!(s.metric("ridge:generation_tokens_total") >= 8.0 + 32.0 + 16.0);
}

#[test]
fn a_floor_that_a_request_beats_is_re_measured_never_above_100_percent() {
    // A bandwidth far below any machine's (as a first probe slowed by other processes reads):
    // every step beats the floor it gives.
    let s = Server::start(&["--bandwidth-gbs", "0.000001"]);
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(st, 200, "{r}");
    let t = &r["timings"];
    assert_eq!(t["roofline_floor_remeasured"], true, "{t}");
    assert_eq!(t["roofline_efficiency"], 1.0, "{t}");
    assert_eq!(t["roofline_tpot_ms"], t["tpot_ms"], "{t}");
    // The floor now divides by what the request proved: its bytes per step over its TPOT.
    let proved = t["roofline_bandwidth_gbs"].as_f64().unwrap();
    assert!(proved > 0.01, "{t}");
    let (st, state) = s.get("/state");
    assert_eq!(st, 200);
    let state: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["floor_remeasures"], 1, "{state}");
    assert_eq!(state["bandwidth_initial_gbs"], 0.000001, "{state}");
    assert!(
        state["bandwidth_gbs"].as_f64().unwrap() >= proved,
        "{state}"
    );
    assert!(s.metric("ridge:roofline_efficiency") <= 1.0);
    // The next request is judged against the raised floor: at most 100% again.
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"prompt": "Water boils at", "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(
        r["timings"]["roofline_efficiency"].as_f64().unwrap() <= 1.0,
        "{r}"
    );
}

#[test]
fn hostile_requests_get_4xx_error_objects_and_the_server_stays_healthy() {
    let s = Server::start(&["--max-body-bytes", "100000"]);
    let c = Server::client();
    // A fresh connection per raw request: a 413 is answered before the body is read, and the
    // server then closes that connection, so a pooled client could reuse a dead one.
    let raw = |path: &str, body: Vec<u8>| {
        let r = Server::client()
            .post(s.url(path))
            .header("connection", "close")
            .body(body)
            .send()
            .unwrap();
        let st = r.status().as_u16();
        (
            st,
            serde_json::from_str::<Value>(&r.text().unwrap()).unwrap_or(Value::Null),
        )
    };
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("/v1/completions", b"{not json".to_vec(), 400),
        ("/v1/completions", b"\xff\xfe{}".to_vec(), 400),
        ("/v1/completions", b"[1,2]".to_vec(), 400),
        ("/v1/completions", vec![b' '; 200_000], 413),
        ("/v1/chat/completions", b"{\"messages\": []}".to_vec(), 400),
    ];
    for (path, body, want) in cases {
        let (st, b) = raw(path, body);
        assert_error(st, &b, want, path);
    }
    let bad: Vec<(&str, Value, u16)> = vec![
        ("/v1/completions", json!({}), 400),
        ("/v1/completions", json!({"prompt": 5}), 400),
        ("/v1/completions", json!({"prompt": []}), 400),
        ("/v1/completions", json!({"prompt": ""}), 400),
        ("/v1/completions", json!({"prompt": [1, 99999999]}), 400),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": "ten"}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": -1}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 9000}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "temperature": 5}),
            400,
        ),
        ("/v1/completions", json!({"prompt": "x", "top_p": 0}), 400),
        ("/v1/completions", json!({"prompt": "x", "n": 1000}), 400),
        ("/v1/completions", json!({"prompt": "x", "stop": ""}), 400),
        (
            "/v1/completions",
            json!({"prompt": "x", "stop": vec!["a"; 100]}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "logit_bias": {"-3": 1}}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "logprobs": 50}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "stream": "yes"}),
            400,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "model": ["gpt-4"]}),
            400,
        ),
        ("/v1/completions", json!({"prompt": vec!["x"; 100]}), 400),
        ("/v1/chat/completions", json!({"messages": "hi"}), 400),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user"}]}),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": 3}]}),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}),
            400,
        ),
        ("/tokenize", json!({"prompt": 3}), 400),
        ("/detokenize", json!({"tokens": ["a"]}), 400),
    ];
    for (path, body, want) in &bad {
        let (st, b) = s.post(path, body);
        assert_error(st, &b, *want, &format!("{path} {body}"));
    }
    let r = c.get(s.url("/v2/nothing")).send().unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let b: Value = r.json().unwrap();
    assert!(b["error"]["message"].is_string());
    assert_eq!(
        c.get(s.url("/v1/completions"))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        405
    );
    // Still healthy and serving.
    assert_eq!(s.get("/health").0, 200);
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 3}),
    );
    assert_eq!(st, 200, "{r}");
    // The engine publishes its gauges after the step that sent the answer: wait for them.
    assert!(s.drained(), "requests or KV blocks left behind");
}

#[test]
fn api_key_is_required_when_set() {
    let s = Server::start(&["--api-key", "sekret"]);
    let c = Server::client();
    let body = json!({"prompt": "Hi", "max_tokens": 2});
    let r = c.post(s.url("/v1/completions")).json(&body).send().unwrap();
    let st = r.status().as_u16();
    assert_error(st, &r.json().unwrap(), 401, "no key");
    let r = c
        .post(s.url("/v1/completions"))
        .bearer_auth("wrong")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = c
        .post(s.url("/v1/completions"))
        .bearer_auth("sekret")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(s.get("/health").0, 200, "health needs no key");
}

#[test]
fn concurrent_streams_with_dropped_clients_leave_nothing_behind() {
    let s = Server::start(&[]);
    let base = s.base.clone();
    let handles: Vec<_> = (0..48)
        .map(|i| {
            let base = base.clone();
            std::thread::spawn(move || {
                let body = json!({
                    "prompt": format!("Story number {i}: once upon a time"),
                    "max_tokens": 24, "ignore_eos": true, "temperature": 0.7, "seed": i,
                    "stream": true, "stream_options": {"include_usage": true}
                });
                let resp = Server::client()
                    .post(format!("{base}/v1/completions"))
                    .json(&body)
                    .send()
                    .unwrap();
                assert_eq!(resp.status().as_u16(), 200);
                if i % 3 == 0 {
                    // Read a few events, then hang up.
                    use std::io::BufRead;
                    let mut lines = std::io::BufReader::new(resp).lines();
                    let mut seen = 0;
                    while seen < 3 {
                        match lines.next() {
                            Some(Ok(l)) if l.starts_with("data: ") => seen += 1,
                            Some(Ok(_)) => {}
                            _ => break,
                        }
                    }
                    return None;
                }
                let (chunks, done) = sse(resp);
                assert!(done);
                let usage = chunks.last().unwrap()["usage"].clone();
                Some(usage["completion_tokens"].as_u64().unwrap())
            })
        })
        .collect();
    let results: Vec<Option<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let completed: Vec<u64> = results.iter().flatten().copied().collect();
    assert_eq!(completed.len(), 32);
    assert!(completed.iter().all(|&n| n == 24), "{completed:?}");
    // The dropped streams are aborted; once everything settles nothing runs or holds blocks.
    assert!(s.drained(), "requests or KV blocks left behind");
    assert!(s.metric("ridge:request_success_total{finished_reason=\"abort\"}") >= 1.0);
}

#[test]
fn shared_prefixes_are_served_from_the_cache() {
    let s = Server::start(&[]);
    let text = std::fs::read_to_string(common::repo().join("tests/data/prose.txt")).unwrap();
    let prefix: String = text.chars().take(6000).collect();
    let ask = |suffix: &str| {
        s.post(
            "/v1/completions",
            &json!({"prompt": format!("{prefix}{suffix}"), "max_tokens": 2, "temperature": 0}),
        )
        .1
    };
    let a = ask(" First question:");
    let prompt_tokens = a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 1000, "{prompt_tokens}");
    assert_eq!(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let hits_before = s.metric("ridge:prefix_cache_hits_total");
    let b = ask(" Second question:");
    let cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    // Everything up to the last full 16-token block before the suffix diverges.
    assert!(
        cached >= prompt_tokens - 32 && cached % 16 == 0,
        "{cached} of {prompt_tokens}"
    );
    assert_eq!(
        s.metric("ridge:prefix_cache_hits_total") - hits_before,
        cached as f64
    );
    assert_eq!(b["timings"]["cached_n"], cached);
}

#[test]
fn a_full_queue_answers_429_and_everything_else_completes() {
    let s = Server::start(&["--max-seqs", "1", "--max-queue", "1"]);
    let base = s.base.clone();
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || {
                let r = Server::client()
                    .post(format!("{base}/v1/completions"))
                    .json(&json!({"prompt": "Count: 1 2 3", "max_tokens": 48, "ignore_eos": true}))
                    .send()
                    .unwrap();
                let st = r.status().as_u16();
                (st, r.json::<Value>().unwrap())
            })
        })
        .collect();
    let res: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = res.iter().filter(|(st, _)| *st == 200).count();
    let full: Vec<&(u16, Value)> = res.iter().filter(|(st, _)| *st == 429).collect();
    assert_eq!(ok + full.len(), 5, "{res:?}");
    assert!(!full.is_empty() && ok >= 1, "{res:?}");
    for (st, b) in full {
        assert_error(*st, b, 429, "queue full");
    }
}

#[cfg(unix)]
#[test]
fn sigterm_drains_streams_in_flight_and_exits_zero() {
    let mut s = Server::start(&[]);
    let resp = Server::client()
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": "Hello", "max_tokens": 40, "ignore_eos": true, "stream": true}))
        .send()
        .unwrap();
    let pid = s.child.id().to_string();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
    });
    let (chunks, done) = sse(resp);
    killer.join().unwrap();
    assert!(done, "the stream in flight finishes");
    let n: usize = chunks.len();
    assert!(n >= 2, "{n} chunks");
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // New connections are refused after shutdown.
    assert!(Server::client().get(s.url("/health")).send().is_err());
}

#[test]
fn the_official_openai_python_sdk_works_unchanged() {
    let s = Server::start(&[]);
    common::python_check("openai_sdk_check.py", &[s.base.as_ref()]);
}

#[test]
fn latency_metrics_count_clients_that_hang_up() {
    // 48 concurrent streams, 16 of which hang up after 5 tokens: every one had a first token,
    // so the TTFT histogram counts 48 (a UI whose users press stop must not flatter TTFT).
    let s = Server::start(&[]);
    let threads: Vec<_> = (0..48)
        .map(|i| {
            let url = s.url("/v1/completions");
            std::thread::spawn(move || {
                let hang_up = i % 3 == 0;
                let body = json!({
                    "prompt": format!("Story number {i}: once upon a time"),
                    "max_tokens": if hang_up { 400 } else { 12 },
                    "ignore_eos": true,
                    "stream": true,
                });
                let r = Server::client().post(url).json(&body).send().unwrap();
                assert_eq!(r.status(), 200);
                if !hang_up {
                    let (chunks, done) = sse(r);
                    assert!(done && !chunks.is_empty());
                    return;
                }
                let mut seen = 0;
                for line in std::io::BufRead::lines(std::io::BufReader::new(r)) {
                    if line.unwrap().starts_with("data: ") {
                        seen += 1;
                        if seen == 5 {
                            break; // dropping the response closes the connection
                        }
                    }
                }
                assert_eq!(seen, 5);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        s.drained(),
        "requests still held after every client finished"
    );
    let count = |h: &str| s.metric(&format!("ridge:{h}_count"));
    assert_eq!(count("time_to_first_token_seconds"), 48.0);
    assert_eq!(count("e2e_request_latency_seconds"), 48.0);
    assert_eq!(count("request_time_per_output_token_seconds"), 48.0);
    assert_eq!(count("request_queue_time_seconds"), 48.0);
    // Every token but each choice's first is one inter-token gap, hung-up streams included.
    let tokens = s.metric("ridge:generation_tokens_total");
    assert_eq!(count("inter_token_latency_seconds"), tokens - 48.0);
    let abort = s.metric("ridge:request_success_total{finished_reason=\"abort\"}");
    let length = s.metric("ridge:request_success_total{finished_reason=\"length\"}");
    assert_eq!((abort, length), (16.0, 32.0));
}
