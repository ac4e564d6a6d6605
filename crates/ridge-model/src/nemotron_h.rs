//! NVIDIA Nemotron-H (`nemotron_h`: Nemotron Nano 9B / 12B v2), as llama.cpp runs it
//! (`src/models/nemotron-h.cpp`).
//!
//! Each layer is one pre-norm residual block, `x += block(attn_norm(x))`, and the block is one
//! of three kinds, told apart by the per-layer `attention.head_count_kv` and
//! `feed_forward_length` (`config.rs`): Mamba2 (`mamba2.rs`), grouped-query attention without
//! positions (optional biases), or a squared-ReLU MLP, `ffn_down(relu(ffn_up(x))²)` with
//! optional biases. The mixture variant (Nemotron 3, routed experts with a sigmoid router) is
//! refused at load.

use ridge_gguf::{GgufFile, MetadataValue};
use ridge_kernels::{matmul_many, ops};

use crate::config::ModelConfig;
use crate::layer::{LayerCtx, RopeTable};
use crate::mamba2::{self, mamba2, Mamba2};
use crate::recurrent_state::Journal;
use crate::stack::{group_tokens, skipped, Stack};
use crate::weights::{matrix, vector, MatRef};
use crate::{Batch, KvCache, ModelError, Workspace};

/// Nemotron-H's layers.
pub(crate) struct NemotronHStack {
    layers: Vec<(Vec<f32>, Block)>,
}

// One value per layer, tens of them: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Block {
    Mamba(usize, Mamba2),
    Attention(Attention),
    Mlp(Mlp),
}

/// Attention weights, with the biases a file may carry.
struct Attention {
    wq: MatRef,
    wk: MatRef,
    wv: MatRef,
    wo: MatRef,
    /// Q, K, V and output biases, each where the file has it.
    biases: [Option<Vec<f32>>; 4],
}

/// The squared-ReLU MLP.
struct Mlp {
    up: MatRef,
    down: MatRef,
    up_bias: Option<Vec<f32>>,
    down_bias: Option<Vec<f32>>,
}

/// `name` as a vector of `n` if the file has it.
fn optional(f: &GgufFile, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
    if f.has_tensor(name) {
        Ok(Some(vector(f, name, n)?))
    } else {
        Ok(None)
    }
}

/// Adds `bias` to every row of `rows`.
fn add_bias(rows: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in rows.chunks_exact_mut(b.len()) {
            ops::add_inplace(row, b);
        }
    }
}

impl NemotronHStack {
    /// Binds every layer as the configuration says it is.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let Some(rc) = &cfg.recurrent else {
            return Err(ModelError::Unsupported {
                path: f.path().display().to_string(),
                message: "nemotron_h needs its ssm.* keys".into(),
            });
        };
        let (d, q, kv) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim());
        // The layers with a feed-forward (`config.rs` checked the array): Mamba2 layers are
        // the recurrent ones, attention the others without one.
        let key = format!("{}.feed_forward_length", cfg.arch.gguf_name());
        let widths = match f.get(&key) {
            Some(MetadataValue::Array(a)) => a.to_i64_vec().unwrap_or_default(),
            _ => Vec::new(),
        };
        let mlp = |i: usize| widths.get(i).is_some_and(|&w| w != 0);
        let mut r = 0;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let b = |s: &str| format!("blk.{i}.{s}.bias");
            let block = if cfg.is_recurrent(i) {
                r += 1;
                Block::Mamba(r - 1, Mamba2::bind(f, cfg, rc, i)?)
            } else if mlp(i) {
                let ff = cfg.ffn_dim;
                Block::Mlp(Mlp {
                    up: matrix(f, &n("ffn_up"), ff, d)?,
                    down: matrix(f, &n("ffn_down"), d, ff)?,
                    up_bias: optional(f, &b("ffn_up"), ff)?,
                    down_bias: optional(f, &b("ffn_down"), d)?,
                })
            } else {
                Block::Attention(Attention {
                    wq: matrix(f, &n("attn_q"), q, d)?,
                    wk: matrix(f, &n("attn_k"), kv, d)?,
                    wv: matrix(f, &n("attn_v"), kv, d)?,
                    wo: matrix(f, &n("attn_output"), d, q)?,
                    biases: [
                        optional(f, &b("attn_q"), q)?,
                        optional(f, &b("attn_k"), kv)?,
                        optional(f, &b("attn_v"), kv)?,
                        optional(f, &b("attn_output"), d)?,
                    ],
                })
            };
            layers.push((vector(f, &n("attn_norm"), d)?, block));
        }
        Ok(NemotronHStack { layers })
    }
}

/// The attention block of the `n` normed rows in `ws.xn`, output in `ws.xn`.
fn attention(
    cx: &LayerCtx<'_>,
    li: usize,
    a: &Attention,
    batch: &Batch,
    kv: &mut KvCache,
    ws: &mut Workspace,
) {
    let n = batch.len();
    let (qd, kvd, d) = (cx.cfg.q_dim(), cx.cfg.kv_dim(), cx.cfg.d_model);
    {
        let mut ys = [
            (cx.mat(&a.wq), &mut ws.q[..]),
            (cx.mat(&a.wk), &mut ws.k[..]),
            (cx.mat(&a.wv), &mut ws.v[..]),
        ];
        matmul_many(cx.isa, cx.act.qkv, &mut ys, &ws.xn, n, &mut ws.mm);
    }
    add_bias(&mut ws.q[..n * qd], a.biases[0].as_ref());
    add_bias(&mut ws.k[..n * kvd], a.biases[1].as_ref());
    add_bias(&mut ws.v[..n * kvd], a.biases[2].as_ref());
    // `use_rope` is off for this architecture: the keys are stored as they are.
    cx.rope_and_store(li, batch, kv, ws, RopeTable::Global, cx.cfg.rope_neox);
    cx.attention(li, None, batch, kv, ws, None);
    cx.mm(cx.act.o, &a.wo, &ws.att, n, &mut ws.xn, &mut ws.mm);
    add_bias(&mut ws.xn[..n * d], a.biases[3].as_ref());
}

/// The squared-ReLU MLP of the `n` normed rows in `ws.xn`, output in `ws.xn`.
fn mlp(cx: &LayerCtx<'_>, m: &Mlp, n: usize, ws: &mut Workspace) {
    let (ff, d) = (cx.cfg.ffn_dim, cx.cfg.d_model);
    cx.mm(cx.act.gate_up, &m.up, &ws.xn, n, &mut ws.gate, &mut ws.mm);
    let h = &mut ws.gate[..n * ff];
    add_bias(h, m.up_bias.as_ref());
    for v in h.iter_mut() {
        let r = v.max(0.0);
        *v = r * r;
    }
    cx.mm(cx.act.down, &m.down, &ws.gate, n, &mut ws.xn, &mut ws.mm);
    add_bias(&mut ws.xn[..n * d], m.down_bias.as_ref());
}

impl Stack for NemotronHStack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        let (eps, n) = (cx.cfg.norm_eps, batch.len());
        group_tokens(batch, ws);
        for (li, (norm, block)) in self.layers.iter().enumerate() {
            // A Mamba2 layer cannot be skipped: its state must see every token.
            if skipped(skip, li) && !matches!(block, Block::Mamba(..)) {
                continue;
            }
            ops::rms_norm_rows(cx.isa, &ws.x, norm, eps, &mut ws.xn);
            match block {
                Block::Mamba(r, m) => mamba2(cx, *r, m, n, kv, ws),
                Block::Attention(a) => attention(cx, li, a, batch, kv, ws),
                Block::Mlp(m) => mlp(cx, m, n, ws),
            }
            ops::add_inplace(&mut ws.x, &ws.xn);
        }
    }

    fn matrices_mut(&mut self, _cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let mut v = Vec::new();
        for (_, b) in &mut self.layers {
            match b {
                Block::Mamba(_, m) => v.extend(m.matrices_mut()),
                Block::Attention(a) => v.extend([&mut a.wq, &mut a.wk, &mut a.wv, &mut a.wo]),
                Block::Mlp(m) => v.extend([&mut m.up, &mut m.down]),
            }
        }
        v
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        let bias = |b: &Option<Vec<f32>>| 4 * b.as_ref().map_or(0, Vec::len);
        self.layers
            .iter()
            .map(|(norm, b)| {
                4 * norm.len()
                    + match b {
                        Block::Mamba(_, m) => m.bytes(cx),
                        Block::Attention(a) => {
                            [a.wq, a.wk, a.wv, a.wo]
                                .iter()
                                .map(|m| cx.mat(m).data.len())
                                .sum::<usize>()
                                + a.biases.iter().map(bias).sum::<usize>()
                        }
                        Block::Mlp(m) => {
                            cx.mat(&m.up).data.len()
                                + cx.mat(&m.down).data.len()
                                + bias(&m.up_bias)
                                + bias(&m.down_bias)
                        }
                    }
            })
            .sum()
    }

    fn expert_bytes(&self, _cx: &LayerCtx<'_>) -> usize {
        0
    }

    fn replay(&self, cx: &LayerCtx<'_>, j: &Journal, keep: usize, state: &mut [f32]) {
        for (_, b) in &self.layers {
            if let Block::Mamba(r, m) = b {
                mamba2::replay(cx.isa, cx.cfg, *r, m, j, keep, state);
            }
        }
    }
}
