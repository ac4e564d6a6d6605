//! The KV block pool: reference-counted blocks, and the prefix cache that lets a freed block be
//! found again by the tokens it holds.
//!
//! # Why the prefix index lives next to the free list
//!
//! A block whose last owner finished is *either* free *or* still worth keeping because a later
//! request may start with the same tokens. Allocation must pick between "truly free" and "cached
//! but evictable" in one decision, and eviction must drop the block's index entry in the same
//! step, so both belong to one structure. The engine decides *when* to look prefixes up and
//! *which* blocks are complete enough to index; the pool keeps the bookkeeping consistent.
//!
//! # Invariants
//!
//! - Every block is in exactly one state: owned (`refs > 0`), evictable (`refs == 0`, indexed,
//!   in `lru`), or free (`refs == 0`, unindexed, in `free`).
//! - `index[h] == b` ⇔ `meta[b].hash == Some(h)`; only full blocks are indexed.
//! - A block's hash chains its parent's hash with its own tokens, so equal hashes mean equal
//!   whole prefixes; the stored tokens and parent hash are compared on every hit, so a 64-bit
//!   collision can cost a miss but never returns wrong K/V.
//!
//! # Events
//!
//! With an event log on ([`BlockPool::log_events`]), every change to the index is recorded as
//! it happens: a block entering it ([`KvEvent::Stored`]) and leaving it ([`KvEvent::Removed`]),
//! in order. Both are recorded in [`BlockPool::unindex`] and [`BlockPool::register`], the only
//! two places the index changes, so the log cannot disagree with the index: replaying it from
//! an empty index gives the index's keys (the test `the_event_log_replays_to_the_index`).

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

/// Tokens per KV block: the unit the pool hands out, hashes and shares (the cache's storage
/// is laid out in blocks of this many slots).
pub const KV_BLOCK_SIZE: usize = 16;

/// Hash of an empty prefix: the parent of every sequence's first block.
pub(crate) const ROOT_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// The chained hash of one full block of tokens after a prefix whose hash is `parent`.
pub(crate) fn block_hash(parent: u64, tokens: &[u32]) -> u64 {
    // std's SipHash with fixed keys: deterministic across runs, good enough to spread keys;
    // correctness never rests on it (hits are verified).
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

/// A change to the prefix index, as a KV-event subscriber sees it (vLLM's `BlockStored` /
/// `BlockRemoved` / `AllBlocksCleared`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// A full block entered the index.
    Stored {
        /// The block's chained hash.
        hash: u64,
        /// The hash of the block before it; `None` for a sequence's first block.
        parent: Option<u64>,
        /// The tokens the block holds ([`KV_BLOCK_SIZE`] of them).
        tokens: Vec<u32>,
    },
    /// A block left the index (evicted, flushed or caching turned off).
    Removed {
        /// The block's chained hash.
        hash: u64,
    },
    /// Every block left the index at once (the cache was rebuilt or its engine stopped).
    Cleared,
}

#[derive(Clone, Debug, Default)]
struct BlockMeta {
    refs: u32,
    hash: Option<u64>,
    parent: u64,
    tokens: [u32; KV_BLOCK_SIZE],
    /// Tick of the last release, the LRU key while evictable.
    released_at: u64,
}

/// Reference-counted blocks with a free list and an LRU of evictable cached blocks.
#[derive(Debug)]
pub(crate) struct BlockPool {
    meta: Vec<BlockMeta>,
    free: Vec<u32>,
    lru: BTreeSet<(u64, u32)>,
    index: HashMap<u64, u32>,
    tick: u64,
    caching: bool,
    /// Take an evictable cached block before a never-used free one (see
    /// [`BlockPool::recycling`]).
    recycle_first: bool,
    /// Blocks below this id have been allocated at least once (fresh blocks come off the free
    /// list in id order, below any block given back).
    touched: u32,
    /// Index changes since the last [`BlockPool::take_events`], when logging is on.
    events: Option<Vec<KvEvent>>,
}

impl BlockPool {
    pub(crate) fn new(n_blocks: usize) -> Self {
        BlockPool {
            meta: vec![BlockMeta::default(); n_blocks],
            free: (0..n_blocks as u32).rev().collect(),
            lru: BTreeSet::new(),
            index: HashMap::new(),
            tick: 0,
            caching: true,
            recycle_first: false,
            touched: 0,
            events: None,
        }
    }

    /// Starts recording index changes (see the module docs).
    pub(crate) fn log_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The index changes recorded since the last call, oldest first (empty when not logging).
    pub(crate) fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The hashes of every indexed block (owned or evictable), in no particular order.
    pub(crate) fn indexed(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys().copied()
    }

    /// A pool that evicts a cached block rather than use a block never used before: its
    /// memory (whose pages are mapped on first write) stays at the most blocks ever owned at
    /// once instead of growing until every block has held something. For the windowed layers,
    /// whose blocks are given back all along a sequence: keeping them all cached would touch
    /// the whole pool.
    pub(crate) fn recycling(n_blocks: usize) -> Self {
        BlockPool {
            recycle_first: true,
            ..Self::new(n_blocks)
        }
    }

    /// Turns the prefix index on or off; turning it off drops every cached block.
    pub(crate) fn set_caching(&mut self, on: bool) {
        self.caching = on;
        if !on {
            let cached: Vec<u32> = self.lru.iter().map(|&(_, b)| b).collect();
            self.lru.clear();
            for b in cached {
                self.unindex(b);
                self.free.push(b);
            }
            let owned: Vec<u32> = self.index.values().copied().collect();
            for b in owned {
                self.unindex(b);
            }
        }
    }

    /// Drops every cached block no sequence holds (they go back to the free list, out of the
    /// index); blocks in use keep their index. Returns how many were dropped.
    pub(crate) fn drop_cached(&mut self) -> usize {
        let cached: Vec<u32> = self.lru.iter().map(|&(_, b)| b).collect();
        self.lru.clear();
        for &b in &cached {
            self.unindex(b);
            self.free.push(b);
        }
        cached.len()
    }

    /// Blocks that an allocation can take: free plus evictable.
    pub(crate) fn available(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    /// Blocks held by at least one sequence.
    pub(crate) fn used(&self) -> usize {
        self.meta.len() - self.available()
    }

    /// Blocks kept only for prefix reuse.
    pub(crate) fn cached(&self) -> usize {
        self.lru.len()
    }

    fn unindex(&mut self, b: u32) {
        if let Some(h) = self.meta[b as usize].hash.take() {
            if self.index.get(&h) == Some(&b) {
                self.index.remove(&h);
                if let Some(log) = &mut self.events {
                    log.push(KvEvent::Removed { hash: h });
                }
            }
        }
    }

    /// Takes one block (refcount 1): a free one, else the least recently released cached one
    /// (a recycling pool takes the cached one before a free block never used).
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        let from_free = self
            .free
            .last()
            .is_some_and(|&b| !self.recycle_first || b < self.touched || self.lru.is_empty());
        let b = match from_free {
            true => self.free.pop()?,
            false => {
                let &(t, b) = self.lru.iter().next()?;
                self.lru.remove(&(t, b));
                self.unindex(b);
                b
            }
        };
        self.touched = self.touched.max(b + 1);
        self.meta[b as usize].refs = 1;
        Some(b)
    }

    /// Drops one reference; the last one frees the block or, if indexed, makes it evictable.
    pub(crate) fn release(&mut self, b: u32) {
        let m = &mut self.meta[b as usize];
        debug_assert!(m.refs > 0, "release of an unowned block {b}");
        m.refs = m.refs.saturating_sub(1);
        if m.refs == 0 {
            if m.hash.is_some() {
                self.tick += 1;
                m.released_at = self.tick;
                self.lru.insert((self.tick, b));
            } else {
                self.free.push(b);
            }
        }
    }

    /// Looks up the block holding `tokens` after the prefix `parent` and takes a reference.
    pub(crate) fn acquire_cached(&mut self, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        if !self.caching {
            return None;
        }
        let h = block_hash(parent, tokens);
        let &b = self.index.get(&h)?;
        let m = &mut self.meta[b as usize];
        if m.parent != parent || m.tokens[..] != *tokens {
            return None;
        }
        if m.refs == 0 {
            self.lru.remove(&(m.released_at, b));
        }
        m.refs += 1;
        Some((b, h))
    }

    /// Whether a block with the chained hash `hash` is in the index (owned or evictable).
    pub(crate) fn contains(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    /// Whether the block holding `tokens` after the prefix `parent` is in the index (owned or
    /// evictable), without taking it.
    pub(crate) fn is_cached(&self, parent: u64, tokens: &[u32]) -> bool {
        self.caching
            && self
                .index
                .get(&block_hash(parent, tokens))
                .is_some_and(|&b| {
                    let m = &self.meta[b as usize];
                    m.parent == parent && m.tokens[..] == *tokens
                })
    }

    /// Indexes a full owned block under the prefix `parent`; returns its hash. If another block
    /// already holds the same prefix, this one stays unindexed (it is freed normally later).
    pub(crate) fn register(&mut self, b: u32, parent: u64, tokens: &[u32]) -> u64 {
        let h = block_hash(parent, tokens);
        if !self.caching || self.meta[b as usize].hash.is_some() || self.index.contains_key(&h) {
            return h;
        }
        let m = &mut self.meta[b as usize];
        m.hash = Some(h);
        m.parent = parent;
        m.tokens.copy_from_slice(tokens);
        self.index.insert(h, b);
        if let Some(log) = &mut self.events {
            log.push(KvEvent::Stored {
                hash: h,
                parent: (parent != ROOT_HASH).then_some(parent),
                tokens: tokens.to_vec(),
            });
        }
        h
    }

    /// Checks the invariants, given how many sequence tables reference each block.
    pub(crate) fn check(&self, table_refs: &[u32]) -> Result<(), String> {
        let mut seen = vec![0u8; self.meta.len()];
        for &b in &self.free {
            seen[b as usize] += 1;
            let m = &self.meta[b as usize];
            if m.refs != 0 || m.hash.is_some() {
                return Err(format!("free block {b} is owned or indexed"));
            }
        }
        for &(_, b) in &self.lru {
            seen[b as usize] += 1;
            let m = &self.meta[b as usize];
            if m.refs != 0 || m.hash.is_none() {
                return Err(format!("evictable block {b} is owned or unindexed"));
            }
        }
        for (b, m) in self.meta.iter().enumerate() {
            if m.refs > 0 {
                seen[b] += 1;
            }
            if table_refs.get(b).copied().unwrap_or(0) != m.refs {
                return Err(format!(
                    "block {b} has {} references but {} tables hold it",
                    m.refs,
                    table_refs.get(b).copied().unwrap_or(0)
                ));
            }
            if let Some(h) = m.hash {
                if self.index.get(&h) != Some(&(b as u32)) {
                    return Err(format!(
                        "block {b} is indexed under a hash that names another"
                    ));
                }
            }
        }
        if let Some(b) = seen.iter().position(|&s| s != 1) {
            return Err(format!("block {b} is in {} states", seen[b]));
        }
        for (&h, &b) in &self.index {
            if self.meta[b as usize].hash != Some(h) {
                return Err(format!("index entry for block {b} is stale"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(seed: u32) -> Vec<u32> {
        (0..KV_BLOCK_SIZE as u32).map(|i| seed * 100 + i).collect()
    }

    impl BlockPool {
        /// Refs as the pool itself counts them (these tests have no tables).
        fn self_check(&self) {
            let refs: Vec<u32> = self.meta.iter().map(|m| m.refs).collect();
            self.check(&refs).unwrap();
        }
    }

    #[test]
    fn released_indexed_blocks_are_reused_then_evicted_lru() {
        let mut p = BlockPool::new(3);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        let ha = p.register(a, ROOT_HASH, &toks(1));
        p.register(b, ha, &toks(2));
        p.release(a);
        p.release(b);
        p.self_check();
        assert_eq!((p.available(), p.cached(), p.used()), (3, 2, 0));
        // A hit takes the block back out of the LRU.
        assert_eq!(p.acquire_cached(ROOT_HASH, &toks(1)), Some((a, ha)));
        // Same tokens under another parent: a miss.
        assert_eq!(p.acquire_cached(ROOT_HASH, &toks(2)), None);
        p.self_check();
        // Allocation prefers the free block, then evicts the oldest cached one (b).
        let c = p.alloc().unwrap();
        assert_ne!(c, b);
        let d = p.alloc().unwrap();
        assert_eq!(d, b);
        assert_eq!(p.acquire_cached(ha, &toks(2)), None);
        assert_eq!(p.alloc(), None);
        p.self_check();
    }

    #[test]
    fn a_recycling_pool_evicts_before_it_uses_a_fresh_block() {
        for recycling in [false, true] {
            let mut p = match recycling {
                true => BlockPool::recycling(4),
                false => BlockPool::new(4),
            };
            let a = p.alloc().unwrap();
            p.register(a, ROOT_HASH, &toks(1));
            p.release(a);
            assert_eq!(p.cached(), 1);
            let b = p.alloc().unwrap();
            if recycling {
                // The cached block is taken back (and dropped from the index).
                assert_eq!((b, p.cached()), (a, 0));
                assert_eq!(p.acquire_cached(ROOT_HASH, &toks(1)), None);
            } else {
                assert_ne!(b, a);
                assert_eq!(p.cached(), 1);
            }
            // A block given back unindexed is reused first either way.
            p.release(b);
            assert_eq!(p.alloc(), Some(b));
            p.self_check();
        }
    }

    /// Replays a log onto a set of hashes, as a subscriber would.
    fn replay(log: &[KvEvent], into: &mut std::collections::HashSet<u64>) {
        for e in log {
            match e {
                KvEvent::Stored { hash, .. } => assert!(into.insert(*hash), "stored twice"),
                KvEvent::Removed { hash } => assert!(into.remove(hash), "removed unknown"),
                KvEvent::Cleared => into.clear(),
            }
        }
    }

    #[test]
    fn the_event_log_replays_to_the_index() {
        let mut p = BlockPool::new(3);
        p.log_events();
        let mut seen = std::collections::HashSet::new();
        let check = |p: &mut BlockPool, seen: &mut std::collections::HashSet<u64>| {
            replay(&p.take_events(), seen);
            let mut want: Vec<u64> = p.indexed().collect();
            let mut got: Vec<u64> = seen.iter().copied().collect();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want);
        };
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        let ha = p.register(a, ROOT_HASH, &toks(1));
        let hb = p.register(b, ha, &toks(2));
        // The first block has no parent; the second names the first.
        let log = p.take_events();
        assert_eq!(
            log,
            vec![
                KvEvent::Stored {
                    hash: ha,
                    parent: None,
                    tokens: toks(1)
                },
                KvEvent::Stored {
                    hash: hb,
                    parent: Some(ha),
                    tokens: toks(2)
                },
            ]
        );
        replay(&log, &mut seen);
        // A duplicate prefix is not stored again; a hit changes nothing.
        let c = p.alloc().unwrap();
        p.register(c, ROOT_HASH, &toks(1));
        p.release(c);
        assert!(p.take_events().is_empty());
        p.release(a);
        p.release(b);
        assert_eq!(p.acquire_cached(ROOT_HASH, &toks(1)), Some((a, ha)));
        assert!(p.take_events().is_empty());
        // Eviction by allocation removes the oldest cached block (b).
        let d = p.alloc().unwrap();
        assert_eq!(d, c);
        let e = p.alloc().unwrap();
        assert_eq!(e, b);
        let log = p.take_events();
        assert_eq!(log, vec![KvEvent::Removed { hash: hb }]);
        replay(&log, &mut seen);
        check(&mut p, &mut seen);
        // A flush drops only unowned blocks; caching off drops the rest.
        p.release(a);
        assert_eq!(p.drop_cached(), 1);
        check(&mut p, &mut seen);
        let hf = p.register(e, ROOT_HASH, &toks(3));
        check(&mut p, &mut seen);
        p.set_caching(false);
        assert_eq!(p.take_events(), vec![KvEvent::Removed { hash: hf }]);
        assert_eq!(p.indexed().count(), 0);
    }

    #[test]
    fn duplicate_prefix_stays_unindexed_and_caching_off_frees_all() {
        let mut p = BlockPool::new(4);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        p.register(a, ROOT_HASH, &toks(1));
        p.register(b, ROOT_HASH, &toks(1));
        p.release(b);
        p.self_check();
        assert_eq!(p.cached(), 0);
        p.release(a);
        assert_eq!(p.cached(), 1);
        p.set_caching(false);
        p.self_check();
        assert_eq!((p.cached(), p.available()), (0, 4));
        assert_eq!(p.acquire_cached(ROOT_HASH, &toks(1)), None);
    }
}
