//! Engine counters and gauges, updated by the engine thread and read by anyone (the server's
//! `/metrics`, tests, the CLI) without locking.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live engine statistics. Counters only grow; gauges reflect the last step.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Sequences scheduled in the running set.
    pub running: AtomicU64,
    /// Sequences waiting for admission (including preempted ones).
    pub waiting: AtomicU64,
    /// KV blocks owned by sequences.
    pub kv_used_blocks: AtomicU64,
    /// KV blocks in the pool.
    pub kv_total_blocks: AtomicU64,
    /// Unowned blocks kept for prefix reuse.
    pub kv_cached_blocks: AtomicU64,
    /// Blocks kept in the prefix cache's disk tier (0 without one).
    pub kv_disk_blocks: AtomicU64,
    /// Blocks read back from the disk tier.
    pub kv_disk_hits: AtomicU64,
    /// KV blocks owned by sequences in the sliding-window layers' pool (0 for a model without
    /// such layers; the pool has `kv_total_blocks` blocks too).
    pub kv_window_used_blocks: AtomicU64,
    /// Prompt tokens of admitted requests (per choice).
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generation_tokens: AtomicU64,
    /// Sequences preempted (freed, to be recomputed).
    pub preemptions: AtomicU64,
    /// Tokens looked up in the prefix cache.
    pub prefix_queries: AtomicU64,
    /// Tokens found in the prefix cache.
    pub prefix_hits: AtomicU64,
    /// Choices finished by a stop condition.
    pub finished_stop: AtomicU64,
    /// Choices finished by length.
    pub finished_length: AtomicU64,
    /// Choices aborted (client gone, abort, shutdown).
    pub finished_abort: AtomicU64,
    /// Choices failed by an internal error.
    pub finished_error: AtomicU64,
    /// Forward passes run.
    pub steps: AtomicU64,
    /// Tokens through the model in all steps (prefill + decode).
    pub step_tokens: AtomicU64,
    /// Tokens through the model in the latest step (the batch size, in tokens).
    pub last_step_tokens: AtomicU64,
    /// Speculative tokens drafted and verified.
    pub spec_draft_tokens: AtomicU64,
    /// Drafted tokens the target accepted.
    pub spec_accepted_tokens: AtomicU64,
}

impl EngineStats {
    /// Fraction of KV blocks owned by sequences (0–1).
    pub fn kv_usage(&self) -> f64 {
        self.share_of_pool(&self.kv_used_blocks)
    }

    /// Fraction of the sliding-window layers' KV blocks owned by sequences (0–1; 0 without
    /// such layers).
    pub fn kv_window_usage(&self) -> f64 {
        self.share_of_pool(&self.kv_window_used_blocks)
    }

    /// `blocks` over the pool's size (each pool has `kv_total_blocks`); 0 for an empty pool.
    fn share_of_pool(&self, blocks: &AtomicU64) -> f64 {
        match self.kv_total_blocks.load(Relaxed) {
            0 => 0.0,
            t => blocks.load(Relaxed) as f64 / t as f64,
        }
    }

    pub(crate) fn add(c: &AtomicU64, v: usize) {
        c.fetch_add(v as u64, Relaxed);
    }

    pub(crate) fn set(c: &AtomicU64, v: usize) {
        c.store(v as u64, Relaxed);
    }
}
