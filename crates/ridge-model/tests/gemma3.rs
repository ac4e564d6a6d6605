//! The Gemma 3 forward pass on tiny random models against a naive f64 reference written here:
//! scaled embeddings, per-head Q/K norms, NEOX RoPE with two bases, sliding-window attention on
//! five layers of six (sequences longer than the window), sandwich norms, GeGLU; batch and
//! chunking invariance; malformed metadata.

use ridge_gguf::{GgmlType, GgufFile};
use ridge_kernels::{blocks, DType, Isa};
use ridge_model::synthetic::{synthetic_model, SyntheticSpec, SYNTHETIC_VOCAB};
use ridge_model::{ActPolicy, Architecture, Batch, KvCache, Model, ModelError, Workspace};
use std::io::Write;

/// Six layers so that layer 5 is global; a window of 4 over 11-token prompts; head_dim 32 with
/// 4 query heads (q_dim 128 ≠ d_model 64) over 2 KV heads.
fn spec(dtype: DType, seed: u64) -> SyntheticSpec {
    SyntheticSpec {
        arch: Architecture::Gemma3,
        n_layers: 6,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: Some(32),
        sliding_window: 4,
        ffn_dim: 96,
        dtype,
        seed,
        ..Default::default()
    }
}

fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

struct Mat {
    rows: usize,
    cols: usize,
    w: Vec<f64>,
}

impl Mat {
    fn mv(&self, x: &[f64]) -> Vec<f64> {
        (0..self.rows)
            .map(|r| {
                (0..self.cols)
                    .map(|c| self.w[r * self.cols + c] * x[c])
                    .sum()
            })
            .collect()
    }
}

fn load(f: &GgufFile, name: &str) -> Mat {
    let t = f.tensor(name).unwrap();
    let dt = match t.ty {
        GgmlType::F32 => DType::F32,
        GgmlType::F16 => DType::F16,
        GgmlType::Q8_0 => DType::Q8_0,
        GgmlType::Q4_0 => DType::Q4_0,
        GgmlType::Q4_1 => DType::Q4_1,
        GgmlType::Q5_0 => DType::Q5_0,
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
    Mat {
        rows,
        cols,
        w: out.into_iter().map(f64::from).collect(),
    }
}

/// Naive f64 Gemma 3 forward over one sequence; logits at every position. `window_override`
/// replaces the sliding window (to show the test is sensitive to it).
fn reference_logits(f: &GgufFile, tokens: &[u32], window_override: Option<usize>) -> Vec<Vec<f64>> {
    let u = |k: &str| f.get_u64(k).unwrap() as usize;
    let (nl, d, nh, nkv, hd) = (
        u("gemma3.block_count"),
        u("gemma3.embedding_length"),
        u("gemma3.attention.head_count"),
        u("gemma3.attention.head_count_kv"),
        u("gemma3.attention.key_length"),
    );
    let window = window_override.unwrap_or(u("gemma3.attention.sliding_window"));
    let eps = f
        .get_f64("gemma3.attention.layer_norm_rms_epsilon")
        .unwrap();
    let global_base = f.get_f64("gemma3.rope.freq_base").unwrap();
    let norm = |x: &[f64], w: &[f64]| -> Vec<f64> {
        let s = (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
        x.iter().zip(w).map(|(v, g)| v / s * g).collect()
    };
    let head_norm =
        |x: &[f64], w: &[f64]| -> Vec<f64> { x.chunks(hd).flat_map(|h| norm(h, w)).collect() };
    let rope_neox = |v: &mut [f64], pos: usize, base: f64| {
        for h in v.chunks_mut(hd) {
            for i in 0..hd / 2 {
                let a = pos as f64 * base.powf(-2.0 * i as f64 / hd as f64);
                let (x0, x1) = (h[i], h[i + hd / 2]);
                h[i] = x0 * a.cos() - x1 * a.sin();
                h[i + hd / 2] = x0 * a.sin() + x1 * a.cos();
            }
        }
    };
    let gelu = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
    };
    let embd = load(f, "token_embd.weight");
    let out_norm = load(f, "output_norm.weight").w;
    let w = |i: usize, s: &str| load(f, &format!("blk.{i}.{s}.weight"));
    let mut kcache: Vec<Vec<Vec<f64>>> = vec![vec![]; nl];
    let mut vcache: Vec<Vec<Vec<f64>>> = vec![vec![]; nl];
    let layers: Vec<Vec<Mat>> = (0..nl)
        .map(|i| {
            [
                "attn_norm",
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_q_norm",
                "attn_k_norm",
                "attn_output",
                "post_attention_norm",
                "ffn_norm",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
                "post_ffw_norm",
            ]
            .iter()
            .map(|s| w(i, s))
            .collect()
        })
        .collect();
    let f16r =
        |x: &[f64]| -> Vec<f64> { x.iter().map(|&v| half::f16::from_f64(v).to_f64()).collect() };
    let mut all = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let t = tok as usize;
        let mut x: Vec<f64> = embd.w[t * d..(t + 1) * d]
            .iter()
            .map(|v| v * (d as f64).sqrt())
            .collect();
        for (li, l) in layers.iter().enumerate() {
            let global = (li + 1) % 6 == 0;
            let base = if global { global_base } else { 10000.0 };
            let xn = norm(&x, &l[0].w);
            let mut q = head_norm(&l[1].mv(&xn), &l[4].w);
            let mut k = head_norm(&l[2].mv(&xn), &l[5].w);
            let v = l[3].mv(&xn);
            rope_neox(&mut q, pos, base);
            rope_neox(&mut k, pos, base);
            // The cache stores K and V in f16; model that rounding exactly.
            kcache[li].push(f16r(&k));
            vcache[li].push(f16r(&v));
            let first = if global {
                0
            } else {
                (pos + 1).saturating_sub(window)
            };
            let mut att = vec![0f64; nh * hd];
            for h in 0..nh {
                let g = h / (nh / nkv);
                let s: Vec<f64> = (first..=pos)
                    .map(|p| {
                        let kr = &kcache[li][p];
                        (0..hd).map(|i| q[h * hd + i] * kr[g * hd + i]).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, p) in (first..=pos).enumerate() {
                    for i in 0..hd {
                        att[h * hd + i] += e[j] / z * vcache[li][p][g * hd + i];
                    }
                }
            }
            let o = norm(&l[6].mv(&att), &l[7].w);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let xn = norm(&x, &l[8].w);
            let gate = l[9].mv(&xn);
            let up = l[10].mv(&xn);
            let a: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| gelu(*g) * u).collect();
            let dn = norm(&l[11].mv(&a), &l[12].w);
            x.iter_mut().zip(&dn).for_each(|(a, b)| *a += b);
        }
        all.push(embd.mv(&norm(&x, &out_norm)));
    }
    all
}

fn run_all_positions(m: &Model, tokens: &[u32]) -> Vec<f32> {
    run_all_positions_in(m, tokens, 64)
}

/// Logits of every position of `tokens` from one prefill, in a cache of `capacity` tokens.
fn run_all_positions_in(m: &Model, tokens: &[u32], capacity: usize) -> Vec<f32> {
    let mut kv = KvCache::new(m.config(), capacity);
    let s = kv.add_seq();
    let mut b = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        b.push(t, i, s, true);
    }
    m.forward(&b, &mut kv, &mut Workspace::new())
        .unwrap()
        .to_vec()
}

fn worst_rel(got: &[f32], want: &[Vec<f64>]) -> f64 {
    let mut worst = 0f64;
    for (row, w) in got.chunks(SYNTHETIC_VOCAB).zip(want) {
        for (a, b) in row.iter().zip(w) {
            worst = worst.max((*a as f64 - b).abs() / (1.0 + b.abs()));
        }
    }
    worst
}

const PROMPT: [u32; 11] = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 256];

#[test]
fn config_reads_the_gemma3_hyper_parameters() {
    let f = write(&synthetic_model(&spec(DType::Q8_0, 1)));
    let m = Model::load(f.path()).unwrap();
    let c = m.config();
    assert_eq!(c.arch, Architecture::Gemma3);
    assert_eq!((c.head_dim, c.q_dim(), c.kv_dim()), (32, 128, 64));
    assert_eq!(c.sliding_window, Some(4));
    assert_eq!(c.embd_scale, 8.0);
    assert_eq!(c.attn_scale, 1.0 / 32f32.sqrt());
    assert_eq!((c.rope_base, c.rope_base_swa), (1e6, 1e4));
    let sliding: Vec<bool> = (0..6).map(|i| c.is_sliding(i)).collect();
    assert_eq!(sliding, [true, true, true, true, true, false]);
    assert_eq!(c.logit_softcap, None);
}

#[test]
fn every_format_and_path_matches_the_f64_reference() {
    for (i, dtype) in [DType::F32, DType::Q8_0, DType::Q4_0, DType::Q5_0]
        .into_iter()
        .enumerate()
    {
        let f = write(&synthetic_model(&spec(dtype, i as u64 + 1)));
        let g = GgufFile::open(f.path()).unwrap();
        let want = reference_logits(&g, &PROMPT, None);
        // The test must see the window: without it the logits past position 4 differ.
        let unwindowed = reference_logits(&g, &PROMPT, Some(usize::MAX));
        let last = PROMPT.len() - 1;
        let diff = want[last]
            .iter()
            .zip(&unwindowed[last])
            .fold(0f64, |a, (x, y)| a.max((x - y).abs()));
        assert!(
            diff > 1e-2,
            "the window does not change the logits ({diff})"
        );
        assert_eq!(want[3], unwindowed[3], "inside the window nothing changes");

        let mut m = Model::load(f.path()).unwrap();
        m.set_act_policy(ActPolicy::F32);
        // 8-bit activations are an approximation whose cost is measured on the real model
        // (perplexity against the float64 reference, crates/ridge-cli/tests/gemma3.rs).
        for isa in Isa::available() {
            m.set_isa(isa);
            let got = run_all_positions(&m, &PROMPT);
            assert_eq!(got.len(), PROMPT.len() * SYNTHETIC_VOCAB);
            let worst = worst_rel(&got, &want);
            // The same math in f32 instead of f64 (the f16 cache is modelled exactly).
            assert!(
                worst < 1e-3,
                "{dtype:?} {isa:?}: worst relative error {worst}"
            );
        }
    }
}

#[test]
fn batching_and_chunking_do_not_change_results() {
    let f = write(&synthetic_model(&spec(DType::Q4_0, 7)));
    let m = Model::load(f.path()).unwrap();
    let a: Vec<u32> = PROMPT.to_vec();
    let b: Vec<u32> = vec![5, 6, 7, 8, 9, 10, 11];
    let alone_a = run_all_positions(&m, &a);
    let alone_b = run_all_positions(&m, &b);

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
    let (mut ia, mut ib) = (0, 0);
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

    // Chunked prefill (3 + 5) then one-token decodes past the window: the same logits.
    let mut kv = KvCache::new(m.config(), 64);
    let s = kv.add_seq();
    let mut batch = Batch::new();
    batch.push_seq(&a[..3], 0, s, false);
    m.forward(&batch, &mut kv, &mut ws).unwrap();
    batch.clear();
    batch.push_seq(&a[3..8], 3, s, true);
    let mid = m.forward(&batch, &mut kv, &mut ws).unwrap().to_vec();
    assert_eq!(&mid[..], &alone_a[7 * v..8 * v]);
    for (i, &t) in a.iter().enumerate().skip(8) {
        batch.clear();
        batch.push(t, i, s, true);
        let row = m.forward(&batch, &mut kv, &mut ws).unwrap().to_vec();
        assert_eq!(&row[..], &alone_a[i * v..(i + 1) * v], "decode pos {i}");
    }
    assert_eq!(kv.seq_len(s), a.len());
}

/// Decodes `tokens[from..]` one at a time into sequence `s` (holding `tokens[..from]`),
/// committing the accepted tokens after each step as the engine does (which gives back the
/// windowed layers' blocks that fell out of the window) and checking the cache's bookkeeping;
/// returns every step's logits and the windowed pool's largest use.
fn decode_committing(
    m: &Model,
    kv: &mut KvCache,
    s: ridge_model::SeqId,
    tokens: &[u32],
    from: usize,
) -> (Vec<f32>, usize) {
    let (mut out, mut most) = (Vec::new(), 0);
    let mut ws = Workspace::new();
    let mut batch = Batch::new();
    for (i, &t) in tokens.iter().enumerate().skip(from) {
        batch.clear();
        batch.push(t, i, s, true);
        out.extend_from_slice(m.forward(&batch, kv, &mut ws).unwrap());
        kv.commit_blocks(s, &tokens[..=i]);
        kv.check_consistency().unwrap();
        most = most.max(kv.used_window_blocks().unwrap());
    }
    (out, most)
}

/// A model of [`spec`] with a 128-token context (for the 70-token texts below), with its file.
fn long_model(dtype: DType, seed: u64) -> (tempfile::NamedTempFile, Model) {
    let f = write(&synthetic_model(&SyntheticSpec {
        ctx_len: 128,
        ..spec(dtype, seed)
    }));
    let m = Model::load(f.path()).unwrap();
    (f, m)
}

/// A 70-token text of the synthetic byte vocabulary.
fn long_text(seed: u32) -> Vec<u32> {
    (0..70u32).map(|i| (i * 37 + seed * 11) % 256).collect()
}

#[test]
fn windowed_layers_keep_only_their_window_and_the_logits_do_not_change() {
    let (_f, m) = long_model(DType::Q8_0, 3);
    let text = long_text(1);
    // Reference: one prefill of every position (nothing given back).
    let want = run_all_positions_in(&m, &text, 128);
    let mut kv = KvCache::new(m.config(), 128);
    assert_eq!(kv.groups(), 2);
    let s = kv.add_seq();
    let (got, most) = decode_committing(&m, &mut kv, s, &text, 0);
    assert_eq!(got, want);
    // A window of 4 spans at most 2 blocks of 16, while the global layer holds all 70
    // positions (5 blocks); the next token (position 70) sees 67..=70, all in block 4.
    assert!(most <= 2, "windowed layers held {most} blocks");
    assert_eq!(kv.used_blocks(), 5);
    assert_eq!(kv.used_window_blocks(), Some(1));
    assert!(kv.block_table(s, 1)[..4]
        .iter()
        .all(|&b| b == ridge_model::DROPPED));
    kv.remove_seq(s);
    kv.check_consistency().unwrap();
    assert_eq!((kv.used_blocks(), kv.used_window_blocks()), (0, Some(0)));
}

#[test]
fn rejected_drafts_rewind_without_losing_the_window() {
    // As the engine verifies speculative drafts: each step feeds the last token and three
    // guesses, keeps the logits of the accepted ones, cuts the cache back to them and commits
    // (which gives windowed blocks back). Accepting 0, 1 or 2 guesses in turn, every kept row
    // must equal one prefill of the whole text.
    let (_f, m) = long_model(DType::Q8_0, 11);
    let text = long_text(4);
    let want = run_all_positions_in(&m, &text, 128);
    let v = SYNTHETIC_VOCAB;
    let mut kv = KvCache::new(m.config(), 128);
    let s = kv.add_seq();
    let (mut ws, mut batch) = (Workspace::new(), Batch::new());
    let (mut pos, mut step, mut dropped) = (0, 0, 0);
    while pos + 4 <= text.len() {
        let accept = step % 3;
        batch.clear();
        batch.push(text[pos], pos, s, true);
        for j in 1..4 {
            // Guesses past the accepted ones are wrong tokens.
            let t = if j <= accept {
                text[pos + j]
            } else {
                (text[pos + j] + 7) % 256
            };
            batch.push(t, pos + j, s, true);
        }
        let got = m.forward(&batch, &mut kv, &mut ws).unwrap().to_vec();
        for r in 0..=accept {
            let p = pos + r;
            assert_eq!(
                &got[r * v..(r + 1) * v],
                &want[p * v..(p + 1) * v],
                "position {p}"
            );
        }
        pos += accept + 1;
        kv.truncate(s, pos);
        assert_eq!(kv.seq_len(s), pos);
        kv.commit_blocks(s, &text[..pos]);
        kv.check_consistency().unwrap();
        dropped = kv
            .block_table(s, 1)
            .iter()
            .filter(|&&b| b == ridge_model::DROPPED)
            .count();
        step += 1;
    }
    assert!(dropped >= 3, "only {dropped} windowed blocks given back");
    // A rewind below what was committed cannot reach the given-back blocks: it stops where
    // the next token's window (4 positions) starts at the first block still held (or at the
    // committed full blocks, whichever is later).
    assert!(
        dropped * 16 + 3 > pos / 16 * 16,
        "the window floor is the binding one here"
    );
    kv.truncate(s, 0);
    assert_eq!(kv.seq_len(s), dropped * 16 + 3);
    kv.check_consistency().unwrap();
}

#[test]
fn a_cached_prefix_is_reused_only_as_far_as_the_window_is_still_cached() {
    let (_f, m) = long_model(DType::Q4_0, 5);
    let a = long_text(2);
    let v = SYNTHETIC_VOCAB;
    // b shares a's first `shared` tokens. All of a's full blocks (0..4) stay cached for the
    // global layer, but the windowed pool recycles a block given back before it uses a fresh
    // one, so of a's windowed blocks only block 3 (positions 48..64, given back last) is
    // still cached: a prefix of 64 tokens has its next token's window (61..=64) cached, one
    // of 48 (window 45..=48, block 2) does not, nor does any shorter one.
    for (shared, want_cached) in [(66, 64), (52, 0)] {
        let mut b = a.clone();
        for t in &mut b[shared..] {
            *t = (*t + 1) % 256;
        }
        let want_b = run_all_positions_in(&m, &b, 128);
        let mut kv = KvCache::new(m.config(), 128);
        let sa = kv.add_seq();
        decode_committing(&m, &mut kv, sa, &a, 0);
        kv.remove_seq(sa);
        assert_eq!(kv.cached_blocks(), 4);
        let sb = kv.add_seq();
        let cached = kv.attach_cached_prefix(sb, &b, b.len() - 1);
        kv.check_consistency().unwrap();
        assert_eq!(cached, want_cached, "b shares {shared} tokens");
        let (got, _) = decode_committing(&m, &mut kv, sb, &b, cached);
        assert_eq!(got, want_b[cached * v..], "b shares {shared} tokens");
    }
}

/// Replaces the first occurrence of `from` in the GGUF bytes by `to` (same length).
fn patched(from: &[u8], to: &[u8]) -> tempfile::NamedTempFile {
    let mut bytes = synthetic_model(&spec(DType::Q8_0, 3));
    let pos = bytes.windows(from.len()).position(|w| w == from).unwrap();
    bytes[pos..pos + to.len()].copy_from_slice(to);
    write(&bytes)
}

#[test]
fn malformed_gemma3_files_are_errors_that_name_the_problem() {
    // No sliding window in the metadata.
    let f = patched(
        b"gemma3.attention.sliding_window",
        b"gemma3.attention.sliding_windoX",
    );
    let e = Model::load(f.path()).unwrap_err();
    assert!(
        e.to_string().contains("gemma3.attention.sliding_window"),
        "{e}"
    );
    // A missing Q norm.
    let f = patched(b"blk.2.attn_q_norm.weight", b"blk.2.attn_X_norm.weight");
    let e = Model::load(f.path()).unwrap_err().to_string();
    assert!(
        e.contains("blk.2.attn_q_norm.weight") && e.contains("missing"),
        "{e}"
    );
    // A window of zero is out of range, not a division by zero later.
    let mut s = spec(DType::Q8_0, 3);
    s.sliding_window = 0;
    let f = write(&synthetic_model(&s));
    assert!(matches!(
        Model::load(f.path()),
        Err(ModelError::Gguf(_)) | Err(ModelError::Unsupported { .. })
    ));
}
