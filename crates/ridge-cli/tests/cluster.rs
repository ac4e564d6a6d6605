//! `scripts/cluster` end to end: two real `ridge serve` replicas (SmolLM2, one thread each)
//! behind SGLang's model gateway (`sglang-router`, from `tools/requirements-test.txt`, run by
//! the test Python). Both replicas serve; a replica killed with `kill -9` while it runs
//! requests loses none of the accepted non-streaming ones (the gateway retries them on the
//! other); `--respawn` starts it again and the gateway sends it traffic again. No timing is
//! asserted: only that things happen, each within a generous deadline.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::server::{metric_in, Server};
use serde_json::{json, Value};

/// The running `scripts/cluster`; SIGTERM (it stops its replicas and gateway) when dropped.
struct Cluster {
    child: Child,
    lines: mpsc::Receiver<Value>,
    info: Value,
}

impl Cluster {
    fn start() -> Cluster {
        let model = common::smollm2();
        let log_dir =
            std::env::temp_dir().join(format!("ridge-cluster-test-{}", std::process::id()));
        let mut child = Command::new(common::test_python())
            .arg(common::repo().join("scripts/cluster"))
            .args(["--replicas", "2", "--threads", "1", "--port", "0"])
            .args(["--policy", "round_robin", "--respawn", "--json"])
            .arg("--ridge")
            .arg(env!("CARGO_BIN_EXE_ridge"))
            .arg("--model")
            .arg(&model)
            .arg("--log-dir")
            .arg(&log_dir)
            // A dead replica's circuit half-opens after 2 s instead of the script's 10 s.
            .args(["--router-args", "--cb-timeout-duration-secs 2"])
            .args(["--", "--bandwidth-gbs", "20"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run scripts/cluster with the test Python");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        let mut c = Cluster {
            child,
            lines,
            info: Value::Null,
        };
        c.info = c
            .lines
            .recv_timeout(Duration::from_secs(180))
            .unwrap_or_else(|_| {
                panic!(
                    "scripts/cluster did not come up (sglang-router comes with scripts/test's \
                 test Python; logs in {})",
                    log_dir.display()
                )
            });
        c
    }

    fn gateway(&self) -> String {
        self.info["gateway"].as_str().unwrap().to_string()
    }

    fn replica(&self, i: usize) -> (String, u64) {
        let r = &self.info["replicas"][i];
        (
            r["url"].as_str().unwrap().to_string(),
            r["pid"].as_u64().unwrap(),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Requests a replica has finished, from its own counters.
fn served(url: &str) -> f64 {
    let text = Server::client()
        .get(format!("{url}/metrics"))
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    ["stop", "length", "abort"]
        .iter()
        .map(|r| {
            metric_in(
                &text,
                &format!("ridge:request_success_total{{finished_reason=\"{r}\"}}"),
            )
            .unwrap_or(0.0)
        })
        .sum()
}

/// One non-streaming chat completion through the gateway: (status, completion tokens).
fn ask(gateway: &str, model: &str, i: usize, max_tokens: u64) -> (u16, u64) {
    // The gateway fills a missing `model` with "unknown": name the served model.
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": format!("Count from {i} to {}.", i + 20)}],
        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true,
    });
    match Server::client()
        .post(format!("{gateway}/v1/chat/completions"))
        .json(&body)
        .send()
    {
        Ok(r) => {
            let code = r.status().as_u16();
            let v: Value = r.json().unwrap_or(Value::Null);
            (code, v["usage"]["completion_tokens"].as_u64().unwrap_or(0))
        }
        Err(e) => panic!("the gateway did not answer: {e}"),
    }
}

#[test]
fn replicas_behind_the_gateway_survive_a_kill() {
    let mut c = Cluster::start();
    let gw = c.gateway();
    let (url0, _) = c.replica(0);
    let (url1, pid1) = c.replica(1);
    let models: Value = Server::client()
        .get(format!("{url0}/v1/models"))
        .send()
        .and_then(|r| r.json())
        .unwrap();
    let model = models["data"][0]["id"].as_str().unwrap().to_string();

    // Spread: round robin gives both replicas a share.
    for i in 0..6 {
        assert_eq!(ask(&gw, &model, i, 2), (200, 2));
    }
    let (s0, s1) = (served(&url0), served(&url1));
    assert!(s0 >= 1.0 && s1 >= 1.0, "both replicas serve: {s0} and {s1}");

    // kill -9 of replica 1 while it runs requests: every accepted request still completes.
    let n = 8;
    let workers: Vec<_> = (0..n)
        .map(|i| {
            let (gw, model) = (gw.clone(), model.clone());
            std::thread::spawn(move || ask(&gw, &model, 100 + i, 24))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let load: Value = Server::client()
            .get(format!("{url1}/get_load"))
            .send()
            .and_then(|r| r.json())
            .unwrap_or(Value::Null);
        if load[0]["num_reqs"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica 1 never ran a request: {load}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = Command::new("kill")
        .args(["-9", &pid1.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    for w in workers {
        assert_eq!(
            w.join().unwrap(),
            (200, 24),
            "a request in flight on the killed replica completes"
        );
    }

    // --respawn starts it again on its port; the gateway sends it traffic again.
    let restarted = loop {
        let v = c
            .lines
            .recv_timeout(Duration::from_secs(90))
            .expect("scripts/cluster restarts the killed replica");
        if v.get("restarted").is_some() {
            break v;
        }
    };
    assert_eq!(restarted["restarted"], 1);
    assert_eq!(restarted["url"].as_str().unwrap(), url1);
    assert_ne!(restarted["pid"].as_u64().unwrap(), pid1);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut i = 200;
    while served(&url1) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the restarted replica got no traffic"
        );
        assert_eq!(ask(&gw, &model, i, 2), (200, 2));
        i += 1;
    }
    // The cluster is still whole: the script did not exit.
    assert!(c.child.try_wait().unwrap().is_none());
}
