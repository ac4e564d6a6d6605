//! Every input committed under `fuzz/regressions/<target>/` (crashes the fuzzers found, then
//! fixed, and a minimized corpus) runs through the same entry point libFuzzer ran, on stable
//! Rust, in the ordinary test suite. A panic names the file.

use std::path::{Path, PathBuf};
use std::time::Instant;

fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target)
}

fn replay(target: &str) {
    let d = dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no regression inputs in {}", d.display());
    let start = Instant::now();
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).expect("read regression input");
        let t = Instant::now();
        if std::panic::catch_unwind(|| ridge_fuzz::run(target, &data)).is_err() {
            failed.push(f.display().to_string());
        }
        assert!(
            t.elapsed().as_secs_f64() < 5.0,
            "{}: took {:?}",
            f.display(),
            t.elapsed()
        );
    }
    assert!(failed.is_empty(), "inputs that panic: {failed:#?}");
    eprintln!(
        "{target}: {} inputs in {:.2} s",
        files.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn gguf_regressions() {
    replay("gguf");
}

#[test]
fn tokenizer_regressions() {
    replay("tokenizer");
}

#[test]
fn chat_template_regressions() {
    replay("chat_template");
}

#[test]
fn request_regressions() {
    replay("request");
}
