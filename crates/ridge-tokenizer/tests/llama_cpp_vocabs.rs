//! Agreement with llama.cpp on the vocabulary-only GGUFs in llama.cpp's `models/` directory,
//! one per pre-tokenizer family (gpt-2, llama-bpe, qwen2, falcon, mpt, starcoder, refact,
//! command-r, and gpt-neox/aquila which name no pre-tokenizer and so use llama.cpp's
//! `default`), plus three SentencePiece vocabularies (llama-spm, phi-3, baichuan) that, unlike
//! Gemma 3, keep llama.cpp's default `add_space_prefix = true`, and Gemma 4's
//! (`tokenizer.ggml.model = "gemma4"`).
//!
//! Expected ids come from llama.cpp's `llama-tokenize` (`data/regen.sh`). Gemma 4 is also checked
//! on texts with its own special tokens (`data/gemma4_corpus.json`, ids by
//! `data/regen_gemma4.sh`), and against the `.inp`/`.out` pairs llama.cpp keeps beside its file
//! for its own `test-tokenizer-0` (ids of the reference Hugging Face tokenizer, which llama.cpp
//! must match).
//! The directory holding `ggml-vocab-*.gguf` is given by `RIDGE_TEST_LLAMA_CPP_VOCABS`; the files
//! are not part of this repository, so the tests are `#[ignore]`d by default: run them with
//! `RIDGE_TEST_LLAMA_CPP_VOCABS=… cargo test --release -p ridge-tokenizer -- --ignored`.

use std::collections::BTreeMap;

use ridge_gguf::GgufFile;
use ridge_tokenizer::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    vocabs: BTreeMap<String, BTreeMap<String, Vec<u32>>>,
}

#[derive(Deserialize)]
struct CorpusCase {
    name: String,
    text: String,
}

#[test]
#[ignore = "needs llama.cpp's models/ directory (vocab-only GGUFs) in RIDGE_TEST_LLAMA_CPP_VOCABS"]
fn ids_match_llama_cpp_for_every_pre_tokenizer_family() {
    let dir = std::env::var_os("RIDGE_TEST_LLAMA_CPP_VOCABS")
        .expect("set RIDGE_TEST_LLAMA_CPP_VOCABS to llama.cpp's models/ directory");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");
    let fixture: Fixture = serde_json::from_str(
        &std::fs::read_to_string(format!("{data}vocabs_llama_cpp_ids.json")).unwrap(),
    )
    .unwrap();
    let corpus: Vec<CorpusCase> =
        serde_json::from_str(&std::fs::read_to_string(format!("{data}corpus.json")).unwrap())
            .unwrap();
    let text_of: BTreeMap<&str, &str> = corpus
        .iter()
        .map(|c| (c.name.as_str(), c.text.as_str()))
        .collect();
    assert!(fixture.vocabs.len() >= 14);
    assert!(fixture.vocabs.contains_key("gemma-4"));

    let mut failures = Vec::new();
    for (vocab, cases) in &fixture.vocabs {
        let path = std::path::Path::new(&dir).join(format!("ggml-vocab-{vocab}.gguf"));
        let gguf = GgufFile::open(&path).unwrap();
        let tok = match Tokenizer::from_gguf(&gguf) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{vocab}: {e}"));
                continue;
            }
        };
        for (name, want) in cases {
            let text = text_of[name.as_str()];
            let got = tok.encode(text, true, true).unwrap();
            if &got != want {
                failures.push(format!(
                    "{vocab} / {name}: text {text:?}\n  llama.cpp {want:?}\n  ridge     {got:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[derive(Deserialize)]
struct Gemma4Fixture {
    cases: Vec<Gemma4Case>,
}

#[derive(Deserialize)]
struct Gemma4Case {
    name: String,
    text: String,
    add_special: bool,
    parse_special: bool,
    /// llama-tokenize on `ggml-vocab-gemma-4.gguf`.
    real_ids: Vec<u32>,
}

fn vocab_dir() -> std::path::PathBuf {
    std::env::var_os("RIDGE_TEST_LLAMA_CPP_VOCABS")
        .expect("set RIDGE_TEST_LLAMA_CPP_VOCABS to llama.cpp's models/ directory")
        .into()
}

fn gemma4() -> Tokenizer {
    let gguf = GgufFile::open(vocab_dir().join("ggml-vocab-gemma-4.gguf")).unwrap();
    Tokenizer::from_gguf(&gguf).unwrap()
}

#[test]
#[ignore = "needs llama.cpp's models/ directory (vocab-only GGUFs) in RIDGE_TEST_LLAMA_CPP_VOCABS"]
fn gemma4_special_token_texts_match_llama_cpp() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gemma4_llama_cpp_ids.json"
    );
    let fixture: Gemma4Fixture =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tok = gemma4();
    let mut failures = Vec::new();
    for c in &fixture.cases {
        let got = tok.encode(&c.text, c.add_special, c.parse_special).unwrap();
        if got != c.real_ids {
            failures.push(format!(
                "{} (add_special {}, parse_special {}): text {:?}\n  llama.cpp {:?}\n  ridge     {:?}",
                c.name, c.add_special, c.parse_special, c.text, c.real_ids, got
            ));
        }
    }
    assert!(fixture.cases.len() >= 30);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// llama.cpp's `test-tokenizer-0` inputs and expected ids for a vocabulary: texts separated by
/// `\n__ggml_vocab_test__\n` in `.inp`, one line of space-separated ids per text in `.out`.
fn llama_cpp_test_pairs(dir: &std::path::Path, vocab: &str) -> Vec<(String, Vec<u32>)> {
    let base = dir.join(format!("ggml-vocab-{vocab}.gguf"));
    let inp = std::fs::read_to_string(base.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).unwrap();
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(i) => {
                texts.push(rest[..i].to_string());
                rest = &rest[i + sep.len()..];
            }
            None => {
                texts.push(rest.to_string());
                rest = "";
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{vocab}: .inp and .out disagree");
    texts.into_iter().zip(ids).collect()
}

#[test]
#[ignore = "needs llama.cpp's models/ directory (vocab-only GGUFs) in RIDGE_TEST_LLAMA_CPP_VOCABS"]
fn gemma4_matches_llama_cpp_test_tokenizer_0() {
    let tok = gemma4();
    assert_eq!(tok.model_name(), "gemma4");
    assert_eq!(tok.pre_tokenizer(), "gemma4");
    assert!(tok.add_bos() && !tok.add_eos() && !tok.add_space_prefix());
    let pairs = llama_cpp_test_pairs(&vocab_dir(), "gemma-4");
    assert!(pairs.len() >= 40, "{}", pairs.len());
    let mut failures = Vec::new();
    for (text, want) in &pairs {
        // test-tokenizer-0 tokenizes with add_special = false, parse_special = false.
        let got = tok.encode(text, false, false).unwrap();
        if &got != want {
            failures.push(format!(
                "text {text:?}\n  llama.cpp {want:?}\n  ridge     {got:?}"
            ));
        }
        // Every input is plain text that decodes back exactly.
        assert_eq!(tok.decode(&got, false), *text);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
