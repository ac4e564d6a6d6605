//! Hyper-parameters read from GGUF metadata, validated before anything is sized from them.

use crate::ModelError;
use ridge_gguf::GgufFile;

/// Supported architectures (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, Mistral-style, SmolLM2.
    Llama,
}

/// A model's shape.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Architecture.
    pub arch: Architecture,
    /// Human-readable name (`general.name`), if any.
    pub name: String,
    /// Transformer layers.
    pub n_layers: usize,
    /// Model width.
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Feed-forward width.
    pub ffn_dim: usize,
    /// Vocabulary size (rows of the embedding table).
    pub vocab: usize,
    /// Trained context length.
    pub ctx_len: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// Number of rotated dimensions per head.
    pub rope_dim: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
}

impl ModelConfig {
    /// Elements of one K (or V) row in the cache: `n_kv_heads · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Elements of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Reads and validates the configuration.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, ModelError> {
        let path = f.path().display().to_string();
        let arch_name = f.get_str("general.architecture")?;
        let arch = match arch_name {
            "llama" => Architecture::Llama,
            other => {
                return Err(ModelError::Unsupported {
                    path,
                    message: format!("architecture `{other}` is not supported (supported: llama)"),
                })
            }
        };
        let k = |s: &str| format!("{arch_name}.{s}");
        let n_layers = f.get_usize_in(&k("block_count"), 1..=1024)?;
        let d_model = f.get_usize_in(&k("embedding_length"), 1..=1 << 16)?;
        let n_heads = f.get_usize_in(&k("attention.head_count"), 1..=1024)?;
        let n_kv_heads = match f.get(&k("attention.head_count_kv")) {
            Some(_) => f.get_usize_in(&k("attention.head_count_kv"), 1..=n_heads)?,
            None => n_heads,
        };
        let head_dim = match f.get(&k("attention.key_length")) {
            Some(_) => f.get_usize_in(&k("attention.key_length"), 1..=4096)?,
            None => d_model / n_heads,
        };
        let ffn_dim = f.get_usize_in(&k("feed_forward_length"), 1..=1 << 20)?;
        let ctx_len = f.get_usize_in(&k("context_length"), 1..=1 << 24)?;
        let rope_base = match f.get(&k("rope.freq_base")) {
            Some(_) => f.get_f64(&k("rope.freq_base"))? as f32,
            None => 10000.0,
        };
        let rope_dim = match f.get(&k("rope.dimension_count")) {
            Some(_) => f.get_usize_in(&k("rope.dimension_count"), 2..=head_dim)?,
            None => head_dim,
        };
        let norm_eps = f.get_f64(&k("attention.layer_norm_rms_epsilon"))? as f32;
        let embd = f.tensor("token_embd.weight")?;
        let vocab = embd.n_rows() as usize;
        let bad = |message: String| ModelError::Unsupported {
            path: path.clone(),
            message,
        };
        if n_heads % n_kv_heads != 0 {
            return Err(bad(format!(
                "head_count {n_heads} is not a multiple of head_count_kv {n_kv_heads}"
            )));
        }
        if head_dim % 2 != 0 || rope_dim % 2 != 0 {
            return Err(bad(format!(
                "head dimension {head_dim} / rope dimension {rope_dim} must be even"
            )));
        }
        if !(rope_base.is_finite() && rope_base > 0.0 && norm_eps.is_finite() && norm_eps >= 0.0) {
            return Err(bad(format!(
                "rope.freq_base {rope_base} or rms epsilon {norm_eps} out of range"
            )));
        }
        if vocab == 0 || vocab > 1 << 24 {
            return Err(bad(format!("vocabulary size {vocab} out of range")));
        }
        Ok(ModelConfig {
            arch,
            name: f
                .get("general.name")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string(),
            n_layers,
            d_model,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            vocab,
            ctx_len,
            rope_base,
            rope_dim,
            norm_eps,
        })
    }
}
