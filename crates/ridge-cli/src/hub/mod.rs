//! Models from the Hugging Face Hub: `ridge pull hf.co/OWNER/REPO[:QUANT]`, and the same names
//! in every `--model`.
//!
//! A pull asks the Hub which commit the revision points at and which files the repository
//! holds, picks the GGUF by its quantisation tag ([`select`]), downloads what the cache lacks
//! ([`api`]: resumable, sha256-verified, atomic) and links it into the Hub's own cache layout
//! ([`cache`]). `--model` with a Hub name uses the cache when the chosen files are already
//! there (no network at all), and pulls otherwise; `ridge pull` always asks the Hub, so it also
//! picks up a newer commit. `HF_HUB_OFFLINE=1` never asks; an unreachable Hub falls back to the
//! cache with a warning.

pub mod api;
pub mod cache;
pub mod reference;
pub mod select;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use reference::{HubRef, Pick};

/// True when `HF_HUB_OFFLINE` asks for the cache only.
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The chosen model's files among `paths` (first shard first); a choice that lands on a split
/// set with shards missing says which.
fn pick(r: &HubRef, paths: &[&str]) -> Result<Vec<String>, String> {
    pick_complete(r, paths).map_err(|e| {
        let hit = |first: &str| match &r.pick {
            Pick::Default => select::has_tag(first, select::DEFAULT_TAG),
            Pick::Quant(q) => select::has_tag(first, q),
            Pick::File(f) => {
                select::shard_of(f).map(|s| s.0) == select::shard_of(first).map(|s| s.0)
            }
        };
        match select::incomplete_sets(paths.iter().copied())
            .into_iter()
            .find(|s| hit(&s.0))
        {
            Some((shard, n, missing)) => format!(
                "the split model {shard} has {n} shards but the repository lacks shard{} {}",
                if missing.len() > 1 { "s" } else { "" },
                missing
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => e,
        }
    })
}

fn pick_complete(r: &HubRef, paths: &[&str]) -> Result<Vec<String>, String> {
    let cands = select::candidates(paths.iter().copied());
    match &r.pick {
        Pick::Default => select::choose(&cands, None).map(|c| c.files),
        Pick::Quant(q) => select::choose(&cands, Some(q)).map(|c| c.files),
        Pick::File(f) => {
            if let Some(c) = cands.iter().find(|c| c.files.iter().any(|x| x == f)) {
                if c.first() != f {
                    return Err(format!("`{f}` is not the first shard; name {}", c.first()));
                }
                return Ok(c.files.clone());
            }
            if paths.contains(&f.as_str()) && select::shard_of(f).is_none_or(|s| s.2 == 1) {
                return Ok(vec![f.clone()]);
            }
            Err(format!(
                "no file `{f}` in the repository; its GGUF files: {}",
                cands
                    .iter()
                    .map(|c| c.first().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }
}

/// The model in the cache, when every file it needs is there.
fn from_cache(r: &HubRef) -> Result<Option<PathBuf>> {
    Ok(cached_model(r)?.map(|m| m.path))
}

/// The cached model a Hub name selects — its snapshot, files and first file's path — without
/// asking the Hub: `None` when the revision or its snapshot is not cached, an error when the
/// snapshot holds GGUFs but the name picks none of them (or several).
pub fn cached_model(r: &HubRef) -> Result<Option<cache::CachedModel>> {
    let Some(commit) = cache::read_ref(&r.repo, &r.revision) else {
        return Ok(None);
    };
    let files = cache::snapshot_files(&r.repo, &commit);
    let paths: Vec<&str> = files.iter().map(String::as_str).collect();
    match pick(r, &paths) {
        Ok(files) => Ok(Some(cache::CachedModel {
            repo: r.repo.clone(),
            path: cache::snapshot_path(&r.repo, &commit, &files[0]),
            commit,
            files,
        })),
        // A snapshot without any GGUF (only a README fetched, or the model removed) does not
        // hold the model; one with other GGUFs names them.
        Err(_) if select::candidates(paths.iter().copied()).is_empty() => Ok(None),
        Err(e) => bail!("{r}: {e} (in the cache at {})", cache::root().display()),
    }
}

/// The path of a cached model's first file, never asking the Hub (`ridge show`): as
/// [`resolve`] finds it in the cache.
pub fn cached(r: &HubRef) -> Result<Option<PathBuf>> {
    from_cache(r)
}

/// Resolves a Hub name for `--model`: the cache if it holds the model, else a pull.
pub fn resolve(r: &HubRef, quiet: bool) -> Result<PathBuf> {
    if offline() {
        return from_cache(r)?.with_context(|| offline_miss(r));
    }
    if let Some(p) = from_cache(r).ok().flatten() {
        return Ok(p);
    }
    pull(r, quiet)
}

fn offline_miss(r: &HubRef) -> String {
    format!(
        "{r} is not in the Hub cache at {} and HF_HUB_OFFLINE is set: unset it to download",
        cache::root().display()
    )
}

/// Asks the Hub for the model's current files and downloads what the cache lacks.
pub fn pull(r: &HubRef, quiet: bool) -> Result<PathBuf> {
    if offline() {
        return from_cache(r)?.with_context(|| offline_miss(r));
    }
    let hub = api::Hub::from_env()?;
    let commit = match hub.commit(&r.repo, &r.revision) {
        Ok(c) => c,
        Err(e) if e.downcast_ref::<api::Unreachable>().is_some() => {
            if let Some(p) = from_cache(r)? {
                eprintln!("warning: {e:#}; using the cached copy");
                return Ok(p);
            }
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let tree = hub.tree(&r.repo, &commit)?;
    let paths: Vec<&str> = tree.iter().map(|f| f.path.as_str()).collect();
    let chosen = pick(r, &paths).map_err(|e| anyhow::anyhow!("{r}: {e}"))?;
    let files: Vec<&api::RepoFile> = chosen
        .iter()
        .filter_map(|c| tree.iter().find(|f| &f.path == c))
        .collect();
    let missing: Vec<&&api::RepoFile> = files
        .iter()
        .filter(|f| !cache::blob_path(&r.repo, f.blob()).is_file())
        .collect();
    let total: u64 = missing.iter().map(|f| f.size).sum();
    let bar = bar(total, quiet);
    let mut before = 0u64;
    if quiet && !missing.is_empty() {
        // A server loading on demand has no bar; its log says why the load takes a while.
        eprintln!(
            "pulling {r}: {:.0} MB from {}",
            total as f64 / 1e6,
            hub.endpoint()
        );
    }
    for (i, f) in missing.iter().enumerate() {
        bar.set_message(if missing.len() > 1 {
            format!("pulling {r} ({}/{})", i + 1, missing.len())
        } else {
            format!("pulling {r}")
        });
        hub.download(&r.repo, &commit, f, &|n| bar.set_position(before + n))?;
        before += f.size;
    }
    bar.finish_and_clear();
    for f in &files {
        cache::link(&r.repo, &commit, &f.path, f.blob())?;
    }
    cache::write_ref(&r.repo, &r.revision, &commit)?;
    Ok(cache::snapshot_path(&r.repo, &commit, &chosen[0]))
}

fn bar(total: u64, quiet: bool) -> indicatif::ProgressBar {
    ridge_model::registry::download_bar(total, quiet || total == 0)
}
