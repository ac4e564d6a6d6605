//! Several models in one server: loaded on first use, unloaded when idle or to make room.
//!
//! A server knows a fixed list of models ([`ModelEntry`]: `--model` arguments, a
//! `--models-dir`, or the cache). A request names one in its `model` field (or an alias; none
//! names the first); if it is not loaded, the request waits — bounded by the load timeout —
//! while a blocking task loads it through the server's [`Loader`], and every request for it
//! that arrives meanwhile waits on the same load. A load that fails is that request's error
//! (and its waiters'); the other models keep serving, and a later request tries again.
//!
//! Room is made before a load: when loading would pass `models_max` loaded models or the
//! `max_memory` budget (what the loaded models hold — weights and KV cache, as each reports —
//! plus what the new one will, planned from its header), the least recently used *idle* model
//! is unloaded, and so on. A model is idle when nothing but the pool holds its
//! [`ModelState`]: every request holds an `Arc` of it from the moment it is picked until its
//! answer is written, so a model with requests in flight is never evicted under them. When
//! nothing idle is left to unload, the load waits for a model to become idle. Unloading drops
//! the engine (its thread is joined and its memory freed) before the next model loads, so the
//! budget holds at the peak, not just on average.
//!
//! Idle models are also unloaded after their keep-alive (a per-request `keep_alive`, as
//! ollama has it, or the server's default) by a reaper task that ticks four times a second.
//!
//! Each loaded model has its own engine — scheduler, KV cache, thread — so requests to two
//! models run concurrently; their kernels share the process's one worker pool, which runs
//! one parallel region at a time, so two busy models take turns per kernel call.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::metrics::{Metrics, ModelMetrics};
use crate::state::ModelState;

/// A model the server can serve.
#[derive(Clone, Debug)]
pub struct ModelEntry {
    /// The name clients address it by.
    pub id: String,
    /// Other names it answers to.
    pub aliases: Vec<String>,
    /// Where it comes from (a path or a registry name), for listings and the loader.
    pub source: String,
    /// Its size on disk in bytes (all shards; 0 when unknown).
    pub size_bytes: u64,
}

/// Loads models for the pool (the CLI's, which knows the engine's settings).
pub trait Loader: Send + Sync {
    /// The bytes the model will hold once loaded (weights and KV cache), from its header.
    fn plan(&self, entry: &ModelEntry) -> Result<u64, String>;
    /// Loads the model (blocking: seconds for a large one).
    fn load(&self, entry: &ModelEntry) -> Result<ModelState, String>;
}

/// How long an idle model stays loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// Until evicted to make room.
    Forever,
    /// This long after its last request (zero: right after it).
    For(Duration),
}

impl KeepAlive {
    /// Parses ollama's forms: seconds as a number, or a duration such as `"5m"`, `"30s"`,
    /// `"1h30m"`, `"500ms"`; a negative value keeps the model loaded forever.
    pub fn parse(v: &Value) -> Result<KeepAlive, String> {
        let bad = || {
            format!(
                "expected seconds (a number) or a duration such as \"5m\" or \"30s\" \
                 (negative: forever), got {v}"
            )
        };
        match v {
            Value::Number(n) => {
                let s = n.as_f64().ok_or_else(bad)?;
                if s < 0.0 {
                    Ok(KeepAlive::Forever)
                } else if s.is_finite() && s < 1e12 {
                    Ok(KeepAlive::For(Duration::from_secs_f64(s)))
                } else {
                    Err(bad())
                }
            }
            Value::String(s) => Self::parse_str(s).ok_or_else(bad),
            _ => Err(bad()),
        }
    }

    /// [`KeepAlive::parse`] for a command-line value.
    pub fn parse_str(s: &str) -> Option<KeepAlive> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix('-') {
            return Self::parse_str(rest).map(|_| KeepAlive::Forever);
        }
        if s.is_empty() {
            return None;
        }
        if let Ok(secs) = s.parse::<f64>() {
            return (secs.is_finite() && secs < 1e12)
                .then(|| KeepAlive::For(Duration::from_secs_f64(secs)));
        }
        let mut total = 0f64;
        let mut rest = s;
        while !rest.is_empty() {
            let n = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter(|&n| n > 0)?;
            let value: f64 = rest[..n].parse().ok()?;
            rest = &rest[n..];
            let u = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let scale = match &rest[..u] {
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
            total += value * scale;
            rest = &rest[u..];
        }
        (total < 1e12).then(|| KeepAlive::For(Duration::from_secs_f64(total)))
    }

    /// Seconds, for listings (`None`: forever).
    pub fn seconds(self) -> Option<f64> {
        match self {
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(d.as_secs_f64()),
        }
    }
}

/// The pool's limits.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Most models loaded at once (0: no limit).
    pub models_max: usize,
    /// Most bytes the loaded models may hold together (weights and KV caches).
    pub max_memory: Option<u64>,
    /// How long an idle model stays loaded, unless a request says otherwise.
    pub keep_alive: KeepAlive,
    /// How long a request waits for its model to load (or for room to load it).
    pub load_timeout: Duration,
    /// `--model-alias PATTERN=MODEL` rules, tried in order for a name no model answers to.
    pub alias_rules: Vec<AliasRule>,
}

/// A `--model-alias` rule: requests naming a model that matches `pattern` (`*` matches any
/// run of characters, e.g. `claude-*`) are served by the model `model`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasRule {
    /// The glob a requested name must match.
    pub pattern: String,
    /// The served model's id or alias.
    pub model: String,
}

impl AliasRule {
    /// Parses `PATTERN=MODEL`.
    pub fn parse(s: &str) -> Result<AliasRule, String> {
        match s.split_once('=') {
            Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok(AliasRule {
                pattern: p.to_string(),
                model: m.to_string(),
            }),
            _ => Err(format!(
                "expected PATTERN=MODEL (e.g. 'claude-*=qwen'), got {s:?}"
            )),
        }
    }

    /// Whether `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        glob_matches(self.pattern.as_bytes(), name.as_bytes())
    }
}

/// `*`-only glob matching (greedy with backtracking to the last star; linear in practice).
fn glob_matches(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Which model answers a requested name, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The entry's index.
    pub index: usize,
    /// Set when the name was not the model's own: the requested name (served by an alias
    /// rule, or by the only model of a one-model server).
    pub substituted: Option<String>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            models_max: 0,
            max_memory: None,
            keep_alive: KeepAlive::Forever,
            load_timeout: Duration::from_secs(300),
            alias_rules: Vec::new(),
        }
    }
}

enum Load {
    Unloaded,
    Loading,
    Loaded(Arc<ModelState>),
}

struct Slot {
    load: Load,
    /// When a request last held the model (the reaper refreshes it while one does).
    last_used: Instant,
    keep_alive: KeepAlive,
    /// What the model will hold, from its header (planned once).
    planned: Option<u64>,
    /// Failed loads so far, and the last one's message.
    failures: u64,
    last_error: Option<String>,
}

/// One model as `/v1/models` and `ridge ps` show it.
#[derive(Clone)]
pub struct Listing {
    /// The entry.
    pub entry: ModelEntry,
    /// `loaded`, `loading` or `unloaded`.
    pub status: &'static str,
    /// The loaded model's state.
    pub model: Option<Arc<ModelState>>,
    /// Requests holding it now (loaded models).
    pub in_flight: usize,
    /// Seconds since a request last held it (loaded models).
    pub idle_seconds: Option<f64>,
    /// Its keep-alive.
    pub keep_alive: KeepAlive,
    /// Why its last load failed, if it did.
    pub last_error: Option<String>,
}

/// The models of a server (see the module docs).
pub struct ModelPool {
    entries: Vec<ModelEntry>,
    slots: Mutex<Vec<Slot>>,
    changed: tokio::sync::Notify,
    loader: Option<Arc<dyn Loader>>,
    config: PoolConfig,
    metrics: Arc<Metrics>,
    entry_metrics: Vec<Arc<ModelMetrics>>,
}

/// Drops unloaded models' states on a blocking thread (an engine's drop joins its thread),
/// after retiring their metrics.
fn retire(models: Vec<Arc<ModelState>>) {
    let any = !models.is_empty();
    for m in models {
        m.metrics.retire(m.engine.stats());
        drop(m);
    }
    if any {
        return_freed_memory();
    }
}

/// Hands the heap pages an unloaded model freed back to the OS. glibc keeps freed chunks in
/// its arenas (and, after a large free, raises its mmap threshold so later tensors come from
/// the heap), so without a trim a server cycling models holds the unloaded ones' memory as
/// resident pages and outgrows `--max-memory`.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free pages of the allocator's own arenas to the OS;
    // it is thread-safe, takes no pointers and leaves every live allocation untouched.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl ModelPool {
    /// A pool over `entries` (the first is the default), loading through `loader`.
    pub fn new(entries: Vec<ModelEntry>, loader: Arc<dyn Loader>, config: PoolConfig) -> Self {
        let metrics = Arc::new(Metrics::new());
        let entry_metrics = entries
            .iter()
            .map(|e| Arc::new(metrics.for_model(&e.id)))
            .collect();
        let slots = entries
            .iter()
            .map(|_| Slot {
                load: Load::Unloaded,
                last_used: Instant::now(),
                keep_alive: config.keep_alive,
                planned: None,
                failures: 0,
                last_error: None,
            })
            .collect();
        ModelPool {
            entries,
            slots: Mutex::new(slots),
            changed: tokio::sync::Notify::new(),
            loader: Some(loader),
            config,
            metrics,
            entry_metrics,
        }
    }

    /// A pool of one model, already loaded and never unloaded.
    pub fn single(mut model: ModelState) -> Self {
        let metrics = Arc::new(Metrics::new());
        let m = Arc::new(metrics.for_model(&model.model_name));
        model.metrics = m.clone();
        let entry = ModelEntry {
            id: model.model_name.clone(),
            aliases: model.aliases.clone(),
            source: model.model_name.clone(),
            size_bytes: 0,
        };
        ModelPool {
            entries: vec![entry],
            slots: Mutex::new(vec![Slot {
                load: Load::Loaded(Arc::new(model)),
                last_used: Instant::now(),
                keep_alive: KeepAlive::Forever,
                planned: None,
                failures: 0,
                last_error: None,
            }]),
            changed: tokio::sync::Notify::new(),
            loader: None,
            config: PoolConfig::default(),
            metrics,
            entry_metrics: vec![m],
        }
    }

    /// Puts an already loaded model (the server's first, loaded before it listens) into
    /// entry `i`'s slot, with the entry's names and metrics.
    pub fn insert_loaded(&self, i: usize, mut model: ModelState) {
        let Some(entry) = self.entries.get(i) else {
            return;
        };
        model.model_name = entry.id.clone();
        model.aliases = entry.aliases.clone();
        model.metrics = self.entry_metrics[i].clone();
        let mut slots = self.lock();
        slots[i].load = Load::Loaded(Arc::new(model));
        slots[i].last_used = Instant::now();
        drop(slots);
        self.changed.notify_waiters();
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The models the pool knows, the default first.
    pub fn entries(&self) -> &[ModelEntry] {
        &self.entries
    }

    /// The pool's limits.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        // No code panics while holding the lock; a poisoned one still holds valid slots.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every name clients may use, for error messages.
    fn names(&self) -> String {
        let mut v: Vec<String> = Vec::new();
        for e in &self.entries {
            v.push(format!("`{}`", e.id));
            v.extend(e.aliases.iter().map(|a| format!("`{a}`")));
        }
        v.join(", ")
    }

    /// The entry named exactly `name` — its id or one of its aliases (`None`: the default).
    pub fn index_of(&self, name: Option<&str>) -> Result<usize, ApiError> {
        let Some(name) = name else { return Ok(0) };
        self.entries
            .iter()
            .position(|e| e.id == name || e.aliases.iter().any(|a| a == name))
            .ok_or_else(|| self.not_found(name))
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{name}` does not exist. This server serves {}.",
                self.names()
            ),
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    /// The entry that serves a request naming `name`: the model it names exactly; else the
    /// first `--model-alias` rule it matches; else, on a server of one model, that model
    /// (llama-server's behaviour: agents name models such as `claude-…` that a local server
    /// cannot know); else a 404 naming the served models.
    pub fn resolve(&self, name: Option<&str>) -> Result<Resolved, ApiError> {
        let Some(name) = name else {
            return Ok(Resolved {
                index: 0,
                substituted: None,
            });
        };
        if let Ok(index) = self.index_of(Some(name)) {
            return Ok(Resolved {
                index,
                substituted: None,
            });
        }
        let index = match self.config.alias_rules.iter().find(|r| r.matches(name)) {
            Some(rule) => self.index_of(Some(&rule.model))?,
            None if self.entries.len() == 1 => 0,
            None => return Err(self.not_found(name)),
        };
        Ok(Resolved {
            index,
            substituted: Some(name.to_string()),
        })
    }

    /// The model a request body names (its `model` field; the default when it names none or
    /// names it with something other than a string — the adapter reports that), loaded if it
    /// is not, and the body's `keep_alive` applied.
    pub async fn for_body(
        self: &Arc<Self>,
        body: &Map<String, Value>,
    ) -> Result<Arc<ModelState>, ApiError> {
        let keep = match body.get("keep_alive") {
            None | Some(Value::Null) => None,
            Some(v) => Some(KeepAlive::parse(v).map_err(|e| ApiError::invalid("keep_alive", e))?),
        };
        let name = body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string);
        let r = self.resolve(name.as_deref())?;
        if let Some(asked) = &r.substituted {
            crate::access_log::note_model_substituted(asked, &self.entries[r.index].id);
        }
        self.get_index(r.index, keep).await
    }

    /// The model named `name` (an alias too; `None`: the default), loading it if needed.
    pub async fn get(
        self: &Arc<Self>,
        name: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<ModelState>, ApiError> {
        let i = self.index_of(name)?;
        self.get_index(i, keep_alive).await
    }

    async fn get_index(
        self: &Arc<Self>,
        i: usize,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<ModelState>, ApiError> {
        let m = self.acquire(i).await?;
        let mut slots = self.lock();
        slots[i].last_used = Instant::now();
        if let Some(k) = keep_alive {
            slots[i].keep_alive = k;
        }
        Ok(m)
    }

    async fn acquire(self: &Arc<Self>, i: usize) -> Result<Arc<ModelState>, ApiError> {
        let deadline = tokio::time::Instant::now() + self.config.load_timeout;
        let failures_before = self.lock()[i].failures;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the state is read, so no change between the two is missed.
            notified.as_mut().enable();
            let plan_needed = {
                let slots = self.lock();
                match &slots[i].load {
                    Load::Loaded(m) => return Ok(m.clone()),
                    Load::Loading => false,
                    Load::Unloaded if slots[i].failures > failures_before => {
                        return Err(self.load_failed(i, slots[i].last_error.clone()));
                    }
                    Load::Unloaded => slots[i].planned.is_none(),
                }
            };
            if plan_needed {
                self.plan(i).await?;
                continue;
            }
            if self.try_start_load(i)? {
                continue;
            }
            // A model becoming idle (its last request's state dropped) notifies nobody, so
            // waiting for room also looks again every 100 ms.
            let now = tokio::time::Instant::now();
            if now < deadline {
                let wake = (now + Duration::from_millis(100)).min(deadline);
                let _ = tokio::time::timeout_at(wake, notified).await;
                continue;
            }
            {
                let loading = matches!(self.lock()[i].load, Load::Loading);
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "model_load_timeout",
                    if loading {
                        format!(
                            "the model `{}` is still loading after {} s; try again shortly",
                            self.entries[i].id,
                            self.config.load_timeout.as_secs()
                        )
                    } else {
                        format!(
                            "no room to load the model `{}` within {} s: every loaded model \
                             has requests in flight (limits: {})",
                            self.entries[i].id,
                            self.config.load_timeout.as_secs(),
                            self.limits()
                        )
                    },
                ));
            }
        }
    }

    fn limits(&self) -> String {
        let mut v = Vec::new();
        if self.config.models_max > 0 {
            v.push(format!("--models-max {}", self.config.models_max));
        }
        if let Some(b) = self.config.max_memory {
            v.push(format!(
                "--max-memory {:.2} GiB",
                b as f64 / (1u64 << 30) as f64
            ));
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    fn load_failed(&self, i: usize, why: Option<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "model_load_failed",
            format!(
                "the model `{}` could not be loaded: {}",
                self.entries[i].id,
                why.unwrap_or_else(|| "unknown error".into())
            ),
        )
    }

    /// Plans entry `i`'s memory from its header (a blocking read, off the async threads).
    async fn plan(&self, i: usize) -> Result<(), ApiError> {
        let Some(loader) = self.loader.clone() else {
            return Err(self.load_failed(i, Some("this server cannot load models".into())));
        };
        let entry = self.entries[i].clone();
        let planned = tokio::task::spawn_blocking(move || loader.plan(&entry))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        match planned {
            Ok(bytes) => {
                if let Some(max) = self.config.max_memory {
                    if bytes > max {
                        return Err(ApiError::new(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "model_too_large",
                            format!(
                                "the model `{}` needs {:.2} GiB (weights and KV cache), more \
                                 than --max-memory {:.2} GiB on its own",
                                self.entries[i].id,
                                bytes as f64 / (1u64 << 30) as f64,
                                max as f64 / (1u64 << 30) as f64
                            ),
                        ));
                    }
                }
                self.lock()[i].planned = Some(bytes);
                Ok(())
            }
            Err(e) => {
                let mut slots = self.lock();
                slots[i].failures += 1;
                slots[i].last_error = Some(e.clone());
                Err(self.load_failed(i, Some(e)))
            }
        }
    }

    /// Starts loading entry `i` if there is room (making room by unloading idle models);
    /// `Ok(false)` when it must wait for room or another load.
    fn try_start_load(self: &Arc<Self>, i: usize) -> Result<bool, ApiError> {
        let Some(loader) = self.loader.clone() else {
            return Err(self.load_failed(i, Some("this server cannot load models".into())));
        };
        let mut slots = self.lock();
        if !matches!(slots[i].load, Load::Unloaded) {
            return Ok(false);
        }
        let need = slots[i].planned.unwrap_or(0);
        let (mut count, mut bytes) = slots
            .iter()
            .fold((0usize, 0u64), |(c, b), s| match &s.load {
                Load::Loaded(m) => (c + 1, b + m.memory_bytes),
                Load::Loading => (c + 1, b + s.planned.unwrap_or(0)),
                Load::Unloaded => (c, b),
            });
        // Idle models, least recently used first: the ones to unload, in order.
        let mut idle: Vec<(usize, Instant, u64)> = slots
            .iter()
            .enumerate()
            .filter_map(|(j, s)| match &s.load {
                Load::Loaded(m) if Arc::strong_count(m) == 1 => {
                    Some((j, s.last_used, m.memory_bytes))
                }
                _ => None,
            })
            .collect();
        idle.sort_by_key(|&(_, t, _)| t);
        let fits = |count: usize, bytes: u64| {
            (self.config.models_max == 0 || count < self.config.models_max)
                && self.config.max_memory.is_none_or(|max| bytes + need <= max)
        };
        let mut victims = Vec::new();
        let mut idle = idle.into_iter();
        while !fits(count, bytes) {
            let Some((j, _, b)) = idle.next() else {
                // Even with every idle model unloaded it would not fit: unload nothing, and
                // wait for a model to become idle.
                return Ok(false);
            };
            victims.push(j);
            count -= 1;
            bytes -= b;
        }
        let mut evicted = Vec::new();
        for j in victims {
            if let Load::Loaded(m) = std::mem::replace(&mut slots[j].load, Load::Unloaded) {
                evicted.push(m);
            }
            slots[j].keep_alive = self.config.keep_alive;
        }
        slots[i].load = Load::Loading;
        drop(slots);
        self.changed.notify_waiters();
        let entry = self.entries[i].clone();
        let metrics = self.entry_metrics[i].clone();
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            // The evicted models' memory is freed before the new model takes its own.
            retire(evicted);
            let r = loader.load(&entry).map(|mut m| {
                m.model_name = entry.id.clone();
                m.aliases = entry.aliases.clone();
                m.metrics = metrics;
                Arc::new(m)
            });
            let mut slots = pool.lock();
            let s = &mut slots[i];
            match r {
                Ok(m) => {
                    s.load = Load::Loaded(m);
                    s.last_used = Instant::now();
                    s.last_error = None;
                }
                Err(e) => {
                    s.load = Load::Unloaded;
                    s.failures += 1;
                    s.last_error = Some(e);
                }
            }
            drop(slots);
            pool.changed.notify_waiters();
        });
        Ok(true)
    }

    /// Every loaded model, the default first.
    pub fn loaded(&self) -> Vec<Arc<ModelState>> {
        self.lock()
            .iter()
            .filter_map(|s| match &s.load {
                Load::Loaded(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every model with its state, the default first.
    pub fn list(&self) -> Vec<Listing> {
        let slots = self.lock();
        self.entries
            .iter()
            .zip(slots.iter())
            .map(|(e, s)| {
                let (status, model) = match &s.load {
                    Load::Loaded(m) => ("loaded", Some(m.clone())),
                    Load::Loading => ("loading", None),
                    Load::Unloaded => ("unloaded", None),
                };
                // The pool's own reference, and this listing's, are not requests.
                let in_flight = model
                    .as_ref()
                    .map_or(0, |m| Arc::strong_count(m).saturating_sub(2));
                Listing {
                    entry: e.clone(),
                    status,
                    idle_seconds: model.as_ref().map(|_| {
                        if in_flight > 0 {
                            0.0
                        } else {
                            s.last_used.elapsed().as_secs_f64()
                        }
                    }),
                    model,
                    in_flight,
                    keep_alive: s.keep_alive,
                    last_error: s.last_error.clone(),
                }
            })
            .collect()
    }

    /// Unloads the model named `name` (`POST /models/unload`): now when it is idle (returns
    /// `true` once its memory is freed), else as soon as its last request ends (`false`).
    pub async fn unload(self: &Arc<Self>, name: &str) -> Result<bool, ApiError> {
        let i = self.index_of(Some(name))?;
        let victim = {
            let mut slots = self.lock();
            let s = &mut slots[i];
            match &s.load {
                Load::Loaded(m) if Arc::strong_count(m) == 1 => {
                    match std::mem::replace(&mut s.load, Load::Unloaded) {
                        Load::Loaded(m) => Some(m),
                        _ => None,
                    }
                }
                Load::Loaded(_) | Load::Loading => {
                    s.keep_alive = KeepAlive::For(Duration::ZERO);
                    return Ok(false);
                }
                Load::Unloaded => return Ok(true),
            }
        };
        if let Some(m) = victim {
            let _ = tokio::task::spawn_blocking(move || retire(vec![m])).await;
            self.changed.notify_waiters();
        }
        Ok(true)
    }

    /// Unloads idle models whose keep-alive has passed (and notes which are in use).
    fn reap(&self) -> Vec<Arc<ModelState>> {
        let mut slots = self.lock();
        let mut out = Vec::new();
        for s in slots.iter_mut() {
            let Load::Loaded(m) = &s.load else { continue };
            if Arc::strong_count(m) > 1 {
                s.last_used = Instant::now();
                continue;
            }
            if let KeepAlive::For(d) = s.keep_alive {
                if s.last_used.elapsed() >= d {
                    if let Load::Loaded(m) = std::mem::replace(&mut s.load, Load::Unloaded) {
                        out.push(m);
                    }
                    // The next load starts from the server's default again.
                    s.keep_alive = self.config.keep_alive;
                }
            }
        }
        out
    }

    /// Starts the reaper (on the current tokio runtime); it ends with the pool.
    pub fn spawn_reaper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { return };
                let gone = pool.reap();
                if !gone.is_empty() {
                    let _ = tokio::task::spawn_blocking(move || retire(gone)).await;
                    pool.changed.notify_waiters();
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_reads_ollamas_forms() {
        let p = |v: Value| KeepAlive::parse(&v);
        let secs = |s: f64| Ok(KeepAlive::For(Duration::from_secs_f64(s)));
        assert_eq!(p(json!(30)), secs(30.0));
        assert_eq!(p(json!(0)), secs(0.0));
        assert_eq!(p(json!(-1)), Ok(KeepAlive::Forever));
        assert_eq!(p(json!("5m")), secs(300.0));
        assert_eq!(p(json!("1h30m")), secs(5400.0));
        assert_eq!(p(json!("500ms")), secs(0.5));
        assert_eq!(p(json!("2.5s")), secs(2.5));
        assert_eq!(p(json!("45")), secs(45.0));
        assert_eq!(p(json!("-1m")), Ok(KeepAlive::Forever));
        for bad in [
            json!("5 minutes"),
            json!("m"),
            json!(""),
            json!(true),
            json!("5x"),
            json!(1e300),
        ] {
            assert!(p(bad.clone()).is_err(), "{bad}");
        }
    }

    struct NoLoader;
    impl Loader for NoLoader {
        fn plan(&self, _: &ModelEntry) -> Result<u64, String> {
            Err("no loads here".into())
        }
        fn load(&self, _: &ModelEntry) -> Result<ModelState, String> {
            Err("no loads here".into())
        }
    }

    fn pool(ids: &[&str], rules: &[&str]) -> ModelPool {
        let entries = ids
            .iter()
            .map(|id| ModelEntry {
                id: id.to_string(),
                aliases: vec![format!("{id}-alias")],
                source: id.to_string(),
                size_bytes: 0,
            })
            .collect();
        let config = PoolConfig {
            alias_rules: rules.iter().map(|r| AliasRule::parse(r).unwrap()).collect(),
            ..PoolConfig::default()
        };
        ModelPool::new(entries, Arc::new(NoLoader), config)
    }

    #[test]
    fn glob_patterns_match_as_shells_do() {
        let m = |p: &str, s: &str| glob_matches(p.as_bytes(), s.as_bytes());
        assert!(m("claude-*", "claude-sonnet-4-5-20250929"));
        assert!(m("*", ""));
        assert!(m("*haiku*", "claude-3-5-haiku-latest"));
        assert!(m("a*b*c", "aXbYbZc"));
        assert!(m("gpt-5", "gpt-5"));
        assert!(!m("gpt-5", "gpt-5-codex"));
        assert!(!m("claude-*", "claude"));
        assert!(!m("a*b*c", "aXbYbZ"));
        assert!(AliasRule::parse("claude-*").is_err());
        assert!(AliasRule::parse("=qwen").is_err());
        assert!(AliasRule::parse("x=").is_err());
    }

    #[test]
    fn names_resolve_exactly_then_by_rule_then_to_the_only_model() {
        let two = pool(
            &["qwen", "gemma"],
            &["claude-*haiku*=qwen", "claude-*=gemma-alias"],
        );
        let r = |p: &ModelPool, n: Option<&str>| p.resolve(n).map(|r| (r.index, r.substituted));
        assert_eq!(r(&two, None).unwrap(), (0, None));
        assert_eq!(r(&two, Some("gemma")).unwrap(), (1, None));
        assert_eq!(r(&two, Some("qwen-alias")).unwrap(), (0, None));
        assert_eq!(
            r(&two, Some("claude-3-5-haiku-latest")).unwrap(),
            (0, Some("claude-3-5-haiku-latest".into()))
        );
        assert_eq!(
            r(&two, Some("claude-opus-4-5")).unwrap(),
            (1, Some("claude-opus-4-5".into()))
        );
        let e = r(&two, Some("gpt-5")).unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert_eq!(e.code, Some("model_not_found"));
        assert!(
            e.message.contains("`gpt-5`")
                && e.message.contains("`qwen`")
                && e.message.contains("`gemma`"),
            "{}",
            e.message
        );
        // One model answers every name (llama-server's behaviour); explicit lookups stay exact.
        let one = pool(&["qwen"], &[]);
        assert_eq!(
            r(&one, Some("claude-sonnet-4-5")).unwrap(),
            (0, Some("claude-sonnet-4-5".into()))
        );
        assert!(one.index_of(Some("claude-sonnet-4-5")).is_err());
    }
}
