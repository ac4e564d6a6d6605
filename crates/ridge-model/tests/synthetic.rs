//! The forward pass on tiny random models against a naive f64 reference written here, for every
//! weight format and kernel path; batch and chunking invariance; error paths.

use ridge_gguf::GgufFile;
use ridge_kernels::{blocks, DType, Isa};
use ridge_model::synthetic::{synthetic_llama, synthetic_model, SyntheticSpec, SYNTHETIC_VOCAB};
use ridge_model::{ActPolicy, Architecture, Batch, KvCache, Model, ModelError, Workspace};
use std::io::Write;

fn write_model(spec: &SyntheticSpec) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&synthetic_llama(spec)).unwrap();
    f.flush().unwrap();
    f
}

/// Naive f64 llama (or qwen2: Q/K/V biases, NEOX RoPE) forward over one sequence; returns
/// logits at every position.
fn reference_logits(f: &GgufFile, tokens: &[u32]) -> Vec<Vec<f64>> {
    let arch = f.get_str("general.architecture").unwrap().to_string();
    let qwen2 = arch == "qwen2";
    let u = |k: &str| f.get_u64(&format!("{arch}.{k}")).unwrap() as usize;
    let (nl, d, nh, nkv) = (
        u("block_count"),
        u("embedding_length"),
        u("attention.head_count"),
        u("attention.head_count_kv"),
    );
    let hd = d / nh;
    let eps = f
        .get_f64(&format!("{arch}.attention.layer_norm_rms_epsilon"))
        .unwrap();
    let base = f.get_f64(&format!("{arch}.rope.freq_base")).unwrap();
    let load = |name: &str| -> (usize, usize, Vec<f64>) {
        let t = f.tensor(name).unwrap();
        let dt = match t.ty {
            ridge_gguf::GgmlType::F32 => DType::F32,
            ridge_gguf::GgmlType::F16 => DType::F16,
            ridge_gguf::GgmlType::BF16 => DType::BF16,
            ridge_gguf::GgmlType::Q8_0 => DType::Q8_0,
            ridge_gguf::GgmlType::Q4_0 => DType::Q4_0,
            ridge_gguf::GgmlType::Q4_1 => DType::Q4_1,
            ridge_gguf::GgmlType::Q5_0 => DType::Q5_0,
            ridge_gguf::GgmlType::Q4_K => DType::Q4_K,
            ridge_gguf::GgmlType::Q5_K => DType::Q5_K,
            ridge_gguf::GgmlType::Q6_K => DType::Q6_K,
            ridge_gguf::GgmlType::Q2_K => DType::Q2_K,
            ridge_gguf::GgmlType::Q3_K => DType::Q3_K,
            ridge_gguf::GgmlType::IQ4_NL => DType::IQ4_NL,
            ridge_gguf::GgmlType::IQ4_XS => DType::IQ4_XS,
            other => panic!("{other:?}"),
        };
        let (cols, rows) = (t.row_len() as usize, t.n_rows() as usize);
        let mut out = vec![0f32; rows * cols];
        let rb = dt.row_bytes(cols);
        for r in 0..rows {
            blocks::dequantize_row(
                dt,
                &f.tensor_data(t)[r * rb..(r + 1) * rb],
                &mut out[r * cols..(r + 1) * cols],
            );
        }
        (rows, cols, out.into_iter().map(|v| v as f64).collect())
    };
    let mv = |m: &(usize, usize, Vec<f64>), x: &[f64]| -> Vec<f64> {
        (0..m.0)
            .map(|r| (0..m.1).map(|c| m.2[r * m.1 + c] * x[c]).sum())
            .collect()
    };
    let norm = |x: &[f64], w: &[f64]| -> Vec<f64> {
        let s = (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
        x.iter().zip(w).map(|(v, g)| v / s * g).collect()
    };
    let rope = |v: &mut [f64], pos: usize| {
        for h in v.chunks_mut(hd) {
            for i in 0..hd / 2 {
                let a = pos as f64 * base.powf(-2.0 * i as f64 / hd as f64);
                // qwen2 pairs element i with i + hd/2 (NEOX), llama with i + 1.
                let (i0, i1) = if qwen2 {
                    (i, i + hd / 2)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let (x0, x1) = (h[i0], h[i1]);
                h[i0] = x0 * a.cos() - x1 * a.sin();
                h[i1] = x0 * a.sin() + x1 * a.cos();
            }
        }
    };
    let embd = load("token_embd.weight");
    let out_w = if f.has_tensor("output.weight") {
        load("output.weight")
    } else {
        load("token_embd.weight")
    };
    let out_norm = load("output_norm.weight").2;
    let layers: Vec<_> = (0..nl)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            (
                load(&n("attn_norm")).2,
                load(&n("attn_q")),
                load(&n("attn_k")),
                load(&n("attn_v")),
                load(&n("attn_output")),
                load(&n("ffn_norm")).2,
                load(&n("ffn_gate")),
                load(&n("ffn_up")),
                load(&n("ffn_down")),
            )
        })
        .collect();
    // Q/K/V biases (qwen2), zero where the file has none.
    let biases: Vec<[Vec<f64>; 3]> = (0..nl)
        .map(|i| {
            [("attn_q", nh), ("attn_k", nkv), ("attn_v", nkv)].map(|(s, heads)| {
                let name = format!("blk.{i}.{s}.bias");
                if f.has_tensor(&name) {
                    load(&name).2
                } else {
                    vec![0.0; heads * hd]
                }
            })
        })
        .collect();
    let mut kcache: Vec<Vec<Vec<f64>>> = vec![vec![]; nl];
    let mut vcache: Vec<Vec<Vec<f64>>> = vec![vec![]; nl];
    let mut all = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let mut x: Vec<f64> = embd.2[tok as usize * d..(tok as usize + 1) * d].to_vec();
        for (li, l) in layers.iter().enumerate() {
            let xn = norm(&x, &l.0);
            let add = |mut y: Vec<f64>, b: &[f64]| {
                y.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                y
            };
            let mut q = add(mv(&l.1, &xn), &biases[li][0]);
            let mut k = add(mv(&l.2, &xn), &biases[li][1]);
            let v = add(mv(&l.3, &xn), &biases[li][2]);
            rope(&mut q, pos);
            rope(&mut k, pos);
            // The cache stores K and V in f16; model that rounding exactly.
            let f16r = |x: &Vec<f64>| -> Vec<f64> {
                x.iter().map(|&v| half::f16::from_f64(v).to_f64()).collect()
            };
            kcache[li].push(f16r(&k));
            vcache[li].push(f16r(&v));
            let mut att = vec![0f64; d];
            for h in 0..nh {
                let g = h / (nh / nkv);
                let s: Vec<f64> = kcache[li]
                    .iter()
                    .map(|kr| {
                        (0..hd).map(|i| q[h * hd + i] * kr[g * hd + i]).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (p, vr) in vcache[li].iter().enumerate() {
                    for i in 0..hd {
                        att[h * hd + i] += e[p] / z * vr[g * hd + i];
                    }
                }
            }
            let o = mv(&l.4, &att);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let xn = norm(&x, &l.5);
            let g = mv(&l.6, &xn);
            let up = mv(&l.7, &xn);
            let a: Vec<f64> = g
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let dn = mv(&l.8, &a);
            x.iter_mut().zip(&dn).for_each(|(a, b)| *a += b);
        }
        all.push(mv(&out_w, &norm(&x, &out_norm)));
    }
    all
}

fn run_all_positions(m: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut kv = KvCache::new(m.config(), 64);
    let s = kv.add_seq();
    let mut b = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        b.push(t, i, s, true);
    }
    m.forward(&b, &mut kv, &mut Workspace::new())
        .unwrap()
        .to_vec()
}

const PROMPT: [u32; 11] = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 256];

/// The largest `|got − want| / (1 + |want|)` over every logit of every position.
fn worst_relative_error(got: &[f32], want: &[Vec<f64>]) -> f64 {
    let mut worst = 0f64;
    for (row, w) in got.chunks(SYNTHETIC_VOCAB).zip(want) {
        for (a, b) in row.iter().zip(w) {
            worst = worst.max((*a as f64 - b).abs() / (1.0 + b.abs()));
        }
    }
    worst
}

#[test]
fn every_format_and_path_matches_the_f64_reference() {
    let formats = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
    ];
    for (i, &dtype) in formats.iter().enumerate() {
        let spec = SyntheticSpec {
            dtype,
            embd_dtype: formats[(i + 2) % formats.len()],
            separate_output: i % 2 == 0,
            seed: i as u64 + 1,
            ..Default::default()
        };
        let f = write_model(&spec);
        let want = reference_logits(&GgufFile::open(f.path()).unwrap(), &PROMPT);
        let mut m = Model::load(f.path()).unwrap();
        m.set_act_policy(ActPolicy::F32);
        for isa in Isa::available() {
            m.set_isa(isa);
            let got = run_all_positions(&m, &PROMPT);
            assert_eq!(got.len(), PROMPT.len() * SYNTHETIC_VOCAB);
            let worst = worst_relative_error(&got, &want);
            // Same math in f32 instead of f64.
            assert!(
                worst < 1e-3,
                "{dtype:?} {isa:?}: worst relative error {worst}"
            );
        }
    }
}

/// The low-bit formats (Q2_K, Q3_K, IQ4_NL, IQ4_XS) as layer matrices, embeddings and head,
/// mixed with the older ones as the "dynamic" files mix them, against the f64 reference on
/// every path (widths of whole 256-element super-blocks).
#[test]
fn low_bit_formats_match_the_f64_reference() {
    let formats = [DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS];
    let embd = [DType::IQ4_XS, DType::Q6_K, DType::Q3_K, DType::Q8_0];
    for (i, &dtype) in formats.iter().enumerate() {
        let spec = SyntheticSpec {
            dtype,
            embd_dtype: embd[i],
            d_model: 256,
            ffn_dim: 512,
            separate_output: i % 2 == 1,
            seed: 40 + i as u64,
            ..Default::default()
        };
        let f = write_model(&spec);
        let want = reference_logits(&GgufFile::open(f.path()).unwrap(), &PROMPT);
        let mut m = Model::load(f.path()).unwrap();
        m.set_act_policy(ActPolicy::F32);
        for isa in Isa::available() {
            m.set_isa(isa);
            let got = run_all_positions(&m, &PROMPT);
            let worst = worst_relative_error(&got, &want);
            assert!(
                worst < 1e-3,
                "{dtype:?} {isa:?}: worst relative error {worst}"
            );
        }
    }
}

/// qwen2 at the GQA ratios of the real models (7:1 as the 0.5B, 6:1 as the 1.5B), with
/// Q/K/V biases, NEOX RoPE at base 10⁶, a separate or a tied head, every kernel path.
#[test]
fn qwen2_matches_the_f64_reference() {
    let shapes = [
        (224, 7, 1, true, DType::Q8_0),
        (192, 6, 1, false, DType::F16),
    ];
    for (i, &(d_model, n_heads, n_kv_heads, separate_output, dtype)) in shapes.iter().enumerate() {
        let spec = SyntheticSpec {
            arch: Architecture::Qwen2,
            d_model,
            n_heads,
            n_kv_heads,
            ffn_dim: 128,
            dtype,
            separate_output,
            seed: 40 + i as u64,
            ..Default::default()
        };
        let f = write_model(&spec);
        let want = reference_logits(&GgufFile::open(f.path()).unwrap(), &PROMPT);
        let mut m = Model::load(f.path()).unwrap();
        assert_eq!(m.config().arch, Architecture::Qwen2);
        assert!(m.config().rope_neox);
        m.set_act_policy(ActPolicy::F32);
        for isa in Isa::available() {
            m.set_isa(isa);
            let got = run_all_positions(&m, &PROMPT);
            let worst = worst_relative_error(&got, &want);
            assert!(
                worst < 1e-3,
                "{n_heads}:{n_kv_heads} {dtype:?} {isa:?}: worst relative error {worst}"
            );
        }
    }
}

/// The reference is sensitive to what qwen2 adds: the same file read as llama (no biases
/// applied, adjacent-pair RoPE) is far from it.
#[test]
fn qwen2_reference_differs_from_llama_on_the_same_weights() {
    let spec = SyntheticSpec {
        arch: Architecture::Qwen2,
        ..Default::default()
    };
    let bytes = synthetic_model(&spec);
    let f = write_model(&spec);
    let want = reference_logits(&GgufFile::open(f.path()).unwrap(), &PROMPT);
    // Rename the architecture and drop nothing else: the loader then reads it as llama,
    // which takes the biases too (llama.cpp does), so only the RoPE layout differs.
    let needle = b"qwen2";
    let mut as_llama = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(needle) {
            as_llama.extend_from_slice(b"llama");
            i += needle.len();
        } else {
            as_llama.push(bytes[i]);
            i += 1;
        }
    }
    let mut g = tempfile::NamedTempFile::new().unwrap();
    g.write_all(&as_llama).unwrap();
    let mut m = Model::load(g.path()).unwrap();
    assert_eq!(m.config().arch, Architecture::Llama);
    m.set_act_policy(ActPolicy::F32);
    let got = run_all_positions(&m, &PROMPT);
    let last = &got[(PROMPT.len() - 1) * SYNTHETIC_VOCAB..];
    let worst = last
        .iter()
        .zip(&want[PROMPT.len() - 1])
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(0f64, f64::max);
    assert!(worst > 1e-2, "RoPE layout made no difference: {worst}");
}

#[test]
fn a_qwen2_file_without_its_biases_names_the_missing_tensor() {
    let bytes = synthetic_model(&SyntheticSpec {
        arch: Architecture::Qwen2,
        ..Default::default()
    });
    let needle = b"blk.1.attn_k.bias";
    let pos = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut broken = bytes.clone();
    broken[pos + 4] = b'X';
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&broken).unwrap();
    let e = Model::load(f.path()).unwrap_err().to_string();
    assert!(
        e.contains("blk.1.attn_k.bias") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn batching_and_chunking_do_not_change_results() {
    batching_and_chunking(&SyntheticSpec::default());
    batching_and_chunking(&SyntheticSpec {
        arch: Architecture::Qwen2,
        d_model: 224,
        n_heads: 7,
        n_kv_heads: 1,
        ..Default::default()
    });
    // qwen3: per-head Q/K norms, a head dimension apart from d_model / n_heads; llama with
    // Llama 3's RoPE factors.
    batching_and_chunking(&SyntheticSpec {
        arch: Architecture::Qwen3,
        head_dim: Some(32),
        ..Default::default()
    });
    batching_and_chunking(&SyntheticSpec {
        rope_freqs: true,
        ..Default::default()
    });
    // IQ4_XS, IQ4_NL, Q3_K and Q2_K layers in tiles (their 8- and 16-bit kernels; IQ3_S's
    // tiles, which no synthetic writer here quantizes, are checked in ridge-kernels' tests).
    for dtype in [DType::IQ4_XS, DType::IQ4_NL, DType::Q3_K, DType::Q2_K] {
        batching_and_chunking(&SyntheticSpec {
            dtype,
            d_model: 256,
            ffn_dim: 512,
            ..Default::default()
        });
    }
}

fn batching_and_chunking(spec: &SyntheticSpec) {
    let f = write_model(spec);
    let m = Model::load(f.path()).unwrap();
    let a: Vec<u32> = PROMPT.to_vec();
    let b: Vec<u32> = vec![5, 6, 7, 8, 9];
    let alone_a = run_all_positions(&m, &a);
    let alone_b = run_all_positions(&m, &b);

    // Both sequences in one batch, interleaved, every position asking for logits.
    let mut kv = KvCache::new(m.config(), 64);
    let (sa, sb) = (kv.add_seq(), kv.add_seq());
    let mut batch = Batch::new();
    for i in 0..a.len() {
        batch.push(a[i], i, sa, true);
        if i < b.len() {
            batch.push(b[i], i, sb, true);
        }
    }
    let mut ws = Workspace::new();
    let got = m.forward(&batch, &mut kv, &mut ws).unwrap().to_vec();
    let v = SYNTHETIC_VOCAB;
    let mut ia = 0;
    let mut ib = 0;
    for (r, s) in batch.seqs.iter().enumerate() {
        let row = &got[r * v..(r + 1) * v];
        if *s == sa {
            assert_eq!(row, &alone_a[ia * v..(ia + 1) * v], "seq a pos {ia}");
            ia += 1;
        } else {
            assert_eq!(row, &alone_b[ib * v..(ib + 1) * v], "seq b pos {ib}");
            ib += 1;
        }
    }

    // Chunked prefill (4 + 7 tokens) gives the same last logits as one pass.
    let mut kv = KvCache::new(m.config(), 64);
    let s = kv.add_seq();
    let mut batch = Batch::new();
    batch.push_seq(&a[..4], 0, s, false);
    m.forward(&batch, &mut kv, &mut ws).unwrap();
    batch.clear();
    batch.push_seq(&a[4..], 4, s, true);
    let last = m.forward(&batch, &mut kv, &mut ws).unwrap().to_vec();
    assert_eq!(&last[..], &alone_a[(a.len() - 1) * v..]);
    assert_eq!(kv.seq_len(s), a.len());
}

#[test]
fn errors_are_reported_not_panicked() {
    let spec = SyntheticSpec {
        ctx_len: 8,
        ..Default::default()
    };
    let f = write_model(&spec);
    let m = Model::load(f.path()).unwrap();
    let mut ws = Workspace::new();

    let mut kv = KvCache::new(m.config(), 64);
    let s = kv.add_seq();
    let mut b = Batch::new();
    b.push_seq(&[1; 9], 0, s, true);
    assert!(matches!(
        m.forward(&b, &mut kv, &mut ws),
        Err(ModelError::ContextOverflow { len: 9, ctx: 8 })
    ));

    b.clear();
    b.push(SYNTHETIC_VOCAB as u32, 0, s, true);
    assert!(matches!(
        m.forward(&b, &mut kv, &mut ws),
        Err(ModelError::BadToken { .. })
    ));

    b.clear();
    b.push(1, 3, s, true);
    assert!(matches!(
        m.forward(&b, &mut kv, &mut ws),
        Err(ModelError::BadBatch(_))
    ));

    let mut small = KvCache::new(m.config(), 16);
    let s1 = small.add_seq();
    let s2 = small.add_seq();
    b.clear();
    b.push_seq(&[1; 8], 0, s1, false);
    m.forward(&b, &mut small, &mut ws).unwrap();
    b.clear();
    b.push_seq(&[1; 2], 0, s2, true);
    assert!(matches!(
        m.forward(&b, &mut small, &mut ws),
        Err(ModelError::KvFull { .. })
    ));
    small.remove_seq(s1);
    assert_eq!(small.free_blocks(), small.total_blocks());
    m.forward(&b, &mut small, &mut ws).unwrap();
}

#[test]
fn missing_or_misshapen_tensors_name_the_tensor() {
    let bytes = synthetic_llama(&SyntheticSpec::default());
    // Rename one tensor so the loader cannot find it.
    let needle = b"blk.1.ffn_up.weight";
    let pos = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut broken = bytes.clone();
    broken[pos + 4] = b'X';
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&broken).unwrap();
    let e = Model::load(f.path()).unwrap_err().to_string();
    assert!(
        e.contains("blk.1.ffn_up.weight") && e.contains("missing"),
        "{e}"
    );
}

/// A restricted head (a draft model's) computes exactly the leading logits of the full head,
/// for a separate and a tied head; the width is whole tile groups within the vocabulary.
#[test]
fn a_restricted_head_gives_the_leading_logits() {
    for separate_output in [true, false] {
        let spec = SyntheticSpec {
            dtype: DType::Q4_0,
            embd_dtype: DType::Q8_0,
            separate_output,
            seed: 77,
            ..Default::default()
        };
        let f = write_model(&spec);
        let mut m = Model::load(f.path()).unwrap();
        let full = run_all_positions(&m, &PROMPT);
        assert_eq!(m.logit_width(), SYNTHETIC_VOCAB);
        m.restrict_head(100);
        assert_eq!(m.logit_width(), 96);
        let cut = run_all_positions(&m, &PROMPT);
        assert_eq!(cut.len(), PROMPT.len() * 96);
        for (a, b) in cut.chunks(96).zip(full.chunks(SYNTHETIC_VOCAB)) {
            assert_eq!(a, &b[..96], "separate head: {separate_output}");
        }
        m.restrict_head(0);
        assert_eq!(m.logit_width(), 8);
        m.restrict_head(1 << 20);
        assert_eq!(m.logit_width(), SYNTHETIC_VOCAB);
        assert_eq!(run_all_positions(&m, &PROMPT), full);
    }
}

/// A re-encoded draft (`--draft-quant q4_0`): the Q8_0 layer matrices and head become Q4_0
/// tiles, a step reads fewer bytes, and the logits move by about Q4_0's rounding, no more;
/// a model already in Q4_0 is left alone.
#[test]
fn requantizing_to_q4_0_reads_fewer_bytes_and_stays_close() {
    let spec = SyntheticSpec {
        dtype: DType::Q8_0,
        embd_dtype: DType::Q8_0,
        separate_output: true,
        seed: 78,
        ..Default::default()
    };
    let f = write_model(&spec);
    let mut m = Model::load(f.path()).unwrap();
    if !Isa::detect().avx2() {
        // No tile kernels: nothing is re-encoded.
        assert_eq!(m.requantize(DType::Q4_0), 0);
        return;
    }
    let before = run_all_positions(&m, &PROMPT);
    let bytes = m.weight_bytes_per_token();
    let saved = m.requantize(DType::Q4_0);
    assert!(saved > 0);
    // The head's 257 rows are not whole tile groups: only the layer matrices change.
    assert!(m.weight_bytes_per_token() < bytes);
    let after = run_all_positions(&m, &PROMPT);
    assert_ne!(after, before);
    let scale = before.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let worst = before
        .iter()
        .zip(&after)
        .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
    assert!(worst < 0.25 * scale, "worst {worst} of {scale}");
    assert_eq!(m.requantize(DType::Q4_0), 0, "nothing wider is left");
}
