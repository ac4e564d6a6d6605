//! Prometheus metrics with vLLM's names under a `ridge:` prefix.
//!
//! Counters and gauges that the engine already keeps (tokens, preemptions, prefix-cache
//! lookups, queue and KV gauges) are copied from its lock-free [`EngineStats`] at scrape time,
//! so the engine loop never calls into a metrics library. Latency histograms are recorded here
//! from the engine's own timestamps when a choice finishes. The recorder is local to the
//! server (not the process-global one), so several servers — tests — can live in one process.

use std::sync::atomic::Ordering::Relaxed;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use std::time::Instant;

use ridge_engine::{ChoiceTimings, EngineStats, Event};

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];

/// The server's metrics registry: one Prometheus recorder for every model.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

/// One model's metric handles, each series labelled `model_name` (as vLLM's are). They live
/// as long as the server, not the load: counters continue across an unload and a reload.
pub struct ModelMetrics {
    running: Gauge,
    waiting: Gauge,
    kv_usage: Gauge,
    kv_window_usage: Gauge,
    roofline: Gauge,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    preemptions: Counter,
    prefix_queries: Counter,
    prefix_hits: Counter,
    spec_draft: Counter,
    spec_accepted: Counter,
    success_stop: Counter,
    success_length: Counter,
    success_abort: Counter,
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    queue: Histogram,
    lora_info: Gauge,
    /// The model's name (its series' label).
    name: String,
    /// The cache-shape series of the current load (its block count is a label).
    cache_series: std::sync::Mutex<Option<(u64, Gauge)>>,
    /// What earlier loads of the model counted (added to the live engine's totals).
    base: std::sync::Mutex<Totals>,
}

/// The engine's counters, as the metrics count them.
#[derive(Clone, Copy, Default, Debug)]
struct Totals {
    prompt: u64,
    generation: u64,
    preemptions: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    spec_draft: u64,
    spec_accepted: u64,
    stop: u64,
    length: u64,
    abort: u64,
}

impl Totals {
    fn of(s: &EngineStats) -> Self {
        Totals {
            prompt: s.prompt_tokens.load(Relaxed),
            generation: s.generation_tokens.load(Relaxed),
            preemptions: s.preemptions.load(Relaxed),
            prefix_queries: s.prefix_queries.load(Relaxed),
            prefix_hits: s.prefix_hits.load(Relaxed),
            spec_draft: s.spec_draft_tokens.load(Relaxed),
            spec_accepted: s.spec_accepted_tokens.load(Relaxed),
            stop: s.finished_stop.load(Relaxed),
            length: s.finished_length.load(Relaxed),
            abort: s.finished_abort.load(Relaxed) + s.finished_error.load(Relaxed),
        }
    }

    fn plus(self, o: Totals) -> Totals {
        Totals {
            prompt: self.prompt + o.prompt,
            generation: self.generation + o.generation,
            preemptions: self.preemptions + o.preemptions,
            prefix_queries: self.prefix_queries + o.prefix_queries,
            prefix_hits: self.prefix_hits + o.prefix_hits,
            spec_draft: self.spec_draft + o.spec_draft,
            spec_accepted: self.spec_accepted + o.spec_accepted,
            stop: self.stop + o.stop,
            length: self.length + o.length,
            abort: self.abort + o.abort,
        }
    }
}

static META: Metadata<'static> = Metadata::new("ridge", Level::INFO, Some("ridge_server"));

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        Metrics { recorder, handle }
    }

    /// Registers every metric of the model named `model` (idempotent per name: the same
    /// series come back).
    pub fn for_model(&self, model: &str) -> ModelMetrics {
        let r = &self.recorder;
        let key = |n: &'static str, extra: Vec<Label>| {
            let mut labels = vec![Label::new("model_name", model.to_string())];
            labels.extend(extra);
            Key::from_parts(n, labels)
        };
        let c = |n: &'static str| r.register_counter(&key(n, vec![]), &META);
        let g = |n: &'static str| r.register_gauge(&key(n, vec![]), &META);
        let h = |n: &'static str| r.register_histogram(&key(n, vec![]), &META);
        let success = |reason: &'static str| {
            r.register_counter(
                &key(
                    "ridge:request_success_total",
                    vec![Label::new("finished_reason", reason)],
                ),
                &META,
            )
        };
        // ridge serves no LoRA adapters: an empty adapter set, as vLLM exports it.
        let lora = r.register_gauge(
            &key(
                "ridge:lora_requests_info",
                vec![
                    Label::new("max_lora", "0"),
                    Label::new("running_lora_adapters", ""),
                    Label::new("waiting_lora_adapters", ""),
                ],
            ),
            &META,
        );
        ModelMetrics {
            running: g("ridge:num_requests_running"),
            waiting: g("ridge:num_requests_waiting"),
            kv_usage: g("ridge:kv_cache_usage_perc"),
            kv_window_usage: g("ridge:kv_cache_window_usage_perc"),
            roofline: g("ridge:roofline_efficiency"),
            prompt_tokens: c("ridge:prompt_tokens_total"),
            generation_tokens: c("ridge:generation_tokens_total"),
            preemptions: c("ridge:num_preemptions_total"),
            prefix_queries: c("ridge:prefix_cache_queries_total"),
            prefix_hits: c("ridge:prefix_cache_hits_total"),
            spec_draft: c("ridge:spec_decode_num_draft_tokens_total"),
            spec_accepted: c("ridge:spec_decode_num_accepted_tokens_total"),
            success_stop: success("stop"),
            success_length: success("length"),
            success_abort: success("abort"),
            ttft: h("ridge:time_to_first_token_seconds"),
            itl: h("ridge:inter_token_latency_seconds"),
            tpot: h("ridge:request_time_per_output_token_seconds"),
            e2e: h("ridge:e2e_request_latency_seconds"),
            queue: h("ridge:request_queue_time_seconds"),
            lora_info: lora,
            name: model.to_string(),
            cache_series: Default::default(),
            base: Default::default(),
        }
    }

    /// The Prometheus text exposition, with each loaded model's engine gauges and counters
    /// read now (`loaded`: the models' handles and their engines' stats).
    pub fn render(&self, loaded: &[(&ModelMetrics, &EngineStats)]) -> String {
        for (m, s) in loaded {
            m.publish(s);
            self.publish_cache_shape(m, s.kv_total_blocks.load(Relaxed));
        }
        self.handle.render()
    }

    /// [`render`](Metrics::render) with the `ridge:` prefix replaced by `prefix` (`vllm` for
    /// endpoint pickers left at vLLM's metric names).
    pub fn render_as(&self, loaded: &[(&ModelMetrics, &EngineStats)], prefix: &str) -> String {
        let text = self.render(loaded);
        if prefix == "ridge" {
            return text;
        }
        rename(&text, prefix)
    }

    /// What an endpoint picker reads beside the gauges: the cache's shape, as vLLM exports
    /// it. The block count is a label, so a reload with another size starts a new series and
    /// the old one reads 0.
    fn publish_cache_shape(&self, m: &ModelMetrics, blocks: u64) {
        let mut cur = m.cache_series.lock().unwrap_or_else(|p| p.into_inner());
        if cur.as_ref().is_some_and(|(b, _)| *b == blocks) {
            return;
        }
        if let Some((_, old)) = cur.take() {
            old.set(0.0);
        }
        let g = self.recorder.register_gauge(
            &Key::from_parts(
                "ridge:cache_config_info",
                vec![
                    Label::new("model_name", m.name.clone()),
                    Label::new("block_size", ridge_engine::KV_BLOCK_SIZE.to_string()),
                    Label::new("num_gpu_blocks", blocks.to_string()),
                ],
            ),
            &META,
        );
        g.set(1.0);
        *cur = Some((blocks, g));
    }
}

impl ModelMetrics {
    /// Handles that record into a registry nobody renders (a state built outside a pool).
    pub fn detached() -> Self {
        Metrics::new().for_model("")
    }

    /// Records a choice's first token, `secs` after its request arrived.
    pub fn first_token(&self, secs: f64) {
        self.ttft.record(secs);
    }

    /// Records one gap between consecutive tokens of a choice, seconds.
    pub fn inter_token(&self, secs: f64) {
        self.itl.record(secs);
    }

    /// Records the latencies of a finished choice (outcome counts come from the engine, which
    /// also sees choices whose client is gone). TTFT is not among them: [`Observer`] records it
    /// when the first token is sampled.
    pub fn finished(&self, t: &ChoiceTimings) {
        if let Some(v) = t.tpot_ms() {
            self.tpot.record(v / 1e3);
        }
        if let Some(v) = t.e2e_ms() {
            self.e2e.record(v / 1e3);
        }
        if let Some(v) = t.queue_ms() {
            self.queue.record(v / 1e3);
        }
        if let Some(e) = t.roofline_efficiency() {
            self.roofline.set(e);
        }
    }

    /// Copies the live engine's gauges and (with earlier loads' counts) counters.
    fn publish(&self, s: &EngineStats) {
        self.running.set(s.running.load(Relaxed) as f64);
        self.waiting.set(s.waiting.load(Relaxed) as f64);
        self.kv_usage.set(s.kv_usage());
        self.kv_window_usage.set(s.kv_window_usage());
        let base = *self.base.lock().unwrap_or_else(|p| p.into_inner());
        self.set_counters(base.plus(Totals::of(s)));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.lora_info.set(now);
    }

    fn set_counters(&self, t: Totals) {
        self.prompt_tokens.absolute(t.prompt);
        self.generation_tokens.absolute(t.generation);
        self.preemptions.absolute(t.preemptions);
        self.prefix_queries.absolute(t.prefix_queries);
        self.prefix_hits.absolute(t.prefix_hits);
        self.spec_draft.absolute(t.spec_draft);
        self.spec_accepted.absolute(t.spec_accepted);
        self.success_stop.absolute(t.stop);
        self.success_length.absolute(t.length);
        self.success_abort.absolute(t.abort);
    }

    /// The model is being unloaded: its engine's final counts carry over to the next load,
    /// and its gauges read zero until then.
    pub fn retire(&self, s: &EngineStats) {
        let mut base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        *base = base.plus(Totals::of(s));
        self.set_counters(*base);
        self.running.set(0.0);
        self.waiting.set(0.0);
        self.kv_usage.set(0.0);
        self.kv_window_usage.set(0.0);
    }
}

/// Observes one engine request's latencies on the engine thread, as its events are produced:
/// TTFT at each choice's first token, ITL at every later one, the rest at its end. Observing
/// here rather than where the response is written means a client that hangs up early is still
/// counted (vLLM observes TTFT at the first token too).
pub struct Observer {
    metrics: std::sync::Arc<ModelMetrics>,
    /// When each choice's latest token was sampled (`None`: none yet).
    last: std::sync::Mutex<Vec<Option<Instant>>>,
}

impl Observer {
    /// An observer for a request of `n` choices.
    pub fn new(metrics: std::sync::Arc<ModelMetrics>, n: usize) -> Self {
        Observer {
            metrics,
            last: std::sync::Mutex::new(vec![None; n]),
        }
    }

    /// Records what `ev` completes.
    pub fn observe(&self, ev: &Event) {
        let m = &self.metrics;
        // Only this request's events touch the lock, one at a time on the engine thread; a
        // poisoned lock (a panic elsewhere while held) still holds valid times.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            Event::Token(t) => {
                let Some(slot) = last.get_mut(t.index) else {
                    return;
                };
                match slot.replace(t.at) {
                    Some(prev) => m.inter_token(t.at.saturating_duration_since(prev).as_secs_f64()),
                    None => m.first_token(t.at.saturating_duration_since(t.arrival).as_secs_f64()),
                }
            }
            Event::Finish(f) => {
                // A choice whose only token was a stop token streamed no token event.
                if last.get(f.index).is_some_and(Option::is_none) {
                    if let Some(v) = f.timings.ttft_ms() {
                        m.first_token(v / 1e3);
                    }
                }
                m.finished(&f.timings);
            }
        }
    }
}

/// The exposition with every metric name's `ridge:` prefix replaced by `prefix:` (names start
/// a sample line or follow `# HELP ` / `# TYPE `; label values are left alone).
fn rename(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let (head, rest) = match line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            Some(rest) => (&line[..7], rest),
            None => ("", line),
        };
        out.push_str(head);
        match rest.strip_prefix("ridge:") {
            Some(r) => {
                out.push_str(prefix);
                out.push(':');
                out.push_str(r);
            }
            None => out.push_str(rest),
        }
        out.push('\n');
    }
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_renamed_and_label_values_left_alone() {
        let text = "# HELP ridge:x help\n# TYPE ridge:x gauge\nridge:x{a=\"ridge:y\"} 1\nother 2\n";
        assert_eq!(
            super::rename(text, "vllm"),
            "# HELP vllm:x help\n# TYPE vllm:x gauge\nvllm:x{a=\"ridge:y\"} 1\nother 2\n"
        );
    }
}
