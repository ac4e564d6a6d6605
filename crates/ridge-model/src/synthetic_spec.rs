//! The shapes of the synthetic files (`synthetic.rs` writes most architectures,
//! `synthetic_gemma4.rs` Gemma 4) and the pieces both writers share: the random numbers, the
//! byte-level vocabulary, the tensor type ids. A module of its own so that both writers import
//! it and neither imports the other's.

use ridge_gguf::{ArrayValue, GgmlType, GgufWriter, MetadataValue};
use ridge_kernels::DType;

use crate::Architecture;

/// The rank head of a synthetic reranker, in the layout llama.cpp loads for qwen3:
/// `cls.output.weight` (f32, GGUF dims `[d_model, n_out]` with `n_out` the number of labels, 1
/// without), `{arch}.classifier.output_labels` when there are labels, and the rerank prompt
/// template `tokenizer.chat_template.rerank` when one is given.
#[derive(Clone, Debug)]
pub struct SyntheticRank {
    /// The output labels (Qwen3-Reranker: `["yes", "no"]`).
    pub labels: Vec<String>,
    /// The template with `{query}` and `{document}`, if any.
    pub template: Option<String>,
}

/// Shape and formats of a synthetic model.
#[derive(Clone, Debug)]
pub struct SyntheticSpec {
    /// Architecture written to `general.architecture` (with its tensors and keys).
    pub arch: Architecture,
    /// Layers.
    pub n_layers: usize,
    /// Width (multiple of 32).
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// KV heads.
    pub n_kv_heads: usize,
    /// Elements per head; `None` is `d_model / n_heads`. Written as `attention.key_length`
    /// for gemma3 (`n_heads · head_dim` must be a multiple of 32).
    pub head_dim: Option<usize>,
    /// Gemma 3's and gpt-oss's `attention.sliding_window` (ignored for the others).
    pub sliding_window: usize,
    /// FFN width (multiple of 32).
    pub ffn_dim: usize,
    /// Context length written to the metadata.
    pub ctx_len: usize,
    /// Format of the layer matrices.
    pub dtype: DType,
    /// Format of the embedding table.
    pub embd_dtype: DType,
    /// Write a separate `output.weight` (else the head is tied to the embeddings).
    pub separate_output: bool,
    /// RNG seed for the weights.
    pub seed: u64,
    /// Write Llama 3's per-dimension RoPE frequency factors (`rope_freqs.weight`), computed as
    /// Llama 3.1's converter does with factor 8, low/high frequency factors 1 and 4 and an
    /// original context of `ctx_len` (so that on a tiny head some dimensions keep their
    /// frequency, some are divided by 8 and some fall in the smoothed band between).
    pub rope_freqs: bool,
    /// Tokens in the vocabulary: the 257 of [`SYNTHETIC_VOCAB`], padded with plain tokens
    /// `<|pad_N|>` up to this count when larger (a real model's head size for speed runs).
    pub vocab: usize,
    /// A routed feed-forward (required for qwen2moe, qwen3moe and olmoe; with llama, a
    /// Mixtral-style file); `None`: dense.
    pub moe: Option<SyntheticMoe>,
    /// Format of the stacked expert tensors where it differs from `dtype` (gpt-oss ships its
    /// experts in MXFP4 beside 8-bit attention).
    pub expert_dtype: Option<DType>,
    /// `rope.scaling.type` and `rope.scaling.factor` to write (`yarn` also gets an original
    /// context of `ctx_len / 4`); gpt-oss writes its own YaRN keys when this is `None`.
    pub rope_scaling: Option<(&'static str, f32)>,
    /// A reranker's head: `{arch}.pooling_type = 4` and `cls.output.weight`, as Qwen3-Reranker
    /// GGUFs carry them (see [`SyntheticRank`]).
    pub rank: Option<SyntheticRank>,
    /// A hybrid's recurrent layers (required for qwen35; see [`SyntheticHybrid`]).
    pub hybrid: Option<SyntheticHybrid>,
    /// Rotated dimensions per head where fewer than the head (`rope.dimension_count`; not
    /// for the hybrids, whose [`SyntheticHybrid::rope_dim`] it is).
    pub rope_dim: Option<usize>,
    /// The original context (`rope.scaling.original_context_length`) where it is not
    /// `ctx_len / 4`: YaRN's, and phi3's, whose LongRoPE takes its long factors when the
    /// context exceeds it.
    pub rope_orig_ctx: Option<usize>,
    /// Write the per-head Q/K norms an architecture has only optionally (glm4moe).
    pub qk_norm: bool,
    /// Latent attention's shape (required for deepseek2; see [`SyntheticMla`]).
    pub mla: Option<SyntheticMla>,
    /// Gemma 4's layer kinds, shared K/V and per-layer embeddings (gemma4; `None` takes
    /// [`SyntheticGemma4::default`]).
    pub gemma4: Option<SyntheticGemma4>,
}

/// Gemma 4's shape beyond the common fields, in llama.cpp's layout (`synthetic_gemma4.rs`):
/// the spec's `head_dim` and `n_kv_heads` are the global layers', these the sliding layers'.
#[derive(Clone, Debug)]
pub struct SyntheticGemma4 {
    /// Layer `i` is global when `(i + 1) % period == 0`, else sliding.
    pub period: usize,
    /// The sliding layers' head width and K/V heads.
    pub head_dim_swa: usize,
    pub n_kv_heads_swa: usize,
    /// Rotated dimensions of a sliding head (`rope.dimension_count_swa`).
    pub rope_dim_swa: usize,
    /// Pairs of a global head that rotate ("proportional" RoPE: the others get a divisor of
    /// 1e30 in `rope_freqs.weight`).
    pub rotated_pairs: usize,
    /// The last layers reading an earlier layer's K/V (`attention.shared_kv_layers`).
    pub shared_kv_layers: usize,
    /// Per-layer token embedding width (0: none).
    pub ple_dim: usize,
    /// The sharing layers' feed-forward twice as wide (a per-layer `feed_forward_length`).
    pub double_wide: bool,
    /// No `attn_v`: values are the keys.
    pub k_eq_v: bool,
    /// Final-logit soft-cap.
    pub softcap: Option<f32>,
}

impl Default for SyntheticGemma4 {
    fn default() -> Self {
        SyntheticGemma4 {
            period: 3,
            head_dim_swa: 16,
            n_kv_heads_swa: 2,
            rope_dim_swa: 16,
            rotated_pairs: 4,
            shared_kv_layers: 0,
            ple_dim: 0,
            double_wide: false,
            k_eq_v: false,
            softcap: Some(30.0),
        }
    }
}

/// Latent attention's shape (deepseek2), in llama.cpp's split layout: `attn_q` or
/// `attn_q_a` + `attn_q_a_norm` + `attn_q_b`, `attn_kv_a_mqa`, `attn_kv_a_norm`, and the
/// per-head `attn_k_b` (`[nope, kv_lora, heads]`) and `attn_v_b` (`[kv_lora, v_head, heads]`).
#[derive(Clone, Debug)]
pub struct SyntheticMla {
    /// Query low rank (`None`: one `attn_q`).
    pub q_lora: Option<usize>,
    /// Latent width.
    pub kv_lora: usize,
    /// Unrotated part of a query head.
    pub nope: usize,
    /// Rotated part (`rope.dimension_count`).
    pub rope: usize,
    /// A head's value width.
    pub v_head: usize,
}

/// The recurrent layers of a synthetic hybrid (qwen35), in llama.cpp's layout: per recurrent
/// layer `attn_qkv`, `attn_gate`, `ssm_beta`, `ssm_alpha`, `ssm_out` in the spec's format and
/// `ssm_conv1d`, `ssm_dt.bias`, `ssm_a`, `ssm_norm` in f32; per attention layer a query
/// projection twice as wide (queries and output gates) with per-head Q/K norms.
#[derive(Clone, Debug, Default)]
pub struct SyntheticHybrid {
    /// Query/key heads of the recurrent layers (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of `n_k_heads`.
    pub n_v_heads: usize,
    /// Elements per recurrent head (`ssm.state_size`).
    pub head_dim: usize,
    /// Convolution taps (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Every this-many-th layer attends (`full_attention_interval`).
    pub interval: usize,
    /// Rotated dimensions of the attention heads (`rope.dimension_count`).
    pub rope_dim: usize,
    /// `rope.dimension_sections` (in pairs; Qwen3.5 ships `[11, 11, 10, 0]` for 64 dims;
    /// not written for qwen3next, which has none).
    pub sections: [i32; 4],
    /// qwen3next: the first converter's fused `ssm_in` instead of `attn_qkv` + `attn_gate`.
    pub legacy_qkvz: bool,
}

/// The experts of a synthetic mixture, in llama.cpp's layout: a router `ffn_gate_inp`
/// (`[d, E]`, f32) and stacked `ffn_{gate,up}_exps` (`[d, f, E]`) and `ffn_down_exps`
/// (`[f, d, E]`) in the spec's format; for qwen2moe also the shared expert (`ffn_*_shexp`,
/// `ffn_gate_inp_shexp`).
#[derive(Clone, Debug)]
pub struct SyntheticMoe {
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts per token.
    pub n_used: usize,
    /// One expert's width (written as `expert_feed_forward_length` for the qwen mixtures;
    /// llama and olmoe take `ffn_dim` as their experts' width, so it must equal it there).
    pub expert_ffn: usize,
    /// The shared expert's width (qwen2moe; written as `expert_shared_feed_forward_length`).
    pub shared_ffn: Option<usize>,
    /// Scale of the router weights over `1/√d`: larger spreads the router's logits, so the
    /// top-k choice is far from ties.
    pub router_scale: f32,
    /// Leading dense layers (glm4moe's `leading_dense_block_count`).
    pub dense_lead: usize,
    /// deepseek2: sigmoid gating with a selection bias (else softmax).
    pub sigmoid: bool,
    /// deepseek2: group-limited routing `(groups, groups used)`.
    pub groups: Option<(usize, usize)>,
}

impl SyntheticMoe {
    /// `n_expert` experts of width `expert_ffn`, `n_used` per token, an optional shared
    /// expert, and a router spread 4× wide (top-k choices far from ties).
    pub fn new(
        n_expert: usize,
        n_used: usize,
        expert_ffn: usize,
        shared_ffn: Option<usize>,
    ) -> Self {
        SyntheticMoe {
            n_expert,
            n_used,
            expert_ffn,
            shared_ffn,
            router_scale: 4.0,
            dense_lead: 0,
            sigmoid: false,
            groups: None,
        }
    }
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            arch: Architecture::Llama,
            n_layers: 2,
            d_model: 64,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: None,
            sliding_window: 4,
            ffn_dim: 96,
            ctx_len: 64,
            dtype: DType::Q4_1,
            embd_dtype: DType::Q8_0,
            separate_output: false,
            seed: 1,
            rope_freqs: false,
            vocab: SYNTHETIC_VOCAB,
            moe: None,
            expert_dtype: None,
            rope_scaling: None,
            rank: None,
            hybrid: None,
            rope_dim: None,
            rope_orig_ctx: None,
            qk_norm: false,
            mla: None,
            gemma4: None,
        }
    }
}

/// Number of tokens in the synthetic vocabulary (256 bytes + `<|endoftext|>`).
pub const SYNTHETIC_VOCAB: usize = 257;

/// The GPT-2 byte-to-character map: printable bytes stand for themselves, the rest are shifted
/// to code points from 256 up, so every byte has a visible one-character token.
pub fn gpt2_byte_char(b: u8) -> char {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

pub(crate) fn to_dtype_id(d: DType) -> GgmlType {
    match d {
        DType::F32 => GgmlType::F32,
        DType::F16 => GgmlType::F16,
        DType::BF16 => GgmlType::BF16,
        DType::Q8_0 => GgmlType::Q8_0,
        DType::Q4_0 => GgmlType::Q4_0,
        DType::Q4_1 => GgmlType::Q4_1,
        DType::Q5_0 => GgmlType::Q5_0,
        DType::Q5_1 => GgmlType::Q5_1,
        DType::Q4_K => GgmlType::Q4_K,
        DType::Q5_K => GgmlType::Q5_K,
        DType::Q6_K => GgmlType::Q6_K,
        DType::MXFP4 => GgmlType::MXFP4,
        DType::Q2_K => GgmlType::Q2_K,
        DType::Q3_K => GgmlType::Q3_K,
        DType::IQ4_NL => GgmlType::IQ4_NL,
        DType::IQ4_XS => GgmlType::IQ4_XS,
        DType::IQ2_XXS => GgmlType::IQ2_XXS,
        DType::IQ2_XS => GgmlType::IQ2_XS,
        DType::IQ2_S => GgmlType::IQ2_S,
        DType::IQ3_XXS => GgmlType::IQ3_XXS,
        DType::IQ3_S => GgmlType::IQ3_S,
        DType::IQ1_S => GgmlType::IQ1_S,
        DType::IQ1_M => GgmlType::IQ1_M,
        DType::TQ1_0 => GgmlType::TQ1_0,
        DType::TQ2_0 => GgmlType::TQ2_0,
    }
}

/// xorshift64 behind a `Cell`, so every tensor writer can draw from the one stream.
pub(crate) struct Rng(pub(crate) std::cell::Cell<u64>);
impl Rng {
    /// The next value, uniform in `[−1, 1)`.
    pub(crate) fn next(&self) -> f32 {
        let mut x = self.0.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.set(x);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Writes the synthetic byte-level vocabulary (see the module docs), padded to `vocab` tokens
/// where larger; returns the vocabulary's size.
pub(crate) fn write_byte_vocab(w: &mut GgufWriter, vocab: usize) -> usize {
    let s = |v: &str| MetadataValue::String(v.into());
    let u = |v: usize| MetadataValue::U32(v as u32);
    w.meta("tokenizer.ggml.model", s("gpt2"))
        .meta("tokenizer.ggml.pre", s("gpt-2")); // the name llama.cpp knows
    let mut tokens: Vec<String> = (0..=255u8).map(|b| gpt2_byte_char(b).to_string()).collect();
    tokens.push("<|endoftext|>".into());
    let mut types = vec![1i32; 256];
    types.push(3);
    let vocab = vocab.max(SYNTHETIC_VOCAB);
    tokens.extend((SYNTHETIC_VOCAB..vocab).map(|i| format!("<|pad_{i}|>")));
    types.resize(vocab, 1);
    w.meta(
        "tokenizer.ggml.tokens",
        MetadataValue::Array(ArrayValue::String(tokens)),
    )
    .meta(
        "tokenizer.ggml.token_type",
        MetadataValue::Array(ArrayValue::I32(types)),
    )
    .meta(
        "tokenizer.ggml.merges",
        MetadataValue::Array(ArrayValue::String(vec![])),
    )
    .meta("tokenizer.ggml.bos_token_id", u(256))
    .meta("tokenizer.ggml.eos_token_id", u(256))
    .meta("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false));
    vocab
}
