//! Tokenizer and chat template for ridge, built from a GGUF file's `tokenizer.*` metadata.
//!
//! # Design
//!
//! The goal is token-for-token agreement with llama.cpp on the same GGUF file, because the model
//! was trained (and is usually evaluated) with exactly that tokenization: a different split of
//! the same text is a different, slightly out-of-distribution prompt. So every behaviour below
//! mirrors llama.cpp's, and the tests compare against ids produced by `llama-tokenize`.
//!
//! Three vocabulary kinds are implemented, chosen by `tokenizer.ggml.model`: byte-level BPE
//! (`"gpt2"`: SmolLM2, Llama 3, Qwen2, ...), SentencePiece BPE (`"llama"`: Gemma 1-3, Llama 2,
//! Mistral, Phi-3, ...) and Gemma 4's BPE (`"gemma4"`). Encoding `text`
//! ([`Tokenizer::encode`]) runs three stages:
//!
//! 1. **Special-token partition.** Control tokens (GGUF token type 3, e.g. `<|im_start|>`) are
//!    matched verbatim when `parse_special` is set; user-defined tokens (type 4) always. As in
//!    llama.cpp, longer tokens are matched first and each splits all remaining text fragments.
//!    One Aho-Corasick pass finds which special tokens occur at all, so texts without any cost
//!    a single linear scan.
//! 2. *Byte-level BPE:* **pre-tokenization** of each remaining fragment with the regex sequence named by
//!    `tokenizer.ggml.pre` (the table in `pretok.rs` mirrors llama.cpp's), then mapping each
//!    byte to the GPT-2 byte-level alphabet (`bytes.rs`). The published regexes use a
//!    `\s+(?!\S)` look-ahead that only a backtracking engine runs; we run the same regexes
//!    without it on the `regex` crate's automata and apply the look-ahead by hand, which is
//!    about 10x faster end to end. A test checks the splits equal those of the published
//!    regexes run by the `tokenizers` crate (fancy-regex) on thousands of generated strings.
//! 3. *Byte-level BPE:* **BPE** inside each pre-token, lowest merge rank first: the `tokenizers` crate's BPE
//!    model (pure-Rust build, no C++), assembled in memory from `tokenizer.ggml.tokens` and
//!    `tokenizer.ggml.merges`; no `tokenizer.json` is involved. Its word cache makes repeated
//!    words cheap.
//!
//! For *SentencePiece*, stages 2 and 3 are one: spaces become `▁` (plus a leading `▁` after
//! the start or a special token when `tokenizer.ggml.add_space_prefix` says so), and adjacent
//! pieces are merged highest token score first, characters missing from the vocabulary
//! falling back to `<0xNN>` byte tokens. It is a hand-written priority-queue loop (`spm.rs`
//! explains why not the `tokenizers` crate).
//!
//! *Gemma 4* sits between the two: spaces become `▁` as in SentencePiece (never a prefix), the
//! text is cut only at line breaks, and inside each line the merges of
//! `tokenizer.ggml.merges` run lowest rank first over UTF-8 characters (not bytes), with the
//! same `<0xNN>` byte fallback (`gemma4.rs`).
//!
//! Decoding does not go through `tokenizers`: at load every token's bytes are computed once
//! (byte-level tokens mapped back to bytes, `▁` to a space, `<0xNN>` to its byte; control and
//! user-defined tokens are plain text), so
//! [`Tokenizer::decode`] is a concatenation and [`IncrementalDecoder`] can stream text holding
//! back at most the 3 bytes of an unfinished UTF-8 character.
//!
//! Loading validates everything taken from the file (array types, lengths, id ranges, merges
//! against the vocabulary) and reports [`TokenizerError`] naming the key; it never panics on
//! file contents.
//!
//! [`ChatTemplate`] renders `tokenizer.chat_template` with minijinja configured like Hugging
//! Face `transformers` (see the `chat` module docs), sandboxed with a fuel budget.
//!
//! Other vocabulary kinds (`"bert"`, `"t5"`, `"rwkv"`, ...) are reported as
//! [`TokenizerError::Unsupported`].
//!
//! # Tests against llama.cpp
//!
//! `tests/data/corpus.json` holds ~70 texts (code, whitespace runs, numbers, emoji with ZWJ
//! sequences and flags, CJK, RTL scripts, accents, contractions, special tokens in the text).
//! `tests/data/regen.sh` runs llama.cpp's `llama-tokenize` on each and stores the ids; the
//! tests assert identical ids. SmolLM2-135M-Instruct (pre-tokenizer `smollm`) and Gemma 3 270M
//! (SentencePiece, 262 144 tokens; corpus plus `gemma3_extra_corpus.json` and the repository's
//! prose text, `regen_gemma3.sh`) are pulled into the ridge cache once, or taken from
//! `RIDGE_TEST_SMOLLM2` / `RIDGE_TEST_GEMMA3`; the vocabulary-only files are found through
//! `RIDGE_TEST_LLAMA_CPP_VOCABS` (llama.cpp's `models/` directory of vocabulary-only GGUFs:
//! gpt-2, llama-bpe, qwen2, falcon, mpt, starcoder, refact, command-r, two files without a
//! pre-tokenizer name, i.e. `default`, three SentencePiece ones, and gemma-4). Gemma 4's file
//! is 15 MB, so CI checks the Gemma 4 rules on a small synthetic `gemma4` vocabulary instead,
//! against ids `llama-tokenize` gave for the same file (`tests/synthetic_gemma4.rs`).
//!
//! # Example
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ridge_tokenizer::{ChatMessage, ChatTemplate, IncrementalDecoder, Tokenizer};
//! let gguf = ridge_gguf::GgufFile::open("model.gguf")?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let chat = ChatTemplate::from_gguf(&gguf, &tok)?;
//! let prompt = chat.render(&[ChatMessage::new("user", "Hello!")], true)?;
//! let ids = tok.encode_chat_prompt(&prompt)?;
//! let mut stream = IncrementalDecoder::default();
//! for &id in &ids {
//!     print!("{}", stream.push(&tok, id));
//! }
//! print!("{}", stream.finish());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod bytes;
mod chat;
mod error;
mod gemma4;
mod pretok;
mod spm;
mod stream;
mod tokenizer;
mod vocab;

pub use chat::{
    civil_from_days, ChatMessage, ChatTemplate, FUEL, MAX_RENDER_BYTES, RECURSION_LIMIT,
};
pub use error::TokenizerError;
pub use stream::IncrementalDecoder;
pub use tokenizer::Tokenizer;

/// Names accepted in `tokenizer.ggml.pre`.
pub fn supported_pre_tokenizers() -> Vec<&'static str> {
    pretok::supported_names()
}

#[cfg(test)]
mod tests {
    #[test]
    fn shareable_across_threads() {
        fn check<T: Send + Sync>() {}
        check::<crate::Tokenizer>();
        check::<crate::ChatTemplate>();
        check::<crate::IncrementalDecoder>();
    }
}
