//! The paged KV cache: one pool of fixed-size blocks shared by all sequences.
//!
//! Storage is one f16 array per layer for K and one for V, `n_blocks · KV_BLOCK_SIZE` slots of
//! `kv_dim` elements each. A sequence owns a block table (block ids in position order); position
//! `p` lives in slot `table[p / B] · B + p % B`. Blocks come from a free list, so sequences grow
//! one block at a time and a finished sequence returns its blocks at once — no fragmentation, no
//! copying. Blocks are reference-counted so sequences can share a prefix: full blocks can be
//! indexed by the tokens they hold ([`KvCache::commit_blocks`]) and found again by a later
//! sequence ([`KvCache::attach_cached_prefix`]); see `block_pool.rs`. Scheduling policy — what
//! to admit, whom to preempt — is the engine's, built on this.
//!
//! # Sliding-window layers
//!
//! A model whose layers attend through a sliding window (Gemma 3: five layers of six see only
//! the last `window` positions) splits its layers into two groups, each with its own pool,
//! storage and per-sequence table: the global layers keep every position; the windowed layers
//! give a block back to their pool as soon as no future token of the sequence can see it, so
//! a long sequence holds only about `window` positions of those layers (on Gemma 3 270M, 15 of
//! 18 layers: its cache grows by 3 KB per token instead of 18 KB past the window). A dropped
//! block's table entry becomes [`DROPPED`]; the attention kernels never read below a token's
//! window, so they never meet one. Both groups' pools have the same number of blocks and a
//! sequence never holds more windowed blocks than global ones, so the global pool is the one
//! that bounds admission ([`KvCache::free_blocks`] and friends report it). The windowed pool
//! evicts its cached blocks before it uses a block never used before, so the memory it touches
//! stays near what its sequences hold at once.
//!
//! # Recurrent state
//!
//! A hybrid model's recurrent layers (Qwen3.5's Gated DeltaNet) keep no K/V: their layers get
//! no storage here, and each sequence instead owns one fixed-size `f32` state over all of them
//! (`recurrent_state.rs`), zeroed when it starts and dropped when it ends. A cached prefix is
//! reused only up to a block that ends with a checkpoint of that state (taken at chosen block
//! boundaries, see that file); a hybrid's sequence is never rewound ([`KvCache::can_rewind`]).
//!
//! Dropping happens when the engine commits a sequence's accepted tokens
//! ([`KvCache::commit_blocks`]): accepted tokens are never rewound, so no later rewind (a
//! rejected speculative draft) can need a dropped block again. A cached prefix is reused only
//! as far as both groups still hold what its next token needs.

pub use crate::block_pool::KvEvent;
pub use crate::block_pool::KV_BLOCK_SIZE;
use crate::block_pool::{block_hash, BlockPool, ROOT_HASH};
use crate::config::HeadShape;
use crate::disk_tier::{DiskTier, DiskTierConfig, DiskTierStats, Layout};
use crate::recurrent_state::{Journal, RecurrentStates, CHECKPOINT_INTERVAL};
use crate::zeroed::Zeroed;
use crate::{ModelConfig, ModelError};
use half::f16;
use half::slice::HalfFloatSliceExt;
use ridge_kernels::attention::{head_row, KvLayer, Q8_BLOCK_BYTES};

/// Identifies a sequence in a [`KvCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(pub usize);

/// Table entry of a windowed layer group's block that no future token can see: given back to
/// the pool.
pub const DROPPED: u32 = u32::MAX;

#[derive(Debug, Default)]
struct SeqState {
    /// Per layer group, the block table ([`DROPPED`] entries lie below the group's window).
    tables: Vec<Vec<u32>>,
    len: usize,
    /// Chained hashes of the leading full blocks already indexed (or found in the index).
    hashes: Vec<u64>,
}

/// Element type of the cached keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    /// f16: exact to f16 rounding.
    #[default]
    F16,
    /// Q8_0 blocks (an f16 scale per 32 int8 values): 34 bytes per 32 elements instead of 64.
    Q8_0,
}

impl std::str::FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f16" => Ok(KvDtype::F16),
            "q8_0" => Ok(KvDtype::Q8_0),
            other => Err(format!("unknown KV cache dtype {other:?} (f16 or q8_0)")),
        }
    }
}

impl KvDtype {
    /// Bytes one cached token takes over all layers of `cfg` (its K and V rows).
    pub fn token_bytes(self, cfg: &ModelConfig) -> usize {
        // Latent attention caches one row per token and layer, no values.
        let (global, windowed) = cfg.kv_token_bytes(|d| self.row_bytes(d));
        global + windowed
    }

    /// Bytes per cached element row of `kv_dim` elements.
    pub fn row_bytes(self, kv_dim: usize) -> usize {
        match self {
            KvDtype::F16 => 2 * kv_dim,
            KvDtype::Q8_0 => kv_dim / 32 * Q8_BLOCK_BYTES,
        }
    }
}

/// Per-layer K and V arrays (pages mapped on first write, see `zeroed.rs`).
enum Store {
    F16 {
        k: Vec<Zeroed<f16>>,
        v: Vec<Zeroed<f16>>,
    },
    Q8 {
        k: Vec<Zeroed<u8>>,
        v: Vec<Zeroed<u8>>,
    },
}

/// The bytes of f16 values (as stored: native byte order).
fn f16_bytes(x: &[f16]) -> &[u8] {
    // SAFETY: f16 is two bytes without padding; the slice covers exactly `2 · len` initialised
    // bytes of the same allocation, borrowed for as long as `x`.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u8, std::mem::size_of_val(x)) }
}

/// [`f16_bytes`], writable: any two bytes are a valid f16.
fn f16_bytes_mut(x: &mut [f16]) -> &mut [u8] {
    // SAFETY: as in `f16_bytes`; every bit pattern is a valid f16, so any bytes written leave
    // valid values, and `&mut` makes this the only access for the borrow.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr() as *mut u8, std::mem::size_of_val(x)) }
}

/// Quantizes `x` (a multiple of 32 long) into Q8_0 blocks in `out`: scale = max|x| / 127,
/// values rounded to nearest.
fn quantize_q8(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_BLOCK_BYTES)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (o, &v) in ob[2..].iter_mut().zip(xb) {
            *o = (v * id).round().clamp(-127.0, 127.0) as i8 as u8;
        }
    }
}

impl Store {
    fn dtype(&self) -> KvDtype {
        match self {
            Store::F16 { .. } => KvDtype::F16,
            Store::Q8 { .. } => KvDtype::Q8_0,
        }
    }

    /// Layers stored.
    fn layers(&self) -> usize {
        match self {
            Store::F16 { k, .. } => k.len(),
            Store::Q8 { k, .. } => k.len(),
        }
    }
}

/// Layers that share block tables: all of a model's layers, or its global or its windowed
/// ones.
struct Group {
    /// A token at position `p` of these layers sees only `p − window + 1 ..= p`.
    window: Option<usize>,
    pool: BlockPool,
    store: Store,
    /// Elements per head and per K/V row of these layers (Gemma 4's sliding and global
    /// layers differ).
    head_dim: usize,
    kv_dim: usize,
}

impl Group {
    /// The first block a token at position `pos` of this group can see (0 without a window).
    fn first_live_block(&self, pos: usize) -> usize {
        self.window
            .map_or(0, |w| (pos + 1).saturating_sub(w) / KV_BLOCK_SIZE)
    }
}

/// Paged K/V storage plus per-sequence block tables.
pub struct KvCache {
    /// Group 0's K/V row width (the disk tier's, which holds only that group).
    kv_dim: usize,
    n_blocks: usize,
    /// Group 0 holds the layers without a window (or every layer).
    groups: Vec<Group>,
    /// Per layer: its group and its index among the group's layers (`usize::MAX` for a
    /// layer that keeps no K/V: a hybrid's recurrent or MLP-only layer).
    layer_at: Vec<(usize, usize)>,
    /// Layers with K/V storage.
    kv_layers: usize,
    /// Rows stored per token and layer: K and V (2), or a latent attention's one latent row.
    rows_per_token: usize,
    seqs: Vec<Option<SeqState>>,
    /// A hybrid model's fixed-size recurrent state per sequence (`None` for a model whose
    /// every layer attends).
    recurrent: Option<RecurrentStates>,
    /// Full blocks kept on disk too (see `disk_tier.rs`).
    disk: Option<DiskTier>,
}

impl KvCache {
    /// A cache able to hold `capacity_tokens` tokens (rounded up to whole blocks) for `cfg`.
    pub fn new(cfg: &ModelConfig, capacity_tokens: usize) -> Self {
        Self::build(cfg, capacity_tokens, KvDtype::F16)
    }

    /// A cache with the given element type. Q8_0 needs `head_dim` to be a multiple of 32.
    pub fn with_dtype(
        cfg: &ModelConfig,
        capacity_tokens: usize,
        dtype: KvDtype,
    ) -> Result<Self, ModelError> {
        let mut hd = (0..cfg.n_layers).map(|l| cfg.head_shape(l).head_dim);
        if let Some(bad) = hd.find(|h| !h.is_multiple_of(32)) {
            if dtype == KvDtype::Q8_0 {
                return Err(ModelError::BadBatch(format!(
                    "a q8_0 KV cache needs head_dim to be a multiple of 32, this model has {bad}"
                )));
            }
        }
        Ok(Self::build(cfg, capacity_tokens, dtype))
    }

    fn build(cfg: &ModelConfig, capacity_tokens: usize, dtype: KvDtype) -> Self {
        let n_blocks = capacity_tokens.div_ceil(KV_BLOCK_SIZE).max(1);
        let rows = n_blocks * KV_BLOCK_SIZE;
        // Latent attention (MLA) keeps its latent rows as keys and no values: the value
        // arrays are empty and nothing writes or reads them.
        let v_rows = if cfg.mla.is_some() { 0 } else { rows };
        let store = |layers: usize, kv_dim: usize| match dtype {
            KvDtype::F16 => Store::F16 {
                k: (0..layers).map(|_| Zeroed::new(rows * kv_dim)).collect(),
                v: (0..layers).map(|_| Zeroed::new(v_rows * kv_dim)).collect(),
            },
            KvDtype::Q8_0 => {
                let row = KvDtype::Q8_0.row_bytes(kv_dim);
                Store::Q8 {
                    k: (0..layers).map(|_| Zeroed::new(rows * row)).collect(),
                    v: (0..layers).map(|_| Zeroed::new(v_rows * row)).collect(),
                }
            }
        };
        let windowed = |li: usize| cfg.is_sliding(li);
        let mut layer_at = Vec::with_capacity(cfg.n_layers);
        let mut counts = [0usize; 2];
        for li in 0..cfg.n_layers {
            if !cfg.attends(li) {
                layer_at.push((0, usize::MAX));
                continue;
            }
            // A layer reading an earlier layer's K/V (Gemma 4) is that layer here.
            if let Some(src) = cfg.kv_source_of(li) {
                let at = layer_at[src];
                layer_at.push(at);
                continue;
            }
            let g = usize::from(windowed(li));
            layer_at.push((g, counts[g]));
            counts[g] += 1;
        }
        // Each group's rows are its layers' width (the sliding layers' own where they have one).
        let global = HeadShape {
            head_dim: cfg.head_dim,
            n_kv_heads: cfg.n_kv_heads,
            rope_dim: cfg.rope_dim,
        };
        let swa = cfg.swa_shape.unwrap_or(global);
        let dims = |s: HeadShape| (s.head_dim, s.head_dim * s.n_kv_heads);
        let (g_hd, g_kv) = dims(global);
        let mut groups = vec![Group {
            window: None,
            pool: BlockPool::new(n_blocks),
            store: store(counts[0], g_kv),
            head_dim: g_hd,
            kv_dim: g_kv,
        }];
        if counts[1] > 0 {
            let (s_hd, s_kv) = dims(swa);
            groups.push(Group {
                window: cfg.sliding_window,
                pool: BlockPool::recycling(n_blocks),
                store: store(counts[1], s_kv),
                head_dim: s_hd,
                kv_dim: s_kv,
            });
        }
        KvCache {
            kv_dim: g_kv,
            n_blocks,
            groups,
            layer_at,
            kv_layers: counts[0] + counts[1],
            rows_per_token: cfg.kv_rows(),
            seqs: Vec::new(),
            recurrent: cfg.recurrent.as_ref().map(RecurrentStates::new),
            disk: None,
        }
    }

    /// Keeps every indexed block on disk too, and reads blocks back from there when a prefix
    /// lookup runs past what memory holds (see `disk_tier.rs`). Models with sliding-window
    /// layers or recurrent state are refused: their prefixes need more than full blocks.
    pub fn attach_disk_tier(&mut self, cfg: &DiskTierConfig) -> Result<(), ModelError> {
        if self.groups.len() > 1 || self.recurrent.is_some() {
            return Err(ModelError::BadBatch(
                "a disk prefix cache needs a model whose every layer keeps full K/V (no sliding-window or recurrent layers)".into(),
            ));
        }
        let dtype = match self.dtype() {
            KvDtype::F16 => 1,
            KvDtype::Q8_0 => 2,
        } | if cfg!(target_endian = "big") {
            0x100
        } else {
            0
        };
        let layout = Layout {
            dtype,
            layers: self.kv_layers as u32,
            bytes_per_half: (KV_BLOCK_SIZE * self.dtype().row_bytes(self.kv_dim)) as u64,
        };
        let tier = DiskTier::open(cfg, layout).map_err(|e| {
            ModelError::BadBatch(format!(
                "cannot use {} as the prefix cache folder: {e}",
                cfg.dir.display()
            ))
        })?;
        self.disk = Some(tier);
        Ok(())
    }

    /// The disk tier's counters, when there is one.
    pub fn disk_stats(&self) -> Option<DiskTierStats> {
        self.disk.as_ref().map(DiskTier::stats)
    }

    /// Block `b`'s bytes in `store`, every layer's K then V (`n` bytes each).
    fn block_halves(store: &Store, n: usize, b: u32) -> Vec<&[u8]> {
        let at = b as usize * n;
        let mut out = Vec::new();
        match store {
            // A latent cache's value arrays are empty: its blocks are their keys alone.
            Store::F16 { k, v } => {
                for (kl, vl) in k.iter().zip(v) {
                    out.push(f16_bytes(&kl[at / 2..(at + n) / 2]));
                    if !vl.is_empty() {
                        out.push(f16_bytes(&vl[at / 2..(at + n) / 2]));
                    }
                }
            }
            Store::Q8 { k, v } => {
                for (kl, vl) in k.iter().zip(v) {
                    out.push(&kl[at..at + n]);
                    if !vl.is_empty() {
                        out.push(&vl[at..at + n]);
                    }
                }
            }
        }
        out
    }

    /// Reads block `b` of group 0 back from the disk tier; false on a miss.
    fn load_block(&mut self, b: u32, hash: u64, parent: u64, tokens: &[u32]) -> bool {
        let n = KV_BLOCK_SIZE * self.dtype().row_bytes(self.kv_dim);
        let at = b as usize * n;
        let Some(disk) = self.disk.as_mut() else {
            return false;
        };
        let mut halves: Vec<&mut [u8]> = Vec::new();
        match &mut self.groups[0].store {
            Store::F16 { k, v } => {
                for (kl, vl) in k.iter_mut().zip(v.iter_mut()) {
                    halves.push(f16_bytes_mut(&mut kl[at / 2..(at + n) / 2]));
                    if !vl.is_empty() {
                        halves.push(f16_bytes_mut(&mut vl[at / 2..(at + n) / 2]));
                    }
                }
            }
            Store::Q8 { k, v } => {
                for (kl, vl) in k.iter_mut().zip(v.iter_mut()) {
                    halves.push(&mut kl[at..at + n]);
                    if !vl.is_empty() {
                        halves.push(&mut vl[at..at + n]);
                    }
                }
            }
        }
        disk.load(hash, parent, tokens, &mut halves)
    }

    /// Bytes of K and V storage (address space; pages are touched only as blocks are used).
    pub fn bytes(&self) -> usize {
        let dt = self.dtype();
        let rows = self.rows_per_token * self.n_blocks * KV_BLOCK_SIZE;
        self.groups
            .iter()
            .map(|g| rows * g.store.layers() * dt.row_bytes(g.kv_dim))
            .sum()
    }

    /// The element type.
    pub fn dtype(&self) -> KvDtype {
        self.groups[0].store.dtype()
    }

    /// Total blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks not owned by any sequence (free, or cached for prefix reuse and evictable), in
    /// the pool of the layers without a window.
    pub fn free_blocks(&self) -> usize {
        self.groups[0].pool.available()
    }

    /// Blocks owned by at least one sequence, in the pool of the layers without a window.
    pub fn used_blocks(&self) -> usize {
        self.groups[0].pool.used()
    }

    /// Blocks owned by at least one sequence in the windowed layers' pool, if the model has
    /// such layers.
    pub fn used_window_blocks(&self) -> Option<usize> {
        self.groups.get(1).map(|g| g.pool.used())
    }

    /// Unowned blocks kept for prefix reuse, in the pool of the layers without a window.
    pub fn cached_blocks(&self) -> usize {
        self.groups[0].pool.cached()
    }

    /// Layer groups with their own block tables: 1, or 2 when some layers have a window
    /// (group 0 then holds the others).
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// The group of layer `layer`'s block tables.
    pub fn group_of(&self, layer: usize) -> usize {
        self.layer_at.get(layer).map_or(0, |&(g, _)| g)
    }

    /// Turns prefix caching on (the default) or off; off drops every cached block.
    pub fn set_prefix_caching(&mut self, on: bool) {
        for g in &mut self.groups {
            g.pool.set_caching(on);
        }
        for s in self.seqs.iter_mut().flatten() {
            s.hashes.clear();
        }
        if let (Some(r), false) = (&mut self.recurrent, on) {
            r.clear_checkpoints();
        }
    }

    /// Starts recording changes to the prefix index for [`KvCache::take_events`].
    ///
    /// The log follows the index of the layers without a window (group 0), the one every
    /// prefix lookup walks first. On a model with windowed layers a prefix whose windowed
    /// blocks were evicted is reused only partly (see the module docs), so a subscriber's view
    /// is an upper bound on what a lookup finds there.
    pub fn log_events(&mut self) {
        self.groups[0].pool.log_events();
    }

    /// The prefix index's changes since the last call, oldest first (empty unless
    /// [`KvCache::log_events`] was called).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.groups[0].pool.take_events()
    }

    /// The chained hashes of every block in the prefix index (of the layers without a
    /// window), sorted: the state [`KvCache::take_events`]' log describes.
    pub fn indexed_hashes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.groups[0].pool.indexed().collect();
        v.sort_unstable();
        v
    }

    /// Drops the prefix cache's unused blocks (those no sequence holds), in every layer group;
    /// returns how many blocks were dropped. Running sequences keep theirs.
    pub fn flush_prefix_cache(&mut self) -> usize {
        if let Some(r) = &mut self.recurrent {
            r.clear_checkpoints();
        }
        self.groups.iter_mut().map(|g| g.pool.drop_cached()).sum()
    }

    /// Starts an empty sequence.
    pub fn add_seq(&mut self) -> SeqId {
        let fresh = SeqState {
            tables: vec![Vec::new(); self.groups.len()],
            ..SeqState::default()
        };
        let id = if let Some(i) = self.seqs.iter().position(|s| s.is_none()) {
            self.seqs[i] = Some(fresh);
            SeqId(i)
        } else {
            self.seqs.push(Some(fresh));
            SeqId(self.seqs.len() - 1)
        };
        if let Some(r) = &mut self.recurrent {
            r.start(id.0);
        }
        id
    }

    /// Ends a sequence and drops its references to its blocks. Unknown ids are ignored.
    pub fn remove_seq(&mut self, id: SeqId) {
        if let Some(r) = &mut self.recurrent {
            // Before its blocks are released: the copy at its latest boundary is kept only
            // while that block is indexed.
            let pool = &self.groups[0].pool;
            r.end(id.0, &|h| pool.contains(h));
        }
        if let Some(s) = self.seqs.get_mut(id.0).and_then(Option::take) {
            for (g, table) in self.groups.iter_mut().zip(&s.tables) {
                for &b in table.iter().rev().filter(|&&b| b != DROPPED) {
                    g.pool.release(b);
                }
            }
        }
    }

    /// Shares the longest cached prefix of `tokens` (whole blocks, at most `max_tokens`
    /// tokens) into an empty sequence; returns the number of tokens now cached for it. With a
    /// windowed layer group the prefix also needs that group's blocks within the window of its
    /// next token, so it may come out shorter than the global layers' cached chain.
    pub fn attach_cached_prefix(&mut self, id: SeqId, tokens: &[u32], max_tokens: usize) -> usize {
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return 0;
        };
        if s.len != 0 || s.tables.iter().any(|t| !t.is_empty()) {
            return 0;
        }
        let limit = max_tokens.min(tokens.len()) / KV_BLOCK_SIZE;
        let chunks: Vec<&[u32]> = tokens.chunks_exact(KV_BLOCK_SIZE).take(limit).collect();
        // The global chain: every block from the start.
        let mut parent = ROOT_HASH;
        for chunk in &chunks {
            match self.groups[0].pool.acquire_cached(parent, chunk) {
                Some((b, h)) => {
                    s.tables[0].push(b);
                    s.hashes.push(h);
                    parent = h;
                }
                None => break,
            }
        }
        // Past what memory holds, the disk tier's blocks (read into fresh blocks, indexed).
        if self.disk.is_some() {
            let mut at = s.hashes.len();
            let mut read = Vec::new();
            while at < chunks.len() {
                let h = block_hash(parent, chunks[at]);
                if !self.disk.as_ref().is_some_and(|d| d.has(h)) {
                    break;
                }
                let Some(b) = self.groups[0].pool.alloc() else {
                    break;
                };
                if !self.load_block(b, h, parent, chunks[at]) {
                    self.groups[0].pool.release(b);
                    break;
                }
                self.groups[0].pool.register(b, parent, chunks[at]);
                read.push((b, h));
                parent = h;
                at += 1;
            }
            if let Some(Some(s)) = self.seqs.get_mut(id.0) {
                for (b, h) in read {
                    s.tables[0].push(b);
                    s.hashes.push(h);
                }
            }
        }
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return 0;
        };
        // Windowed groups: the longest prefix whose next token finds its window cached.
        let parent_of = |hashes: &[u64], i: usize| if i == 0 { ROOT_HASH } else { hashes[i - 1] };
        let mut keep = s.hashes.len();
        for g in &self.groups[1..] {
            while keep > 0 {
                let first = g.first_live_block(keep * KV_BLOCK_SIZE);
                let all =
                    (first..keep).all(|i| g.pool.is_cached(parent_of(&s.hashes, i), chunks[i]));
                if all {
                    break;
                }
                keep -= 1;
            }
        }
        // A hybrid's prefix ends where a checkpoint of its recurrent state does.
        if let Some(r) = &self.recurrent {
            while keep > 0 && !r.has(s.hashes[keep - 1]) {
                keep -= 1;
            }
        }
        while s.tables[0].len() > keep {
            if let Some(b) = s.tables[0].pop() {
                self.groups[0].pool.release(b);
            }
            s.hashes.pop();
        }
        let mut complete = true;
        for (gi, g) in self.groups.iter_mut().enumerate().skip(1) {
            let first = g.first_live_block(keep * KV_BLOCK_SIZE).min(keep);
            s.tables[gi].resize(first, DROPPED);
            for (i, chunk) in chunks.iter().enumerate().take(keep).skip(first) {
                // Found cached just above, with nothing released in this pool since, so this
                // always succeeds; should it not, the sequence starts empty instead.
                match g.pool.acquire_cached(parent_of(&s.hashes, i), chunk) {
                    Some((b, _)) => s.tables[gi].push(b),
                    None => complete = false,
                }
            }
        }
        s.len = keep * KV_BLOCK_SIZE;
        if let (Some(r), Some(&h)) = (&mut self.recurrent, s.hashes.last()) {
            complete &= r.restore(id.0, h);
        }
        if !complete {
            self.truncate_all(id);
        }
        self.seq_len(id)
    }

    /// Gives back every block of a sequence and empties it (it stays registered).
    fn truncate_all(&mut self, id: SeqId) {
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            for (g, table) in self.groups.iter_mut().zip(s.tables.iter_mut()) {
                for b in table.drain(..).rev().filter(|&b| b != DROPPED) {
                    g.pool.release(b);
                }
            }
            s.hashes.clear();
            s.len = 0;
        }
    }

    /// Indexes the sequence's full, computed blocks for prefix reuse, and gives back the
    /// windowed layers' blocks that no token after the first `tokens.len()` can see. `tokens`
    /// are the sequence's accepted tokens (at least as many as it has cached): the engine
    /// never rewinds below them.
    pub fn commit_blocks(&mut self, id: SeqId, tokens: &[u32]) {
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return;
        };
        let full = s.len.min(tokens.len()) / KV_BLOCK_SIZE;
        while s.hashes.len() < full {
            let i = s.hashes.len();
            let parent = s.hashes.last().copied().unwrap_or(ROOT_HASH);
            let chunk = &tokens[i * KV_BLOCK_SIZE..(i + 1) * KV_BLOCK_SIZE];
            // Group 0 never drops a block; a windowed group registers the block if it still
            // holds it.
            let h = self.groups[0].pool.register(s.tables[0][i], parent, chunk);
            for (g, table) in self.groups.iter_mut().zip(&s.tables).skip(1) {
                if let Some(&b) = table.get(i).filter(|&&b| b != DROPPED) {
                    g.pool.register(b, parent, chunk);
                }
            }
            s.hashes.push(h);
            if let Some(d) = self.disk.as_mut().filter(|d| !d.has(h)) {
                let n = KV_BLOCK_SIZE * self.groups[0].store.dtype().row_bytes(self.kv_dim);
                let halves = Self::block_halves(&self.groups[0].store, n, s.tables[0][i]);
                d.save(h, parent, chunk, &halves);
            }
        }
        // The next token to compute sits at position min(len, tokens).
        let next = s.len.min(tokens.len());
        if let Some(r) = &mut self.recurrent {
            // At a block boundary the state is copied as the sequence's latest, and every
            // `CHECKPOINT_INTERVAL` tokens stored.
            let n = s.len / KV_BLOCK_SIZE;
            if s.len > 0
                && s.len.is_multiple_of(KV_BLOCK_SIZE)
                && next == s.len
                && n <= s.hashes.len()
            {
                let h = s.hashes[n - 1];
                r.mark_boundary(id.0, h);
                if s.len.is_multiple_of(CHECKPOINT_INTERVAL) {
                    let pool = &self.groups[0].pool;
                    r.store(id.0, h, &|h| pool.contains(h));
                }
            }
        }
        self.release_behind_window(id, next);
    }

    /// Stores a hybrid sequence's recurrent state as a checkpoint when it holds exactly a
    /// whole number of indexed blocks (call after [`KvCache::commit_blocks`]); a later sequence
    /// with the same tokens can then start there. Does nothing otherwise, or without recurrent
    /// layers.
    pub fn checkpoint(&mut self, id: SeqId) {
        let (Some(r), Some(Some(s))) = (&mut self.recurrent, self.seqs.get(id.0)) else {
            return;
        };
        let n = s.len / KV_BLOCK_SIZE;
        if s.len > 0 && s.len.is_multiple_of(KV_BLOCK_SIZE) && n <= s.hashes.len() {
            let pool = &self.groups[0].pool;
            r.store(id.0, s.hashes[n - 1], &|h| pool.contains(h));
        }
    }

    /// Bounds the memory kept for checkpoints of a hybrid model's recurrent state (0 keeps
    /// none: a hybrid then reuses no cached prefix). The default is 1 GiB.
    pub fn set_checkpoint_bytes(&mut self, bytes: usize) {
        if let Some(r) = &mut self.recurrent {
            r.set_budget(bytes);
        }
    }

    /// Checkpoints of recurrent state held (0 without recurrent layers).
    pub fn checkpoints(&self) -> usize {
        self.recurrent.as_ref().map_or(0, |r| r.checkpoints())
    }

    /// Gives back the windowed layers' blocks that no token at position `next` or later can
    /// see. The caller guarantees the sequence is never rewound below `next` (the engine
    /// passes its accepted length through [`KvCache::commit_blocks`]).
    pub fn release_behind_window(&mut self, id: SeqId, next: usize) {
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return;
        };
        let next = next.min(s.len);
        for (g, table) in self.groups.iter_mut().zip(s.tables.iter_mut()).skip(1) {
            let first = g.first_live_block(next).min(table.len());
            for e in table[..first].iter_mut().rev() {
                if *e == DROPPED {
                    break;
                }
                g.pool.release(*e);
                *e = DROPPED;
            }
        }
    }

    fn seq(&self, id: SeqId) -> Result<&SeqState, ModelError> {
        self.seqs
            .get(id.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| ModelError::BadBatch(format!("unknown sequence {}", id.0)))
    }

    /// Tokens cached for a sequence (0 for unknown ids).
    pub fn seq_len(&self, id: SeqId) -> usize {
        self.seq(id).map_or(0, |s| s.len)
    }

    /// The block table of a sequence in layer group `group` (see [`KvCache::groups`]).
    pub fn block_table(&self, id: SeqId, group: usize) -> &[u32] {
        self.seq(id)
            .ok()
            .and_then(|s| s.tables.get(group))
            .map_or(&[], |t| t)
    }

    /// Verifies the pool's bookkeeping against the block tables: every block is free, cached or
    /// owned, and its reference count equals the number of tables that hold it (no block leaked
    /// or double-owned). For tests and debugging.
    pub fn check_consistency(&self) -> Result<(), String> {
        for (gi, g) in self.groups.iter().enumerate() {
            let mut refs = vec![0u32; self.n_blocks];
            for s in self.seqs.iter().flatten() {
                let table = &s.tables[gi];
                if table.len() != s.tables[0].len() {
                    return Err(format!(
                        "group {gi} holds {} blocks of a sequence the global group holds {} of",
                        table.len(),
                        s.tables[0].len()
                    ));
                }
                let first = g.first_live_block(s.len);
                for (i, &b) in table.iter().enumerate() {
                    if b == DROPPED {
                        if i >= first {
                            return Err(format!(
                                "group {gi} dropped block {i} of a sequence of {} tokens",
                                s.len
                            ));
                        }
                        continue;
                    }
                    refs[b as usize] += 1;
                }
                if s.len > table.len() * KV_BLOCK_SIZE {
                    return Err(format!(
                        "a sequence of {} tokens holds {} blocks",
                        s.len,
                        table.len()
                    ));
                }
            }
            g.pool.check(&refs)?;
        }
        Ok(())
    }

    /// Blocks a sequence still needs to hold `len` tokens.
    pub fn blocks_needed(&self, id: SeqId, len: usize) -> usize {
        let have = self.block_table(id, 0).len();
        len.div_ceil(KV_BLOCK_SIZE).saturating_sub(have)
    }

    /// Makes room for a sequence to hold `len` tokens, taking blocks from the pool. On failure
    /// nothing is taken.
    pub fn reserve(&mut self, id: SeqId, len: usize) -> Result<(), ModelError> {
        self.seq(id)?;
        let need = self.blocks_needed(id, len);
        let free = self
            .groups
            .iter()
            .map(|g| g.pool.available())
            .min()
            .unwrap_or(0);
        if need > free {
            return Err(ModelError::KvFull { needed: need, free });
        }
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            for (g, table) in self.groups.iter_mut().zip(s.tables.iter_mut()) {
                // Cannot come up short: `available()` blocks can all be allocated.
                table.extend(std::iter::from_fn(|| g.pool.alloc()).take(need));
            }
        }
        Ok(())
    }

    /// Forgets a sequence's positions from `len` on (speculative tokens that were rejected)
    /// but keeps its blocks reserved. Positions below `len` are untouched; indexed (full,
    /// committed) blocks are never cut, and a windowed group's given-back blocks are never
    /// needed again, so `len` is clamped to keep both true.
    ///
    /// A hybrid's recurrent state is taken back by [`crate::Model::rewind`] (which calls
    /// this); here a hybrid's sequence keeps its length, since its state would not follow.
    pub fn rewind(&mut self, id: SeqId, len: usize) {
        if self.recurrent.is_some() {
            return;
        }
        self.rewind_positions(id, len);
    }

    /// The positions part of [`KvCache::rewind`], for any model; returns the new length.
    pub(crate) fn rewind_positions(&mut self, id: SeqId, len: usize) -> usize {
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            // The lowest length whose next token sees no dropped block: with `d` blocks
            // dropped, (len + 1 − window) / B ≥ d.
            let window_floor = self
                .groups
                .iter()
                .zip(&s.tables)
                .filter_map(|(g, t)| {
                    let d = t.iter().take_while(|&&b| b == DROPPED).count();
                    (d > 0).then(|| (d * KV_BLOCK_SIZE + g.window.unwrap_or(1)).saturating_sub(1))
                })
                .max()
                .unwrap_or(0);
            s.len = len
                .max(s.hashes.len() * KV_BLOCK_SIZE)
                .max(window_floor)
                .min(s.len);
        }
        self.seq_len(id)
    }

    /// As [`KvCache::rewind`], and returns the blocks past the new length to the pool.
    pub fn truncate(&mut self, id: SeqId, len: usize) {
        self.rewind(id, len);
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return;
        };
        let keep = s.len.div_ceil(KV_BLOCK_SIZE);
        for (g, table) in self.groups.iter_mut().zip(s.tables.iter_mut()) {
            while table.len() > keep {
                if let Some(b) = table.pop().filter(|&b| b != DROPPED) {
                    g.pool.release(b);
                }
            }
        }
    }

    /// Whether [`KvCache::rewind`] alone takes a sequence back: not for a hybrid model, whose
    /// recurrent state goes back through a journal ([`KvCache::open_journal`],
    /// [`crate::Model::rewind`]).
    pub fn can_rewind(&self) -> bool {
        self.recurrent.is_none()
    }

    /// Before a pass whose last rows may be taken back (draft tokens): a hybrid sequence copies
    /// its recurrent state and its recurrent layers record what each row's update reads, until
    /// [`crate::Model::rewind`] closes the journal (see `recurrent_state.rs`). Nothing to do
    /// without recurrent layers.
    pub fn open_journal(&mut self, id: SeqId) {
        let len = self.seq_len(id);
        if let Some(r) = &mut self.recurrent {
            r.open_journal(id.0, len);
        }
    }

    /// A sequence's open journal, for its recurrent layers to record into.
    pub(crate) fn journal_mut(&mut self, id: SeqId) -> Option<&mut Journal> {
        self.recurrent.as_mut()?.journal_mut(id.0)
    }

    /// Closes a sequence's journal, handing it back.
    pub(crate) fn close_journal(&mut self, id: SeqId) -> Option<Journal> {
        self.recurrent.as_mut()?.close_journal(id.0)
    }

    /// A sequence's recurrent state with the journal it was closed with, whose memory it keeps
    /// for its next one.
    pub(crate) fn with_state(
        &mut self,
        id: SeqId,
        j: Journal,
        f: impl FnOnce(&Journal, &mut [f32]),
    ) {
        let Some(r) = self.recurrent.as_mut() else {
            return;
        };
        if let Some(Some(state)) = r.many([id.0]).map(|mut v| v.pop()) {
            f(&j, state);
        }
        r.recycle_journal(id.0, j);
    }

    /// Bytes of recurrent state one sequence holds (0 for a model without recurrent layers).
    pub fn recurrent_bytes_per_seq(&self) -> usize {
        self.recurrent.as_ref().map_or(0, |r| 4 * r.per_seq())
    }

    /// The recurrent states of the sequences `ids` (in that order), each one `f32` slice
    /// over all recurrent layers (`RecurrentStates`' layout); `None` when a sequence is
    /// unknown, repeated, or the model has no recurrent layers.
    pub(crate) fn recurrent_states(&mut self, ids: &[SeqId]) -> Option<Vec<&mut [f32]>> {
        let r = self.recurrent.as_mut()?;
        r.many(ids.iter().map(|id| id.0))
    }

    /// Records that a sequence now holds `len` tokens (after a forward pass wrote them).
    pub(crate) fn set_len(&mut self, id: SeqId, len: usize) {
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            s.len = len;
        }
    }

    /// Slot index of position `pos` of a sequence (the block must be reserved).
    #[inline]
    pub(crate) fn slot(&self, table: &[u32], pos: usize) -> usize {
        table[pos / KV_BLOCK_SIZE] as usize * KV_BLOCK_SIZE + pos % KV_BLOCK_SIZE
    }

    /// Writes one token's K and V rows of layer `layer` into `slot` (of the layer's group's
    /// table).
    pub(crate) fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let (g, layer) = self.layer_at[layer];
        let (hd, n_kv) = (
            self.groups[g].head_dim,
            self.groups[g].kv_dim / self.groups[g].head_dim,
        );
        // Head-major within the block (`attention::head_row`): one head row per KV head.
        let rows = (0..n_kv).map(|h| (h, head_row(slot, h, n_kv, KV_BLOCK_SIZE)));
        match &mut self.groups[g].store {
            Store::F16 { k: ks, v: vs } => {
                for (h, r) in rows {
                    // The slice conversion uses F16C where the CPU has it (same rounding, to
                    // nearest even, as the scalar `f16::from_f32`).
                    let (src, dst) = (h * hd..(h + 1) * hd, r * hd..(r + 1) * hd);
                    ks[layer][dst.clone()].convert_from_f32_slice(&k[src.clone()]);
                    if !vs[layer].is_empty() {
                        vs[layer][dst].convert_from_f32_slice(&v[src]);
                    }
                }
            }
            Store::Q8 { k: ks, v: vs } => {
                let hb = KvDtype::Q8_0.row_bytes(hd);
                for (h, r) in rows {
                    let (src, dst) = (h * hd..(h + 1) * hd, r * hb..(r + 1) * hb);
                    quantize_q8(&k[src.clone()], &mut ks[layer][dst.clone()]);
                    if !vs[layer].is_empty() {
                        quantize_q8(&v[src], &mut vs[layer][dst]);
                    }
                }
            }
        }
    }

    /// Read view of one layer for the attention kernel.
    pub(crate) fn layer(&self, layer: usize) -> KvLayer<'_> {
        let (g, layer) = self.layer_at[layer];
        let kv_dim = self.groups[g].kv_dim;
        match &self.groups[g].store {
            Store::F16 { k, v } => KvLayer::f16(&k[layer], &v[layer], kv_dim, KV_BLOCK_SIZE),
            Store::Q8 { k, v } => KvLayer::q8_0(&k[layer], &v[layer], kv_dim, KV_BLOCK_SIZE),
        }
    }
}
