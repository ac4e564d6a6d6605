//! Agreement with llama.cpp on the vocabulary-only GGUFs in llama.cpp's `models/` directory,
//! one per pre-tokenizer family (gpt-2, llama-bpe, qwen2, falcon, mpt, starcoder, refact,
//! command-r, and gpt-neox/aquila which name no pre-tokenizer and so use llama.cpp's
//! `default`), plus three SentencePiece vocabularies (llama-spm, phi-3, baichuan) that, unlike
//! Gemma 3, keep llama.cpp's default `add_space_prefix = true`.
//!
//! Expected ids come from llama.cpp's `llama-tokenize` (`data/regen.sh`). The directory holding
//! `ggml-vocab-*.gguf` is given by `RIDGE_TEST_LLAMA_CPP_VOCABS`; the files are not part of this
//! repository, so the test is `#[ignore]`d by default: run it with
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
    assert!(fixture.vocabs.len() >= 13);

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
