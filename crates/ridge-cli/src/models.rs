//! What a model argument names — a file, a registry name, or a Hub repository — and the one
//! place every command resolves it ([`resolve`], which may download) or finds it without
//! downloading ([`locate`]).

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

/// Finds a model that is already here — an existing path, a cached registry model, or a Hub
/// model in the Hub cache — and never downloads (`ridge show`): anything else is a one-line
/// error saying how to fetch it.
pub fn locate(arg: &str) -> Result<PathBuf> {
    let p = Path::new(arg);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    let missing = || anyhow::anyhow!("{arg} is not downloaded: ridge pull {arg}");
    if let Some(m) = registry::find(arg) {
        let path = registry::cached_path(m);
        return if path.exists() {
            Ok(path)
        } else {
            Err(missing())
        };
    }
    match hub::reference::parse(arg) {
        Some(Ok(r)) => hub::cached(&r)?.ok_or_else(missing),
        Some(Err(e)) => anyhow::bail!(e),
        None => Err(registry::RegistryError::Unknown(arg.to_string()).into()),
    }
}
