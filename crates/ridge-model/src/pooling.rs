//! How a sequence's final hidden states become one embedding vector.
//!
//! The model's half of embeddings is small: [`crate::Model::forward_outputs`] hands back the
//! final hidden states (after the output norm, where the LM head would read them) of the rows
//! that ask, and [`Pooling`] names how a caller folds those rows into one vector. The folding
//! itself lives with whoever sees a sequence whole (the engine, whose prompts arrive in
//! chunks); this module only reads what the file declares.
//!
//! The declaration is GGUF's `{arch}.pooling_type`, with llama.cpp's numbering (0 none,
//! 1 mean, 2 cls, 3 last, 4 rank). A causal LM converted for generation carries no such key,
//! and llama.cpp then pools nothing (`none`: one vector per token, which its server refuses
//! for OpenAI's endpoint); ridge follows it, so such a model needs a pooling chosen at serve
//! time.

use ridge_gguf::GgufFile;

use crate::ModelError;

/// How the hidden states of a sequence are pooled into one vector (llama.cpp's enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// No pooling: one vector per token (what a file without a declaration gets).
    None,
    /// The mean over every token.
    Mean,
    /// The first token's state (BERT's `[CLS]`).
    Cls,
    /// The last token's state (decoder-only embedding models).
    Last,
    /// A classifier head over the first token, scoring a query–document pair (rerankers).
    Rank,
}

impl Pooling {
    /// The value of `{arch}.pooling_type` (llama.cpp's numbering), if it is one.
    pub fn from_gguf_id(id: u64) -> Option<Self> {
        Some(match id {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// The lowercase name (`mean`, `last`, …), as flags and llama.cpp spell it.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// Parses a name as [`Pooling::name`] writes it.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Pooling::None,
            Pooling::Mean,
            Pooling::Cls,
            Pooling::Last,
            Pooling::Rank,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    /// What `f` declares: its `{arch}.pooling_type`, or [`Pooling::None`] without one (as
    /// llama.cpp reads it). A value outside the enum is an error naming the key.
    pub fn declared(f: &GgufFile) -> Result<Self, ModelError> {
        let arch = f.get_str("general.architecture")?;
        let key = format!("{arch}.pooling_type");
        if f.get(&key).is_none() {
            return Ok(Pooling::None);
        }
        let id = f.get_u64(&key)?;
        Pooling::from_gguf_id(id).ok_or_else(|| ModelError::Unsupported {
            path: f.path().display().to_string(),
            message: format!("{key} is {id}; expected 0 (none) to 4 (rank)"),
        })
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_follow_llama_cpp() {
        let want = ["none", "mean", "cls", "last", "rank"];
        for (id, name) in want.iter().enumerate() {
            let p = Pooling::from_gguf_id(id as u64).unwrap();
            assert_eq!(p.name(), *name);
            assert_eq!(Pooling::parse(name), Some(p));
        }
        assert_eq!(Pooling::from_gguf_id(5), None);
        assert_eq!(Pooling::parse("max"), None);
    }
}
