//! The chat page `ridge serve` shows at `/`: served without the API key, self-contained (no
//! address outside the server), and driven end to end in headless Chromium (Debian's, through
//! Selenium; `scripts/test` installs both): a question streams an answer whose TTFT, TPOT and
//! roofline efficiency appear, beside the live server panel fed by `/state`.

mod common;

use common::server::Server;
use serde_json::Value;

const KEY: &str = "page-test-key";

#[test]
fn the_page_is_self_contained_and_state_is_live_json() {
    let s = Server::start(&["--api-key", KEY]);
    let r = Server::client().get(s.url("/")).send().unwrap();
    assert_eq!(r.status(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/html"), "{ct}");
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    let html = r.text().unwrap();
    for external in ["http://", "https://", "//cdn", "@import", "url("] {
        assert!(!html.contains(external), "page refers outside: {external}");
    }
    let (code, body) = s.get("/state");
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    for k in [
        "running",
        "waiting",
        "kv_cache_usage",
        "last_step_tokens",
        "generation_tokens",
    ] {
        assert!(v[k].is_number(), "{k} in {v}");
    }
    let models: Value = Server::client()
        .get(s.url("/v1/models"))
        .bearer_auth(KEY)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["model"], models["data"][0]["id"]);
    // The API itself still wants the key.
    let (code, _) = s.post("/v1/chat/completions", &serde_json::json!({"messages": []}));
    assert_eq!(code, 401);
}

#[test]
fn chromium_streams_an_answer_with_its_speed_on_the_page() {
    // A bandwidth far below the machine's, as a first probe slowed by other processes reads:
    // the answer beats its floor and the page must say "floor re-measured", not "235%".
    let s = Server::start(&["--api-key", KEY, "--bandwidth-gbs", "0.000001"]);
    let shot = common::repo().join("target/chat-page.png");
    let out = common::python_check(
        "chat_page_check.py",
        &[
            s.base.as_ref(),
            KEY.as_ref(),
            shot.as_os_str(),
            "remeasured".as_ref(),
        ],
    );
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert!(summary["answer"].as_str().unwrap().contains("Paris"));
    // A real screenshot: a PNG of the 1280×880 window.
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (w, h) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert!(w >= 1200 && h >= 700, "{w}x{h}");
    let log = s.stderr.lock().unwrap().join("\n");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn the_model_picker_sends_to_the_model_picked() {
    let (a, b) = (common::smollm2(), common::qwen2_0_5b());
    let s = Server::start_args(&[
        "--model",
        a.to_str().unwrap(),
        "--model",
        b.to_str().unwrap(),
        "--served-model-name",
        "smol",
        "--served-model-name",
        "qwen",
    ]);
    let out = common::python_check(
        "chat_page_models_check.py",
        &[s.base.as_ref(), "smol".as_ref(), "qwen".as_ref()],
    );
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert!(!summary["answer"].as_str().unwrap().is_empty(), "{summary}");
}
