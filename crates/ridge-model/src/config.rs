//! Hyper-parameters read from GGUF metadata, validated before anything is sized from them.

use crate::hybrid::RecurrentConfig;
use crate::per_layer::trunk;
use crate::ModelError;
use ridge_gguf::{GgufFile, MetadataValue};

/// Supported architectures (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, Mistral-style, SmolLM2.
    Llama,
    /// Gemma 3 (text): scaled embeddings, Q/K norms, sandwich norms, GeGLU, and
    /// sliding-window attention on five layers of every six.
    Gemma3,
    /// Qwen2 / Qwen2.5 (and the models built on them): llama's layer with biases on the
    /// Q/K/V projections and RoPE in the NEOX (halves) layout.
    Qwen2,
    /// Qwen3 (dense): qwen2's layer without the Q/K/V biases and with a per-head RMSNorm on
    /// queries and keys before RoPE (as Gemma 3 has); the head dimension may be set apart from
    /// `d_model / n_heads` by `attention.key_length`.
    Qwen3,
    /// Qwen1.5-MoE / Qwen2-MoE: qwen2's attention (Q/K/V biases) over a routed feed-forward
    /// (softmax router, top-k weights *not* renormalised) plus a shared expert scaled by a
    /// sigmoid gate.
    Qwen2Moe,
    /// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): qwen3's attention over
    /// a routed feed-forward (softmax router, top-k weights renormalised).
    Qwen3Moe,
    /// OLMoE: a routed feed-forward (top-k not renormalised) under attention with an RMSNorm
    /// over the whole query and key vectors (not per head), RoPE in the NEOX layout.
    Olmoe,
    /// gpt-oss (gpt-oss-20b, gpt-oss-120b): biased attention with a learnt sink logit per
    /// head, sliding-window attention on every other layer, YaRN RoPE, and a routed
    /// feed-forward whose router and experts carry biases: top-k of the router logits,
    /// softmax over those k, experts with a clamped SwiGLU (`x·σ(1.702x)·(y + 1)`), their
    /// weights in MXFP4.
    GptOss,
    /// Qwen3.5 / Qwen3.6 (dense): a hybrid. Three of four layers are Gated DeltaNet (linear
    /// attention over a fixed-size state per sequence, see `hybrid.rs`), the fourth is
    /// attention whose query projection also yields a sigmoid output gate, with per-head Q/K
    /// norms and partial interleaved M-RoPE; the pre-FFN norm is `post_attention_norm`.
    Qwen35,
    /// Qwen3.5 / Qwen3.6 mixtures (35B-A3B, 122B-A10B, 397B-A17B): qwen35's layers over
    /// qwen3moe's routed feed-forward (softmax router, top-k renormalised) plus a shared expert
    /// scaled by a sigmoid gate, as qwen2moe has.
    Qwen35Moe,
    /// Qwen3-Next (80B-A3B): qwen35moe's layers with Qwen3-Next's projections — the Gated
    /// DeltaNet's β and α from one `ssm_ba` matrix (per key head, its value heads' β then α),
    /// files of the first converter with queries, keys, values and `z` in one `ssm_in` (per
    /// key head), and each key head repeated in place over its value heads (value head `h`
    /// reads key head `h / (n_v / n_k)`); plain NEOX partial RoPE.
    Qwen3Next,
    /// IBM Granite 4.0-H (350M–32B-A9B): a hybrid of Mamba2 layers (`mamba2.rs`; those with
    /// no K/V heads in `attention.head_count_kv`) and attention layers without positions
    /// unless `rope.scaling.finetuned` says otherwise, a dense or routed feed-forward (with an
    /// ungated shared expert), and Granite's multipliers: embeddings × `embedding_scale`,
    /// each block's output × `residual_scale`, scores × `attention.scale`, logits ÷
    /// `logit_scale`.
    GraniteHybrid,
    /// NVIDIA Nemotron-H (Nemotron Nano 9B/12B v2): a hybrid whose layers are each one block
    /// — Mamba2 (`mamba2.rs`), attention without positions, or a squared-ReLU MLP
    /// (`ffn_up` → `relu²` → `ffn_down`) — told apart by the per-layer
    /// `attention.head_count_kv` and `feed_forward_length` (both 0: Mamba2; only the
    /// feed-forward 0: attention). The mixture variant (Nemotron 3) is refused.
    NemotronH,
    /// Liquid's LFM2 (350M–2.6B): a hybrid whose recurrent layers are gated short
    /// convolutions (`in_proj` → `b, c, x`; `c ⊙ conv(b ⊙ x)` → `out_proj`, a window of
    /// `shortconv.l_cache − 1` rows per sequence) beside attention layers with per-head Q/K
    /// norms; the layers with no K/V heads in `attention.head_count_kv` are the recurrent
    /// ones; the final norm is `token_embd_norm`.
    Lfm2,
    /// SmolLM3 (3B): llama's layer, with every fourth layer attending without positions
    /// (llama.cpp's fixed `n_no_rope_layer_step` of 4: layer `i` skips RoPE when
    /// `(i + 1) % 4 == 0`).
    Smollm3,
    /// IBM Granite 3.x / 4.0 dense (`granite`): llama's layer with Granite's four multipliers
    /// (embeddings × `embedding_scale`, each block's output × `residual_scale`, scores ×
    /// `attention.scale`, logits ÷ `logit_scale`) — Granite 4.0-H's attention layers, all of
    /// them, run by the same file (`granite_hybrid.rs`).
    Granite,
    /// IBM Granite MoE (`granitemoe`: Granite 3.x 1B-A400M / 3B-A800M): `granite` over a
    /// routed feed-forward (softmax router, top-k renormalised) with an optional ungated
    /// shared expert.
    GraniteMoe,
    /// Mistral 3 as Mistral ships it (`mistral3`: Ministral 3 3B/8B/14B, Mistral Small 3.x
    /// with Llama 4's scaling): llama's layer with YaRN whose betas and log multiplier come
    /// from the metadata, and Llama 4's attention temperature — each query multiplied by
    /// `1 + β·ln(⌊pos / L⌋ + 1)` (`attention.temperature_scale` β, `L` the original context).
    Mistral3,
    /// Phi-3 / Phi-3.5 / Phi-4 / Phi-4-mini (`phi3`): llama's layer with Q, K and V fused in
    /// one `attn_qkv` and gate and up in one `ffn_up` (gate rows first), RoPE in the NEOX
    /// layout over `rope.dimension_count` of each head, and LongRoPE's per-pair divisors
    /// (`rope_factors_long` where the context exceeds the original one, else
    /// `rope_factors_short`) with `rope.scaling.attn_factor`. Its sliding window is not
    /// applied, as llama.cpp does not apply it.
    Phi3,
    /// GLM-4.5 / GLM-4.5-Air / GLM-4.6 (`glm4moe`): attention with Q/K/V biases (and per-head
    /// Q/K norms where the file has them), NEOX RoPE over part of each head, the pre-FFN norm
    /// stored as `post_attention_norm`; `leading_dense_block_count` dense layers, then routed
    /// feed-forwards with sigmoid gating whose expert choice adds a per-expert bias
    /// (`exp_probs_b`) the weights do not, and an ungated shared expert of
    /// `expert_shared_count` experts' width. The multi-token-prediction layer after the trunk
    /// (`nextn_predict_layers`) is not run.
    Glm4Moe,
    /// Multi-head latent attention (`deepseek2`: DeepSeek-V2/V2.5/V3/R1/V3.1, Kimi K2,
    /// GLM-4.7-Flash, Moonlight): keys and values are one compressed latent per token
    /// (`attention.kv_lora_rank`, RMS-normed) plus a shared rotated key part; queries come
    /// straight from the input or through a low-rank `q_a`/`q_b` pair; the cache holds the
    /// latent and the rotated part only, and attention runs in the latent space with the
    /// key up-projection absorbed into each query and the value up-projection applied to each
    /// head's output (`deepseek2.rs`). Leading dense layers, then routed feed-forwards
    /// (softmax or sigmoid gating, the selection bias, group-limited top-k) with ungated
    /// shared experts.
    Deepseek2,
    /// Gemma 4 (`gemma4`: E2B, E4B, 26B-A4B, 31B): Gemma 3's sandwich norms and GeGLU with sliding and
    /// global layers of different head widths and K/V head counts, per-head Q/K norms and a
    /// weightless RMSNorm on V (V may be K itself), unit score scale, proportional RoPE on the
    /// global layers (`rope_freqs.weight`), the last `attention.shared_kv_layers` layers
    /// attending to an earlier layer's K/V instead of keeping their own, per-layer token
    /// embeddings mixed in after each layer, a learnt scalar per layer and final-logit
    /// soft-capping (`gemma4.rs`); in the mixture (26B-A4B) a dense feed-forward beside
    /// GeGLU experts routed from the RMS-normed residual, each with its own norms.
    Gemma4,
}

impl Architecture {
    /// The `general.architecture` value naming it.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Gemma3 => "gemma3",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Qwen2Moe => "qwen2moe",
            Architecture::Qwen3Moe => "qwen3moe",
            Architecture::Olmoe => "olmoe",
            Architecture::GptOss => "gpt-oss",
            Architecture::Qwen35 => "qwen35",
            Architecture::Qwen35Moe => "qwen35moe",
            Architecture::Qwen3Next => "qwen3next",
            Architecture::GraniteHybrid => "granitehybrid",
            Architecture::NemotronH => "nemotron_h",
            Architecture::Lfm2 => "lfm2",
            Architecture::Smollm3 => "smollm3",
            Architecture::Granite => "granite",
            Architecture::GraniteMoe => "granitemoe",
            Architecture::Mistral3 => "mistral3",
            Architecture::Phi3 => "phi3",
            Architecture::Glm4Moe => "glm4moe",
            Architecture::Deepseek2 => "deepseek2",
            Architecture::Gemma4 => "gemma4",
        }
    }

    /// Every supported architecture, in the order error messages list them.
    pub const ALL: [Architecture; 22] = [
        Architecture::Llama,
        Architecture::Gemma3,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Qwen2Moe,
        Architecture::Qwen3Moe,
        Architecture::Olmoe,
        Architecture::GptOss,
        Architecture::Qwen35,
        Architecture::Qwen35Moe,
        Architecture::Qwen3Next,
        Architecture::GraniteHybrid,
        Architecture::NemotronH,
        Architecture::Lfm2,
        Architecture::Smollm3,
        Architecture::Granite,
        Architecture::GraniteMoe,
        Architecture::Mistral3,
        Architecture::Phi3,
        Architecture::Glm4Moe,
        Architecture::Deepseek2,
        Architecture::Gemma4,
    ];

    /// Whether the layers carry an RMSNorm on Q and K (`attn_q_norm`, `attn_k_norm`): per
    /// head, or over the whole vectors where [`Architecture::qk_norm_full_width`].
    pub fn has_qk_norm(self) -> bool {
        matches!(
            self,
            Architecture::Gemma3
                | Architecture::Qwen3
                | Architecture::Qwen3Moe
                | Architecture::Olmoe
                | Architecture::Qwen35
                | Architecture::Qwen35Moe
                | Architecture::Qwen3Next
                | Architecture::Lfm2
        )
    }

    /// Whether some layers are recurrent (a hybrid: see [`RecurrentConfig`]).
    pub fn is_hybrid(self) -> bool {
        matches!(
            self,
            Architecture::Qwen35
                | Architecture::Qwen35Moe
                | Architecture::Qwen3Next
                | Architecture::GraniteHybrid
                | Architecture::NemotronH
                | Architecture::Lfm2
        )
    }

    /// The final norm's tensor (LFM2's converter names it after the embeddings).
    pub fn output_norm_tensor(self) -> &'static str {
        match self {
            Architecture::Lfm2 => "token_embd_norm.weight",
            _ => "output_norm.weight",
        }
    }

    /// Whether the per-head Q/K norms are there only where the file has them (GLM-4.5 has
    /// them on some sizes).
    pub fn qk_norm_optional(self) -> bool {
        self == Architecture::Glm4Moe
    }

    /// The pre-FFN norm's tensor name (gpt-oss and GLM-4.5 name it after the attention it
    /// follows).
    pub fn ffn_norm_name(self) -> &'static str {
        match self {
            Architecture::GptOss | Architecture::Glm4Moe => "post_attention_norm",
            _ => "ffn_norm",
        }
    }

    /// Whether a shared expert's output is scaled by a sigmoid gate
    /// (`ffn_gate_inp_shexp`): Qwen's mixtures; Granite's and GLM's are added as they are.
    pub fn shared_expert_gated(self) -> bool {
        matches!(
            self,
            Architecture::Qwen2Moe | Architecture::Qwen35Moe | Architecture::Qwen3Next
        )
    }

    /// Whether the Q/K norms span the whole query and key vectors (OLMoE) rather than a head.
    pub fn qk_norm_full_width(self) -> bool {
        self == Architecture::Olmoe
    }

    /// Whether the Q/K/V projections must carry biases (qwen2 and its mixture).
    pub fn requires_qkv_bias(self) -> bool {
        matches!(self, Architecture::Qwen2 | Architecture::Qwen2Moe)
    }

    /// Whether Granite's conventions apply: its four multipliers and RoPE switched by
    /// `rope.scaling.finetuned`, an ungated shared expert.
    pub fn is_granite(self) -> bool {
        matches!(
            self,
            Architecture::Granite | Architecture::GraniteMoe | Architecture::GraniteHybrid
        )
    }

    /// Whether a file may route its feed-forward over experts when it says so with
    /// `expert_count` (llama's Mixtral-style files, Granite, Mistral 3).
    fn may_route(self) -> bool {
        matches!(
            self,
            Architecture::Llama
                | Architecture::Granite
                | Architecture::GraniteHybrid
                | Architecture::Mistral3
                | Architecture::Deepseek2
                | Architecture::Gemma4
        )
    }

    /// Whether every layer's feed-forward is routed over experts (llama may be either: a
    /// Mixtral-style file says so with `llama.expert_count`).
    pub fn is_moe(self) -> bool {
        matches!(
            self,
            Architecture::GraniteMoe
                | Architecture::Glm4Moe
                | Architecture::Qwen2Moe
                | Architecture::Qwen3Moe
                | Architecture::Olmoe
                | Architecture::GptOss
                | Architecture::Qwen35Moe
                | Architecture::Qwen3Next
        )
    }
}

/// How a routed feed-forward turns router logits into the chosen experts' weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all `E` logits, then the `k` largest probabilities (qwen, OLMoE, Mixtral).
    Softmax,
    /// The `k` largest logits, then a softmax over those `k` (gpt-oss).
    SoftmaxTopK,
    /// A sigmoid per logit; the `k` largest after adding the layer's selection bias
    /// (`exp_probs_b`), weighted by their sigmoid without it (GLM-4.5, DeepSeek-V3).
    Sigmoid,
}

/// An expert's activation: `act(gate) ⊙ up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertAct {
    /// SwiGLU, `silu(g) · u`.
    Silu,
    /// gpt-oss's clamped SwiGLU: `g' = min(g, 7)`, `u' = clamp(u, −7, 7)`,
    /// `g' · σ(1.702 g') · (u' + 1)`.
    SwigluOai,
    /// GeGLU with the tanh approximation, `gelu(g) · u` (Gemma 4).
    GeluTanh,
}

/// How positions turn into RoPE angles beyond the plain `pos · base^(−2i/d)`: llama.cpp's
/// `rope.scaling.*` (linear interpolation, or YaRN), the identity when the file has none.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    /// Factor on the angles of the global layers (`1 / rope.scaling.factor`).
    pub freq_scale: f32,
    /// Factor on the angles of the sliding-window layers (gpt-oss scales them as the global
    /// ones; Gemma 3 leaves its local layers unscaled, as llama.cpp does).
    pub freq_scale_swa: f32,
    /// YaRN's blend of interpolated and original angles, where the type is `yarn`.
    pub yarn: Option<Yarn>,
    /// Magnitude factor on cos/sin before YaRN's own (`rope.scaling.attn_factor`, else 1; for
    /// YaRN divided by YaRN's `1 + 0.1·ln(factor)`, which the table multiplies back).
    pub attn_factor: f32,
}

impl RopeScaling {
    /// No scaling.
    pub const NONE: RopeScaling = RopeScaling {
        freq_scale: 1.0,
        freq_scale_swa: 1.0,
        yarn: None,
        attn_factor: 1.0,
    };

    /// Whether angles are the plain ones.
    pub fn is_identity(&self) -> bool {
        *self == RopeScaling::NONE
    }
}

/// YaRN's parameters (llama.cpp's defaults: the file names only the factor and the original
/// context).
#[derive(Clone, Debug, PartialEq)]
pub struct Yarn {
    /// The context the model was trained at before scaling (`rope.scaling.original_context_length`).
    pub orig_ctx: usize,
    /// Rotations over the original context above which a pair keeps its angle (32).
    pub beta_fast: f32,
    /// Rotations below which a pair is fully interpolated (1).
    pub beta_slow: f32,
    /// Weight of the extrapolated angle in the ramp (1).
    pub ext_factor: f32,
}

/// The shape of a routed (mixture-of-experts) feed-forward, the same in every layer.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer (`expert_count`).
    pub n_expert: usize,
    /// Experts each token is sent to (`expert_used_count`, top-k).
    pub n_used: usize,
    /// Width of one expert's feed-forward (`expert_feed_forward_length`, else the
    /// architecture's fallback).
    pub expert_ffn: usize,
    /// Whether the top-k router weights are renormalised to sum to 1 (qwen3moe, Mixtral).
    pub norm_topk: bool,
    /// Factor on the router weights (`expert_weights_scale`; 1 where absent).
    pub weights_scale: f32,
    /// Width of the shared expert every token also goes through (qwen2moe), if any.
    pub shared_ffn: Option<usize>,
    /// How router logits become expert weights.
    pub gating: Gating,
    /// The experts' activation.
    pub act: ExpertAct,
    /// Layers before the first routed one (`leading_dense_block_count`): dense
    /// feed-forwards of `ffn_dim`.
    pub dense_lead: usize,
    /// Group-limited routing: `(groups, groups used)` (`expert_group_count`,
    /// `expert_group_used_count`; `None`: one group).
    pub groups: Option<(usize, usize)>,
}

/// Most experts a layer may have (llama.cpp's bound too).
pub const MAX_EXPERTS: usize = 1024;

/// Gemma 3 layer `i` is global (full causal attention, `rope.freq_base`) when
/// `(i + 1) % GEMMA3_SWA_PATTERN == 0`, else sliding-window: llama.cpp's default when the
/// file has no `attention.sliding_window_pattern` (Gemma 3's converter writes none).
pub const GEMMA3_SWA_PATTERN: usize = 6;

/// gpt-oss alternates: even layers attend through the window, odd layers globally (llama.cpp's
/// default when `attention.sliding_window_pattern` is absent).
pub const GPT_OSS_SWA_PATTERN: usize = 2;

/// RoPE base of Gemma 3's sliding-window layers (hard-coded by llama.cpp and Gemma's reference
/// implementation, not in the metadata).
pub const GEMMA3_SWA_ROPE_BASE: f32 = 10000.0;

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
    /// RoPE pairs element `i` with `i + rope_dim/2` (NEOX layout: gemma3, qwen2, qwen3) rather
    /// than with `i + 1` (llama, whose converter permutes Q and K rows to that layout).
    pub rope_neox: bool,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// Attention-score scale (`1/√head_dim` for llama and for Gemma 3 at this size).
    pub attn_scale: f32,
    /// Factor applied to the embedding rows (`√d_model` for Gemma, 1 for llama).
    pub embd_scale: f32,
    /// Sliding-window length of the sliding layers (`attention.sliding_window`): a token at
    /// position `p` attends to positions `p − window + 1 ..= p`. `None`: every layer is global.
    pub sliding_window: Option<usize>,
    /// Which layers attend through `sliding_window` (one flag per layer; all false without a
    /// window).
    pub sliding_layers: Vec<bool>,
    /// RoPE base of the sliding-window layers.
    pub rope_base_swa: f32,
    /// Position scaling of the RoPE angles (identity for most files).
    pub rope_scaling: RopeScaling,
    /// Final logit soft-capping `cap · tanh(logit / cap)`, when the metadata asks for it.
    pub logit_softcap: Option<f32>,
    /// The routed feed-forward's shape, for a mixture of experts (`None`: dense).
    pub moe: Option<MoeConfig>,
    /// A hybrid's recurrent layers (`None`: every layer attends).
    pub recurrent: Option<RecurrentConfig>,
    /// Per rotated pair, whether a text token's position rotates it (M-RoPE sections whose
    /// position is 0 for text leave their pairs as they are); `None`: every pair rotates.
    pub rope_rotated: Option<Vec<bool>>,
    /// Whether attention layers rotate queries and keys at all (Granite 4.0-H's attention has
    /// no positions unless `rope.scaling.finetuned` is set).
    pub use_rope: bool,
    /// Factor on each block's output before its residual add (Granite's `residual_scale`; 1
    /// elsewhere).
    pub residual_scale: f32,
    /// Divisor of the logits (Granite's `logit_scale`; 1 elsewhere).
    pub logit_scale: f32,
    /// Layers that neither attend nor recur — Nemotron-H's MLP-only layers — and so keep no
    /// K/V (one flag per layer; empty for every other architecture).
    pub ffn_only_layers: Vec<bool>,
    /// Attention layers that rotate nothing though the model uses RoPE (SmolLM3's every
    /// fourth; one flag per layer, empty where every layer rotates).
    pub nope_layers: Vec<bool>,
    /// The per-pair RoPE frequency divisors to fold into the angles, by tensor name: Llama
    /// 3's `rope_freqs.weight`, or LongRoPE's `rope_factors_long.weight` /
    /// `rope_factors_short.weight` (Phi-3), chosen as llama.cpp chooses for a context of
    /// `ctx_len`: long where it exceeds `rope.scaling.original_context_length`.
    pub rope_factors: Option<&'static str>,
    /// Llama 4's attention temperature (Mistral 3), if the file asks for it.
    pub attn_temp: Option<AttnTemperature>,
    /// Multi-head latent attention (`deepseek2`): the cache holds one latent row of
    /// `head_dim = kv_lora + rope_dim` per token and no values (`n_kv_heads` is 1).
    pub mla: Option<MlaConfig>,
    /// The sliding-window layers' own head shape where it differs from the global layers'
    /// (Gemma 4: 256-wide heads with more K/V heads locally, 512-wide globally); `None`: every
    /// layer has `head_dim`, `n_kv_heads` and `rope_dim`.
    pub swa_shape: Option<HeadShape>,
    /// Per layer, the earlier layer whose K/V it attends to instead of keeping its own (Gemma
    /// 4's last `attention.shared_kv_layers` layers); empty where every attending layer keeps
    /// its own.
    pub kv_source: Vec<Option<usize>>,
    /// Per-layer feed-forward widths where they differ (Gemma 4's double-wide shared layers);
    /// empty: every layer is `ffn_dim` wide (which is otherwise the widest).
    pub ffn_dims: Vec<usize>,
    /// Width of each layer's slice of the per-layer token embeddings (Gemma 4's
    /// `embedding_length_per_layer_input`); 0: none.
    pub ple_dim: usize,
}

/// A layer kind's attention head shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadShape {
    /// Elements per query, key and value head.
    pub head_dim: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Rotated dimensions per head.
    pub rope_dim: usize,
}

/// Multi-head latent attention's shape (`deepseek2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaConfig {
    /// Rank of the query's low-rank pair (`attention.q_lora_rank`); `None`: one `attn_q`.
    pub q_lora: Option<usize>,
    /// Width of the compressed key/value latent (`attention.kv_lora_rank`).
    pub kv_lora: usize,
    /// A query head's width before absorption: unrotated plus rotated part
    /// (`attention.key_length_mla`).
    pub k_head: usize,
    /// A head's value width after the up-projection (`attention.value_length_mla`).
    pub v_head: usize,
}

impl MlaConfig {
    /// The unrotated part of a query head (`k_head − rope_dim`).
    pub fn nope(&self, rope_dim: usize) -> usize {
        self.k_head - rope_dim
    }
}

/// Llama 4's attention temperature tuning: the query of a token at position `pos` is
/// multiplied by `1 + scale · ln(⌊pos / floor⌋ + 1)` after RoPE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnTemperature {
    /// `attention.temperature_scale`.
    pub scale: f32,
    /// Positions per step of the logarithm (the original context of YaRN, as llama.cpp
    /// takes it for Mistral 3).
    pub floor: usize,
}

impl AttnTemperature {
    /// The factor on a query at position `pos` (computed as llama.cpp does, in f64).
    pub fn factor(&self, pos: usize) -> f32 {
        (((pos as f64 / self.floor as f64).floor() + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }
}

impl ModelConfig {
    /// Elements of one K (or V) row in the cache: `n_kv_heads · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Rows the cache keeps per token and attention layer: K and V (2), or latent
    /// attention's one latent row (1).
    pub fn kv_rows(&self) -> usize {
        if self.mla.is_some() {
            1
        } else {
            2
        }
    }

    /// Elements of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Whether layer `layer` is recurrent (it has a fixed-size state and no K/V).
    pub fn is_recurrent(&self, layer: usize) -> bool {
        self.recurrent
            .as_ref()
            .is_some_and(|r| r.layers.get(layer).copied().unwrap_or(false))
    }

    /// Whether layer `layer` attends (and so keeps K/V): not a hybrid's recurrent layer nor
    /// one of Nemotron-H's MLP-only layers.
    pub fn attends(&self, layer: usize) -> bool {
        !self.is_recurrent(layer) && !self.ffn_only_layers.get(layer).copied().unwrap_or(false)
    }

    /// Layers that keep K/V (those that attend with K/V of their own).
    pub fn n_kv_layers(&self) -> usize {
        (0..self.n_layers).filter(|&l| self.owns_kv(l)).count()
    }

    /// Whether layer `layer` attends with K/V of its own (not another layer's, as Gemma 4's
    /// last layers do).
    pub fn owns_kv(&self, layer: usize) -> bool {
        self.attends(layer) && self.kv_source_of(layer).is_none()
    }

    /// The earlier layer whose K/V layer `layer` attends to, where it keeps none of its own.
    pub fn kv_source_of(&self, layer: usize) -> Option<usize> {
        self.kv_source.get(layer).copied().flatten()
    }

    /// Layer `layer`'s head shape: the sliding-window layers' where they have their own.
    pub fn head_shape(&self, layer: usize) -> HeadShape {
        match self.swa_shape {
            Some(s) if self.is_sliding(layer) => s,
            _ => HeadShape {
                head_dim: self.head_dim,
                n_kv_heads: self.n_kv_heads,
                rope_dim: self.rope_dim,
            },
        }
    }

    /// Elements of one K (or V) row of layer `layer` in the cache.
    pub fn kv_dim_of(&self, layer: usize) -> usize {
        let s = self.head_shape(layer);
        s.n_kv_heads * s.head_dim
    }

    /// The widest query and K/V rows of any layer (what the activation buffers hold).
    pub fn widest_q_kv(&self) -> (usize, usize) {
        match self.swa_shape {
            Some(s) => (
                self.q_dim().max(self.n_heads * s.head_dim),
                self.kv_dim().max(s.n_kv_heads * s.head_dim),
            ),
            None => (self.q_dim(), self.kv_dim()),
        }
    }

    /// Rotated dimensions per head of the sliding-window layers.
    pub fn rope_dim_swa(&self) -> usize {
        self.swa_shape.map_or(self.rope_dim, |s| s.rope_dim)
    }

    /// Bytes one cached token takes in the layers that keep K/V, split into the global
    /// layers' and the sliding-window layers', `row_bytes` giving a row's bytes from its
    /// elements (K and V rows, or latent attention's one row, per layer).
    pub fn kv_token_bytes(&self, row_bytes: impl Fn(usize) -> usize) -> (usize, usize) {
        let mut split = (0, 0);
        for l in (0..self.n_layers).filter(|&l| self.owns_kv(l)) {
            let b = self.kv_rows() * row_bytes(self.kv_dim_of(l));
            if self.is_sliding(l) {
                split.1 += b;
            } else {
                split.0 += b;
            }
        }
        split
    }

    /// Layer `layer`'s feed-forward width.
    pub fn ffn_dim_of(&self, layer: usize) -> usize {
        self.ffn_dims.get(layer).copied().unwrap_or(self.ffn_dim)
    }

    /// Whether attention layer `layer` rotates queries and keys by position.
    pub fn rotates(&self, layer: usize) -> bool {
        self.use_rope && !self.nope_layers.get(layer).copied().unwrap_or(false)
    }

    /// Whether layer `layer` attends through the sliding window (Gemma 3's local layers,
    /// gpt-oss's even ones).
    pub fn is_sliding(&self, layer: usize) -> bool {
        self.sliding_window.is_some() && self.sliding_layers.get(layer).copied().unwrap_or(false)
    }

    /// Reads and validates the configuration.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, ModelError> {
        let path = f.path().display().to_string();
        let arch_name = f.get_str("general.architecture")?;
        let Some(arch) = Architecture::ALL
            .into_iter()
            .find(|a| a.gguf_name() == arch_name)
        else {
            let names: Vec<&str> = Architecture::ALL.iter().map(|a| a.gguf_name()).collect();
            return Err(ModelError::Unsupported {
                path,
                message: format!(
                    "architecture `{arch_name}` is not supported (supported: {})",
                    names.join(", ")
                ),
            });
        };
        let k = |s: &str| format!("{arch_name}.{s}");
        // `block_count` counts the multi-token-prediction layers some files carry after the
        // trunk (`nextn_predict_layers`); they are not run, and per-layer lists may cover them.
        let n_all = f.get_usize_in(&k("block_count"), 1..=1024)?;
        let nextn = match f.get(&k("nextn_predict_layers")) {
            None => 0,
            Some(_) => f.get_usize_in(&k("nextn_predict_layers"), 0..=n_all - 1)?,
        };
        let n_layers = n_all - nextn;
        let d_model = f.get_usize_in(&k("embedding_length"), 1..=1 << 16)?;
        let n_heads = f.get_usize_in(&k("attention.head_count"), 1..=1024)?;
        // LFM2 gives one count per layer, 0 for its recurrent layers.
        let kv_key = k("attention.head_count_kv");
        let (n_kv_heads, no_kv_layers) = match f.get(&kv_key) {
            Some(MetadataValue::Array(a))
                if matches!(
                    arch,
                    Architecture::Lfm2 | Architecture::GraniteHybrid | Architecture::NemotronH
                ) =>
            {
                per_layer_kv_heads(a, &kv_key, (n_layers, nextn), n_heads).map_err(|message| {
                    ModelError::Unsupported {
                        path: path.clone(),
                        message,
                    }
                })?
            }
            // Gemma 4 gives one count per layer kind; `gemma4_config.rs` reads it.
            Some(MetadataValue::Array(_)) if arch == Architecture::Gemma4 => (n_heads, None),
            Some(_) => (f.get_usize_in(&kv_key, 1..=n_heads)?, None),
            None => (n_heads, None),
        };
        let head_dim = match f.get(&k("attention.key_length")) {
            Some(_) => f.get_usize_in(&k("attention.key_length"), 1..=4096)?,
            None => d_model / n_heads,
        };
        // Nemotron-H gives one width per layer, 0 on the layers without a feed-forward.
        let ffn_key = k("feed_forward_length");
        let (ffn_dim, mlp_layers) = match f.get(&ffn_key) {
            Some(MetadataValue::Array(a)) if arch == Architecture::NemotronH => {
                let (w, flags) =
                    per_layer_widths(a, &ffn_key, (n_layers, nextn)).map_err(|message| {
                        ModelError::Unsupported {
                            path: path.clone(),
                            message,
                        }
                    })?;
                (w, Some(flags))
            }
            // Gemma 4's double-wide layers: `gemma4_config.rs` reads the list.
            Some(MetadataValue::Array(_)) if arch == Architecture::Gemma4 => (1, None),
            _ => (f.get_usize_in(&ffn_key, 1..=1 << 20)?, None),
        };
        let ctx_len = f.get_usize_in(&k("context_length"), 1..=1 << 24)?;
        let rope_base = match f.get(&k("rope.freq_base")) {
            Some(_) => f.get_f64(&k("rope.freq_base"))? as f32,
            None => 10000.0,
        };
        let rope_dim = match f.get(&k("rope.dimension_count")) {
            Some(_) => f.get_usize_in(&k("rope.dimension_count"), 2..=head_dim)?,
            None => head_dim,
        };
        // Nemotron-H may give only the LayerNorm epsilon (llama.cpp's fallback).
        let norm_eps = match f.get(&k("attention.layer_norm_rms_epsilon")) {
            None if arch == Architecture::NemotronH => {
                f.get_f64(&k("attention.layer_norm_epsilon"))? as f32
            }
            _ => f.get_f64(&k("attention.layer_norm_rms_epsilon"))? as f32,
        };
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
        let rope_scaling = rope_scaling(f, arch, arch_name, ctx_len).map_err(bad)?;
        let rope_factors = rope_factors(f, arch, arch_name, ctx_len).map_err(bad)?;
        let attn_temp = attn_temperature(f, arch, arch_name, ctx_len).map_err(bad)?;
        if arch == Architecture::Glm4Moe && f.get(&k("rope.dimension_sections")).is_some() {
            return Err(bad(format!(
                "glm4moe with M-RoPE sections (`{}`, the vision models) is not supported",
                k("rope.dimension_sections")
            )));
        }
        let (mut embd_scale, mut sliding_window, mut logit_softcap) = (1.0f32, None, None);
        let mut sliding_layers = Vec::new();
        let mut rope_base_swa = rope_base;
        if arch == Architecture::GptOss {
            sliding_window = Some(f.get_usize_in(&k("attention.sliding_window"), 1..=1 << 24)?);
            sliding_layers =
                swa_layers(f, &k("attention.sliding_window_pattern"), (n_layers, nextn))
                    .map_err(bad)?
                    .unwrap_or_else(|| pattern_layers(GPT_OSS_SWA_PATTERN, n_layers));
            if f.get(&k("rope.freq_base_swa")).is_some() {
                rope_base_swa = f.get_f64(&k("rope.freq_base_swa"))? as f32;
                if !(rope_base_swa.is_finite() && rope_base_swa > 0.0) {
                    return Err(bad(format!(
                        "rope.freq_base_swa {rope_base_swa} out of range"
                    )));
                }
            }
        }
        if arch == Architecture::Gemma3 {
            embd_scale = (d_model as f32).sqrt();
            sliding_window = Some(f.get_usize_in(&k("attention.sliding_window"), 1..=1 << 24)?);
            sliding_layers =
                swa_layers(f, &k("attention.sliding_window_pattern"), (n_layers, nextn))
                    .map_err(bad)?
                    .unwrap_or_else(|| pattern_layers(GEMMA3_SWA_PATTERN, n_layers));
            rope_base_swa = GEMMA3_SWA_ROPE_BASE;
            if rope_dim != head_dim {
                return Err(bad(format!(
                    "gemma3 rotates whole heads; rope.dimension_count {rope_dim} != head dimension {head_dim}"
                )));
            }
            if f.get(&k("final_logit_softcapping")).is_some() {
                let cap = f.get_f64(&k("final_logit_softcapping"))? as f32;
                if !(cap.is_finite() && cap > 0.0) {
                    return Err(bad(format!("final_logit_softcapping {cap} out of range")));
                }
                logit_softcap = Some(cap);
            }
        }
        let moe = moe_config(f, arch, arch_name, ffn_dim).map_err(bad)?;
        let (recurrent, rope_rotated) = if arch == Architecture::Lfm2 {
            if f.get(&k("attention.sliding_window")).is_some() {
                return Err(bad(
                    "lfm2 with sliding-window attention (`attention.sliding_window`) is not supported yet"
                        .into(),
                ));
            }
            let Some(layers) = no_kv_layers else {
                return Err(bad(format!(
                    "`{kv_key}` must list one K/V head count per layer (0 for a convolution layer)"
                )));
            };
            let r = RecurrentConfig::short_conv(f, arch_name, d_model, layers).map_err(bad)?;
            (Some(r), None)
        } else if arch == Architecture::GraniteHybrid {
            let Some(layers) = no_kv_layers else {
                return Err(bad(format!(
                    "`{kv_key}` must list one K/V head count per layer (0 for a Mamba2 layer)"
                )));
            };
            (
                Some(RecurrentConfig::mamba2(f, arch_name, layers).map_err(bad)?),
                None,
            )
        } else if arch == Architecture::NemotronH {
            let (Some(no_kv), Some(mlp)) = (&no_kv_layers, &mlp_layers) else {
                return Err(bad(format!(
                    "`{kv_key}` and `{ffn_key}` must list one count per layer (nemotron_h tells its layer kinds by them)"
                )));
            };
            let layers = no_kv.iter().zip(mlp).map(|(&nk, &m)| nk && !m).collect();
            (
                Some(RecurrentConfig::mamba2(f, arch_name, layers).map_err(bad)?),
                None,
            )
        } else if arch.is_hybrid() {
            let mut r = RecurrentConfig::from_gguf(f, arch_name, (n_layers, nextn)).map_err(bad)?;
            r.interleaved_key_heads = arch == Architecture::Qwen3Next;
            if !r.layers.iter().any(|&l| !l) {
                return Err(bad(format!(
                    "every one of the {n_layers} layers is recurrent; {arch_name} needs attention layers too"
                )));
            }
            let rot = crate::hybrid::imrope_rotated_pairs(f, arch_name, rope_dim).map_err(bad)?;
            (Some(r), rot)
        } else {
            (None, None)
        };
        let mut cfg = ModelConfig {
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
            // llama.cpp's LLAMA_ROPE_TYPE_NORM (adjacent pairs) for these, NEOX for the rest.
            rope_neox: !matches!(
                arch,
                Architecture::Llama
                    | Architecture::GraniteHybrid
                    | Architecture::Granite
                    | Architecture::GraniteMoe
                    | Architecture::Smollm3
                    | Architecture::Mistral3
                    | Architecture::Deepseek2
            ),
            norm_eps,
            attn_scale: if arch == Architecture::Gemma3 && n_layers == 62 {
                // Gemma 3 27B (the only 62-layer size) scales by d_model / n_heads
                // (query_pre_attn_scalar), as llama.cpp does; the others by head_dim.
                1.0 / ((d_model / n_heads) as f32).sqrt()
            } else {
                1.0 / (head_dim as f32).sqrt()
            },
            embd_scale,
            sliding_window,
            sliding_layers,
            rope_base_swa,
            rope_scaling,
            logit_softcap,
            moe,
            recurrent,
            rope_rotated,
            use_rope: true,
            residual_scale: 1.0,
            logit_scale: 1.0,
            ffn_only_layers: Vec::new(),
            nope_layers: Vec::new(),
            rope_factors,
            attn_temp,
            mla: None,
            swa_shape: None,
            kv_source: Vec::new(),
            ffn_dims: Vec::new(),
            ple_dim: 0,
        };
        if arch == Architecture::Gemma4 {
            apply_gemma4(f, arch_name, nextn, &mut cfg).map_err(bad)?;
        }
        if arch == Architecture::Deepseek2 {
            let (mla, scale) = mla_config(f, arch_name, &cfg).map_err(bad)?;
            cfg.mla = Some(mla);
            cfg.attn_scale = scale;
        }
        if arch == Architecture::Smollm3 {
            cfg.nope_layers = (0..n_layers).map(|i| (i + 1) % 4 == 0).collect();
        }
        if arch.is_granite() {
            granite_multipliers(f, arch_name, &mut cfg).map_err(bad)?;
        }
        if arch == Architecture::NemotronH {
            // Its attention layers have no positions; its MLP layers keep no K/V.
            cfg.use_rope = false;
            cfg.ffn_only_layers = mlp_layers.unwrap_or_default();
        }
        Ok(cfg)
    }
}

/// Reads Gemma 4's keys (`gemma4_config.rs`) into `cfg`, read so far as Gemma 3's would be,
/// with the global layers' shape.
fn apply_gemma4(
    f: &GgufFile,
    arch_name: &str,
    nextn: usize,
    cfg: &mut ModelConfig,
) -> Result<(), String> {
    let base = crate::gemma4_config::Base {
        n_layers: cfg.n_layers,
        nextn,
        n_heads: cfg.n_heads,
        head_dim: cfg.head_dim,
        rope_dim: cfg.rope_dim,
    };
    let g = crate::gemma4_config::read(f, arch_name, base)?;
    cfg.embd_scale = (cfg.d_model as f32).sqrt();
    // Gemma 4 scores by 1 (its query norm carries the scale).
    cfg.attn_scale = 1.0;
    cfg.sliding_window = Some(g.sliding_window);
    cfg.sliding_layers = g.sliding_layers;
    cfg.rope_base_swa = g.rope_base_swa;
    cfg.n_kv_heads = g.n_kv_heads;
    let (head_dim, n_kv_heads, rope_dim) = g.swa;
    let swa = HeadShape {
        head_dim,
        n_kv_heads,
        rope_dim,
    };
    if (head_dim, n_kv_heads, rope_dim) != (cfg.head_dim, cfg.n_kv_heads, cfg.rope_dim) {
        cfg.swa_shape = Some(swa);
    }
    cfg.kv_source = g.kv_source;
    if let Some(&widest) = g.ffn_dims.iter().max() {
        cfg.ffn_dim = widest;
    }
    cfg.ffn_dims = g.ffn_dims;
    cfg.ple_dim = g.ple_dim;
    cfg.logit_softcap = g.softcap;
    Ok(())
}

/// Granite's multipliers (`embedding_scale`, `residual_scale`, `attention.scale`,
/// `logit_scale`; each 1 or the default where absent or 0, as llama.cpp takes them) and its
/// switch for positions (`rope.scaling.finetuned`, true where absent).
fn granite_multipliers(f: &GgufFile, arch_name: &str, cfg: &mut ModelConfig) -> Result<(), String> {
    let scale = |key: &str| -> Result<Option<f32>, String> {
        let key = format!("{arch_name}.{key}");
        match f.get(&key) {
            None => Ok(None),
            Some(_) => {
                let v = f
                    .get_f64(&key)
                    .map_err(|_| format!("`{key}` must be a number"))?
                    as f32;
                if !v.is_finite() || v < 0.0 {
                    return Err(format!("`{key}` is {v}; it must be a finite number ≥ 0"));
                }
                Ok((v != 0.0).then_some(v))
            }
        }
    };
    if let Some(s) = scale("embedding_scale")? {
        cfg.embd_scale = s;
    }
    if let Some(s) = scale("residual_scale")? {
        cfg.residual_scale = s;
    }
    if let Some(s) = scale("attention.scale")? {
        cfg.attn_scale = s;
    }
    if let Some(s) = scale("logit_scale")? {
        cfg.logit_scale = s;
    }
    let key = format!("{arch_name}.rope.scaling.finetuned");
    cfg.use_rope = match f.get(&key) {
        None => true,
        Some(MetadataValue::Bool(b)) => *b,
        Some(_) => return Err(format!("`{key}` must be a boolean")),
    };
    Ok(())
}

/// A reader error's message without the file's path in front (for messages that a caller
/// prefixes with the path itself).
fn without_path(f: &GgufFile, e: ridge_gguf::GgufError) -> String {
    let msg = e.to_string();
    let prefix = format!("{}: ", f.path().display());
    msg.strip_prefix(&prefix)
        .map_or(msg.clone(), str::to_string)
}

/// Reads the mixture-of-experts keys of `arch` (`None` for a dense model), checking that they
/// are present where the architecture needs them and consistent (1 ≤ top-k ≤ experts).
fn moe_config(
    f: &GgufFile,
    arch: Architecture,
    arch_name: &str,
    ffn_dim: usize,
) -> Result<Option<MoeConfig>, String> {
    let k = |s: &str| format!("{arch_name}.{s}");
    let has_count = f.get_u64(&k("expert_count")).is_ok_and(|n| n > 0);
    let routed = arch.is_moe() || (arch.may_route() && has_count);
    if !routed {
        if has_count {
            return Err(format!(
                "{arch_name} with experts (`{}`) is not supported",
                k("expert_count")
            ));
        }
        return Ok(None);
    }
    let usize_in = |key: &str, range: std::ops::RangeInclusive<usize>| {
        f.get_usize_in(&k(key), range)
            .map_err(|e| match f.get(&k(key)) {
                None => format!("`{}` is missing (a mixture of experts needs it)", k(key)),
                // The reader's message names the file, which the caller's error names too.
                Some(_) => without_path(f, e),
            })
    };
    let n_expert = usize_in("expert_count", 1..=MAX_EXPERTS)?;
    let n_used = usize_in("expert_used_count", 0..=usize::MAX)?;
    if n_used == 0 || n_used > n_expert {
        return Err(format!(
            "`{}` is {n_used}; it must be between 1 and the {n_expert} experts",
            k("expert_used_count")
        ));
    }
    // llama.cpp's fallback for qwen2moe/qwen3moe without the key: the dense width over top-k.
    let expert_ffn = match (arch, f.get(&k("expert_feed_forward_length"))) {
        (
            Architecture::Llama
            | Architecture::Olmoe
            | Architecture::GraniteHybrid
            | Architecture::Granite
            | Architecture::GraniteMoe
            | Architecture::Mistral3,
            _,
        ) => ffn_dim,
        (
            Architecture::GptOss
            | Architecture::Glm4Moe
            | Architecture::Deepseek2
            | Architecture::Gemma4,
            _,
        ) => usize_in("expert_feed_forward_length", 1..=1 << 20)?,
        (_, Some(_)) => usize_in("expert_feed_forward_length", 1..=1 << 20)?,
        (_, None) => (ffn_dim / n_used).max(1),
    };
    let glm = arch == Architecture::Glm4Moe;
    // Group-limited top-k (DeepSeek-V3): the experts in `expert_group_count` groups, only
    // the `expert_group_used_count` best groups (by the sum of their two best scores) open.
    let groups = match f.get(&k("expert_group_count")) {
        None => None,
        Some(_) => {
            let ng = usize_in("expert_group_count", 0..=n_expert)?;
            let used = usize_in("expert_group_used_count", 1..=ng.max(1))?;
            if ng > 1
                && (n_expert % ng != 0 || n_expert / ng < 2 || used * (n_expert / ng) < n_used)
            {
                return Err(format!(
                    "`{}` = {ng} with `{}` = {used} cannot give {n_used} of {n_expert} experts",
                    k("expert_group_count"),
                    k("expert_group_used_count")
                ));
            }
            (ng > 1).then_some((ng, used))
        }
    };
    let dense_lead = match f.get(&k("leading_dense_block_count")) {
        None => 0,
        Some(_) => usize_in("leading_dense_block_count", 0..=1024)?,
    };
    // llama.cpp's `expert_gating_func`: 1 softmax, 2 sigmoid (absent: the architecture's).
    let gating = match (arch, f.get(&k("expert_gating_func"))) {
        (Architecture::GptOss, _) => Gating::SoftmaxTopK,
        (Architecture::Glm4Moe, None) => Gating::Sigmoid,
        // llama.cpp: DeepSeek V2/V2.5 files have no key (softmax); GLM-4.7's "lite" files,
        // told by their 47/48 layers and 154 880-token vocabulary, gate by sigmoid.
        (Architecture::Deepseek2, None) => {
            let glm47 = f
                .tensor("token_embd.weight")
                .is_ok_and(|t| t.n_rows() == 154_880);
            let layers = f.get_usize_in(&k("block_count"), 1..=1024).unwrap_or(0)
                - f.get_usize_in(&k("nextn_predict_layers"), 0..=1024)
                    .unwrap_or(0);
            if glm47 && matches!(layers, 47 | 48) {
                Gating::Sigmoid
            } else {
                Gating::Softmax
            }
        }
        (_, None) => Gating::Softmax,
        (_, Some(_)) => match usize_in("expert_gating_func", 0..=16)? {
            0 if glm => Gating::Sigmoid,
            0 | 1 => Gating::Softmax,
            2 => Gating::Sigmoid,
            other => {
                return Err(format!(
                    "`{}` = {other} is not supported (1: softmax, 2: sigmoid)",
                    k("expert_gating_func")
                ))
            }
        },
    };
    let weights_norm = match f.get(&k("expert_weights_norm")) {
        None => None,
        Some(MetadataValue::Bool(b)) => Some(*b),
        Some(_) => return Err(format!("`{}` must be a boolean", k("expert_weights_norm"))),
    };
    let shared_ffn = match (arch, f.get(&k("expert_shared_feed_forward_length"))) {
        // GLM: `expert_shared_count` experts' width. Every GLM has one; llama.cpp runs a
        // count of 0 as an identity "expert" added to the output, which no model was trained
        // with, so it is refused rather than copied.
        (Architecture::Glm4Moe | Architecture::Deepseek2, _) => {
            Some(usize_in("expert_shared_count", 1..=64)? * expert_ffn)
        }
        (Architecture::Qwen2Moe, Some(_)) => {
            Some(usize_in("expert_shared_feed_forward_length", 1..=1 << 20)?)
        }
        (Architecture::Qwen2Moe, None) => Some(ffn_dim),
        // llama.cpp requires the shared expert's width for qwen35moe and qwen3next.
        (Architecture::Qwen35Moe | Architecture::Qwen3Next, _) => {
            Some(usize_in("expert_shared_feed_forward_length", 1..=1 << 20)?)
        }
        // Granite's shared expert is optional (0 or absent: none).
        (
            Architecture::GraniteHybrid | Architecture::Granite | Architecture::GraniteMoe,
            Some(_),
        ) => Some(usize_in("expert_shared_feed_forward_length", 0..=1 << 20)?).filter(|&w| w > 0),
        _ => None,
    };
    let weights_scale = match f.get(&k("expert_weights_scale")) {
        None => 1.0,
        Some(_) => {
            let s = f
                .get_f64(&k("expert_weights_scale"))
                .map_err(|e| e.to_string())? as f32;
            if !s.is_finite() || s < 0.0 {
                return Err(format!("`{}` is {s}", k("expert_weights_scale")));
            }
            // llama.cpp applies no scale for 0 (the key's default) or 1.
            if s == 0.0 {
                1.0
            } else {
                s
            }
        }
    };
    Ok(Some(MoeConfig {
        n_expert,
        n_used,
        expert_ffn,
        norm_topk: weights_norm.unwrap_or(false)
            || matches!(
                arch,
                Architecture::Qwen3Moe
                    | Architecture::Qwen35Moe
                    | Architecture::Qwen3Next
                    | Architecture::GraniteHybrid
                    | Architecture::Granite
                    | Architecture::GraniteMoe
                    | Architecture::Mistral3
                    | Architecture::Llama
                    | Architecture::Gemma4
            ),
        weights_scale,
        shared_ffn,
        gating,
        act: match arch {
            Architecture::GptOss => ExpertAct::SwigluOai,
            Architecture::Gemma4 => ExpertAct::GeluTanh,
            _ => ExpertAct::Silu,
        },
        dense_lead,
        groups,
    }))
}

/// Layer flags of a period-`p` window pattern as llama.cpp sets them: layer `i` is windowed
/// unless `i % p == p − 1` (every layer for `p = 0`).
fn pattern_layers(p: usize, n_layers: usize) -> Vec<bool> {
    (0..n_layers).map(|i| p == 0 || i % p < p - 1).collect()
}

/// `attention.sliding_window_pattern` as a period or as one flag per layer (`None` when
/// absent).
fn swa_layers(
    f: &GgufFile,
    key: &str,
    (n_layers, nextn): (usize, usize),
) -> Result<Option<Vec<bool>>, String> {
    use ridge_gguf::{ArrayValue, MetadataValue};
    let Some(v) = f.get(key) else {
        return Ok(None);
    };
    if let MetadataValue::Array(ArrayValue::Bool(flags)) = v {
        return trunk(flags, key, (n_layers, nextn)).map(Some);
    }
    let p = f
        .get_usize_in(key, 0..=1 << 16)
        .map_err(|e| without_path(f, e))?;
    Ok(Some(pattern_layers(p, n_layers)))
}

/// Reads `rope.scaling.*`: none, `linear` (angles times `1/factor`) or `yarn` (llama.cpp's
/// YaRN with its default betas); LongRoPE and other types are refused rather than run with
/// wrong positions. (Llama 3's scaling has no metadata key: its converter writes
/// `rope_freqs.weight`, bound in `model.rs`.)
fn rope_scaling(
    f: &GgufFile,
    arch: Architecture,
    arch_name: &str,
    ctx_len: usize,
) -> Result<RopeScaling, String> {
    let k = |s: &str| format!("{arch_name}.{s}");
    let kind = match f.get(&k("rope.scaling.type")) {
        None => "linear".to_string(),
        Some(v) => match v.as_str() {
            Some(s) => s.to_string(),
            None => return Err(format!("`{}` is not a string", k("rope.scaling.type"))),
        },
    };
    let num = |key: &str| -> Result<Option<f32>, String> {
        match f.get(&k(key)) {
            None => Ok(None),
            Some(_) => {
                let v = f.get_f64(&k(key)).map_err(|e| without_path(f, e))? as f32;
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("`{}` is {v}; it must be positive", k(key)));
                }
                Ok(Some(v))
            }
        }
    };
    // Mistral 3 names YaRN's betas and its log multiplier (llama.cpp reads them for it alone).
    let mistral3 = arch == Architecture::Mistral3;
    let non_negative = |key: &str| -> Result<Option<f32>, String> {
        match f.get(&k(key)) {
            None => Ok(None),
            Some(_) => {
                let v = f.get_f64(&k(key)).map_err(|e| without_path(f, e))? as f32;
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!("`{}` is {v}; it must be a number ≥ 0", k(key)));
                }
                Ok(Some(v))
            }
        }
    };
    let deepseek2 = arch == Architecture::Deepseek2;
    if !mistral3 && !deepseek2 && f.get(&k("rope.scaling.yarn_log_multiplier")).is_some() {
        return Err(format!(
            "`{}` is not supported",
            k("rope.scaling.yarn_log_multiplier")
        ));
    }
    // llama.cpp: type `none` never scales; a factor without a type is linear.
    let factor = match kind.as_str() {
        "none" => 1.0,
        _ => num("rope.scaling.factor")?.unwrap_or(1.0),
    };
    let rope_attn_factor = num("rope.scaling.attn_factor")?.unwrap_or(1.0);
    let freq_scale = 1.0 / factor;
    let freq_scale_swa = if arch == Architecture::GptOss {
        freq_scale
    } else {
        1.0
    };
    match kind.as_str() {
        "none" | "linear" => Ok(RopeScaling {
            freq_scale,
            freq_scale_swa,
            yarn: None,
            attn_factor: rope_attn_factor,
        }),
        "yarn" => {
            let orig_ctx = match f.get(&k("rope.scaling.original_context_length")) {
                None => ctx_len,
                Some(_) => f
                    .get_usize_in(&k("rope.scaling.original_context_length"), 1..=1 << 24)
                    .map_err(|e| without_path(f, e))?,
            };
            // llama.cpp: attn_factor = mscale(factor) / (1 + 0.1·ln factor) · attn_factor,
            // and the table multiplies by 1 + 0.1·ln(1/freq_scale) again; with a log
            // multiplier m ≠ 0 (Mistral 3), mscale(factor, 1) / mscale(factor, m) instead.
            let mscale = |s: f32, m: f32| {
                if s <= 1.0 {
                    1.0
                } else {
                    0.1 * m * s.ln() + 1.0
                }
            };
            let (mut beta_fast, mut beta_slow, mut yarn_mscale) = (32.0, 1.0, mscale(factor, 1.0));
            if deepseek2 {
                // llama.cpp's DeepSeek fix: with the file's multiplier m (its key holds
                // 0.1·m), mscale(factor, m) / mscale(factor, m) — the table's magnitude is 1;
                // the attention scale takes m (see `mla_config`).
                yarn_mscale = 1.0;
            }
            if mistral3 {
                beta_fast = non_negative("rope.scaling.yarn_beta_fast")?.unwrap_or(beta_fast);
                beta_slow = non_negative("rope.scaling.yarn_beta_slow")?.unwrap_or(beta_slow);
                if let Some(m) =
                    non_negative("rope.scaling.yarn_log_multiplier")?.filter(|&m| m != 0.0)
                {
                    yarn_mscale = mscale(factor, 1.0) / mscale(factor, m);
                }
            }
            Ok(RopeScaling {
                freq_scale,
                freq_scale_swa,
                yarn: Some(Yarn {
                    orig_ctx,
                    beta_fast,
                    beta_slow,
                    ext_factor: 1.0,
                }),
                attn_factor: yarn_mscale / (1.0 + 0.1 * factor.ln()) * rope_attn_factor,
            })
        }
        other => Err(format!(
            "`{}` = `{other}` is not supported (supported: none, linear, yarn)",
            k("rope.scaling.type")
        )),
    }
}

/// Which per-pair RoPE divisor tensor the angles take, if any: Llama 3's `rope_freqs.weight`
/// (llama and the architectures on its layer that llama.cpp gives one), or Phi-3's LongRoPE
/// pair — both tensors required, the long one where `ctx_len` exceeds the original context.
fn rope_factors(
    f: &GgufFile,
    arch: Architecture,
    arch_name: &str,
    ctx_len: usize,
) -> Result<Option<&'static str>, String> {
    const FREQS: &str = "rope_freqs.weight";
    const LONG: &str = "rope_factors_long.weight";
    const SHORT: &str = "rope_factors_short.weight";
    let takes_freqs = matches!(
        arch,
        Architecture::Llama
            | Architecture::Granite
            | Architecture::GraniteMoe
            | Architecture::Mistral3
            | Architecture::Gemma4
    );
    if f.has_tensor(FREQS) {
        if !takes_freqs {
            return Err(format!(
                "per-dimension RoPE frequency factors (`{FREQS}`) are supported for llama, granite, mistral3 and gemma4, not {arch_name}"
            ));
        }
        return Ok(Some(FREQS));
    }
    let (long, short) = (f.has_tensor(LONG), f.has_tensor(SHORT));
    if !(long || short) {
        return Ok(None);
    }
    if arch != Architecture::Phi3 {
        return Err(format!(
            "LongRoPE factors (`{LONG}`) are supported for phi3, not {arch_name}"
        ));
    }
    if !(long && short) {
        return Err(format!("LongRoPE needs both `{LONG}` and `{SHORT}`"));
    }
    let key = format!("{arch_name}.rope.scaling.original_context_length");
    let orig = match f.get(&key) {
        None => ctx_len,
        Some(_) => f
            .get_usize_in(&key, 1..=1 << 24)
            .map_err(|e| without_path(f, e))?,
    };
    Ok(Some(if ctx_len > orig { LONG } else { SHORT }))
}

/// Multi-head latent attention's keys (`deepseek2`), checked against each other and against
/// the cache row the configuration sized (`attention.key_length` = `kv_lora_rank` + the rotated
/// part, one K/V head), and the score scale: llama.cpp's `mscale² / √key_length_mla`, where
/// `mscale = attn_factor · (1 + 0.1·ln s)(1 + 0.1·m·ln s)` for a YaRN factor `s` and the file's
/// log multiplier `m` (1 without YaRN).
fn mla_config(
    f: &GgufFile,
    arch_name: &str,
    cfg: &ModelConfig,
) -> Result<(MlaConfig, f32), String> {
    let k = |s: &str| format!("{arch_name}.{s}");
    let get = |key: &str, range: std::ops::RangeInclusive<usize>| {
        f.get_usize_in(&k(key), range)
            .map_err(|e| match f.get(&k(key)) {
                None => format!("`{}` is missing (latent attention needs it)", k(key)),
                Some(_) => without_path(f, e),
            })
    };
    if f.get(&k("attention.key_length_mla")).is_none() {
        return Err(format!(
            "`{}` is missing: a file from before llama.cpp split `attn_kv_b` into `attn_k_b` / `attn_v_b` (convert it again)",
            k("attention.key_length_mla")
        ));
    }
    if f.get(&k("attention.temperature_scale")).is_some() {
        return Err(format!(
            "deepseek2 with attention temperature (`{}`, Mistral Large 3) is not supported yet",
            k("attention.temperature_scale")
        ));
    }
    let kv_lora = get("attention.kv_lora_rank", 1..=1 << 14)?;
    let k_head = get("attention.key_length_mla", 1..=4096)?;
    let v_head = get("attention.value_length_mla", 1..=4096)?;
    let q_lora = match f.get(&k("attention.q_lora_rank")) {
        None => None,
        Some(_) => Some(get("attention.q_lora_rank", 0..=1 << 16)?).filter(|&r| r > 0),
    };
    let rope = cfg.rope_dim;
    if cfg.n_kv_heads != 1 || cfg.head_dim != kv_lora + rope {
        return Err(format!(
            "latent attention caches one row of `{}` + `{}` = {} per token: `{}` must be {} (is {}) and `{}` 1 (is {})",
            k("attention.kv_lora_rank"),
            k("rope.dimension_count"),
            kv_lora + rope,
            k("attention.key_length"),
            kv_lora + rope,
            cfg.head_dim,
            k("attention.head_count_kv"),
            cfg.n_kv_heads
        ));
    }
    if k_head <= rope {
        return Err(format!(
            "`{}` = {k_head} leaves no unrotated part beside the {rope} rotated dimensions",
            k("attention.key_length_mla")
        ));
    }
    let log_mul = match f.get(&k("rope.scaling.yarn_log_multiplier")) {
        None => 0.0,
        Some(_) => {
            f.get_f64(&k("rope.scaling.yarn_log_multiplier"))
                .map_err(|e| without_path(f, e))? as f32
                / 0.1
        }
    };
    if !log_mul.is_finite() {
        return Err(format!(
            "`{}` is not finite",
            k("rope.scaling.yarn_log_multiplier")
        ));
    }
    let rs = &cfg.rope_scaling;
    let ln_s = (1.0 / rs.freq_scale).ln();
    let org = rs.attn_factor * (1.0 + 0.1 * ln_s);
    let mscale = org * (1.0 + 0.1 * log_mul * ln_s);
    let mla = MlaConfig {
        q_lora,
        kv_lora,
        k_head,
        v_head,
    };
    Ok((mla, mscale * mscale / (k_head as f32).sqrt()))
}

/// Mistral 3's attention temperature (`attention.temperature_scale`; absent or 0: none), over
/// steps of YaRN's original context.
fn attn_temperature(
    f: &GgufFile,
    arch: Architecture,
    arch_name: &str,
    ctx_len: usize,
) -> Result<Option<AttnTemperature>, String> {
    let key = format!("{arch_name}.attention.temperature_scale");
    if arch != Architecture::Mistral3 || f.get(&key).is_none() {
        return Ok(None);
    }
    let scale = f.get_f64(&key).map_err(|e| without_path(f, e))? as f32;
    if !scale.is_finite() {
        return Err(format!("`{key}` is {scale}"));
    }
    if scale == 0.0 {
        return Ok(None);
    }
    let orig_key = format!("{arch_name}.rope.scaling.original_context_length");
    let floor = match f.get(&orig_key) {
        None => ctx_len,
        Some(_) => f
            .get_usize_in(&orig_key, 1..=1 << 24)
            .map_err(|e| without_path(f, e))?,
    };
    Ok(Some(AttnTemperature { scale, floor }))
}

/// Nemotron-H's `feed_forward_length`: one width per layer, 0 on the layers without a
/// feed-forward. Returns the width (the layers that have one must agree) and which have one.
fn per_layer_widths(
    a: &ridge_gguf::ArrayValue,
    key: &str,
    layers: (usize, usize),
) -> Result<(usize, Vec<bool>), String> {
    let v = a
        .to_i64_vec()
        .ok_or_else(|| format!("`{key}` must be an array of integers"))?;
    let v = trunk(&v, key, layers)?;
    let mut widths = v.iter().copied().filter(|&w| w != 0);
    let first = widths.next().unwrap_or(1);
    if widths.any(|w| w != first) || !(1..=1 << 20).contains(&first) {
        return Err(format!(
            "`{key}` must give every feed-forward layer the same width, 1..=1048576"
        ));
    }
    Ok((first as usize, v.iter().map(|&w| w != 0).collect()))
}

/// LFM2's `attention.head_count_kv`: one count per layer, 0 on its convolution layers. Returns
/// the attention layers' count (they must agree and divide `n_heads`) and which layers have
/// none.
fn per_layer_kv_heads(
    a: &ridge_gguf::ArrayValue,
    key: &str,
    layers: (usize, usize),
    n_heads: usize,
) -> Result<(usize, Option<Vec<bool>>), String> {
    let v = a
        .to_i64_vec()
        .ok_or_else(|| format!("`{key}` must be an array of integers"))?;
    let v = trunk(&v, key, layers)?;
    let mut heads = v.iter().copied().filter(|&h| h != 0);
    let Some(first) = heads.next() else {
        return Err(format!("`{key}` has no attention layer (every entry is 0)"));
    };
    if heads.any(|h| h != first) || first < 1 || first as usize > n_heads {
        return Err(format!(
            "`{key}` must give every attention layer the same count, 1..={n_heads}"
        ));
    }
    Ok((first as usize, Some(v.iter().map(|&h| h == 0).collect())))
}
