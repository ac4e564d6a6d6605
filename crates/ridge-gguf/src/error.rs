//! Errors of the GGUF reader. Every message names the file and what was wrong.

use std::path::PathBuf;

/// Anything that can go wrong opening or reading a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{path}: cannot read file: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file's structure is invalid.
    #[error("{path}: malformed GGUF: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A metadata key the caller needs is missing or has the wrong type.
    #[error("{path}: metadata key `{key}`: {message}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The key asked for.
        key: String,
        /// What was expected.
        message: String,
    },
    /// A tensor the caller needs is missing or has an unexpected shape or type.
    #[error("{path}: tensor `{name}`: {message}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor asked for.
        name: String,
        /// What was expected.
        message: String,
    },
}
