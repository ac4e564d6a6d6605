//! Offline throughput of the engine itself: `batch` concurrent requests through the real
//! scheduler (token budget, chunked prefill, paged KV), the numbers `ridge bench --batch` and
//! llama-batched-bench report.
//!
//! Definitions (llama-batched-bench's, so the two compare): prefill rate = all prompt tokens /
//! time until every request has its first token; aggregate decode rate = tokens sampled after
//! the last request's first token / time from that first token to the last token (the window in which
//! every request is decoding). TTFT and TPOT are per request (vLLM's definitions), averaged.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::request::{ChoiceTimings, Event, EventSink, Request};
use crate::EngineCore;

/// The outcome of one concurrent run.
#[derive(Clone, Debug)]
pub struct ThroughputRun {
    /// Concurrent requests.
    pub batch: usize,
    /// Prompt tokens per request.
    pub prompt_tokens: usize,
    /// Tokens generated per request.
    pub gen_tokens: usize,
    /// All prompt tokens / time until every request had its first token.
    pub prefill_tok_s: f64,
    /// Tokens sampled inside the all-decoding window (after the last request's first token).
    pub decode_tokens: usize,
    /// `decode_tokens` / the all-decoding window.
    pub decode_tok_s: f64,
    /// Mean TTFT, ms.
    pub ttft_ms: f64,
    /// Mean TPOT, ms.
    pub tpot_ms: f64,
    /// Engine steps run.
    pub steps: u64,
}

/// Runs `prompts.len()` greedy requests of `gen` tokens each (EOS ignored) at once.
pub fn run_concurrent(core: &mut EngineCore, prompts: &[Vec<u32>], gen: usize) -> ThroughputRun {
    let start = Instant::now();
    let steps0 = core
        .stats()
        .steps
        .load(std::sync::atomic::Ordering::Relaxed);
    let done: Arc<Mutex<Vec<ChoiceTimings>>> = Arc::default();
    // When every token was sampled (all requests): the decode window is only known at the end.
    let sampled: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let base_id = u64::MAX / 2;
    for (i, p) in prompts.iter().enumerate() {
        let (d, at) = (done.clone(), sampled.clone());
        let sink: EventSink = Arc::new(move |e| {
            match e {
                Event::Finish(f) => {
                    if let Ok(mut v) = d.lock() {
                        v.push(f.timings);
                    }
                }
                Event::Token(t) => {
                    if let Ok(mut v) = at.lock() {
                        v.push(t.at);
                    }
                }
            }
            true
        });
        let mut r = Request::greedy(p.clone(), gen);
        r.ignore_eos = true;
        // Refusals (a request that cannot fit) show up as missing timings below.
        let _ = core.submit(base_id + i as u64, r, sink, start);
    }
    while core.step() {}
    let t = done.lock().map(|v| v.clone()).unwrap_or_default();
    let b = prompts.len().max(1);
    let firsts: Vec<Instant> = t.iter().filter_map(|x| x.first_token).collect();
    let lasts: Vec<Instant> = t.iter().filter_map(|x| x.last_token).collect();
    let all_first = firsts.iter().max().copied().unwrap_or(start);
    let last = lasts.iter().max().copied().unwrap_or(all_first);
    let prompt_total: usize = prompts.iter().map(Vec::len).sum();
    let prefill_s = (all_first - start).as_secs_f64();
    // Tokens sampled after the all-decoding window opened (every request's first token is at
    // or before `all_first`, so none of them counts).
    let after = sampled
        .lock()
        .map(|v| v.iter().filter(|&&at| at > all_first).count())
        .unwrap_or(0);
    let window = (last - all_first).as_secs_f64();
    let mean = |f: &dyn Fn(&ChoiceTimings) -> Option<f64>| {
        let v: Vec<f64> = t.iter().filter_map(f).collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    ThroughputRun {
        batch: b,
        prompt_tokens: prompts.first().map_or(0, Vec::len),
        gen_tokens: gen,
        prefill_tok_s: if prefill_s > 0.0 {
            prompt_total as f64 / prefill_s
        } else {
            0.0
        },
        decode_tokens: after,
        decode_tok_s: if window > 0.0 {
            after as f64 / window
        } else {
            0.0
        },
        ttft_ms: mean(&|x| x.ttft_ms()),
        tpot_ms: mean(&|x| x.tpot_ms()),
        steps: core
            .stats()
            .steps
            .load(std::sync::atomic::Ordering::Relaxed)
            - steps0,
    }
}
