//! A hybrid model's recurrent state: one fixed-size `f32` array per live sequence, and the
//! checkpoints that let a later sequence start from a cached prefix.
//!
//! # Why checkpoints, and where
//!
//! An attention layer's cache of a prefix is its K/V rows, which the block pool shares by
//! reference. A recurrent layer (Gated DeltaNet, Mamba) keeps no rows: the prefix has been folded
//! into one state, overwritten by every token. To reuse a cached prefix of `p` tokens a sequence
//! needs the state *exactly* after token `p`, so states are copied aside at block boundaries and
//! keyed by the chained hash of the block they end — the same key the prefix index uses, so
//! "the prefix is cached" means "its blocks are indexed and a checkpoint sits at their end".
//!
//! A checkpoint is the whole state (tens of megabytes on a large hybrid), so not every
//! boundary gets one. The engine asks for one where the next request is likely to diverge
//! (the end of a prompt's last full block: a repeated prompt or the other choices of an
//! `n > 1` request), the cache takes one every [`CHECKPOINT_INTERVAL`] tokens (a shared system
//! prompt followed by different questions), and each sequence keeps a copy of its state at
//! its latest boundary, stored when it leaves (the next turn of a conversation, or the same
//! sequence resumed after preemption). Checkpoints live in an LRU bounded in bytes and leave
//! with their block: one whose block has been evicted from the prefix index can never be
//! found again, so it is dropped before anything else.
//!
//! # Taking draft tokens back
//!
//! Speculative decoding feeds a sequence its last token and `k` guesses in one pass, then keeps
//! only the accepted ones; K/V rows past them are simply forgotten, but the recurrent state has
//! folded every guess in. Before such a pass the engine opens a [`Journal`]: the state is copied
//! once, and each recurrent layer records the inputs its update read for every row (for a Gated
//! DeltaNet layer, the convolution's input and the two gates: a few kilobytes per row, not a
//! state per row). Taking rows back restores the copy and replays the recorded inputs of the
//! kept rows through the same kernels — no weights are read again, and the bits are those a pass
//! over the kept rows alone would give, since each row's update depends only on the state
//! before it and its own inputs.

use std::collections::HashMap;

use crate::RecurrentConfig;

/// Tokens between the checkpoints taken along a sequence (a multiple of the KV block size).
pub const CHECKPOINT_INTERVAL: usize = 512;

/// Default byte budget of the checkpoint cache.
pub const DEFAULT_CHECKPOINT_BYTES: usize = 1 << 30;

/// One live sequence's state, and its copy at its latest block boundary.
struct Live {
    state: Vec<f32>,
    /// The chained hash of the block the copy ends, and the copy.
    at_boundary: Option<(u64, Vec<f32>)>,
    /// Open while draft rows may be taken back.
    journal: Option<Journal>,
}

/// What taking rows back needs (see the module docs): the state before them and, per
/// recurrent layer, the inputs each row's update read, rows in order.
#[derive(Default)]
pub(crate) struct Journal {
    /// Recording (the memory of a closed journal is kept for the next one).
    open: bool,
    /// The sequence's length when the journal opened.
    pub(crate) from: usize,
    /// The state then.
    pub(crate) base: Vec<f32>,
    /// Per recurrent layer, the recorded inputs of its rows, one fixed-size record per row.
    pub(crate) records: Vec<Vec<f32>>,
}

/// A stored state and when it was last used.
struct Checkpoint {
    state: Vec<f32>,
    used: u64,
}

/// The states of the live sequences (for each recurrent layer in order: its convolution
/// window, then its delta-rule or SSM state) and the checkpoint cache.
pub(crate) struct RecurrentStates {
    per_seq: usize,
    /// Recurrent layers (a journal records per layer).
    layers: usize,
    live: Vec<Option<Live>>,
    checkpoints: HashMap<u64, Checkpoint>,
    /// Most checkpoints kept (the byte budget over one state's bytes).
    capacity: usize,
    tick: u64,
}

impl RecurrentStates {
    pub(crate) fn new(cfg: &RecurrentConfig) -> Self {
        let per_seq = cfg.n_recurrent() * (cfg.conv_state_len() + cfg.delta_state_len());
        let mut r = RecurrentStates {
            per_seq,
            layers: cfg.n_recurrent(),
            live: Vec::new(),
            checkpoints: HashMap::new(),
            capacity: 0,
            tick: 0,
        };
        r.set_budget(DEFAULT_CHECKPOINT_BYTES);
        r
    }

    /// `f32` values in one sequence's state.
    pub(crate) fn per_seq(&self) -> usize {
        self.per_seq
    }

    /// Bounds the checkpoint cache to `bytes` (0 turns checkpoints off), dropping the least
    /// recently used ones that no longer fit.
    pub(crate) fn set_budget(&mut self, bytes: usize) {
        self.capacity = bytes / (4 * self.per_seq).max(1);
        while self.checkpoints.len() > self.capacity {
            self.evict_one();
        }
    }

    /// Checkpoints held.
    pub(crate) fn checkpoints(&self) -> usize {
        self.checkpoints.len()
    }

    /// Drops every checkpoint.
    pub(crate) fn clear_checkpoints(&mut self) {
        self.checkpoints.clear();
    }

    /// A zeroed state for sequence `i`.
    pub(crate) fn start(&mut self, i: usize) {
        if self.live.len() <= i {
            self.live.resize_with(i + 1, || None);
        }
        self.live[i] = Some(Live {
            state: vec![0.0; self.per_seq],
            at_boundary: None,
            journal: None,
        });
    }

    /// Ends sequence `i`: its copy at its latest boundary becomes a checkpoint when
    /// `indexed` says that block is still in the prefix index.
    pub(crate) fn end(&mut self, i: usize, indexed: &dyn Fn(u64) -> bool) {
        let Some(live) = self.live.get_mut(i).and_then(Option::take) else {
            return;
        };
        if let Some((hash, copy)) = live.at_boundary {
            self.insert(hash, copy, indexed);
        }
    }

    /// Copies sequence `i`'s state as its state at the end of the block hashed `hash` (its
    /// latest boundary), reusing the previous copy's memory.
    pub(crate) fn mark_boundary(&mut self, i: usize, hash: u64) {
        let Some(Some(live)) = self.live.get_mut(i) else {
            return;
        };
        match &mut live.at_boundary {
            Some((h, _)) if *h == hash => {}
            Some((h, copy)) => {
                *h = hash;
                copy.copy_from_slice(&live.state);
            }
            None => live.at_boundary = Some((hash, live.state.clone())),
        }
    }

    /// Stores sequence `i`'s state as the checkpoint at the end of the block hashed `hash`.
    pub(crate) fn store(&mut self, i: usize, hash: u64, indexed: &dyn Fn(u64) -> bool) {
        if self.capacity == 0 || self.checkpoints.contains_key(&hash) {
            self.touch(hash);
            return;
        }
        let Some(Some(live)) = self.live.get(i) else {
            return;
        };
        let copy = live.state.clone();
        self.insert(hash, copy, indexed);
    }

    fn insert(&mut self, hash: u64, state: Vec<f32>, indexed: &dyn Fn(u64) -> bool) {
        if self.capacity == 0 || !indexed(hash) {
            return;
        }
        if self.checkpoints.contains_key(&hash) {
            self.touch(hash);
            return;
        }
        // Checkpoints whose block left the index first (they can never be found again),
        // then the least recently used.
        self.checkpoints.retain(|h, _| indexed(*h));
        while self.checkpoints.len() >= self.capacity {
            self.evict_one();
        }
        self.tick += 1;
        self.checkpoints.insert(
            hash,
            Checkpoint {
                state,
                used: self.tick,
            },
        );
    }

    fn evict_one(&mut self) {
        if let Some(&h) = self
            .checkpoints
            .iter()
            .min_by_key(|(_, c)| c.used)
            .map(|(h, _)| h)
        {
            self.checkpoints.remove(&h);
        }
    }

    fn touch(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(c) = self.checkpoints.get_mut(&hash) {
            c.used = self.tick;
        }
    }

    /// Whether a checkpoint ends the block hashed `hash`.
    pub(crate) fn has(&self, hash: u64) -> bool {
        self.checkpoints.contains_key(&hash)
    }

    /// Sequence `i` takes the checkpoint at the end of the block hashed `hash` as its state
    /// (false, and nothing changes, when there is none).
    pub(crate) fn restore(&mut self, i: usize, hash: u64) -> bool {
        self.tick += 1;
        let tick = self.tick;
        let (Some(c), Some(Some(live))) = (self.checkpoints.get_mut(&hash), self.live.get_mut(i))
        else {
            return false;
        };
        c.used = tick;
        live.state.copy_from_slice(&c.state);
        true
    }

    /// Opens sequence `i`'s journal at length `len`: copies its state (reusing an earlier
    /// journal's memory) and forgets earlier records.
    pub(crate) fn open_journal(&mut self, i: usize, len: usize) {
        let layers = self.layers;
        let Some(Some(live)) = self.live.get_mut(i) else {
            return;
        };
        let j = live.journal.get_or_insert_with(Journal::default);
        j.open = true;
        j.from = len;
        j.base.clear();
        j.base.extend_from_slice(&live.state);
        j.records.resize_with(layers, Vec::new);
        for r in &mut j.records {
            r.clear();
        }
    }

    /// Sequence `i`'s open journal, to record into.
    pub(crate) fn journal_mut(&mut self, i: usize) -> Option<&mut Journal> {
        self.live
            .get_mut(i)?
            .as_mut()?
            .journal
            .as_mut()
            .filter(|j| j.open)
    }

    /// Closes sequence `i`'s journal, handing it back.
    pub(crate) fn close_journal(&mut self, i: usize) -> Option<Journal> {
        self.live.get_mut(i)?.as_mut()?.journal.take_if(|j| j.open)
    }

    /// Keeps a closed journal's memory for the sequence's next one.
    pub(crate) fn recycle_journal(&mut self, i: usize, j: Journal) {
        if let Some(Some(live)) = self.live.get_mut(i) {
            live.journal = Some(Journal { open: false, ..j });
        }
    }

    /// Mutable views of the states of the sequences numbered `ids`, in that order (`None` if
    /// one is unknown or repeated).
    pub(crate) fn many(&mut self, ids: impl IntoIterator<Item = usize>) -> Option<Vec<&mut [f32]>> {
        let mut live: Vec<(usize, &mut [f32])> = self
            .live
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.as_mut()?.state.as_mut_slice())))
            .collect();
        ids.into_iter()
            .map(|id| {
                let k = live.iter().position(|(i, _)| *i == id)?;
                Some(live.swap_remove(k).1)
            })
            .collect()
    }
}
