//! `ridge list`, `ridge show` and `ridge rm` against caches built by hand: a ridge cache
//! (`RIDGE_HOME`) holding the registry's SmolLM2, and a Hugging Face cache (`HF_HUB_CACHE`) in
//! the Hub's exact layout — blobs named by sha256, relative links in `snapshots/<commit>/`,
//! `refs/main` — holding SmolLM2 under a Hub name and a tiny model in two snapshots that share
//! one blob. Every run points `HF_ENDPOINT` at a closed port, so any network attempt fails
//! loudly instead of passing by luck.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use ridge_gguf::{GgmlType, GgufFile, GgufWriter, MetadataValue};
use serde_json::Value;
use sha2::{Digest, Sha256};

const SMOL_COMMIT: &str = "5a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
/// The older snapshot of the shared repository (no ref points at it).
const OLD: &str = "1111111111111111111111111111111111111111";
/// The newer one, `refs/main`.
const NEW: &str = "2222222222222222222222222222222222222222";

struct Caches {
    hub: tempfile::TempDir,
    home: tempfile::TempDir,
    smol: PathBuf,
    smol_sha: String,
    tiny: Vec<u8>,
    tiny_sha: String,
    readme_sha: String,
}

fn sha256(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

/// Hard link (cheap, and deleting it leaves the original) or, across file systems, a copy.
fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).expect("copy the model");
    }
}

/// A tiny GGUF: one Q8_0 matrix and one F32 vector, 160 parameters.
fn tiny_gguf() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.meta(
        "general.architecture",
        MetadataValue::String("llama".into()),
    );
    w.meta("general.name", MetadataValue::String("Tiny".into()));
    w.tensor(
        "blk.0.ffn_up.weight",
        &[32, 4],
        GgmlType::Q8_0,
        vec![0u8; 4 * 34],
    );
    w.tensor(
        "output_norm.weight",
        &[32],
        GgmlType::F32,
        vec![0u8; 32 * 4],
    );
    w.to_bytes()
}

fn repo_dir(hub: &Path, repo: &str) -> PathBuf {
    hub.join(format!("models--{}", repo.replace('/', "--")))
}

/// `snapshots/<commit>/<file>` → `../../blobs/<blob>`, as the Hub's client links it.
fn snapshot_link(hub: &Path, repo: &str, commit: &str, file: &str, blob: &str) -> PathBuf {
    let snap = repo_dir(hub, repo).join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    let at = snap.join(file);
    std::os::unix::fs::symlink(Path::new("../../blobs").join(blob), &at).unwrap();
    at
}

fn write_blob(hub: &Path, repo: &str, blob: &str, bytes: &[u8]) -> PathBuf {
    let dir = repo_dir(hub, repo).join("blobs");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(blob);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn write_ref(hub: &Path, repo: &str, commit: &str) {
    let dir = repo_dir(hub, repo).join("refs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main"), commit).unwrap();
}

fn caches() -> Caches {
    let smol = common::smollm2();
    let m = ridge_model::registry::find("smollm2-135m").unwrap();
    let (hub, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    link_or_copy(&smol, &home.path().join(m.file_name));

    let h = hub.path();
    let smol_sha = m.sha256.to_string();
    let blobs = repo_dir(h, "test/smol-GGUF").join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    link_or_copy(&smol, &blobs.join(&smol_sha));
    std::fs::write(blobs.join(format!("{smol_sha}.incomplete")), b"partial").unwrap();
    snapshot_link(
        h,
        "test/smol-GGUF",
        SMOL_COMMIT,
        "Model-Q4_1.gguf",
        &smol_sha,
    );
    write_ref(h, "test/smol-GGUF", SMOL_COMMIT);

    let tiny = tiny_gguf();
    let tiny_sha = sha256(&tiny);
    let readme = b"# Tiny\n";
    let readme_sha = sha256(readme);
    let shared = "test/shared-GGUF";
    write_blob(h, shared, &tiny_sha, &tiny);
    write_blob(h, shared, &readme_sha, readme);
    snapshot_link(h, shared, OLD, "Tiny-Q8_0.gguf", &tiny_sha);
    snapshot_link(h, shared, NEW, "Tiny-Q8_0.gguf", &tiny_sha);
    snapshot_link(h, shared, NEW, "README.md", &readme_sha);
    write_ref(h, shared, NEW);
    Caches {
        hub,
        home,
        smol,
        smol_sha,
        tiny,
        tiny_sha,
        readme_sha,
    }
}

impl Caches {
    fn run(&self, args: &[&str]) -> Output {
        common::ridge()
            .args(args)
            .env("HF_HUB_CACHE", self.hub.path())
            .env("RIDGE_HOME", self.home.path())
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HOME")
            .output()
            .expect("spawn ridge")
    }

    /// Runs ridge, asserting success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "ridge {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs ridge, asserting it fails with exit 1 and one line on stderr; returns that line.
    fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "ridge {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        err
    }

    fn list(&self) -> Vec<Value> {
        let v: Value = serde_json::from_str(&self.ok(&["list", "--json"])).unwrap();
        v.as_array().unwrap().clone()
    }

    fn hub_path(&self, parts: &[&str]) -> PathBuf {
        parts
            .iter()
            .fold(self.hub.path().to_path_buf(), |p, s| p.join(s))
    }
}

fn names(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn parameters(path: &Path) -> u64 {
    let f = GgufFile::open(path).unwrap();
    f.tensors()
        .iter()
        .map(|t| t.dims.iter().product::<u64>())
        .sum()
}

#[test]
fn list_shows_every_cached_model() {
    let c = caches();
    let rows = c.list();
    let old_name = format!("hf.co/test/shared-GGUF@{OLD}:Q8_0");
    assert_eq!(
        names(&rows),
        [
            "smollm2-135m",
            old_name.as_str(),
            "hf.co/test/shared-GGUF:Q8_0",
            "hf.co/test/smol-GGUF:Q4_1"
        ]
    );
    let smol_size = std::fs::metadata(&c.smol).unwrap().len();
    let smol_params = parameters(&c.smol);
    let want = [
        (smol_size, smol_params, "registry".to_string()),
        (
            c.tiny.len() as u64,
            160,
            "hub test/shared-GGUF@1111111".into(),
        ),
        (
            c.tiny.len() as u64,
            160,
            "hub test/shared-GGUF@2222222".into(),
        ),
        (smol_size, smol_params, "hub test/smol-GGUF@5a1b2c3".into()),
    ];
    for (r, (size, params, source)) in rows.iter().zip(want) {
        assert_eq!(r["size_bytes"], size, "{r}");
        assert_eq!(r["parameters"], params, "{r}");
        assert_eq!(r["source"], source.as_str(), "{r}");
        assert_eq!(r["arch"], "llama", "{r}");
        assert!(r.get("error").is_none(), "{r}");
        assert!(Path::new(r["path"].as_str().unwrap()).is_file(), "{r}");
    }
    assert_eq!(rows[0]["params"], "135M");
    assert_eq!(rows[0]["quant"], "Q4_1");
    assert_eq!(rows[1]["quant"], "Q8_0");
    assert_eq!(
        rows[3]["path"].as_str().unwrap(),
        c.hub_path(&[
            "models--test--smol-GGUF",
            "snapshots",
            SMOL_COMMIT,
            "Model-Q4_1.gguf"
        ])
        .to_str()
        .unwrap()
    );

    let text = c.ok(&["list"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    for h in ["NAME", "SIZE", "ARCH", "QUANT", "PARAMS", "SOURCE"] {
        assert!(lines[0].contains(h), "{text}");
    }
    assert!(
        lines[1].starts_with("smollm2-135m ") && lines[1].contains("93.8 MiB"),
        "{text}"
    );
    assert!(!text.contains(c.hub.path().to_str().unwrap()), "{text}");
    let verbose = c.ok(&["list", "--verbose"]);
    assert!(verbose.contains("PATH") && verbose.contains(c.hub.path().to_str().unwrap()));

    // A file that does not parse is listed with the reason, not a crash.
    std::fs::write(
        c.home.path().join("gemma-3-270m-q4_k_m.gguf"),
        b"not a gguf file, just text",
    )
    .unwrap();
    let rows = c.list();
    assert_eq!(rows.len(), 5);
    let bad = &rows[1];
    assert_eq!(bad["name"], "gemma3-270m");
    assert!(
        bad["error"].as_str().unwrap().contains("gemma-3-270m"),
        "{bad}"
    );
    assert!(c.ok(&["list"]).contains("error: "));

    // Empty caches give a hint.
    let empty = tempfile::tempdir().unwrap();
    let o = common::ridge()
        .args(["list"])
        .env("HF_HUB_CACHE", empty.path().join("hub"))
        .env("RIDGE_HOME", empty.path().join("ridge"))
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("no models yet: ridge pull smollm2-135m"));
    let o = common::ridge()
        .args(["list", "--json"])
        .env("HF_HUB_CACHE", empty.path().join("hub"))
        .env("RIDGE_HOME", empty.path().join("ridge"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
}

#[test]
fn show_reads_the_header_and_never_downloads() {
    let c = caches();
    let f = GgufFile::open(&c.smol).unwrap();
    let arch = f.get_str("general.architecture").unwrap().to_string();
    assert_eq!(arch, "llama");
    let u = |k: &str| f.get_u64(&format!("{arch}.{k}")).unwrap();
    let template = f.get_str("tokenizer.chat_template").unwrap().to_string();
    let vocab = f.get_string_array("tokenizer.ggml.tokens").unwrap().len();

    for name in [
        "hf.co/test/smol-GGUF:Q4_1",
        "test/smol-GGUF:q4_1",
        "smollm2-135m",
        c.smol.to_str().unwrap(),
    ] {
        let r: Value = serde_json::from_str(&c.ok(&["show", name, "--json"])).unwrap();
        assert_eq!(r["architecture"], "llama", "{name}");
        assert_eq!(r["context_length"], u("context_length"), "{name}");
        assert_eq!(r["embedding_length"], u("embedding_length"));
        assert_eq!(r["layers"], u("block_count"));
        assert_eq!(r["heads"], u("attention.head_count"));
        assert_eq!(r["kv_heads"], u("attention.head_count_kv"));
        assert_eq!(r["parameters"], parameters(&c.smol));
        assert_eq!(r["size_bytes"], std::fs::metadata(&c.smol).unwrap().len());
        assert_eq!(r["vocab_size"], vocab);
        assert_eq!(
            r["tokenizer_model"],
            f.get_str("tokenizer.ggml.model").unwrap()
        );
        assert_eq!(r["name"], f.get_str("general.name").unwrap());
        assert_eq!(r["quant"], "Q4_1");
        assert_eq!(r["chat_template"], template.as_str());
        assert!(r["experts"].is_null());
        // Full metadata, with the token list as its length.
        let tokens = &r["metadata"]["tokenizer.ggml.tokens"];
        assert_eq!(tokens["length"], vocab, "{tokens}");
        assert_eq!(r["metadata"]["general.architecture"], "llama");
        let counted: u64 = r["tensor_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["count"].as_u64().unwrap())
            .sum();
        assert_eq!(counted as usize, f.tensors().len());
    }

    let text = c.ok(&["show", "hf.co/test/smol-GGUF:Q4_1"]);
    let field = |label: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(label) && l[label.len()..].starts_with("  "))
            .unwrap_or_else(|| panic!("no `{label}` in\n{text}"))[label.len()..]
            .trim()
            .to_string()
    };
    assert_eq!(field("context length"), u("context_length").to_string());
    assert_eq!(field("layers"), u("block_count").to_string());
    assert_eq!(field("heads"), u("attention.head_count").to_string());
    assert_eq!(field("kv heads"), u("attention.head_count_kv").to_string());
    assert_eq!(field("architecture"), "llama");
    assert!(field("chat template").starts_with(&format!("{} bytes", template.len())));
    let first = template.lines().next().unwrap();
    assert!(text.contains(&format!("    {first}")), "{text}");
    assert!(text.contains("TYPE") && text.contains("Q4_1"), "{text}");
    assert_eq!(c.ok(&["show", "smollm2-135m", "--template"]), template);
    let meta = c.ok(&["show", "smollm2-135m", "--metadata"]);
    assert!(meta.contains("general.architecture") && meta.contains("string items)]"));

    // Not cached: one line, and no network (HF_ENDPOINT is a closed port).
    let e = c.fails(&["show", "hf.co/test/absent-GGUF:Q4_K_M"]);
    assert!(
        e.contains("hf.co/test/absent-GGUF:Q4_K_M is not downloaded: ridge pull hf.co/test/absent-GGUF:Q4_K_M"),
        "{e}"
    );
    let e = c.fails(&["show", "gemma3-270m"]);
    assert!(e.contains("not downloaded: ridge pull gemma3-270m"), "{e}");
    let e = c.fails(&["show", "hf.co/test/smol-GGUF:Q8_0"]);
    assert!(e.contains("Q4_1"), "the choices are named: {e}");
    assert!(!e.contains("127.0.0.1"), "{e}");
}

#[test]
fn rm_keeps_shared_blobs_until_the_last_link_goes() {
    let c = caches();
    let repo = repo_dir(c.hub.path(), "test/shared-GGUF");
    let blob = repo.join("blobs").join(&c.tiny_sha);
    let (old_snap, new_snap) = (
        repo.join("snapshots").join(OLD),
        repo.join("snapshots").join(NEW),
    );

    // A dry run of both: lists the blob once, deletes nothing.
    let old_name = format!("hf.co/test/shared-GGUF@{OLD}:Q8_0");
    let out = c.ok(&["rm", "--dry-run", "hf.co/test/shared-GGUF:Q8_0", &old_name]);
    assert!(
        out.contains("would delete") && out.contains(&c.tiny_sha),
        "{out}"
    );
    assert_eq!(
        out.matches(&format!("would delete {}", blob.display()))
            .count(),
        1,
        "{out}"
    );
    let freed = format!("{old_name}: would free");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&freed) && l.ends_with(&format!("({} bytes)", c.tiny.len()))),
        "{out}"
    );
    assert!(blob.is_file() && old_snap.join("Tiny-Q8_0.gguf").exists());
    assert!(new_snap.join("Tiny-Q8_0.gguf").exists());
    assert_eq!(c.list().len(), 4);

    // The `main` snapshot's link goes; the blob stays for the older snapshot.
    let out = c.ok(&["rm", "hf.co/test/shared-GGUF:Q8_0"]);
    assert!(
        out.contains("kept") && out.contains("freed 0 B (0 bytes)"),
        "{out}"
    );
    assert!(std::fs::symlink_metadata(new_snap.join("Tiny-Q8_0.gguf")).is_err());
    assert!(
        new_snap.join("README.md").exists(),
        "other files of the snapshot stay"
    );
    assert!(blob.is_file());
    assert_eq!(names(&c.list()).len(), 3);
    let e = c.fails(&["rm", "hf.co/test/shared-GGUF:Q8_0"]);
    assert!(e.contains("not in the cache"), "{e}");

    // The last link goes: so do the blob and the empty snapshot folder; the repository keeps
    // the newer snapshot's README.
    let out = c.ok(&["rm", &old_name]);
    assert!(out.contains(&format!("({} bytes)", c.tiny.len())), "{out}");
    assert!(!blob.exists() && !old_snap.exists());
    assert!(repo.join("blobs").join(&c.readme_sha).is_file());
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        NEW
    );
    assert_eq!(
        names(&c.list()),
        ["smollm2-135m", "hf.co/test/smol-GGUF:Q4_1"]
    );
}

#[test]
fn rm_deletes_whole_repositories_and_registry_files_only() {
    let c = caches();
    let repo = repo_dir(c.hub.path(), "test/smol-GGUF");
    let size = std::fs::metadata(&c.smol).unwrap().len();
    let reg_file = c.home.path().join("SmolLM2-135M-Instruct.Q4_1.gguf");

    // Outside the caches: refused, and the file survives (also the real model file, which is
    // outside these caches).
    let other = tempfile::tempdir().unwrap();
    let file = other.path().join("model.gguf");
    std::fs::write(&file, b"keep me").unwrap();
    for p in [file.to_str().unwrap(), c.smol.to_str().unwrap()] {
        let e = c.fails(&["rm", p]);
        assert!(
            e.contains("ridge rm only removes cached models; delete"),
            "{e}"
        );
    }
    assert!(file.is_file() && c.smol.is_file());
    let e = c.fails(&["rm", "gemma3-270m"]);
    assert!(e.contains("not in the cache"), "{e}");
    // A bad name among good ones: nothing is deleted.
    c.fails(&["rm", "smollm2-135m", "hf.co/test/absent-GGUF"]);
    assert!(reg_file.is_file());

    // The Hub model by its snapshot path: the blob, its unfinished download, the snapshot, the
    // ref, and the repository folder go.
    let link = repo
        .join("snapshots")
        .join(SMOL_COMMIT)
        .join("Model-Q4_1.gguf");
    let dry = c.ok(&["rm", "-n", link.to_str().unwrap()]);
    assert!(dry.contains("nothing left in it") && repo.is_dir(), "{dry}");
    let out = c.ok(&["rm", link.to_str().unwrap(), "smollm2-135m"]);
    let freed_hub = size + b"partial".len() as u64;
    assert!(
        out.contains(&format!(
            "hf.co/test/smol-GGUF:Q4_1: freed 93.8 MiB ({freed_hub} bytes)"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("smollm2-135m: freed 93.8 MiB ({size} bytes)")),
        "{out}"
    );
    assert!(
        out.contains(&format!("{} bytes)", freed_hub + size)),
        "{out}"
    );
    assert!(!repo.exists(), "{out}");
    assert!(!reg_file.exists());
    assert!(c.smol.is_file(), "the shared test model is untouched");
    assert!(
        out.contains(&format!(
            "deleted {}",
            repo.join("blobs")
                .join(format!("{}.incomplete", c.smol_sha))
                .display()
        )),
        "{out}"
    );
    assert_eq!(
        names(&c.list()),
        [
            format!("hf.co/test/shared-GGUF@{OLD}:Q8_0"),
            "hf.co/test/shared-GGUF:Q8_0".into()
        ]
    );
}
