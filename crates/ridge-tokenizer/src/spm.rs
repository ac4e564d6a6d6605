//! SentencePiece-style BPE, the `tokenizer.ggml.model = "llama"` vocabularies (Llama 1/2,
//! Mistral, Gemma, Phi-3, ...).
//!
//! # Why a hand-written merge loop
//!
//! These vocabularies carry no merge list: a merge is allowed whenever the concatenation of two
//! adjacent pieces is itself a token, and the *score* of that token (its log-probability in the
//! SentencePiece model, `tokenizer.ggml.scores`) says which merge goes first. llama.cpp applies
//! exactly this rule, and the model was trained on its output, so we reproduce it:
//!
//! 1. Spaces become U+2581 `▁`; with `add_space_prefix` a `▁` is put in front of a text fragment
//!    that starts the input or follows a special token.
//! 2. The text is cut into one symbol per Unicode character.
//! 3. Every adjacent pair whose concatenation is a token goes into a max-heap keyed by that
//!    token's score, the leftmost pair first on equal scores. The best pair is merged, and the
//!    two pairs it creates with its neighbours are pushed; entries made stale by an earlier
//!    merge are recognised (a symbol emptied, or sizes that no longer add up) and dropped.
//!    The whole fragment costs O(n log n).
//! 4. Each final symbol is its token; a symbol that is not a token (a character missing from
//!    the vocabulary) becomes its UTF-8 bytes as the byte tokens `<0xNN>` ("byte fallback"),
//!    else the one-byte token, else the unknown token.
//!
//! The `tokenizers` crate's BPE model is not used: it needs an explicit merge list, and
//! deriving one from scores reproduces llama.cpp only if every tie and every merge whose result
//! is a control token is replicated too; the loop above is shorter than that derivation.
//!
//! The text → id lookup is the hot path (one probe per candidate pair), so it is a small
//! open-addressing table of ids that compares against the vocabulary's own strings: no second
//! copy of the 262 144 Gemma token strings, and loading stays a single pass.

use std::collections::BinaryHeap;

use crate::TokenizerError;

/// No token / no symbol.
const NONE: u32 = u32::MAX;

/// `text -> id` over the vocabulary strings, last id winning for duplicated texts (as in
/// llama.cpp). Open addressing with linear probing; the table is at most half full.
#[derive(Debug)]
pub(crate) struct TokenIndex {
    /// `(hash as u32, id)`, `id == NONE` for an empty slot.
    slots: Vec<(u32, u32)>,
    /// `64 - log2(slots.len())`: the slot of a hash is its top bits.
    shift: u32,
}

/// A multiplicative hash over 8-byte words (FxHash's step). The top bits of the last product
/// depend on every input bit, and only the top bits are used to pick a slot.
fn hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h
}

impl TokenIndex {
    /// Indexes `tokens` (fewer than `u32::MAX` of them, checked by the caller).
    pub(crate) fn new(tokens: &[String]) -> Self {
        let cap = (tokens.len() * 2).next_power_of_two().max(16);
        let mut index = TokenIndex {
            slots: vec![(0, NONE); cap],
            shift: 64 - cap.trailing_zeros(),
        };
        let mask = cap - 1;
        for (id, t) in tokens.iter().enumerate() {
            let h = hash(t.as_bytes());
            let mut i = (h >> index.shift) as usize;
            loop {
                let (sh, sid) = index.slots[i];
                if sid == NONE {
                    index.slots[i] = (h as u32, id as u32);
                    break;
                }
                if sh == h as u32 && tokens[sid as usize] == *t {
                    index.slots[i].1 = id as u32;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        index
    }

    /// The id of the token whose text is `bytes`. `tokens` must be the slice given to `new`.
    #[inline]
    pub(crate) fn get(&self, tokens: &[String], bytes: &[u8]) -> Option<u32> {
        let h = hash(bytes);
        let mask = self.slots.len() - 1;
        let mut i = (h >> self.shift) as usize;
        loop {
            let (sh, id) = self.slots[i];
            if id == NONE {
                return None;
            }
            if sh == h as u32 && tokens[id as usize].as_bytes() == bytes {
                return Some(id);
            }
            i = (i + 1) & mask;
        }
    }
}

/// The SentencePiece encoder state built at load.
#[derive(Debug)]
pub(crate) struct Spm {
    index: TokenIndex,
    /// Score per token; higher merges first. NaN is rejected at load and -0.0 stored as 0.0,
    /// so `total_cmp` orders them as llama.cpp's `<` does.
    scores: Vec<f32>,
    /// Token for each byte in byte fallback (`<0xNN>`, else the one-character token), `NONE`
    /// when the vocabulary has neither.
    byte_ids: Vec<u32>,
    /// Used for a byte without a byte token (llama.cpp aborts there).
    unk: Option<u32>,
}

/// One symbol of the text being merged: a byte range plus its neighbours in the live chain.
#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    /// 0 once merged into its left neighbour.
    len: u32,
    prev: u32,
    next: u32,
}

/// A candidate merge of `left` with the symbol after it, `size` bytes in total.
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: u32,
    size: u32,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    /// Higher score first; on equal scores the leftmost pair.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// `<0xAB>` -> 0xAB (two hex digits, either case).
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Spm {
    /// Builds the encoder. `scores.len()` must equal `tokens.len()` (checked by the caller).
    pub(crate) fn new(tokens: &[String], mut scores: Vec<f32>, unk: Option<u32>) -> Self {
        for s in &mut scores {
            // -0.0 == 0.0 for llama.cpp's comparison, not for total_cmp.
            *s += 0.0;
        }
        let index = TokenIndex::new(tokens);
        let mut byte_ids = vec![NONE; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = index
                .get(tokens, hex.as_bytes())
                .or_else(|| (b < 0x80).then(|| index.get(tokens, &[b as u8])).flatten())
                .unwrap_or(NONE);
        }
        Spm {
            index,
            scores,
            byte_ids,
            unk,
        }
    }

    /// The id of the token whose text is exactly `text`.
    pub(crate) fn token_id(&self, tokens: &[String], text: &str) -> Option<u32> {
        self.index.get(tokens, text.as_bytes())
    }

    /// Encodes one fragment of ordinary text (no special tokens), appending to `out`.
    /// `space_prefix`: put a `▁` in front (see the module docs).
    pub(crate) fn encode(
        &self,
        tokens: &[String],
        text: &str,
        space_prefix: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let mut escaped = String::with_capacity(text.len() + 3 * (text.len() / 4 + 1));
        if space_prefix {
            escaped.push('▁');
        }
        for c in text.chars() {
            escaped.push(if c == ' ' { '▁' } else { c });
        }
        if escaped.is_empty() {
            return Ok(());
        }
        if escaped.len() > u32::MAX as usize / 2 {
            return Err(TokenizerError::Encode(format!(
                "a text fragment of {} bytes is too long for one SentencePiece pass",
                escaped.len()
            )));
        }
        let bytes = escaped.as_bytes();

        let mut syms: Vec<Sym> = Vec::with_capacity(escaped.len());
        let mut chars = escaped.char_indices().peekable();
        while let Some((start, c)) = chars.next() {
            let i = syms.len() as u32;
            syms.push(Sym {
                start: start as u32,
                len: c.len_utf8() as u32,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if chars.peek().is_some() { i + 1 } else { NONE },
            });
        }

        let mut heap = BinaryHeap::with_capacity(syms.len());
        let try_pair = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, left: u32| {
            if left == NONE {
                return;
            }
            let l = syms[left as usize];
            if l.next == NONE {
                return;
            }
            let r = syms[l.next as usize];
            let (start, size) = (l.start as usize, (l.len + r.len) as usize);
            if let Some(id) = self.index.get(tokens, &bytes[start..start + size]) {
                heap.push(Bigram {
                    score: self.scores[id as usize],
                    left,
                    size: size as u32,
                });
            }
        };
        for i in 0..syms.len().saturating_sub(1) {
            try_pair(&syms, &mut heap, i as u32);
        }

        while let Some(b) = heap.pop() {
            let l = syms[b.left as usize];
            // Stale: the left symbol was absorbed, or either side changed since the push.
            if l.len == 0 || l.next == NONE {
                continue;
            }
            let r = syms[l.next as usize];
            if r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            let right = l.next;
            syms[b.left as usize].len += r.len;
            syms[b.left as usize].next = r.next;
            syms[right as usize].len = 0;
            if r.next != NONE {
                syms[r.next as usize].prev = b.left;
            }
            try_pair(&syms, &mut heap, l.prev);
            try_pair(&syms, &mut heap, b.left);
        }

        let mut i = 0u32;
        while i != NONE {
            let s = syms[i as usize];
            let piece = &bytes[s.start as usize..(s.start + s.len) as usize];
            match self.index.get(tokens, piece) {
                Some(id) => out.push(id),
                None => {
                    for &byte in piece {
                        out.push(self.byte_token(byte)?);
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }

    fn byte_token(&self, byte: u8) -> Result<u32, TokenizerError> {
        match self.byte_ids[byte as usize] {
            NONE => self.unk.ok_or_else(|| {
                TokenizerError::Encode(format!(
                    "byte 0x{byte:02X} is not in the vocabulary (no <0x{byte:02X}> token) \
                     and there is no unknown token"
                ))
            }),
            id => Ok(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(words: &[(&str, f32)]) -> (Vec<String>, Spm) {
        let tokens: Vec<String> = words.iter().map(|(w, _)| w.to_string()).collect();
        let scores = words.iter().map(|&(_, s)| s).collect();
        let spm = Spm::new(&tokens, scores, None);
        (tokens, spm)
    }

    fn encode(tokens: &[String], spm: &Spm, text: &str, prefix: bool) -> Vec<u32> {
        let mut out = Vec::new();
        spm.encode(tokens, text, prefix, &mut out).unwrap();
        out
    }

    #[test]
    fn index_finds_every_token_and_last_duplicate_wins() {
        let tokens: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
        let index = TokenIndex::new(&tokens);
        for (i, t) in tokens.iter().enumerate() {
            assert_eq!(index.get(&tokens, t.as_bytes()), Some(i as u32));
        }
        assert_eq!(index.get(&tokens, b"nope"), None);
        assert_eq!(index.get(&tokens, b""), None);
        let dup = vec!["a".to_string(), "b".to_string(), "a".to_string()];
        let index = TokenIndex::new(&dup);
        assert_eq!(index.get(&dup, b"a"), Some(2));
    }

    #[test]
    fn highest_score_merges_first_leftmost_on_ties() {
        // "abc": "ab" (-1) beats "bc" (-2), so [ab, c].
        let (t, s) = vocab(&[("a", -9.), ("b", -9.), ("c", -9.), ("ab", -1.), ("bc", -2.)]);
        assert_eq!(encode(&t, &s, "abc", false), vec![3, 2]);
        // Now "bc" scores higher: [a, bc].
        let (t, s) = vocab(&[("a", -9.), ("b", -9.), ("c", -9.), ("ab", -3.), ("bc", -2.)]);
        assert_eq!(encode(&t, &s, "abc", false), vec![0, 4]);
        // "aaa" with only "aa": the leftmost pair merges, [aa, a].
        let (t, s) = vocab(&[("a", -9.), ("aa", -1.)]);
        assert_eq!(encode(&t, &s, "aaa", false), vec![1, 0]);
    }

    #[test]
    fn spaces_and_prefix_and_byte_fallback() {
        let mut words: Vec<(String, f32)> = (0..=255u32)
            .map(|b| (format!("<0x{b:02X}>"), 0.0))
            .collect();
        words.extend([("▁".into(), -5.0), ("h".into(), -5.0), ("i".into(), -5.0)]);
        words.push(("▁h".into(), -1.0));
        words.push(("▁hi".into(), -0.5));
        let refs: Vec<(&str, f32)> = words.iter().map(|(w, s)| (w.as_str(), *s)).collect();
        let (t, s) = vocab(&refs);
        assert_eq!(encode(&t, &s, "hi", true), vec![260]);
        assert_eq!(encode(&t, &s, "hi", false), vec![257, 258]);
        assert_eq!(encode(&t, &s, " hi h", false), vec![260, 259]);
        // 'é' is not in the vocabulary: its two UTF-8 bytes.
        assert_eq!(encode(&t, &s, "é", false), vec![0xC3, 0xA9]);
        assert_eq!(encode(&t, &s, "", false), Vec::<u32>::new());
        assert_eq!(encode(&t, &s, "", true), vec![256]);
    }

    #[test]
    fn missing_byte_token_without_unk_is_an_error() {
        let (t, s) = vocab(&[("a", 0.0)]);
        let mut out = Vec::new();
        let e = s.encode(&t, "ab", false, &mut out).unwrap_err();
        assert!(e.to_string().contains("0x62"), "{e}");
        let s = Spm::new(&t, vec![0.0], Some(0));
        let mut out = Vec::new();
        s.encode(&t, "ab", false, &mut out).unwrap();
        assert_eq!(out, vec![0, 0]);
    }

    #[test]
    fn byte_token_text() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("0x10"), None);
    }
}
