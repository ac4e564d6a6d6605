//! `ridge bench serve` and `ridge bench sweep` through the real binary:
//!
//! - against a scripted server (plain `std::net`, a thread per connection) that streams canned
//!   SSE chunks with known delays: the JSON contract, exact token counts, TTFT and TPOT against
//!   the injected delays, `--save`, the sweep's files, clean errors;
//! - against a real `ridge serve` on loopback: every prompt and output token counted exactly
//!   (checked against the server's own `usage`), and TTFT / TPOT against the server's own
//!   `timings` for the same requests.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Delay before the first token and between tokens of the scripted server, ms.
const TTFT_MS: u64 = 100;
const GAP_MS: u64 = 20;

/// The scripted server's tokenizer: one token per word.
fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

fn respond_json(s: &mut TcpStream, v: &Value) {
    let body = v.to_string();
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn handle(mut s: TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut request_line = String::new();
    if r.read_line(&mut request_line).is_err() {
        return;
    }
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    match path {
        "/v1/models" => respond_json(&mut s, &serde_json::json!({"data": [{"id": "scripted"}]})),
        "/tokenize" => {
            let n = words(v["prompt"].as_str().unwrap_or(""));
            respond_json(&mut s, &serde_json::json!({"tokens": vec![1; n]}));
        }
        "/v1/completions" => {
            let n = v["max_tokens"].as_u64().unwrap_or(1) as usize;
            let prompt_tokens = words(v["prompt"].as_str().unwrap_or(""));
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            );
            for i in 0..n {
                std::thread::sleep(Duration::from_millis(if i == 0 { TTFT_MS } else { GAP_MS }));
                let ev = serde_json::json!({"choices": [{"index": 0, "text": format!(" w{i}")}]});
                if write!(s, "data: {ev}\n\n").is_err() || s.flush().is_err() {
                    return;
                }
            }
            let usage = serde_json::json!({"choices": [],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n}});
            let _ = write!(s, "data: {usage}\n\ndata: [DONE]\n\n");
        }
        _ => {
            let _ = write!(
                s,
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    }
    let _ = s.flush();
}

/// Starts the scripted server on a free loopback port; it lives as long as the test process.
fn scripted_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || handle(s));
        }
    });
    format!("http://{addr}")
}

fn json_line(o: &std::process::Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    let out = stdout(o);
    assert_eq!(out.trim_end().lines().count(), 1, "one line: {out:?}");
    serde_json::from_str(out.trim()).expect("valid JSON")
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} not a number in {v}"))
}

#[test]
fn serve_against_a_scripted_server() {
    let url = scripted_server();
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("run.json");
    let o = run(&[
        "bench",
        "serve",
        "--url",
        &url,
        "--num-prompts",
        "5",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--max-concurrency",
        "5",
        "--goodput",
        "ttft:5000,tpot:500",
        "--json",
        "--save",
        save.to_str().unwrap(),
    ]);
    let v = json_line(&o);
    assert_eq!(v["completed"], 5);
    assert_eq!(v["failed"], 0);
    assert_eq!(v["total_input_tokens"], 80);
    assert_eq!(v["total_output_tokens"], 40);
    assert_eq!(v["good_requests"], 5);
    for k in [
        "duration_s",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "goodput",
    ] {
        assert!(v[k].is_number(), "{k} in {v}");
    }
    for k in ["ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"] {
        for q in ["mean", "median", "p90", "p99"] {
            assert!(v[k][q].is_number(), "{k}.{q} in {v}");
        }
    }
    let ttft = f(&v, &["ttft_ms", "median"]);
    let tpot = f(&v, &["tpot_ms", "median"]);
    assert!((TTFT_MS as f64..400.0).contains(&ttft), "TTFT {ttft}");
    assert!((GAP_MS as f64 - 1.0..60.0).contains(&tpot), "TPOT {tpot}");
    // Output throughput is total output tokens over the run's wall time.
    let want = 40.0 / f(&v, &["duration_s"]);
    assert!((f(&v, &["output_throughput"]) - want).abs() < 1e-9 * want);

    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&save).unwrap()).unwrap();
    let reqs = saved["requests"].as_array().unwrap();
    assert_eq!(reqs.len(), 5);
    for r in reqs {
        assert_eq!(r["success"], true);
        assert_eq!(r["output_len"], 8);
        assert_eq!(r["server_prompt_tokens"], 16);
        assert_eq!(r["itl_s"].as_array().unwrap().len(), 7);
    }
    assert_eq!(saved["model"], "scripted");

    // The table form.
    let o = run(&[
        "bench",
        "serve",
        "--url",
        &url,
        "--num-prompts",
        "2",
        "--input-len",
        "4",
        "--output-len",
        "3",
        "--request-rate",
        "50",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for s in [
        "Successful requests:",
        "Total output tokens:",
        "6 / 6",
        "TTFT",
        "TPOT",
        "ITL",
        "E2EL",
    ] {
        assert!(out.contains(s), "{s} missing: {out}");
    }
}

#[test]
fn sweep_writes_json_and_chart() {
    let url = scripted_server();
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("sweep.json");
    let svg = dir.path().join("sweep.svg");
    let o = run(&[
        "bench",
        "sweep",
        "--url",
        &url,
        "--num-prompts",
        "4",
        "--input-len",
        "4",
        "--output-len",
        "4",
        "--concurrencies",
        "1,4",
        "--save",
        save.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("4 in flight"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&save).unwrap()).unwrap();
    let pts = v["points"].as_array().unwrap();
    assert_eq!(pts.len(), 2);
    assert_eq!(pts[0]["max_concurrency"], 1);
    assert_eq!(pts[1]["total_output_tokens"], 16);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("TPOT (ms)") && text.contains("1 in flight"));

    // Over request rates, one JSON line per point.
    let o = run(&[
        "bench",
        "sweep",
        "--url",
        &url,
        "--num-prompts",
        "3",
        "--input-len",
        "3",
        "--output-len",
        "2",
        "--request-rates",
        "20,inf",
        "--save",
        save.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["request_rate"], 20.0);
    assert_eq!(lines[0]["label"], "20 req/s");
    assert!(lines[1]["request_rate"].is_null(), "inf = all at once");
    assert!(lines.iter().all(|l| l["total_output_tokens"] == 6));
}

#[test]
fn bad_arguments_fail_cleanly() {
    let url = scripted_server();
    assert_clean_failure(
        &run(&["bench", "serve", "--url", &url, "--goodput", "tbt:5"]),
        "unknown metric",
    );
    assert_clean_failure(&run(&["bench", "serve", "--url", "ftp://x"]), "http://");
    assert_clean_failure(
        &run(&["bench", "serve", "--url", &url, "--dataset", "hf:foo"]),
        "unknown dataset",
    );
    assert_clean_failure(
        &run(&[
            "bench",
            "serve",
            "--url",
            "http://127.0.0.1:9",
            "--num-prompts",
            "1",
            "--input-len",
            "2",
        ]),
        "tokenize",
    );
    assert_clean_failure(
        &run(&["bench", "sweep", "--url", &url, "--save", "x.json"]),
        "required",
    );
    assert_clean_failure(
        &run(&[
            "bench",
            "sweep",
            "--url",
            &url,
            "--request-rates",
            "0",
            "--save",
            "x.json",
        ]),
        "positive",
    );
}

/// Kills the child on drop, so a failing assertion does not leave a server running.
struct Killer(std::process::Child);
impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_against_ridge_serve() {
    let model = smollm2();
    let m = model.to_str().unwrap();
    let child = ridge()
        .args([
            "serve",
            "--model",
            m,
            "--port",
            "0",
            "--bandwidth-gbs",
            "10",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ridge serve");
    let mut server = Killer(child);
    // The server prints its address on stderr once it listens.
    let mut err = BufReader::new(server.0.stderr.take().unwrap());
    let mut url = None;
    for _ in 0..20 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(i) = line.find("http://") {
            url = line[i..].split_whitespace().next().map(str::to_string);
            break;
        }
    }
    let url = url.expect("ridge serve printed its address");
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = err.read_to_string(&mut sink);
    });

    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("ridge.json");
    let o = run(&[
        "bench",
        "serve",
        "--url",
        &url,
        "--model",
        m,
        "--num-prompts",
        "4",
        "--input-len",
        "24",
        "--output-len",
        "12",
        "--max-concurrency",
        "2",
        "--json",
        "--save",
        save.to_str().unwrap(),
    ]);
    let v = json_line(&o);
    assert_eq!(v["completed"], 4);
    assert_eq!(v["total_input_tokens"], 96);
    assert_eq!(v["total_output_tokens"], 48);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&save).unwrap()).unwrap();
    for r in saved["requests"].as_array().unwrap() {
        // The prompt built with ridge's tokenizer is exactly 24 tokens to the server too, and
        // every requested token arrived.
        assert_eq!(r["server_prompt_tokens"], 24, "{r}");
        assert_eq!(r["output_len"], 12);
        assert_eq!(r["output_len_source"], "usage");
        // Against the server's own clock for the same request: the client's TTFT includes the
        // HTTP round trip, so it is at least the server's and not far above; TPOT is the same
        // quantity seen from both ends of a loopback socket.
        let t = &r["server_timings"];
        let (s_ttft, s_tpot) = (f(t, &["ttft_ms"]), f(t, &["tpot_ms"]));
        let c_ttft = f(r, &["ttft_s"]) * 1e3;
        let c_tpot = (f(r, &["e2el_s"]) - f(r, &["ttft_s"])) / 11.0 * 1e3;
        assert!(
            c_ttft >= s_ttft - 1.0,
            "client TTFT {c_ttft} < server {s_ttft}"
        );
        assert!(
            c_ttft <= s_ttft * 1.5 + 50.0,
            "client TTFT {c_ttft} vs server {s_ttft}"
        );
        assert!(
            (c_tpot - s_tpot).abs() <= 0.25 * s_tpot + 5.0,
            "TPOT {c_tpot} vs server {s_tpot}"
        );
    }
}
