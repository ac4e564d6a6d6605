//! Which models `ridge serve` serves, and how it loads one: the [`Loader`] behind the
//! server's model pool.
//!
//! The list comes from `--model` (repeated; the first is the default), else every GGUF in
//! `--models-dir`, else the cache (the default model first, pulled if missing, then every
//! other model already in the cache). Loading a model is what a one-model `serve` always did
//! — resolve, map and repack the weights, size the KV cache, measure the floor, build the
//! engine — so the first model is loaded before the server listens and the others on first
//! use. The memory a model holds is its tensors' bytes (the repacked copy the kernels read)
//! plus its KV cache; a plan reads only the header, so the pool can make room before a load.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use ridge_engine::{Engine, EngineConfig, EngineCore};
use ridge_model::{registry, KvDtype, ModelConfig, KV_BLOCK_SIZE};
use ridge_roofline::FloorBandwidth;
use ridge_server::{Loader, ModelEntry, ModelState};
use ridge_tokenizer::ChatTemplate;

/// The settings every model is loaded with.
#[derive(Clone)]
pub struct LoadSettings {
    /// Most sequences decoded together.
    pub max_seqs: usize,
    /// Most tokens per step.
    pub max_batch_tokens: usize,
    /// Most requests waiting.
    pub max_queue: usize,
    /// KV cache size in MiB (`None`: room for `max_seqs` full contexts, at most 2048 MiB).
    pub kv_cache_mem: Option<usize>,
    /// KV element type.
    pub kv_dtype: KvDtype,
    /// Prefix caching.
    pub prefix_caching: bool,
    /// MiB for a hybrid model's recurrent-state checkpoints.
    pub state_cache_mem: usize,
    /// Read bandwidth named by the user, GB/s.
    pub bandwidth_gbs: Option<f64>,
    /// A chat template replacing each model's own.
    pub chat_template_file: Option<PathBuf>,
    /// Split reasoning from answers.
    pub parse_reasoning: bool,
    /// The thinking budget.
    pub reasoning_budget: Option<usize>,
    /// Longest silence on a stream before a keep-alive frame.
    pub sse_keepalive: std::time::Duration,
    /// Embedding pooling override.
    pub pooling: Option<ridge_engine::Pooling>,
    /// The prefix cache's disk tier: its folder and most bytes per model.
    pub prefix_cache_dir: Option<(PathBuf, u64)>,
    /// Speculative decoding (the default model only: a draft model matches one vocabulary).
    pub spec: crate::spec_args::SpecArgs,
    /// Where each engine's prefix-cache changes are published, and the topic template
    /// (`{model}` becomes the model's id).
    pub kv_events: Option<(ridge_server::kv_events::KvEventPublisher, String)>,
}

/// Loads the pool's models.
pub struct CliLoader {
    settings: LoadSettings,
    /// The default model's id (the one speculative decoding applies to).
    default_id: String,
    /// The first probe's figures, reused by later loads (a probe takes a second).
    probed: Mutex<Option<FloorBandwidth>>,
}

/// A model's size on disk: all its shards.
fn size_on_disk(path: &Path) -> u64 {
    ridge_gguf::shard_paths(path)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

/// KV tokens for a model of `cfg` under `s`, and their bytes.
fn kv_plan(s: &LoadSettings, cfg: &ModelConfig) -> Result<(usize, u64)> {
    let per_token = s.kv_dtype.token_bytes(cfg).max(1);
    let tokens = match s.kv_cache_mem {
        Some(0) => bail!("--kv-cache-mem must be at least 1 MiB"),
        Some(mib) => mib.saturating_mul(1 << 20) / per_token,
        None => s
            .max_seqs
            .saturating_mul(cfg.ctx_len)
            .min((2048usize << 20) / per_token),
    };
    if tokens < KV_BLOCK_SIZE {
        bail!("the KV cache must hold at least {KV_BLOCK_SIZE} tokens");
    }
    // The pool rounds down to whole blocks.
    let tokens = tokens / KV_BLOCK_SIZE * KV_BLOCK_SIZE;
    Ok((tokens, (tokens * per_token) as u64))
}

/// The bytes of a file's tensors (what the repacked weights take, near enough).
fn tensor_bytes(f: &ridge_gguf::GgufFile) -> u64 {
    f.tensors().iter().map(|t| t.size as u64).sum()
}

impl CliLoader {
    /// A loader with `settings`; `default_id` names the model speculative decoding is for.
    pub fn new(settings: LoadSettings, default_id: String) -> Self {
        CliLoader {
            settings,
            default_id,
            probed: Mutex::new(None),
        }
    }

    fn floor(&self, weights: f64) -> FloorBandwidth {
        let threads = ridge_kernels::pool::threads();
        if self.settings.bandwidth_gbs.is_some() {
            return FloorBandwidth::choose(weights, self.settings.bandwidth_gbs, threads);
        }
        let mut p = self.probed.lock().unwrap_or_else(|p| p.into_inner());
        match p.as_ref() {
            Some(FloorBandwidth {
                dram_gbs: Some(dram),
                llc,
                ..
            }) => {
                let (level, gbs) = ridge_roofline::memory_level(weights, *dram, *llc);
                FloorBandwidth {
                    level,
                    gbs,
                    dram_gbs: Some(*dram),
                    llc: *llc,
                }
            }
            _ => {
                let f = FloorBandwidth::choose(weights, None, threads);
                *p = Some(f);
                f
            }
        }
    }

    /// Loads `entry` (an `anyhow` error for the CLI's first load, which fails the command).
    pub fn load_model(&self, entry: &ModelEntry) -> Result<ModelState> {
        let s = &self.settings;
        let l = crate::load::load_quiet(Some(&entry.source), true)?;
        let template = match &s.chat_template_file {
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
                    eprintln!(
                        "note: {}: {e}; /v1/chat/completions will answer 400, /v1/completions works",
                        entry.id
                    );
                    None
                }
            },
        };
        let cfg = l.model.config().clone();
        let (kv_tokens, kv_bytes) = kv_plan(s, &cfg)?;
        let weights = l.model.weight_bytes_per_token() as f64;
        let floor = self.floor(weights);
        let mut memory = tensor_bytes(l.model.gguf()) + kv_bytes;
        let speculator = if entry.id == self.default_id {
            s.spec.build(&l.model, &l.tokenizer, kv_tokens)?
        } else {
            None
        };
        if let Some(d) = s
            .spec
            .draft_model
            .as_deref()
            .filter(|_| speculator.is_some())
        {
            if let Ok(p) = crate::models::resolve(d, true) {
                memory += size_on_disk(&p);
            }
        }
        let tokenizer = Arc::new(l.tokenizer);
        let disk_prefix_cache =
            s.prefix_cache_dir
                .as_ref()
                .map(|(dir, max_bytes)| ridge_model::DiskTierConfig {
                    dir: dir.clone(),
                    max_bytes: *max_bytes,
                    fingerprint: model_fingerprint(l.model.gguf()),
                });
        let mut core = EngineCore::new(
            l.model,
            tokenizer.clone(),
            EngineConfig {
                max_batch_tokens: s.max_batch_tokens,
                max_seqs: s.max_seqs,
                kv_cache_tokens: kv_tokens,
                prefix_caching: s.prefix_caching,
                max_queue: s.max_queue,
                bandwidth_gbs: Some(floor.gbs),
                memory_level: floor.level,
                dram_bandwidth_gbs: floor.dram_gbs,
                llc_bandwidth_gbs: floor.llc.map(|c| c.read_bandwidth_gbs),
                // A request that beats the floor has it probed again (best of bursts, the
                // faster reading kept); a given bandwidth is never probed.
                floor_probe: (floor.level != "given").then(|| {
                    let threads = ridge_kernels::pool::threads();
                    ridge_engine::FloorProbe(Arc::new(move || {
                        Some(floor.remeasured(weights, threads).gbs)
                    }))
                }),
                kv_dtype: s.kv_dtype,
                state_checkpoint_bytes: s.state_cache_mem << 20,
                disk_prefix_cache,
                ..Default::default()
            },
        )?;
        if let Some(sp) = speculator {
            core.set_speculator(sp)?;
        }
        if let Some(p) = s.pooling {
            core.set_pooling(p);
        }
        if let Some((publisher, topic)) = &s.kv_events {
            core.set_kv_event_sink(publisher.sink(&topic.replace("{model}", &entry.id)));
        }
        let engine = Engine::from_core(core)?;
        let mut st = ModelState::new(Arc::new(engine), tokenizer, template, entry.id.clone());
        st.aliases = entry.aliases.clone();
        st.parse_reasoning = s.parse_reasoning;
        st.reasoning_budget = s.reasoning_budget;
        st.sse_keepalive = s.sse_keepalive;
        st.memory_bytes = memory;
        Ok(st)
    }
}

/// A model file's identity for the prefix cache's disk tier: a hash of its size, its scalar
/// metadata, every tensor's name, type and shape, and the first and last bytes of each
/// tensor's data. Two files that differ in weights, quantization or positions' settings get
/// different fingerprints (so never read each other's K/V); the same file always gets the same.
fn model_fingerprint(f: &ridge_gguf::GgufFile) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((f.file_size() as u64).to_le_bytes());
    for (k, v) in f.metadata() {
        if !matches!(v, ridge_gguf::MetadataValue::Array(_)) {
            h.update(format!("{k}={v:?};").as_bytes());
        }
    }
    for t in f.tensors() {
        h.update(format!("{t:?};").as_bytes());
        let d = f.tensor_data(t);
        h.update(&d[..d.len().min(64)]);
        h.update(&d[d.len().saturating_sub(64)..]);
    }
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

impl Loader for CliLoader {
    fn plan(&self, entry: &ModelEntry) -> Result<u64, String> {
        let plan = || -> Result<u64> {
            let path = crate::models::resolve(&entry.source, true)?;
            let f = ridge_gguf::GgufFile::open(&path)?;
            let cfg = ModelConfig::from_gguf(&f)?;
            let (_, kv) = kv_plan(&self.settings, &cfg)?;
            Ok(tensor_bytes(&f) + kv)
        };
        plan().map_err(|e| format!("{e:#}"))
    }

    fn load(&self, entry: &ModelEntry) -> Result<ModelState, String> {
        self.load_model(entry).map_err(|e| format!("{e:#}"))
    }
}

/// Whether `name` is a GGUF file a models folder lists: `.gguf`, not a multimodal projector,
/// and for a split model only its first shard.
fn listed_gguf(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    if !lower.ends_with(".gguf") || lower.starts_with("mmproj") {
        return false;
    }
    crate::hub::select::shard_of(&lower).is_none_or(|(_, k, _)| k == 1)
}

/// A model's id from its file name: the name without `.gguf` (and without a split suffix).
fn id_of(file_name: &str) -> String {
    if let Some((prefix, _, _)) = crate::hub::select::shard_of(file_name) {
        return prefix.to_string();
    }
    file_name
        .strip_suffix(".gguf")
        .or_else(|| file_name.strip_suffix(".GGUF"))
        .unwrap_or(file_name)
        .to_string()
}

/// Every GGUF model in `dir` and its immediate subfolders, sorted by id.
pub fn scan_dir(dir: &Path) -> Result<Vec<ModelEntry>> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("--models-dir {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    let visit = |p: PathBuf, out: &mut Vec<ModelEntry>| {
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            return;
        };
        if p.is_file() && listed_gguf(name) {
            out.push(ModelEntry {
                id: id_of(name),
                aliases: Vec::new(),
                size_bytes: size_on_disk(&p),
                source: p.display().to_string(),
            });
        }
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Ok(sub) = std::fs::read_dir(&p) {
                for f in sub.flatten() {
                    visit(f.path(), &mut out);
                }
            }
        } else {
            visit(p, &mut out);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    for w in out.windows(2) {
        if w[0].id == w[1].id {
            bail!(
                "--models-dir {}: two models would both be called `{}` ({} and {})",
                dir.display(),
                w[0].id,
                w[0].source,
                w[1].source
            );
        }
    }
    if out.is_empty() {
        bail!("--models-dir {}: no .gguf files in it", dir.display());
    }
    Ok(out)
}

/// The cache's models: the default first (pulled at start if missing), then every other
/// registry model already cached, then every GGUF in the Hugging Face cache (named
/// `hf.co/OWNER/REPO:TAG`; where several snapshots hold the same name, the one `main` points
/// at).
pub fn cached_entries() -> Vec<ModelEntry> {
    let mut out = vec![ModelEntry {
        id: registry::DEFAULT_MODEL.to_string(),
        aliases: Vec::new(),
        source: registry::DEFAULT_MODEL.to_string(),
        size_bytes: registry::find(registry::DEFAULT_MODEL).map_or(0, |m| m.size),
    }];
    for m in registry::KNOWN_MODELS {
        if m.name != registry::DEFAULT_MODEL && registry::cached_path(m).exists() {
            out.push(ModelEntry {
                id: m.name.to_string(),
                aliases: Vec::new(),
                source: m.name.to_string(),
                size_bytes: m.size,
            });
        }
    }
    let mut hub = crate::hub::cache::models();
    hub.sort_by_key(|m| {
        crate::hub::cache::read_ref(&m.repo, "main").as_deref() != Some(m.commit.as_str())
    });
    for m in hub {
        let id = m.name();
        if out.iter().any(|e| e.id == id) {
            continue;
        }
        let size_bytes = m
            .files
            .iter()
            .map(|f| size_on_disk(&crate::hub::cache::snapshot_path(&m.repo, &m.commit, f)))
            .sum();
        out.push(ModelEntry {
            id,
            aliases: Vec::new(),
            source: m.path.display().to_string(),
            size_bytes,
        });
    }
    out
}

/// The entries of `--model` arguments (ids as given), with `--served-model-name`s: one
/// model takes them all (the first is its name, the rest aliases, as vLLM reads them);
/// several take one each, in order.
pub fn named_entries(models: &[String], served: &[String]) -> Result<Vec<ModelEntry>> {
    if models.len() > 1 && !served.is_empty() && served.len() != models.len() {
        bail!(
            "{} --model arguments but {} --served-model-name: give one name per model, in order",
            models.len(),
            served.len()
        );
    }
    let mut out: Vec<ModelEntry> = Vec::new();
    for (i, m) in models.iter().enumerate() {
        let (id, aliases) = match (models.len(), served.get(i)) {
            (1, Some(first)) => (first.clone(), served[1..].to_vec()),
            (_, Some(name)) => (name.clone(), Vec::new()),
            (_, None) => (m.clone(), Vec::new()),
        };
        let size_bytes = match registry::find(m) {
            Some(k) => k.size,
            None => size_on_disk(Path::new(m)),
        };
        out.push(ModelEntry {
            id,
            aliases,
            source: m.clone(),
            size_bytes,
        });
    }
    let mut names: Vec<&str> = out
        .iter()
        .flat_map(|e| std::iter::once(e.id.as_str()).chain(e.aliases.iter().map(String::as_str)))
        .collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("the model name `{}` is given twice", w[0]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_folder_lists_first_shards_and_no_projectors() {
        assert!(listed_gguf("Qwen2.5-0.5B-Q4_K_M.gguf"));
        assert!(listed_gguf("big-00001-of-00003.gguf"));
        assert!(!listed_gguf("big-00002-of-00003.gguf"));
        assert!(!listed_gguf("mmproj-model-f16.gguf"));
        assert!(!listed_gguf("notes.txt"));
        assert_eq!(id_of("big-00001-of-00003.gguf"), "big");
        assert_eq!(id_of("Qwen2.5-0.5B-Q4_K_M.gguf"), "Qwen2.5-0.5B-Q4_K_M");
    }

    #[test]
    fn served_names_go_one_per_model_or_all_to_one() {
        let m = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let one = named_entries(&m(&["a.gguf"]), &m(&["x", "y"])).unwrap();
        assert_eq!(
            (one[0].id.as_str(), one[0].aliases.clone()),
            ("x", m(&["y"]))
        );
        let two = named_entries(&m(&["a.gguf", "b.gguf"]), &m(&["x", "y"])).unwrap();
        assert_eq!((two[0].id.as_str(), two[1].id.as_str()), ("x", "y"));
        assert!(named_entries(&m(&["a.gguf", "b.gguf"]), &m(&["x"])).is_err());
        let e = named_entries(&m(&["a.gguf", "a.gguf"]), &[]).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }
}
