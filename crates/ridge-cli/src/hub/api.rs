//! The two Hub endpoints a pull needs, and a resumable, verified download.
//!
//! - `GET {endpoint}/api/models/{repo}/revision/{rev}`: the commit a branch or tag points at
//!   (so the snapshot folder is named by commit, as the Hub's own client names it);
//! - `GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true`: every file with its size
//!   and, for LFS files, its sha256 (pages follow the `Link: <…>; rel="next"` header);
//! - `GET {endpoint}/{repo}/resolve/{commit}/{path}`: the bytes, after redirects (the Hub sends
//!   LFS files to a CDN; reqwest drops the `Authorization` header when the host changes).
//!
//! A download goes to `blobs/<sha256>.incomplete`; after an interruption (here or in an
//! earlier run, or a `huggingface_hub` download left half-done) it continues with
//! `Range: bytes=N-`, re-hashing the part already there. Only a file whose size and sha256
//! match the tree's listing is renamed to its blob name, so a bad or partial file never lands.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use reqwest::blocking::{Client, Response};
use reqwest::StatusCode;
use sha2::{Digest, Sha256};

/// Attempts per file before a download gives up (each resumes where the last stopped).
const ATTEMPTS: u32 = 5;

/// One file of a repository, as the tree API lists it.
#[derive(Clone, Debug)]
pub struct RepoFile {
    /// Path inside the repository.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// The LFS sha256 (what the blob is named by and verified against), when an LFS file.
    pub sha256: Option<String>,
    /// The git object id (the blob name of a non-LFS file).
    pub oid: String,
}

impl RepoFile {
    /// The blob name in the cache.
    pub fn blob(&self) -> &str {
        self.sha256.as_deref().unwrap_or(&self.oid)
    }
}

/// A client for one Hub endpoint.
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    http: Client,
}

/// Why a request failed in a way the cache might answer instead.
#[derive(Debug)]
pub struct Unreachable(pub String);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreachable {}

impl Hub {
    /// A client for `HF_ENDPOINT` (default the public Hub) with `HF_TOKEN` if set.
    pub fn from_env() -> Result<Self> {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| "https://huggingface.co".to_string());
        let http = Client::builder()
            .connect_timeout(Duration::from_secs(20))
            // No total timeout: a model takes as long as it takes; keepalive notices a dead peer.
            .timeout(None)
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(concat!("ridge/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("starting the HTTP client")?;
        Ok(Hub {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token: token(),
            http,
        })
    }

    /// The endpoint's base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn get(&self, url: &str) -> reqwest::blocking::RequestBuilder {
        let r = self.http.get(url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    fn send(&self, repo: &str, req: reqwest::blocking::RequestBuilder) -> Result<Response> {
        let resp = req.send().map_err(|e| {
            anyhow!(Unreachable(format!(
                "cannot reach the Hub at {}: {}",
                self.endpoint,
                root_cause(&e)
            )))
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let code = resp
            .headers()
            .get("x-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body: String = resp.text().unwrap_or_default().chars().take(200).collect();
        let detail = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or(body);
        let how = if self.token.is_some() {
            "the token in HF_TOKEN has no access: accept the model's terms on its Hub page \
             with the account the token belongs to, or use a token with read access"
        } else {
            "it is gated or private: accept its terms on its Hub page, then set HF_TOKEN to \
             a read token (or run `hf auth login`)"
        };
        let private = if self.token.is_none() {
            " (a private repository also answers so without HF_TOKEN)"
        } else {
            ""
        };
        match (code.as_str(), status) {
            ("RepoNotFound", _) => bail!(
                "{repo}: no such repository on {}{private}; check the name",
                self.endpoint
            ),
            ("RevisionNotFound", _) => bail!("{repo}: {}", detail.trim()),
            ("EntryNotFound", _) => bail!("{repo}: file not found: {}", detail.trim()),
            _ => {}
        }
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                bail!("{repo}: the Hub answered {status}: {how}")
            }
            StatusCode::NOT_FOUND => bail!(
                "{repo}: not found on {} ({}){private}; check the name",
                self.endpoint,
                detail.trim()
            ),
            s if s.is_server_error() => Err(anyhow!(Unreachable(format!(
                "{repo}: the Hub at {} answered {s}",
                self.endpoint
            )))),
            s => bail!("{repo}: the Hub answered {s}: {}", detail.trim()),
        }
    }

    /// The commit `revision` points at.
    pub fn commit(&self, repo: &str, revision: &str) -> Result<String> {
        let url = format!(
            "{}/api/models/{repo}/revision/{}",
            self.endpoint,
            encode(revision)
        );
        let v: serde_json::Value = self
            .send(repo, self.get(&url))?
            .json()
            .with_context(|| format!("{repo}: the Hub's revision answer is not JSON"))?;
        match v.get("sha").and_then(|s| s.as_str()) {
            Some(s) if super::cache::is_commit(s) => Ok(s.to_ascii_lowercase()),
            _ => bail!("{repo}: the Hub's revision answer has no commit `sha`"),
        }
    }

    /// Every file of the repository at `commit`.
    pub fn tree(&self, repo: &str, commit: &str) -> Result<Vec<RepoFile>> {
        let mut url = format!(
            "{}/api/models/{repo}/tree/{commit}?recursive=true",
            self.endpoint
        );
        let mut out = Vec::new();
        for _page in 0..1000 {
            let resp = self.send(repo, self.get(&url))?;
            let next = next_link(resp.headers());
            let v: serde_json::Value = resp
                .json()
                .with_context(|| format!("{repo}: the Hub's tree answer is not JSON"))?;
            let items = v
                .as_array()
                .ok_or_else(|| anyhow!("{repo}: the Hub's tree answer is not a list"))?;
            for it in items {
                if it.get("type").and_then(|t| t.as_str()) != Some("file") {
                    continue;
                }
                let s = |k: &str| it.get(k).and_then(|x| x.as_str()).map(str::to_string);
                let (Some(path), Some(size)) = (s("path"), it.get("size").and_then(|x| x.as_u64()))
                else {
                    bail!("{repo}: a tree entry lacks `path` or `size`: {it}");
                };
                let sha256 = it
                    .get("lfs")
                    .and_then(|l| l.get("oid"))
                    .and_then(|o| o.as_str())
                    .map(|o| o.trim_start_matches("sha256:").to_ascii_lowercase());
                let oid = s("oid").unwrap_or_default();
                if !safe_path(&path)
                    || !sha256
                        .as_deref()
                        .unwrap_or(&oid)
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit())
                {
                    bail!("{repo}: the Hub listed a file with an unsafe name or id: {it}");
                }
                out.push(RepoFile {
                    path,
                    size,
                    sha256,
                    oid,
                });
            }
            match next {
                Some(n) => url = n,
                None => return Ok(out),
            }
        }
        bail!("{repo}: the Hub's tree listing did not end after 1000 pages")
    }

    /// Fetches `file` into `blobs/<blob>` (resuming a partial download, verifying its size and
    /// sha256); `progress` is told the bytes on disk so far.
    pub fn download(
        &self,
        repo: &str,
        commit: &str,
        file: &RepoFile,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let dest = super::cache::blob_path(repo, file.blob());
        if dest.is_file() {
            return Ok(());
        }
        let dir = dest.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let part = dir.join(format!("{}.incomplete", file.blob()));
        let url = format!(
            "{}/{repo}/resolve/{commit}/{}",
            self.endpoint,
            file.path
                .split('/')
                .map(encode)
                .collect::<Vec<_>>()
                .join("/")
        );
        let mut last = None;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500 << attempt.min(4)));
            }
            match self.fetch_into(repo, &url, &part, file, progress) {
                Ok(()) => {
                    verify(&part, file).inspect_err(|_| {
                        let _ = std::fs::remove_file(&part);
                    })?;
                    std::fs::rename(&part, &dest)
                        .with_context(|| format!("moving {} into place", dest.display()))?;
                    return Ok(());
                }
                Err(e) if e.downcast_ref::<Unreachable>().is_some() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last
            .unwrap_or_else(|| anyhow!("download failed"))
            .context(format!(
                "{repo}: {} not downloaded after {ATTEMPTS} attempts (run again to resume)",
                file.path
            )))
    }

    fn fetch_into(
        &self,
        repo: &str,
        url: &str,
        part: &Path,
        file: &RepoFile,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let mut have = std::fs::metadata(part).map_or(0, |m| m.len());
        if have > file.size {
            // Not a prefix of this file: start over.
            std::fs::remove_file(part).ok();
            have = 0;
        }
        if have == file.size && have > 0 {
            return Ok(());
        }
        let mut req = self.get(url);
        if have > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
        }
        let mut resp = self.send(repo, req)?;
        let resumed = have > 0 && resp.status() == StatusCode::PARTIAL_CONTENT;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(resumed)
            .write(true)
            .truncate(!resumed)
            .open(part)
            .with_context(|| format!("opening {}", part.display()))?;
        let mut done = if resumed { have } else { 0 };
        progress(done);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match resp.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    out.flush().ok();
                    return Err(anyhow!(Unreachable(format!(
                        "{repo}: the download of {} stopped at {done} bytes: {e}",
                        file.path
                    ))));
                }
            };
            out.write_all(&buf[..n])
                .with_context(|| format!("writing {}", part.display()))?;
            done += n as u64;
            progress(done.min(file.size));
            if done > file.size {
                bail!(
                    "{repo}: {} is larger than the {} bytes the Hub lists",
                    file.path,
                    file.size
                );
            }
        }
        out.sync_all().ok();
        if done < file.size {
            return Err(anyhow!(Unreachable(format!(
                "{repo}: the download of {} ended at {done} of {} bytes",
                file.path, file.size
            ))));
        }
        Ok(())
    }
}

/// Checks size and (for LFS files) sha256 of a finished download.
fn verify(part: &Path, file: &RepoFile) -> Result<()> {
    let mut f = std::fs::File::open(part).with_context(|| format!("reading {}", part.display()))?;
    let mut h = Sha256::new();
    let n = std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", part.display()))?;
    if n != file.size {
        bail!(
            "{}: {n} bytes downloaded, the Hub lists {}",
            file.path,
            file.size
        );
    }
    if let Some(want) = &file.sha256 {
        let got = format!("{:x}", h.finalize());
        if &got != want {
            bail!(
                "{}: sha256 mismatch (the Hub lists {want}, the download hashes to {got}); \
                 the partial file was deleted, run again",
                file.path
            );
        }
    }
    Ok(())
}

/// The token: `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the file `hf auth login` wrote
/// (`HF_TOKEN_PATH`, else `HF_HOME/token`, else `~/.cache/huggingface/token`).
fn token() -> Option<String> {
    let var = |k| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let Some(t) = var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN")) {
        return Some(t.trim().to_string());
    }
    let path = var("HF_TOKEN_PATH")
        .map(std::path::PathBuf::from)
        .or_else(|| var("HF_HOME").map(|h| Path::new(&h).join("token")))
        .or_else(|| dirs::home_dir().map(|h| h.join(".cache/huggingface/token")))?;
    let t = std::fs::read_to_string(path).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut e = e;
    while let Some(s) = e.source() {
        e = s;
    }
    e.to_string()
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(h: &reqwest::header::HeaderMap) -> Option<String> {
    let v = h.get(reqwest::header::LINK)?.to_str().ok()?;
    v.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// A path the cache may hold: relative, no `..`, no empty pieces.
fn safe_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && p.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

/// Percent-encodes one URL path segment.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers_and_paths() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            reqwest::header::LINK,
            "<https://x/api/models/a/b/tree/c?cursor=Z>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://x/api/models/a/b/tree/c?cursor=Z")
        );
        assert!(
            safe_path("a/b.gguf") && !safe_path("../x") && !safe_path("/x") && !safe_path("a//b")
        );
        assert_eq!(encode("refs/pr/1"), "refs%2Fpr%2F1");
    }
}
