//! A real `ridge serve` on a free loopback port, killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running server.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `ridge serve` on the real model with extra args; waits until it listens.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_model(&super::smollm2(), extra)
    }

    /// Starts `ridge serve` on the model file `model` with extra args; waits until it listens.
    pub fn start_model(model: &std::path::Path, extra: &[&str]) -> Server {
        let mut args = vec!["--model", model.to_str().unwrap()];
        args.extend_from_slice(extra);
        Self::start_args(&args)
    }

    /// Starts `ridge serve` with exactly `args` (plus a free port and, unless `args` names
    /// one, a fixed bandwidth);
    /// waits until it listens.
    pub fn start_args(args: &[&str]) -> Server {
        Self::start_env(args, &[])
    }

    /// [`Server::start_args`] with extra environment variables.
    pub fn start_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Server {
        let mut cmd = super::ridge();
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .args(["serve", "--port", "0"])
            .args(if args.contains(&"--bandwidth-gbs") {
                &[][..]
            } else {
                &["--bandwidth-gbs", "20"][..]
            })
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn ridge serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("on http://") {
                    let rest = &line[i + "on http://".len()..];
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
                keep.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("server did not start: {:?}", lines.lock().unwrap()));
        Server {
            child,
            base: format!("http://{addr}"),
            stderr: lines,
        }
    }

    /// URL of a path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A blocking client with a generous timeout.
    pub fn client() -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(300))
            .build()
            .unwrap()
    }

    /// POSTs JSON; returns status and parsed body.
    pub fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let r = Self::client()
            .post(self.url(path))
            .json(body)
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    /// GETs a path as text.
    pub fn get(&self, path: &str) -> (u16, String) {
        let r = Self::client().get(self.url(path)).send().unwrap();
        (r.status().as_u16(), r.text().unwrap())
    }

    /// A metric's value from /metrics: the first sample named `name` whose labels include
    /// every label `name` gives (`ridge:x{finished_reason="abort"}`); a sample's other labels
    /// (every series carries its `model_name`) do not matter.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        metric_in(&text, name).unwrap_or_else(|| panic!("metric {name} missing"))
    }

    /// Waits up to 10 s for nothing to run or wait and no KV block to be held; true if so.
    pub fn drained(&self) -> bool {
        for _ in 0..100 {
            if self.metric("ridge:num_requests_running") == 0.0
                && self.metric("ridge:num_requests_waiting") == 0.0
                && self.metric("ridge:kv_cache_usage_perc") == 0.0
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads an SSE response: the JSON of every `data:` line before `[DONE]`, and whether
/// `[DONE]` came.
pub fn sse(resp: reqwest::blocking::Response) -> (Vec<serde_json::Value>, bool) {
    let mut out = Vec::new();
    for line in BufReader::new(resp).lines() {
        let line = line.unwrap();
        if let Some(d) = line.strip_prefix("data: ") {
            if d == "[DONE]" {
                return (out, true);
            }
            out.push(serde_json::from_str(d).unwrap());
        }
    }
    (out, false)
}

/// The first sample of `text` (a Prometheus exposition) matching `name` as
/// [`Server::metric`] reads it.
pub fn metric_in(text: &str, name: &str) -> Option<f64> {
    let (base, want) = match name.split_once('{') {
        Some((b, rest)) => (b, rest.trim_end_matches('}')),
        None => (name, ""),
    };
    let wanted: Vec<&str> = want.split(',').filter(|l| !l.is_empty()).collect();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let Some(rest) = l.strip_prefix(base) else {
                return false;
            };
            if let Some(labels) = rest.strip_prefix('{') {
                let labels = labels.split('}').next().unwrap_or("");
                let have: Vec<&str> = labels.split(',').collect();
                wanted.iter().all(|w| have.contains(w))
            } else {
                rest.starts_with(' ') && wanted.is_empty()
            }
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
