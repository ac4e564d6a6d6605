//! Agreement with llama.cpp on a real SentencePiece vocabulary: Gemma 3 270M
//! (`tokenizer.ggml.model = "llama"`, 262 144 tokens, byte fallback, `add_space_prefix = false`,
//! newline/tab/space runs and HTML tags as user-defined tokens).
//!
//! The expected ids in `data/gemma3_llama_cpp_ids.json` were produced by llama.cpp's
//! `llama-tokenize` (see `data/regen_gemma3.sh`), not by this crate. The model is pulled into
//! the ridge cache on first use and reused afterwards (or taken from `RIDGE_TEST_GEMMA3` when
//! set). The tokenizer is loaded once per test binary.

mod common;

use std::sync::OnceLock;

use common::*;
use std::time::Instant;

use ridge_gguf::GgufFile;
use ridge_tokenizer::{ChatTemplate, IncrementalDecoder, Tokenizer, TokenizerError};

const BOS: u32 = 2;
/// `<0x00>`; the byte tokens are ids 238..=493 in byte order.
const BYTE_0: u32 = 238;

fn fixture() -> Fixture {
    load("gemma3_llama_cpp_ids.json")
}

fn model_path() -> std::path::PathBuf {
    common::model_path("gemma3-270m", "RIDGE_TEST_GEMMA3")
}

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let f = GgufFile::open(model_path()).expect("Gemma 3 must be a readable GGUF file");
        let start = Instant::now();
        let tok = Tokenizer::from_gguf(&f).expect("Gemma 3 tokenizer loads");
        eprintln!(
            "Tokenizer::from_gguf (262 144 tokens): {:?}",
            start.elapsed()
        );
        tok
    })
}

#[test]
fn ids_match_llama_cpp() {
    let tok = tokenizer();
    let fx = fixture();
    assert!(fx.cases.len() >= 95, "{} cases", fx.cases.len());
    assert_cases_match(tok, &fx);
}

#[test]
fn prose_ids_match_llama_cpp() {
    let tok = tokenizer();
    let fx = fixture();
    let (text, got) = assert_prose_matches(tok, &fx);
    assert_eq!(tok.decode(&got[1..], false), text);
}

#[test]
fn decode_round_trips() {
    let tok = tokenizer();
    for case in &fixture().cases {
        // A literal "▁" in the text is the escaped space and decodes to " " (as in llama.cpp).
        if case.text.contains('▁') {
            assert_eq!(
                tok.decode(&case.ids[1..], false),
                case.text.replace('▁', " ")
            );
            continue;
        }
        let ids = match case.ids.first() {
            Some(&BOS) if case.add_special => &case.ids[1..],
            _ => &case.ids[..],
        };
        assert_eq!(tok.decode(ids, false), case.text, "{}", case.name);
    }
}

#[test]
fn vocabulary_facts() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(tok.model_name(), "llama");
    assert_eq!(tok.bos_id(), Some(2));
    assert_eq!(tok.eos_id(), Some(1));
    assert_eq!(tok.unk_id(), Some(3));
    assert_eq!(tok.pad_id(), Some(0));
    assert!(tok.add_bos() && !tok.add_eos() && !tok.add_space_prefix());
    // llama.cpp prints EOT 106 and EOG 1, 106, 212 ('</s>', user-defined in the file, promoted
    // to control by its text) when loading this model.
    assert_eq!(tok.eot_id(), Some(106));
    assert_eq!(tok.eog_ids(), vec![1, 106, 212]);
    assert!(tok.is_eog(106) && tok.is_control(106) && tok.is_control(212));
    assert_eq!(tok.token_str(106), Some("<end_of_turn>"));
    assert_eq!(tok.token_id("<end_of_turn>"), Some(106));
    assert_eq!(tok.token_id("▁"), Some(236743));
    assert_eq!(tok.token_str(BYTE_0 + 10), Some("<0x0A>"));
    assert_eq!(tok.token_id("no such token"), None);
    // Pieces: ▁ is a space; byte tokens are one byte; user-defined tokens always render,
    // control tokens only when asked.
    assert_eq!(tok.token_to_piece(236743, false), b" ");
    assert_eq!(tok.token_to_piece(BYTE_0 + 0xE4, false), &[0xE4]);
    assert_eq!(tok.token_to_piece(107, false), b"\n");
    assert_eq!(tok.token_to_piece(168, false), b"<table>");
    assert!(tok.token_to_piece(106, false).is_empty());
    assert_eq!(tok.token_to_piece(106, true), b"<end_of_turn>");
    assert_eq!(tok.decode(&[2, 105, 236743, 106, 1], true), " ");
    // Gemma's chat turn markers are one token each when special tokens are parsed.
    assert_eq!(
        tok.encode("<start_of_turn>user\n", false, true).unwrap(),
        vec![105, 2364, 107]
    );
    assert_eq!(
        tok.encode_chat_prompt("<bos><start_of_turn>user\n")
            .unwrap(),
        vec![2, 105, 2364, 107]
    );
}

#[test]
fn incremental_decoder_matches_decode() {
    let tok = tokenizer();
    let mut held_back = 0;
    for case in &fixture().cases {
        for skip_special in [true, false] {
            let all = tok.decode(&case.ids, skip_special);
            let mut dec = IncrementalDecoder::new(skip_special);
            let mut streamed = String::new();
            for &id in &case.ids {
                let piece = dec.push(tok, id);
                assert!(
                    !piece.contains('\u{FFFD}') || all.contains('\u{FFFD}'),
                    "{}: piece {piece:?}",
                    case.name
                );
                held_back += usize::from(dec.has_pending());
                streamed.push_str(&piece);
            }
            streamed.push_str(&dec.finish());
            assert_eq!(streamed, all, "{}", case.name);
        }
    }
    assert!(held_back > 10, "held back only {held_back} times");
}

#[test]
fn incremental_decoder_on_byte_fallback() {
    let tok = tokenizer();
    for text in [
        "\u{e000}\u{f8ff} \u{10fffd} \u{1d11e} \u{13000}",
        "𠀀𠀁𪚥𰻞 邊緣字",
        "🫠🫶🪿🩷🫨 ok",
        "x\u{10fffd}y\u{2fff}z",
    ] {
        let ids = tok.encode(text, false, false).unwrap();
        let bytes = ids.iter().filter(|&&i| (BYTE_0..BYTE_0 + 256).contains(&i));
        assert!(
            bytes.count() >= 2,
            "{text:?} used no byte fallback: {ids:?}"
        );
        let mut dec = IncrementalDecoder::default();
        let mut outs = Vec::new();
        for &id in &ids {
            outs.push(dec.push(tok, id));
        }
        assert!(!dec.has_pending());
        outs.push(dec.finish());
        assert!(outs.iter().all(|o| !o.contains('\u{FFFD}')), "{outs:?}");
        assert_eq!(outs.concat(), text);
        // Every output is whole characters: a multi-byte character spelt as byte tokens comes
        // out in one piece, after empty outputs while its bytes were held back.
        if !text.is_ascii() {
            assert!(outs.iter().any(String::is_empty), "{text:?}: {outs:?}");
        }
    }
    // A lone continuation byte, or a character cut short, is replaced, never emitted broken.
    let mut dec = IncrementalDecoder::default();
    assert_eq!(dec.push(tok, BYTE_0 + 0xF0), "");
    assert_eq!(dec.push(tok, BYTE_0 + 0x9F), "");
    assert_eq!(dec.push(tok, 236743), "\u{FFFD} ");
    assert_eq!(dec.push(tok, BYTE_0 + 0xA9), "\u{FFFD}");
    assert_eq!(dec.push(tok, BYTE_0 + 0xE4), "");
    assert_eq!(dec.finish(), "\u{FFFD}");
}

#[test]
fn no_chat_template_is_a_clear_error() {
    let tok = tokenizer();
    let f = GgufFile::open(model_path()).unwrap();
    match ChatTemplate::from_gguf(&f, tok) {
        Err(e @ TokenizerError::MissingChatTemplate) => {
            assert!(e.to_string().contains("tokenizer.chat_template"), "{e}")
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("this GGUF has no chat template"),
    }
}

#[test]
fn encode_speed_100kb() {
    let tok = tokenizer();
    let fx = fixture();
    let mut text = String::new();
    for case in fx.cases.iter().cycle() {
        if text.len() >= 100 * 1024 {
            break;
        }
        text.push_str(&case.text);
        text.push('\n');
    }
    let n_ids = tok.encode(&text, true, true).unwrap().len();
    let iters = 5;
    let start = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(tok.encode(std::hint::black_box(&text), true, true).unwrap());
    }
    let per = start.elapsed() / iters;
    eprintln!(
        "encode of {} bytes ({} tokens): {:?} per call ({:.1} MB/s)",
        text.len(),
        n_ids,
        per,
        text.len() as f64 / per.as_secs_f64() / 1e6
    );
}
