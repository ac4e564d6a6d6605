//! Soak: mixed load against a real `ridge serve` — random prompt and output lengths, streaming
//! and not, n > 1, clients that hang up mid-stream, malformed requests mixed in — checking that
//! every good request completes with exactly the tokens it asked for, every bad one gets a 4xx
//! error object, the KV cache drains to empty and resident memory stays flat.
//!
//! CI runs a short version (`RIDGE_SOAK_SECS`, default 20 s). The 30-minute run:
//! `RIDGE_SOAK_SECS=1800 cargo test --release -p ridge-cli --test soak -- --nocapture`
//! (`RIDGE_SOAK_ARGS` adds server flags, e.g. `"--speculative ngram --spec-fixed"`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::server::{sse, Server};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Default)]
struct Tally {
    good: AtomicUsize,
    dropped: AtomicUsize,
    bad: AtomicUsize,
    failures: std::sync::Mutex<Vec<String>>,
}

fn one_request(base: &str, rng: &mut rand::rngs::StdRng, t: &Tally) {
    let c = Server::client();
    let kind = rng.random_range(0..10);
    let words = rng.random_range(1..120);
    let prompt: String = (0..words)
        .map(|i| ["alpha ", "beta ", "gamma ", "delta ", "the ", "river "][(i * 7 + words) % 6])
        .collect();
    let max_tokens = rng.random_range(1..40);
    let fail = |m: String| t.failures.lock().unwrap().push(m);
    match kind {
        // Malformed or hostile.
        0 => {
            let bodies = [
                "{".to_string(),
                json!({"prompt": 5}).to_string(),
                json!({"prompt": "x", "max_tokens": -3}).to_string(),
                json!({"messages": []}).to_string(),
                json!({"prompt": "x", "n": 10_000}).to_string(),
                json!({"prompt": "x", "logit_bias": {"abc": 1}}).to_string(),
                "\u{0}\u{1}garbage".to_string(),
            ];
            let b = &bodies[rng.random_range(0..bodies.len())];
            let path = if rng.random_bool(0.5) {
                "/v1/completions"
            } else {
                "/v1/chat/completions"
            };
            match c.post(format!("{base}{path}")).body(b.clone()).send() {
                Ok(r) => {
                    let st = r.status().as_u16();
                    let v: Value = r.json().unwrap_or(Value::Null);
                    if !(400..500).contains(&st) || !v["error"]["message"].is_string() {
                        fail(format!("bad request {b:?} got {st} {v}"));
                    }
                    t.bad.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => fail(format!("bad request transport error {e}")),
            }
        }
        // A client that hangs up after the first chunk.
        1 | 2 => {
            let body =
                json!({"prompt": prompt, "max_tokens": 64, "ignore_eos": true, "stream": true});
            if let Ok(r) = c.post(format!("{base}/v1/completions")).json(&body).send() {
                use std::io::BufRead;
                let mut lines = std::io::BufReader::new(r).lines();
                let _ = lines.next();
            }
            t.dropped.fetch_add(1, Ordering::Relaxed);
        }
        // Streaming with usage, sometimes n > 1.
        3..=6 => {
            let n = if rng.random_bool(0.3) { 2 } else { 1 };
            let body = json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true,
                "n": n, "temperature": 0.8, "stream": true, "stream_options": {"include_usage": true}});
            match c.post(format!("{base}/v1/completions")).json(&body).send() {
                Ok(r) if r.status().as_u16() == 200 => {
                    let (chunks, done) = sse(r);
                    let got = chunks
                        .last()
                        .and_then(|c| c["usage"]["completion_tokens"].as_u64());
                    if !done || got != Some((max_tokens * n) as u64) {
                        fail(format!(
                            "stream: done {done}, usage {got:?}, want {}",
                            max_tokens * n
                        ));
                    } else {
                        t.good.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(r) => fail(format!("stream status {}", r.status())),
                Err(e) => fail(format!("stream transport error {e}")),
            }
        }
        // Plain chat.
        _ => {
            let body = json!({"messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens, "ignore_eos": true});
            match c
                .post(format!("{base}/v1/chat/completions"))
                .json(&body)
                .send()
            {
                Ok(r) if r.status().as_u16() == 200 => {
                    let v: Value = r.json().unwrap_or(Value::Null);
                    if v["usage"]["completion_tokens"].as_u64() != Some(max_tokens as u64) {
                        fail(format!("chat usage {}", v["usage"]));
                    } else {
                        t.good.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(r) => fail(format!("chat status {}", r.status())),
                Err(e) => fail(format!("chat transport error {e}")),
            }
        }
    }
}

#[test]
fn mixed_load_completes_drains_and_does_not_leak() {
    let secs: u64 = std::env::var("RIDGE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    // Extra server flags, e.g. RIDGE_SOAK_ARGS="--speculative ngram --spec-fixed".
    let extra = std::env::var("RIDGE_SOAK_ARGS").unwrap_or_default();
    let mut args = vec!["--kv-cache-mem", "64", "--max-seqs", "16"];
    args.extend(extra.split_whitespace());
    let s = Server::start(&args);
    let pid = s.child.id();
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut rss_warm = 0;
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let (base, t, stop) = (s.base.clone(), tally.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                while !stop.load(Ordering::Relaxed) {
                    one_request(&base, &mut rng, &t);
                }
            })
        })
        .collect();
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(500));
        if rss_warm == 0 && start.elapsed() > Duration::from_secs(secs / 4) {
            rss_warm = rss_kib(pid);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let failures = tally.failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(s.drained(), "KV cache or queues not empty after the load");
    let rss_end = rss_kib(pid);
    let (good, bad, dropped) = (
        tally.good.load(Ordering::Relaxed),
        tally.bad.load(Ordering::Relaxed),
        tally.dropped.load(Ordering::Relaxed),
    );
    eprintln!(
        "soak {secs}s {extra:?}: {good} good, {bad} malformed (all 4xx), {dropped} dropped; RSS warm {rss_warm} KiB, end {rss_end} KiB; preemptions {}; drafted {} accepted {}",
        s.metric("ridge:num_preemptions_total"),
        s.metric("ridge:spec_decode_num_draft_tokens_total"),
        s.metric("ridge:spec_decode_num_accepted_tokens_total")
    );
    assert!(good > 0 && bad > 0 && dropped > 0);
    // The KV pool is allocated up front (and touched lazily), so after warm-up resident memory
    // may only grow by pages of the pool first touched late: allow 5% plus that pool.
    let pool_kib = 64 * 1024;
    assert!(
        rss_end <= rss_warm + rss_warm / 20 + pool_kib,
        "RSS grew from {rss_warm} to {rss_end} KiB"
    );
}
