//! Tiny random Gemma 4 files (`gemma4`) in llama.cpp's layout: sliding and global layers of
//! different head shapes, K/V shared by the last layers, per-layer token embeddings, a scalar
//! per layer — the parts `gemma4.rs` runs — written apart from `synthetic.rs` because hardly
//! any of its tensors are the other architectures'.

use ridge_gguf::{ArrayValue, GgmlType, GgufWriter, MetadataValue};
use ridge_kernels::{blocks, DType};

use crate::synthetic_spec::{to_dtype_id, write_byte_vocab, Rng, SyntheticGemma4, SyntheticSpec};

/// The GGUF bytes of a random Gemma 4 of `spec`'s common shape and `g`'s own.
pub(crate) fn write(spec: &SyntheticSpec, g: &SyntheticGemma4) -> Vec<u8> {
    let rng = Rng(std::cell::Cell::new(
        spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
    ));
    let (nl, d, nh) = (spec.n_layers, spec.d_model, spec.n_heads);
    let hd = spec.head_dim.unwrap_or(d / nh);
    let sliding = |i: usize| !(i + 1).is_multiple_of(g.period.max(1));
    let first_shared = nl - g.shared_kv_layers.min(nl);
    let owns = |i: usize| i < first_shared;
    let shape = |i: usize| {
        if sliding(i) {
            (g.head_dim_swa, g.n_kv_heads_swa)
        } else {
            (hd, spec.n_kv_heads)
        }
    };
    let ffn_of = |i: usize| {
        if g.double_wide && !owns(i) {
            2 * spec.ffn_dim
        } else {
            spec.ffn_dim
        }
    };

    let mut w = GgufWriter::new();
    let s = |v: &str| MetadataValue::String(v.into());
    let u = |v: usize| MetadataValue::U32(v as u32);
    let f = |v: f32| MetadataValue::F32(v);
    let k = |key: &str| format!("gemma4.{key}");
    let per_layer = |v: &dyn Fn(usize) -> usize| {
        MetadataValue::Array(ArrayValue::I32((0..nl).map(|i| v(i) as i32).collect()))
    };
    w.meta("general.architecture", s("gemma4"))
        .meta("general.name", s("synthetic"))
        .meta(&k("block_count"), u(nl))
        .meta(&k("context_length"), u(spec.ctx_len))
        .meta(&k("embedding_length"), u(d))
        .meta(
            &k("feed_forward_length"),
            if g.double_wide {
                per_layer(&ffn_of)
            } else {
                u(spec.ffn_dim)
            },
        )
        .meta(&k("attention.head_count"), u(nh))
        .meta(&k("attention.head_count_kv"), per_layer(&|i| shape(i).1))
        .meta(&k("attention.key_length"), u(hd))
        .meta(&k("attention.value_length"), u(hd))
        .meta(&k("attention.key_length_swa"), u(g.head_dim_swa))
        .meta(&k("attention.value_length_swa"), u(g.head_dim_swa))
        .meta(&k("rope.dimension_count"), u(hd))
        .meta(&k("rope.dimension_count_swa"), u(g.rope_dim_swa))
        .meta(&k("rope.freq_base"), f(1e6))
        .meta(&k("rope.freq_base_swa"), f(1e4))
        .meta(&k("attention.layer_norm_rms_epsilon"), f(1e-6))
        .meta(&k("attention.sliding_window"), u(spec.sliding_window))
        .meta(
            &k("attention.sliding_window_pattern"),
            MetadataValue::Array(ArrayValue::Bool((0..nl).map(sliding).collect())),
        )
        .meta(&k("attention.shared_kv_layers"), u(g.shared_kv_layers))
        .meta(&k("embedding_length_per_layer_input"), u(g.ple_dim));
    if let Some(cap) = g.softcap {
        w.meta(&k("final_logit_softcapping"), f(cap));
    }
    if let Some(moe) = &spec.moe {
        w.meta(&k("expert_count"), u(moe.n_expert))
            .meta(&k("expert_used_count"), u(moe.n_used))
            .meta(&k("expert_feed_forward_length"), u(moe.expert_ffn));
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
    let vector = |w: &mut GgufWriter, name: &str, vals: &[f32]| {
        w.tensor(
            name,
            &[vals.len() as u64],
            GgmlType::F32,
            blocks::quantize_row(DType::F32, vals),
        );
    };
    let norm = |w: &mut GgufWriter, name: &str, n: usize, seed: usize| {
        let vals: Vec<f32> = (0..n)
            .map(|i| 0.8 + 0.1 * ((i * 7 + seed) % 5) as f32)
            .collect();
        vector(w, name, &vals);
    };
    let ws = 1.0 / (d as f32).sqrt();
    // Logits about one unit apart (the head is tied): a random model far from saturation.
    mat(&mut w, "token_embd.weight", vocab, d, spec.embd_dtype, 0.2);
    norm(&mut w, "output_norm.weight", d, 3);
    // "Proportional" RoPE on the global layers: the pairs past `rotated_pairs` do not turn.
    let freqs: Vec<f32> = (0..hd / 2)
        .map(|i| if i < g.rotated_pairs { 1.0 } else { 1e30 })
        .collect();
    vector(&mut w, "rope_freqs.weight", &freqs);
    let pd = g.ple_dim;
    if pd > 0 {
        mat(
            &mut w,
            "per_layer_token_embd.weight",
            vocab,
            nl * pd,
            spec.embd_dtype,
            0.5,
        );
        mat(
            &mut w,
            "per_layer_model_proj.weight",
            nl * pd,
            d,
            spec.dtype,
            ws,
        );
        norm(&mut w, "per_layer_proj_norm.weight", pd, 5);
    }
    for i in 0..nl {
        let n = |x: &str| format!("blk.{i}.{x}.weight");
        let (h, nkv) = shape(i);
        let (q, kv, ffn) = (nh * h, nkv * h, ffn_of(i));
        norm(&mut w, &n("attn_norm"), d, i);
        mat(&mut w, &n("attn_q"), q, d, spec.dtype, ws);
        if owns(i) {
            mat(&mut w, &n("attn_k"), kv, d, spec.dtype, ws);
            if !g.k_eq_v {
                mat(&mut w, &n("attn_v"), kv, d, spec.dtype, ws);
            }
            norm(&mut w, &n("attn_k_norm"), h, i + 4);
        }
        // Gemma 4 scores without 1/√head: the trained query norm carries that scale, which a
        // random one must too, or every softmax is an argmax that the smallest rounding flips.
        let qn: Vec<f32> = (0..h)
            .map(|j| (0.8 + 0.1 * ((j * 7 + i + 2) % 5) as f32) / (h as f32).sqrt())
            .collect();
        vector(&mut w, &n("attn_q_norm"), &qn);
        mat(
            &mut w,
            &n("attn_output"),
            d,
            q,
            spec.dtype,
            1.0 / (q as f32).sqrt(),
        );
        norm(&mut w, &n("post_attention_norm"), d, i + 3);
        norm(&mut w, &n("ffn_norm"), d, i + 1);
        mat(&mut w, &n("ffn_gate"), ffn, d, spec.dtype, ws);
        mat(&mut w, &n("ffn_up"), ffn, d, spec.dtype, ws);
        mat(
            &mut w,
            &n("ffn_down"),
            d,
            ffn,
            spec.dtype,
            1.0 / (ffn as f32).sqrt(),
        );
        norm(&mut w, &n("post_ffw_norm"), d, i + 2);
        if let Some(moe) = &spec.moe {
            // 26B-A4B's mixture: a router read from the normed residual (with its own scale
            // per channel), stacked experts with a scale each on their down product, and
            // the norms around the dense and the routed halves.
            let (e, ef) = (moe.n_expert, moe.expert_ffn);
            mat(
                &mut w,
                &n("ffn_gate_inp"),
                e,
                d,
                DType::F32,
                moe.router_scale,
            );
            let sc: Vec<f32> = (0..d).map(|j| 0.5 + 0.1 * (j % 7) as f32).collect();
            vector(&mut w, &format!("blk.{i}.ffn_gate_inp.scale"), &sc);
            let edt = spec.expert_dtype.unwrap_or(spec.dtype);
            let stacked = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, sc: f32| {
                let vals: Vec<f32> = (0..e * rows * cols).map(|_| rng.next() * sc).collect();
                let data: Vec<u8> = vals
                    .chunks(cols)
                    .flat_map(|r| blocks::quantize_row(edt, r))
                    .collect();
                let dims = [cols as u64, rows as u64, e as u64];
                w.tensor(name, &dims, to_dtype_id(edt), data);
            };
            stacked(&mut w, &n("ffn_gate_exps"), ef, d, ws);
            stacked(&mut w, &n("ffn_up_exps"), ef, d, ws);
            stacked(&mut w, &n("ffn_down_exps"), d, ef, 1.0 / (ef as f32).sqrt());
            let es: Vec<f32> = (0..e).map(|j| 0.6 + 0.15 * (j % 5) as f32).collect();
            vector(&mut w, &format!("blk.{i}.ffn_down_exps.scale"), &es);
            norm(&mut w, &n("pre_ffw_norm_2"), d, i + 7);
            norm(&mut w, &n("post_ffw_norm_1"), d, i + 8);
            norm(&mut w, &n("post_ffw_norm_2"), d, i + 9);
        }
        if pd > 0 {
            mat(&mut w, &n("inp_gate"), pd, d, spec.dtype, ws);
            mat(
                &mut w,
                &n("proj"),
                d,
                pd,
                spec.dtype,
                1.0 / (pd as f32).sqrt(),
            );
            norm(&mut w, &n("post_norm"), d, i + 6);
        }
        vector(
            &mut w,
            &n("layer_output_scale"),
            &[0.6 + 0.2 * (i % 3) as f32],
        );
    }
    w.to_bytes()
}
