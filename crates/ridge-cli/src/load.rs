//! Resolving `--model` and loading the model with its tokenizer.

use anyhow::{Context, Result};
use ridge_model::{registry, ActPolicy, Model};
use std::sync::OnceLock;

/// The activation policy chosen on the command line (set once in `main`).
pub static ACT_POLICY: OnceLock<ActPolicy> = OnceLock::new();
use ridge_tokenizer::Tokenizer;

/// A model ready to run.
pub struct Loaded {
    /// The model.
    pub model: Model,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
}

/// Resolves a path or known name (pulling on first use) and loads model and tokenizer.
pub fn load(model: Option<&str>) -> Result<Loaded> {
    load_quiet(model, false)
}

/// [`load`], without the progress bar and spinner when `quiet` (a server loading a model
/// on demand).
pub fn load_quiet(model: Option<&str>, quiet: bool) -> Result<Loaded> {
    let arg = model.unwrap_or(registry::DEFAULT_MODEL);
    let path = crate::models::resolve(arg, quiet)?;
    let spinner = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        loading_spinner(&path)
    };
    let mut model = Model::load(&path)?;
    spinner.finish_and_clear();
    model.set_act_policy(ACT_POLICY.get().copied().unwrap_or_default());
    let tokenizer = Tokenizer::from_gguf(model.gguf())
        .with_context(|| format!("{}: tokenizer", path.display()))?;
    Ok(Loaded { model, tokenizer })
}

/// A spinner while the weights are mapped and repacked into tiles (seconds for a 1 GB model).
fn loading_spinner(path: &std::path::Path) -> indicatif::ProgressBar {
    let size: u64 = ridge_gguf::shard_paths(path)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    crate::progress::spinner(format!(
        "loading {name} ({:.0} MB): mapping and repacking the weights for this CPU",
        size as f64 / 1e6
    ))
}

/// Loads only the tokenizer (for `tokenize`, which needs no weights bound).
pub fn load_tokenizer(model: &str) -> Result<Tokenizer> {
    let path = crate::models::resolve(model, false)?;
    let file = ridge_gguf::GgufFile::open(&path)?;
    Tokenizer::from_gguf(&file).with_context(|| format!("{}: tokenizer", path.display()))
}
