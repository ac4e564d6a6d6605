//! The engine thread: [`EngineCore`] driven by one dedicated thread, fed through a channel.
//!
//! Clients (the HTTP server, the CLI, benchmarks) submit from any thread and receive events
//! through their [`EventSink`]; the engine thread alone touches the model and the KV cache, so
//! no lock sits on the hot path. The loop drains every pending command before each step (so an
//! abort frees its blocks within one step), sleeps on the channel when idle, and survives a
//! panic inside a step by failing the sequences of that moment and starting over with a fresh
//! cache.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use ridge_model::Model;
use ridge_tokenizer::Tokenizer;

use crate::core::{check_request, EngineConfig, EngineCore};
use crate::embed::{check_embedding, EmbeddingEvent, EmbeddingRequest, EmbeddingSink};
use crate::request::{Event, EventSink, Request, RequestId};
use crate::stats::EngineStats;
use crate::{EngineError, FinishReason};

// Commands are few (one per request), so the size of `Submit` costs nothing worth a box.
enum Command {
    Submit(RequestId, Box<Request>, EventSink, Instant),
    Embed(RequestId, EmbeddingRequest, EmbeddingSink, Instant),
    Abort(RequestId),
    FlushCache(std::sync::mpsc::Sender<usize>),
    IndexedBlocks(std::sync::mpsc::Sender<Vec<u64>>),
    Shutdown,
}

/// Facts about the engine that submitters need without asking the thread.
#[derive(Clone, Debug)]
pub struct EngineInfo {
    /// The model's context length.
    pub ctx_len: usize,
    /// The model's architecture (`general.architecture`).
    pub architecture: &'static str,
    /// Vocabulary size.
    pub vocab: usize,
    /// KV blocks in the pool.
    pub kv_total_blocks: usize,
    /// The configuration it runs with.
    pub config: EngineConfig,
    /// Weight bytes read per decode step.
    pub weight_bytes: usize,
    /// KV bytes per cached token.
    pub kv_bytes_per_token: usize,
    /// The speculative decoding method, when enabled.
    pub speculative: Option<&'static str>,
    /// Width of an embedding vector (the model's hidden size).
    pub embedding_width: usize,
    /// The pooling embeddings get: [`EngineCore::pooling`] (the file's declaration unless
    /// overridden).
    pub pooling: ridge_model::Pooling,
    /// The pooling the model file declares ([`ridge_model::Pooling::None`] when it declares
    /// none, or a value ridge does not know).
    pub declared_pooling: ridge_model::Pooling,
    /// The reranker's classifier head, for a file that declares rank pooling (what rank
    /// requests need; its template forms their prompts).
    pub rank_head: Option<Arc<ridge_model::RankHead>>,
    /// The live floor bandwidth (raised when a request beats its floor; `None` when the
    /// engine knows no bandwidth): what status reports should show, not `config`'s start-up
    /// figure.
    pub floor: Option<Arc<crate::FloorGauge>>,
}

/// A running engine. Dropping it aborts what is left and joins the thread.
pub struct Engine {
    tx: Sender<Command>,
    stats: Arc<EngineStats>,
    info: EngineInfo,
    next_id: AtomicU64,
    queued: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine thread over `model`.
    pub fn start(
        model: Model,
        tokenizer: Arc<Tokenizer>,
        cfg: EngineConfig,
    ) -> Result<Engine, EngineError> {
        Self::from_core(EngineCore::new(model, tokenizer, cfg)?)
    }

    /// Starts the engine thread over a prepared core (e.g. one with a speculator).
    pub fn from_core(core: EngineCore) -> Result<Engine, EngineError> {
        let cfg = core.config().clone();
        let mcfg = core.model().config();
        let info = EngineInfo {
            ctx_len: mcfg.ctx_len,
            architecture: mcfg.arch.gguf_name(),
            vocab: mcfg.vocab,
            kv_total_blocks: core.kv_total_blocks(),
            weight_bytes: core.model().weight_bytes_per_token(),
            kv_bytes_per_token: cfg.kv_dtype.token_bytes(mcfg),
            speculative: core.speculative(),
            embedding_width: mcfg.d_model,
            pooling: core.pooling(),
            declared_pooling: core.model().pooling().unwrap_or(ridge_model::Pooling::None),
            rank_head: core.model().rank_head().cloned(),
            floor: core.floor().cloned(),
            config: cfg,
        };
        let stats = core.stats().clone();
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        let thread = std::thread::Builder::new()
            .name("ridge-engine".into())
            .spawn(move || run(core, rx, q))
            .map_err(|e| {
                EngineError::InvalidParam(format!("cannot start the engine thread: {e}"))
            })?;
        Ok(Engine {
            tx,
            stats,
            info,
            next_id: AtomicU64::new(1),
            queued,
            thread: Some(thread),
        })
    }

    /// Static facts about the engine.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// Live statistics.
    pub fn stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }

    /// Validates and queues a request; its events go to `sink`. Refused when it can never fit,
    /// is malformed, or the queue is full.
    pub fn submit(&self, req: Request, sink: EventSink) -> Result<RequestId, EngineError> {
        check_request(
            &req,
            self.info.ctx_len,
            self.info.vocab,
            self.info.kv_total_blocks,
        )?;
        let waiting = self.stats.waiting.load(Ordering::Relaxed) as usize;
        if waiting + self.queued.load(Ordering::Relaxed) >= self.info.config.max_queue {
            return Err(EngineError::QueueFull(self.info.config.max_queue));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.queued.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(Command::Submit(id, Box::new(req), sink, Instant::now()))
            .map_err(|_| EngineError::Stopped)?;
        Ok(id)
    }

    /// Validates and queues an embedding request (see `embed.rs`); its one event goes to
    /// `sink`. Refused when it can never fit, is malformed, or the queue is full. It shares
    /// the queue, the scheduler and [`Engine::abort`] with generation requests.
    pub fn submit_embedding(
        &self,
        req: EmbeddingRequest,
        sink: EmbeddingSink,
    ) -> Result<RequestId, EngineError> {
        check_embedding(
            &req,
            self.info.ctx_len,
            self.info.vocab,
            self.info.kv_total_blocks,
            ridge_model::KV_BLOCK_SIZE,
        )?;
        let waiting = self.stats.waiting.load(Ordering::Relaxed) as usize;
        if waiting + self.queued.load(Ordering::Relaxed) >= self.info.config.max_queue {
            return Err(EngineError::QueueFull(self.info.config.max_queue));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.queued.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(Command::Embed(id, req, sink, Instant::now()))
            .map_err(|_| EngineError::Stopped)?;
        Ok(id)
    }

    /// Aborts a request (no-op if it already ended).
    pub fn abort(&self, id: RequestId) {
        let _ = self.tx.send(Command::Abort(id));
    }

    /// Drops the prefix cache's unused blocks; waits for the engine thread (at most one step)
    /// and returns how many blocks were dropped.
    pub fn flush_prefix_cache(&self) -> Result<usize, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx
            .send(Command::FlushCache(tx))
            .map_err(|_| EngineError::Stopped)?;
        rx.recv().map_err(|_| EngineError::Stopped)
    }

    /// The chained hashes of the blocks in the prefix index, sorted, as the engine thread
    /// sees them between steps: the state its KV events describe.
    pub fn indexed_blocks(&self) -> Result<Vec<u64>, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx
            .send(Command::IndexedBlocks(tx))
            .map_err(|_| EngineError::Stopped)?;
        rx.recv().map_err(|_| EngineError::Stopped)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut core: EngineCore, rx: Receiver<Command>, queued: Arc<AtomicUsize>) {
    loop {
        let first = if core.has_work() {
            match rx.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some(Command::Shutdown),
            }
        } else {
            Some(rx.recv().unwrap_or(Command::Shutdown))
        };
        let mut shutdown = false;
        for cmd in first
            .into_iter()
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match cmd {
                Command::Submit(id, req, sink, arrival) => {
                    queued.fetch_sub(1, Ordering::Relaxed);
                    if let Err(e) = core.submit(id, *req, sink.clone(), arrival) {
                        // Checked at submission already; report rather than drop silently.
                        let _ = sink(Event::Finish(crate::request::FinishEvent {
                            index: 0,
                            reason: FinishReason::Aborted,
                            text: String::new(),
                            usage: Default::default(),
                            timings: crate::request::ChoiceTimings::new(arrival),
                            error: Some(e.to_string()),
                            stop_sequence: None,
                        }));
                    }
                }
                Command::Embed(id, req, sink, arrival) => {
                    queued.fetch_sub(1, Ordering::Relaxed);
                    let tokens = req.tokens.len();
                    if let Err(e) = core.submit_embedding(id, req, sink.clone(), arrival) {
                        sink(EmbeddingEvent {
                            result: Err(e.to_string()),
                            prompt_tokens: tokens,
                            arrival,
                            scheduled: None,
                            finished: Instant::now(),
                        });
                    }
                }
                Command::Abort(id) => core.abort(id),
                Command::FlushCache(reply) => {
                    let _ = reply.send(core.flush_prefix_cache());
                }
                Command::IndexedBlocks(reply) => {
                    // Publish first, so a subscriber that has every event so far sees this.
                    core.publish_kv_events();
                    let _ = reply.send(core.indexed_blocks());
                }
                Command::Shutdown => shutdown = true,
            }
        }
        if shutdown {
            core.abort_all();
            core.publish_kv_events();
            core.clear_kv_events();
            return;
        }
        // (A step with nothing to do returns at once, so the publish after it also carries what
        // this round's commands changed, a flush's removals for one.)
        let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| core.step()));
        if stepped.is_err() {
            // A bug, not bad input (inputs are validated): fail what was in flight, keep going.
            core.recover_from_panic();
        }
        core.publish_kv_events();
    }
}
