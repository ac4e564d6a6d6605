//! How activations meet quantized weights, model-wide.
//!
//! Integer dot products against 8-bit activation blocks are the fast path, but rounding the
//! activations costs accuracy. Measured on SmolLM2-135M Q4_1 (prose, ctx 512, 4 chunks) against
//! an exact float64 evaluation of the same weights (perplexity 23.1694): f32 activations
//! everywhere: +0.0001% (23.1694); 8-bit everywhere: +0.47%. With f32 for only some matrices:
//! attention output + FFN down −0.15%; FFN gate/up + down +0.06%; Q/K/V + attention output
//! +0.17%; Q/K/V + gate/up +0.25%. The inputs of the attention output and FFN down projections
//! (attention mix, SwiGLU product) are the heavy-tailed ones that 8-bit blocks round worst,
//! while the RMS-normed inputs of Q/K/V, gate/up and the head quantize well; `Mixed` keeps
//! those two in f32 (about a third of the weights).
//!
//! Gemma 3 270M Q4_K_M (same text and protocol, exact perplexity 22.3799; 2 chunks 21.2522):
//! f32 everywhere +0.0005%; f32 into attention output + FFN down +0.13% (2 chunks −0.05%);
//! attention output alone +0.13% (2 chunks +0.03%); FFN down alone (2 chunks) −0.48%; 8-bit
//! everywhere (2 chunks) +0.60%, outside the 0.5% bar. The attention mix is again the input
//! that needs f32, while the FFN down input does not measurably (Gemma's post-FFN norm
//! re-normalises that projection's output), and its Q6_K weights are ~3× slower with f32
//! activations. So `Mixed` means "f32 where it measurably helps": both projections for llama,
//! the attention output for gemma3 (the architecture decides, in `layer.rs`'s `ActPlan`).
//! With 8-bit activations the result moves by ~0.1% under perturbations as small as a 1e-7
//! change in the GELU, so single measurements closer than that are noise.
//!
//! Since 2026-11-30 (later) `Mixed` gives those matrices 16-bit activation blocks instead of f32
//! where the weight format has a 16-bit integer path (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K; Q6_K
//! keeps f32): 16-bit blocks everywhere measure 23.1691 on SmolLM2 (f64 23.1694, −0.001%), i.e. they
//! are as accurate as f32 here, while their integer dot products run ~1.5–1.7× faster than
//! dequantizing every weight to f32 (decode is ~7% faster end to end). `Mixed` on SmolLM2 now
//! measures 23.2018 (+0.14%; it was 23.1343, −0.15%, with f32: the same 8-bit noise in the other
//! matrices, of the same size and opposite sign). Gemma 3 (attention output Q4_K, now 16-bit):
//! 22.4365 (+0.25%; 22.4085, +0.13%, with f32), inside the bar, the difference again 8-bit noise.
//!
//! Since session 4 (tiled weights) gemma3's `Mixed` also gives the FFN down projection 16-bit
//! blocks (Q4_K layers) or f32 (Q6_K layers): with 8-bit blocks there its perplexity wandered
//! between +0.18% and +0.52% under 1-ulp changes (a `exp_approx` variant differing in 126 of
//! 300 million inputs moved it from +0.37% to +0.52%, across the bar); with 16-bit blocks it is
//! 22.3795 (−0.002%) under both variants. It costs prefill speed (Q6_K in f32: 1.43× → 1.29×
//! llama.cpp in same-run comparisons an hour apart) and nothing measurable in decode.

//! Qwen2.5 (session 11, 2026-12-01; prose, ctx 512, 4 chunks, float64 references 12.8420 for
//! the 1.5B Q4_K_M and 33.2054 for the 0.5B): 8-bit everywhere measures 12.8534 (+0.088%) and
//! 33.1937 (−0.035%), 16-bit into the attention output and FFN down 12.8543 (+0.095%) and
//! 33.1960 (−0.028%) — no measurable difference (llama.cpp, which also rounds activations to 8
//! bits, reads 12.8963, +0.42%) — while 8-bit prefill of 512 tokens on the 1.5B runs 150 tok/s
//! against 121 (the 16-bit path does two byte products per weight). So `Mixed` is 8-bit
//! everywhere for `qwen2`; qwen3 keeps llama's plan until a real model measures it.
//!
//! Since session 25 (2026-12-04) the 8-bit blocks of Q4_K matrices have power-of-two scales
//! (`ridge_kernels::act::pow2_scale`: up to 2× coarser than each block's own), which lets the
//! AVX-512 Q4_K kernel replace a multiply per (sub-block, token) by an exponent add: the 1.5B's
//! 512-token prefill 196.5–196.8 → 205.6–211.4 tok/s on a Zen 4. Measured on the 1.5B against
//! the previous build (same text): ctx 512 × 4 chunks 12.8534 → 12.8865 (+0.09% → +0.35%
//! against the exact 12.8420; llama.cpp +0.42%), ctx 256 × 12 chunks 14.7294 → 14.7228, ctx
//! 128 × 25 chunks 17.7774 → 17.7935 (f32 17.7777) — within the wander of 8-bit rounding
//! described above, and on average slightly worse, as a coarser scale should be. SmolLM2
//! (Q4_1) and Gemma 3 270M (whose 8-bit matrices are not Q4_K) are unchanged.

use std::str::FromStr;

/// Activation precision policy for quantized weight matrices (float weights always use f32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActPolicy {
    /// f32 activations everywhere: exact up to f32 rounding.
    F32,
    /// 16-bit blocks (or f32 where the format has no 16-bit path) where 8-bit activations
    /// measurably cost accuracy, 8-bit elsewhere: into the attention output and FFN down
    /// projections.
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
            _ => Err(format!(
                "unknown activation policy `{s}` (f32, mixed, int8)"
            )),
        }
    }
}
