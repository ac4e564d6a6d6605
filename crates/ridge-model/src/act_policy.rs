//! How activations meet quantized weights, model-wide.
//!
//! Integer dot products against 8-bit activation blocks are the fast path, but rounding the
//! activations costs accuracy. Measured on SmolLM2-135M Q4_1 (prose, ctx 512, 4 chunks) against
//! an exact float64 evaluation of the same weights (perplexity 23.1694): f32 activations
//! everywhere land within 0.0001%; 8-bit everywhere +0.47%; f32 for the attention projections
//! (Q, K, V, output) and 8-bit for the feed-forward and the head +0.17%.

use std::str::FromStr;

/// Activation precision policy for quantized weight matrices (float weights always use f32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActPolicy {
    /// f32 activations everywhere: exact up to f32 rounding.
    F32,
    /// f32 for the attention projections, 8-bit for the feed-forward and output head.
    #[default]
    Mixed,
    /// 8-bit activations everywhere: fastest, least accurate.
    Int8,
}

impl FromStr for ActPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(ActPolicy::F32),
            "mixed" => Ok(ActPolicy::Mixed),
            "int8" => Ok(ActPolicy::Int8),
            _ => Err(format!("unknown activation policy `{s}` (f32, mixed, int8)")),
        }
    }
}
