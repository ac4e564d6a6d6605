//! Split GGUF models (llama.cpp's `gguf-split` layout, `NAME-0000K-of-0000N.gguf`): the real
//! SmolLM2-135M split into 3 shards by ridge's writer answers exactly as the whole file does
//! when ridge is given the first shard, and a broken split fails with one line.

mod common;
use common::*;
use ridge_gguf::GgufFile;
use std::path::Path;

fn greedy(model: &Path) -> String {
    let o = run(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--raw",
        "--temperature",
        "0",
        "--max-tokens",
        "16",
        "The capital of France is",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

fn perplexity(model: &Path) -> serde_json::Value {
    let prose = repo().join("tests/data/prose.txt");
    let o = run(&[
        "perplexity",
        "--model",
        model.to_str().unwrap(),
        "--file",
        prose.to_str().unwrap(),
        "--ctx",
        "128",
        "--chunks",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    v["perplexity"].clone()
}

#[test]
fn the_first_shard_of_a_split_smollm2_answers_as_the_whole_file() {
    let whole = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let shards = split_into(&GgufFile::open(&whole).unwrap(), dir.path(), "SmolLM2", 3);
    let opened = GgufFile::open(&shards[0]).unwrap();
    assert_eq!(opened.shards(), &shards[..], "all three shards are read");

    let want = greedy(&whole);
    assert!(want.contains("Paris"), "{want:?}");
    assert_eq!(greedy(&shards[0]), want);

    let want = perplexity(&whole);
    assert!(want.as_f64().is_some_and(|p| p > 1.0), "{want}");
    assert_eq!(perplexity(&shards[0]), want);

    // `ridge show` describes the split model as the whole one, with every shard's file.
    let show = |p: &Path| -> serde_json::Value {
        let o = run(&["show", p.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    };
    let (a, b) = (show(&whole), show(&shards[0]));
    for k in [
        "parameters",
        "tensor_count",
        "tensor_types",
        "context_length",
        "quant",
    ] {
        assert_eq!(a[k], b[k], "{k}");
    }
    let files: Vec<String> = shards.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(b["files"], serde_json::json!(files));
    let on_disk: u64 = shards
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(b["size_bytes"], on_disk);
}

#[test]
fn a_broken_split_fails_with_one_line() {
    use ridge_model::synthetic::{synthetic_llama, SyntheticSpec};
    let src =
        GgufFile::from_bytes("<synthetic>", synthetic_llama(&SyntheticSpec::default())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = split_into(&src, dir.path(), "tiny", 3);
    let first = shards[0].to_str().unwrap();
    // Whole, it loads and runs.
    let o = run(&["run", "--model", first, "--max-tokens", "2", "hi"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = run(&["run", "--model", shards[1].to_str().unwrap(), "hi"]);
    assert_clean_failure(&o, "open the first shard, tiny-00001-of-00003.gguf");

    std::fs::remove_file(&shards[1]).unwrap();
    for args in [
        vec!["run", "--model", first, "hi"],
        vec!["tokenize", "--model", first, "hi"],
    ] {
        let o = run(&args);
        assert_clean_failure(&o, "tiny-00002-of-00003.gguf");
        assert!(stderr(&o).contains("missing"), "{}", stderr(&o));
        assert!(stderr(&o).contains("3 files"), "{}", stderr(&o));
    }
}
