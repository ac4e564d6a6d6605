//! Gemma 4 (`tokenizer.ggml.model = "gemma4"`) on a small synthetic vocabulary, compared with
//! llama.cpp on the very same file.
//!
//! Gemma 4's real vocabulary is 15 MB, too big for the repository, so CI checks the rules on the
//! vocabulary below instead: spaces as `▁` and merges across them, space and newline runs
//! (including a newline run that is a token only llama.cpp's whole-run rule reaches), merge
//! rank against position, a merge across a line break that must never apply, byte fallback for
//! emoji and CJK (with one byte token missing, which llama.cpp drops), special tokens in the
//! text with and without `parse_special`, and BOS forced on although the file says
//! `add_bos_token = false`.
//!
//! `data/gemma4_llama_cpp_ids.json` holds what llama.cpp's `llama-tokenize` gives for each text
//! of `data/gemma4_corpus.json` on this file (ids, and the bytes of every token's piece), made
//! by `data/regen_gemma4.sh`, which writes the file through `write_vocab_for_regen` below. The
//! fixture records the file's size and hash, so changing the vocabulary without regenerating
//! fails here. The same fixture has the ids of the real `ggml-vocab-gemma-4.gguf`, checked by
//! the (ignored) test in `llama_cpp_vocabs.rs`.

use ridge_gguf::{ArrayValue, GgufFile, GgufWriter, MetadataValue};
use ridge_tokenizer::{IncrementalDecoder, Tokenizer, TokenizerError};
use serde::Deserialize;

/// GGUF token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;

/// The one byte without a `<0xNN>` token: it occurs in "—" (E2 80 94) and "ה" (D7 94).
const MISSING_BYTE: u8 = 0x94;

/// The vocabulary: (text, GGUF token type), id = position.
fn vocab() -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = [
        ("<pad>", CONTROL),
        ("<eos>", CONTROL),
        ("<bos>", CONTROL),
        ("<unk>", CONTROL),
        ("<|turn>", CONTROL),
        ("<turn|>", CONTROL),
        ("<|tool_call>", USER_DEFINED),
        ("<tool_call|>", USER_DEFINED),
        ("<|\"|>", USER_DEFINED),
        ("<|channel>", USER_DEFINED),
        ("<channel|>", USER_DEFINED),
        // Promoted to control and end-of-generation by its text, as llama.cpp does.
        ("<|tool_response>", USER_DEFINED),
    ]
    .iter()
    .map(|&(t, ty)| (t.to_string(), ty))
    .collect();
    v.extend(
        (0..=255u8)
            .filter(|&b| b != MISSING_BYTE)
            .map(|b| (format!("<0x{b:02X}>"), BYTE)),
    );
    // Single characters (not "f", "本", "\r" nor any emoji: those fall back to bytes), then
    // what the merges make, and "\n\n\n", which no merge makes.
    for t in [
        "▁",
        "a",
        "b",
        "c",
        "d",
        "e",
        "h",
        "l",
        "o",
        "r",
        "w",
        "é",
        "日",
        "\t",
        "\n",
        "▁▁",
        "▁▁▁▁",
        "he",
        "ll",
        "hell",
        "hello",
        "o▁",
        "o\n",
        "▁w",
        "or",
        "▁wor",
        "▁worl",
        "▁world",
        "ab",
        "bc",
        "aa",
        "\n\n",
        "\t\t",
        "é▁",
        "日日",
        "\n\n\n",
    ] {
        v.push((t.to_string(), NORMAL));
    }
    v
}

/// The merges in rank order. "o \n" would join across a line break, which the pre-split never
/// lets happen; "o ▁" outranks "▁ w", so "hello world" keeps "o▁" and never forms "▁world";
/// "b c" is listed twice and its first rank counts.
fn merges() -> Vec<&'static str> {
    vec![
        "o \n",
        "▁ ▁",
        "h e",
        "l l",
        "▁▁ ▁▁",
        "he ll",
        "o ▁",
        "▁ w",
        "hell o",
        "o r",
        "▁w or",
        "▁wor l",
        "▁worl d",
        "a b",
        "b c",
        "a a",
        "\n \n",
        "\t \t",
        "b c",
        "é ▁",
        "日 日",
    ]
}

/// The synthetic file's bytes.
fn gguf_bytes() -> Vec<u8> {
    let v = vocab();
    let strings = |items: Vec<String>| MetadataValue::Array(ArrayValue::String(items));
    let mut w = GgufWriter::new();
    // llama.cpp needs a known architecture to load a file, but reads nothing else of it when
    // it loads only the vocabulary.
    w.meta(
        "general.architecture",
        MetadataValue::String("gemma4".into()),
    )
    .meta(
        "tokenizer.ggml.model",
        MetadataValue::String("gemma4".into()),
    )
    .meta(
        "tokenizer.ggml.tokens",
        strings(v.iter().map(|(t, _)| t.clone()).collect()),
    )
    .meta(
        "tokenizer.ggml.token_type",
        MetadataValue::Array(ArrayValue::I32(v.iter().map(|&(_, ty)| ty).collect())),
    )
    .meta(
        "tokenizer.ggml.merges",
        strings(merges().iter().map(|m| m.to_string()).collect()),
    )
    .meta("tokenizer.ggml.bos_token_id", MetadataValue::U32(2))
    .meta("tokenizer.ggml.eos_token_id", MetadataValue::U32(1))
    .meta("tokenizer.ggml.unknown_token_id", MetadataValue::U32(3))
    .meta("tokenizer.ggml.padding_token_id", MetadataValue::U32(0))
    // Overridden to true by llama.cpp (and ridge) for every Gemma 4 vocabulary.
    .meta("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false));
    w.to_bytes()
}

fn load(bytes: &[u8]) -> Result<Tokenizer, TokenizerError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemma4.gguf");
    std::fs::write(&path, bytes).unwrap();
    Tokenizer::from_gguf(&GgufFile::open(&path).unwrap())
}

fn tok() -> Tokenizer {
    load(&gguf_bytes()).unwrap()
}

/// 64-bit FNV-1a, the file hash recorded in the fixture (regen_gemma4.sh computes the same).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[derive(Deserialize)]
struct Fixture {
    synthetic: Synthetic,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Synthetic {
    bytes: usize,
    fnv1a64: String,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    add_special: bool,
    parse_special: bool,
    /// llama-tokenize on the synthetic file: ids, and each token's piece as hex bytes.
    synthetic_ids: Vec<u32>,
    synthetic_pieces: Vec<String>,
}

fn fixture() -> Fixture {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gemma4_llama_cpp_ids.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn fixture_was_made_from_this_vocabulary() {
    let bytes = gguf_bytes();
    let fx = fixture();
    assert_eq!(
        (fx.synthetic.bytes, fx.synthetic.fnv1a64.as_str()),
        (bytes.len(), format!("{:016x}", fnv1a64(&bytes)).as_str()),
        "the synthetic vocabulary changed: run tests/data/regen_gemma4.sh"
    );
    assert!(fx.cases.len() >= 30);
}

#[test]
fn ids_match_llama_cpp() {
    let tok = tok();
    let mut failures = Vec::new();
    for c in &fixture().cases {
        let got = tok.encode(&c.text, c.add_special, c.parse_special).unwrap();
        if got != c.synthetic_ids {
            failures.push(format!(
                "{} (add_special {}, parse_special {}): text {:?}\n  llama.cpp {:?}\n  ridge     {:?}",
                c.name, c.add_special, c.parse_special, c.text, c.synthetic_ids, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn pieces_match_llama_cpp() {
    // llama-tokenize prints each token's piece with special tokens rendered.
    let tok = tok();
    for c in &fixture().cases {
        assert_eq!(
            c.synthetic_ids.len(),
            c.synthetic_pieces.len(),
            "{}",
            c.name
        );
        for (&id, want) in c.synthetic_ids.iter().zip(&c.synthetic_pieces) {
            assert_eq!(
                hex(tok.token_to_piece(id, true)),
                *want,
                "{}: token {id} {:?}",
                c.name,
                tok.token_str(id)
            );
        }
    }
}

#[test]
fn kind_flags_and_special_ids() {
    let tok = tok();
    assert_eq!(tok.model_name(), "gemma4");
    assert_eq!(tok.pre_tokenizer(), "gemma4");
    // BOS is on although the file says add_bos_token = false; no space prefix.
    assert!(tok.add_bos() && !tok.add_eos() && !tok.add_space_prefix());
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.unk_id(), tok.pad_id()),
        (Some(2), Some(1), Some(3), Some(0))
    );
    let id = |t: &str| tok.token_id(t).unwrap();
    assert!(tok.is_eog(1) && tok.is_eog(id("<turn|>")) && tok.is_eog(id("<|tool_response>")));
    assert!(!tok.is_eog(2) && !tok.is_eog(id("<|turn>")));
    // <|tool_response> became a control token, so it is matched only with parse_special.
    assert!(tok.is_control(id("<|tool_response>")) && !tok.is_control(id("<|tool_call>")));
    assert_eq!(tok.token_id("<0x94>"), None);
    assert_eq!(tok.token_str(id("▁world")), Some("▁world"));

    // tokenizer.ggml.pre is ignored for Gemma 4, as llama.cpp does.
    let tok = load(&with(
        "tokenizer.ggml.pre",
        Some(MetadataValue::String("qwen2".into())),
    ))
    .unwrap();
    assert_eq!(tok.pre_tokenizer(), "gemma4");
}

#[test]
fn rules_on_hand_picked_texts() {
    // A few of the fixture's cases spelled out, so a failure says which rule broke.
    let tok = tok();
    let id = |t: &str| tok.token_id(t).unwrap();
    let enc = |text: &str| tok.encode(text, false, true).unwrap();
    // h e l l o ▁ w o r l d: "o ▁" (rank 6) beats "▁ w" (7) and "hell o" (8), so "▁world"
    // never forms even though it is a token.
    assert_eq!(
        enc("hello world"),
        [id("hell"), id("o▁"), id("w"), id("or"), id("l"), id("d")]
    );
    // The merge "o \n" (rank 0) never applies: lines are split before merging. (Across the
    // line break it would go first and leave [hell, o\n].)
    assert_eq!(enc("hello\n"), [id("hello"), id("\n")]);
    // A newline run that is a token is taken whole; otherwise merges build it.
    assert_eq!(enc("\n\n\n"), [id("\n\n\n")]);
    assert_eq!(enc("\n\n\n\n\n"), [id("\n\n"), id("\n\n"), id("\n")]);
    // Five spaces: ▁▁ ▁▁ ▁ -> ▁▁▁▁ ▁; no space prefix anywhere.
    assert_eq!(enc("     "), [id("▁▁▁▁"), id("▁")]);
    assert_eq!(enc("ab"), [id("ab")]);
    // "aaaaa": equal ranks merge leftmost first.
    assert_eq!(enc("aaaaa"), [id("aa"), id("aa"), id("a")]);
    // "本" and emoji fall back to <0xNN>; the missing byte 0x94 of "—" is dropped.
    let bytes = |s: &str| -> Vec<u32> {
        s.bytes()
            .filter(|&b| b != MISSING_BYTE)
            .map(|b| id(&format!("<0x{b:02X}>")))
            .collect()
    };
    assert_eq!(enc("日本"), [vec![id("日")], bytes("本")].concat());
    assert_eq!(enc("😀"), bytes("😀"));
    assert_eq!(
        enc("a—b"),
        [vec![id("a")], bytes("—"), vec![id("b")]].concat()
    );
    // BOS is added with add_special; control tokens in the text only with parse_special,
    // user-defined ones always.
    assert_eq!(tok.encode("", true, true).unwrap(), [2]);
    assert_eq!(
        tok.encode("<|turn><|\"|>", true, true).unwrap(),
        [2, id("<|turn>"), id("<|\"|>")]
    );
    assert_eq!(
        tok.encode("<|turn><|\"|>", true, false).unwrap(),
        [
            vec![2],
            bytes("<|tu"),
            vec![id("r")],
            bytes("n>"),
            vec![id("<|\"|>")]
        ]
        .concat()
    );
}

#[test]
fn decode_round_trip_and_streaming() {
    let tok = tok();
    let id = |t: &str| tok.token_id(t).unwrap();
    for c in &fixture().cases {
        if c.text.bytes().any(|b| b == MISSING_BYTE) {
            continue;
        }
        // Without BOS, every text comes back exactly (special tokens rendered).
        let ids = tok.encode(&c.text, false, c.parse_special).unwrap();
        assert_eq!(tok.decode(&ids, false), c.text, "{}", c.name);
        // Streaming gives the same text, token by token, for both settings of skip_special.
        let ids = tok.encode(&c.text, true, c.parse_special).unwrap();
        for skip in [false, true] {
            let mut dec = IncrementalDecoder::new(skip);
            let mut streamed: String = ids.iter().map(|&i| dec.push(&tok, i)).collect();
            streamed.push_str(&dec.finish());
            assert_eq!(streamed, tok.decode(&ids, skip), "{} skip {skip}", c.name);
        }
    }
    // ▁ decodes as a space, byte tokens as their byte, user-defined tokens as their text even
    // when special tokens are skipped; control tokens only when asked.
    assert_eq!(
        tok.decode(&[id("▁▁"), id("o▁"), id("▁world")], true),
        "  o  world"
    );
    let ids = [
        2,
        id("<|turn>"),
        id("<|tool_call>"),
        id("<|\"|>"),
        id("<channel|>"),
        id("a"),
    ];
    assert_eq!(tok.decode(&ids, true), "<|tool_call><|\"|><channel|>a");
    assert_eq!(
        tok.decode(&ids, false),
        "<bos><|turn><|tool_call><|\"|><channel|>a"
    );
    // The streaming decoder holds back the byte tokens of an emoji until it is complete.
    let ids = tok.encode("hi 😀日本!", false, true).unwrap();
    let mut dec = IncrementalDecoder::default();
    let outs: Vec<String> = ids.iter().map(|&i| dec.push(&tok, i)).collect();
    assert_eq!(
        outs,
        ["h", "i", " ", "", "", "", "😀", "日", "", "", "本", "!"]
    );
    assert!(!dec.has_pending());
    // A byte sequence cut short: the held bytes become one U+FFFD at the end, as in decode.
    let cut = &tok.encode("😀", false, true).unwrap()[..2];
    let mut dec = IncrementalDecoder::default();
    let mut streamed: String = cut.iter().map(|&i| dec.push(&tok, i)).collect();
    assert!(dec.has_pending());
    streamed.push_str(&dec.finish());
    assert_eq!(streamed, "\u{FFFD}");
    assert_eq!(tok.decode(cut, true), "\u{FFFD}");
}

/// The synthetic file with `key` set to `value` (or removed when `None`).
fn with(key: &str, value: Option<MetadataValue>) -> Vec<u8> {
    let base = gguf_bytes();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.gguf");
    std::fs::write(&path, &base).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != key {
            w.meta(k, v.clone());
        }
    }
    if let Some(v) = value {
        w.meta(key, v);
    }
    w.to_bytes()
}

fn assert_malformed(bytes: &[u8], key: &str) {
    match load(bytes) {
        Err(TokenizerError::Malformed { key: k, message }) => {
            assert_eq!(k, key, "message: {message}")
        }
        Err(e) => panic!("expected Malformed({key}), got {e}"),
        Ok(_) => panic!("expected Malformed({key}), got a tokenizer"),
    }
}

#[test]
fn malformed_vocabularies_are_errors() {
    let merges = "tokenizer.ggml.merges";
    assert_malformed(&with(merges, None), merges);
    let bad = |rules: &[&str]| {
        Some(MetadataValue::Array(ArrayValue::String(
            rules.iter().map(|r| r.to_string()).collect(),
        )))
    };
    // Parts and results of merges must be tokens; a rule needs two parts.
    assert_malformed(&with(merges, bad(&["x y"])), merges);
    assert_malformed(&with(merges, bad(&["a d"])), merges);
    assert_malformed(&with(merges, bad(&["ab"])), merges);
    assert_malformed(&with(merges, Some(MetadataValue::U32(1))), merges);
    // No BOS id: BOS must be added (always, for Gemma 4) and there is none, which llama.cpp
    // would only find out when it asserts while tokenizing.
    assert_malformed(
        &with("tokenizer.ggml.bos_token_id", None),
        "tokenizer.ggml.add_bos_token",
    );
}

/// Writes the synthetic file to `$RIDGE_GEMMA4_SYNTHETIC_OUT`, for `data/regen_gemma4.sh`.
#[test]
#[ignore = "run by tests/data/regen_gemma4.sh to write the synthetic vocabulary"]
fn write_vocab_for_regen() {
    let path = std::env::var_os("RIDGE_GEMMA4_SYNTHETIC_OUT")
        .expect("set RIDGE_GEMMA4_SYNTHETIC_OUT to the file to write");
    std::fs::write(path, gguf_bytes()).unwrap();
}
