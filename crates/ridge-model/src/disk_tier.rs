//! The prefix cache's disk tier: full KV blocks kept as files, so an agent's system prompt and
//! tool block survive a restart or an eviction from memory and are read back instead of
//! prefilled again (llama-server's slot save/restore, SGLang's HiCache and LMCache do the
//! same at other granularities).
//!
//! # Why write-through at commit
//!
//! A block is written when it enters the in-memory prefix index (the engine committed it),
//! not when it is evicted: a server stopped by SIGTERM, or killed, then still finds every
//! block it ever indexed, and an eviction is never delayed by a write. A block is 16 tokens of
//! every layer's K and V (459 KB for Qwen2.5 1.5B in f16), written once per content hash and
//! never again; prefill writes at most a few MB per step into the page cache, against seconds
//! of compute — the cost does not show.
//!
//! # Content-addressed, checked on read
//!
//! A file is named by its block's chained hash (the hash of every token from the start of the
//! sequence, as the in-memory index keys it) under a folder per model fingerprint (the weights
//! file's identity), so two models never share a file. Its header repeats what the name
//! implies — the fingerprint, the chained hash, the parent hash and the block's 16 tokens, the
//! element type, layer count and row width — and ends with a CRC-32 of the payload. A lookup
//! matches the header against the tokens it is looking for and the checksum against the bytes
//! read; anything else (a truncated write, a flipped bit, another layout, a 64-bit hash
//! collision) is a miss and the file is deleted. Files are written to a temporary name and
//! renamed, so a reader never sees half a file.
//!
//! # Bounded
//!
//! The folder holds at most `max_bytes`; past it the least recently used files (by last write
//! or hit, kept in memory and initialised from the files' modification times at start) are
//! deleted.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::UNIX_EPOCH;

use crate::block_pool::KV_BLOCK_SIZE;

/// Where and how much the disk tier keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskTierConfig {
    /// The folder (a subfolder per model fingerprint is made in it).
    pub dir: PathBuf,
    /// Most bytes of block files kept for this model.
    pub max_bytes: u64,
    /// The model's identity: blocks of another fingerprint are never read.
    pub fingerprint: u64,
}

/// Counters of the disk tier's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskTierStats {
    /// Block files held now.
    pub blocks: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Blocks written.
    pub writes: u64,
    /// Blocks read back into the cache.
    pub hits: u64,
    /// Files found wrong on read (and deleted).
    pub rejected: u64,
    /// Writes that failed (the folder unwritable or full): the block simply is not kept.
    pub write_errors: u64,
}

const MAGIC: &[u8; 8] = b"RIDGEKV1";
/// Header: magic, fingerprint, hash, parent, tokens, element type, layers, bytes per layer
/// per block (K and V each), payload CRC-32.
const HEADER: usize = 8 + 8 + 8 + 8 + 4 * KV_BLOCK_SIZE + 4 + 4 + 8 + 4;

/// What a block file's payload is: `layers` × (K, V) slices of `bytes_per_half` bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Element type code (and byte order): mismatches are misses.
    pub dtype: u32,
    /// Layers with K/V.
    pub layers: u32,
    /// Bytes of one layer's K (or V) for one block.
    pub bytes_per_half: u64,
}

struct FileInfo {
    bytes: u64,
    used: u64,
}

/// The disk tier of one cache.
pub(crate) struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    fingerprint: u64,
    layout: Layout,
    files: HashMap<u64, FileInfo>,
    tick: u64,
    stats: DiskTierStats,
}

fn file_name(hash: u64) -> String {
    format!("{hash:016x}.kvb")
}

impl DiskTier {
    /// Opens (creating it) the model's folder and indexes the block files already there.
    pub(crate) fn open(cfg: &DiskTierConfig, layout: Layout) -> std::io::Result<DiskTier> {
        let dir = cfg.dir.join(format!("{:016x}", cfg.fingerprint));
        std::fs::create_dir_all(&dir)?;
        let mut found: Vec<(u64, u64, u64)> = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") {
                // A write cut short by a crash.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let Some(hash) = name
                .strip_suffix(".kvb")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
            else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            found.push((hash, meta.len(), mtime));
        }
        // Oldest first, so the LRU order survives the restart.
        found.sort_by_key(|&(_, _, t)| t);
        let mut tier = DiskTier {
            dir,
            max_bytes: cfg.max_bytes,
            fingerprint: cfg.fingerprint,
            layout,
            files: HashMap::new(),
            tick: 0,
            stats: DiskTierStats::default(),
        };
        for (hash, bytes, _) in found {
            tier.tick += 1;
            tier.stats.bytes += bytes;
            tier.files.insert(
                hash,
                FileInfo {
                    bytes,
                    used: tier.tick,
                },
            );
        }
        tier.stats.blocks = tier.files.len();
        tier.evict();
        Ok(tier)
    }

    /// Whether a file for the chained hash `hash` is kept.
    pub(crate) fn has(&self, hash: u64) -> bool {
        self.files.contains_key(&hash)
    }

    /// The counters.
    pub(crate) fn stats(&self) -> DiskTierStats {
        self.stats
    }

    fn header(&self, hash: u64, parent: u64, tokens: &[u32], crc: u32) -> Vec<u8> {
        let mut h = Vec::with_capacity(HEADER);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.fingerprint.to_le_bytes());
        h.extend_from_slice(&hash.to_le_bytes());
        h.extend_from_slice(&parent.to_le_bytes());
        for t in tokens {
            h.extend_from_slice(&t.to_le_bytes());
        }
        h.extend_from_slice(&self.layout.dtype.to_le_bytes());
        h.extend_from_slice(&self.layout.layers.to_le_bytes());
        h.extend_from_slice(&self.layout.bytes_per_half.to_le_bytes());
        h.extend_from_slice(&crc.to_le_bytes());
        h
    }

    /// Writes a block (its `halves`: every layer's K then V bytes, in layer order) unless a
    /// file for `hash` is kept already. A failed write is counted and otherwise ignored.
    pub(crate) fn save(&mut self, hash: u64, parent: u64, tokens: &[u32], halves: &[&[u8]]) {
        if self.files.contains_key(&hash) {
            return;
        }
        let mut crc = crc32fast::Hasher::new();
        for h in halves {
            crc.update(h);
        }
        let header = self.header(hash, parent, tokens, crc.finalize());
        let path = self.dir.join(file_name(hash));
        let tmp = self.dir.join(format!("{}.tmp", file_name(hash)));
        let written = (|| -> std::io::Result<u64> {
            let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
            f.write_all(&header)?;
            for h in halves {
                f.write_all(h)?;
            }
            // No fsync: a file cut short by a crash fails its checksum on read.
            f.into_inner().map_err(|e| e.into_error())?;
            std::fs::rename(&tmp, &path)?;
            Ok(HEADER as u64 + halves.iter().map(|h| h.len() as u64).sum::<u64>())
        })();
        match written {
            Ok(bytes) => {
                self.tick += 1;
                self.files.insert(
                    hash,
                    FileInfo {
                        bytes,
                        used: self.tick,
                    },
                );
                self.stats.bytes += bytes;
                self.stats.writes += 1;
                self.stats.blocks = self.files.len();
                self.evict();
            }
            Err(_) => {
                let _ = std::fs::remove_file(&tmp);
                self.stats.write_errors += 1;
            }
        }
    }

    /// Reads the block for `hash` (holding `tokens` after the prefix `parent`) into `halves`
    /// (every layer's K then V, as [`DiskTier::save`] takes them); false on a miss. A file that
    /// does not match, in its header or its checksum, is deleted.
    pub(crate) fn load(
        &mut self,
        hash: u64,
        parent: u64,
        tokens: &[u32],
        halves: &mut [&mut [u8]],
    ) -> bool {
        if !self.files.contains_key(&hash) {
            return false;
        }
        let path = self.dir.join(file_name(hash));
        let ok = (|| -> std::io::Result<bool> {
            let mut f = std::fs::File::open(&path)?;
            let mut head = vec![0u8; HEADER];
            f.read_exact(&mut head)?;
            let crc_at = HEADER - 4;
            let want = u32::from_le_bytes([
                head[crc_at],
                head[crc_at + 1],
                head[crc_at + 2],
                head[crc_at + 3],
            ]);
            if head[..crc_at] != self.header(hash, parent, tokens, 0)[..crc_at] {
                return Ok(false);
            }
            let mut crc = crc32fast::Hasher::new();
            for h in halves.iter_mut() {
                f.read_exact(h)?;
                crc.update(h);
            }
            // Nothing may follow the payload.
            let mut extra = [0u8; 1];
            Ok(crc.finalize() == want && f.read(&mut extra)? == 0)
        })()
        .unwrap_or(false);
        if ok {
            // The modification time carries the LRU order across restarts.
            let _ = std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            self.tick += 1;
            if let Some(info) = self.files.get_mut(&hash) {
                info.used = self.tick;
            }
            self.stats.hits += 1;
        } else {
            self.stats.rejected += 1;
            self.forget(hash);
        }
        ok
    }

    fn forget(&mut self, hash: u64) {
        if let Some(info) = self.files.remove(&hash) {
            let _ = std::fs::remove_file(self.dir.join(file_name(hash)));
            self.stats.bytes = self.stats.bytes.saturating_sub(info.bytes);
            self.stats.blocks = self.files.len();
        }
    }

    /// Deletes the least recently used files until the folder fits its budget.
    fn evict(&mut self) {
        if self.stats.bytes <= self.max_bytes {
            return;
        }
        let mut by_age: Vec<(u64, u64)> = self.files.iter().map(|(&h, i)| (i.used, h)).collect();
        by_age.sort_unstable();
        for (_, h) in by_age {
            if self.stats.bytes <= self.max_bytes {
                break;
            }
            self.forget(h);
        }
    }

    /// The folder of this model's block files.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            dtype: 1,
            layers: 2,
            bytes_per_half: 64,
        }
    }

    fn block(seed: u8) -> Vec<Vec<u8>> {
        (0..4)
            .map(|i| {
                (0..64)
                    .map(|j| seed.wrapping_mul(31) ^ (i * 64 + j) as u8)
                    .collect()
            })
            .collect()
    }

    fn save(t: &mut DiskTier, hash: u64, seed: u8) {
        let b = block(seed);
        let refs: Vec<&[u8]> = b.iter().map(Vec::as_slice).collect();
        t.save(hash, 7, &[seed as u32; KV_BLOCK_SIZE], &refs);
    }

    fn load(t: &mut DiskTier, hash: u64, seed: u8) -> Option<Vec<Vec<u8>>> {
        let mut out = vec![vec![0u8; 64]; 4];
        let mut refs: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
        t.load(hash, 7, &[seed as u32; KV_BLOCK_SIZE], &mut refs)
            .then_some(out)
    }

    #[test]
    fn blocks_come_back_after_a_reopen_and_bad_files_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = DiskTierConfig {
            dir: dir.path().to_path_buf(),
            max_bytes: 1 << 20,
            fingerprint: 42,
        };
        let mut t = DiskTier::open(&cfg, layout()).unwrap();
        save(&mut t, 1, 1);
        save(&mut t, 2, 2);
        assert_eq!(t.stats().writes, 2);
        // A reopened tier (a restarted server) finds both.
        let mut t = DiskTier::open(&cfg, layout()).unwrap();
        assert_eq!(t.stats().blocks, 2);
        assert_eq!(load(&mut t, 1, 1), Some(block(1)));
        // Other tokens under the same hash (a collision), another layout, another model: misses.
        assert_eq!(load(&mut t, 2, 3), None);
        assert!(!t.has(2), "a mismatched file is deleted");
        let mut other = DiskTier::open(
            &DiskTierConfig {
                fingerprint: 43,
                ..cfg.clone()
            },
            layout(),
        )
        .unwrap();
        assert_eq!(load(&mut other, 1, 1), None);
        let wide = Layout {
            bytes_per_half: 32,
            ..layout()
        };
        save(&mut t, 3, 3);
        let mut t2 = DiskTier::open(&cfg, wide).unwrap();
        let mut out = vec![vec![0u8; 32]; 4];
        let mut refs: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
        assert!(!t2.load(3, 7, &[3; KV_BLOCK_SIZE], &mut refs));
        // A flipped payload bit fails the checksum.
        let mut t = DiskTier::open(&cfg, layout()).unwrap();
        save(&mut t, 4, 4);
        let p = t.dir().join(file_name(4));
        let mut bytes = std::fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        assert_eq!(load(&mut t, 4, 4), None);
        assert_eq!(t.stats().rejected, 1);
        assert!(!p.exists());
    }

    #[test]
    fn the_folder_stays_within_its_budget_dropping_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let one = (HEADER + 4 * 64) as u64;
        let cfg = DiskTierConfig {
            dir: dir.path().to_path_buf(),
            max_bytes: 3 * one,
            fingerprint: 1,
        };
        let mut t = DiskTier::open(&cfg, layout()).unwrap();
        for s in 1..=3 {
            save(&mut t, s as u64, s);
        }
        // A hit makes block 1 the most recently used: block 2 goes first.
        assert!(load(&mut t, 1, 1).is_some());
        save(&mut t, 4, 4);
        assert_eq!(t.stats().blocks, 3);
        assert!(t.has(1) && !t.has(2) && t.has(3) && t.has(4));
        assert!(t.stats().bytes <= 3 * one);
        let files = std::fs::read_dir(t.dir()).unwrap().count();
        assert_eq!(files, 3);
        // A smaller budget at the next start trims the oldest.
        let t = DiskTier::open(
            &DiskTierConfig {
                max_bytes: one,
                ..cfg
            },
            layout(),
        )
        .unwrap();
        assert_eq!(t.stats().blocks, 1);
    }
}
