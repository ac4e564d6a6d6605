//! Several models in one `ridge serve` (issue #32 item 4), with the real registry models:
//! the request's `model` picks one, models load on first use and unload when idle or to make
//! room, a model with requests in flight is never unloaded under them, requests to two models
//! run at once, and a model that fails to load is that request's error while the others
//! keep serving.

mod common;

use std::time::Duration;

use common::server::Server;
use serde_json::{json, Value};

/// One greedy completion's text from `model`.
fn complete(s: &Server, model: &str, prompt: &str, n: usize) -> (u16, Value) {
    s.post(
        "/v1/completions",
        &json!({"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0}),
    )
}

fn text(v: &Value) -> String {
    v["choices"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `/v1/models`' entries by id: (status, in_flight).
fn statuses(s: &Server) -> Vec<(String, String)> {
    let (_, body) = s.get("/v1/models");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["status"]["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn status_of(s: &Server, id: &str) -> String {
    statuses(s)
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, st)| st)
        .unwrap_or_else(|| panic!("{id} not listed"))
}

/// Waits up to 15 s for `id` to reach `want`.
fn wait_status(s: &Server, id: &str, want: &str) -> bool {
    for _ in 0..150 {
        if status_of(s, id) == want {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// `ridge serve` on SmolLM2 (`smol`, the default) and Gemma 3 (`gemma`), with `extra`.
fn two_models(extra: &[&str]) -> Server {
    let (smol, gemma) = (common::smollm2(), common::gemma3());
    let mut args = vec![
        "--model",
        smol.to_str().unwrap(),
        "--model",
        gemma.to_str().unwrap(),
    ];
    args.extend([
        "--served-model-name",
        "smol",
        "--served-model-name",
        "gemma",
    ]);
    args.extend_from_slice(extra);
    Server::start_args(&args)
}

#[test]
fn requests_pick_their_model_and_the_least_recently_used_idle_one_makes_room() {
    let s = two_models(&["--models-max", "1", "--kv-cache-mem", "64"]);
    // The default loads before the server listens; the other waits for its first request.
    assert_eq!(
        statuses(&s),
        vec![
            ("smol".to_string(), "loaded".to_string()),
            ("gemma".to_string(), "unloaded".to_string())
        ]
    );
    let (st, a) = complete(&s, "smol", "The capital of France is", 12);
    assert_eq!(st, 200, "{a}");
    assert_eq!(a["model"], "smol");
    let smol_text = text(&a);

    // A request for the other model loads it, unloading the idle default (one at a time).
    let (st, b) = complete(&s, "gemma", "The capital of France is", 12);
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["model"], "gemma");
    assert_eq!(
        statuses(&s),
        vec![
            ("smol".to_string(), "unloaded".to_string()),
            ("gemma".to_string(), "loaded".to_string())
        ]
    );
    // Each model's own answer: the two differ, and a reloaded model answers as before.
    assert_ne!(text(&b), smol_text);
    let (st, again) = complete(&s, "smol", "The capital of France is", 12);
    assert_eq!(st, 200, "{again}");
    assert_eq!(text(&again), smol_text, "a reloaded model answers the same");
    assert_eq!(status_of(&s, "gemma"), "unloaded");

    // Without a model: the default. An unknown one: a 404 naming what is served.
    let (st, d) = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!((st, text(&d)), (200, smol_text.clone()));
    let (st, e) = complete(&s, "nope", "x", 1);
    assert_eq!(st, 404, "{e}");
    assert_eq!(e["error"]["code"], "model_not_found");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`nope`") && msg.contains("`smol`") && msg.contains("`gemma`"),
        "{msg}"
    );

    // Every model's series carry its name; counters survive an unload and a reload.
    let (_, metrics) = s.get("/metrics");
    let gen = |m: &str| {
        common::server::metric_in(
            &metrics,
            &format!("ridge:generation_tokens_total{{model_name=\"{m}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert_eq!(gen("gemma"), 12.0, "{metrics}");
    assert!(gen("smol") >= 36.0, "{metrics}");
}

#[test]
fn an_unload_never_cuts_a_request_in_flight_and_two_models_run_at_once() {
    let s = two_models(&["--models-max", "1", "--kv-cache-mem", "64"]);
    let url = s.url("/v1/completions");
    // A long request on the loaded model, and then one for the other model, which needs its
    // slot: the second waits for the first to finish instead of unloading it.
    let long = {
        let url = url.clone();
        std::thread::spawn(move || {
            Server::client()
                .post(&url)
                .json(&json!({"model": "smol", "prompt": "Once upon a time",
                    "max_tokens": 160, "temperature": 0, "ignore_eos": true}))
                .send()
                .unwrap()
                .json::<Value>()
                .unwrap()
        })
    };
    // Until the long request is running, the other is not sent.
    for _ in 0..200 {
        if s.metric("ridge:num_requests_running{model_name=\"smol\"}") >= 1.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (st, other) = complete(&s, "gemma", "Once upon a time", 4);
    let first = long.join().unwrap();
    assert_eq!(st, 200, "{other}");
    assert_eq!(first["choices"][0]["finish_reason"], "length", "{first}");
    assert_eq!(first["usage"]["completion_tokens"], 160, "{first}");

    // With room for both, requests to the two models are in flight together.
    drop(s);
    let s = two_models(&["--kv-cache-mem", "64"]);
    let (st, _) = s.post("/models/load", &json!({"model": "gemma"}));
    assert_eq!(st, 200);
    let spawn = |model: &'static str| {
        let url = url_of(&s);
        std::thread::spawn(move || {
            Server::client()
                .post(&url)
                .json(&json!({"model": model, "prompt": "Once upon a time",
                    "max_tokens": 96, "temperature": 0, "ignore_eos": true}))
                .send()
                .unwrap()
                .json::<Value>()
                .unwrap()
        })
    };
    let (a, b) = (spawn("smol"), spawn("gemma"));
    let mut both = false;
    for _ in 0..400 {
        let (_, state) = s.get("/state");
        let v: Value = serde_json::from_str(&state).unwrap();
        let running: Vec<u64> = v["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["running"].as_u64().unwrap_or(0))
            .collect();
        if running.iter().all(|&r| r >= 1) {
            both = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!(a["usage"]["completion_tokens"], 96, "{a}");
    assert_eq!(b["usage"]["completion_tokens"], 96, "{b}");
    assert!(both, "the two models never ran at the same time");
}

fn url_of(s: &Server) -> String {
    s.url("/v1/completions")
}

#[test]
fn idle_models_unload_after_their_keep_alive_and_on_request() {
    let s = two_models(&["--keep-alive", "-1", "--kv-cache-mem", "64"]);
    // A request's keep_alive (ollama's): 0 unloads the model once the request is done.
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"model": "gemma", "prompt": "Hi", "max_tokens": 2, "keep_alive": 0}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(wait_status(&s, "gemma", "unloaded"), "{:?}", statuses(&s));
    assert_eq!(
        status_of(&s, "smol"),
        "loaded",
        "the server's keep-alive is forever"
    );
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"model": "gemma", "prompt": "Hi", "max_tokens": 2, "keep_alive": "1s"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(status_of(&s, "gemma"), "loaded");
    assert!(wait_status(&s, "gemma", "unloaded"), "{:?}", statuses(&s));

    // Explicit loads and unloads, as llama-server's router has them.
    let (st, v) = s.post("/models/unload", &json!({"model": "smol"}));
    assert_eq!((st, v["status"].as_str()), (200, Some("unloaded")), "{v}");
    assert_eq!(status_of(&s, "smol"), "unloaded");
    let (st, v) = s.post("/models/load", &json!({"model": "smol"}));
    assert_eq!((st, v["status"].as_str()), (200, Some("loaded")), "{v}");
    let (_, body) = s.get("/v1/models");
    let v: Value = serde_json::from_str(&body).unwrap();
    let smol_entry = &v["data"][0];
    assert!(
        smol_entry["memory_bytes"].as_u64().unwrap() > 64 << 20,
        "{smol_entry}"
    );
    assert_eq!(
        smol_entry["keep_alive_seconds"],
        Value::Null,
        "{smol_entry}"
    );
    // `ridge ps` shows what is loaded, `--all` everything.
    let o = common::run(&["ps", "--url", &s.base]);
    let out = common::stdout(&o);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(
        (rows[0][0], rows[0][1], rows[0].last().copied()),
        ("smol", "loaded", Some("forever")),
        "{out}"
    );
    let o = common::run(&["ps", "--url", &s.base, "--all"]);
    let out = common::stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("gemma ") && l.contains("unloaded")),
        "{out}"
    );
    let o = common::run(&["ps", "--url", "http://127.0.0.1:9"]);
    common::assert_clean_failure(&o, "cannot reach a ridge server");
    let (st, v) = s.post("/models/load", &json!({"model": "../etc/passwd"}));
    assert_eq!(st, 404, "{v}");
    let (st, v) = s.post("/models/load", &json!({}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"model": "smol", "prompt": "Hi", "max_tokens": 2, "keep_alive": "soon"}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["param"], "keep_alive", "{v}");
}

#[test]
fn a_model_that_fails_to_load_is_that_requests_error_and_the_others_keep_serving() {
    let smol = common::smollm2();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00 not a model").unwrap();
    let s = Server::start_args(&[
        "--model",
        smol.to_str().unwrap(),
        "--model",
        bad.to_str().unwrap(),
        "--served-model-name",
        "smol",
        "--served-model-name",
        "broken",
    ]);
    let (st, v) = complete(&s, "broken", "Hi", 2);
    assert_eq!(st, 500, "{v}");
    assert_eq!(v["error"]["code"], "model_load_failed", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`broken` could not be loaded") && msg.contains("broken.gguf"),
        "{msg}"
    );
    // The other model is untouched, and the broken one is listed with why.
    let (st, v) = complete(&s, "smol", "Hi", 2);
    assert_eq!(st, 200, "{v}");
    let (_, body) = s.get("/v1/models");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"][1]["status"]["value"], "unloaded");
    assert!(v["data"][1]["status"]["error"].is_string(), "{v}");
    // Anthropic's route answers in Anthropic's error shape.
    let (st, v) = s.post(
        "/v1/messages",
        &json!({"model": "broken", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_eq!(st, 500, "{v}");
    assert_eq!(v["type"], "error", "{v}");
}

#[test]
fn a_models_folder_and_the_command_line_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::run(&["serve", "--models-dir", dir.path().to_str().unwrap()]);
    common::assert_clean_failure(&o, "no .gguf files");
    let o = common::run(&[
        "serve",
        "--model",
        "a.gguf",
        "--model",
        "b.gguf",
        "--served-model-name",
        "x",
    ]);
    common::assert_clean_failure(&o, "one name per model");
    let o = common::run(&["serve", "--keep-alive", "soon"]);
    common::assert_clean_failure(&o, "--keep-alive");
    let o = common::run(&["serve", "--max-memory", "0"]);
    common::assert_clean_failure(&o, "--max-memory");
    let smol = common::smollm2();
    let o = common::run(&[
        "serve",
        "--model",
        smol.to_str().unwrap(),
        "--max-memory",
        "0.01",
    ]);
    common::assert_clean_failure(&o, "more than --max-memory");
}

#[test]
fn the_draft_model_is_a_model_requests_can_name() {
    // SmolLM2 drafting for itself, its draft named by another path to the same file.
    let dir = tempfile::tempdir().unwrap();
    let draft = dir.path().join("draft.gguf");
    std::os::unix::fs::symlink(common::smollm2(), &draft).unwrap();
    let draft = draft.to_str().unwrap().to_string();
    let s = Server::start_args(&[
        "--model",
        "smollm2-135m",
        "--speculative",
        "draft",
        "--draft-model",
        &draft,
    ]);
    assert_eq!(
        statuses(&s),
        [
            ("smollm2-135m".to_string(), "loaded".to_string()),
            (draft.clone(), "unloaded".to_string())
        ]
    );
    let (code, v) = complete(&s, &draft, "The capital of France is", 8);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["model"], draft.as_str());
    let (_, main) = complete(&s, "smollm2-135m", "The capital of France is", 8);
    assert_eq!(text(&v), text(&main), "the same weights answer the same");
    assert_eq!(status_of(&s, &draft), "loaded");
}
