//! `ridge rm MODEL…`: deletes downloaded models from ridge's cache and the Hugging Face cache,
//! and nothing else.
//!
//! A registry model is one file in ridge's cache. A Hub model is links in one snapshot of the
//! Hub's cache pointing at content-named blobs that other snapshots (other commits of the same
//! repository) may share, so removing it deletes the snapshot's links for the model's files,
//! then only the blobs no remaining link points at (with any unfinished `.incomplete`
//! download of them), then the folders and refs left empty or dangling, then the repository's
//! folder when nothing is left in it: the cache stays in the layout the Hub's own tools expect.
//! Files outside the caches are refused — `rm` is for what a pull put there, not a general
//! delete. Every name is checked before anything is deleted, and `--dry-run` prints the same
//! plan without deleting.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use ridge_model::registry;

use crate::hub::{self, cache};
use crate::inspect::human_bytes;

/// Arguments of `rm`.
#[derive(clap::Args)]
pub struct Args {
    /// Models to delete: registry names, Hub names as `ridge list` prints them
    /// (hf.co/OWNER/REPO[@REVISION]:QUANT), or paths of models inside the caches.
    #[arg(required = true)]
    models: Vec<String>,
    /// Print what would be deleted, and the space it would free, without deleting anything.
    #[arg(long, short = 'n')]
    dry_run: bool,
}

/// A cached model to delete.
#[derive(Debug, PartialEq)]
enum Target {
    /// A registry model's file in ridge's cache.
    Registry { name: String, path: PathBuf },
    /// A model in one snapshot of the Hub cache.
    Hub {
        name: String,
        model: cache::CachedModel,
    },
}

fn refuse(arg: &str) -> anyhow::Error {
    anyhow::anyhow!("ridge rm only removes cached models; delete {arg} yourself")
}

/// `p` made absolute with its folders' links resolved but not its own last component (a
/// snapshot file is a link into `blobs/`; its place in the snapshot is what names the model).
fn absolute(p: &Path) -> Result<PathBuf> {
    let name = p
        .file_name()
        .with_context(|| format!("{} names no file", p.display()))?;
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = parent
        .canonicalize()
        .with_context(|| format!("{}", parent.display()))?;
    Ok(dir.join(name))
}

/// What a path inside one of the caches stands for.
fn from_path(arg: &str, p: &Path) -> Result<Target> {
    let abs = absolute(p)?;
    if let Ok(reg) = registry::cache_dir().canonicalize() {
        if abs.parent() == Some(reg.as_path()) {
            if let Some(m) = registry::KNOWN_MODELS
                .iter()
                .find(|m| abs.file_name() == Some(std::ffi::OsStr::new(m.file_name)))
            {
                return Ok(Target::Registry {
                    name: m.name.to_string(),
                    path: registry::cached_path(m),
                });
            }
        }
    }
    let Ok(root) = cache::root().canonicalize() else {
        return Err(refuse(arg));
    };
    let Ok(rel) = abs.strip_prefix(&root) else {
        return Err(refuse(arg));
    };
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let repo = parts.first().and_then(|d| cache::repo_of_dir(d));
    match (repo, parts.get(1).map(String::as_str), parts.get(2)) {
        (Some(repo), Some("snapshots"), Some(commit)) if parts.len() > 3 => {
            let file = parts[3..].join("/");
            let files = hub::select::candidates(
                cache::snapshot_files(&repo, commit)
                    .iter()
                    .map(String::as_str),
            )
            .into_iter()
            .find(|c| c.files.contains(&file))
            .map_or_else(|| vec![file.clone()], |c| c.files);
            let model = cache::CachedModel {
                path: cache::snapshot_path(&repo, commit, &files[0]),
                repo,
                commit: commit.clone(),
                files,
            };
            Ok(Target::Hub {
                name: model.selecting_name(),
                model,
            })
        }
        _ => bail!(
            "{arg} is inside the Hub cache but is not a model file of a snapshot; \
             name the model as `ridge list` prints it"
        ),
    }
}

/// The cached model an argument names (an error when it names nothing cached).
fn target(arg: &str) -> Result<Target> {
    let p = Path::new(arg);
    if p.exists() || p.is_symlink() {
        return from_path(arg, p);
    }
    let not_cached = || anyhow::anyhow!("{arg} is not in the cache (see ridge list)");
    if let Some(m) = registry::find(arg) {
        let path = registry::cached_path(m);
        if !path.is_file() {
            return Err(not_cached());
        }
        return Ok(Target::Registry {
            name: m.name.to_string(),
            path,
        });
    }
    match hub::reference::parse(arg) {
        Some(Ok(r)) => {
            let model = hub::cached_model(&r)?.ok_or_else(not_cached)?;
            Ok(Target::Hub {
                name: arg.to_string(),
                model,
            })
        }
        Some(Err(e)) => bail!(e),
        None => Err(registry::RegistryError::Unknown(arg.to_string()).into()),
    }
}

/// What removing one model deletes.
#[derive(Default)]
struct Plan {
    /// Files and links, in deletion order.
    files: Vec<PathBuf>,
    /// Folders left empty, deepest first.
    dirs: Vec<PathBuf>,
    /// The repository folder, when nothing is left in it.
    repo_dir: Option<PathBuf>,
    /// Blobs kept because another snapshot still links to them.
    kept: Vec<PathBuf>,
    /// Bytes the deletions free.
    freed: u64,
}

fn size_of(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map_or(0, |m| if m.is_file() { m.len() } else { 0 })
}

/// Every file and link under `dir`, recursively (links are not followed).
fn entries_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                _ => out.push(p),
            }
        }
    }
    out
}

/// True when `dir` would hold nothing once `gone` is deleted.
fn empties(dir: &Path, gone: &HashSet<PathBuf>) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return true;
    };
    rd.flatten().all(|e| {
        let p = e.path();
        gone.contains(&p) || (e.file_type().is_ok_and(|t| t.is_dir()) && empties(&p, gone))
    })
}

/// Plans removing one Hub model; `gone` holds what earlier models of the same command delete
/// (so a dry run of two snapshots sharing a blob plans the blob's deletion once, at the last).
fn plan_hub(m: &cache::CachedModel, gone: &mut HashSet<PathBuf>) -> Plan {
    let mut plan = Plan::default();
    let repo_dir = cache::repo_dir(&m.repo);
    let snapshots = repo_dir.join("snapshots");
    let snap = snapshots.join(&m.commit);
    let blob_of = |link: &Path| -> Option<PathBuf> {
        let target = std::fs::read_link(link).ok()?;
        let name = target.file_name()?;
        Some(cache::blob_path(&m.repo, &name.to_string_lossy()))
    };
    let mut blobs = Vec::new();
    for f in &m.files {
        let link = cache::snapshot_path(&m.repo, &m.commit, f);
        if gone.contains(&link) || std::fs::symlink_metadata(&link).is_err() {
            continue;
        }
        match blob_of(&link) {
            Some(b) => blobs.push(b),
            None => plan.freed += size_of(&link), // a copy, not a link
        }
        gone.insert(link.clone());
        plan.files.push(link);
    }
    let still_linked: HashSet<PathBuf> = entries_under(&snapshots)
        .iter()
        .filter(|p| !gone.contains(*p))
        .filter_map(|p| blob_of(p))
        .collect();
    for b in blobs {
        if gone.contains(&b) {
            continue;
        }
        if still_linked.contains(&b) {
            if !plan.kept.contains(&b) {
                plan.kept.push(b);
            }
            continue;
        }
        let mut partial = b.clone().into_os_string();
        partial.push(".incomplete");
        for p in [b, PathBuf::from(partial)] {
            if std::fs::symlink_metadata(&p).is_ok() {
                plan.freed += size_of(&p);
                gone.insert(p.clone());
                plan.files.push(p);
            }
        }
    }
    // Folders of the removed links, up to the snapshot's own, that nothing else is left in.
    let mut dirs: Vec<PathBuf> = Vec::new();
    for f in &m.files {
        let mut d = cache::snapshot_path(&m.repo, &m.commit, f);
        while d.pop() && d.starts_with(&snap) {
            if !dirs.contains(&d) && empties(&d, gone) {
                dirs.push(d.clone());
            }
        }
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        gone.insert(d.clone());
    }
    plan.dirs = dirs;
    if plan.dirs.contains(&snap) {
        // Refs to a snapshot that is gone would dangle.
        for (name, commit) in cache::refs(&m.repo) {
            if commit == m.commit {
                let r = repo_dir.join("refs").join(&name);
                gone.insert(r.clone());
                plan.files.push(r);
            }
        }
    }
    let blobs_dir = repo_dir.join("blobs");
    if empties(&snapshots, gone) && empties(&blobs_dir, gone) {
        plan.repo_dir = Some(repo_dir);
    }
    plan
}

fn remove_file(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot delete {}", p.display()))
        }
        _ => Ok(()),
    }
}

fn execute(plan: &Plan) -> Result<()> {
    for f in &plan.files {
        remove_file(f)?;
    }
    for d in &plan.dirs {
        // Empty by the plan; something new inside (a concurrent pull) keeps it.
        let _ = std::fs::remove_dir(d);
    }
    if let Some(r) = &plan.repo_dir {
        let left =
            entries_under(&r.join("snapshots")).len() + entries_under(&r.join("blobs")).len();
        if left == 0 {
            std::fs::remove_dir_all(r).with_context(|| format!("cannot delete {}", r.display()))?;
        }
    }
    Ok(())
}

/// Runs `rm`.
pub fn main(a: Args) -> Result<()> {
    let mut targets: Vec<Target> = Vec::new();
    for arg in &a.models {
        let t = target(arg)?;
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    let verb = if a.dry_run { "would delete" } else { "deleted" };
    let mut gone = HashSet::new();
    let mut total = 0u64;
    for t in &targets {
        let (name, plan) = match t {
            Target::Registry { name, path } => {
                let plan = Plan {
                    freed: size_of(path),
                    files: vec![path.clone()],
                    ..Plan::default()
                };
                (name, plan)
            }
            Target::Hub { name, model } => (name, plan_hub(model, &mut gone)),
        };
        for f in &plan.files {
            println!("  {verb} {}", f.display());
        }
        for d in &plan.dirs {
            println!("  {verb} {}/", d.display());
        }
        if let Some(r) = &plan.repo_dir {
            println!("  {verb} {}/ (nothing left in it)", r.display());
        }
        for k in &plan.kept {
            println!("  kept {} (another snapshot links to it)", k.display());
        }
        if !a.dry_run {
            execute(&plan)?;
        }
        let what = if a.dry_run { "would free" } else { "freed" };
        println!(
            "{name}: {what} {} ({} bytes)",
            human_bytes(plan.freed),
            plan.freed
        );
        total += plan.freed;
    }
    if targets.len() > 1 {
        let what = if a.dry_run { "would free" } else { "freed" };
        println!("{what} {} in all ({total} bytes)", human_bytes(total));
    }
    Ok(())
}
