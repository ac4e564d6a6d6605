//! SentencePiece (`tokenizer.ggml.model = "llama"`) tokenizers built from tiny hand-made GGUF
//! vocabularies: the merge-by-score rule pinned on hand-computed outputs, the space prefix,
//! byte fallback, decoding, and malformed metadata that must be rejected with an error.

use ridge_gguf::{ArrayValue, GgufFile, GgufWriter, MetadataValue};
use ridge_tokenizer::{IncrementalDecoder, Tokenizer, TokenizerError};

const UNK: u32 = 0;
const BOS: u32 = 1;
const EOS: u32 = 2;
/// `<0x00>`; byte tokens are ids 3..=258 in byte order.
const B0: u32 = 3;
const SP: u32 = 259; // ▁
const H: u32 = 260;
// 261: e
const L: u32 = 262;
// 263: o
const SP_H: u32 = 264; // ▁h   -6
const HE: u32 = 265; // he    -3
const LL: u32 = 266; // ll    -2
const LO: u32 = 267; // lo    -1
const HELL: u32 = 268; // hell  -4
const SP_HELL: u32 = 269; // ▁hell -5
                          // 270: ▁hello -0.5, reachable only through ▁hell + o, which never forms below.
const CTRL: u32 = 271; // <|x|>, control
const UD: u32 = 272; // <ud>, user-defined

/// The vocabulary above: (text, score, GGUF token type).
fn base() -> Vec<(String, f32, i32)> {
    let mut v = vec![
        ("<unk>".to_string(), 0.0, 2),
        ("<s>".to_string(), 0.0, 3),
        ("</s>".to_string(), 0.0, 3),
    ];
    v.extend((0..=255u32).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
    for (t, s) in [
        ("▁", -20.0),
        ("h", -20.0),
        ("e", -20.0),
        ("l", -20.0),
        ("o", -20.0),
        ("▁h", -6.0),
        ("he", -3.0),
        ("ll", -2.0),
        ("lo", -1.0),
        ("hell", -4.0),
        ("▁hell", -5.0),
        ("▁hello", -0.5),
    ] {
        v.push((t.to_string(), s, 1));
    }
    v.push(("<|x|>".to_string(), 0.0, 3));
    v.push(("<ud>".to_string(), 0.0, 4));
    v
}

struct Meta(Vec<(&'static str, MetadataValue)>);

impl Meta {
    fn from_vocab(v: Vec<(String, f32, i32)>) -> Self {
        let tokens = v.iter().map(|(t, _, _)| t.clone()).collect();
        let scores = v.iter().map(|&(_, s, _)| s).collect();
        let types = v.iter().map(|&(_, _, t)| t).collect();
        Meta(vec![
            (
                "tokenizer.ggml.model",
                MetadataValue::String("llama".into()),
            ),
            (
                "tokenizer.ggml.tokens",
                MetadataValue::Array(ArrayValue::String(tokens)),
            ),
            (
                "tokenizer.ggml.scores",
                MetadataValue::Array(ArrayValue::F32(scores)),
            ),
            (
                "tokenizer.ggml.token_type",
                MetadataValue::Array(ArrayValue::I32(types)),
            ),
        ])
    }
    fn ok() -> Self {
        Self::from_vocab(base())
    }
    fn set(mut self, key: &'static str, v: MetadataValue) -> Self {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, v));
        self
    }
    fn remove(mut self, key: &str) -> Self {
        self.0.retain(|(k, _)| *k != key);
        self
    }
    fn build(&self) -> Result<Tokenizer, TokenizerError> {
        let mut w = GgufWriter::new();
        for (k, v) in &self.0 {
            w.meta(k, v.clone());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, w.to_bytes()).unwrap();
        let f = GgufFile::open(&path).unwrap();
        Tokenizer::from_gguf(&f)
    }
}

fn tok() -> Tokenizer {
    Meta::ok().build().unwrap()
}

#[test]
fn merges_follow_scores() {
    let tok = tok();
    // Defaults for a SentencePiece vocabulary without the keys (llama.cpp's): BOS 1, EOS 2,
    // unknown 0, add BOS, no EOS, space prefix on.
    assert_eq!(tok.model_name(), "llama");
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.unk_id()),
        (Some(BOS), Some(EOS), Some(UNK))
    );
    assert!(tok.add_bos() && !tok.add_eos() && tok.add_space_prefix());

    // "hello" -> "▁hello" = ▁ h e l l o. Candidate pairs: ▁h -6, he -3, ll -2, lo -1.
    // lo (-1) merges first: ▁ h e l [lo]; the pair "ll" is now stale and "llo" is no token.
    // he (-3) next: ▁ [he] l [lo]; neither "▁he" nor "hel" is a token. ▁h (-6) is stale.
    // So "hell" and "▁hello" are never reached, although "▁hello" is in the vocabulary.
    assert_eq!(
        tok.encode("hello", true, true).unwrap(),
        vec![BOS, SP, HE, L, LO]
    );
    // "hell" -> ▁ h e l l: ll (-2) first, then he (-3), which makes "hell" (-4) a candidate
    // and then "▁hell" (-5). ▁h (-6) comes last and is stale.
    assert_eq!(tok.encode("hell", false, true).unwrap(), vec![SP_HELL]);
    assert_eq!(
        tok.encode("hello hell", false, true).unwrap(),
        vec![SP, HE, L, LO, SP_HELL]
    );
    // Equal scores: the leftmost pair merges first. "lll" -> ▁ l l l: [ll] l, not l [ll].
    assert_eq!(tok.encode("lll", false, true).unwrap(), vec![SP, LL, L]);
    // Unused pieces: "▁h" only when nothing better follows.
    assert_eq!(tok.encode("h", false, true).unwrap(), vec![SP_H]);
    assert_eq!(tok.encode("", true, true).unwrap(), vec![BOS]);
    assert_eq!(tok.encode("", false, true).unwrap(), Vec::<u32>::new());
}

#[test]
fn space_prefix_after_specials_and_byte_fallback() {
    let tok = tok();
    // The prefix goes in front of the first fragment and of every fragment after a special
    // token; spaces in the text are ▁ too.
    assert_eq!(
        tok.encode("hell<|x|>hell<ud> h", false, true).unwrap(),
        vec![SP_HELL, CTRL, SP_HELL, UD, SP, SP_H]
    );
    // Without parse_special the control token is text (its characters fall back to bytes);
    // user-defined tokens are always matched.
    let ids = tok.encode("<|x|><ud>", false, false).unwrap();
    let mut want = vec![SP];
    want.extend("<|x|>".bytes().map(|b| B0 + b as u32));
    want.push(UD);
    assert_eq!(ids, want);
    // 'é' is not in the vocabulary: its UTF-8 bytes C3 A9 as byte tokens.
    assert_eq!(
        tok.encode("hé", false, true).unwrap(),
        vec![SP_H, B0 + 0xC3, B0 + 0xA9]
    );
    // add_space_prefix = false: no ▁ in front ("hello" -> h e l l o -> [he] l [lo]).
    let tok = Meta::ok()
        .set(
            "tokenizer.ggml.add_space_prefix",
            MetadataValue::Bool(false),
        )
        .set("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false))
        .build()
        .unwrap();
    assert!(!tok.add_space_prefix() && !tok.add_bos());
    assert_eq!(tok.encode("hello", true, true).unwrap(), vec![HE, L, LO]);
    // h e l l: ll (-2), then he (-3), then he+ll = hell (-4).
    assert_eq!(
        tok.encode("<|x|>hell", true, true).unwrap(),
        vec![CTRL, HELL]
    );
    assert_eq!(tok.encode(" hell", true, true).unwrap(), vec![SP_HELL]);
}

#[test]
fn add_bos_eos_follow_metadata() {
    let tok = Meta::ok()
        .set("tokenizer.ggml.add_eos_token", MetadataValue::Bool(true))
        .set("tokenizer.ggml.bos_token_id", MetadataValue::U32(CTRL))
        .build()
        .unwrap();
    assert_eq!(
        tok.encode("hell", true, true).unwrap(),
        vec![CTRL, SP_HELL, EOS]
    );
    assert_eq!(tok.encode("hell", false, true).unwrap(), vec![SP_HELL]);
    // A chat prompt that already starts with the BOS text gets no second BOS.
    assert_eq!(
        tok.encode_chat_prompt("<|x|>hell").unwrap(),
        vec![CTRL, SP_HELL]
    );
}

#[test]
fn decoding() {
    let tok = tok();
    assert_eq!(tok.decode(&[SP, HE, L, LO, SP_HELL], false), " hello hell");
    assert_eq!(tok.decode(&[SP_H, B0 + 0xC3, B0 + 0xA9], false), " hé");
    // Control and unknown tokens render only when asked; user-defined always.
    assert_eq!(tok.decode(&[BOS, CTRL, UD, UNK, H], true), "<ud>h");
    assert_eq!(
        tok.decode(&[BOS, CTRL, UD, UNK, H], false),
        "<s><|x|><ud><unk>h"
    );
    // A broken byte sequence is replaced, never emitted as invalid UTF-8.
    assert_eq!(tok.decode(&[B0 + 0xC3, H], false), "\u{FFFD}h");
    assert_eq!(tok.decode(&[9999, H], false), "h");
    assert_eq!(tok.token_to_piece(SP_HELL, false), b" hell");
    assert_eq!(tok.token_to_piece(B0 + 0xFF, false), &[0xFF]);
    assert_eq!(tok.token_str(SP_HELL), Some("▁hell"));
    assert_eq!(tok.token_id("▁hell"), Some(SP_HELL));
    assert_eq!(tok.token_id("nope"), None);

    // The streaming decoder holds back the bytes of 'é' (and of a 4-byte emoji) until complete.
    let mut dec = IncrementalDecoder::default();
    let ids = tok.encode("hé😀", false, true).unwrap();
    let outs: Vec<String> = ids.iter().map(|&id| dec.push(&tok, id)).collect();
    assert_eq!(outs, [" h", "", "é", "", "", "", "😀"]);
    assert_eq!(dec.finish(), "");
    // Encoding then decoding gives the text back, with the space prefix in front.
    for text in ["hello hell", "héllo wörld 😀 <ud>", "  l  l  "] {
        let ids = tok.encode(text, false, false).unwrap();
        assert_eq!(tok.decode(&ids, false), format!(" {text}"));
    }
}

#[test]
fn missing_byte_tokens_fall_back_to_unknown() {
    // No byte tokens at all: a character outside the vocabulary becomes the unknown token
    // once per byte (llama.cpp aborts here).
    let v: Vec<_> = base().into_iter().filter(|(_, _, t)| *t != 6).collect();
    let tok = Meta::from_vocab(v)
        .set("tokenizer.ggml.unknown_token_id", MetadataValue::U32(0))
        .build()
        .unwrap();
    let ids = tok.encode("é", false, true).unwrap();
    assert_eq!(ids, vec![3, 0, 0]); // ▁ is id 3 once the byte tokens are gone
}

fn assert_malformed(m: Meta, key: &str) {
    match m.build() {
        Err(TokenizerError::Malformed { key: k, message }) => {
            assert_eq!(k, key, "message: {message}")
        }
        Err(e) => panic!("expected Malformed({key}), got {e}"),
        Ok(_) => panic!("expected Malformed({key}), got a tokenizer"),
    }
}

#[test]
fn malformed_vocabularies_are_errors() {
    let n = base().len();
    assert_malformed(
        Meta::ok().remove("tokenizer.ggml.scores"),
        "tokenizer.ggml.scores",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.scores",
            MetadataValue::Array(ArrayValue::F32(vec![0.0; n - 1])),
        ),
        "tokenizer.ggml.scores",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.scores",
            MetadataValue::Array(ArrayValue::F32(vec![0.0; n + 1])),
        ),
        "tokenizer.ggml.scores",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.scores",
            MetadataValue::Array(ArrayValue::String(vec!["x".into(); n])),
        ),
        "tokenizer.ggml.scores",
    );
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.scores", MetadataValue::F32(1.0)),
        "tokenizer.ggml.scores",
    );
    let mut nan = vec![0.0f32; n];
    nan[7] = f32::NAN;
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.scores",
            MetadataValue::Array(ArrayValue::F32(nan)),
        ),
        "tokenizer.ggml.scores",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(ArrayValue::I32(vec![1; n - 3])),
        ),
        "tokenizer.ggml.token_type",
    );
    let mut bad_type = vec![1; n];
    bad_type[5] = 9;
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(ArrayValue::I32(bad_type)),
        ),
        "tokenizer.ggml.token_type",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(ArrayValue::F32(vec![1.0; n])),
        ),
        "tokenizer.ggml.token_type",
    );
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.bos_token_id", MetadataValue::U32(n as u32)),
        "tokenizer.ggml.bos_token_id",
    );
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.unknown_token_id", MetadataValue::I32(-1)),
        "tokenizer.ggml.unknown_token_id",
    );
    assert_malformed(
        Meta::from_vocab(Vec::new()).set(
            "tokenizer.ggml.scores",
            MetadataValue::Array(ArrayValue::F32(Vec::new())),
        ),
        "tokenizer.ggml.tokens",
    );
    // A one-token vocabulary has no default BOS (id 1) but must add one: clear error.
    assert_malformed(
        Meta::from_vocab(vec![("a".into(), 0.0, 1)]),
        "tokenizer.ggml.add_bos_token",
    );
    // Wrong types for the flags are errors, not silently ignored.
    assert!(Meta::ok()
        .set("tokenizer.ggml.add_space_prefix", MetadataValue::U32(1))
        .build()
        .is_err());
    // Other vocabulary kinds are reported as unsupported.
    match Meta::ok()
        .set("tokenizer.ggml.model", MetadataValue::String("bert".into()))
        .build()
    {
        Err(TokenizerError::Unsupported(m)) => assert!(m.contains("bert"), "{m}"),
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn no_merges_or_pre_tokenizer_needed() {
    // SentencePiece ignores tokenizer.ggml.pre (llama.cpp does too) and needs no merges.
    let tok = Meta::ok()
        .set(
            "tokenizer.ggml.pre",
            MetadataValue::String("whatever".into()),
        )
        .build()
        .unwrap();
    assert_eq!(tok.pre_tokenizer(), "whatever");
    assert_eq!(tok.encode("hell", false, true).unwrap(), vec![SP_HELL]);
}
