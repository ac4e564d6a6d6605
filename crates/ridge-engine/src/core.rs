//! The engine core: a synchronous step function over waiting and running sequences.
//!
//! # One mechanism (vLLM v1's)
//!
//! Every sequence (one choice of one request) tracks its tokens — prompt plus output so far —
//! and how many of them are `computed` (their K/V are in the cache). A step hands out a token
//! budget: first to running sequences in arrival order (a decode needs one token, an unfinished
//! prompt takes a chunk of what is left), then to waiting sequences. Prefill, chunked prefill
//! and decode are the same thing — "compute the next tokens" — and a sequence samples when its
//! computed tokens catch up with its tokens. A long prompt therefore never stalls the decodes
//! of others: it advances one chunk per step beside them, leaving a token of the budget to
//! each running decode wherever it stands in the order, and running prefills split the rest
//! equally. Nor does it hold back prompts that arrive after it: while a sequence that could be
//! admitted waits, running prefills leave half the budget to admissions (vLLM's long-prefill
//! threshold serves the same end) — an agent's short title request is answered while its
//! 20k-token prompt is still being computed, instead of after it. Chunk sizes never change a
//! sequence's bits.
//!
//! # Memory
//!
//! Blocks are reserved before the forward pass, so the pass itself never runs out. When a
//! running sequence cannot grow, the newest running sequence is preempted: its blocks are
//! released (full ones stay in the prefix cache) and it goes back to the front of the queue to
//! be recomputed later — output already streamed stays valid, because recomputation reproduces
//! the same K/V. New sequences are admitted only while every running sequence could still
//! grow by a block, which keeps preemption rare. A request that could not fit even in an empty
//! cache is refused at submission.
//!
//! # Prefix reuse and n > 1
//!
//! On admission a sequence adopts the longest cached run of full blocks matching its tokens
//! (always leaving at least one token to compute, since sampling needs its logits). After each
//! step, newly completed blocks are indexed. Choices 1..n of a request wait until choice 0 has
//! computed the prompt, then find its blocks in the cache: the prompt is shared, not copied.
//! On a hybrid model a prefix is reused only up to a checkpoint of the recurrent state, so a
//! prefill chunk stops at the boundaries where checkpoints are kept ([`EngineCore`]'s
//! `chunk`), and running sequences are bounded by their states' memory.
//!
//! # Embeddings
//!
//! An embedding request is a sequence that never samples (see `embed.rs`): its rows ask the
//! model for hidden states instead of logits, each step folds them into its pooling, and when
//! its prompt is computed it sends its vector and frees its blocks. It adopts no cached prefix
//! and indexes none of its blocks, so the prefix cache neither changes its vector nor is
//! changed by it; preempted, it starts its pooling over.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use ridge_model::{
    Batch, KvCache, KvDtype, KvEvent, Model, SeqId, Workspace, CHECKPOINT_INTERVAL, KV_BLOCK_SIZE,
};
use ridge_tokenizer::{IncrementalDecoder, Tokenizer};

use crate::constraint::{sample_constrained, Constraint, GrammarError};
use crate::embed::{check_embedding, EmbedState, EmbeddingEvent, EmbeddingRequest, EmbeddingSink};
use crate::floor::{FloorGauge, FloorProbe};
use crate::request::{
    ChoiceTimings, Event, EventSink, FinishEvent, Request, RequestId, TokenEvent, Usage,
};
use crate::sampler::{logprobs, Sampler, TokenHistory};
use crate::spec::{DraftSlot, SpecState, Speculator, StepCosts};
use crate::stats::EngineStats;
use crate::stop::StopMatcher;
use crate::{EngineError, FinishReason};

/// Engine limits and sizes.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Most tokens through the model per step (decodes + prefill chunks).
    pub max_batch_tokens: usize,
    /// Most sequences running at once.
    pub max_seqs: usize,
    /// KV cache capacity in tokens (rounded up to whole blocks).
    pub kv_cache_tokens: usize,
    /// Reuse cached prompt prefixes.
    pub prefix_caching: bool,
    /// Most requests waiting for admission before new ones are refused.
    pub max_queue: usize,
    /// Measured memory read bandwidth, GB/s, for per-request roofline figures.
    pub bandwidth_gbs: Option<f64>,
    /// The memory level that bandwidth is of (`"DRAM"`, `"LLC"`, `"given"`), reported beside
    /// the roofline figures.
    pub memory_level: &'static str,
    /// DRAM read bandwidth as probed, GB/s, reported beside the floor (`None` when the
    /// bandwidth was given).
    pub dram_bandwidth_gbs: Option<f64>,
    /// Last-level cache read bandwidth as probed, GB/s, reported beside the floor.
    pub llc_bandwidth_gbs: Option<f64>,
    /// Measures the bandwidth again when a request beats its floor (see `floor.rs`); `None`
    /// keeps the figure, raised only to what requests prove.
    pub floor_probe: Option<FloorProbe>,
    /// Element type of the KV cache.
    pub kv_dtype: KvDtype,
    /// A hybrid model's memory for recurrent-state checkpoints (what prefix caching reuses on
    /// it; 0 turns its prefix reuse off).
    pub state_checkpoint_bytes: usize,
    /// A hybrid model's memory for the recurrent states of running sequences (each holds its
    /// state and a copy at its latest block boundary): bounds how many run at once.
    pub state_pool_bytes: usize,
    /// Keep the prefix cache's blocks on disk too, read back after a restart or an eviction
    /// (models whose every layer keeps full K/V).
    pub disk_prefix_cache: Option<ridge_model::DiskTierConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_batch_tokens: 512,
            max_seqs: 64,
            kv_cache_tokens: 64 * 1024,
            prefix_caching: true,
            max_queue: 1024,
            bandwidth_gbs: None,
            memory_level: "DRAM",
            dram_bandwidth_gbs: None,
            llc_bandwidth_gbs: None,
            floor_probe: None,
            kv_dtype: KvDtype::F16,
            state_checkpoint_bytes: ridge_model::DEFAULT_CHECKPOINT_BYTES,
            state_pool_bytes: 4 << 30,
            disk_prefix_cache: None,
        }
    }
}

/// Per-request settings shared by its choices.
struct Shared {
    id: RequestId,
    sink: EventSink,
    stop_token_ids: Vec<u32>,
    ignore_eos: bool,
    logprobs: Option<usize>,
    max_new: usize,
    speculative: bool,
}

/// One choice of one request.
struct Seq {
    /// Unique for the engine's lifetime (the proposers' key).
    uid: u64,
    req: Arc<Shared>,
    index: usize,
    tokens: Vec<u32>,
    prompt_len: usize,
    computed: usize,
    kv: Option<SeqId>,
    admitted_once: bool,
    cached_tokens: usize,
    sampler: Sampler,
    history: TokenHistory,
    decoder: IncrementalDecoder,
    stop: StopMatcher,
    timings: ChoiceTimings,
    /// Set when the sequence is done; removed at the end of the step.
    done: bool,
    /// Draft sizing.
    spec: SpecState,
    /// This step's draft tokens (verified after the forward pass).
    draft: Vec<u32>,
    /// The grammar its output must match, if any.
    constraint: Option<Constraint>,
    /// A masked copy of the logits row (constrained sequences only).
    masked: Vec<f32>,
    /// Set for an embedding request: its pooling (it never samples).
    embed: Option<Box<EmbedState>>,
    /// Where it stands against its thinking budget, when it has one.
    think: Option<crate::think::ThinkState>,
}

impl Seq {
    fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }
}

/// Why a request was refused at submission.
pub type SubmitError = EngineError;

/// Where the prefix index's changes go (see [`EngineCore::set_kv_event_sink`]): called on the
/// engine thread with each step's changes, oldest first.
pub type KvEventSink = Box<dyn FnMut(Vec<KvEvent>) + Send>;

/// The synchronous engine: owns the model, the KV cache and every sequence.
pub struct EngineCore {
    model: Model,
    tokenizer: Arc<Tokenizer>,
    cfg: EngineConfig,
    kv: KvCache,
    ws: Workspace,
    batch: Batch,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    eog: Vec<u32>,
    stats: Arc<EngineStats>,
    roof: Option<Roof>,
    /// Scratch: what each scheduled sequence computes this step.
    plan: Vec<Planned>,
    /// Scratch: per token of the batch, whether the pass returns its hidden state.
    hidden: Vec<bool>,
    /// The pooling embeddings get by default: the file's declaration unless overridden.
    pooling: ridge_model::Pooling,
    /// Speculative decoding, when enabled.
    speculator: Option<Speculator>,
    next_uid: u64,
    /// Measured single-sequence step times, for sizing drafts.
    step_costs: StepCosts,
    /// Subscriber to the prefix index's changes, when KV events are published.
    kv_events: Option<KvEventSink>,
}

/// One sequence's share of a step.
#[derive(Clone, Copy, Debug)]
struct Planned {
    /// Index in `running`.
    ri: usize,
    /// Tokens to compute (besides drafts).
    n: usize,
    /// Draft tokens allowed (blocks reserved for them).
    k: usize,
}

impl EngineCore {
    /// Builds the engine state; the KV pool is allocated here.
    pub fn new(
        model: Model,
        tokenizer: Arc<Tokenizer>,
        cfg: EngineConfig,
    ) -> Result<Self, EngineError> {
        if cfg.max_batch_tokens == 0 || cfg.max_seqs == 0 {
            return Err(EngineError::InvalidParam(
                "max_batch_tokens and max_seqs must be at least 1".into(),
            ));
        }
        let mcfg = model.config().clone();
        let mut kv =
            KvCache::with_dtype(&mcfg, cfg.kv_cache_tokens.max(KV_BLOCK_SIZE), cfg.kv_dtype)?;
        kv.set_prefix_caching(cfg.prefix_caching);
        kv.set_checkpoint_bytes(cfg.state_checkpoint_bytes);
        if let (true, Some(d)) = (cfg.prefix_caching, &cfg.disk_prefix_cache) {
            kv.attach_disk_tier(d)
                .map_err(|e| EngineError::InvalidParam(e.to_string()))?;
        }
        let stats = Arc::new(EngineStats::default());
        EngineStats::set(&stats.kv_total_blocks, kv.total_blocks());
        let mut eog = tokenizer.eog_ids();
        eog.retain(|&t| (t as usize) < mcfg.vocab);
        // K and V rows per layer, or latent attention's one latent row.
        let (global_kv, windowed_kv) = mcfg.kv_token_bytes(|d| cfg.kv_dtype.row_bytes(d));
        let roof = cfg.bandwidth_gbs.filter(|&b| b > 0.0).map(|bw| Roof {
            weight_bytes: model.weight_bytes_per_token() as f64,
            kv_bytes_per_token: global_kv as f64,
            windowed_kv_bytes_per_token: windowed_kv as f64,
            // A hybrid's recurrent layers read and write their whole state every step.
            state_bytes: 2.0 * mcfg.recurrent.as_ref().map_or(0, |r| r.state_bytes()) as f64,
            window: mcfg.sliding_window.map_or(f64::INFINITY, |w| w as f64),
            gauge: FloorGauge::new(bw, cfg.floor_probe.clone()),
        });
        let pooling = model.pooling().unwrap_or(ridge_model::Pooling::None);
        Ok(EngineCore {
            roof,
            model,
            tokenizer,
            cfg,
            kv,
            ws: Workspace::new(),
            batch: Batch::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            eog,
            stats,
            plan: Vec::new(),
            hidden: Vec::new(),
            pooling,
            speculator: None,
            next_uid: 0,
            step_costs: StepCosts::default(),
            kv_events: None,
        })
    }

    /// The speculative decoding method in use, if any.
    pub fn speculative(&self) -> Option<&'static str> {
        self.speculator.as_ref().map(|s| s.proposer.method().name())
    }

    /// Disables speculative decoding, handing the speculator back.
    pub fn take_speculator(&mut self) -> Option<Speculator> {
        self.speculator.take()
    }

    /// Enables speculative decoding with this proposer and limits. On a hybrid model the
    /// verify pass journals the recurrent state so rejected drafts are taken back
    /// ([`Model::rewind`]); self-speculation is refused there (its drafting passes would run
    /// every recurrent layer: no cheaper than the model).
    pub fn set_speculator(&mut self, spec: Speculator) -> Result<(), EngineError> {
        if !self.kv.can_rewind() && spec.proposer.method() == crate::spec::SpecMethod::SelfSkip {
            return Err(EngineError::InvalidParam(format!(
                "self-speculation is not supported for {} (a hybrid model: its recurrent layers \
                 cannot be skipped, so the draft would cost as much as the model); use ngram or \
                 a draft model",
                self.model.config().arch.gguf_name()
            )));
        }
        if let Some(c) = spec.proposer.prior_guess_cost(&self.model) {
            self.step_costs.seed_draft(c);
        }
        self.speculator = Some(spec);
        Ok(())
    }

    /// The pooling embeddings get by default (what [`crate::EngineInfo::pooling`] reports):
    /// the one the model file declares (none without a declaration, or with a value ridge does
    /// not know), unless [`EngineCore::set_pooling`] chose another.
    pub fn pooling(&self) -> ridge_model::Pooling {
        self.pooling
    }

    /// Overrides the pooling the model file declares (`ridge serve --pooling`).
    pub fn set_pooling(&mut self, pooling: ridge_model::Pooling) {
        self.pooling = pooling;
    }

    /// The live floor bandwidth (`None` when the engine knows no bandwidth).
    pub fn floor(&self) -> Option<&Arc<FloorGauge>> {
        self.roof.as_ref().map(|r| &r.gauge)
    }

    /// The live statistics.
    pub fn stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// KV blocks in the pool.
    pub fn kv_total_blocks(&self) -> usize {
        self.kv.total_blocks()
    }

    /// KV blocks owned by sequences.
    pub fn kv_used_blocks(&self) -> usize {
        self.kv.used_blocks()
    }

    /// True when some sequence is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Sequences running / waiting.
    pub fn counts(&self) -> (usize, usize) {
        (self.running.len(), self.waiting.len())
    }

    /// Verifies the engine's bookkeeping: the KV pool against the block tables, every running
    /// sequence holding a cache sequence that covers its computed tokens, waiting ones holding
    /// none. For tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.kv.check_consistency()?;
        for s in &self.running {
            let seq = s.kv.ok_or("a running sequence has no cache sequence")?;
            if self.kv.seq_len(seq) != s.computed || s.computed > s.tokens.len() {
                return Err(format!(
                    "running sequence: {} computed, {} cached, {} tokens",
                    s.computed,
                    self.kv.seq_len(seq),
                    s.tokens.len()
                ));
            }
        }
        if self.waiting.iter().any(|s| s.kv.is_some()) {
            return Err("a waiting sequence holds cache blocks".into());
        }
        if self.running.len() > self.cfg.max_seqs {
            return Err(format!(
                "{} sequences running, limit {}",
                self.running.len(),
                self.cfg.max_seqs
            ));
        }
        Ok(())
    }

    /// Checks a request against the model and the cache without queueing it.
    pub fn check(&self, req: &Request) -> Result<(), SubmitError> {
        check_request(
            req,
            self.model.config().ctx_len,
            self.model.config().vocab,
            self.kv.total_blocks(),
        )
    }

    /// Queues a request (all its choices). Events go to `sink`.
    pub fn submit(
        &mut self,
        id: RequestId,
        req: Request,
        sink: EventSink,
        arrival: Instant,
    ) -> Result<(), SubmitError> {
        self.check(&req)?;
        let ctx = self.model.config().ctx_len;
        let shared = Arc::new(Shared {
            id,
            sink,
            stop_token_ids: req.stop_token_ids.clone(),
            ignore_eos: req.ignore_eos,
            logprobs: req.logprobs,
            max_new: req.max_tokens.min(ctx - req.prompt.len()),
            speculative: req.speculative,
        });
        let prior = self
            .speculator
            .as_ref()
            .map_or(0.8, |s| s.proposer.prior_acceptance());
        for index in 0..req.n {
            self.next_uid += 1;
            let mut sampling = req.sampling.clone();
            sampling.seed = sampling.seed.map(|s| s.wrapping_add(index as u64));
            self.waiting.push_back(Seq {
                uid: self.next_uid,
                spec: SpecState::with_prior(prior),
                draft: Vec::new(),
                req: shared.clone(),
                index,
                tokens: req.prompt.clone(),
                prompt_len: req.prompt.len(),
                computed: 0,
                kv: None,
                admitted_once: false,
                cached_tokens: 0,
                history: TokenHistory::new(&req.prompt, &sampling),
                sampler: Sampler::new(sampling),
                decoder: IncrementalDecoder::new(!req.render_special),
                stop: StopMatcher::new(&req.stop),
                timings: ChoiceTimings::new(arrival),
                done: false,
                constraint: req.constraint.clone(),
                masked: Vec::new(),
                embed: None,
                think: req.think_budget.clone().map(crate::think::ThinkState::new),
            });
        }
        self.publish_gauges();
        Ok(())
    }

    /// Checks an embedding request against the model and the cache without queueing it.
    pub fn check_embedding(&self, req: &EmbeddingRequest) -> Result<(), SubmitError> {
        if req.pooling == ridge_model::Pooling::Rank && self.model.rank_head().is_none() {
            return Err(EngineError::InvalidParam(
                "rank pooling needs a reranker's classifier head, and this model declares none"
                    .into(),
            ));
        }
        check_embedding(
            req,
            self.model.config().ctx_len,
            self.model.config().vocab,
            self.kv.total_blocks(),
            KV_BLOCK_SIZE,
        )
    }

    /// Queues an embedding request; its one [`EmbeddingEvent`] goes to `sink`.
    pub fn submit_embedding(
        &mut self,
        id: RequestId,
        req: EmbeddingRequest,
        sink: EmbeddingSink,
        arrival: Instant,
    ) -> Result<(), SubmitError> {
        self.check_embedding(&req)?;
        // Generation events never reach it: the sink of its shared settings is inert.
        let inert: EventSink = Arc::new(|_| true);
        let shared = Arc::new(Shared {
            id,
            sink: inert,
            stop_token_ids: Vec::new(),
            ignore_eos: true,
            logprobs: None,
            max_new: 0,
            speculative: false,
        });
        let sampling = crate::SamplingParams::greedy();
        self.next_uid += 1;
        self.waiting.push_back(Seq {
            uid: self.next_uid,
            spec: SpecState::with_prior(0.0),
            draft: Vec::new(),
            req: shared,
            index: 0,
            prompt_len: req.tokens.len(),
            computed: 0,
            kv: None,
            admitted_once: false,
            cached_tokens: 0,
            history: TokenHistory::new(&[], &sampling),
            sampler: Sampler::new(sampling),
            decoder: IncrementalDecoder::new(true),
            stop: StopMatcher::new(&[]),
            timings: ChoiceTimings::new(arrival),
            done: false,
            constraint: None,
            masked: Vec::new(),
            embed: Some(Box::new(EmbedState::new(
                req.pooling,
                sink,
                self.model.rank_head().cloned(),
            ))),
            think: None,
            tokens: req.tokens,
        });
        self.publish_gauges();
        Ok(())
    }

    /// Sends every change to the prefix index from now on to `sink` (vLLM's KV events: blocks
    /// stored and removed, all cleared); [`EngineCore::publish_kv_events`] delivers them.
    pub fn set_kv_event_sink(&mut self, sink: KvEventSink) {
        self.kv.log_events();
        self.kv_events = Some(sink);
    }

    /// Hands the prefix index's changes since the last call to the sink, if there is one and
    /// anything changed. The engine thread calls it after each round of commands and steps.
    pub fn publish_kv_events(&mut self) {
        if let Some(sink) = &mut self.kv_events {
            let events = self.kv.take_events();
            if !events.is_empty() {
                sink(events);
            }
        }
    }

    /// Tells the sink that every block left the index (the engine is stopping: its cache goes
    /// with it).
    pub fn clear_kv_events(&mut self) {
        if let Some(sink) = &mut self.kv_events {
            sink(vec![KvEvent::Cleared]);
        }
    }

    /// Checkpoints of a hybrid model's recurrent state held for prefix reuse (0 for a model
    /// without recurrent layers).
    pub fn state_checkpoints(&self) -> usize {
        self.kv.checkpoints()
    }

    /// The chained hashes of the blocks in the prefix index, sorted (what a KV-event
    /// subscriber's view must equal).
    pub fn indexed_blocks(&self) -> Vec<u64> {
        self.kv.indexed_hashes()
    }

    /// Drops the prefix cache's unused blocks (`POST /flush_cache`); returns how many.
    pub fn flush_prefix_cache(&mut self) -> usize {
        let n = self.kv.flush_prefix_cache();
        self.publish_gauges();
        n
    }

    /// Aborts every choice of a request, wherever it is; its blocks are freed now.
    pub fn abort(&mut self, id: RequestId) {
        let mut removed: Vec<Seq> = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].req.id == id {
                removed.extend(self.waiting.remove(i));
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].req.id == id {
                removed.push(self.running.remove(i));
            } else {
                i += 1;
            }
        }
        for mut s in removed {
            self.finish(&mut s, FinishReason::Aborted, None);
        }
        self.publish_gauges();
    }

    /// Aborts everything (shutdown).
    pub fn abort_all(&mut self) {
        let ids: Vec<RequestId> = self
            .waiting
            .iter()
            .chain(self.running.iter())
            .map(|s| s.req.id)
            .collect();
        for id in ids {
            self.abort(id);
        }
    }

    /// After a panic inside a step: fails every sequence with an error and starts over with an
    /// empty cache (its bookkeeping may be half-updated).
    pub fn recover_from_panic(&mut self) {
        let all: Vec<Seq> = self
            .waiting
            .drain(..)
            .chain(self.running.drain(..))
            .collect();
        let total = self.kv.total_blocks() * KV_BLOCK_SIZE;
        self.kv = KvCache::with_dtype(self.model.config(), total, self.cfg.kv_dtype)
            .unwrap_or_else(|_| KvCache::new(self.model.config(), total));
        self.kv.set_prefix_caching(self.cfg.prefix_caching);
        if let (true, Some(d)) = (self.cfg.prefix_caching, &self.cfg.disk_prefix_cache) {
            // It attached at start; should it fail now, the cache just runs without it.
            let _ = self.kv.attach_disk_tier(d);
        }
        if self.kv_events.is_some() {
            // The old index is gone with its cache, whatever its log still held.
            self.kv.log_events();
            self.clear_kv_events();
        }
        for mut s in all {
            s.kv = None;
            let msg = "internal error in the engine step; the request was dropped".to_string();
            self.finish(&mut s, FinishReason::Aborted, Some(msg));
        }
        self.plan.clear();
        self.publish_gauges();
    }

    /// Runs one scheduling step and forward pass. Returns false when there was nothing to do.
    pub fn step(&mut self) -> bool {
        if !self.has_work() {
            return false;
        }
        self.schedule();
        if self.plan.is_empty() {
            // Nothing fits this step (all running were preempted): admit next step.
            self.publish_gauges();
            return !self.waiting.is_empty();
        }
        let started = Instant::now();
        self.draft();
        let draft_ms = started.elapsed().as_secs_f64() * 1e3;
        // A lone decoding sequence's step time calibrates the draft sizing.
        let lone = match self.plan.as_slice() {
            [p] if p.n == 1 && self.running.len() == 1 && self.running[p.ri].embed.is_none() => {
                Some(1 + self.running[p.ri].draft.len())
            }
            _ => None,
        };
        self.batch.clear();
        self.hidden.clear();
        for p in &self.plan {
            let s = &self.running[p.ri];
            if let Some(seq) = s.kv {
                let from = s.computed;
                if let Some(e) = &s.embed {
                    // Hidden states instead of logits, for the rows its pooling reads.
                    self.batch
                        .push_seq(&s.tokens[from..from + p.n], from, seq, false);
                    let len = s.tokens.len();
                    self.hidden
                        .extend((from..from + p.n).map(|pos| e.wants(pos, len)));
                } else if s.draft.is_empty() {
                    let last = from + p.n == s.tokens.len();
                    self.batch
                        .push_seq(&s.tokens[from..from + p.n], from, seq, last);
                } else {
                    // The last token and every draft, each with logits; a hybrid records
                    // what it needs to take rejected drafts back.
                    self.kv.open_journal(seq);
                    self.batch.push(s.tokens[from], from, seq, true);
                    for (j, &t) in s.draft.iter().enumerate() {
                        self.batch.push(t, from + 1 + j, seq, true);
                    }
                }
                self.hidden.resize(self.batch.len(), false);
            }
        }
        EngineStats::add(&self.stats.steps, 1);
        EngineStats::add(&self.stats.step_tokens, self.batch.len());
        EngineStats::set(&self.stats.last_step_tokens, self.batch.len());
        let EngineCore {
            model,
            tokenizer,
            kv,
            ws,
            batch,
            running,
            eog,
            stats,
            plan,
            roof,
            hidden,
            ..
        } = self;
        let vocab = model.config().vocab;
        let mut grammars: Vec<&mut Constraint> = running
            .iter_mut()
            .filter_map(|s| s.constraint.as_mut())
            .filter(|c| c.is_active())
            .collect();
        let forward = if grammars.is_empty() {
            model.forward_outputs(batch, hidden, kv, ws)
        } else {
            // The next masks depend only on tokens already committed: compute them while the
            // forward pass runs (an error resurfaces, and is reported, when the mask is used).
            std::thread::scope(|scope| {
                scope.spawn(move || {
                    for c in grammars.iter_mut() {
                        let _ = c.prepare();
                    }
                });
                model.forward_outputs(batch, hidden, kv, ws)
            })
        };
        match forward {
            Ok(out) => {
                let (logits, states) = (out.logits, out.hidden);
                let d = model.config().d_model;
                let (mut row, mut hrow) = (0, 0);
                for p in plan.iter() {
                    let s = &mut running[p.ri];
                    if let Some(e) = s.embed.as_mut() {
                        let len = s.tokens.len();
                        for pos in s.computed..s.computed + p.n {
                            if e.wants(pos, len) {
                                e.add(&states[hrow * d..(hrow + 1) * d]);
                                hrow += 1;
                            }
                        }
                        s.computed += p.n;
                        if s.computed == len {
                            finish_seq(
                                s,
                                kv,
                                stats,
                                roof.as_ref(),
                                FinishReason::Stop,
                                String::new(),
                                None,
                            );
                        }
                        continue;
                    }
                    if !s.draft.is_empty() {
                        let rows = s.draft.len() + 1;
                        let l = &logits[row * vocab..(row + rows) * vocab];
                        row += rows;
                        verify(s, l, vocab, tokenizer, eog, stats, model, kv, roof.as_ref());
                        continue;
                    }
                    s.computed += p.n;
                    if s.computed == s.tokens.len() {
                        let l = &logits[row * vocab..(row + 1) * vocab];
                        row += 1;
                        match sample_seq(s, l, None) {
                            Ok(tok) => {
                                if let Some((reason, text)) =
                                    emit_token(s, tok, l, tokenizer, eog, stats)
                                {
                                    finish_seq(s, kv, stats, roof.as_ref(), reason, text, None);
                                }
                            }
                            Err(e) => {
                                let msg = Some(e.to_string());
                                finish_seq(
                                    s,
                                    kv,
                                    stats,
                                    roof.as_ref(),
                                    FinishReason::Aborted,
                                    String::new(),
                                    msg,
                                );
                            }
                        }
                    }
                    if let Some(seq) = s.kv {
                        kv.commit_blocks(seq, &s.tokens);
                        if p.n > 1 {
                            // A prefill chunk cut at a checkpoint boundary (see `chunk`).
                            kv.checkpoint(seq);
                        }
                    }
                }
            }
            Err(e) => {
                // Internal failure: fail the scheduled sequences, keep serving the rest.
                let msg = e.to_string();
                for p in plan.iter() {
                    let s = &mut running[p.ri];
                    finish_seq(
                        s,
                        kv,
                        stats,
                        roof.as_ref(),
                        FinishReason::Aborted,
                        String::new(),
                        Some(msg.clone()),
                    );
                }
            }
        }
        if let Some(m) = lone {
            if self.speculator.is_some() {
                // The forward pass and the proposer apart (see `StepCosts`).
                let ms = started.elapsed().as_secs_f64() * 1e3;
                self.step_costs.record(m, ms - draft_ms);
                match self.speculator.as_ref().and_then(|s| s.proposer.guess_ms()) {
                    Some(g) => self.step_costs.record_draft(1, g),
                    None => self.step_costs.record_draft(m - 1, draft_ms),
                }
            }
        }
        self.running.retain(|s| !s.done);
        self.publish_gauges();
        true
    }

    /// Asks the proposer for drafts for every planned sequence allowed some, and forgets the
    /// proposer state of sequences no longer running.
    fn draft(&mut self) {
        let EngineCore {
            model,
            kv,
            running,
            plan,
            speculator,
            ..
        } = self;
        let Some(spec) = speculator else {
            return;
        };
        for s in running.iter_mut() {
            s.draft.clear();
        }
        // Drop the proposer's state of sequences that left (a scan, no allocation per step).
        spec.proposer
            .retain(&|k| running.iter().any(|s| s.uid == k));
        if plan.iter().all(|p| p.k == 0) {
            return;
        }
        let mut want = vec![0usize; running.len()];
        for p in plan.iter() {
            want[p.ri] = p.k;
        }
        let mut slots: Vec<DraftSlot<'_>> = running
            .iter_mut()
            .zip(&want)
            .filter(|(_, &k)| k > 0)
            .filter_map(|(s, &k)| {
                Some(DraftSlot {
                    key: s.uid,
                    target_seq: s.kv?,
                    tokens: &s.tokens,
                    k,
                    out: &mut s.draft,
                })
            })
            .collect();
        if !slots.is_empty() {
            if spec.proposer.propose(model, kv, &mut slots).is_err() {
                // A failed draft is no draft: plain decoding this step.
                for s in slots.iter_mut() {
                    s.out.clear();
                }
            }
            for s in slots.iter_mut() {
                s.out.truncate(s.k);
            }
        }
    }

    fn schedule(&mut self) {
        self.plan.clear();
        let mut budget = self.cfg.max_batch_tokens;
        let mut preempted = false;
        let mut i = 0;
        let spec_on = self
            .speculator
            .as_ref()
            .is_some_and(|sp| self.running.len() <= sp.cfg.max_running);
        let ctx = self.model.config().ctx_len;
        // Budget running prefills leave to the admission of waiting sequences, and to the
        // decodes of running ones behind them.
        let reserve = if self.admission_pending() {
            self.cfg.max_batch_tokens / 2
        } else {
            0
        };
        let prefilling = |s: &Seq| s.tokens.len() - s.computed > 1;
        let mut prefills_left = self.running.iter().filter(|s| prefilling(s)).count();
        let mut decodes_left = self.running.len() - prefills_left;
        while i < self.running.len() && budget > 0 {
            let s = &self.running[i];
            // Running prefills share what decodes and admissions leave, equally: a short
            // prompt admitted beside a long one finishes in a step or two.
            let cap = if prefilling(s) {
                let share = budget.saturating_sub(reserve + decodes_left) / prefills_left;
                prefills_left -= 1;
                share.max(1)
            } else {
                decodes_left -= 1;
                budget
            };
            let n = self.chunk(s.tokens.len(), s.computed, cap);
            let Some(seq) = self.running[i].kv else {
                i += 1;
                continue;
            };
            let target = self.running[i].computed + n;
            let mut scheduled = true;
            while self.kv.blocks_needed(seq, target) > self.kv.free_blocks() {
                // Preempt the newest running sequence (possibly this one).
                let victim = self.running.len() - 1;
                let s = self.running.remove(victim);
                self.preempt(s);
                preempted = true;
                if victim == i {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            if self.kv.reserve(seq, target).is_err() {
                break;
            }
            budget -= n;
            // A decoding sequence may add drafts, within the budget, its length limit, the
            // context and the free blocks (never preempting for them).
            let mut k = 0;
            let s = &mut self.running[i];
            if spec_on && n == 1 && s.req.speculative && s.computed + 1 == s.tokens.len() {
                let left = s.req.max_new.saturating_sub(s.generated() + 1);
                let room = ctx.saturating_sub(s.tokens.len() + 1);
                let (max_k, adaptive) = self
                    .speculator
                    .as_ref()
                    .map_or((0, false), |sp| (sp.cfg.max_draft, sp.cfg.adaptive));
                if left > 0 && room > 0 && budget > 0 {
                    let want = if adaptive {
                        s.spec.choose_k(max_k, &self.step_costs)
                    } else {
                        max_k
                    };
                    k = want.min(left).min(room).min(budget);
                    // Keep the admission watermark: one free block per running sequence.
                    let spare = |kv: &KvCache, k| {
                        kv.blocks_needed(seq, target + k) + self.running.len() <= kv.free_blocks()
                    };
                    while k > 0 && !(spare(&self.kv, k) && self.kv.reserve(seq, target + k).is_ok())
                    {
                        k /= 2;
                    }
                }
            }
            budget -= k;
            self.plan.push(Planned { ri: i, n, k });
            i += 1;
        }
        if preempted {
            return;
        }
        let mut w = 0;
        let max_seqs = self.max_running();
        while budget > 0 && self.running.len() < max_seqs && w < self.waiting.len() {
            if self.waits_for_leader(&self.waiting[w]) {
                w += 1;
                continue;
            }
            let seq = self.kv.add_seq();
            let s = &self.waiting[w];
            let cached = if s.embed.is_some() {
                0
            } else {
                self.kv
                    .attach_cached_prefix(seq, &s.tokens, s.tokens.len() - 1)
            };
            let n = self.chunk(s.tokens.len(), cached, budget);
            let need = self.kv.blocks_needed(seq, cached + n);
            if need + self.running.len() > self.kv.free_blocks()
                || self.kv.reserve(seq, cached + n).is_err()
            {
                self.kv.remove_seq(seq);
                break;
            }
            let Some(mut s) = self.waiting.remove(w) else {
                self.kv.remove_seq(seq);
                break;
            };
            if !s.admitted_once {
                s.admitted_once = true;
                s.cached_tokens = cached;
                s.timings.scheduled = Some(Instant::now());
                EngineStats::add(&self.stats.prompt_tokens, s.prompt_len);
            }
            EngineStats::add(&self.stats.prefix_queries, s.tokens.len());
            EngineStats::add(&self.stats.prefix_hits, cached);
            s.computed = cached;
            s.kv = Some(seq);
            self.running.push(s);
            self.plan.push(Planned {
                ri: self.running.len() - 1,
                n,
                k: 0,
            });
            budget -= n;
        }
    }

    /// How many of a sequence's `len` tokens, `computed` of them done, it computes this step
    /// within `budget`. On a hybrid with prefix caching a prefill chunk that crosses a
    /// checkpoint boundary — a multiple of `CHECKPOINT_INTERVAL`, or the end of the last full
    /// block before the last token, where a repeated prompt or a sibling choice resumes —
    /// stops there, so the state there can be kept (see `ridge_model`'s `recurrent_state.rs`).
    /// A prompt shorter than the interval is cut once; a long one about once per interval.
    fn chunk(&self, len: usize, computed: usize, budget: usize) -> usize {
        let n = (len - computed).min(budget);
        if n <= 1 || !self.cfg.prefix_caching || self.kv.recurrent_bytes_per_seq() == 0 {
            return n;
        }
        let end = computed + n;
        let interval = (computed / CHECKPOINT_INTERVAL + 1) * CHECKPOINT_INTERVAL;
        let prompt_end = (len - 1) / KV_BLOCK_SIZE * KV_BLOCK_SIZE;
        let cut = [interval, prompt_end]
            .into_iter()
            .filter(|&b| b > computed && b < end)
            .min();
        cut.map_or(n, |b| b - computed)
    }

    /// Most sequences whose recurrent states fit `state_pool_bytes` (each holds its state and
    /// a copy at its latest block boundary); unbounded without recurrent layers.
    fn max_live_states(&self) -> usize {
        match self.kv.recurrent_bytes_per_seq() {
            0 => usize::MAX,
            b => (self.cfg.state_pool_bytes / (2 * b)).max(1),
        }
    }

    /// Whether a waiting sequence could be admitted this step, room for it allowing.
    fn admission_pending(&self) -> bool {
        self.running.len() < self.max_running()
            && self.waiting.iter().any(|s| !self.waits_for_leader(s))
    }

    /// Most sequences running at once: the configured cap, within the recurrent states' pool.
    fn max_running(&self) -> usize {
        self.cfg.max_seqs.min(self.max_live_states())
    }

    /// Choices after the first wait until the first has computed the shared prompt.
    fn waits_for_leader(&self, s: &Seq) -> bool {
        if s.index == 0 {
            return false;
        }
        let id = s.req.id;
        self.waiting.iter().any(|o| o.req.id == id && o.index == 0)
            || self
                .running
                .iter()
                .any(|o| o.req.id == id && o.index == 0 && o.computed < o.prompt_len)
    }

    fn preempt(&mut self, mut s: Seq) {
        if let Some(seq) = s.kv.take() {
            if s.embed.is_none() {
                self.kv.commit_blocks(seq, &s.tokens);
            }
            self.kv.remove_seq(seq);
        }
        if let Some(e) = s.embed.as_mut() {
            e.reset();
        }
        s.computed = 0;
        EngineStats::add(&self.stats.preemptions, 1);
        self.waiting.push_front(s);
    }

    fn finish(&mut self, s: &mut Seq, reason: FinishReason, error: Option<String>) {
        finish_seq(
            s,
            &mut self.kv,
            &self.stats,
            self.roof.as_ref(),
            reason,
            String::new(),
            error,
        );
    }

    fn publish_gauges(&self) {
        let st = &self.stats;
        EngineStats::set(&st.running, self.running.len());
        EngineStats::set(&st.waiting, self.waiting.len());
        EngineStats::set(&st.kv_used_blocks, self.kv.used_blocks());
        EngineStats::set(&st.kv_cached_blocks, self.kv.cached_blocks());
        if let Some(d) = self.kv.disk_stats() {
            EngineStats::set(&st.kv_disk_blocks, d.blocks);
            EngineStats::set(&st.kv_disk_hits, d.hits as usize);
        }
        EngineStats::set(
            &st.kv_window_used_blocks,
            self.kv.used_window_blocks().unwrap_or(0),
        );
    }
}

/// Bytes per token of weights and of KV (per context token; sliding-window layers read at most
/// `window` positions), and the live bandwidth: the inputs of a request's batch-1 roofline
/// floor.
#[derive(Clone, Debug)]
struct Roof {
    weight_bytes: f64,
    /// KV bytes per position of the layers that read every position.
    kv_bytes_per_token: f64,
    /// KV bytes per position of the sliding-window layers (0 without such layers).
    windowed_kv_bytes_per_token: f64,
    window: f64,
    /// Recurrent-state bytes a decode step reads and writes per sequence (constant in
    /// context; 0 without recurrent layers).
    state_bytes: f64,
    /// The bandwidth the floor divides by, raised when a request beats it.
    gauge: Arc<FloorGauge>,
}

/// Samples `s`'s next token from its logits row `l` (verifying `draft` when given), through its
/// grammar when it has one.
/// A spent thinking budget writes the closing tag instead (unconstrained sequences only).
fn sample_seq(s: &mut Seq, l: &[f32], draft: Option<u32>) -> Result<u32, GrammarError> {
    let forced = match (&s.think, &s.constraint) {
        (Some(t), c) if c.as_ref().is_none_or(|c| !c.is_active()) => t.forced(),
        _ => None,
    };
    let tok = match forced {
        Some(t) => {
            // Past a lazy grammar that still waits for its trigger.
            if let Some(c) = s.constraint.as_mut() {
                c.commit(t)?;
            }
            t
        }
        None => sample_constrained(
            &mut s.sampler,
            Some(&s.history),
            s.constraint.as_mut(),
            &mut s.masked,
            l,
            draft,
        )?,
    };
    if let Some(t) = s.think.as_mut() {
        t.observe(tok, forced.is_some());
    }
    Ok(tok)
}

/// Streams token `tok` (chosen from `logits`) of `s`, and says whether the choice ends (with
/// the text released at the end).
fn emit_token(
    s: &mut Seq,
    tok: u32,
    logits: &[f32],
    tokenizer: &Tokenizer,
    eog: &[u32],
    stats: &EngineStats,
) -> Option<(FinishReason, String)> {
    let lp = s.req.logprobs.map(|k| logprobs(logits, tok, k));
    let now = Instant::now();
    s.timings.first_token.get_or_insert(now);
    s.timings.last_token = Some(now);
    s.timings.tokens += 1;
    EngineStats::add(&stats.generation_tokens, 1);
    let is_stop_token =
        (!s.req.ignore_eos && eog.contains(&tok)) || s.req.stop_token_ids.contains(&tok);
    s.tokens.push(tok);
    s.history.push(tok);
    if is_stop_token {
        return Some((FinishReason::Stop, drain_text(s)));
    }
    let piece = s.decoder.push(tokenizer, tok);
    let out = s.stop.push(&piece);
    let alive = (s.req.sink)(Event::Token(TokenEvent {
        index: s.index,
        token: tok,
        text: out.emit,
        logprobs: lp,
        at: now,
        arrival: s.timings.arrival,
    }));
    if !alive {
        Some((FinishReason::Aborted, String::new()))
    } else if out.stopped {
        Some((FinishReason::Stop, String::new()))
    } else if s.constraint.as_ref().is_some_and(Constraint::is_complete) {
        // The grammar admits nothing more: the output is whole.
        Some((FinishReason::Stop, drain_text(s)))
    } else if s.generated() >= s.req.max_new {
        Some((FinishReason::Length, drain_text(s)))
    } else {
        None
    }
}

/// Verifies the drafts of `s` against the target's logits rows (`1 + drafts`): emits the
/// accepted drafts and one token of the target's own, rolls the KV cache back past the
/// rejected drafts and resizes the next draft.
#[allow(clippy::too_many_arguments)]
fn verify(
    s: &mut Seq,
    logits: &[f32],
    vocab: usize,
    tokenizer: &Tokenizer,
    eog: &[u32],
    stats: &EngineStats,
    model: &Model,
    kv: &mut KvCache,
    roof: Option<&Roof>,
) {
    let draft = std::mem::take(&mut s.draft);
    let base = s.computed;
    let mut accepted = 0;
    for (j, l) in logits.chunks_exact(vocab).enumerate() {
        let guess = draft.get(j).copied();
        let tok = match sample_seq(s, l, guess) {
            Ok(t) => t,
            Err(e) => {
                let msg = Some(e.to_string());
                finish_seq(
                    s,
                    kv,
                    stats,
                    roof,
                    FinishReason::Aborted,
                    String::new(),
                    msg,
                );
                break;
            }
        };
        let ended = emit_token(s, tok, l, tokenizer, eog, stats);
        if guess == Some(tok) {
            accepted += 1;
        }
        if let Some((reason, text)) = ended {
            finish_seq(s, kv, stats, roof, reason, text, None);
            break;
        }
        if guess != Some(tok) {
            break;
        }
    }
    EngineStats::add(&stats.spec_draft_tokens, draft.len());
    EngineStats::add(&stats.spec_accepted_tokens, accepted);
    s.timings.draft_tokens += draft.len();
    s.timings.accepted_tokens += accepted;
    s.spec.record(draft.len(), accepted);
    s.draft = draft;
    s.draft.clear();
    if let Some(seq) = s.kv {
        // The last token and the accepted drafts are now computed; the rest is dropped.
        s.computed = base + 1 + accepted;
        model.rewind(kv, seq, s.computed);
        kv.truncate(seq, s.computed);
        kv.commit_blocks(seq, &s.tokens);
    }
}

/// Everything the decoder and the stop matcher still hold, at the end of a choice.
fn drain_text(s: &mut Seq) -> String {
    let rest = s.decoder.finish();
    let out = s.stop.push(&rest);
    let mut text = out.emit;
    if !out.stopped {
        text.push_str(&s.stop.flush());
    }
    text
}

/// Ends a choice: frees (and indexes) its blocks, counts it, sends its finish event.
fn finish_seq(
    s: &mut Seq,
    kv: &mut KvCache,
    stats: &EngineStats,
    roof: Option<&Roof>,
    reason: FinishReason,
    text: String,
    error: Option<String>,
) {
    if s.done {
        return;
    }
    s.done = true;
    if let Some(seq) = s.kv.take() {
        if s.embed.is_none() {
            kv.commit_blocks(seq, &s.tokens);
        }
        kv.remove_seq(seq);
    }
    let counter = match (&error, reason) {
        (Some(_), _) => &stats.finished_error,
        (None, FinishReason::Stop) => &stats.finished_stop,
        (None, FinishReason::Length) => &stats.finished_length,
        (None, FinishReason::Aborted) => &stats.finished_abort,
    };
    EngineStats::add(counter, 1);
    if let Some(e) = &s.embed {
        let result = match (error, reason) {
            (Some(msg), _) => Err(msg),
            (None, FinishReason::Aborted) => Err("the request was aborted".to_string()),
            (None, _) => Ok(e.vector()),
        };
        (e.sink)(EmbeddingEvent {
            result,
            prompt_tokens: s.prompt_len,
            arrival: s.timings.arrival,
            scheduled: s.timings.scheduled,
            finished: Instant::now(),
        });
        return;
    }
    if let Some(r) = roof {
        let ctx = s.prompt_len as f64 + s.generated() as f64 / 2.0;
        let bytes = r.weight_bytes
            + r.state_bytes
            + r.kv_bytes_per_token * ctx
            + r.windowed_kv_bytes_per_token * ctx.min(r.window);
        let floor = bytes / (r.gauge.gbs() * 1e9) * 1e3;
        // A request whose decode steps beat the floor proved the bandwidth was higher: the
        // floor is re-measured (`floor.rs`), never reported as more than 100%. A step, not a
        // token: speculative decoding's accepted drafts come several per step.
        let corrected = s.timings.tpot_ms().and_then(|t| {
            let step = crate::floor::step_ms(t, s.timings.tokens, s.timings.accepted_tokens);
            r.gauge.observe(bytes, floor, step)
        });
        s.timings.floor_remeasured = corrected.is_some();
        s.timings.roofline_tpot_ms = Some(corrected.unwrap_or(floor));
    }
    let _ = (s.req.sink)(Event::Finish(FinishEvent {
        index: s.index,
        reason,
        text,
        usage: Usage {
            prompt_tokens: s.prompt_len,
            completion_tokens: s.generated(),
            cached_tokens: s.cached_tokens,
        },
        timings: s.timings.clone(),
        error,
        stop_sequence: s.stop.matched().map(str::to_string),
    }));
}

/// Checks a request's shape against a model of context `ctx` and vocabulary `vocab`, and a KV
/// pool of `total_blocks`.
pub fn check_request(
    req: &Request,
    ctx: usize,
    vocab: usize,
    total_blocks: usize,
) -> Result<(), SubmitError> {
    req.sampling.validate()?;
    if req.prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if req.prompt.len() >= ctx {
        return Err(EngineError::PromptTooLong {
            prompt: req.prompt.len(),
            ctx,
        });
    }
    if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(EngineError::InvalidParam(format!(
            "token id {bad} is outside the vocabulary of {vocab} tokens"
        )));
    }
    if req.max_tokens == 0 {
        return Err(EngineError::InvalidParam(
            "max_tokens must be at least 1".into(),
        ));
    }
    if req.n == 0 {
        return Err(EngineError::InvalidParam("n must be at least 1".into()));
    }
    let max_new = req.max_tokens.min(ctx - req.prompt.len());
    let need = (req.prompt.len() + max_new).div_ceil(KV_BLOCK_SIZE);
    if need > total_blocks {
        return Err(EngineError::InvalidParam(format!(
            "the request needs {} tokens of KV cache ({need} blocks) but the whole cache holds {} blocks of {KV_BLOCK_SIZE}",
            req.prompt.len() + max_new,
            total_blocks
        )));
    }
    Ok(())
}
