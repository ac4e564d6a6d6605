//! The Hugging Face cache, in the Hub's own layout, so files fetched by `hf download` (or any
//! `huggingface_hub` program) are found without a second download and files ridge fetches are
//! found by them.
//!
//! ```text
//! $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//!   models--OWNER--REPO/
//!     refs/main                      the commit `main` pointed at when last fetched
//!     blobs/<sha256>                 file contents, named by their LFS sha256 (git oid otherwise)
//!     blobs/<sha256>.incomplete      a download in progress (resumed from its length)
//!     snapshots/<commit>/<path>      relative symlinks into blobs/
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The cache root: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn root() -> PathBuf {
    let var = |k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("HF_HUB_CACHE") {
        return d;
    }
    if let Some(h) = var("HF_HOME") {
        return h.join("hub");
    }
    let home = var("XDG_CACHE_HOME")
        .or_else(|| dirs::home_dir().map(|h| h.join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    home.join("huggingface").join("hub")
}

/// The folder of one repository (`models--OWNER--REPO`).
pub fn repo_dir(repo: &str) -> PathBuf {
    root().join(format!("models--{}", repo.replace('/', "--")))
}

/// The repository a cache folder name stands for (`models--a--b` → `a/b`).
pub fn repo_of_dir(name: &str) -> Option<String> {
    let rest = name.strip_prefix("models--")?;
    let (owner, repo) = rest.split_once("--")?;
    Some(format!("{owner}/{repo}"))
}

/// True for a full 40-hex commit id.
pub fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit a revision points at in the cache (a commit id stands for itself).
pub fn read_ref(repo: &str, revision: &str) -> Option<String> {
    if is_commit(revision) {
        return Some(revision.to_ascii_lowercase());
    }
    let s = std::fs::read_to_string(repo_dir(repo).join("refs").join(revision)).ok()?;
    let s = s.trim();
    is_commit(s).then(|| s.to_string())
}

/// Records that `revision` points at `commit`.
pub fn write_ref(repo: &str, revision: &str, commit: &str) -> Result<()> {
    if is_commit(revision) {
        return Ok(());
    }
    let path = repo_dir(repo).join("refs").join(revision);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, commit.as_bytes())?;
    tmp.persist(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Where a snapshot file lives.
pub fn snapshot_path(repo: &str, commit: &str, file: &str) -> PathBuf {
    repo_dir(repo).join("snapshots").join(commit).join(file)
}

/// Where a blob lives.
pub fn blob_path(repo: &str, blob: &str) -> PathBuf {
    repo_dir(repo).join("blobs").join(blob)
}

/// Points `snapshots/<commit>/<file>` at `blobs/<blob>` with a relative link, atomically
/// (a link made under a temporary name, then renamed over).
pub fn link(repo: &str, commit: &str, file: &str, blob: &str) -> Result<PathBuf> {
    let dest = snapshot_path(repo, commit, file);
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let depth = file.split('/').count() + 1; // snapshots/<commit>/<dirs…>
    let target: PathBuf = std::iter::repeat_n("..", depth)
        .collect::<PathBuf>()
        .join("blobs")
        .join(blob);
    let tmp = dir.join(format!(".ridge-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    make_link(&target, &tmp, &blob_path(repo, blob))
        .with_context(|| format!("linking {}", dest.display()))?;
    std::fs::rename(&tmp, &dest).with_context(|| format!("linking {}", dest.display()))?;
    Ok(dest)
}

#[cfg(unix)]
fn make_link(target: &Path, at: &Path, _blob: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(not(unix))]
fn make_link(_target: &Path, at: &Path, blob: &Path) -> std::io::Result<()> {
    // Without symlinks the Hub's own client copies the blob; so does ridge.
    std::fs::copy(blob, at).map(|_| ())
}

/// Every file under `base` (links followed; a dangling link is no file), as `/`-separated
/// paths relative to it, sorted.
fn files_under(base: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![base.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                if let Ok(rel) = p.strip_prefix(base) {
                    out.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
    }
    out.sort();
    out
}

/// Every file of a cached snapshot whose target exists, as paths inside the repository.
pub fn snapshot_files(repo: &str, commit: &str) -> Vec<String> {
    files_under(&repo_dir(repo).join("snapshots").join(commit))
}

/// One GGUF model found in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedModel {
    /// `OWNER/REPO`.
    pub repo: String,
    /// The snapshot's commit.
    pub commit: String,
    /// Its files inside the repository, first shard first.
    pub files: Vec<String>,
    /// The first shard's path on disk.
    pub path: PathBuf,
}

impl CachedModel {
    /// The name that selects it again (`hf.co/OWNER/REPO:TAG`, or the file when untagged).
    pub fn name(&self) -> String {
        self.name_at("main")
    }

    /// The name that selects it at `revision` (`hf.co/OWNER/REPO@REVISION:TAG`; no `@` for
    /// `main`).
    pub fn name_at(&self, revision: &str) -> String {
        let c = super::select::Candidate {
            files: self.files.clone(),
        };
        let at = if revision == "main" {
            String::new()
        } else {
            format!("@{revision}")
        };
        match c.tag() {
            Some(t) => format!("hf.co/{}{at}:{t}", self.repo),
            None => format!("hf.co/{}{at}/{}", self.repo, self.files[0]),
        }
    }

    /// The name that selects this snapshot again: through `main`, or another ref pointing at
    /// it (one without `/`, which a name cannot spell), else its commit.
    pub fn selecting_name(&self) -> String {
        let refs = refs(&self.repo);
        let mine: Vec<&str> = refs
            .iter()
            .filter(|(r, c)| *c == self.commit && !r.contains('/'))
            .map(|(r, _)| r.as_str())
            .collect();
        let rev = if mine.contains(&"main") {
            "main"
        } else {
            mine.first().copied().unwrap_or(&self.commit)
        };
        self.name_at(rev)
    }
}

/// Every ref of a cached repository with the commit it points at (`refs/main`,
/// `refs/pr/1`…), sorted by name; unreadable ones are skipped.
pub fn refs(repo: &str) -> Vec<(String, String)> {
    files_under(&repo_dir(repo).join("refs"))
        .into_iter()
        .filter_map(|name| read_ref(repo, &name).map(|c| (name, c)))
        .collect()
}

/// Every complete GGUF model in the cache, newest snapshot of each repository per `refs/`
/// first (snapshots no ref points at are listed too: they were fetched by commit).
pub fn models() -> Vec<CachedModel> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(root()) else {
        return out;
    };
    let mut repos: Vec<String> = rd
        .flatten()
        .filter_map(|e| repo_of_dir(&e.file_name().to_string_lossy()))
        .collect();
    repos.sort();
    for repo in repos {
        let Ok(snaps) = std::fs::read_dir(repo_dir(&repo).join("snapshots")) else {
            continue;
        };
        let mut commits: Vec<String> = snaps
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        commits.sort();
        for commit in commits {
            let files = snapshot_files(&repo, &commit);
            for c in super::select::candidates(files.iter().map(String::as_str)) {
                let path = snapshot_path(&repo, &commit, c.first());
                out.push(CachedModel {
                    repo: repo.clone(),
                    commit: commit.clone(),
                    files: c.files,
                    path,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_round_trip() {
        assert_eq!(
            repo_of_dir("models--ggml-org--gemma-3-4b-it-GGUF").as_deref(),
            Some("ggml-org/gemma-3-4b-it-GGUF")
        );
        assert_eq!(repo_of_dir("datasets--a--b"), None);
        assert!(is_commit(&"a".repeat(40)) && !is_commit("main"));
    }
}
