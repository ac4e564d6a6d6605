//! Hub pulls against a loopback stand-in that follows the Hub's protocol
//! (`tools/tests/hub_standin.py`): the revision and tree APIs (paginated), `resolve` with a
//! redirect to a CDN on another host name, ranges, gated repositories. What is not run here: the
//! real Hub over TLS (no network reaches these machines).
//!
//! The stand-in is checked to behave like the Hub by the official `huggingface_hub` client
//! downloading from it, and ridge's cache is checked to be the Hub's layout by that client
//! reading what ridge wrote (and ridge reading what it wrote).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::server::Server;
use common::*;
use sha2::{Digest, Sha256};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const REPO: &str = "test/SmolLM2-GGUF";
const MODEL_FILE: &str = "SmolLM2-135M-Instruct-Q4_1.gguf";

/// A repository of the stand-in: name, `(path in repo, source file)` pairs, per-repo flags.
type RepoSpec<'a> = (&'a str, Vec<(&'a str, PathBuf)>, serde_json::Value);

/// A running stand-in and the temporary folders of one test.
struct Hub {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Hub {
    /// Starts the stand-in; `repos` maps a repository to `(path in repo, source file)` pairs;
    /// `extra` adds top-level config keys and per-repo flags go in `flags`.
    fn start(repos: &[RepoSpec], extra: serde_json::Value) -> Hub {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = serde_json::json!({"repos": {}, "token": "secret", "page_size": 1});
        for (name, files, flags) in repos {
            let mut r = serde_json::json!({"commit": COMMIT, "files": {}});
            for (p, src) in files {
                r["files"][*p] = src.display().to_string().into();
            }
            if let Some(o) = flags.as_object() {
                for (k, v) in o {
                    r[k] = v.clone();
                }
            }
            cfg["repos"][*name] = r;
        }
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                cfg[k] = v.clone();
            }
        }
        let cfg_path = dir.path().join("hub.json");
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let mut child = Command::new(test_python())
            .arg(repo().join("tools/tests/hub_standin.py"))
            .arg(&cfg_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Hub stand-in");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("stand-in did not start: {line:?}"));
        Hub { child, port, dir }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("hub-cache")
    }

    /// ridge with this Hub and cache (and no token from the environment).
    fn ridge(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = ridge();
        c.env("HF_ENDPOINT", self.endpoint())
            .env("HF_HUB_CACHE", self.cache())
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env_remove("HF_TOKEN")
            .env_remove("HUGGING_FACE_HUB_TOKEN")
            .env_remove("HF_HUB_OFFLINE");
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(args).output().expect("spawn ridge")
    }

    /// Every request the stand-in has seen since the last reset.
    fn log(&self) -> Vec<serde_json::Value> {
        let url = format!("{}/_log", self.endpoint());
        let v: serde_json::Value = reqwest::blocking::get(url).unwrap().json().unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["path"] != "/_log")
            .cloned()
            .collect()
    }

    fn reset(&self) {
        reqwest::blocking::Client::new()
            .post(format!("{}/_reset", self.endpoint()))
            .send()
            .unwrap();
    }

    /// Paths of the stand-in's CDN downloads (GETs of `/cdn/…`).
    fn downloads(&self) -> Vec<serde_json::Value> {
        self.log()
            .into_iter()
            .filter(|r| r["method"] == "GET" && r["path"].as_str().unwrap().starts_with("/cdn/"))
            .collect()
    }
}

fn sha256(path: &Path) -> String {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path).unwrap(), &mut h).unwrap();
    format!("{:x}", h.finalize())
}

/// A small stand-in file (not a model: pulls do not open what they fetch).
fn dummy(dir: &Path, name: &str, bytes: usize) -> PathBuf {
    let p = dir.join(name);
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&p, data).unwrap();
    p
}

fn smol_repo(extra_files: Vec<(&'static str, PathBuf)>) -> Vec<(&'static str, PathBuf)> {
    let readme = std::env::temp_dir().join("ridge-hub-test-README.md");
    std::fs::write(&readme, "# SmolLM2 test repository\n").unwrap();
    let mut v = vec![("README.md", readme), (MODEL_FILE, smollm2())];
    v.extend(extra_files);
    v
}

fn out_path(o: &Output) -> PathBuf {
    assert!(o.status.success(), "ridge failed: {}", stderr(o));
    PathBuf::from(stdout(o).trim())
}

#[test]
fn a_pull_lands_in_the_hub_layout_that_huggingface_hub_reads() {
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({}))],
        serde_json::json!({}),
    );
    let path = out_path(&hub.ridge(&["pull", &format!("hf.co/{REPO}:q4_1")], &[]));
    let repo_dir = hub.cache().join("models--test--SmolLM2-GGUF");
    assert_eq!(
        path,
        repo_dir.join("snapshots").join(COMMIT).join(MODEL_FILE)
    );
    let want = sha256(&smollm2());
    assert_eq!(
        std::fs::read_link(&path).unwrap(),
        Path::new("../../blobs").join(&want),
        "a relative link into blobs/, named by the LFS sha256"
    );
    assert_eq!(sha256(&path), want);
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        COMMIT
    );
    // Only the model was fetched, once, and the tree was read across its pages.
    let log = hub.log();
    assert_eq!(hub.downloads().len(), 1, "{log:?}");
    let trees = log
        .iter()
        .filter(|r| r["path"].as_str().unwrap().contains("/tree/"))
        .count();
    assert!(trees >= 2, "the tree listing has two pages: {log:?}");
    assert!(!repo_dir
        .join("snapshots")
        .join(COMMIT)
        .join("README.md")
        .exists());

    // The Hub's own client finds ridge's download offline.
    let found = python_hub(
        &hub,
        &format!("print(hf_hub_download({REPO:?}, {MODEL_FILE:?}, local_files_only=True))"),
    );
    assert_eq!(PathBuf::from(found.trim()), path);

    // `--model` with the same name uses the cache without a request, and answers as the file.
    hub.reset();
    let greedy = ["--raw", "--temperature", "0", "--max-tokens", "12"];
    let q = "The capital of France is";
    let by_name = hub.ridge(
        &[
            &["run", "--model", &format!("hf://{REPO}:Q4_1")][..],
            &greedy,
            &[q],
        ]
        .concat(),
        &[],
    );
    assert!(by_name.status.success(), "{}", stderr(&by_name));
    assert!(
        hub.log().is_empty(),
        "no request for a cached model: {:?}",
        hub.log()
    );
    let by_path = run(&[
        &["run", "--model", smollm2().to_str().unwrap()][..],
        &greedy,
        &[q],
    ]
    .concat());
    assert_eq!(stdout(&by_name), stdout(&by_path));
    assert!(!stdout(&by_name).trim().is_empty());
}

/// Runs Python with `huggingface_hub` against the stand-in and its cache.
fn python_hub(hub: &Hub, body: &str) -> String {
    let script = format!("from huggingface_hub import hf_hub_download\n{body}\n");
    let o = Command::new(test_python())
        .args(["-c", &script])
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HUB_CACHE", hub.cache())
        .env("HF_HOME", hub.dir.path().join("hf-home"))
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env_remove("HF_TOKEN")
        .output()
        .expect("run the test Python");
    assert!(
        o.status.success(),
        "huggingface_hub: {}\n(the Python test packages come with scripts/test)",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_model_huggingface_hub_fetched_is_not_downloaded_again() {
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({}))],
        serde_json::json!({}),
    );
    let theirs = python_hub(
        &hub,
        &format!("print(hf_hub_download({REPO:?}, {MODEL_FILE:?}))"),
    );
    assert_eq!(
        hub.downloads().len(),
        1,
        "huggingface_hub downloaded from the stand-in"
    );
    hub.reset();
    let ours = out_path(&hub.ridge(&["pull", &format!("hf.co/{REPO}")], &[]));
    assert_eq!(ours, PathBuf::from(theirs.trim()));
    assert!(hub.downloads().is_empty(), "{:?}", hub.log());
}

#[test]
fn tags_pick_the_file_and_split_models_come_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let files = vec![
        ("M-Q4_K_M.gguf", dummy(d, "a", 3000)),
        ("M-Q8_0.gguf", dummy(d, "b", 5000)),
        ("mmproj-M-f16.gguf", dummy(d, "c", 100)),
        ("BF16/M-BF16-00001-of-00002.gguf", dummy(d, "d", 7000)),
        ("BF16/M-BF16-00002-of-00002.gguf", dummy(d, "e", 9000)),
        ("M-Q6_K-00001-of-00003.gguf", dummy(d, "f", 100)),
        ("M-Q6_K-00003-of-00003.gguf", dummy(d, "g", 100)),
    ];
    let evil = vec![("../../../escaped.gguf", dummy(d, "h", 100))];
    let hub = Hub::start(
        &[
            ("o/M-GGUF", files, serde_json::json!({})),
            ("o/Evil", evil, serde_json::json!({})),
        ],
        serde_json::json!({}),
    );
    let snap = hub.cache().join("models--o--M-GGUF/snapshots").join(COMMIT);
    let p = out_path(&hub.ridge(&["pull", "o/M-GGUF"], &[]));
    assert_eq!(p, snap.join("M-Q4_K_M.gguf"), "Q4_K_M is the default");
    let p = out_path(&hub.ridge(&["pull", "hf.co/o/M-GGUF:bf16"], &[]));
    assert_eq!(p, snap.join("BF16/M-BF16-00001-of-00002.gguf"));
    assert_eq!(
        sha256(&snap.join("BF16/M-BF16-00002-of-00002.gguf")),
        sha256(&d.join("e"))
    );
    let p = out_path(&hub.ridge(&["pull", "hf.co/o/M-GGUF/M-Q8_0.gguf"], &[]));
    assert_eq!(sha256(&p), sha256(&d.join("b")));

    let o = hub.ridge(&["pull", "hf.co/o/M-GGUF:IQ2_XS"], &[]);
    assert_clean_failure(&o, "no GGUF matches the tag `IQ2_XS`");
    let e = stderr(&o);
    for choice in ["Q4_K_M", "Q8_0", "BF16"] {
        assert!(e.contains(choice), "{e}");
    }
    assert!(!e.contains("mmproj"), "{e}");
    let o = hub.ridge(
        &["pull", "hf.co/o/M-GGUF/BF16/M-BF16-00002-of-00002.gguf"],
        &[],
    );
    assert_clean_failure(&o, "not the first shard");
    assert_clean_failure(
        &hub.ridge(&["pull", "hf.co/o/Nope"], &[]),
        "no such repository",
    );
    let o = hub.ridge(&["pull", "hf.co/o/M-GGUF:Q6_K"], &[]);
    assert_clean_failure(&o, "has 3 shards but the repository lacks shard 2");
    let o = hub.ridge(&["pull", "hf.co/o/M-GGUF/M-Q6_K-00001-of-00003.gguf"], &[]);
    assert_clean_failure(&o, "lacks shard 2");
    assert_clean_failure(
        &hub.ridge(&["pull", "hf.co/o/M-GGUF/../../x.gguf"], &[]),
        "bad file path",
    );
    // A Hub that lists a path out of the cache is refused; nothing lands outside it.
    assert_clean_failure(&hub.ridge(&["pull", "hf.co/o/Evil"], &[]), "unsafe name");
    assert!(!hub.dir.path().join("escaped.gguf").exists());
    assert!(!hub.cache().join("escaped.gguf").exists());
    assert_clean_failure(&hub.ridge(&["pull", "hf.co/o/M-GGUF@v9"], &[]), "v9");
    assert_clean_failure(&hub.ridge(&["pull", "hf.co/o"], &[]), "OWNER/REPO");
}

#[test]
fn an_interrupted_download_resumes_with_a_range() {
    // Cut off halfway: the same run retries from where it stopped.
    let cut = std::fs::metadata(smollm2()).unwrap().len() / 2;
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({}))],
        serde_json::json!({"cut_after": cut, "cut_times": 1}),
    );
    let path = out_path(&hub.ridge(&["pull", &format!("hf.co/{REPO}:Q4_1")], &[]));
    assert_eq!(sha256(&path), sha256(&smollm2()));
    let gets = hub.downloads();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert!(gets[0]["range"].is_null());
    assert_eq!(
        gets[1]["range"],
        format!("bytes={cut}-"),
        "resumed where it stopped"
    );

    // A run that was killed leaves `blobs/<sha256>.incomplete` (as `huggingface_hub` does too):
    // the next run continues it.
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({}))],
        serde_json::json!({}),
    );
    let want = sha256(&smollm2());
    let blobs = hub.cache().join("models--test--SmolLM2-GGUF/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let bytes = std::fs::read(smollm2()).unwrap();
    let third = bytes.len() / 3;
    std::fs::write(blobs.join(format!("{want}.incomplete")), &bytes[..third]).unwrap();
    let path = out_path(&hub.ridge(&["pull", &format!("hf.co/{REPO}:Q4_1")], &[]));
    assert_eq!(sha256(&path), want);
    let gets = hub.downloads();
    assert_eq!(gets.len(), 1, "{gets:?}");
    assert_eq!(gets[0]["range"], format!("bytes={third}-"));
    assert!(!blobs.join(format!("{want}.incomplete")).exists());

    // A leftover longer than the file is no prefix of it: the download starts over.
    std::fs::remove_dir_all(hub.cache()).unwrap();
    std::fs::create_dir_all(&blobs).unwrap();
    let mut long = bytes.clone();
    long.extend_from_slice(b"junk");
    std::fs::write(blobs.join(format!("{want}.incomplete")), &long).unwrap();
    hub.reset();
    let path = out_path(&hub.ridge(&["pull", &format!("hf.co/{REPO}:Q4_1")], &[]));
    assert_eq!(sha256(&path), want);
    assert!(
        hub.downloads()[0]["range"].is_null(),
        "{:?}",
        hub.downloads()
    );
}

#[test]
fn a_corrupt_download_never_lands() {
    let hub = Hub::start(
        &[(
            REPO,
            smol_repo(vec![]),
            serde_json::json!({"corrupt": true}),
        )],
        serde_json::json!({}),
    );
    let o = hub.ridge(&["pull", &format!("hf.co/{REPO}:Q4_1")], &[]);
    assert_clean_failure(&o, "sha256 mismatch");
    let repo_dir = hub.cache().join("models--test--SmolLM2-GGUF");
    let blobs: Vec<_> = std::fs::read_dir(repo_dir.join("blobs"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(blobs.is_empty(), "nothing left in blobs/: {blobs:?}");
    assert!(!repo_dir.join("snapshots").exists());
}

#[test]
fn gated_repositories_need_the_token_and_it_stays_on_the_hub() {
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({"gated": true}))],
        serde_json::json!({}),
    );
    let name = format!("hf.co/{REPO}:Q4_1");
    let o = hub.ridge(&["pull", &name], &[]);
    assert_clean_failure(&o, "401");
    assert!(stderr(&o).contains("HF_TOKEN"), "{}", stderr(&o));
    let o = hub.ridge(&["pull", &name], &[("HF_TOKEN", "wrong")]);
    assert_clean_failure(&o, "403");
    // The token `hf auth login` stores is read as well as HF_TOKEN.
    let home = hub.dir.path().join("hf-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("token"), "secret\n").unwrap();
    hub.reset();
    let path = out_path(&hub.ridge(&["pull", &name], &[]));
    assert_eq!(sha256(&path), sha256(&smollm2()));
    for r in hub.log() {
        let cdn = r["path"].as_str().unwrap().starts_with("/cdn/");
        assert_eq!(
            r["auth"], !cdn,
            "the token goes to the Hub only, not the CDN: {r}"
        );
    }
}

#[test]
fn offline_mode_uses_only_the_cache() {
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({}))],
        serde_json::json!({}),
    );
    let name = format!("hf.co/{REPO}:Q4_1");
    let offline = [("HF_HUB_OFFLINE", "1")];
    assert_clean_failure(&hub.ridge(&["pull", &name], &offline), "HF_HUB_OFFLINE");
    assert!(
        hub.log().is_empty(),
        "offline asks nothing: {:?}",
        hub.log()
    );
    let path = out_path(&hub.ridge(&["pull", &name], &[]));
    hub.reset();
    assert_eq!(out_path(&hub.ridge(&["pull", &name], &offline)), path);
    assert!(hub.log().is_empty());
    // With the Hub gone, a pull falls back to the cache (with a warning).
    let o = hub.ridge(&["pull", &name], &[("HF_ENDPOINT", "http://127.0.0.1:9")]);
    assert_eq!(out_path(&o), path);
    assert!(
        stderr(&o).contains("using the cached copy"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn serve_takes_hub_names_and_lists_the_hub_cache() {
    let hub = Hub::start(
        &[(REPO, smol_repo(vec![]), serde_json::json!({}))],
        serde_json::json!({}),
    );
    let name = format!("hf.co/{REPO}:Q4_1");
    let endpoint = hub.endpoint();
    let cache = hub.cache();
    let env = [
        ("HF_ENDPOINT", std::ffi::OsStr::new(&endpoint)),
        ("HF_HUB_CACHE", cache.as_os_str()),
    ];
    let ask = |s: &Server, model: &str| {
        let (code, v) = s.post(
            "/v1/chat/completions",
            &serde_json::json!({"model": model, "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hi"}]}),
        );
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["model"], model);
    };
    {
        // Pulled before the server listens, then served under its Hub name.
        let s = Server::start_env(&["--model", &name], &env);
        let (_, list) = s.get("/v1/models");
        let list: serde_json::Value = serde_json::from_str(&list).unwrap();
        assert_eq!(list["data"][0]["id"], name.as_str(), "{list}");
        ask(&s, &name);
    }
    // With no --model the cache's Hub models are served too, offline.
    let offline = [
        env[0],
        env[1],
        ("HF_HUB_OFFLINE", std::ffi::OsStr::new("1")),
    ];
    let s = Server::start_env(&[], &offline);
    let (_, list) = s.get("/v1/models");
    let ids: Vec<String> = serde_json::from_str::<serde_json::Value>(&list).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.contains(&name), "{ids:?}");
    ask(&s, &name);
}

#[test]
fn a_split_model_from_the_hub_runs_as_the_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = ridge_gguf::GgufFile::open(smollm2()).unwrap();
    let shards = split_into(&src, tmp.path(), "SmolLM2-Q4_1", 3);
    let files: Vec<(&str, PathBuf)> = ["00001", "00002", "00003"]
        .iter()
        .zip(&shards)
        .map(|(k, p)| {
            let name: &'static str =
                Box::leak(format!("Q4_1/SmolLM2-Q4_1-{k}-of-00003.gguf").into_boxed_str());
            (name, p.clone())
        })
        .collect();
    let hub = Hub::start(
        &[("o/Split-GGUF", files, serde_json::json!({}))],
        serde_json::json!({}),
    );
    let greedy = ["--raw", "--temperature", "0", "--max-tokens", "12"];
    let q = "The capital of France is";
    let o = hub.ridge(
        &[
            &["run", "--model", "hf.co/o/Split-GGUF:q4_1"][..],
            &greedy,
            &[q],
        ]
        .concat(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(hub.downloads().len(), 3, "every shard fetched");
    let whole = run(&[
        &["run", "--model", smollm2().to_str().unwrap()][..],
        &greedy,
        &[q],
    ]
    .concat());
    assert_eq!(stdout(&o), stdout(&whole));
}
