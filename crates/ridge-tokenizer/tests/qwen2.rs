//! Agreement with llama.cpp and with the template's own engine on the Qwen2 vocabulary and chat
//! templates: Qwen2.5 Coder 0.5B and 1.5B Instruct (byte-level BPE, pre-tokenizer "qwen2",
//! 151 936 tokens, no BOS; ChatML turns, a default system prompt, a `tools` branch).
//!
//! The expected ids in `data/qwen2_llama_cpp_ids.json` were produced by llama.cpp's
//! `llama-tokenize` (`data/regen_qwen2.sh`); the expected renders in
//! `data/qwen2_chat_renders.json` by Python's jinja2 as the models' authors' tooling configures
//! it, with `llama-tokenize`'s ids of each render (`data/regen_qwen2_chat.sh`). None of it is
//! produced by this crate. The models are pulled into the ridge cache on first use (or taken
//! from `RIDGE_TEST_QWEN2` / `RIDGE_TEST_QWEN2_1_5B` when set); each tokenizer is loaded once
//! per test binary.

mod common;

use std::sync::OnceLock;

use common::*;

use ridge_gguf::GgufFile;
use ridge_tokenizer::{ChatMessage, ChatTemplate, IncrementalDecoder, Tokenizer};
use serde::Deserialize;

#[derive(Deserialize)]
struct Renders {
    models: Vec<ModelRenders>,
}

#[derive(Deserialize)]
struct ModelRenders {
    model: String,
    cases: Vec<RenderCase>,
}

#[derive(Deserialize)]
struct RenderCase {
    name: String,
    messages: Vec<ChatMessage>,
    tools: Option<serde_json::Value>,
    add_generation_prompt: bool,
    rendered: String,
    ids: Vec<u32>,
}

const ENDOFTEXT: u32 = 151_643;
const IM_START: u32 = 151_644;
const IM_END: u32 = 151_645;
const TOOL_CALL: u32 = 151_657;

/// The 0.5B's file (the vocabulary the id fixtures were made with).
fn gguf() -> &'static GgufFile {
    static F: OnceLock<GgufFile> = OnceLock::new();
    F.get_or_init(|| {
        GgufFile::open(model_path("qwen2.5-coder-0.5b", "RIDGE_TEST_QWEN2"))
            .expect("Qwen2.5 Coder 0.5B must be a readable GGUF file")
    })
}

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| Tokenizer::from_gguf(gguf()).expect("Qwen2 tokenizer loads"))
}

#[test]
fn ids_match_llama_cpp() {
    let tok = tokenizer();
    let fx: Fixture = load("qwen2_llama_cpp_ids.json");
    assert!(fx.cases.len() >= 90, "{} cases", fx.cases.len());
    assert_cases_match(tok, &fx);
}

#[test]
fn prose_ids_match_llama_cpp() {
    let tok = tokenizer();
    let fx: Fixture = load("qwen2_llama_cpp_ids.json");
    let (text, got) = assert_prose_matches(tok, &fx);
    // No BOS: the text decodes back whole.
    assert_eq!(tok.decode(&got, false), text);
}

#[test]
fn decode_round_trips_and_streams() {
    let tok = tokenizer();
    let fx: Fixture = load("qwen2_llama_cpp_ids.json");
    for case in &fx.cases {
        // Special tokens are control tokens: shown only when asked for.
        assert_eq!(tok.decode(&case.ids, false), case.text, "{}", case.name);
        let all = tok.decode(&case.ids, true);
        let mut dec = IncrementalDecoder::new(true);
        let mut streamed = String::new();
        for &id in &case.ids {
            streamed.push_str(&dec.push(tok, id));
        }
        streamed.push_str(&dec.finish());
        assert_eq!(streamed, all, "{}", case.name);
    }
}

#[test]
fn vocabulary_facts() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 151_936);
    assert_eq!(tok.model_name(), "gpt2");
    assert_eq!(tok.pre_tokenizer(), "qwen2");
    assert!(!tok.add_bos() && !tok.add_eos());
    assert_eq!(tok.eos_id(), Some(IM_END));
    for (id, text) in [
        (ENDOFTEXT, "<|endoftext|>"),
        (IM_START, "<|im_start|>"),
        (IM_END, "<|im_end|>"),
        (TOOL_CALL, "<tool_call>"),
    ] {
        assert_eq!(tok.token_id(text), Some(id));
        assert_eq!(tok.encode(text, true, true).unwrap(), vec![id], "{text}");
    }
    // llama.cpp's end-of-generation set for this vocabulary (llama-vocab.cpp: the FIM pad,
    // repo and file-separator tokens, then the tokens named by text: <|im_end|>,
    // <|endoftext|>, and </s>, id 128247, a plain token it promotes to control).
    assert_eq!(
        tok.eog_ids(),
        vec![128_247, ENDOFTEXT, IM_END, 151_662, 151_663, 151_664]
    );
    assert!(tok.is_eog(IM_END) && tok.is_eog(ENDOFTEXT) && !tok.is_eog(IM_START));
    assert!(!tok.is_eog(TOOL_CALL) && !tok.is_control(TOOL_CALL));
    assert_eq!(tok.token_to_piece(TOOL_CALL, false), b"<tool_call>");
    assert!(tok.token_to_piece(IM_END, false).is_empty());
}

/// Both models' templates (they differ in the tools branch), every conversation: ridge's render
/// is jinja2's, byte for byte, and the prompt's ids are llama-tokenize's, with every special
/// token the template writes as its single id.
#[test]
fn chat_templates_render_as_jinja2_and_tokenize_as_llama_cpp() {
    let renders: Renders = load("qwen2_chat_renders.json");
    assert_eq!(renders.models.len(), 2);
    for (m, (name, var)) in renders.models.iter().zip([
        ("qwen2.5-coder-0.5b", "RIDGE_TEST_QWEN2"),
        ("qwen2.5-coder-1.5b", "RIDGE_TEST_QWEN2_1_5B"),
    ]) {
        let path = model_path(name, var);
        assert_eq!(
            path.file_name().and_then(|n| n.to_str()),
            Some(m.model.as_str())
        );
        let f = GgufFile::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(&f).unwrap();
        let chat = ChatTemplate::from_gguf(&f, &tok).unwrap();
        assert!(m.cases.len() >= 7);
        for c in &m.cases {
            let mut extra = serde_json::Map::new();
            if let Some(tools) = &c.tools {
                extra.insert("tools".into(), tools.clone());
            }
            let got = chat
                .render_with(&c.messages, c.add_generation_prompt, &extra)
                .unwrap();
            assert_eq!(got, c.rendered, "{} {}", m.model, c.name);
            let ids = tok.encode_chat_prompt(&got).unwrap();
            assert_eq!(ids, c.ids, "{} {}", m.model, c.name);
            let count = |id: u32| ids.iter().filter(|&&i| i == id).count();
            let turns = got.matches("<|im_start|>").count();
            assert_eq!(count(IM_START), turns, "{}", c.name);
            assert_eq!(count(IM_END), got.matches("<|im_end|>").count());
            assert_eq!(count(TOOL_CALL), got.matches("<tool_call>").count());
            // The default system prompt appears exactly when no system message is given.
            let has_system = c.messages.first().is_some_and(|x| x.role == "system");
            assert_eq!(
                !has_system,
                got.contains("You are Qwen, created by Alibaba Cloud."),
                "{}",
                c.name
            );
            assert_eq!(c.tools.is_some(), got.contains("# Tools"), "{}", c.name);
        }
    }
}
