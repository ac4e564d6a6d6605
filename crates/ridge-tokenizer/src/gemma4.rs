//! Gemma 4's vocabulary, `tokenizer.ggml.model = "gemma4"`: BPE driven by an explicit merge
//! list, like byte-level BPE, but over SentencePiece-style text, like `spm.rs`.
//!
//! # What llama.cpp does, and so what we do
//!
//! The Gemma 4 tokenizer is a Hugging Face BPE model with a `▁` normalizer and byte fallback.
//! llama.cpp runs it as a BPE vocabulary with its own pre-tokenizer type, and the model was
//! evaluated with that, so we reproduce its rules exactly:
//!
//! 1. Every space (U+0020 only) becomes U+2581 `▁`. No space prefix is added, at the start or
//!    after a special token.
//! 2. The text is cut into runs of non-newlines and runs of newlines (the regex
//!    `[^\n]+|[\n]+`): a "word" is a whole line, or a whole run of line breaks. There is no
//!    word-level splitting; the merges cross `▁`.
//! 3. A word made only of newlines that is itself a token is taken whole (llama.cpp's fix for
//!    Gemma 4, where merges alone do not rebuild every newline run the vocabulary has).
//! 4. Otherwise the word starts as one symbol per Unicode character, not per byte: there is no
//!    GPT-2 byte alphabet. Adjacent pairs are merged lowest `tokenizer.ggml.merges` rank first,
//!    the leftmost pair on equal ranks, until no listed pair is left.
//! 5. Each final symbol is its token. A symbol that is not a token (a character missing from
//!    the vocabulary, e.g. most emoji) becomes its UTF-8 bytes as `<0xNN>` tokens (upper-case
//!    hex, as llama.cpp spells them); a byte without such a token is dropped, as llama.cpp
//!    drops it (Gemma 4 has all 256).
//!
//! # Why a hand-written merge loop
//!
//! It is the loop of `spm.rs` with the priority taken from the merge rank of the pair instead
//! of the score of the merged token. Every symbol carries its token id, and merges are looked
//! up by the pair of ids in one hash table (`(left, right) -> (rank, merged)`), so a candidate
//! pair costs one probe and no string is built. The `tokenizers` crate's BPE would need its
//! byte-fallback and unknown-token rules bent to llama.cpp's (missing bytes dropped, never the
//! unknown token), and its word cache does not help when a word is a whole line.
//!
//! The merges arrive from `vocab.rs` as token ids, checked there: both sides of every merge and
//! their concatenation are tokens. So every merged symbol is a token, and a symbol that is not
//! a token is a single character that no merge names. (Gemma 4 lists 514 906 merges; taking
//! them as ids, without a `String` per side, builds its tokenizer in about 0.3 s instead of 1.)

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::spm::TokenIndex;
use crate::TokenizerError;

/// No token / no symbol.
const NONE: u32 = u32::MAX;

/// Hashes the `u64` key `left << 32 | right` with SplitMix64's finalizer: the hash table picks
/// buckets by the low bits, which a plain multiplication would leave depending on `right` only.
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let mut z = (self.0 ^ x).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

/// The Gemma 4 encoder state built at load.
#[derive(Debug)]
pub(crate) struct Gemma4Bpe {
    index: TokenIndex,
    /// `(left id, right id)` -> `(rank, merged id)`; the first listing of a pair wins.
    merges: HashMap<u64, (u32, u32), BuildHasherDefault<PairHasher>>,
    /// The `<0xNN>` token of each byte, `NONE` when the vocabulary has none.
    byte_ids: Vec<u32>,
}

/// One symbol of the word being merged: a byte range, its token (`NONE` if it is not one) and
/// its neighbours in the live chain.
#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    /// 0 once merged into its left neighbour.
    len: u32,
    id: u32,
    prev: u32,
    next: u32,
}

/// A candidate merge of symbol `left` with symbol `right` (`size` bytes together at push time)
/// into token `merged`.
struct Candidate {
    rank: u32,
    left: u32,
    right: u32,
    size: u32,
    merged: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Candidate {}

impl Ord for Candidate {
    /// `BinaryHeap` pops the greatest: the lowest rank, then the leftmost pair.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.rank.cmp(&self.rank).then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Gemma4Bpe {
    /// Builds the encoder from the vocabulary and its merges as token ids `[left, right,
    /// merged]` in rank order (`vocab.rs` checked them); the first listing of a pair counts.
    pub(crate) fn new(tokens: &[String], merges: &[[u32; 3]]) -> Self {
        let mut table =
            HashMap::with_capacity_and_hasher(merges.len(), BuildHasherDefault::default());
        for (rank, &[left, right, merged]) in merges.iter().enumerate() {
            table
                .entry(pair_key(left, right))
                .or_insert((rank as u32, merged));
        }
        let index = TokenIndex::new(tokens);
        let byte_ids = (0..=255u8)
            .map(|b| {
                index
                    .get(tokens, format!("<0x{b:02X}>").as_bytes())
                    .unwrap_or(NONE)
            })
            .collect();
        Gemma4Bpe {
            index,
            merges: table,
            byte_ids,
        }
    }

    /// The id of the token whose text is exactly `text`.
    pub(crate) fn token_id(&self, tokens: &[String], text: &str) -> Option<u32> {
        self.index.get(tokens, text.as_bytes())
    }

    /// Encodes one fragment of ordinary text (no special tokens), appending to `out`.
    pub(crate) fn encode(
        &self,
        tokens: &[String],
        text: &str,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let escaped = text.replace(' ', "▁");
        let bytes = escaped.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            let newline = bytes[start] == b'\n';
            let end = bytes[start..]
                .iter()
                .position(|&b| (b == b'\n') != newline)
                .map_or(bytes.len(), |n| start + n);
            // Both ends sit next to an ASCII '\n' or at the ends, so on character boundaries.
            self.encode_word(tokens, &escaped[start..end], newline, out)?;
            start = end;
        }
        Ok(())
    }

    /// Merges one word (a line, or a run of newlines when `newlines`) and appends its tokens.
    fn encode_word(
        &self,
        tokens: &[String],
        word: &str,
        newlines: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let bytes = word.as_bytes();
        if newlines {
            if let Some(id) = self.index.get(tokens, bytes) {
                out.push(id);
                return Ok(());
            }
        }
        if bytes.len() > u32::MAX as usize / 2 {
            return Err(TokenizerError::Encode(format!(
                "a line of {} bytes is too long for one BPE pass",
                bytes.len()
            )));
        }

        let mut syms: Vec<Sym> = Vec::with_capacity(bytes.len());
        let mut chars = word.char_indices().peekable();
        while let Some((start, c)) = chars.next() {
            let i = syms.len() as u32;
            let end = start + c.len_utf8();
            syms.push(Sym {
                start: start as u32,
                len: c.len_utf8() as u32,
                id: self.index.get(tokens, &bytes[start..end]).unwrap_or(NONE),
                prev: if i == 0 { NONE } else { i - 1 },
                next: if chars.peek().is_some() { i + 1 } else { NONE },
            });
        }

        let mut heap = BinaryHeap::with_capacity(syms.len());
        let try_pair = |syms: &[Sym], heap: &mut BinaryHeap<Candidate>, left: u32| {
            if left == NONE {
                return;
            }
            let l = syms[left as usize];
            if l.next == NONE || l.id == NONE {
                return;
            }
            let r = syms[l.next as usize];
            if r.id == NONE {
                return;
            }
            if let Some(&(rank, merged)) = self.merges.get(&pair_key(l.id, r.id)) {
                heap.push(Candidate {
                    rank,
                    left,
                    right: l.next,
                    size: l.len + r.len,
                    merged,
                });
            }
        };
        for i in 0..syms.len().saturating_sub(1) {
            try_pair(&syms, &mut heap, i as u32);
        }

        while let Some(c) = heap.pop() {
            let l = syms[c.left as usize];
            // Stale: the left symbol was absorbed or absorbed its neighbour (its `next` moved),
            // or the right one grew since the push.
            if l.len == 0 || l.next != c.right {
                continue;
            }
            let r = syms[c.right as usize];
            if r.len == 0 || l.len + r.len != c.size {
                continue;
            }
            let left = &mut syms[c.left as usize];
            left.len += r.len;
            left.id = c.merged;
            left.next = r.next;
            syms[c.right as usize].len = 0;
            if r.next != NONE {
                syms[r.next as usize].prev = c.left;
            }
            try_pair(&syms, &mut heap, l.prev);
            try_pair(&syms, &mut heap, c.left);
        }

        let mut i = 0u32;
        while i != NONE {
            let s = syms[i as usize];
            if s.id != NONE {
                out.push(s.id);
            } else {
                let piece = &bytes[s.start as usize..(s.start + s.len) as usize];
                out.extend(
                    piece
                        .iter()
                        .map(|&b| self.byte_ids[b as usize])
                        .filter(|&id| id != NONE),
                );
            }
            i = s.next;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary from token texts and merges written `"left right"`.
    fn build(words: &[&str], merges: &[&str]) -> (Vec<String>, Gemma4Bpe) {
        let tokens: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        let id = |t: &str| tokens.iter().rposition(|x| x == t).unwrap() as u32;
        let merges: Vec<[u32; 3]> = merges
            .iter()
            .map(|m| {
                let (l, r) = m.split_once(' ').unwrap();
                [id(l), id(r), id(&format!("{l}{r}"))]
            })
            .collect();
        let bpe = Gemma4Bpe::new(&tokens, &merges);
        (tokens, bpe)
    }

    fn encode(tokens: &[String], bpe: &Gemma4Bpe, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        bpe.encode(tokens, text, &mut out).unwrap();
        out
    }

    #[test]
    fn lowest_rank_merges_first_leftmost_on_ties() {
        // "abc": rank 0 is "b c", so [a, bc] even though "a b" is listed too.
        let (t, b) = build(&["a", "b", "c", "ab", "bc"], &["b c", "a b"]);
        assert_eq!(encode(&t, &b, "abc"), vec![0, 4]);
        let (t, b) = build(&["a", "b", "c", "ab", "bc"], &["a b", "b c"]);
        assert_eq!(encode(&t, &b, "abc"), vec![3, 2]);
        // "aaa" with "a a": the leftmost pair merges, [aa, a].
        let (t, b) = build(&["a", "aa"], &["a a"]);
        assert_eq!(encode(&t, &b, "aaa"), vec![1, 0]);
        // Candidates made stale by an earlier merge are skipped: "aaaa" -> [aa, aa].
        assert_eq!(encode(&t, &b, "aaaa"), vec![1, 1]);
    }

    #[test]
    fn spaces_newline_runs_and_byte_fallback() {
        let mut words: Vec<String> = (0..=255u32).map(|b| format!("<0x{b:02X}>")).collect();
        for w in ["▁", "h", "i", "▁h", "▁hi", "\n", "\n\n"] {
            words.push(w.to_string());
        }
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let (t, b) = build(&refs, &["▁ h", "▁h i"]);
        let (sp, h, i, sp_hi, nl, nl2) = (256, 257, 258, 260, 261, 262);
        // No space prefix; spaces are ▁ and merge across.
        assert_eq!(encode(&t, &b, "hi"), vec![h, i]);
        assert_eq!(encode(&t, &b, " hi  hi"), vec![sp_hi, sp, sp_hi]);
        // Newline runs that are tokens are taken whole; "\n\n\n" is not, and no merge joins
        // newlines, so it is three "\n".
        assert_eq!(encode(&t, &b, "hi\n\nhi"), vec![h, i, nl2, h, i]);
        assert_eq!(encode(&t, &b, "\n\n\n"), vec![nl, nl, nl]);
        // 'é' is not in the vocabulary: its two UTF-8 bytes.
        assert_eq!(encode(&t, &b, "é"), vec![0xC3, 0xA9]);
        assert_eq!(encode(&t, &b, ""), Vec::<u32>::new());
    }

    #[test]
    fn bytes_without_a_token_are_dropped() {
        let (t, b) = build(&["a", "<0xC3>"], &[]);
        assert_eq!(encode(&t, &b, "aéa"), vec![0, 1, 0]);
    }

    #[test]
    fn pair_hash_spreads_low_bits() {
        let mut seen = std::collections::HashSet::new();
        for left in 0..64u32 {
            let mut h = PairHasher::default();
            h.write_u64(pair_key(left, 7));
            seen.insert(h.finish() & 0xFF);
        }
        assert!(seen.len() > 32, "{}", seen.len());
    }
}
