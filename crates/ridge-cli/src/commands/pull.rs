//! `ridge pull [NAME]`: a registry name, or a Hub name (`hf.co/OWNER/REPO[:QUANT]`).

use anyhow::{bail, Result};
use ridge_model::registry;

/// Arguments of `pull`.
#[derive(clap::Args)]
pub struct Args {
    /// Model name: a registry name (default: smollm2-135m; see --list) or a Hub repository,
    /// `hf.co/OWNER/REPO[:QUANT]` (also `hf://OWNER/REPO`, `OWNER/REPO:QUANT`, or a file
    /// inside the repository: `hf.co/OWNER/REPO/path/model.gguf`).
    name: Option<String>,
    /// List the known models and exit.
    #[arg(long)]
    list: bool,
}

/// Runs `pull`.
pub fn main(a: Args) -> Result<()> {
    if a.list {
        println!(
            "{:<20} {:>7} {:>9} {:<8} ABOUT",
            "NAME", "PARAMS", "SIZE", "ARCH"
        );
        for m in registry::KNOWN_MODELS {
            println!(
                "{:<20} {:>7} {:>6.0} MB {:<8} {}",
                m.name,
                m.params,
                m.size as f64 / 1e6,
                m.arch,
                m.about
            );
        }
        return Ok(());
    }
    let name = a.name.as_deref().unwrap_or(registry::DEFAULT_MODEL);
    if registry::find(name).is_none() {
        if let Some(r) = crate::hub::reference::parse(name) {
            let r = r.map_err(anyhow::Error::msg)?;
            println!("{}", crate::hub::pull(&r, false)?.display());
            return Ok(());
        }
    }
    let Some(m) = registry::find(name) else {
        let names: Vec<_> = registry::KNOWN_MODELS.iter().map(|m| m.name).collect();
        bail!(
            "unknown model `{name}` (known: {}; or a Hub name, hf.co/OWNER/REPO[:QUANT])",
            names.join(", ")
        );
    };
    let path = registry::pull(m, false)?;
    println!("{}", path.display());
    Ok(())
}
