//! What a model argument names — a file, a registry name, or a Hub repository — and the one
//! place every command resolves it.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ridge_model::registry;

use crate::hub;

/// Resolves a `--model` argument to a GGUF path: an existing path as is, else a registry name
/// (pulled on first use), else a Hub name (from the cache, or pulled).
pub fn resolve(arg: &str, quiet: bool) -> Result<PathBuf> {
    let p = Path::new(arg);
    if p.exists() || registry::find(arg).is_some() {
        return Ok(registry::resolve(arg, quiet)?);
    }
    match hub::reference::parse(arg) {
        Some(Ok(r)) => hub::resolve(&r, quiet),
        Some(Err(e)) => anyhow::bail!(e),
        None => Ok(registry::resolve(arg, quiet)?),
    }
}
