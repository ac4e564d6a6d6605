//! Helpers shared by the engine's integration tests: tiny random models written as GGUF files,
//! event logs, and the reference path (one request alone through `generate`).
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use ridge_engine::{
    generate, EngineConfig, EngineCore, Event, EventSink, FinishReason, GenerateParams,
    SamplingParams,
};
use ridge_gguf::GgufFile;
use ridge_model::synthetic::{synthetic_llama, SyntheticSpec};
use ridge_model::Model;
use ridge_tokenizer::Tokenizer;

pub struct Fixture {
    _file: tempfile::NamedTempFile,
    pub path: std::path::PathBuf,
    pub tokenizer: Arc<Tokenizer>,
}

pub fn fixture(ctx_len: usize) -> Fixture {
    fixture_with(SyntheticSpec {
        ctx_len,
        ..Default::default()
    })
}

pub fn fixture_with(spec: SyntheticSpec) -> Fixture {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&synthetic_llama(&spec)).unwrap();
    f.flush().unwrap();
    let g = GgufFile::open(f.path()).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_gguf(&g).unwrap());
    Fixture {
        path: f.path().to_path_buf(),
        _file: f,
        tokenizer,
    }
}

impl Fixture {
    pub fn model(&self) -> Model {
        Model::load(&self.path).unwrap()
    }

    pub fn core(&self, cfg: EngineConfig) -> EngineCore {
        EngineCore::new(self.model(), self.tokenizer.clone(), cfg).unwrap()
    }
}

pub type Log = Arc<Mutex<Vec<Event>>>;

pub fn sink() -> (EventSink, Log) {
    let log: Log = Arc::default();
    let l = log.clone();
    (
        Arc::new(move |e| {
            l.lock().unwrap().push(e);
            true
        }),
        log,
    )
}

/// Tokens and finish of choice `index` in a log.
pub fn choice(log: &Log, index: usize) -> (Vec<u32>, Option<FinishReason>, String) {
    let mut toks = Vec::new();
    let mut fin = None;
    let mut text = String::new();
    for e in log.lock().unwrap().iter() {
        match e {
            Event::Token(t) if t.index == index => {
                toks.push(t.token);
                text.push_str(&t.text);
            }
            Event::Finish(f) if f.index == index => {
                assert!(fin.is_none(), "two finish events for one choice");
                fin = Some(f.reason);
                text.push_str(&f.text);
            }
            _ => {}
        }
    }
    (toks, fin, text)
}

pub fn run_to_end(core: &mut EngineCore) {
    let mut guard = 0;
    while core.step() {
        core.check_invariants().unwrap();
        guard += 1;
        assert!(guard < 100_000, "engine did not finish");
    }
}

pub fn prompt(rng: &mut ChaCha8Rng, len: usize) -> Vec<u32> {
    (0..len).map(|_| rng.random_range(0..256)).collect()
}

/// Greedy generation of one request alone, the reference path (no scheduler, fresh cache).
pub fn alone(fx: &Fixture, p: &[u32], max_tokens: usize) -> Vec<u32> {
    let g = generate(
        &fx.model(),
        p,
        &GenerateParams {
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop_tokens: vec![],
            constraint: None,
        },
        |_| true,
    )
    .unwrap();
    g.tokens
}
