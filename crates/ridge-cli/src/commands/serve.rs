//! `ridge serve`: the OpenAI-compatible server. Loads the default model, starts its engine
//! thread, measures the machine's read bandwidth once (so every answer's `timings` can say how
//! close it ran to the roofline), and serves until SIGTERM/SIGINT, then drains in-flight
//! requests. Further models (`--model` again, `--models-dir`, or the cache) load on first use
//! and unload when idle or to make room (`serve_models`, and the server's model pool).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ridge_model::KV_BLOCK_SIZE;
use ridge_server::{AppState, KeepAlive, ModelPool, PoolConfig};

use super::serve_models::{self, CliLoader, LoadSettings};

/// Arguments of `serve`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name; repeat for several models (the first is the default).
    /// Without one (and without --models-dir): the cache's models, smollm2-135m first.
    #[arg(long, short)]
    model: Vec<String>,
    /// Serve every GGUF file in this folder (and its subfolders), each by its file name
    /// without `.gguf`.
    #[arg(long, conflicts_with = "model")]
    models_dir: Option<std::path::PathBuf>,
    /// Most models loaded at once; loading another unloads the least recently used idle one.
    #[arg(long, default_value_t = 4)]
    models_max: usize,
    /// Most memory the loaded models may hold together, GiB (weights plus KV caches);
    /// loading past it unloads the least recently used idle models first.
    #[arg(long)]
    max_memory: Option<f64>,
    /// How long an idle model stays loaded: seconds or a duration (`5m`, `1h`, `30s`; `0`
    /// unloads after each request, negative never). Default: forever for one `--model`,
    /// `5m` (ollama's) when serving several. Requests may set their own `keep_alive`.
    #[arg(long, allow_hyphen_values = true)]
    keep_alive: Option<String>,
    /// Seconds a request waits for its model to load (or for room to load it).
    #[arg(long, default_value_t = 300)]
    load_timeout: u64,
    /// Address to bind (loopback by default; use 0.0.0.0 to listen on every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` (or `x-api-key: KEY`) on the API routes.
    #[arg(long)]
    api_key: Option<String>,
    /// Name clients address the model by (default: the model argument). With one model,
    /// more names are aliases; with several, one name per `--model`, in order.
    #[arg(long)]
    served_model_name: Vec<String>,
    /// `PATTERN=MODEL`: requests naming a model that matches PATTERN (`*` matches anything,
    /// e.g. `claude-*=qwen`) are served by MODEL; repeat for more rules, tried in order.
    /// Without a matching rule, a server of one model answers every name with it; a server
    /// of several answers an unknown name with a 404 naming what it serves.
    #[arg(long, value_parser = ridge_server::AliasRule::parse)]
    model_alias: Vec<ridge_server::AliasRule>,
    /// Longest silence on a stream, seconds, before a keep-alive (Anthropic `ping`, else an SSE
    /// comment): streams open when a request is admitted, and a long prompt's prefill would
    /// otherwise be silence that agent clients' idle watchdogs and proxies time out on.
    #[arg(long, default_value_t = 5.0)]
    sse_keepalive: f64,
    /// The request log, one line per request on stderr: `text`, `json`, or `off`.
    #[arg(long, default_value = "text", value_parser = ["text", "json", "off"])]
    log_format: String,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 64)]
    max_seqs: usize,
    /// Most tokens through the model per step (decodes plus prefill chunks).
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// Most requests waiting for a slot before new ones get 429.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// KV cache size in MiB (default: room for max-seqs full contexts, at most 2048 MiB).
    #[arg(long)]
    kv_cache_mem: Option<usize>,
    /// KV cache element type: f16, or q8_0 (half the bytes).
    #[arg(long, default_value = "f16")]
    kv_cache_dtype: ridge_model::KvDtype,
    /// Disable prefix caching.
    #[arg(long)]
    no_prefix_caching: bool,
    /// Keep the prefix cache's blocks on disk in this folder too (content-addressed, checked
    /// on read, a subfolder per model): a restarted server, or a prefix evicted from memory,
    /// reads an agent's long system prompt and tools back instead of prefilling them again.
    #[arg(long)]
    prefix_cache_dir: Option<std::path::PathBuf>,
    /// Most GiB the prefix cache's disk folder keeps per model (least recently used dropped).
    #[arg(long, default_value_t = 16.0, requires = "prefix_cache_dir")]
    prefix_cache_disk: f64,
    /// Memory in MiB for checkpoints of a hybrid model's recurrent state, which prefix caching
    /// resumes from on it (0: a hybrid reuses no cached prefix).
    #[arg(long, default_value_t = ridge_model::DEFAULT_CHECKPOINT_BYTES >> 20)]
    state_cache_mem: usize,
    /// Largest request body, bytes.
    #[arg(long, default_value_t = ridge_server::DEFAULT_MAX_BODY)]
    max_body_bytes: usize,
    /// Read bandwidth in GB/s for the roofline figures (default: probe it at start, ~1 s).
    #[arg(long)]
    bandwidth_gbs: Option<f64>,
    /// A Jinja chat template to use instead of the model's own (`tokenizer.chat_template`).
    #[arg(long)]
    chat_template_file: Option<std::path::PathBuf>,
    /// Thinking models' reasoning: `auto` splits it from the answer (`reasoning_content`,
    /// Anthropic `thinking` blocks, Responses `reasoning` items); `none` leaves it in the
    /// content.
    #[arg(long, default_value = "auto", value_parser = ["auto", "none"])]
    reasoning_format: String,
    /// Most tokens a thinking model (`<think>`, `[THINK]`) may think before ridge writes the
    /// closing tag itself (default: unbounded; requests may set their own: Anthropic's
    /// `thinking.budget_tokens`, `reasoning_effort` low 1024 / medium 8192).
    #[arg(long)]
    reasoning_budget: Option<usize>,
    /// Pooling of `/v1/embeddings`: mean, last or cls (default: what the model file declares;
    /// a causal LM declares none, and then embeddings answer 400 until one is chosen).
    #[arg(long, value_parser = parse_pooling)]
    pooling: Option<ridge_engine::Pooling>,
    /// Prefix of the Prometheus metric names: `ridge`, or `vllm` (vLLM's exact names, for
    /// endpoint pickers left at their defaults).
    #[arg(long, default_value = "ridge", value_parser = ["ridge", "vllm"])]
    metrics_prefix: String,
    /// Publish the prefix cache's changes as vLLM's KV-event stream (ZeroMQ PUB) on this
    /// address, e.g. `tcp://*:5557`, for KV-aware routers (llm-d, NVIDIA Dynamo).
    #[arg(long)]
    kv_events_endpoint: Option<String>,
    /// Serve replay requests for missed KV-event batches (ZeroMQ ROUTER) on this address,
    /// e.g. `tcp://*:5558`.
    #[arg(long, requires = "kv_events_endpoint")]
    kv_events_replay_endpoint: Option<String>,
    /// Topic of the KV events; `{model}` becomes the model's id (llm-d expects
    /// `kv@POD_IP@{model}`).
    #[arg(long, default_value = "", requires = "kv_events_endpoint")]
    kv_events_topic: String,
    /// KV-event batches kept for replay.
    #[arg(long, default_value_t = ridge_server::kv_events::DEFAULT_REPLAY_BUFFER, requires = "kv_events_endpoint")]
    kv_events_buffer: usize,
    /// Seconds to let in-flight requests finish after SIGTERM.
    #[arg(long, default_value_t = 30)]
    drain_seconds: u64,
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
}

/// `--pooling`: the poolings that give one vector per input.
fn parse_pooling(s: &str) -> Result<ridge_engine::Pooling, String> {
    use ridge_engine::Pooling;
    match Pooling::parse(s) {
        Some(p @ (Pooling::Mean | Pooling::Last | Pooling::Cls)) => Ok(p),
        _ => Err(format!("expected mean, last or cls, got {s:?}")),
    }
}

/// Runs `serve`.
pub fn main(a: Args) -> Result<()> {
    if a.max_seqs == 0 || a.max_batch_tokens == 0 || a.max_queue == 0 {
        bail!("--max-seqs, --max-batch-tokens and --max-queue must be at least 1");
    }
    if let Some(bw) = a.bandwidth_gbs {
        if !(bw.is_finite() && bw > 0.0) {
            bail!("--bandwidth-gbs must be a positive number of GB/s, got {bw}");
        }
    }
    let addr: std::net::SocketAddr = format!("{}:{}", a.host, a.port)
        .parse()
        .or_else(|_| {
            use std::net::ToSocketAddrs;
            (a.host.as_str(), a.port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| it.next())
                .ok_or(())
        })
        .map_err(|_| {
            anyhow::anyhow!(
                "--host {:?} is not an address this machine can bind",
                a.host
            )
        })?;
    let several = a.models_dir.is_some() || a.model.len() != 1;
    let entries = match (&a.models_dir, a.model.is_empty()) {
        (Some(dir), _) => serve_models::scan_dir(dir)?,
        (None, false) => serve_models::named_entries(&a.model, &a.served_model_name)?,
        (None, true) => {
            let mut e = serve_models::cached_entries();
            if let Some(first) = a.served_model_name.first() {
                e[0].id = first.clone();
                e[0].aliases = a.served_model_name[1..].to_vec();
            }
            e
        }
    };
    // A draft model is a model too: a request may name it and get its own answers (it loads
    // as its own engine on first use, like any other served model).
    let mut entries = entries;
    if let Some(d) = a.spec.draft_model.as_deref() {
        if !entries.iter().any(|e| e.source == d || e.id == d) {
            entries.extend(serve_models::named_entries(&[d.to_string()], &[])?);
        }
    }
    if a.models_dir.is_some() && !a.served_model_name.is_empty() {
        bail!("--served-model-name names --model arguments; --models-dir names models by file");
    }
    let keep_alive = match a.keep_alive.as_deref() {
        Some(k) => KeepAlive::parse_str(k).ok_or_else(|| {
            anyhow::anyhow!(
                "--keep-alive {k:?}: expected seconds or a duration such as 5m, 30s, 1h (negative: forever)"
            )
        })?,
        None if several => KeepAlive::For(Duration::from_secs(300)),
        None => KeepAlive::Forever,
    };
    let max_memory = match a.max_memory {
        Some(g) if !(g.is_finite() && g > 0.0) => {
            bail!("--max-memory must be a positive number of GiB, got {g}")
        }
        Some(g) => Some((g * (1u64 << 30) as f64) as u64),
        None => None,
    };
    if !(a.sse_keepalive.is_finite() && a.sse_keepalive >= 0.01 && a.sse_keepalive <= 3600.0) {
        bail!("--sse-keepalive must be between 0.01 and 3600 seconds");
    }
    if !(a.prefix_cache_disk.is_finite() && a.prefix_cache_disk > 0.0) {
        bail!("--prefix-cache-disk must be a positive number of GiB");
    }
    if a.prefix_cache_dir.is_some() && a.no_prefix_caching {
        bail!("--prefix-cache-dir keeps the prefix cache on disk; it cannot go with --no-prefix-caching");
    }
    if a.load_timeout == 0 {
        bail!("--load-timeout must be at least 1 second");
    }
    if a.kv_events_buffer == 0 {
        bail!("--kv-events-buffer must be at least 1");
    }
    let alias_rules = a.model_alias.clone();
    for r in &alias_rules {
        if !entries
            .iter()
            .any(|e| e.id == r.model || e.aliases.contains(&r.model))
        {
            let served: Vec<String> = entries.iter().map(|e| format!("`{}`", e.id)).collect();
            bail!(
                "--model-alias {}={}: no served model is named `{}` (served: {})",
                r.pattern,
                r.model,
                r.model,
                served.join(", ")
            );
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // Bound before the first model loads, so the engine's first blocks are published and a
    // taken port fails the command at once.
    let kv_events = match &a.kv_events_endpoint {
        Some(endpoint) => {
            let cfg = ridge_server::kv_events::KvEventsConfig {
                endpoint: endpoint.clone(),
                replay_endpoint: a.kv_events_replay_endpoint.clone(),
                replay_buffer: a.kv_events_buffer,
            };
            let p = rt
                .block_on(ridge_server::kv_events::KvEventPublisher::bind(&cfg))
                .map_err(|e| anyhow::anyhow!("--kv-events-endpoint: {e}"))?;
            eprintln!("ridge serve: KV events on {}", p.bound);
            Some((p, a.kv_events_topic.clone()))
        }
        None => None,
    };
    let settings = LoadSettings {
        max_seqs: a.max_seqs,
        max_batch_tokens: a.max_batch_tokens,
        max_queue: a.max_queue,
        kv_cache_mem: a.kv_cache_mem,
        kv_dtype: a.kv_cache_dtype,
        prefix_caching: !a.no_prefix_caching,
        state_cache_mem: a.state_cache_mem,
        bandwidth_gbs: a.bandwidth_gbs,
        chat_template_file: a.chat_template_file.clone(),
        parse_reasoning: a.reasoning_format == "auto",
        reasoning_budget: a.reasoning_budget,
        sse_keepalive: Duration::from_secs_f64(a.sse_keepalive),
        pooling: a.pooling,
        prefix_cache_dir: a
            .prefix_cache_dir
            .clone()
            .map(|d| (d, (a.prefix_cache_disk * (1u64 << 30) as f64) as u64)),
        spec: a.spec.clone(),
        kv_events,
    };
    let loader = Arc::new(CliLoader::new(settings, entries[0].id.clone()));
    // The default model loads before the server listens: a bad file or flag fails the command.
    let first = loader.load_model(&entries[0])?;
    if let Some(max) = max_memory {
        if first.memory_bytes > max {
            bail!(
                "the model `{}` needs {:.2} GiB (weights and KV cache), more than --max-memory {:.2} GiB",
                entries[0].id,
                first.memory_bytes as f64 / (1u64 << 30) as f64,
                max as f64 / (1u64 << 30) as f64
            );
        }
    }
    let info = first.engine.info().clone();
    let threads = ridge_kernels::pool::threads();
    let pool = Arc::new(ModelPool::new(
        entries,
        loader,
        PoolConfig {
            models_max: a.models_max,
            max_memory,
            keep_alive,
            load_timeout: Duration::from_secs(a.load_timeout),
            alias_rules,
        },
    ));
    let name = pool.entries()[0].id.clone();
    let n_models = pool.entries().len();
    pool.insert_loaded(0, first);
    let mut state = AppState::new(pool.clone(), a.api_key);
    state.metrics_prefix = if a.metrics_prefix == "vllm" {
        "vllm"
    } else {
        "ridge"
    };
    state.log_format =
        ridge_server::access_log::LogFormat::parse(&a.log_format).unwrap_or_default();
    let state = Arc::new(state);
    let app = ridge_server::router(state.clone(), a.max_body_bytes);
    rt.block_on(async move {
        pool.spawn_reaper();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!(
            "ridge serve: {name} on http://{local} — {} KV blocks ({} tokens), {threads} threads, roofline floor at {:.1} GB/s ({}{}), speculative decoding: {}, embeddings pooling: {}{}",
            info.kv_total_blocks,
            info.kv_total_blocks * KV_BLOCK_SIZE,
            info.config.bandwidth_gbs.unwrap_or(0.0),
            info.config.memory_level,
            match (info.config.dram_bandwidth_gbs, info.config.llc_bandwidth_gbs) {
                (Some(d), Some(c)) => format!("; DRAM {d:.1} GB/s, LLC {c:.1} GB/s"),
                (Some(d), None) => format!("; DRAM {d:.1} GB/s"),
                _ => String::new(),
            },
            info.speculative.unwrap_or("off"),
            info.pooling,
            if n_models > 1 {
                format!("; {} more models load on first use", n_models - 1)
            } else {
                String::new()
            },
        );
        ridge_server::serve(
            listener,
            app,
            ridge_server::shutdown_signal(),
            Duration::from_secs(a.drain_seconds),
        )
        .await
        .context("server error")
    })?;
    eprintln!("ridge serve: stopped");
    Ok(())
}
