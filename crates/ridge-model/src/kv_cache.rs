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

use crate::block_pool::{BlockPool, ROOT_HASH};
use crate::{ModelConfig, ModelError};
use half::f16;
use half::slice::HalfFloatSliceExt;
use ridge_kernels::attention::{KvLayer, Q8_BLOCK_BYTES};

/// Tokens per KV block.
pub const KV_BLOCK_SIZE: usize = 16;

/// Identifies a sequence in a [`KvCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(pub usize);

#[derive(Debug, Default)]
struct SeqState {
    blocks: Vec<u32>,
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
        2 * cfg.n_layers * self.row_bytes(cfg.kv_dim())
    }

    /// Bytes per cached element row of `kv_dim` elements.
    pub fn row_bytes(self, kv_dim: usize) -> usize {
        match self {
            KvDtype::F16 => 2 * kv_dim,
            KvDtype::Q8_0 => kv_dim / 32 * Q8_BLOCK_BYTES,
        }
    }
}

/// Per-layer K and V arrays.
enum Store {
    F16 { k: Vec<Vec<f16>>, v: Vec<Vec<f16>> },
    Q8 { k: Vec<Vec<u8>>, v: Vec<Vec<u8>> },
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

/// Paged K/V storage plus per-sequence block tables.
pub struct KvCache {
    kv_dim: usize,
    n_blocks: usize,
    store: Store,
    pool: BlockPool,
    seqs: Vec<Option<SeqState>>,
}

/// `n` zero halves from the zeroing allocator: pages are mapped on first write, so a large pool
/// costs memory only as sequences fill it.
fn zeroed(n: usize) -> Vec<f16> {
    use half::vec::HalfBitsVecExt;
    vec![0u16; n].reinterpret_into()
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
        if dtype == KvDtype::Q8_0 && !cfg.head_dim.is_multiple_of(32) {
            return Err(ModelError::BadBatch(format!(
                "a q8_0 KV cache needs head_dim to be a multiple of 32, this model has {}",
                cfg.head_dim
            )));
        }
        Ok(Self::build(cfg, capacity_tokens, dtype))
    }

    fn build(cfg: &ModelConfig, capacity_tokens: usize, dtype: KvDtype) -> Self {
        let n_blocks = capacity_tokens.div_ceil(KV_BLOCK_SIZE).max(1);
        let slots = n_blocks * KV_BLOCK_SIZE * cfg.kv_dim();
        KvCache {
            kv_dim: cfg.kv_dim(),
            n_blocks,
            store: match dtype {
                KvDtype::F16 => Store::F16 {
                    k: (0..cfg.n_layers).map(|_| zeroed(slots)).collect(),
                    v: (0..cfg.n_layers).map(|_| zeroed(slots)).collect(),
                },
                KvDtype::Q8_0 => {
                    let bytes = n_blocks * KV_BLOCK_SIZE * KvDtype::Q8_0.row_bytes(cfg.kv_dim());
                    Store::Q8 {
                        k: (0..cfg.n_layers).map(|_| vec![0u8; bytes]).collect(),
                        v: (0..cfg.n_layers).map(|_| vec![0u8; bytes]).collect(),
                    }
                }
            },
            pool: BlockPool::new(n_blocks),
            seqs: Vec::new(),
        }
    }

    /// Bytes of K and V storage.
    pub fn bytes(&self) -> usize {
        let (layers, dtype) = match &self.store {
            Store::F16 { k, .. } => (k.len(), KvDtype::F16),
            Store::Q8 { k, .. } => (k.len(), KvDtype::Q8_0),
        };
        2 * layers * self.n_blocks * KV_BLOCK_SIZE * dtype.row_bytes(self.kv_dim)
    }

    /// The element type.
    pub fn dtype(&self) -> KvDtype {
        match self.store {
            Store::F16 { .. } => KvDtype::F16,
            Store::Q8 { .. } => KvDtype::Q8_0,
        }
    }

    /// Total blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks not owned by any sequence (free, or cached for prefix reuse and evictable).
    pub fn free_blocks(&self) -> usize {
        self.pool.available()
    }

    /// Blocks owned by at least one sequence.
    pub fn used_blocks(&self) -> usize {
        self.pool.used()
    }

    /// Unowned blocks kept for prefix reuse.
    pub fn cached_blocks(&self) -> usize {
        self.pool.cached()
    }

    /// Turns prefix caching on (the default) or off; off drops every cached block.
    pub fn set_prefix_caching(&mut self, on: bool) {
        self.pool.set_caching(on);
        for s in self.seqs.iter_mut().flatten() {
            s.hashes.clear();
        }
    }

    /// Starts an empty sequence.
    pub fn add_seq(&mut self) -> SeqId {
        if let Some(i) = self.seqs.iter().position(|s| s.is_none()) {
            self.seqs[i] = Some(SeqState::default());
            SeqId(i)
        } else {
            self.seqs.push(Some(SeqState::default()));
            SeqId(self.seqs.len() - 1)
        }
    }

    /// Ends a sequence and drops its references to its blocks. Unknown ids are ignored.
    pub fn remove_seq(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(id.0).and_then(Option::take) {
            for &b in s.blocks.iter().rev() {
                self.pool.release(b);
            }
        }
    }

    /// Shares the longest cached prefix of `tokens` (whole blocks, at most `max_tokens`
    /// tokens) into an empty sequence; returns the number of tokens now cached for it.
    pub fn attach_cached_prefix(&mut self, id: SeqId, tokens: &[u32], max_tokens: usize) -> usize {
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return 0;
        };
        if s.len != 0 || !s.blocks.is_empty() {
            return 0;
        }
        let mut parent = ROOT_HASH;
        let limit = max_tokens.min(tokens.len()) / KV_BLOCK_SIZE;
        for chunk in tokens.chunks_exact(KV_BLOCK_SIZE).take(limit) {
            match self.pool.acquire_cached(parent, chunk) {
                Some((b, h)) => {
                    s.blocks.push(b);
                    s.hashes.push(h);
                    parent = h;
                }
                None => break,
            }
        }
        s.len = s.blocks.len() * KV_BLOCK_SIZE;
        s.len
    }

    /// Indexes the sequence's full, computed blocks for prefix reuse. `tokens` are the
    /// sequence's tokens (at least as many as it has cached).
    pub fn commit_blocks(&mut self, id: SeqId, tokens: &[u32]) {
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return;
        };
        let full = s.len.min(tokens.len()) / KV_BLOCK_SIZE;
        while s.hashes.len() < full {
            let i = s.hashes.len();
            let parent = s.hashes.last().copied().unwrap_or(ROOT_HASH);
            let chunk = &tokens[i * KV_BLOCK_SIZE..(i + 1) * KV_BLOCK_SIZE];
            let h = self.pool.register(s.blocks[i], parent, chunk);
            s.hashes.push(h);
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

    /// The block table of a sequence.
    pub fn block_table(&self, id: SeqId) -> &[u32] {
        self.seq(id).map_or(&[], |s| &s.blocks)
    }

    /// Verifies the pool's bookkeeping against the block tables: every block is free, cached or
    /// owned, and its reference count equals the number of tables that hold it (no block leaked
    /// or double-owned). For tests and debugging.
    pub fn check_consistency(&self) -> Result<(), String> {
        let mut refs = vec![0u32; self.n_blocks];
        for s in self.seqs.iter().flatten() {
            for &b in &s.blocks {
                refs[b as usize] += 1;
            }
            if s.len > s.blocks.len() * KV_BLOCK_SIZE {
                return Err(format!(
                    "a sequence of {} tokens holds {} blocks",
                    s.len,
                    s.blocks.len()
                ));
            }
        }
        self.pool.check(&refs)
    }

    /// Blocks a sequence still needs to hold `len` tokens.
    pub fn blocks_needed(&self, id: SeqId, len: usize) -> usize {
        let have = self.block_table(id).len();
        len.div_ceil(KV_BLOCK_SIZE).saturating_sub(have)
    }

    /// Makes room for a sequence to hold `len` tokens, taking blocks from the pool. On failure
    /// nothing is taken.
    pub fn reserve(&mut self, id: SeqId, len: usize) -> Result<(), ModelError> {
        self.seq(id)?;
        let need = self.blocks_needed(id, len);
        if need > self.pool.available() {
            return Err(ModelError::KvFull {
                needed: need,
                free: self.pool.available(),
            });
        }
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            // Cannot come up short: `available()` blocks can all be allocated.
            s.blocks
                .extend(std::iter::from_fn(|| self.pool.alloc()).take(need));
        }
        Ok(())
    }

    /// Forgets a sequence's positions from `len` on (speculative tokens that were rejected)
    /// but keeps its blocks reserved. Positions below `len` are untouched; indexed (full,
    /// committed) blocks are never cut, so `len` is clamped to keep them.
    pub fn rewind(&mut self, id: SeqId, len: usize) {
        if let Some(Some(s)) = self.seqs.get_mut(id.0) {
            s.len = len.max(s.hashes.len() * KV_BLOCK_SIZE).min(s.len);
        }
    }

    /// As [`KvCache::rewind`], and returns the blocks past the new length to the pool.
    pub fn truncate(&mut self, id: SeqId, len: usize) {
        self.rewind(id, len);
        let Some(Some(s)) = self.seqs.get_mut(id.0) else {
            return;
        };
        let keep = s.len.div_ceil(KV_BLOCK_SIZE);
        while s.blocks.len() > keep {
            if let Some(b) = s.blocks.pop() {
                self.pool.release(b);
            }
        }
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

    /// Writes one token's K and V rows of layer `layer` into `slot`.
    pub(crate) fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        match &mut self.store {
            Store::F16 { k: ks, v: vs } => {
                // The slice conversion uses F16C where the CPU has it (same rounding, to
                // nearest even, as the scalar `f16::from_f32`).
                ks[layer][slot * d..(slot + 1) * d].convert_from_f32_slice(&k[..d]);
                vs[layer][slot * d..(slot + 1) * d].convert_from_f32_slice(&v[..d]);
            }
            Store::Q8 { k: ks, v: vs } => {
                let rb = KvDtype::Q8_0.row_bytes(d);
                quantize_q8(k, &mut ks[layer][slot * rb..(slot + 1) * rb]);
                quantize_q8(v, &mut vs[layer][slot * rb..(slot + 1) * rb]);
            }
        }
    }

    /// Read view of one layer for the attention kernel.
    pub(crate) fn layer(&self, layer: usize) -> KvLayer<'_> {
        match &self.store {
            Store::F16 { k, v } => KvLayer::f16(&k[layer], &v[layer], self.kv_dim, KV_BLOCK_SIZE),
            Store::Q8 { k, v } => KvLayer::q8_0(&k[layer], &v[layer], self.kv_dim, KV_BLOCK_SIZE),
        }
    }
}
