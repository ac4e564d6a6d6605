//! `ridge list`: every model already on this machine — registry models in ridge's cache and
//! GGUF models in the Hugging Face cache — with its size, architecture, quantisation and
//! parameter count, so that what can run without a download, and what takes the disk, is one
//! command away.
//!
//! Each row is read from the file's own header (memory-mapped, no weights read), not from a
//! catalogue, so it is true of the bytes on disk; a file that cannot be read is listed with the
//! reason instead of ending the listing.

use std::path::PathBuf;

use anyhow::Result;
use ridge_model::registry;
use serde_json::{json, Value};

use crate::hub::cache;
use crate::inspect::{self, human_bytes, human_count};

/// Arguments of `list`.
#[derive(clap::Args)]
pub struct Args {
    /// Also print each model's path.
    #[arg(long, short)]
    verbose: bool,
    /// Print a JSON array of objects instead of the table.
    #[arg(long)]
    json: bool,
}

/// One cached model, before its header is read.
struct Found {
    name: String,
    source: String,
    /// The first file (what `--model` opens).
    path: PathBuf,
    /// Every file of the model.
    files: Vec<PathBuf>,
}

/// Every cached model: registry models in [`registry::KNOWN_MODELS`] order, then the Hub
/// cache's, by repository and snapshot.
fn found() -> Vec<Found> {
    let mut out = Vec::new();
    for m in registry::KNOWN_MODELS {
        let path = registry::cached_path(m);
        if path.is_file() {
            out.push(Found {
                name: m.name.to_string(),
                source: "registry".into(),
                files: vec![path.clone()],
                path,
            });
        }
    }
    for m in cache::models() {
        let short: String = m.commit.chars().take(7).collect();
        out.push(Found {
            name: m.selecting_name(),
            source: format!("hub {}@{short}", m.repo),
            files: m
                .files
                .iter()
                .map(|f| cache::snapshot_path(&m.repo, &m.commit, f))
                .collect(),
            path: m.path,
        });
    }
    out
}

/// A model's row as JSON: the table's fields, plus exact numbers and the path.
fn row(f: &Found) -> Value {
    let base = json!({
        "name": f.name,
        "source": f.source,
        "path": f.path,
        "files": f.files,
    });
    let mut o = base.as_object().cloned().unwrap_or_default();
    match inspect::Model::open(&f.path) {
        Ok(m) => {
            let n = m.parameters();
            let size = m.size_bytes();
            o.insert("size_bytes".into(), json!(size));
            o.insert("size".into(), json!(human_bytes(size)));
            o.insert("arch".into(), json!(m.arch()));
            o.insert("quant".into(), json!(m.quant()));
            o.insert("weight_type".into(), json!(m.weight_type()));
            o.insert("parameters".into(), json!(n));
            o.insert("params".into(), json!(human_count(n)));
        }
        Err(e) => {
            let size: u64 = f
                .files
                .iter()
                .filter_map(|p| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum();
            o.insert("size_bytes".into(), json!(size));
            o.insert("size".into(), json!(human_bytes(size)));
            o.insert("error".into(), json!(format!("{e:#}").replace('\n', " ")));
        }
    }
    Value::Object(o)
}

/// Runs `list`.
pub fn main(a: Args) -> Result<()> {
    let rows: Vec<Value> = found().iter().map(row).collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no models yet: ridge pull {} (or ridge pull hf.co/OWNER/REPO:QUANT)",
            registry::DEFAULT_MODEL
        );
        return Ok(());
    }
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let mut table: Vec<Vec<String>> = vec![["NAME", "SIZE", "ARCH", "QUANT", "PARAMS", "SOURCE"]
        .map(String::from)
        .to_vec()];
    if a.verbose {
        table[0].push("PATH".into());
    }
    for r in &rows {
        let arch = match r.get("error") {
            Some(e) => format!("error: {}", s(e)),
            None => s(&r["arch"]),
        };
        let mut line = vec![
            s(&r["name"]),
            s(&r["size"]),
            arch,
            s(&r["quant"]),
            s(&r["params"]),
            s(&r["source"]),
        ];
        if a.verbose {
            line.push(s(&r["path"]));
        }
        table.push(line);
    }
    print_table(&table, &[1, 4]);
    Ok(())
}

/// Prints rows as aligned columns (two spaces apart); columns in `right` are right-aligned.
pub fn print_table(rows: &[Vec<String>], right: &[usize]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let w = widths[c];
            let last = c + 1 == r.len();
            if c > 0 {
                line.push_str("  ");
            }
            if right.contains(&c) {
                line.push_str(&format!("{cell:>w$}"));
            } else if last {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}"));
            }
        }
        println!("{line}");
    }
}
