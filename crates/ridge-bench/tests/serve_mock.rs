//! `bench serve` against a scripted server: an in-test axum app that streams canned SSE chunks
//! with known delays, so the client's counting and timing can be checked exactly — token counts
//! to the token, TTFT and TPOT against the injected delays (lower bounds exact, upper bounds
//! generous, since a busy machine only ever makes a sleep longer).

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ridge_bench::serve::sweep::{SweepAxis, SweepChart};
use ridge_bench::serve::{LoadOptions, Session};
use serde_json::{json, Value};

/// How the mock answers.
struct Mock {
    /// Delay before the first text chunk.
    ttft: Duration,
    /// Delay between text chunks.
    gap: Duration,
    /// Tokens packed into one chunk.
    per_chunk: usize,
    /// Send a final `usage` chunk.
    usage: bool,
    /// Answer every completion with HTTP 500.
    fail: bool,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Mock {
    fn new(ttft_ms: u64, gap_ms: u64) -> Mock {
        Mock {
            ttft: Duration::from_millis(ttft_ms),
            gap: Duration::from_millis(gap_ms),
            per_chunk: 1,
            usage: true,
            fail: false,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }
}

/// Counts a stream as in flight from creation to drop.
struct InFlight(Arc<Mock>);
impl InFlight {
    fn new(m: Arc<Mock>) -> InFlight {
        let now = m.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        m.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(m)
    }
}
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The mock's tokenizer: one token per whitespace-separated word.
fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

async fn tokenize(Json(body): Json<Value>) -> Json<Value> {
    let n = words(body["prompt"].as_str().unwrap_or(""));
    Json(json!({ "tokens": vec![0; n] }))
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "mock-model"}]}))
}

async fn complete(st: Arc<Mock>, body: Value, chat: bool) -> Response {
    if st.fail {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "model exploded",
        )
            .into_response();
    }
    let n = body["max_tokens"].as_u64().unwrap_or(16) as usize;
    let prompt = if chat {
        body["messages"][0]["content"].as_str().unwrap_or("")
    } else {
        body["prompt"].as_str().unwrap_or("")
    };
    let prompt_tokens = words(prompt);
    let piece = |i: usize| {
        let text: String = (i..(i + st.per_chunk).min(n))
            .map(|k| format!("tok{k} "))
            .collect();
        if chat {
            json!({"choices": [{"index": 0, "delta": {"content": text}}]})
        } else {
            json!({"choices": [{"index": 0, "text": text}]})
        }
    };
    let mut events: Vec<(Duration, Value)> = Vec::new();
    if chat {
        // A role-only delta first, at once: it carries no text and must not stop the TTFT clock.
        events.push((
            Duration::ZERO,
            json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        ));
    }
    let mut i = 0;
    while i < n {
        let d = if i == 0 { st.ttft } else { st.gap };
        events.push((d, piece(i)));
        i += st.per_chunk;
    }
    let finish = if chat {
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    } else {
        json!({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    };
    events.push((Duration::ZERO, finish));
    if st.usage {
        events.push((
            Duration::ZERO,
            json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n}}),
        ));
    }
    let mut frames: Vec<(Duration, String)> = events
        .into_iter()
        .map(|(d, v)| (d, format!("data: {v}\n\n")))
        .collect();
    frames.push((Duration::ZERO, "data: [DONE]\n\n".into()));
    let guard = InFlight::new(st.clone());
    let stream =
        futures_util::stream::unfold((frames.into_iter(), guard), |(mut it, g)| async move {
            let (d, frame) = it.next()?;
            if !d.is_zero() {
                tokio::time::sleep(d).await;
            }
            Some((Ok::<_, Infallible>(Bytes::from(frame)), (it, g)))
        });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Starts the mock on a free loopback port; returns its base URL.
async fn start(mock: Mock) -> (String, Arc<Mock>) {
    let st = Arc::new(mock);
    let app = Router::new()
        .route(
            "/v1/completions",
            post(|State(s): State<Arc<Mock>>, Json(b): Json<Value>| complete(s, b, false)),
        )
        .route(
            "/v1/chat/completions",
            post(|State(s): State<Arc<Mock>>, Json(b): Json<Value>| complete(s, b, true)),
        )
        .route("/tokenize", post(tokenize))
        .route("/v1/models", get(models))
        .with_state(st.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), st)
}

fn opts(url: &str, n: usize, input: usize, output: usize) -> LoadOptions {
    LoadOptions {
        url: url.to_string(),
        num_prompts: n,
        input_len: input,
        output_len: Some(output),
        ..LoadOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_exact_and_timings_match_the_injected_delays() {
    let (url, _) = start(Mock::new(150, 30)).await;
    let s = Session::prepare(&opts(&url, 6, 20, 10)).await.unwrap();
    // The model name came from /v1/models, token counts from the server's /tokenize.
    assert_eq!(s.info.model.as_deref(), Some("mock-model"));
    assert!(
        s.prompts.iter().all(|p| words(&p.text) == 20),
        "exact prompt lengths"
    );
    let r = s.run().await.unwrap();
    let sum = &r.summary;
    assert_eq!((sum.completed, sum.failed), (6, 0));
    assert_eq!(sum.total_input_tokens, 120);
    assert_eq!(sum.total_output_tokens, 60);
    for rec in &r.records {
        assert_eq!(rec.output_len, 10);
        assert_eq!(rec.output_len_source, "usage");
        assert_eq!(
            rec.server_prompt_tokens,
            Some(20),
            "the server saw 20 tokens"
        );
        assert_eq!(rec.chunks, 10);
        assert_eq!(rec.itl_s.len(), 9);
    }
    // TTFT ≥ 150 ms (the delay) and not much more; TPOT = the 30 ms gap.
    let (ttft, tpot, itl) = (sum.ttft_ms.median, sum.tpot_ms.median, sum.itl_ms.median);
    assert!((150.0..400.0).contains(&ttft), "TTFT {ttft} ms");
    assert!((29.0..60.0).contains(&tpot), "TPOT {tpot} ms");
    assert!((29.0..60.0).contains(&itl), "ITL {itl} ms");
    // E2EL ≈ 150 + 9 · 30 = 420 ms.
    assert!(
        (420.0..800.0).contains(&sum.e2el_ms.median),
        "{:?}",
        sum.e2el_ms
    );
    assert!(sum.output_throughput > 0.0 && sum.request_throughput > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_is_respected() {
    let (url, mock) = start(Mock::new(60, 10)).await;
    let mut o = opts(&url, 6, 8, 5);
    o.max_concurrency = Some(2);
    let s = Session::prepare(&o).await.unwrap();
    let r = s.run().await.unwrap();
    assert_eq!(r.summary.completed, 6);
    assert_eq!(mock.max_in_flight.load(Ordering::SeqCst), 2);
    // Three waves of ≥ 60 + 4 · 10 = 100 ms each.
    assert!(r.summary.duration_s >= 0.3, "{}", r.summary.duration_s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_tokens_per_chunk_and_no_usage_fallback() {
    // Two tokens per chunk, usage reported: 12 tokens arrive in 6 chunks; TPOT divides by the
    // token count (11 gaps' worth), ITL sees chunk gaps.
    let mut m = Mock::new(50, 40);
    m.per_chunk = 2;
    let (url, _) = start(m).await;
    let r = Session::prepare(&opts(&url, 2, 5, 12))
        .await
        .unwrap()
        .run()
        .await
        .unwrap();
    for rec in &r.records {
        assert_eq!((rec.output_len, rec.chunks), (12, 6));
    }
    // (e2el − ttft) = 5 gaps of 40 ms over 11 → ≈ 18.2 ms; ITL ≈ 40 ms.
    let tpot = r.summary.tpot_ms.median;
    assert!((200.0 / 11.0 - 0.5..35.0).contains(&tpot), "TPOT {tpot}");
    assert!(r.summary.itl_ms.median >= 39.0, "{:?}", r.summary.itl_ms);

    // No usage chunk: the generated text is counted with the tokenizer (the server's here).
    let mut m = Mock::new(20, 5);
    m.usage = false;
    let (url, _) = start(m).await;
    let r = Session::prepare(&opts(&url, 3, 5, 7))
        .await
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(r.summary.total_output_tokens, 21);
    assert!(r.records.iter().all(|x| x.output_len_source == "tokenized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_ignores_role_only_chunks() {
    let (url, _) = start(Mock::new(120, 20)).await;
    let mut o = opts(&url, 2, 6, 4);
    o.chat = true;
    let s = Session::prepare(&o).await.unwrap();
    assert!(s.info.url.ends_with("/v1/chat/completions"));
    let r = s.run().await.unwrap();
    assert_eq!(r.summary.total_output_tokens, 8);
    // The role chunk arrives at once; TTFT must still wait for the first text.
    assert!(r.summary.ttft_ms.median >= 120.0, "{:?}", r.summary.ttft_ms);
    assert!(r.records.iter().all(|x| x.chunks == 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_follow_the_request_rate() {
    let (url, _) = start(Mock::new(5, 1)).await;
    let mut o = opts(&url, 12, 4, 2);
    o.request_rate = Some(40.0);
    o.seed = 3;
    let r = Session::prepare(&o).await.unwrap().run().await.unwrap();
    // Send times are the gamma schedule: non-decreasing, and the last lies where the schedule
    // put it (12 arrivals at 40/s: ~0.3 s; the exact value comes from the seed).
    let want = ridge_bench::serve::arrivals::arrival_times(12, Some(40.0), 1.0, 3).unwrap();
    for (rec, t) in r.records.iter().zip(&want) {
        assert!(
            rec.start_s >= *t - 1e-3,
            "sent early: {} < {t}",
            rec.start_s
        );
        assert!(rec.start_s < *t + 0.25, "sent late: {} vs {t}", rec.start_s);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_server_fails_fast_with_its_message() {
    let mut m = Mock::new(1, 1);
    m.fail = true;
    let (url, _) = start(m).await;
    let err = match Session::prepare(&opts(&url, 3, 4, 2)).await {
        Ok(_) => panic!("prepare should fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("HTTP 500") && err.contains("model exploded"),
        "{err}"
    );
    // Nothing listening: a clean error too.
    let err = match Session::prepare(&opts("http://127.0.0.1:9", 1, 4, 2)).await {
        Ok(_) => panic!("prepare should fail"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("tokenize") || err.contains("request"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_over_concurrency_draws_a_chart() {
    let (url, _) = start(Mock::new(40, 8)).await;
    let s = Session::prepare(&opts(&url, 4, 6, 6)).await.unwrap();
    let mut seen = 0;
    let points = s
        .sweep(&SweepAxis::Concurrency(vec![1, 4]), |_| seen += 1)
        .await
        .unwrap();
    assert_eq!((points.len(), seen), (2, 2));
    assert_eq!(points[0].max_concurrency, Some(1));
    assert!(points.iter().all(|p| p.summary.total_output_tokens == 24));
    // One in flight takes four times as long as four in flight.
    assert!(points[0].summary.duration_s > 2.0 * points[1].summary.duration_s);
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("sweep.svg");
    let chart = SweepChart {
        title: "mock".into(),
        subtitle: "4 prompts".into(),
        points: &points,
    };
    ridge_roofline::chart::render(&chart, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    for label in [
        "TPOT (ms)",
        "TTFT (ms)",
        "1 in flight",
        "4 in flight",
        "median",
        "p99",
    ] {
        assert!(text.contains(label), "{label} missing from the chart");
    }
}
