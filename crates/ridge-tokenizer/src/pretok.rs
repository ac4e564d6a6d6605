//! Pre-tokenizers: how text is cut into words before BPE merges run inside each word.
//!
//! Every byte-level BPE model was trained with a particular splitting regex (or a sequence of
//! them), recorded in GGUF as a *name* in `tokenizer.ggml.pre`. The table below maps each name to
//! the regexes llama.cpp applies for it, so the ids we produce match llama.cpp's. A sequence of
//! regexes is applied one after the other: each regex cuts every piece produced so far into its
//! matches and the gaps between them (both kept). After splitting, every piece is mapped byte by
//! byte to the byte-level alphabet (see `bytes.rs`); no prefix space is ever added.
//!
//! The regexes are the ones published with each model's `tokenizer.json`, with one adaptation
//! that llama.cpp also makes: the case-insensitive group `(?i:'s|'t|...)` is spelled out as
//! `'[sS]|'[tT]|...`, because Unicode case folding would otherwise let `'ſ` (long s) or the
//! Kelvin sign match.

use regex::Regex;

use crate::TokenizerError;

/// One splitting regex.
///
/// The published regexes end in `\s+(?!\S)|\s+` (or just `\s+(?!\S)`): a whitespace run
/// leaves its last character to the next piece, so that `"   foo"` splits as `"  "`, `" foo"`.
/// The look-ahead would force a backtracking engine, about 20x slower than the `regex` crate's
/// automata on typical text, so we run `fast` (the same regex with that tail written as a plain
/// `\s+`) and apply the look-ahead by hand, see [`Fixup`]. `reference` is the published form;
/// the tests check both give identical splits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pattern {
    pub fast: &'static str,
    #[cfg_attr(not(test), allow(dead_code))]
    pub reference: &'static str,
    pub fixup: Fixup,
}

/// How a whitespace match of the final `\s+` alternative is corrected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fixup {
    /// No look-ahead in the published regex.
    None,
    /// Every all-whitespace match comes from `\s+`.
    Any,
    /// An all-whitespace match containing `\r` or `\n` comes from an earlier
    /// `\s*[\r\n]+` alternative (which is tried first and matches whenever the run has a line
    /// break), so only matches without line breaks are corrected.
    NoNewline,
}

const fn plain(re: &'static str) -> Pattern {
    Pattern {
        fast: re,
        reference: re,
        fixup: Fixup::None,
    }
}

/// GPT-2's regex. The published one ends in `|\s+`; that alternative is redundant here because
/// the only whitespace `\s+(?!\S)` leaves unmatched is a single character right before a
/// non-space, and the split keeps unmatched gaps as pieces of their own anyway.
const GPT2: Pattern = Pattern {
    fast: r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+",
    reference: r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    fixup: Fixup::Any,
};

/// Llama 3's regex: numbers in groups of up to three digits, letters may take one leading
/// non-letter, punctuation runs keep trailing newlines.
const LLAMA3: Pattern = Pattern {
    fast: r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+",
    reference: r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    fixup: Fixup::NoNewline,
};

/// Qwen2's regex: as Llama 3's but every digit is its own piece.
const QWEN2: Pattern = Pattern {
    fast: r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+",
    reference: r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    fixup: Fixup::NoNewline,
};

const DIGIT: Pattern = plain(r"\p{N}");

/// One entry of the name table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreSpec {
    /// The regexes applied in order.
    pub regexes: &'static [Pattern],
    /// When true, a whole pre-token that is itself in the vocabulary becomes that one token
    /// without running merges (Llama 3 style vocabularies rely on this).
    pub ignore_merges: bool,
    /// Whether a BOS token is added by default (`tokenizer.ggml.add_bos_token` overrides).
    pub add_bos: bool,
}

const fn spec(regexes: &'static [Pattern]) -> PreSpec {
    PreSpec {
        regexes,
        ignore_merges: false,
        add_bos: false,
    }
}

/// llama.cpp's fallback when a file names no pre-tokenizer.
const DEFAULT: PreSpec = spec(&[
    plain(r"[\p{P}\$\+<=>\^~\|]+"),
    GPT2,
    plain(r"\p{N}+"),
    plain("[0-9][0-9][0-9]"),
]);

const GPT2_SPEC: PreSpec = spec(&[GPT2]);
/// Digits split one by one first, then GPT-2's regex (StarCoder, SmolLM, ...).
const DIGITS_GPT2: PreSpec = spec(&[DIGIT, GPT2]);
const LLAMA3_SPEC: PreSpec = PreSpec {
    regexes: &[LLAMA3],
    ignore_merges: true,
    add_bos: true,
};
const LLAMA3_REGEX_ONLY: PreSpec = spec(&[LLAMA3]);
const QWEN2_SPEC: PreSpec = spec(&[QWEN2]);
const FALCON: PreSpec = spec(&[
    plain(r"[\p{P}\$\+<=>\^~\|`]+"),
    GPT2,
    plain("[0-9][0-9][0-9]"),
]);

/// Name table, as llama.cpp groups the names. `gpt2` is accepted as an alias of `gpt-2`.
/// Names whose llama.cpp handling needs more than a regex (per-token strip flags, separator
/// tokens, SentencePiece-style spaces, custom splitters) are left out on purpose, so they fail
/// loudly instead of tokenizing slightly differently.
const TABLE: &[(&[&str], PreSpec)] = &[
    (&["default"], DEFAULT),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        LLAMA3_SPEC,
    ),
    (&["dbrx", "smaug-bpe"], LLAMA3_REGEX_ONLY),
    (
        &[
            "gpt2",
            "gpt-2",
            "phi-2",
            "gigachat",
            "a.x-4.0",
            "mellum",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        GPT2_SPEC,
    ),
    (
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        DIGITS_GPT2,
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        QWEN2_SPEC,
    ),
    (&["falcon"], FALCON),
];

/// Looks up a pre-tokenizer name; `None` (key absent) means llama.cpp's `default`.
pub(crate) fn lookup(name: Option<&str>) -> Result<PreSpec, TokenizerError> {
    let name = name.unwrap_or("default");
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, s)| *s)
        .ok_or_else(|| TokenizerError::UnknownPreTokenizer {
            name: name.to_string(),
            supported: supported_names().join(", "),
        })
}

/// All accepted names.
pub(crate) fn supported_names() -> Vec<&'static str> {
    TABLE.iter().flat_map(|(n, _)| n.iter().copied()).collect()
}

/// A compiled pre-tokenizer: splits text into the pieces BPE runs on.
#[derive(Debug)]
pub(crate) struct Splitter {
    steps: Vec<(Regex, Fixup)>,
}

impl Splitter {
    pub(crate) fn new(spec: &PreSpec) -> Result<Self, TokenizerError> {
        let steps = spec
            .regexes
            .iter()
            .map(|p| {
                Regex::new(p.fast).map(|re| (re, p.fixup)).map_err(|e| {
                    TokenizerError::Encode(format!("pre-tokenizer regex {:?}: {e}", p.fast))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Splitter { steps })
    }

    /// Splits `text` into pieces, returned as byte ranges of `text` in order. Each regex cuts
    /// every piece left by the previous one into its matches and the gaps between them.
    pub(crate) fn split(&self, text: &str) -> Vec<(usize, usize)> {
        let mut pieces = vec![(0, text.len())];
        let mut next = Vec::new();
        for (re, fixup) in &self.steps {
            next.clear();
            for &(start, end) in &pieces {
                split_one(re, *fixup, text, start, end, &mut next);
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        pieces.retain(|&(s, e)| e > s);
        pieces
    }
}

/// Isolated split of `text[start..end]` by `re`: matches and gaps, in order.
fn split_one(
    re: &Regex,
    fixup: Fixup,
    text: &str,
    start: usize,
    end: usize,
    out: &mut Vec<(usize, usize)>,
) {
    let hay = &text[..end];
    let mut gap_start = start;
    let mut at = start;
    while at < end {
        let Some(m) = re.find_at(hay, at) else { break };
        let (ms, mut me) = (m.start(), m.end());
        if me == ms {
            // Our patterns never match empty; step over a character to be safe.
            at = ms + hay[ms..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        if fixup != Fixup::None && me < end {
            me = apply_lookahead(fixup, hay, ms, me);
        }
        if ms > gap_start {
            out.push((gap_start, ms));
        }
        out.push((ms, me));
        gap_start = me;
        at = me;
    }
    if gap_start < end {
        out.push((gap_start, end));
    }
}

/// Emulates `\s+(?!\S)`: a whitespace-only match followed by a non-space character (the
/// caller checked that something follows) gives up its last character, which then starts the
/// next match, unless it is the only character.
fn apply_lookahead(fixup: Fixup, hay: &str, ms: usize, me: usize) -> usize {
    let m = &hay[ms..me];
    if !m.chars().all(char::is_whitespace) {
        return me;
    }
    if fixup == Fixup::NoNewline && m.contains(['\r', '\n']) {
        return me;
    }
    // A whitespace match stops only at a non-space character or the end of the piece.
    let mut chars = m.char_indices();
    match chars.next_back() {
        Some((last, _)) if last > 0 => ms + last,
        _ => me,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::pre_tokenizers::PreTokenizerWrapper;
    use tokenizers::SplitDelimiterBehavior;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    /// The published regexes, look-ahead included, run by `tokenizers` (fancy-regex).
    fn reference(spec: &PreSpec) -> Sequence {
        let steps: Vec<PreTokenizerWrapper> = spec
            .regexes
            .iter()
            .map(|p| {
                Split::new(
                    SplitPattern::Regex(p.reference.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap()
                .into()
            })
            .collect();
        Sequence::new(steps)
    }

    fn reference_split(seq: &Sequence, text: &str) -> Vec<String> {
        let mut pts = PreTokenizedString::from(text);
        seq.pre_tokenize(&mut pts).unwrap();
        pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(s, _, _)| s.to_string())
            .collect()
    }

    fn fast_split(spec: &PreSpec, text: &str) -> Vec<String> {
        split_with(&Splitter::new(spec).unwrap(), text)
    }

    fn split_with(splitter: &Splitter, text: &str) -> Vec<String> {
        splitter
            .split(text)
            .into_iter()
            .map(|(s, e)| text[s..e].to_string())
            .collect()
    }

    #[test]
    fn every_spec_compiles() {
        for (_, s) in TABLE {
            Splitter::new(s).unwrap();
        }
    }

    #[test]
    fn known_splits() {
        let smol = lookup(Some("smollm")).unwrap();
        assert_eq!(
            fast_split(&smol, "Hi  there\t\tx 2024!\n\n"),
            ["Hi", " ", " there", "\t", "\t", "x", " ", "2", "0", "2", "4", "!", "\n\n"]
        );
        let l3 = lookup(Some("llama3")).unwrap();
        assert_eq!(
            fast_split(&l3, "12345 don'T  \tgo\n\n  x"),
            ["123", "45", " don", "'T", "  ", "\tgo", "\n\n", " ", " x"]
        );
    }

    /// A small deterministic generator (no dependency needed for test inputs).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    #[test]
    fn fast_split_equals_published_regexes() {
        const ALPHABET: &[&str] = &[
            " ",
            " ",
            " ",
            "  ",
            "\t",
            "\n",
            "\r\n",
            "\u{a0}",
            "\u{3000}",
            "a",
            "Zb",
            "é",
            "'s",
            "'T",
            "'",
            "1",
            "23",
            "4567",
            "٣",
            ".",
            ",",
            "!?",
            "$",
            "<|",
            "_",
            "😀",
            "👨‍👩‍👧",
            "中文",
            "\u{301}",
            "x",
            "don't",
            "I'LL",
            "\u{2028}",
        ];
        let mut rng = Lcg(0x5eed);
        let mut texts: Vec<String> = vec![
            String::new(),
            " ".into(),
            "   ".into(),
            "\n".into(),
            " \n ".into(),
            "a   b".into(),
            "a \t b".into(),
            "\t\tb".into(),
            "x  \n  y".into(),
            "trailing   ".into(),
            "  lead".into(),
        ];
        for _ in 0..3000 {
            let len = 1 + rng.next() as usize % 24;
            texts.push(
                (0..len)
                    .map(|_| ALPHABET[rng.next() as usize % ALPHABET.len()])
                    .collect(),
            );
        }
        for (names, spec) in TABLE {
            let (fast, slow) = (Splitter::new(spec).unwrap(), reference(spec));
            for t in &texts {
                assert_eq!(
                    split_with(&fast, t),
                    reference_split(&slow, t),
                    "pre {:?}, text {t:?}",
                    names[0]
                );
            }
        }
    }

    #[test]
    fn unknown_name_is_a_clear_error() {
        let e = lookup(Some("no-such-pre")).unwrap_err().to_string();
        assert!(e.contains("no-such-pre") && e.contains("smollm"), "{e}");
    }

    #[test]
    fn absent_means_default() {
        assert_eq!(lookup(None).unwrap().regexes.len(), 4);
    }
}
