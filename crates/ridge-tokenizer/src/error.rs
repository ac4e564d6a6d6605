//! The one error type of this crate. Messages name the metadata key or value at fault and what
//! was expected, so a bad GGUF can be diagnosed from the message alone.

use ridge_gguf::GgufError;

/// Anything that can go wrong building a tokenizer, encoding text or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Reading a metadata key failed (missing, or of the wrong type); the message names the file
    /// and the key.
    #[error(transparent)]
    Gguf(#[from] GgufError),

    /// The vocabulary kind or a feature of it is not implemented (yet).
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),

    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    #[error("unknown pre-tokenizer `{name}` (tokenizer.ggml.pre); supported: {supported}")]
    UnknownPreTokenizer {
        /// The name found in the file.
        name: String,
        /// The names that are supported, comma separated.
        supported: String,
    },

    /// The vocabulary metadata is inconsistent: wrong array element type, lengths that do not
    /// match, ids out of range, merges naming tokens that do not exist, ...
    #[error("malformed tokenizer metadata `{key}`: {message}")]
    Malformed {
        /// The metadata key at fault.
        key: String,
        /// What is wrong and what was expected.
        message: String,
    },

    /// The BPE engine failed on some input (should not happen for a validated vocabulary).
    #[error("tokenization failed: {0}")]
    Encode(String),

    /// The file has no `tokenizer.chat_template`.
    #[error("the model has no chat template (metadata key `tokenizer.chat_template` is missing)")]
    MissingChatTemplate,

    /// The chat template failed to compile or to render (including `raise_exception` calls,
    /// exhausted fuel and exceeded recursion depth).
    #[error("chat template: {0}")]
    ChatTemplate(String),
}

impl TokenizerError {
    pub(crate) fn malformed(key: &str, message: impl Into<String>) -> Self {
        TokenizerError::Malformed {
            key: key.to_string(),
            message: message.into(),
        }
    }
}
