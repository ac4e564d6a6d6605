//! KV-cache events on a real `ridge serve` (SmolLM2): a subscriber built as KV-aware routers
//! build one (`tools/tests/kv_events_check.py`: pyzmq, msgspec structs in vLLM's layout)
//! rebuilds the prefix cache from the events alone and must equal the server's own state
//! after stores, reuse, evictions, a flush, a late join through the replay socket and an
//! unload; a server without prefix caching publishes nothing; bad endpoints fail `serve` in
//! one line.

mod common;

use common::server::Server;

/// A loopback port free right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

#[test]
fn a_subscriber_rebuilds_the_prefix_cache_from_the_events() {
    let (p, r) = (free_port(), free_port());
    let pub_ep = format!("tcp://127.0.0.1:{p}");
    let rep_ep = format!("tcp://127.0.0.1:{r}");
    // A cache of 28 blocks: the check's 15 prompts (about 16 blocks each, sharing a preamble)
    // overflow it, so blocks are evicted as well as stored.
    let s = Server::start(&[
        "--kv-cache-mem",
        "10",
        "--kv-events-endpoint",
        &pub_ep,
        "--kv-events-replay-endpoint",
        &rep_ep,
        "--kv-events-topic",
        "kv@10.0.0.1@{model}",
    ]);
    let (_, models) = s.get("/v1/models");
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    let model = models["data"][0]["id"].as_str().unwrap().to_string();
    let topic = format!("kv@10.0.0.1@{model}");
    let out = common::python_check(
        "kv_events_check.py",
        &[
            s.base.as_ref(),
            pub_ep.as_ref(),
            rep_ep.as_ref(),
            topic.as_ref(),
            model.as_ref(),
        ],
    );
    for want in [
        "same hashes as the server",
        "evictions seen as BlockRemoved",
        "a late subscriber rebuilt the same cache",
        "after a flush",
        "published AllBlocksCleared",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn no_events_for_blocks_never_stored() {
    let p = free_port();
    let pub_ep = format!("tcp://127.0.0.1:{p}");
    let s = Server::start(&["--no-prefix-caching", "--kv-events-endpoint", &pub_ep]);
    let out = common::python_check(
        "kv_events_check.py",
        &["--silent".as_ref(), s.base.as_ref(), pub_ep.as_ref()],
    );
    assert!(out.contains("ok no events"), "{out}");
}

#[test]
fn bad_event_endpoints_fail_serve_in_one_line() {
    let model = common::smollm2();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = format!("tcp://127.0.0.1:{}", taken.local_addr().unwrap().port());
    for (args, want) in [
        (
            vec!["--kv-events-endpoint", "5557"],
            "expected tcp://HOST:PORT",
        ),
        (
            vec!["--kv-events-endpoint", "tcp://127.0.0.1:notaport"],
            "is not a port number",
        ),
        (vec!["--kv-events-endpoint", &busy], "cannot bind"),
        (
            vec!["--kv-events-replay-endpoint", "tcp://127.0.0.1:5558"],
            "required arguments were not provided",
        ),
    ] {
        let mut all = vec!["serve", "--port", "0", "--model", model.to_str().unwrap()];
        all.extend(&args);
        let o = common::run(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}
