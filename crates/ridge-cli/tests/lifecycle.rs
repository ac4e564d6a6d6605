//! The model file changed under a running server. ridge maps the GGUF read-only once at start
//! and never reopens it, so removing the path or renaming another file over it (what
//! `ridge pull` and every atomic updater do) changes nothing for the running process: the
//! mapping keeps the original inode alive. (Truncating or rewriting the *same* inode in place
//! is the one unsafe change; see RELIABILITY.md.)

mod common;

use common::server::Server;
use serde_json::{json, Value};

fn greedy(s: &Server) -> String {
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(st, 200, "{v}");
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

fn chat_ok(s: &Server) {
    let (st, v): (u16, Value) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "ignore_eos": true}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 4);
}

#[test]
fn model_file_replaced_or_removed_under_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::copy(common::smollm2(), &path).unwrap();
    let s = Server::start_model(&path, &["--kv-cache-mem", "32"]);
    let before = greedy(&s);

    // 1. Another file renamed over the path (atomic replace): here a file that is not a model
    //    at all. The server keeps serving from its mapping of the original.
    let junk = dir.path().join("junk.tmp");
    std::fs::write(&junk, b"not a gguf file").unwrap();
    std::fs::rename(&junk, &path).unwrap();
    assert_eq!(greedy(&s), before);
    chat_ok(&s);

    // 2. The path removed altogether.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(greedy(&s), before);
    chat_ok(&s);
    assert_eq!(s.get("/health").0, 200);

    // 3. A restart on the removed path fails cleanly; a restart on a restored file serves again.
    let o = common::run(&["run", "--model", path.to_str().unwrap(), "hi"]);
    common::assert_clean_failure(&o, "model.gguf");
    std::fs::copy(common::smollm2(), &path).unwrap();
    let s2 = Server::start_model(&path, &["--kv-cache-mem", "32"]);
    assert_eq!(greedy(&s2), before);
    let log = s.stderr.lock().unwrap().join("\n");
    assert!(!log.contains("panicked"), "{log}");
}
