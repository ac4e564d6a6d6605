//! Errors of model loading and execution.

/// Anything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The GGUF file could not be read or lacks something.
    #[error(transparent)]
    Gguf(#[from] ridge_gguf::GgufError),
    /// The file is a valid GGUF but not a model ridge can run.
    #[error("{path}: {message}")]
    Unsupported {
        /// The file.
        path: String,
        /// What is not supported.
        message: String,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab})")]
    BadToken {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// The KV cache has no room for the tokens asked for.
    #[error("KV cache full: {needed} more blocks needed, {free} free")]
    KvFull {
        /// Blocks needed.
        needed: usize,
        /// Blocks free.
        free: usize,
    },
    /// A sequence would grow past the model's context length.
    #[error("sequence of {len} tokens exceeds the context length {ctx}")]
    ContextOverflow {
        /// Requested length.
        len: usize,
        /// Context length.
        ctx: usize,
    },
    /// A batch that is inconsistent with the cache (a caller bug, reported not panicked).
    #[error("invalid batch: {0}")]
    BadBatch(String),
}
