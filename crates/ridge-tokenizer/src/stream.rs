//! Streaming detokenization.
//!
//! A byte-level token can end in the middle of a UTF-8 character (an emoji is often split over
//! two or three tokens), so text cannot be emitted token by token. [`IncrementalDecoder`] keeps
//! only the bytes of an unfinished character (at most 3) between calls; each call looks at those
//! bytes plus the new token's piece, emits every complete character, and keeps the unfinished
//! tail. The work per token is proportional to the token's piece, never to the history.
//!
//! Invalid UTF-8 is replaced by U+FFFD exactly as [`String::from_utf8_lossy`] does on the whole
//! byte stream (one replacement per maximal invalid subsequence), so the concatenation of every
//! [`IncrementalDecoder::push`] plus [`IncrementalDecoder::finish`] equals
//! [`Tokenizer::decode`] of all the ids.

use crate::Tokenizer;

/// Turns a stream of token ids into text, one token at a time.
///
/// It does not borrow the tokenizer, so it can live in per-request state; pass the tokenizer
/// to each [`push`](IncrementalDecoder::push).
#[derive(Debug, Clone)]
pub struct IncrementalDecoder {
    pending: Vec<u8>,
    skip_special: bool,
}

impl Default for IncrementalDecoder {
    /// Control tokens render as nothing (`skip_special = true`).
    fn default() -> Self {
        Self::new(true)
    }
}

impl IncrementalDecoder {
    /// A decoder; `skip_special` as in [`Tokenizer::decode`] (true: control tokens render as
    /// nothing).
    pub fn new(skip_special: bool) -> Self {
        IncrementalDecoder {
            pending: Vec::with_capacity(8),
            skip_special,
        }
    }

    /// Feeds one token and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let mut out = String::new();
        self.push_into(tokenizer, id, &mut out);
        out
    }

    /// As [`push`](IncrementalDecoder::push), appending to `out` instead of allocating.
    pub fn push_into(&mut self, tokenizer: &Tokenizer, id: u32, out: &mut String) {
        self.pending
            .extend_from_slice(tokenizer.token_to_piece(id, !self.skip_special));
        self.drain_complete(out);
    }

    /// Emits everything still held back (an unfinished character becomes U+FFFD) and resets.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// True when bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn drain_complete(&mut self, out: &mut String) {
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    if let Ok(s) = std::str::from_utf8(&self.pending[start..valid]) {
                        out.push_str(s);
                    }
                    match e.error_len() {
                        // Invalid bytes, whatever follows: replace them and go on.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start = valid + n;
                        }
                        // A character that may still be completed by the next token.
                        None => {
                            self.pending.drain(..valid);
                            return;
                        }
                    }
                }
            }
        }
    }
}
