//! The [`Tokenizer`]: special-token partition, then per text fragment either pre-tokenizer +
//! byte-level BPE (`gpt2`), SentencePiece merges by score (`llama`, see `spm.rs`) or merges by
//! rank over `▁`-escaped lines (`gemma4`, see `gemma4.rs`); decoding by concatenating
//! precomputed per-token byte pieces.

use aho_corasick::AhoCorasick;
use ridge_gguf::GgufFile;
use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::Model as _;

use crate::bytes::{decode_token_text, encode_bytes};
use crate::gemma4::Gemma4Bpe;
use crate::pretok::{self, Splitter};
use crate::spm::{parse_byte_token, Spm};
use crate::vocab::{attr, Kind, Vocab, KEY_ADD_BOS, KEY_ADD_EOS, KEY_MODEL, KEY_PRE};
use crate::TokenizerError;

const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";

/// The per-fragment encoder of each vocabulary kind.
enum Encoder {
    /// Byte-level BPE: regex pre-tokenizer, then the `tokenizers` crate's BPE per word.
    /// (The BPE model is boxed: it is several hundred bytes.)
    Bpe { bpe: Box<BPE>, splitter: Splitter },
    /// SentencePiece BPE over the whole fragment.
    Spm {
        spm: Spm,
        /// Put `▁` in front of a fragment that starts the text or follows a special token
        /// (`tokenizer.ggml.add_space_prefix`, default true as in llama.cpp).
        add_space_prefix: bool,
    },
    /// Gemma 4: spaces as `▁`, lines as words, merges by rank, `<0xNN>` byte fallback.
    Gemma4(Gemma4Bpe),
}

/// A text tokenizer built from GGUF metadata. Immutable after construction, `Send + Sync`;
/// share one behind an `Arc`.
pub struct Tokenizer {
    vocab: Vocab,
    pre_name: String,
    add_bos: bool,
    add_eos: bool,
    model: Encoder,
    /// Control, user-defined and unknown tokens, longest text first (ties by id), matched
    /// verbatim in the input before any pre-tokenization.
    specials: Vec<u32>,
    /// Finds which of `specials` occur in a text in one pass (pattern i = `specials[i]`).
    special_finder: Option<AhoCorasick>,
    /// Decoded bytes of every token, concatenated; token `i` is
    /// `piece_bytes[piece_offsets[i]..piece_offsets[i + 1]]`.
    piece_bytes: Vec<u8>,
    piece_offsets: Vec<usize>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model_name())
            .field("pre", &self.pre_name)
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos_id())
            .field("eos", &self.eos_id())
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish()
    }
}

/// A piece of input after special-token partition.
enum Fragment {
    /// Byte range of ordinary text.
    Text(usize, usize),
    /// A special token matched verbatim.
    Token(u32),
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.*` metadata.
    ///
    /// `tokenizer.ggml.model = "gpt2"` (byte-level BPE), `"llama"` (SentencePiece BPE) and
    /// `"gemma4"` (Gemma 4's BPE over `▁`-escaped text) are implemented; other models give
    /// [`TokenizerError::Unsupported`]. For `gpt2` the pre-tokenizer is chosen by
    /// `tokenizer.ggml.pre` (llama.cpp's `default` when absent); an unknown name is
    /// [`TokenizerError::UnknownPreTokenizer`]. SentencePiece has no pre-tokenizer and Gemma 4
    /// a fixed one; both ignore the key, as llama.cpp does. Inconsistent metadata is
    /// [`TokenizerError::Malformed`].
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TokenizerError> {
        let model = gguf.get_str(KEY_MODEL)?;
        let kind = match model {
            "gpt2" => Kind::Bpe,
            "llama" => Kind::Spm,
            "gemma4" => Kind::Gemma4,
            _ => {
                return Err(TokenizerError::Unsupported(format!(
                    "{KEY_MODEL} = {model:?}; implemented: byte-level BPE (\"gpt2\"), \
                     SentencePiece BPE (\"llama\") and Gemma 4 BPE (\"gemma4\")"
                )))
            }
        };
        let pre_name = match gguf.get(KEY_PRE) {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| TokenizerError::malformed(KEY_PRE, "expected a string"))?,
            ),
        };
        let spec = match kind {
            Kind::Bpe => Some(pretok::lookup(pre_name)?),
            Kind::Spm | Kind::Gemma4 => None,
        };
        // llama.cpp runs every Gemma 4 vocabulary with its own `gemma4` pre-tokenizer, whatever
        // the key says.
        let pre_name = match kind {
            Kind::Gemma4 => Some("gemma4"),
            Kind::Bpe | Kind::Spm => pre_name,
        };
        let mut vocab = Vocab::from_gguf(gguf, kind)?;

        // SentencePiece vocabularies add BOS unless told otherwise (llama.cpp's default).
        // Gemma 4 always adds it: llama.cpp overrides `add_bos_token = false` there, because the
        // model needs BOS and some converted files say otherwise (llama.cpp PR 21500).
        let default_add_bos = spec.as_ref().is_none_or(|s| s.add_bos);
        let add_bos =
            gguf.get_bool_opt(KEY_ADD_BOS)?.unwrap_or(default_add_bos) || kind == Kind::Gemma4;
        let add_eos = gguf.get_bool_opt(KEY_ADD_EOS)?.unwrap_or(false);
        if add_bos && vocab.ids.bos.is_none() {
            return Err(TokenizerError::malformed(
                KEY_ADD_BOS,
                "BOS must be added but the vocabulary has no BOS token",
            ));
        }
        if add_eos && vocab.ids.eos.is_none() {
            return Err(TokenizerError::malformed(
                KEY_ADD_EOS,
                "EOS must be added but the vocabulary has no EOS token",
            ));
        }

        let model = match spec {
            Some(spec) => {
                let bpe_vocab: BpeVocab = vocab
                    .tokens
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (t.clone(), i as u32))
                    .collect();
                let bpe = BPE::builder()
                    .vocab_and_merges(bpe_vocab, std::mem::take(&mut vocab.merges))
                    .ignore_merges(spec.ignore_merges)
                    .build()
                    .map_err(|e| {
                        TokenizerError::malformed("tokenizer.ggml.merges", e.to_string())
                    })?;
                let splitter = Splitter::new(&spec)?;
                Encoder::Bpe {
                    bpe: Box::new(bpe),
                    splitter,
                }
            }
            None if kind == Kind::Gemma4 => Encoder::Gemma4(Gemma4Bpe::new(
                &vocab.tokens,
                &std::mem::take(&mut vocab.merge_ids),
            )),
            None => Encoder::Spm {
                spm: Spm::new(
                    &vocab.tokens,
                    std::mem::take(&mut vocab.scores),
                    vocab.ids.unk,
                ),
                add_space_prefix: gguf.get_bool_opt(KEY_ADD_SPACE_PREFIX)?.unwrap_or(true),
            },
        };

        let mut specials: Vec<u32> = (0..vocab.tokens.len() as u32)
            .filter(|&i| {
                vocab.attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(vocab.tokens[i as usize].len()));
        let special_finder = if specials.is_empty() {
            None
        } else {
            let patterns = specials
                .iter()
                .map(|&i| vocab.tokens[i as usize].as_bytes());
            Some(AhoCorasick::new(patterns).map_err(|e| {
                TokenizerError::malformed("tokenizer.ggml.tokens", format!("special tokens: {e}"))
            })?)
        };

        let mut piece_bytes = Vec::new();
        let mut piece_offsets = Vec::with_capacity(vocab.tokens.len() + 1);
        piece_offsets.push(0);
        for (text, &a) in vocab.tokens.iter().zip(&vocab.attrs) {
            if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
                // Added tokens are stored as plain text, not in the byte-level alphabet.
                piece_bytes.extend_from_slice(text.as_bytes());
            } else if a & attr::NORMAL != 0 {
                match kind {
                    Kind::Bpe => decode_token_text(text, &mut piece_bytes),
                    Kind::Spm | Kind::Gemma4 => {
                        piece_bytes.extend_from_slice(text.replace('▁', " ").as_bytes())
                    }
                }
            } else if a & attr::BYTE != 0 {
                match parse_byte_token(text) {
                    Some(b) => piece_bytes.push(b),
                    None => decode_token_text(text, &mut piece_bytes),
                }
            }
            // Unused and undefined tokens render as nothing.
            piece_offsets.push(piece_bytes.len());
        }

        Ok(Tokenizer {
            pre_name: pre_name.unwrap_or("default").to_string(),
            add_bos,
            add_eos,
            model,
            specials,
            special_finder,
            piece_bytes,
            piece_offsets,
            vocab,
        })
    }

    /// Encodes `text` to token ids.
    ///
    /// * `add_special`: add BOS in front and/or EOS at the end, each exactly when the model's
    ///   metadata asks for it ([`Tokenizer::add_bos`], [`Tokenizer::add_eos`]).
    /// * `parse_special`: recognise control tokens (e.g. `<|im_start|>`) written in the text.
    ///   User-defined tokens are always recognised; with `parse_special = false` control token
    ///   texts are tokenized as ordinary text.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.vocab.ids.bos);
        }
        // SentencePiece: a fragment at the start or after a special token gets a space prefix.
        let mut after_special = true;
        for fragment in self.partition(text, parse_special) {
            match fragment {
                Fragment::Text(start, end) => {
                    self.encode_plain(&text[start..end], after_special, &mut out)?;
                    after_special = false;
                }
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.vocab.ids.eos);
        }
        Ok(out)
    }

    /// Encodes a rendered chat prompt: control tokens in the text are parsed, BOS is added when
    /// the metadata asks for it *unless the text already starts with the BOS token's text* (many
    /// chat templates emit `{{ bos_token }}` themselves), and EOS is never added (generation
    /// continues the prompt).
    pub fn encode_chat_prompt(&self, rendered: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        if self.should_add_bos(rendered) {
            ids.extend(self.vocab.ids.bos);
        }
        ids.extend(self.encode(rendered, false, true)?);
        Ok(ids)
    }

    /// True when BOS should be prepended to `text`: the metadata asks for BOS and `text` does
    /// not already begin with the BOS token's text.
    pub fn should_add_bos(&self, text: &str) -> bool {
        match self.vocab.ids.bos {
            Some(bos) if self.add_bos => {
                !text.starts_with(self.vocab.tokens[bos as usize].as_str())
            }
            _ => false,
        }
    }

    /// Encodes text that contains no special tokens. `after_special`: the text starts the input
    /// or follows a special token (SentencePiece's space prefix goes there).
    fn encode_plain(
        &self,
        text: &str,
        after_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        if text.is_empty() {
            return Ok(());
        }
        let (bpe, splitter) = match &self.model {
            Encoder::Bpe { bpe, splitter } => (bpe, splitter),
            Encoder::Spm {
                spm,
                add_space_prefix,
            } => {
                let prefix = *add_space_prefix && after_special;
                return spm.encode(&self.vocab.tokens, text, prefix, out);
            }
            Encoder::Gemma4(g) => return g.encode(&self.vocab.tokens, text, out),
        };
        let mut word = String::new();
        for (start, end) in splitter.split(text) {
            word.clear();
            encode_bytes(&text[start..end], &mut word);
            let tokens = bpe
                .tokenize(&word)
                .map_err(|e| TokenizerError::Encode(e.to_string()))?;
            out.extend(tokens.iter().map(|t| t.id));
        }
        Ok(())
    }

    /// Cuts `text` into ordinary text and special tokens, as llama.cpp does: special tokens are
    /// taken longest first, each one splitting every remaining text fragment at all of its
    /// occurrences. Only tokens that occur somewhere in `text` (found in one Aho-Corasick pass)
    /// are tried, so the cost is linear in the text for each special token actually present.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(0, text.len())];
        let Some(finder) = &self.special_finder else {
            return fragments;
        };
        let mut present = vec![false; self.specials.len()];
        let mut any = false;
        for m in finder.find_overlapping_iter(text) {
            present[m.pattern().as_usize()] = true;
            any = true;
        }
        if !any {
            return fragments;
        }
        for (k, &id) in self.specials.iter().enumerate() {
            if !present[k] {
                continue;
            }
            let a = self.vocab.attrs[id as usize];
            if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let needle = self.vocab.tokens[id as usize].as_str();
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                let (start, end) = match f {
                    Fragment::Text(s, e) => (s, e),
                    token => {
                        next.push(token);
                        continue;
                    }
                };
                let mut pos = start;
                for (off, _) in text[start..end].match_indices(needle) {
                    let at = start + off;
                    // match_indices never reports overlapping matches, so `at >= pos`.
                    if at > pos {
                        next.push(Fragment::Text(pos, at));
                    }
                    next.push(Fragment::Token(id));
                    pos = at + needle.len();
                }
                if pos < end {
                    next.push(Fragment::Text(pos, end));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// Decodes ids to text. With `skip_special`, control and unknown tokens render as nothing;
    /// otherwise as their text. Byte sequences that are not valid UTF-8 become U+FFFD. Ids
    /// outside the vocabulary render as nothing.
    ///
    /// The text is the plain concatenation of [`Tokenizer::token_to_piece`] (SentencePiece:
    /// `▁` is a space, `<0xNN>` its byte). So with a SentencePiece `add_space_prefix`
    /// vocabulary the space the encoder put in front is kept; llama.cpp's `llama_detokenize`
    /// drops it only when the first id is not BOS, which cannot be reproduced token by token by
    /// [`IncrementalDecoder`](crate::IncrementalDecoder), whose output must equal this.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            bytes.extend_from_slice(self.token_to_piece(id, !skip_special));
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// The bytes token `id` stands for (possibly an incomplete part of a UTF-8 character).
    /// Control and unknown tokens give their text when `render_special` is true and nothing
    /// otherwise; unused tokens and ids outside the vocabulary give nothing.
    pub fn token_to_piece(&self, id: u32, render_special: bool) -> &[u8] {
        let i = id as usize;
        let Some(&a) = self.vocab.attrs.get(i) else {
            return &[];
        };
        if !render_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            return &[];
        }
        &self.piece_bytes[self.piece_offsets[i]..self.piece_offsets[i + 1]]
    }

    /// The BOS token, if the vocabulary has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.ids.bos
    }

    /// The EOS token, if the vocabulary has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.ids.eos
    }

    /// The end-of-turn token: `tokenizer.ggml.eot_token_id`, or else a token recognised by its
    /// text (`<|eot_id|>`, `<|im_end|>`, `<|endoftext|>`, ...; the lowest id if several).
    pub fn eot_id(&self) -> Option<u32> {
        self.vocab.ids.eot
    }

    /// The unknown token, if set.
    pub fn unk_id(&self) -> Option<u32> {
        self.vocab.ids.unk
    }

    /// The padding token, if set.
    pub fn pad_id(&self) -> Option<u32> {
        self.vocab.ids.pad
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// True for tokens that end generation: EOS, EOT/EOM, and tokens recognised by their text
    /// such as `<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<end_of_turn>` (llama.cpp's list).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.get(id as usize).copied().unwrap_or(false)
    }

    /// All end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> Vec<u32> {
        (0..self.vocab.eog.len() as u32)
            .filter(|&i| self.vocab.eog[i as usize])
            .collect()
    }

    /// True for control tokens (rendered only when special tokens are shown).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab
            .attrs
            .get(id as usize)
            .is_some_and(|a| a & attr::CONTROL != 0)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.tokens.len()
    }

    /// The vocabulary string of a token (in the byte-level alphabet for ordinary byte-level BPE
    /// tokens, e.g. `Ġthe` for " the"; with `▁` for spaces in SentencePiece, e.g. `▁the`).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a vocabulary string, exact match.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.model {
            Encoder::Bpe { bpe, .. } => bpe.token_to_id(token),
            Encoder::Spm { spm, .. } => spm.token_id(&self.vocab.tokens, token),
            Encoder::Gemma4(g) => g.token_id(&self.vocab.tokens, token),
        }
    }

    /// The pre-tokenizer name in use (`tokenizer.ggml.pre`, or `default`). SentencePiece
    /// vocabularies have no pre-tokenizer; the name is reported as found in the file. Gemma 4
    /// vocabularies always report `gemma4`, the one llama.cpp applies to them.
    pub fn pre_tokenizer(&self) -> &str {
        &self.pre_name
    }

    /// The vocabulary kind, `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE), `"llama"`
    /// (SentencePiece BPE) or `"gemma4"` (Gemma 4's BPE over `▁`-escaped text).
    pub fn model_name(&self) -> &'static str {
        match self.model {
            Encoder::Bpe { .. } => "gpt2",
            Encoder::Spm { .. } => "llama",
            Encoder::Gemma4(_) => "gemma4",
        }
    }

    /// Whether a SentencePiece tokenizer puts a space (`▁`) in front of text that starts the
    /// input or follows a special token (`tokenizer.ggml.add_space_prefix`); always false for
    /// byte-level BPE and Gemma 4 (llama.cpp ignores the key for both when encoding).
    pub fn add_space_prefix(&self) -> bool {
        matches!(
            self.model,
            Encoder::Spm {
                add_space_prefix: true,
                ..
            }
        )
    }
}
