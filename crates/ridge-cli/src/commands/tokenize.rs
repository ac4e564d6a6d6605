//! `ridge tokenize --model M (--file F | TEXT)`: ids as one JSON array, BOS added exactly when
//! the model's metadata says so and special tokens parsed, as `llama-tokenize` does.

use anyhow::{bail, Context, Result};

/// Arguments of `tokenize`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name.
    #[arg(long, short)]
    model: String,
    /// Read the text from a file.
    #[arg(long, short)]
    file: Option<std::path::PathBuf>,
    /// Treat special-token texts (e.g. `<|im_start|>`) as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// The text (when no --file).
    text: Option<String>,
}

/// Runs `tokenize`.
pub fn main(a: Args) -> Result<()> {
    let text = match (&a.file, &a.text) {
        (Some(f), None) => std::fs::read_to_string(f)
            .with_context(|| format!("{}: cannot read text file", f.display()))?,
        (None, Some(t)) => t.clone(),
        _ => bail!("give exactly one of --file or TEXT"),
    };
    let tok = crate::load::load_tokenizer(&a.model)?;
    let ids = tok.encode(&text, true, !a.no_parse_special)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
