//! `ridge serve`: the OpenAI-compatible server. Loads the model, starts the engine thread,
//! measures the machine's read bandwidth once (so every answer's `timings` can say how close it
//! ran to the roofline), and serves until SIGTERM/SIGINT, then drains in-flight requests.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ridge_engine::{Engine, EngineConfig, EngineCore};
use ridge_model::KV_BLOCK_SIZE;
use ridge_roofline::FloorBandwidth;
use ridge_server::AppState;
use ridge_tokenizer::ChatTemplate;

/// Arguments of `serve`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name (default: smollm2-135m).
    #[arg(long, short)]
    model: Option<String>,
    /// Address to bind (loopback by default; use 0.0.0.0 to listen on every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` (or `x-api-key: KEY`) on the API routes.
    #[arg(long)]
    api_key: Option<String>,
    /// Name clients address the model by (default: the model argument).
    #[arg(long)]
    served_model_name: Option<String>,
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
    let name = a
        .model
        .clone()
        .unwrap_or_else(|| ridge_model::registry::DEFAULT_MODEL.to_string());
    let l = crate::load::load(a.model.as_deref())?;
    let template = match &a.chat_template_file {
        Some(path) => {
            let source = std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("cannot read --chat-template-file {}: {e}", path.display())
            })?;
            let text = |id: Option<u32>| {
                id.and_then(|i| l.tokenizer.token_str(i))
                    .unwrap_or("")
                    .to_string()
            };
            let t = ChatTemplate::new(
                source,
                text(l.tokenizer.bos_id()),
                text(l.tokenizer.eos_id()),
            )
            .map_err(|e| anyhow::anyhow!("--chat-template-file {}: {e}", path.display()))?;
            Some(t)
        }
        None => match ChatTemplate::from_gguf(l.model.gguf(), &l.tokenizer) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("note: {e}; /v1/chat/completions will answer 400, /v1/completions works");
                None
            }
        },
    };
    let cfg = l.model.config().clone();
    let kv_bytes_per_token = a.kv_cache_dtype.token_bytes(&cfg);
    let kv_tokens = match a.kv_cache_mem {
        Some(0) => bail!("--kv-cache-mem must be at least 1 MiB"),
        Some(mib) => mib.saturating_mul(1 << 20) / kv_bytes_per_token.max(1),
        None => {
            let want = a.max_seqs.saturating_mul(cfg.ctx_len);
            want.min((2048usize << 20) / kv_bytes_per_token.max(1))
        }
    };
    if kv_tokens < KV_BLOCK_SIZE {
        bail!("the KV cache must hold at least {KV_BLOCK_SIZE} tokens");
    }
    let threads = ridge_kernels::pool::threads();
    // A decode step reads the weights (and its sequences' K/V): when they fit the last-level
    // cache, the floor is the cache's bandwidth, not DRAM's.
    let weights = l.model.weight_bytes_per_token() as f64;
    let floor = FloorBandwidth::choose(weights, a.bandwidth_gbs, threads);
    let speculator = a.spec.build(&l.model, &l.tokenizer, kv_tokens)?;
    let tokenizer = Arc::new(l.tokenizer);
    let mut core = EngineCore::new(
        l.model,
        tokenizer.clone(),
        EngineConfig {
            max_batch_tokens: a.max_batch_tokens,
            max_seqs: a.max_seqs,
            kv_cache_tokens: kv_tokens,
            prefix_caching: !a.no_prefix_caching,
            max_queue: a.max_queue,
            bandwidth_gbs: Some(floor.gbs),
            memory_level: floor.level,
            dram_bandwidth_gbs: floor.dram_gbs,
            llc_bandwidth_gbs: floor.llc.map(|c| c.read_bandwidth_gbs),
            kv_dtype: a.kv_cache_dtype,
        },
    )?;
    if let Some(s) = speculator {
        core.set_speculator(s);
    }
    if let Some(p) = a.pooling {
        core.set_pooling(p);
    }
    let engine = Engine::from_core(core)?;
    let info = engine.info().clone();
    let mut state = AppState::new(
        Arc::new(engine),
        tokenizer,
        template,
        a.served_model_name.unwrap_or(name),
        a.api_key,
    );
    state.parse_reasoning = a.reasoning_format == "auto";
    state.reasoning_budget = a.reasoning_budget;
    state.metrics_prefix = if a.metrics_prefix == "vllm" {
        "vllm"
    } else {
        "ridge"
    };
    let state = Arc::new(state);
    let app = ridge_server::router(state.clone(), a.max_body_bytes);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!(
            "ridge serve: {} on http://{local} — {} KV blocks ({} tokens), {threads} threads, roofline floor at {:.1} GB/s ({}{}), speculative decoding: {}, embeddings pooling: {}",
            state.model_name,
            info.kv_total_blocks,
            info.kv_total_blocks * KV_BLOCK_SIZE,
            floor.gbs,
            floor.level,
            match (floor.dram_gbs, floor.llc) {
                (Some(d), Some(c)) => format!(
                    "; DRAM {d:.1} GB/s, {} MiB LLC {:.1} GB/s",
                    c.bytes >> 20,
                    c.read_bandwidth_gbs
                ),
                (Some(d), None) => format!("; DRAM {d:.1} GB/s"),
                _ => String::new(),
            },
            info.speculative.unwrap_or("off"),
            info.pooling,
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
