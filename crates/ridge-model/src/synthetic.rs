//! Tiny random GGUF files of the supported architectures (llama, gemma3, qwen2, qwen3, and the
//! mixtures: qwen2moe, qwen3moe, olmoe, llama with experts, gpt-oss), for tests and
//! examples: real files through the real loader, small enough to check against a naive
//! reference in milliseconds.
//!
//! The vocabulary is GPT-2 byte-level: one token per byte (so any text tokenizes) plus
//! `<|endoftext|>` as a control token, no merges.

use ridge_gguf::{ArrayValue, GgmlType, GgufWriter, MetadataValue};
use ridge_kernels::{blocks, DType};

pub use crate::synthetic_spec::{
    gpt2_byte_char, SyntheticGemma4, SyntheticHybrid, SyntheticMla, SyntheticMoe, SyntheticRank,
    SyntheticSpec, SYNTHETIC_VOCAB,
};
use crate::synthetic_spec::{to_dtype_id, write_byte_vocab, Rng};
use crate::Architecture;
/// The synthetic reranker the rank fixtures were made on (`tools/reference/make_rerank_fixtures.sh`):
/// a two-layer qwen3 in f32 with Qwen3-Reranker's head layout (labels `yes`, `no`) and a rerank
/// template that wraps the pair in `<|endoftext|>` control tokens.
pub fn synthetic_reranker() -> SyntheticSpec {
    SyntheticSpec {
        arch: Architecture::Qwen3,
        dtype: DType::F32,
        embd_dtype: DType::F32,
        ctx_len: 512,
        seed: 7,
        rank: Some(SyntheticRank {
            labels: vec!["yes".into(), "no".into()],
            template: Some(
                "<|endoftext|>query: {query} | document: {document}<|endoftext|>".into(),
            ),
        }),
        ..SyntheticSpec::default()
    }
}
/// Builds the GGUF bytes of a random model of `spec.arch` (the name predates gemma3; it is
/// the same function as [`synthetic_model`]).
pub fn synthetic_llama(spec: &SyntheticSpec) -> Vec<u8> {
    synthetic_model(spec)
}

/// Builds the GGUF bytes of a random model of `spec.arch`.
///
/// A gemma3 model gets the extra per-layer norms (`attn_q_norm`, `attn_k_norm`,
/// `post_attention_norm`, `post_ffw_norm`), `attention.key_length`, `attention.sliding_window`
/// and RoPE base 1 000 000 (its sliding layers use 10 000), and a tied head. A gpt-oss model
/// gets biases on Q/K/V, the output projection, the router and the experts, `attn_sinks`,
/// `post_attention_norm` as its pre-FFN norm, a sliding window, RoPE base 150 000 with YaRN
/// (factor 32 over 4096 positions), and its experts in `expert_dtype`. A qwen2 model
/// gets random Q/K/V biases (`blk.N.attn_{q,k,v}.bias`, f32) and RoPE base 1 000 000; a qwen3
/// model no biases, per-head `attn_q_norm`/`attn_k_norm` and RoPE base 1 000 000.
pub fn synthetic_model(spec: &SyntheticSpec) -> Vec<u8> {
    if spec.arch == Architecture::Gemma4 {
        return crate::synthetic_gemma4::write(spec, &spec.gemma4.clone().unwrap_or_default());
    }
    let rng = Rng(std::cell::Cell::new(
        spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
    ));
    let gemma = spec.arch == Architecture::Gemma3;
    let qwen2 = spec.arch.requires_qkv_bias() || spec.arch == Architecture::Glm4Moe;
    let qwen3 = matches!(spec.arch, Architecture::Qwen3 | Architecture::Qwen3Moe);
    let olmoe = spec.arch == Architecture::Olmoe;
    let gpt_oss = spec.arch == Architecture::GptOss;
    let lfm2 = spec.arch == Architecture::Lfm2;
    let granite = spec.arch == Architecture::GraniteHybrid;
    // Granite's multipliers and ungated shared expert, dense or hybrid.
    let granite_any = spec.arch.is_granite();
    let phi3 = spec.arch == Architecture::Phi3;
    let mistral3 = spec.arch == Architecture::Mistral3;
    let glm = spec.arch == Architecture::Glm4Moe;
    let mla = spec
        .mla
        .as_ref()
        .filter(|_| spec.arch == Architecture::Deepseek2);
    let orig_ctx = spec.rope_orig_ctx.unwrap_or((spec.ctx_len / 4).max(1));
    let nemotron = spec.arch == Architecture::NemotronH;
    // LFM2 takes only the convolution's taps and the attention interval from the hybrid spec;
    // Granite 4.0-H reads its heads as Mamba2 heads, `n_k_heads` as groups and `head_dim` as
    // the state size.
    let hybrid = spec
        .hybrid
        .as_ref()
        .filter(|_| spec.arch.is_hybrid() && !lfm2 && !granite && !nemotron);
    let short_conv = spec.hybrid.as_ref().filter(|_| lfm2);
    let mamba = spec.hybrid.as_ref().filter(|_| granite || nemotron);
    let per_layer = short_conv.or(mamba);
    let attends = |i: usize| per_layer.is_none_or(|h| (i + 1).is_multiple_of(h.interval.max(1)));
    // Nemotron-H: of the layers that do not attend, the odd ones are MLPs, the others Mamba2.
    let mlp_layer = |i: usize| nemotron && !attends(i) && i % 2 == 1;
    let rope_base = if hybrid.is_some() {
        1e7
    } else if gemma || qwen2 || qwen3 {
        1e6
    } else if gpt_oss {
        150000.0
    } else {
        10000.0
    };
    // Latent attention caches one "head" of latent + rotated part.
    let head_dim = match mla {
        Some(m) => m.kv_lora + m.rope,
        None => spec.head_dim.unwrap_or(spec.d_model / spec.n_heads),
    };
    let (d, q, kv, ffn) = (
        spec.d_model,
        spec.n_heads * head_dim,
        spec.n_kv_heads * head_dim,
        spec.ffn_dim,
    );
    let arch = spec.arch.gguf_name();
    let mut w = GgufWriter::new();
    let s = |v: &str| MetadataValue::String(v.into());
    let u = |v: usize| MetadataValue::U32(v as u32);
    let k = |key: &str| format!("{arch}.{key}");
    w.meta("general.architecture", s(arch))
        .meta("general.name", s("synthetic"))
        // GLM's converter counts its multi-token-prediction layer (whose tensors a file may
        // leave out, as these do).
        .meta(
            &k("block_count"),
            u(spec.n_layers + usize::from(spec.arch == Architecture::Glm4Moe)),
        )
        .meta(&k("context_length"), u(spec.ctx_len))
        .meta(&k("embedding_length"), u(d))
        .meta(
            &k("feed_forward_length"),
            if nemotron {
                MetadataValue::Array(ArrayValue::I32(
                    (0..spec.n_layers)
                        .map(|i| if mlp_layer(i) { ffn as i32 } else { 0 })
                        .collect(),
                ))
            } else {
                u(ffn)
            },
        )
        .meta(&k("attention.head_count"), u(spec.n_heads))
        .meta(
            &k("attention.head_count_kv"),
            match per_layer {
                // One count per layer, 0 on the recurrent layers.
                Some(_) => MetadataValue::Array(ArrayValue::I32(
                    (0..spec.n_layers)
                        .map(|i| {
                            if attends(i) {
                                spec.n_kv_heads as i32
                            } else {
                                0
                            }
                        })
                        .collect(),
                )),
                None => u(spec.n_kv_heads),
            },
        )
        .meta(&k("rope.freq_base"), MetadataValue::F32(rope_base as f32))
        .meta(
            // Nemotron-H's converter may give only the LayerNorm epsilon.
            &k(if nemotron {
                "attention.layer_norm_epsilon"
            } else {
                "attention.layer_norm_rms_epsilon"
            }),
            MetadataValue::F32(if gemma || hybrid.is_some() {
                1e-6
            } else {
                1e-5
            }),
        );
    if let Some(h) = hybrid {
        w.meta(&k("ssm.conv_kernel"), u(h.conv_kernel))
            .meta(&k("ssm.state_size"), u(h.head_dim))
            .meta(&k("ssm.group_count"), u(h.n_k_heads))
            .meta(&k("ssm.time_step_rank"), u(h.n_v_heads))
            .meta(&k("ssm.inner_size"), u(h.n_v_heads * h.head_dim))
            .meta(&k("full_attention_interval"), u(h.interval))
            .meta(&k("rope.dimension_count"), u(h.rope_dim));
        if spec.arch != Architecture::Qwen3Next {
            w.meta(
                &k("rope.dimension_sections"),
                MetadataValue::Array(ArrayValue::I32(h.sections.to_vec())),
            );
        }
    }
    if let Some(h) = short_conv {
        w.meta(&k("shortconv.l_cache"), u(h.conv_kernel));
    }
    if let Some(h) = mamba {
        // llama.cpp takes only an expansion factor of 2.
        w.meta(&k("ssm.conv_kernel"), u(h.conv_kernel))
            .meta(&k("ssm.inner_size"), u(2 * d))
            .meta(&k("ssm.state_size"), u(h.head_dim))
            .meta(&k("ssm.time_step_rank"), u(h.n_v_heads))
            .meta(&k("ssm.group_count"), u(h.n_k_heads));
    }
    if granite_any {
        w.meta(&k("embedding_scale"), MetadataValue::F32(3.0))
            .meta(&k("residual_scale"), MetadataValue::F32(0.6))
            .meta(&k("attention.scale"), MetadataValue::F32(0.2))
            .meta(&k("logit_scale"), MetadataValue::F32(2.5))
            // A hybrid's `rope_dim` 0 asks for attention without positions.
            .meta(
                &k("rope.scaling.finetuned"),
                MetadataValue::Bool(mamba.is_none_or(|h| h.rope_dim > 0)),
            );
    }
    if let Some(r) = spec.rope_dim.filter(|_| hybrid.is_none()) {
        w.meta(&k("rope.dimension_count"), u(r));
    }
    if phi3 {
        // Phi-3's converter: the original context, LongRoPE's magnitude factor
        // √(1 + ln(ctx / orig) / ln orig), and a sliding window of 0 (none).
        let scale = spec.ctx_len as f64 / orig_ctx as f64;
        let attn = (1.0 + scale.ln() / (orig_ctx as f64).ln()).sqrt();
        w.meta(&k("rope.scaling.original_context_length"), u(orig_ctx))
            .meta(
                &k("rope.scaling.attn_factor"),
                MetadataValue::F32(attn as f32),
            )
            .meta(&k("attention.sliding_window"), u(0));
    }
    if mistral3 {
        // Llama 4's attention temperature over YaRN's original context (a β five times
        // Ministral's 0.1, so that it shows in a 64-token window).
        w.meta(&k("attention.temperature_scale"), MetadataValue::F32(0.5));
        if spec.rope_scaling.is_some_and(|(kind, _)| kind == "yarn") {
            w.meta(&k("rope.scaling.yarn_beta_fast"), MetadataValue::F32(16.0))
                .meta(&k("rope.scaling.yarn_beta_slow"), MetadataValue::F32(2.0))
                .meta(
                    &k("rope.scaling.yarn_log_multiplier"),
                    MetadataValue::F32(1.0),
                );
        }
        if spec.rope_scaling.is_none() {
            w.meta(&k("rope.scaling.original_context_length"), u(orig_ctx));
        }
    }
    if let Some(m) = mla {
        w.meta(&k("attention.kv_lora_rank"), u(m.kv_lora))
            .meta(&k("attention.key_length"), u(m.kv_lora + m.rope))
            .meta(&k("attention.value_length"), u(m.kv_lora))
            .meta(&k("attention.key_length_mla"), u(m.nope + m.rope))
            .meta(&k("attention.value_length_mla"), u(m.v_head))
            .meta(&k("rope.dimension_count"), u(m.rope));
        if let Some(r) = m.q_lora {
            w.meta(&k("attention.q_lora_rank"), u(r));
        }
        if let Some(moe) = &spec.moe {
            let shared = moe.shared_ffn.map_or(0, |sf| sf / moe.expert_ffn);
            w.meta(&k("expert_shared_count"), u(shared))
                .meta(&k("leading_dense_block_count"), u(moe.dense_lead))
                .meta(&k("expert_feed_forward_length"), u(moe.expert_ffn))
                .meta(&k("expert_gating_func"), u(if moe.sigmoid { 2 } else { 1 }))
                .meta(&k("expert_weights_scale"), MetadataValue::F32(1.5))
                .meta(&k("expert_weights_norm"), MetadataValue::Bool(moe.sigmoid));
            if let Some((g, used)) = moe.groups {
                w.meta(&k("expert_group_count"), u(g))
                    .meta(&k("expert_group_used_count"), u(used));
            }
        }
        if spec.rope_scaling.is_some_and(|(kind, _)| kind == "yarn") {
            // DeepSeek's converter writes 0.1 · mscale_all_dim.
            w.meta(
                &k("rope.scaling.yarn_log_multiplier"),
                MetadataValue::F32(0.1),
            );
        }
    } else if gemma || gpt_oss || spec.head_dim.is_some() {
        w.meta(&k("attention.key_length"), u(head_dim))
            .meta(&k("attention.value_length"), u(head_dim));
    }
    if gemma || gpt_oss {
        w.meta(&k("attention.sliding_window"), u(spec.sliding_window));
    }
    match spec.rope_scaling {
        Some((kind, factor)) => {
            w.meta(&k("rope.scaling.type"), s(kind))
                .meta(&k("rope.scaling.factor"), MetadataValue::F32(factor));
            if kind == "yarn" {
                w.meta(&k("rope.scaling.original_context_length"), u(orig_ctx));
            }
        }
        // gpt-oss's published scaling: YaRN, factor 32 over an original context of 4096.
        None if gpt_oss => {
            w.meta(&k("rope.scaling.type"), s("yarn"))
                .meta(&k("rope.scaling.factor"), MetadataValue::F32(32.0))
                .meta(&k("rope.scaling.original_context_length"), u(4096));
        }
        None => {}
    }
    if let Some(moe) = &spec.moe {
        w.meta(&k("expert_count"), u(moe.n_expert))
            .meta(&k("expert_used_count"), u(moe.n_used));
        if matches!(
            spec.arch,
            Architecture::Qwen2Moe
                | Architecture::Qwen3Moe
                | Architecture::GptOss
                | Architecture::Qwen35Moe
                | Architecture::Qwen3Next
                | Architecture::Glm4Moe
        ) {
            w.meta(&k("expert_feed_forward_length"), u(moe.expert_ffn));
        }
        if let Some(sf) = moe.shared_ffn.filter(|_| !glm && mla.is_none()) {
            w.meta(&k("expert_shared_feed_forward_length"), u(sf));
        }
        if glm {
            let shared = moe.shared_ffn.map_or(0, |sf| sf / moe.expert_ffn);
            w.meta(&k("expert_shared_count"), u(shared))
                .meta(&k("leading_dense_block_count"), u(moe.dense_lead))
                .meta(&k("expert_gating_func"), u(2))
                .meta(&k("expert_weights_scale"), MetadataValue::F32(2.5))
                .meta(&k("expert_weights_norm"), MetadataValue::Bool(true))
                .meta(&k("nextn_predict_layers"), u(1));
        }
    }
    let vocab = write_byte_vocab(&mut w, spec.vocab);

    let mat = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, dt: DType, scale: f32| {
        let vals: Vec<f32> = (0..rows * cols).map(|_| rng.next() * scale).collect();
        let data: Vec<u8> = vals
            .chunks(cols)
            .flat_map(|r| blocks::quantize_row(dt, r))
            .collect();
        w.tensor(name, &[cols as u64, rows as u64], to_dtype_id(dt), data);
    };
    let ws = 1.0 / (d as f32).sqrt();
    let wo_scale = 1.0 / (q as f32).sqrt();
    mat(&mut w, "token_embd.weight", vocab, d, spec.embd_dtype, 1.0);
    let norm = |w: &mut GgufWriter, name: &str, n: usize, seed: usize| {
        let vals: Vec<f32> = (0..n)
            .map(|i| 1.0 + 0.1 * ((i * 7 + seed) % 5) as f32)
            .collect();
        w.tensor(
            name,
            &[n as u64],
            GgmlType::F32,
            blocks::quantize_row(DType::F32, &vals),
        );
    };
    for i in 0..spec.n_layers {
        let n = |x: &str| format!("blk.{i}.{x}.weight");
        norm(&mut w, &n("attn_norm"), d, i);
        if nemotron && mlp_layer(i) {
            mat(&mut w, &n("ffn_up"), ffn, d, spec.dtype, ws);
            mat(
                &mut w,
                &n("ffn_down"),
                d,
                ffn,
                spec.dtype,
                1.0 / (ffn as f32).sqrt(),
            );
            continue;
        }
        if let Some(h) = mamba {
            if granite {
                norm(&mut w, &n("ffn_norm"), d, i + 1);
            }
            if attends(i) {
                mat(&mut w, &n("attn_q"), q, d, spec.dtype, ws);
                mat(&mut w, &n("attn_k"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_v"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_output"), d, q, spec.dtype, wo_scale);
            } else {
                let (inner, nh, ng, ds) = (2 * d, h.n_v_heads, h.n_k_heads, h.head_dim);
                let cd = inner + 2 * ng * ds;
                mat(
                    &mut w,
                    &n("ssm_in"),
                    2 * inner + 2 * ng * ds + nh,
                    d,
                    spec.dtype,
                    ws,
                );
                let taps = 1.0 / (h.conv_kernel as f32).sqrt();
                f32_tensor(&mut w, &n("ssm_conv1d"), &[h.conv_kernel, cd], &rng, taps);
                f32_tensor(
                    &mut w,
                    &format!("blk.{i}.ssm_conv1d.bias"),
                    &[cd],
                    &rng,
                    0.2,
                );
                f32_tensor(&mut w, &format!("blk.{i}.ssm_dt.bias"), &[nh], &rng, 1.0);
                // A = −exp(A_log), A_log in [−1, 1); D around 1.
                let a: Vec<f32> = (0..nh).map(|_| -rng.next().exp()).collect();
                let dd: Vec<f32> = (0..nh).map(|_| 1.0 + 0.5 * rng.next()).collect();
                for (name, vals) in [("ssm_a", a), ("ssm_d", dd)] {
                    w.tensor(
                        &format!("blk.{i}.{name}"),
                        &[1, nh as u64],
                        GgmlType::F32,
                        blocks::quantize_row(DType::F32, &vals),
                    );
                }
                let g = inner / ng;
                let vals: Vec<f32> = (0..inner)
                    .map(|j| 1.0 + 0.1 * ((j * 7 + i) % 5) as f32)
                    .collect();
                w.tensor(
                    &n("ssm_norm"),
                    &[g as u64, ng as u64],
                    GgmlType::F32,
                    blocks::quantize_row(DType::F32, &vals),
                );
                mat(
                    &mut w,
                    &n("ssm_out"),
                    d,
                    inner,
                    spec.dtype,
                    1.0 / (inner as f32).sqrt(),
                );
            }
            if nemotron {
                continue;
            }
        } else if short_conv.is_some() {
            norm(&mut w, &n("ffn_norm"), d, i + 1);
            if attends(i) {
                mat(&mut w, &n("attn_q"), q, d, spec.dtype, ws);
                mat(&mut w, &n("attn_k"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_v"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_output"), d, q, spec.dtype, wo_scale);
                norm(&mut w, &n("attn_q_norm"), head_dim, i + 2);
                norm(&mut w, &n("attn_k_norm"), head_dim, i + 4);
            } else {
                let taps = short_conv.map_or(1, |h| h.conv_kernel);
                let c = |x: &str| format!("blk.{i}.shortconv.{x}.weight");
                mat(&mut w, &c("in_proj"), 3 * d, d, spec.dtype, ws * 2.0);
                let scale = 1.0 / (taps as f32).sqrt();
                f32_tensor(&mut w, &c("conv"), &[taps, d], &rng, scale);
                mat(&mut w, &c("out_proj"), d, d, spec.dtype, ws);
            }
        } else if let Some(h) = hybrid {
            norm(&mut w, &n("post_attention_norm"), d, i + 1);
            if (i + 1) % h.interval.max(1) == 0 {
                mat(&mut w, &n("attn_q"), 2 * q, d, spec.dtype, ws);
                mat(&mut w, &n("attn_k"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_v"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_output"), d, q, spec.dtype, wo_scale);
                norm(&mut w, &n("attn_q_norm"), head_dim, i + 2);
                norm(&mut w, &n("attn_k_norm"), head_dim, i + 4);
            } else {
                let (kd, vd) = (h.n_k_heads * h.head_dim, h.n_v_heads * h.head_dim);
                let cd = 2 * kd + vd;
                let next = spec.arch == Architecture::Qwen3Next;
                if next && h.legacy_qkvz {
                    // Per key head: query, key, its value heads' values and `z`.
                    mat(&mut w, &n("ssm_in"), cd + vd, d, spec.dtype, ws);
                } else {
                    mat(&mut w, &n("attn_qkv"), cd, d, spec.dtype, ws);
                    mat(&mut w, &n("attn_gate"), vd, d, spec.dtype, ws);
                }
                if next {
                    // Per key head: its value heads' β, then their α.
                    let nv = h.n_v_heads;
                    mat(&mut w, &n("ssm_ba"), 2 * nv, d, spec.dtype, ws * 2.0);
                } else {
                    let nv = h.n_v_heads;
                    mat(&mut w, &n("ssm_beta"), nv, d, spec.dtype, ws * 2.0);
                    mat(&mut w, &n("ssm_alpha"), nv, d, spec.dtype, ws * 2.0);
                }
                mat(
                    &mut w,
                    &n("ssm_out"),
                    d,
                    vd,
                    spec.dtype,
                    1.0 / (vd as f32).sqrt(),
                );
                let taps = 1.0 / (h.conv_kernel as f32).sqrt();
                f32_tensor(&mut w, &n("ssm_conv1d"), &[h.conv_kernel, cd], &rng, taps);
                f32_tensor(
                    &mut w,
                    &format!("blk.{i}.ssm_dt.bias"),
                    &[h.n_v_heads],
                    &rng,
                    1.0,
                );
                // a = −exp(A_log) with A_log in [−1, 1): decays between e^−2.7 and e^−0.37
                // per unit of softplus.
                let a: Vec<f32> = (0..h.n_v_heads).map(|_| -rng.next().exp()).collect();
                let data = blocks::quantize_row(DType::F32, &a);
                w.tensor(
                    &format!("blk.{i}.ssm_a"),
                    &[h.n_v_heads as u64],
                    GgmlType::F32,
                    data,
                );
                norm(&mut w, &n("ssm_norm"), h.head_dim, i + 3);
            }
        } else if let Some(m) = mla {
            let (h, kh) = (spec.n_heads, m.nope + m.rope);
            match m.q_lora {
                Some(r) => {
                    mat(&mut w, &n("attn_q_a"), r, d, spec.dtype, ws);
                    norm(&mut w, &n("attn_q_a_norm"), r, i + 5);
                    mat(
                        &mut w,
                        &n("attn_q_b"),
                        h * kh,
                        r,
                        spec.dtype,
                        1.0 / (r as f32).sqrt(),
                    );
                }
                None => mat(&mut w, &n("attn_q"), h * kh, d, spec.dtype, ws),
            }
            mat(
                &mut w,
                &n("attn_kv_a_mqa"),
                m.kv_lora + m.rope,
                d,
                spec.dtype,
                ws,
            );
            norm(&mut w, &n("attn_kv_a_norm"), m.kv_lora, i + 6);
            // Per head: K's up-projection `kv_lora × nope`, V's `v_head × kv_lora`.
            let per_head = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize| {
                let sc = 1.0 / (cols as f32).sqrt();
                let vals: Vec<f32> = (0..h * rows * cols).map(|_| rng.next() * sc).collect();
                let data: Vec<u8> = vals
                    .chunks(cols)
                    .flat_map(|r| blocks::quantize_row(spec.dtype, r))
                    .collect();
                let dims = [cols as u64, rows as u64, h as u64];
                w.tensor(name, &dims, to_dtype_id(spec.dtype), data);
            };
            per_head(&mut w, &n("attn_k_b"), m.kv_lora, m.nope);
            per_head(&mut w, &n("attn_v_b"), m.v_head, m.kv_lora);
            let vo = h * m.v_head;
            mat(
                &mut w,
                &n("attn_output"),
                d,
                vo,
                spec.dtype,
                1.0 / (vo as f32).sqrt(),
            );
            norm(&mut w, &n("ffn_norm"), d, i + 1);
        } else {
            if phi3 {
                // Q, K and V in one matrix, Q's rows first.
                mat(&mut w, &n("attn_qkv"), q + 2 * kv, d, spec.dtype, ws);
            } else {
                mat(&mut w, &n("attn_q"), q, d, spec.dtype, ws);
                mat(&mut w, &n("attn_k"), kv, d, spec.dtype, ws);
                mat(&mut w, &n("attn_v"), kv, d, spec.dtype, ws);
            }
            mat(&mut w, &n("attn_output"), d, q, spec.dtype, wo_scale);
            norm(&mut w, &n(spec.arch.ffn_norm_name()), d, i + 1);
        }
        if gpt_oss {
            let b = |x: &str| format!("blk.{i}.{x}.bias");
            for (name, len, sc) in [("attn_q", q, 0.5), ("attn_k", kv, 0.5), ("attn_v", kv, 0.5)]
                .into_iter()
                .chain([("attn_output", d, 0.2)])
            {
                f32_tensor(&mut w, &b(name), &[len], &rng, sc);
            }
            // Sinks around the scores' own range, so some heads give them real weight.
            f32_tensor(&mut w, &n("attn_sinks"), &[spec.n_heads], &rng, 2.0);
        }
        let Some(moe) = spec.moe.as_ref().filter(|m| i >= m.dense_lead) else {
            if phi3 {
                // Gate and up in one matrix, the gate's rows first.
                mat(&mut w, &n("ffn_up"), 2 * ffn, d, spec.dtype, ws);
            } else {
                mat(&mut w, &n("ffn_gate"), ffn, d, spec.dtype, ws);
                mat(&mut w, &n("ffn_up"), ffn, d, spec.dtype, ws);
            }
            mat(
                &mut w,
                &n("ffn_down"),
                d,
                ffn,
                spec.dtype,
                1.0 / (ffn as f32).sqrt(),
            );
            continue;
        };
        let (e, f) = (moe.n_expert, moe.expert_ffn);
        let router = ws * moe.router_scale;
        mat(&mut w, &n("ffn_gate_inp"), e, d, DType::F32, router);
        if glm || (mla.is_some() && moe.sigmoid) {
            // The selection bias, on the scale of the sigmoid scores it is added to.
            f32_tensor(
                &mut w,
                &format!("blk.{i}.exp_probs_b.bias"),
                &[e],
                &rng,
                0.3,
            );
        }
        let edt = spec.expert_dtype.unwrap_or(spec.dtype);
        // A stacked tensor is its experts' rows one after another: quantized row by row as
        // one (E·rows) × cols matrix, with the 3-D shape.
        let stacked = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, sc: f32| {
            let vals: Vec<f32> = (0..e * rows * cols).map(|_| rng.next() * sc).collect();
            let data: Vec<u8> = vals
                .chunks(cols)
                .flat_map(|r| blocks::quantize_row(edt, r))
                .collect();
            let dims = [cols as u64, rows as u64, e as u64];
            w.tensor(name, &dims, to_dtype_id(edt), data);
        };
        stacked(&mut w, &n("ffn_gate_exps"), f, d, ws);
        stacked(&mut w, &n("ffn_up_exps"), f, d, ws);
        stacked(&mut w, &n("ffn_down_exps"), d, f, 1.0 / (f as f32).sqrt());
        if gpt_oss {
            let b = |x: &str| format!("blk.{i}.{x}.bias");
            f32_tensor(&mut w, &b("ffn_gate_inp"), &[e], &rng, 0.5);
            f32_tensor(&mut w, &b("ffn_gate_exps"), &[f, e], &rng, 0.3);
            f32_tensor(&mut w, &b("ffn_up_exps"), &[f, e], &rng, 0.3);
            f32_tensor(&mut w, &b("ffn_down_exps"), &[d, e], &rng, 0.1);
        }
        if let Some(sf) = moe.shared_ffn {
            mat(&mut w, &n("ffn_gate_shexp"), sf, d, spec.dtype, ws);
            mat(&mut w, &n("ffn_up_shexp"), sf, d, spec.dtype, ws);
            mat(
                &mut w,
                &n("ffn_down_shexp"),
                d,
                sf,
                spec.dtype,
                1.0 / (sf as f32).sqrt(),
            );
            // Granite's and GLM's shared experts have no gate.
            if spec.arch.shared_expert_gated() {
                let g: Vec<f32> = (0..d).map(|_| rng.next() * ws * 4.0).collect();
                let data = blocks::quantize_row(DType::F32, &g);
                w.tensor(&n("ffn_gate_inp_shexp"), &[d as u64], GgmlType::F32, data);
            }
        }
    }
    norm(&mut w, spec.arch.output_norm_tensor(), d, 3);
    if gemma || qwen3 || olmoe || (glm && spec.qk_norm) {
        let (qn, kn) = if olmoe { (q, kv) } else { (head_dim, head_dim) };
        for i in 0..spec.n_layers {
            let n = |x: &str| format!("blk.{i}.{x}.weight");
            norm(&mut w, &n("attn_q_norm"), qn, i + 2);
            norm(&mut w, &n("attn_k_norm"), kn, i + 4);
            if gemma {
                norm(&mut w, &n("post_attention_norm"), d, i + 3);
                norm(&mut w, &n("post_ffw_norm"), d, i + 1);
            }
        }
    }
    if phi3 {
        // LongRoPE: divisors growing along the pairs, the long set about ten times the short.
        let pairs = spec.rope_dim.unwrap_or(head_dim) / 2;
        for (name, step) in [("rope_factors_long", 0.6f32), ("rope_factors_short", 0.05)] {
            let f: Vec<f32> = (0..pairs).map(|i| 1.0 + step * i as f32).collect();
            w.tensor(
                &format!("{name}.weight"),
                &[pairs as u64],
                GgmlType::F32,
                blocks::quantize_row(DType::F32, &f),
            );
        }
    }
    if spec.rope_freqs {
        let f = llama3_rope_factors(head_dim, rope_base, spec.ctx_len as f64);
        w.tensor(
            "rope_freqs.weight",
            &[f.len() as u64],
            GgmlType::F32,
            blocks::quantize_row(DType::F32, &f),
        );
    }
    if spec.separate_output && !gemma {
        mat(&mut w, "output.weight", vocab, d, spec.dtype, ws);
    }
    if qwen2 {
        for i in 0..spec.n_layers {
            for (name, n) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
                let vals: Vec<f32> = (0..n).map(|_| rng.next() * 0.5).collect();
                w.tensor(
                    &format!("blk.{i}.{name}.bias"),
                    &[n as u64],
                    GgmlType::F32,
                    blocks::quantize_row(DType::F32, &vals),
                );
            }
        }
    }
    if let Some(rank) = &spec.rank {
        w.meta(&k("pooling_type"), u(4));
        if !rank.labels.is_empty() {
            w.meta(
                &k("classifier.output_labels"),
                MetadataValue::Array(ArrayValue::String(rank.labels.clone())),
            );
        }
        if let Some(t) = &rank.template {
            w.meta("tokenizer.chat_template.rerank", s(t));
        }
        // Twice the layers' scale: logits a unit or two apart, far from a saturated softmax.
        let n_out = rank.labels.len().max(1);
        f32_tensor(&mut w, "cls.output.weight", &[d, n_out], &rng, 2.0 * ws);
    }
    w.to_bytes()
}

/// Writes an f32 tensor of shape `dims` (GGUF order) of uniform values in `[−scale, scale)`.
fn f32_tensor(w: &mut GgufWriter, name: &str, dims: &[usize], rng: &Rng, scale: f32) {
    let n: usize = dims.iter().product();
    let vals: Vec<f32> = (0..n).map(|_| rng.next() * scale).collect();
    let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
    w.tensor(
        name,
        &dims,
        GgmlType::F32,
        blocks::quantize_row(DType::F32, &vals),
    );
}

/// Llama 3.1's RoPE frequency factors for a head of `dim` rotated dimensions (the published
/// recipe: factor 8, low/high frequency factors 1 and 4, here over an original context of
/// `old_ctx`): 1 for wavelengths under `old_ctx / 4`, 8 above `old_ctx`, smoothly between.
fn llama3_rope_factors(dim: usize, base: f64, old_ctx: f64) -> Vec<f32> {
    let (factor, low, high) = (8.0f64, 1.0f64, 4.0f64);
    (0..dim / 2)
        .map(|i| {
            let freq = base.powf(-2.0 * i as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < old_ctx / high {
                1.0
            } else if wavelen > old_ctx / low {
                factor as f32
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
            }
        })
        .collect()
}
