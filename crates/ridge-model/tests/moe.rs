//! Mixtures of experts on tiny synthetic files: bad metadata and misshapen expert tensors are
//! refused with a message naming the problem (never a panic); the routed feed-forward gives
//! bitwise the same logits however the tokens are batched; `weight_bytes_per_token` counts
//! the router and `k` of the `E` experts.

use std::io::Write;

use ridge_gguf::{GgufFile, GgufWriter, MetadataValue, TensorInfo};
use ridge_kernels::{DType, Isa};
use ridge_model::synthetic::{synthetic_model, SyntheticMoe, SyntheticSpec, SYNTHETIC_VOCAB};
use ridge_model::{ActPolicy, Architecture, Batch, KvCache, Model, Workspace};

/// qwen3moe with Q4_0 layers, width 64, 16 experts of width 64, top-4.
fn qwen3moe(n_expert: usize, n_used: usize) -> SyntheticSpec {
    SyntheticSpec {
        arch: Architecture::Qwen3Moe,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        dtype: DType::Q4_0,
        embd_dtype: DType::Q8_0,
        moe: Some(SyntheticMoe::new(n_expert, n_used, 64, None)),
        seed: 31,
        ..Default::default()
    }
}

fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

fn load(bytes: &[u8]) -> (tempfile::NamedTempFile, Model) {
    let f = write(bytes);
    let m = Model::load(f.path()).unwrap_or_else(|e| panic!("valid file refused: {e}"));
    (f, m)
}

/// The loader's error for `bytes`, rendered (a successful load fails the test).
fn load_error(bytes: &[u8]) -> String {
    let f = write(bytes);
    match Model::load(f.path()) {
        Ok(m) => panic!("loaded a bad file: {:?}", m.config()),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(e: &str, words: &[&str]) {
    for w in words {
        assert!(e.contains(w), "error `{e}` does not mention `{w}`");
    }
}

/// What [`rewrite`] does with one tensor.
enum Edit {
    Keep,
    /// New dims and data.
    Replace(Vec<u64>, Vec<u8>),
    /// Left out of the file.
    Drop,
}

/// `bytes` written again with the metadata passed through `meta` (`None` drops the key) plus
/// `extra` keys, and the tensors through `tensor`.
fn rewrite(
    bytes: &[u8],
    meta: impl Fn(&str, &MetadataValue) -> Option<MetadataValue>,
    extra: &[(&str, MetadataValue)],
    tensor: impl Fn(&TensorInfo, &[u8]) -> Edit,
) -> Vec<u8> {
    let f = GgufFile::from_bytes("<memory>", bytes.to_vec()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if let Some(v) = meta(k, v) {
            w.meta(k, v);
        }
    }
    for (k, v) in extra {
        w.meta(k, v.clone());
    }
    for t in f.tensors() {
        let data = f.tensor_data(t);
        match tensor(t, data) {
            Edit::Keep => w.tensor(&t.name, &t.dims, t.ty, data.to_vec()),
            Edit::Replace(dims, data) => w.tensor(&t.name, &dims, t.ty, data),
            Edit::Drop => &mut w,
        };
    }
    w.to_bytes()
}

fn keep_meta(_: &str, v: &MetadataValue) -> Option<MetadataValue> {
    Some(v.clone())
}

fn keep_tensor(_: &TensorInfo, _: &[u8]) -> Edit {
    Edit::Keep
}

#[test]
fn the_rewriter_round_trips_a_loadable_file() {
    let bytes = synthetic_model(&qwen3moe(16, 4));
    let again = rewrite(&bytes, keep_meta, &[], keep_tensor);
    let (_f, m) = load(&again);
    let moe = m.config().moe.clone().expect("a mixture");
    assert_eq!((moe.n_expert, moe.n_used, moe.expert_ffn), (16, 4, 64));
    assert!(moe.norm_topk, "qwen3moe renormalises its top-k weights");
    assert_eq!(moe.shared_ffn, None);
}

#[test]
fn top_k_above_the_expert_count_is_refused() {
    let e = load_error(&synthetic_model(&qwen3moe(4, 6)));
    assert_mentions(
        &e,
        &[
            "`qwen3moe.expert_used_count` is 6",
            "between 1 and the 4 experts",
        ],
    );
    // A Mixtral-style llama file is checked the same way.
    let e = load_error(&synthetic_model(&SyntheticSpec {
        arch: Architecture::Llama,
        moe: Some(SyntheticMoe::new(8, 9, 96, None)),
        ..Default::default()
    }));
    assert_mentions(
        &e,
        &[
            "`llama.expert_used_count` is 9",
            "between 1 and the 8 experts",
        ],
    );
}

#[test]
fn top_k_zero_is_refused() {
    let e = load_error(&synthetic_model(&qwen3moe(16, 0)));
    assert_mentions(
        &e,
        &[
            "`qwen3moe.expert_used_count` is 0",
            "between 1 and the 16 experts",
        ],
    );
}

#[test]
fn an_expert_stack_with_too_few_experts_names_the_tensor() {
    let bytes = synthetic_model(&qwen3moe(16, 4));
    // `blk.0.ffn_up_exps.weight` holds 15 experts of 64 × 64 (its first 15, consistently
    // sized, so the file itself is well-formed) where the metadata says 16.
    let broken = rewrite(&bytes, keep_meta, &[], |t, data| {
        if t.name != "blk.0.ffn_up_exps.weight" {
            return Edit::Keep;
        }
        assert_eq!(t.dims, [64, 64, 16]);
        Edit::Replace(vec![64, 64, 15], data[..data.len() / 16 * 15].to_vec())
    });
    let e = load_error(&broken);
    assert_mentions(
        &e,
        &[
            "tensor `blk.0.ffn_up_exps.weight`",
            "shape [64, 64, 15]",
            "expected [64, 64, 16]",
            "16 experts of 64 × 64",
        ],
    );
}

#[test]
fn an_expert_stack_of_the_wrong_width_names_the_tensor() {
    let bytes = synthetic_model(&qwen3moe(16, 4));
    // 16 experts of 32 rows where `expert_feed_forward_length` says 64.
    let broken = rewrite(&bytes, keep_meta, &[], |t, data| {
        if t.name != "blk.0.ffn_up_exps.weight" {
            return Edit::Keep;
        }
        Edit::Replace(vec![64, 32, 16], data[..data.len() / 2].to_vec())
    });
    let e = load_error(&broken);
    assert_mentions(
        &e,
        &[
            "tensor `blk.0.ffn_up_exps.weight`",
            "shape [64, 32, 16]",
            "expected [64, 64, 16]",
        ],
    );
    // A 2-D tensor where a stack belongs.
    let broken = rewrite(&bytes, keep_meta, &[], |t, data| {
        if t.name != "blk.1.ffn_down_exps.weight" {
            return Edit::Keep;
        }
        Edit::Replace(vec![64, 64 * 16], data.to_vec())
    });
    let e = load_error(&broken);
    assert_mentions(
        &e,
        &[
            "tensor `blk.1.ffn_down_exps.weight`",
            "shape [64, 1024]",
            "expected [64, 64, 16]",
        ],
    );
}

#[test]
fn metadata_disagreeing_with_the_tensors_names_the_first_misfit() {
    let bytes = synthetic_model(&qwen3moe(16, 4));
    let set = |key: &'static str, to: u32| {
        move |k: &str, v: &MetadataValue| {
            Some(if k == key {
                MetadataValue::U32(to)
            } else {
                v.clone()
            })
        }
    };
    // 8 experts in the metadata, 16 in the file: the router is bound first.
    let e = load_error(&rewrite(
        &bytes,
        set("qwen3moe.expert_count", 8),
        &[],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &[
            "tensor `blk.0.ffn_gate_inp.weight`",
            "shape [64, 16]",
            "expected [64, 8]",
        ],
    );
    // Experts of width 32 in the metadata, 64 in the file: the gate stack comes first.
    let e = load_error(&rewrite(
        &bytes,
        set("qwen3moe.expert_feed_forward_length", 32),
        &[],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &[
            "tensor `blk.0.ffn_gate_exps.weight`",
            "shape [64, 64, 16]",
            "expected [64, 32, 16]",
        ],
    );
}

#[test]
fn a_missing_expert_key_is_named() {
    let bytes = synthetic_model(&qwen3moe(16, 4));
    let drop = |key: &'static str| move |k: &str, v: &MetadataValue| (k != key).then(|| v.clone());
    let e = load_error(&rewrite(
        &bytes,
        drop("qwen3moe.expert_count"),
        &[],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &[
            "`qwen3moe.expert_count` is missing",
            "a mixture of experts needs it",
        ],
    );
    let e = load_error(&rewrite(
        &bytes,
        drop("qwen3moe.expert_used_count"),
        &[],
        keep_tensor,
    ));
    assert_mentions(&e, &["`qwen3moe.expert_used_count` is missing"]);
    // Out of range rather than missing: the reader's message, with the key.
    let e = load_error(&rewrite(
        &bytes,
        |k, v| {
            Some(if k == "qwen3moe.expert_count" {
                MetadataValue::U32(0)
            } else {
                v.clone()
            })
        },
        &[],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &["metadata key `qwen3moe.expert_count`", "value 0 outside"],
    );
    let e = load_error(&rewrite(
        &bytes,
        |k, v| {
            Some(if k == "qwen3moe.expert_used_count" {
                MetadataValue::String("four".into())
            } else {
                v.clone()
            })
        },
        &[],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &[
            "metadata key `qwen3moe.expert_used_count`",
            "expected a non-negative integer",
        ],
    );
}

#[test]
fn experts_on_an_architecture_without_them_are_refused() {
    let gemma = synthetic_model(&SyntheticSpec {
        arch: Architecture::Gemma3,
        head_dim: Some(16),
        ..Default::default()
    });
    let e = load_error(&rewrite(
        &gemma,
        keep_meta,
        &[("gemma3.expert_count", MetadataValue::U32(8))],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &["gemma3 with experts (`gemma3.expert_count`) is not supported"],
    );
    let qwen3 = synthetic_model(&SyntheticSpec {
        arch: Architecture::Qwen3,
        ..Default::default()
    });
    let e = load_error(&rewrite(
        &qwen3,
        keep_meta,
        &[("qwen3.expert_count", MetadataValue::U32(8))],
        keep_tensor,
    ));
    assert_mentions(
        &e,
        &["qwen3 with experts (`qwen3.expert_count`) is not supported"],
    );
    // Keys are read under the file's own architecture (as llama.cpp reads them): a stray
    // `llama.expert_count` in a gemma3 file says nothing about it, and it loads dense.
    let (_f, m) = load(&rewrite(
        &gemma,
        keep_meta,
        &[("llama.expert_count", MetadataValue::U32(8))],
        keep_tensor,
    ));
    assert_eq!(m.config().arch, Architecture::Gemma3);
    assert!(m.config().moe.is_none());
}

const PROMPT: [u32; 11] = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 256];

/// Logits at every position of `tokens`, all in one forward pass.
fn one_pass(m: &Model, tokens: &[u32]) -> Vec<f32> {
    chunked(m, tokens, &[tokens.len()])
}

/// Logits at every position of `tokens`, fed in chunks of the given sizes.
fn chunked(m: &Model, tokens: &[u32], sizes: &[usize]) -> Vec<f32> {
    assert_eq!(sizes.iter().sum::<usize>(), tokens.len());
    let mut kv = KvCache::new(m.config(), 64);
    let s = kv.add_seq();
    let mut ws = Workspace::new();
    let (mut b, mut out, mut at) = (Batch::new(), Vec::new(), 0);
    for &n in sizes {
        b.clear();
        for (i, &t) in tokens[at..at + n].iter().enumerate() {
            b.push(t, at + i, s, true);
        }
        out.extend_from_slice(m.forward(&b, &mut kv, &mut ws).unwrap());
        at += n;
    }
    assert_eq!(kv.seq_len(s), tokens.len());
    out
}

fn batch_invariance(spec: &SyntheticSpec) {
    let (_f, mut m) = load(&synthetic_model(spec));
    assert!(m.config().moe.is_some());
    let v = SYNTHETIC_VOCAB;
    let other: Vec<u32> = vec![200, 3, 77, 150, 9];
    for isa in Isa::available() {
        m.set_isa(isa);
        let name = format!("{:?} {isa:?}", spec.arch);
        let whole = one_pass(&m, &PROMPT);
        assert_eq!(whole.len(), PROMPT.len() * v);
        assert!(whole.iter().all(|x| x.is_finite()), "{name}");
        // The positions are told apart (the model is not degenerate).
        assert_ne!(whole[..v], whole[v..2 * v], "{name}");
        let decode = chunked(&m, &PROMPT, &[1; PROMPT.len()]);
        for (p, (a, b)) in whole.chunks(v).zip(decode.chunks(v)).enumerate() {
            assert_eq!(a, b, "{name}: decode differs at position {p}");
        }
        let split = chunked(&m, &PROMPT, &[3, 8]);
        for (p, (a, b)) in whole.chunks(v).zip(split.chunks(v)).enumerate() {
            assert_eq!(a, b, "{name}: chunks 3 + 8 differ at position {p}");
        }

        // Two sequences interleaved in one batch, each as it runs alone.
        let alone_b = one_pass(&m, &other);
        let mut kv = KvCache::new(m.config(), 64);
        let (sa, sb) = (kv.add_seq(), kv.add_seq());
        let mut batch = Batch::new();
        for (i, &t) in PROMPT.iter().enumerate() {
            batch.push(t, i, sa, true);
            if let Some(&u) = other.get(i) {
                batch.push(u, i, sb, true);
            }
        }
        let got = m
            .forward(&batch, &mut kv, &mut Workspace::new())
            .unwrap()
            .to_vec();
        let (mut ia, mut ib) = (0, 0);
        for (r, s) in batch.seqs.iter().enumerate() {
            let row = &got[r * v..(r + 1) * v];
            if *s == sa {
                assert_eq!(row, &whole[ia * v..(ia + 1) * v], "{name}: seq a pos {ia}");
                ia += 1;
            } else {
                assert_eq!(
                    row,
                    &alone_b[ib * v..(ib + 1) * v],
                    "{name}: seq b pos {ib}"
                );
                ib += 1;
            }
        }
        assert_eq!((ia, ib), (PROMPT.len(), other.len()));
        assert_eq!(
            (kv.seq_len(sa), kv.seq_len(sb)),
            (PROMPT.len(), other.len())
        );
    }
}

#[test]
fn routed_logits_do_not_depend_on_batching() {
    // The case asked for: quantized qwen3moe, default activations, 16 experts top-4.
    batch_invariance(&qwen3moe(16, 4));
    // A shared expert (qwen2moe, Q8_0), and a Mixtral-style llama with top-1.
    batch_invariance(&SyntheticSpec {
        arch: Architecture::Qwen2Moe,
        dtype: DType::Q8_0,
        moe: Some(SyntheticMoe::new(16, 2, 64, Some(96))),
        seed: 33,
        ..Default::default()
    });
    batch_invariance(&SyntheticSpec {
        arch: Architecture::Llama,
        dtype: DType::Q4_0,
        ffn_dim: 64,
        moe: Some(SyntheticMoe::new(8, 1, 64, None)),
        seed: 35,
        ..Default::default()
    });
    // gpt-oss: MXFP4 experts, sinks, a window shorter than the prompt on even layers.
    batch_invariance(&gpt_oss());
}

/// gpt-oss with Q8_0 attention and MXFP4 experts: 16 experts top-4 of width 96, a window of 4.
fn gpt_oss() -> SyntheticSpec {
    SyntheticSpec {
        arch: Architecture::GptOss,
        n_layers: 2,
        d_model: 64,
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: Some(16),
        sliding_window: 4,
        dtype: DType::Q8_0,
        embd_dtype: DType::Q8_0,
        expert_dtype: Some(DType::MXFP4),
        moe: Some(SyntheticMoe::new(16, 4, 96, None)),
        seed: 37,
        ..Default::default()
    }
}

#[test]
fn a_gpt_oss_file_loads_with_its_parts() {
    let (_f, m) = load(&synthetic_model(&gpt_oss()));
    let c = m.config();
    let moe = c.moe.clone().unwrap();
    assert_eq!(moe.gating, ridge_model::Gating::SoftmaxTopK);
    assert_eq!(moe.act, ridge_model::ExpertAct::SwigluOai);
    assert!(!moe.norm_topk);
    assert_eq!(
        (c.q_dim(), c.kv_dim(), c.sliding_window),
        (128, 32, Some(4))
    );
    let y = c.rope_scaling.yarn.clone().expect("YaRN");
    assert_eq!((y.orig_ctx, c.rope_scaling.freq_scale), (4096, 1.0 / 32.0));
    assert_eq!(c.rope_scaling.freq_scale_swa, c.rope_scaling.freq_scale);
}

#[test]
fn gpt_oss_without_its_sinks_or_biases_names_the_tensor() {
    let bytes = synthetic_model(&gpt_oss());
    for name in [
        "blk.1.attn_sinks.weight",
        "blk.0.ffn_gate_inp.bias",
        "blk.0.ffn_down_exps.bias",
        "blk.1.attn_output.bias",
    ] {
        let e = load_error(&rewrite(&bytes, keep_meta, &[], |t, _| {
            if t.name == name {
                Edit::Drop
            } else {
                Edit::Keep
            }
        }));
        assert_mentions(&e, &[name]);
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // Sinks for 7 of 8 heads, an expert bias for 15 of 16 experts.
    for (name, dims) in [
        ("blk.0.attn_sinks.weight", vec![7u64]),
        ("blk.0.ffn_up_exps.bias", vec![96, 15]),
    ] {
        let e = load_error(&rewrite(&bytes, keep_meta, &[], |t, d| {
            if t.name == name {
                let n: u64 = dims.iter().product();
                Edit::Replace(dims.clone(), d[..4 * n as usize].to_vec())
            } else {
                Edit::Keep
            }
        }));
        assert_mentions(&e, &[name, "shape"]);
    }
}

#[test]
fn rope_scaling_and_window_patterns_it_cannot_run_are_refused() {
    let bytes = synthetic_model(&gpt_oss());
    let with = |key: &str, v: MetadataValue| {
        let key = key.to_string();
        load_error(&rewrite(
            &bytes,
            |k, old| if k == key { None } else { Some(old.clone()) },
            &[(key.as_str(), v)],
            keep_tensor,
        ))
    };
    let e = with(
        "gpt-oss.rope.scaling.type",
        MetadataValue::String("longrope".into()),
    );
    assert_mentions(&e, &["gpt-oss.rope.scaling.type", "longrope", "yarn"]);
    let e = with("gpt-oss.rope.scaling.factor", MetadataValue::F32(-2.0));
    assert_mentions(&e, &["gpt-oss.rope.scaling.factor", "positive"]);
    let flags = ridge_gguf::ArrayValue::Bool(vec![true, false, true]);
    let e = with(
        "gpt-oss.attention.sliding_window_pattern",
        MetadataValue::Array(flags),
    );
    assert_mentions(&e, &["sliding_window_pattern", "3 entries for 2 layers"]);
    // A period, or flags for every layer, are read as llama.cpp reads them.
    for (v, want) in [
        (MetadataValue::U32(1), [false, false]),
        (
            MetadataValue::Array(ridge_gguf::ArrayValue::Bool(vec![false, true])),
            [false, true],
        ),
    ] {
        let b = rewrite(
            &bytes,
            keep_meta,
            &[("gpt-oss.attention.sliding_window_pattern", v)],
            keep_tensor,
        );
        let (_f, m) = load(&b);
        let c = m.config();
        assert_eq!([c.is_sliding(0), c.is_sliding(1)], want);
    }
}

/// Bytes of `f`'s tensors: `(expert stacks per layer, everything else)`, where the embedding
/// table counts only as a tied head.
fn tensor_bytes(f: &GgufFile) -> (Vec<usize>, usize) {
    let tied = !f.has_tensor("output.weight");
    let mut experts = Vec::new();
    let mut rest = 0;
    for t in f.tensors() {
        if t.name.ends_with("_exps.weight") {
            let layer: usize = t.name.split('.').nth(1).unwrap().parse().unwrap();
            if experts.len() <= layer {
                experts.resize(layer + 1, 0);
            }
            experts[layer] += t.size;
        } else if t.name != "token_embd.weight" || tied {
            rest += t.size;
        }
    }
    (experts, rest)
}

/// What a step of one token reads: everything but the experts, and `k / E` of each layer's.
fn expected_bytes(f: &GgufFile, n_expert: usize, n_used: usize) -> usize {
    let (experts, rest) = tensor_bytes(f);
    rest + experts.iter().map(|x| x / n_expert * n_used).sum::<usize>()
}

#[test]
fn weight_bytes_per_token_counts_k_of_e_experts() {
    // Q4_0 and Q8_0 tiles have exactly the size of the rows they replace, so with or without
    // tile kernels (and with f32 activations, which read the file's rows) the step reads the
    // file's bytes.
    for separate_output in [false, true] {
        let by_k: Vec<usize> = [1, 2, 4, 8, 16]
            .into_iter()
            .map(|k| {
                let spec = SyntheticSpec {
                    separate_output,
                    ..qwen3moe(16, k)
                };
                let (f, mut m) = load(&synthetic_model(&spec));
                let g = GgufFile::open(f.path()).unwrap();
                let want = expected_bytes(&g, 16, k);
                assert_eq!(m.weight_bytes_per_token(), want, "k {k}");
                m.set_act_policy(ActPolicy::F32);
                assert_eq!(m.weight_bytes_per_token(), want, "k {k}, f32 activations");
                m.set_act_policy(ActPolicy::Mixed);
                assert_eq!(m.weight_bytes_per_token(), want, "k {k}, tiles again");

                let (experts, rest) = tensor_bytes(&g);
                let all: usize = experts.iter().sum::<usize>() + rest;
                if k < 16 {
                    assert!(rest < want && want < all, "k {k}: {rest} < {want} < {all}");
                } else {
                    assert_eq!(want, all, "every expert read");
                }
                want
            })
            .collect();
        // The tensors do not depend on k (only the metadata does): each doubling of k adds
        // the bytes of k more experts in every layer.
        let g = GgufFile::from_bytes(
            "<memory>",
            synthetic_model(&SyntheticSpec {
                separate_output,
                ..qwen3moe(16, 1)
            }),
        )
        .unwrap();
        let (experts, _) = tensor_bytes(&g);
        assert_eq!(experts.len(), 2);
        let one: usize = experts.iter().map(|x| x / 16).sum();
        // One expert: gate and up 64 × 64, down 64 × 64, Q4_0 (18 bytes per 32) per layer.
        assert_eq!(one, 2 * 3 * 64 * 64 / 32 * 18);
        for (i, w) in by_k.windows(2).enumerate() {
            let k = 1 << i;
            assert_eq!(w[1] - w[0], k * one, "k {k} -> {}", 2 * k);
        }
    }
}

#[test]
fn a_shared_expert_is_read_by_every_token() {
    // qwen2moe: the shared expert's three matrices and its f32 gate vector every step, beside
    // the router and k of the E experts.
    let spec = SyntheticSpec {
        arch: Architecture::Qwen2Moe,
        dtype: DType::Q8_0,
        moe: Some(SyntheticMoe::new(16, 2, 64, Some(96))),
        seed: 33,
        ..Default::default()
    };
    let (f, m) = load(&synthetic_model(&spec));
    let g = GgufFile::open(f.path()).unwrap();
    assert!(g.has_tensor("blk.0.ffn_gate_inp_shexp.weight"));
    assert_eq!(m.weight_bytes_per_token(), expected_bytes(&g, 16, 2));
}
