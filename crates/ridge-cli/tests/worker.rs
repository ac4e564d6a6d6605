//! ridge as a gateway's worker, on a real `ridge serve` (SmolLM2): the probe and control
//! endpoints SGLang's model gateway calls (`/server_info`, `/model_info`, `/get_load`,
//! `/flush_cache`, `/health_generate`), the fields routers add to bodies, and the metrics an
//! endpoint picker reads, under ridge's names and vLLM's.

mod common;

use common::server::Server;
use serde_json::{json, Value};

fn get_json(s: &Server, path: &str) -> (u16, Value) {
    let (code, text) = s.get(path);
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[test]
fn probes_flush_and_router_fields() {
    let s = Server::start(&["--max-seqs", "7", "--api-key", "k"]);
    let (_, state) = get_json(&s, "/state");
    let blocks = state["kv_total_blocks"].as_u64().unwrap();
    for path in ["/server_info", "/get_server_info"] {
        let (code, v) = get_json(&s, path);
        assert_eq!(code, 200, "{path} needs no key: {v}");
        assert_eq!(v["max_running_requests"], 7, "{v}");
        assert_eq!(v["max_total_num_tokens"], blocks * 16, "{v}");
        assert_eq!(v["version"], env!("CARGO_PKG_VERSION"), "{v}");
        assert!(v["served_model_name"].is_string(), "{v}");
    }
    for path in ["/model_info", "/get_model_info"] {
        let (code, v) = get_json(&s, path);
        assert_eq!(code, 200);
        assert_eq!(v["is_generation"], true, "{v}");
        assert_eq!(v["model_type"], "llama", "{v}");
    }
    let (code, v) = get_json(&s, "/health_generate");
    assert_eq!((code, &v["status"]), (200, &json!("ok")), "{v}");
    // The engine's gauges settle after the step that finished the probe's request.
    assert!(s.drained());
    let (code, v) = get_json(&s, "/get_load");
    assert_eq!(code, 200);
    assert_eq!(
        v,
        json!([{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}])
    );

    // A prompt long enough to fill cache blocks, with the fields SGLang's gateway adds.
    let prompt = "The history of the city begins with a small settlement by the river, ".repeat(6);
    let body = json!({"prompt": prompt, "max_tokens": 2, "temperature": 0,
                      "no_stop_trim": true, "skip_special_tokens": true, "ignore_eos": false,
                      "rid": "r-1", "return_logprob": false, "stream_output": false});
    let post = |path: &str, body: &Value, key: Option<&str>| {
        let mut r = Server::client().post(s.url(path)).json(body);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        let r = r.send().unwrap();
        let code = r.status().as_u16();
        (code, r.json::<Value>().unwrap())
    };
    let (code, v) = post("/v1/completions", &body, Some("k"));
    assert_eq!(code, 200, "router fields are ignored, never refused: {v}");
    let (code, v) = post("/v1/completions", &body, Some("k"));
    assert_eq!(code, 200);
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 32, "the second request reuses the prefix: {v}");
    assert!(s.drained());
    let (_, state) = get_json(&s, "/state");
    let held = state["kv_cached_blocks"].as_u64().unwrap();
    assert!(held > 0, "{state}");

    // Flushing needs the key; it drops exactly the unused cached blocks.
    let (code, _) = post("/flush_cache", &json!({}), None);
    assert_eq!(code, 401);
    let (code, v) = post("/flush_cache", &json!({}), Some("k"));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["flushed_blocks"], held, "{v}");
    let (_, state) = get_json(&s, "/state");
    assert_eq!(state["kv_cached_blocks"], 0, "{state}");
    let (_, v) = post("/v1/completions", &body, Some("k"));
    assert_eq!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{v}"
    );
    assert!(s.drained());
}

#[test]
fn picker_metrics_under_ridges_names_and_vllms() {
    let s = Server::start(&[]);
    let (_, state) = get_json(&s, "/state");
    let blocks = state["kv_total_blocks"].as_u64().unwrap();
    let model = state["model"].as_str().unwrap().to_string();
    let (_, text) = s.get("/metrics");
    // Every series carries its model's name, as vLLM's do.
    let line = format!(
        "ridge:cache_config_info{{model_name=\"{model}\",block_size=\"16\",num_gpu_blocks=\"{blocks}\"}} 1"
    );
    assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    assert!(
        text.lines().any(|l| l.starts_with(
            &format!("ridge:lora_requests_info{{model_name=\"{model}\",max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"}}")
        )),
        "{text}"
    );
    for name in [
        "ridge:num_requests_waiting",
        "ridge:num_requests_running",
        "ridge:kv_cache_usage_perc",
        "ridge:prefix_cache_queries_total",
        "ridge:prefix_cache_hits_total",
    ] {
        let sample = format!("{name}{{model_name=\"{model}\"}} ");
        assert!(
            text.lines().any(|l| l.starts_with(&sample)),
            "{sample} missing"
        );
    }
    drop(s);
    let s = Server::start(&["--metrics-prefix", "vllm"]);
    let (_, text) = s.get("/metrics");
    assert!(
        text.lines()
            .any(|l| l.starts_with("vllm:num_requests_waiting{model_name=")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("vllm:cache_config_info{")),
        "{text}"
    );
    assert!(!text.contains("ridge:"), "{text}");
}
