//! A thousand malformed and hostile requests mixed into real load against a real `ridge serve`:
//! every hostile one is answered with the expected 4xx and an OpenAI error object
//! (`{"error": {"message", "type", "param", "code"}}`), every concurrent good request completes
//! with exactly what it asked for, greedy output is unchanged by the abuse, and the server is
//! healthy and drained afterwards.
//!
//! `RIDGE_HOSTILE_N` sets the number of hostile requests (default 1000).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::server::{sse, Server};
use serde_json::{json, Value};

const KEY: &str = "hostile-test-key";
const MAX_BODY: usize = 256 * 1024;

/// One hostile request: method, path, `Authorization` header, body, expected status.
struct Hostile {
    method: &'static str,
    path: &'static str,
    auth: Option<String>,
    body: Vec<u8>,
    want: u16,
}

fn catalogue(i: usize) -> Vec<Hostile> {
    let ok_auth = Some(format!("Bearer {KEY}"));
    let post = |path: &'static str, body: Vec<u8>, want: u16| Hostile {
        method: "POST",
        path,
        auth: ok_auth.clone(),
        body,
        want,
    };
    let cmpl = |v: Value, want: u16| post("/v1/completions", v.to_string().into_bytes(), want);
    let chat = |v: Value, want: u16| post("/v1/chat/completions", v.to_string().into_bytes(), want);
    let msg = json!([{"role": "user", "content": format!("hi {i}")}]);
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let many_bias: serde_json::Map<String, Value> =
        (0..1025).map(|k| (k.to_string(), json!(1))).collect();
    vec![
        // Not JSON, not an object, not UTF-8, pathological JSON.
        post("/v1/completions", b"{".to_vec(), 400),
        post("/v1/completions", Vec::new(), 400),
        post("/v1/completions", b"\xff\xfe\x00{}".to_vec(), 400),
        post("/v1/completions", b"[1, 2]".to_vec(), 400),
        post("/v1/chat/completions", b"null".to_vec(), 400),
        post("/v1/completions", deep.into_bytes(), 400),
        post("/v1/completions", b"{\"prompt\": 1e99999}".to_vec(), 400),
        post(
            "/v1/completions",
            b"{\"prompt\": \"\\ud800\"}".to_vec(),
            400,
        ),
        post(
            "/v1/completions",
            b"{\"prompt\": \"a\", \"prompt\": 5}".to_vec(),
            400,
        ),
        post("/v1/completions", vec![b'x'; MAX_BODY + 1000], 413),
        // Wrong types and out-of-range values, one field at a time.
        cmpl(json!({"prompt": 5}), 400),
        cmpl(json!({"prompt": []}), 400),
        cmpl(json!({"prompt": [[]]}), 400),
        cmpl(json!({"prompt": [1, -1]}), 400),
        cmpl(json!({"prompt": [1, 1e20]}), 400),
        cmpl(json!({"prompt": [1, 49152]}), 400),
        cmpl(json!({"prompt": vec!["x"; 33]}), 400),
        cmpl(json!({"prompt": "a ".repeat(20_000)}), 400),
        cmpl(json!({"prompt": "x", "max_tokens": 0}), 400),
        cmpl(json!({"prompt": "x", "max_tokens": 1e10}), 400),
        cmpl(json!({"prompt": "x", "max_tokens": 100_000}), 400),
        cmpl(json!({"prompt": "x", "n": 17}), 400),
        cmpl(json!({"prompt": "x", "n": -1}), 400),
        cmpl(json!({"prompt": "x", "temperature": "NaN"}), 400),
        cmpl(json!({"prompt": "x", "temperature": 1e30}), 400),
        cmpl(json!({"prompt": "x", "top_p": -1}), 400),
        cmpl(json!({"prompt": "x", "top_k": -2}), 400),
        cmpl(json!({"prompt": "x", "stop": vec!["s"; 17]}), 400),
        cmpl(json!({"prompt": "x", "stop": "s".repeat(300)}), 400),
        cmpl(json!({"prompt": "x", "logit_bias": many_bias}), 400),
        cmpl(json!({"prompt": "x", "logit_bias": {"49152": 1}}), 400),
        cmpl(json!({"prompt": "x", "logit_bias": {"1": "x"}}), 400),
        cmpl(json!({"prompt": "x", "stop_token_ids": [-1]}), 400),
        cmpl(json!({"prompt": "x", "seed": "abc"}), 400),
        cmpl(json!({"prompt": "x", "stream_options": 5}), 400),
        cmpl(json!({"prompt": "x", "logprobs": 21}), 400),
        cmpl(json!({"prompt": "x", "repetition_penalty": 0}), 400),
        // No request field names a file (a path as the model name is just a name, which a
        // one-model server answers with its model); a model that is not a string is a 400.
        cmpl(
            json!({"prompt": "x", "model": {"path": "../../etc/passwd"}}),
            400,
        ),
        cmpl(json!({"prompt": "x", "model": 5}), 400),
        chat(json!({}), 400),
        chat(json!({"messages": []}), 400),
        chat(json!({"messages": [5]}), 400),
        chat(
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            400,
        ),
        chat(
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
        ),
        chat(
            json!({"messages": vec![json!({"role": "user", "content": ""}); 4097]}),
            400,
        ),
        chat(json!({"messages": msg, "top_logprobs": 3}), 400),
        chat(
            json!({"messages": msg, "add_generation_prompt": "yes"}),
            400,
        ),
        post(
            "/tokenize",
            json!({"prompt": 3}).to_string().into_bytes(),
            400,
        ),
        post(
            "/detokenize",
            json!({"tokens": [-5]}).to_string().into_bytes(),
            400,
        ),
        post(
            "/detokenize",
            json!({"tokens": "abc"}).to_string().into_bytes(),
            400,
        ),
        // Routing and authentication.
        post("/v1/engines/x/completions", b"{}".to_vec(), 404),
        post("/%2e%2e/%2e%2e/etc/passwd", b"{}".to_vec(), 404),
        Hostile {
            method: "GET",
            path: "/v1/completions",
            auth: ok_auth.clone(),
            body: Vec::new(),
            want: 405,
        },
        Hostile {
            method: "POST",
            path: "/v1/completions",
            auth: None,
            body: json!({"prompt": "x"}).to_string().into_bytes(),
            want: 401,
        },
        Hostile {
            method: "POST",
            path: "/v1/chat/completions",
            auth: Some(format!("Bearer {KEY}x")),
            body: json!({"messages": msg}).to_string().into_bytes(),
            want: 401,
        },
        Hostile {
            method: "POST",
            path: "/v1/completions",
            auth: Some(format!("bearer {KEY}")),
            body: json!({"prompt": "x"}).to_string().into_bytes(),
            want: 401,
        },
    ]
}

/// Sends one hostile request on a fresh connection (a 413 closes its connection) and returns
/// a description of what was wrong with the answer, if anything.
fn send_hostile(base: &str, h: &Hostile) -> Option<String> {
    let c = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .ok()?;
    let url = format!("{base}{}", h.path);
    let mut rq = match h.method {
        "GET" => c.get(&url),
        _ => c.post(&url).body(h.body.clone()),
    };
    rq = rq.header("connection", "close");
    if let Some(a) = &h.auth {
        rq = rq.header("authorization", a);
    }
    let what = format!(
        "{} {} {:?}",
        h.method,
        h.path,
        String::from_utf8_lossy(&h.body[..h.body.len().min(80)])
    );
    let r = match rq.send() {
        Ok(r) => r,
        Err(e) => return Some(format!("{what}: transport error {e}")),
    };
    let status = r.status().as_u16();
    let body: Value = r.json().unwrap_or(Value::Null);
    let e = &body["error"];
    let shaped = e["message"].as_str().is_some_and(|m| !m.is_empty())
        && e["type"].is_string()
        && e.get("param").is_some()
        && e.get("code").is_some();
    if status != h.want || !shaped {
        return Some(format!("{what}: got {status} {body}, want {}", h.want));
    }
    None
}

#[derive(Default)]
struct Good {
    done: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

/// One good request of kind `k`: non-streaming completion, streaming chat with usage, or the
/// greedy probe whose text must equal the baseline.
fn good_request(base: &str, k: usize, baseline: &str, g: &Good) {
    let c = Server::client();
    let auth = format!("Bearer {KEY}");
    let max_tokens = 1 + k % 6;
    let fail = |m: String| g.failures.lock().unwrap().push(m);
    match k % 3 {
        0 => {
            let body = json!({"prompt": format!("Request {k}: the river"), "max_tokens": max_tokens,
                "ignore_eos": true, "temperature": 0.9, "n": 1 + k % 2});
            match c
                .post(format!("{base}/v1/completions"))
                .header("authorization", &auth)
                .json(&body)
                .send()
                .and_then(|r| r.json::<Value>())
            {
                Ok(v)
                    if v["usage"]["completion_tokens"].as_u64()
                        == Some((max_tokens * (1 + k % 2)) as u64)
                        && v["choices"][0]["text"].is_string() => {}
                Ok(v) => fail(format!("completion {k}: {v}")),
                Err(e) => fail(format!("completion {k}: {e}")),
            }
        }
        1 => {
            let body = json!({"messages": [{"role": "user", "content": format!("Say {k}")}],
                "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
                "stream_options": {"include_usage": true}});
            match c
                .post(format!("{base}/v1/chat/completions"))
                .header("authorization", &auth)
                .json(&body)
                .send()
            {
                Ok(r) if r.status().as_u16() == 200 => {
                    let (chunks, done) = sse(r);
                    let used = chunks
                        .last()
                        .and_then(|c| c["usage"]["completion_tokens"].as_u64());
                    if !done || used != Some(max_tokens as u64) {
                        fail(format!("chat stream {k}: done {done}, usage {used:?}"));
                    }
                }
                Ok(r) => fail(format!("chat stream {k}: status {}", r.status())),
                Err(e) => fail(format!("chat stream {k}: {e}")),
            }
        }
        _ => match greedy(base) {
            Ok(t) if t == baseline => {}
            Ok(t) => fail(format!(
                "greedy text changed under load: {t:?} vs {baseline:?}"
            )),
            Err(e) => fail(format!("greedy {k}: {e}")),
        },
    }
    g.done.fetch_add(1, Ordering::Relaxed);
}

fn greedy(base: &str) -> Result<String, String> {
    let v: Value = Server::client()
        .post(format!("{base}/v1/completions"))
        .header("authorization", format!("Bearer {KEY}"))
        .json(&json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}))
        .send()
        .and_then(|r| r.json())
        .map_err(|e| e.to_string())?;
    v["choices"][0]["text"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| v.to_string())
}

#[test]
fn a_thousand_hostile_requests_mixed_into_real_load_are_all_4xx() {
    let n_hostile: usize = std::env::var("RIDGE_HOSTILE_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let max_body = MAX_BODY.to_string();
    let s = Server::start(&[
        "--api-key",
        KEY,
        "--max-body-bytes",
        &max_body,
        "--kv-cache-mem",
        "32",
        "--max-seqs",
        "8",
    ]);
    let baseline = greedy(&s.base).expect("baseline greedy request");
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let good = Arc::new(Good::default());
    let good_threads: Vec<_> = (0..3)
        .map(|t| {
            let (base, stop, good, baseline) =
                (s.base.clone(), stop.clone(), good.clone(), baseline.clone());
            std::thread::spawn(move || {
                let mut k = t;
                // At least a few requests per thread, then until the hostile ones are done.
                while k < t + 3 * 4 || !stop.load(Ordering::Relaxed) {
                    good_request(&base, k, &baseline, &good);
                    k += 3;
                }
            })
        })
        .collect();
    let hostile_failures = Arc::new(Mutex::new(Vec::new()));
    let by_status = Arc::new(Mutex::new(std::collections::BTreeMap::<u16, usize>::new()));
    let hostile_threads: Vec<_> = (0..2)
        .map(|t| {
            let (base, fails, by_status) =
                (s.base.clone(), hostile_failures.clone(), by_status.clone());
            std::thread::spawn(move || {
                for i in (t..n_hostile).step_by(2) {
                    let cat = catalogue(i);
                    let h = &cat[i % cat.len()];
                    if let Some(f) = send_hostile(&base, h) {
                        fails.lock().unwrap().push(f);
                    }
                    *by_status.lock().unwrap().entry(h.want).or_default() += 1;
                }
            })
        })
        .collect();
    for h in hostile_threads {
        h.join().unwrap();
    }
    let hostile_secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for g in good_threads {
        g.join().unwrap();
    }
    let hostile_failures = hostile_failures.lock().unwrap().clone();
    assert!(
        hostile_failures.is_empty(),
        "{} hostile requests answered wrongly, first: {:#?}",
        hostile_failures.len(),
        &hostile_failures[..hostile_failures.len().min(5)]
    );
    let good_failures = good.failures.lock().unwrap().clone();
    assert!(
        good_failures.is_empty(),
        "{} good requests failed, first: {:#?}",
        good_failures.len(),
        &good_failures[..good_failures.len().min(5)]
    );
    // Healthy, drained, and still producing the same greedy text.
    assert_eq!(s.get("/health").0, 200);
    assert!(s.drained(), "requests or KV blocks left behind");
    assert_eq!(greedy(&s.base).as_deref(), Ok(baseline.as_str()));
    let log = s.stderr.lock().unwrap().join("\n");
    assert!(!log.contains("panicked"), "server log has a panic: {log}");
    eprintln!(
        "hostile: {n_hostile} hostile requests ({} kinds; by expected status {:?}) in {hostile_secs:.1} s, all answered as expected; {} good requests completed alongside, all correct; total {:.1} s",
        catalogue(0).len(),
        by_status.lock().unwrap(),
        good.done.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
}
