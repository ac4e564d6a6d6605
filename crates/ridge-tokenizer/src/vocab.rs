//! Reading and validating the vocabulary metadata of a GGUF file.
//!
//! Everything read from the file is checked before use: array element types, array lengths
//! against the token count, special-token ids against the vocabulary size, and every merge
//! against the vocabulary. A failed check is a [`TokenizerError::Malformed`] naming the key;
//! nothing here panics on file contents.
//!
//! Token *attributes* follow llama.cpp: the `tokenizer.ggml.token_type` value gives the initial
//! attribute, then a few tokens recognised by their text are promoted to control tokens and to
//! end-of-generation (EOG) tokens, because converters do not reliably mark them.

use ridge_gguf::{ArrayValue, GgufFile, MetadataValue};

use crate::TokenizerError;

/// Token attributes, a bit set as in llama.cpp (a token can be e.g. normal *and* control after
/// promotion).
pub(crate) mod attr {
    pub const NORMAL: u8 = 1 << 0;
    pub const UNKNOWN: u8 = 1 << 1;
    pub const CONTROL: u8 = 1 << 2;
    pub const USER_DEFINED: u8 = 1 << 3;
    pub const UNUSED: u8 = 1 << 4;
    pub const BYTE: u8 = 1 << 5;
}

pub(crate) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(crate) const KEY_PRE: &str = "tokenizer.ggml.pre";
pub(crate) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const KEY_TYPES: &str = "tokenizer.ggml.token_type";
pub(crate) const KEY_MERGES: &str = "tokenizer.ggml.merges";
pub(crate) const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub(crate) const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

/// The vocabulary kinds implemented, by `tokenizer.ggml.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `"gpt2"`: byte-level BPE with an explicit merge list.
    Bpe,
    /// `"llama"`: SentencePiece-style BPE, merges chosen by token score.
    Spm,
    /// `"gemma4"`: BPE with an explicit merge list over UTF-8 characters, spaces written `▁`,
    /// `<0xNN>` byte fallback (see `gemma4.rs`).
    Gemma4,
}

/// Special-token ids read from the file (all optional).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Texts that end generation (llama.cpp's list; such tokens are also forced to control).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// End-of-turn texts, recognised when `tokenizer.ggml.eot_token_id` is absent (all of them are
/// also in [`EOG_TEXTS`]).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Fill-in-the-middle token texts, per role, recognised when the id key is absent. Tokens found
/// are forced to control; pad/repo/separator tokens also end generation.
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// gpt-oss "harmony" tokens that must always be rendered, so llama.cpp makes them user-defined.
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// The validated vocabulary.
#[derive(Debug)]
pub(crate) struct Vocab {
    /// Token texts, index = id. Empty texts are replaced by `[EMPTY_<id>]` (as llama.cpp does).
    pub tokens: Vec<String>,
    /// Attribute bit set per token.
    pub attrs: Vec<u8>,
    /// Merges as (left, right) pairs in rank order, duplicates removed (first kept). Moved
    /// into the BPE model when the tokenizer is built. Byte-level BPE only.
    pub merges: Vec<(String, String)>,
    /// Merges as token ids `[left, right, merged]` in rank order, duplicates kept (the
    /// encoder keeps the first). Gemma 4 only: it needs no strings, and 500 000 merges read
    /// as ids load in a fraction of the time.
    pub merge_ids: Vec<[u32; 3]>,
    /// Score per token (SentencePiece only; empty for the merge-list kinds). Moved into the
    /// SentencePiece encoder when the tokenizer is built.
    pub scores: Vec<f32>,
    pub ids: SpecialIds,
    /// End-of-generation flag per token.
    pub eog: Vec<bool>,
}

fn as_ids(key: &str, a: &ArrayValue) -> Result<Vec<i64>, TokenizerError> {
    a.to_i64_vec()
        .ok_or_else(|| TokenizerError::malformed(key, "expected an array of integers"))
}

fn type_to_attr(key: &str, id: usize, ty: i64) -> Result<u8, TokenizerError> {
    Ok(match ty {
        0 => 0, // undefined
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => {
            return Err(TokenizerError::malformed(
                key,
                format!("token {id} has type {ty}; expected 0..=6"),
            ))
        }
    })
}

/// An optional token id: absent is `None`; present must be an integer below `n`.
fn optional_id(gguf: &GgufFile, key: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = gguf.get(key) else {
        return Ok(None);
    };
    let id = v.as_u64().ok_or_else(|| {
        TokenizerError::malformed(key, format!("expected a non-negative integer, found {v:?}"))
    })?;
    if id >= n as u64 {
        return Err(TokenizerError::malformed(
            key,
            format!("token id {id} is out of range (vocabulary has {n} tokens)"),
        ));
    }
    Ok(Some(id as u32))
}

/// Splits a merge rule `"left right"` at the first space after the first character.
fn split_merge(rule: &str) -> Option<(&str, &str)> {
    let first_len = rule.chars().next()?.len_utf8();
    let pos = rule[first_len..].find(' ')? + first_len;
    let (l, r) = (&rule[..pos], &rule[pos + 1..]);
    (!r.is_empty()).then_some((l, r))
}

impl Vocab {
    /// Reads and validates the vocabulary of the given kind.
    pub(crate) fn from_gguf(gguf: &GgufFile, kind: Kind) -> Result<Self, TokenizerError> {
        let raw_tokens = gguf.get_string_array(KEY_TOKENS)?;
        let n = raw_tokens.len();
        if n == 0 {
            return Err(TokenizerError::malformed(
                KEY_TOKENS,
                "the vocabulary is empty",
            ));
        }
        if n > i32::MAX as usize {
            return Err(TokenizerError::malformed(
                KEY_TOKENS,
                format!("{n} tokens; at most {} are supported", i32::MAX),
            ));
        }
        let tokens: Vec<String> = raw_tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    t.clone()
                }
            })
            .collect();

        let mut attrs = match gguf.get(KEY_TYPES) {
            None => vec![attr::NORMAL; n],
            Some(MetadataValue::Array(a)) => {
                let types = as_ids(KEY_TYPES, a)?;
                if types.len() != n {
                    return Err(TokenizerError::malformed(
                        KEY_TYPES,
                        format!("has {} entries but there are {n} tokens", types.len()),
                    ));
                }
                types
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| type_to_attr(KEY_TYPES, i, t))
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(v) => {
                return Err(TokenizerError::malformed(
                    KEY_TYPES,
                    format!("expected an array of integers, found {v:?}"),
                ))
            }
        };

        // Text -> id, last id wins for duplicated texts (as in llama.cpp).
        let index: std::collections::HashMap<&str, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i as u32))
            .collect();

        let (mut merges, mut merge_ids, mut scores) = (Vec::new(), Vec::new(), Vec::new());
        match kind {
            Kind::Bpe => merges = read_merges(gguf, &index)?,
            Kind::Gemma4 => {
                visit_merges(gguf, &index, |_, _, ids| merge_ids.push(ids))?;
            }
            Kind::Spm => scores = read_scores(gguf, n)?,
        }

        // Special ids, defaults as in llama.cpp (kept so that files relying on them behave the
        // same); an explicit key overrides. gpt2-type vocabularies default BOS and EOS to id
        // 11; SentencePiece ones to BOS 1, EOS 2 and unknown 0 (the Llama layout); Gemma 4 ones
        // have no defaults.
        let default = |id: u32| (id < n as u32).then_some(id);
        let (d_bos, d_eos, d_unk) = match kind {
            Kind::Bpe => (default(11), default(11), None),
            Kind::Spm => (default(1), default(2), default(0)),
            Kind::Gemma4 => (None, None, None),
        };
        let mut ids = SpecialIds {
            bos: optional_id(gguf, "tokenizer.ggml.bos_token_id", n)?.or(d_bos),
            eos: optional_id(gguf, "tokenizer.ggml.eos_token_id", n)?.or(d_eos),
            unk: optional_id(gguf, "tokenizer.ggml.unknown_token_id", n)?.or(d_unk),
            pad: optional_id(gguf, "tokenizer.ggml.padding_token_id", n)?,
            eot: optional_id(gguf, "tokenizer.ggml.eot_token_id", n)?,
            eom: optional_id(gguf, "tokenizer.ggml.eom_token_id", n)?,
            fim_pre: optional_id(gguf, "tokenizer.ggml.fim_pre_token_id", n)?,
            fim_suf: optional_id(gguf, "tokenizer.ggml.fim_suf_token_id", n)?,
            fim_mid: optional_id(gguf, "tokenizer.ggml.fim_mid_token_id", n)?,
            fim_pad: optional_id(gguf, "tokenizer.ggml.fim_pad_token_id", n)?,
            fim_rep: optional_id(gguf, "tokenizer.ggml.fim_rep_token_id", n)?,
            fim_sep: optional_id(gguf, "tokenizer.ggml.fim_sep_token_id", n)?,
        };

        let mut eog = vec![false; n];
        promote_by_text(&index, &mut attrs, &mut eog, &mut ids);

        Ok(Vocab {
            tokens,
            attrs,
            merges,
            merge_ids,
            scores,
            ids,
            eog,
        })
    }
}

/// Reads `tokenizer.ggml.merges` and checks every rule: two parts, both tokens, and their
/// concatenation a token. Calls `f(left, right, [left id, right id, merged id])` for each rule
/// in rank order.
fn visit_merges(
    gguf: &GgufFile,
    index: &std::collections::HashMap<&str, u32>,
    mut f: impl FnMut(&str, &str, [u32; 3]),
) -> Result<(), TokenizerError> {
    let rules = match gguf.get(KEY_MERGES) {
        None => return Err(TokenizerError::malformed(KEY_MERGES, "missing")),
        Some(MetadataValue::Array(ArrayValue::String(v))) => v,
        Some(v) => {
            return Err(TokenizerError::malformed(
                KEY_MERGES,
                format!("expected an array of strings, found {}", short_type(v)),
            ))
        }
    };
    let mut merged = String::new();
    for (i, rule) in rules.iter().enumerate() {
        let (l, r) = split_merge(rule).ok_or_else(|| {
            TokenizerError::malformed(
                KEY_MERGES,
                format!("merge {i} ({rule:?}) is not of the form \"left right\""),
            )
        })?;
        let id = |part: &str| {
            index.get(part).copied().ok_or_else(|| {
                TokenizerError::malformed(
                    KEY_MERGES,
                    format!("merge {i} ({rule:?}) names {part:?}, which is not in the vocabulary"),
                )
            })
        };
        let (left, right) = (id(l)?, id(r)?);
        merged.clear();
        merged.push_str(l);
        merged.push_str(r);
        let to = index.get(merged.as_str()).copied().ok_or_else(|| {
            TokenizerError::malformed(
                KEY_MERGES,
                format!("merge {i} ({rule:?}) produces {merged:?}, which is not in the vocabulary"),
            )
        })?;
        f(l, r, [left, right, to]);
    }
    Ok(())
}

/// The merges as strings for the `tokenizers` crate's BPE, each pair once (the first, lowest
/// rank, wins).
fn read_merges(
    gguf: &GgufFile,
    index: &std::collections::HashMap<&str, u32>,
) -> Result<Vec<(String, String)>, TokenizerError> {
    let mut seen = std::collections::HashSet::new();
    let mut merges = Vec::new();
    visit_merges(gguf, index, |l, r, [left, right, _]| {
        if seen.insert((left, right)) {
            merges.push((l.to_string(), r.to_string()));
        }
    })?;
    Ok(merges)
}

/// `tokenizer.ggml.scores`: float32 (or integer) per token. Required for SentencePiece, where
/// the scores decide the merge order; llama.cpp would silently use 0 for every token, which
/// turns the tokenizer into "leftmost merge first" and quietly changes every tokenization.
fn read_scores(gguf: &GgufFile, n: usize) -> Result<Vec<f32>, TokenizerError> {
    let scores: Vec<f32> = match gguf.get(KEY_SCORES) {
        None => {
            return Err(TokenizerError::malformed(
                KEY_SCORES,
                "missing; a SentencePiece (\"llama\") vocabulary needs one score per token",
            ))
        }
        Some(MetadataValue::Array(ArrayValue::F32(v))) => v.clone(),
        Some(MetadataValue::Array(ArrayValue::F64(v))) => v.iter().map(|&x| x as f32).collect(),
        // llama.cpp also accepts int32 scores.
        Some(MetadataValue::Array(a)) if !matches!(a, ArrayValue::String(_)) => a
            .to_i64_vec()
            .ok_or_else(|| {
                TokenizerError::malformed(KEY_SCORES, "expected an array of float32 or integers")
            })?
            .iter()
            .map(|&x| x as f32)
            .collect(),
        Some(v) => {
            return Err(TokenizerError::malformed(
                KEY_SCORES,
                format!("expected an array of float32, found {}", short_type(v)),
            ))
        }
    };
    if scores.len() != n {
        return Err(TokenizerError::malformed(
            KEY_SCORES,
            format!("has {} entries but there are {n} tokens", scores.len()),
        ));
    }
    if let Some(i) = scores.iter().position(|s| s.is_nan()) {
        return Err(TokenizerError::malformed(
            KEY_SCORES,
            format!("token {i} has score NaN; expected a number"),
        ));
    }
    Ok(scores)
}

fn short_type(v: &MetadataValue) -> String {
    match v {
        MetadataValue::Array(a) => {
            let s = format!("{a:?}");
            let kind = s.split('(').next().unwrap_or("?").to_string();
            format!("an array of {kind}")
        }
        other => {
            let s = format!("{other:?}");
            s.split('(').next().unwrap_or("?").to_string()
        }
    }
}

/// llama.cpp's text-based fix-ups: end-of-turn, FIM and EOG tokens become control tokens; EOG
/// tokens are collected; gpt-oss tokens that must be visible become user-defined.
fn promote_by_text(
    index: &std::collections::HashMap<&str, u32>,
    attrs: &mut [u8],
    eog: &mut [bool],
    ids: &mut SpecialIds,
) {
    let find_all = |texts: &[&str]| -> Vec<u32> {
        texts.iter().filter_map(|t| index.get(t).copied()).collect()
    };
    let make_control = |attrs: &mut [u8], id: u32| attrs[id as usize] |= attr::CONTROL;

    // FIM roles: when the key is absent, a token with one of the role's texts takes the role
    // (llama.cpp takes whichever its hash map yields first; we take the lowest id) and every
    // matching token is made a control token.
    let roles: [(&mut Option<u32>, &[&str], bool); 6] = [
        (&mut ids.fim_pre, FIM_PRE_TEXTS, false),
        (&mut ids.fim_suf, FIM_SUF_TEXTS, false),
        (&mut ids.fim_mid, FIM_MID_TEXTS, false),
        (&mut ids.fim_pad, FIM_PAD_TEXTS, true),
        (&mut ids.fim_rep, FIM_REP_TEXTS, true),
        (&mut ids.fim_sep, FIM_SEP_TEXTS, true),
    ];
    for (slot, texts, ends) in roles {
        if slot.is_none() {
            let found = find_all(texts);
            for &id in &found {
                make_control(attrs, id);
            }
            *slot = found.iter().min().copied();
        }
        if ends {
            if let Some(id) = *slot {
                eog[id as usize] = true;
            }
        }
    }
    if ids.eot.is_none() {
        ids.eot = find_all(EOT_TEXTS).into_iter().min();
    }
    if ids.eom.is_none() {
        ids.eom = index.get("<|eom_id|>").copied();
    }

    for id in find_all(EOG_TEXTS) {
        eog[id as usize] = true;
        make_control(attrs, id);
    }
    for id in find_all(ALWAYS_RENDERED) {
        attrs[id as usize] = attr::USER_DEFINED;
    }
    for id in [ids.eos, ids.eot, ids.eom].into_iter().flatten() {
        eog[id as usize] = true;
    }

    // Harmony-style vocabularies end a turn with <|return|>/<|call|> (or <|calls|>/<|flush|>);
    // there <|end|> only separates messages and must not stop generation.
    let has = |t: &str, eog: &[bool]| index.get(t).is_some_and(|&i| eog[i as usize]);
    if let Some(&end) = index.get("<|end|>") {
        let harmony = (has("<|return|>", eog) && has("<|call|>", eog))
            || (has("<|calls|>", eog) && has("<|flush|>", eog));
        if harmony && eog[end as usize] {
            eog[end as usize] = false;
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // Where </s> is an ordinary token (the vocabulary has a different end marker), undo its
    // promotion.
    if let Some(&s) = index.get("</s>") {
        if eog[s as usize] && (has("<|tool_response>", eog) || index.contains_key("<|plamo:eos|>"))
        {
            eog[s as usize] = false;
            attrs[s as usize] = attr::NORMAL;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_rule_split() {
        assert_eq!(split_merge("Ġ t"), Some(("Ġ", "t")));
        assert_eq!(split_merge("  t"), Some((" ", "t")));
        assert_eq!(split_merge("ab"), None);
        assert_eq!(split_merge("a "), None);
        assert_eq!(split_merge(""), None);
        assert_eq!(split_merge("é x"), Some(("é", "x")));
    }
}
