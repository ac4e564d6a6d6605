//! Gemma 4 (`gemma4`: E2B, E4B, 31B), as llama.cpp runs it.
//!
//! What it has beyond Gemma 3 (`gemma3.rs`), each visible in [`Gemma4Stack::run`]:
//! - two layer kinds with **different head shapes**: the sliding-window layers' heads are
//!   `attention.key_length_swa` wide with `head_count_kv` of their own, the global layers'
//!   `attention.key_length` (twice as wide on the published sizes). The cache keeps each kind
//!   in its own group (`kv_cache.rs`), so each group's rows are its layers' width; the layer
//!   steps of `layer.rs` read the shape from the configuration they are lent, so this file
//!   lends them the sliding layers' configuration ([`Gemma4Stack::swa_cfg`]) on those layers;
//! - **shared K/V**: the last `attention.shared_kv_layers` layers compute queries only and
//!   attend to the K/V of the last earlier layer of their kind (llama.cpp's map: the
//!   layer before the first sharing one for global layers, the one before that for sliding
//!   ones — refused where that layer is of the other kind); the cache holds no rows for them
//!   and the floor counts none;
//! - per-head RMSNorm on Q and K and a weightless one on V (V is K itself where a layer has no
//!   `attn_v`), a score scale of 1, RoPE over whole heads with the sliding layers' base
//!   (`rope.freq_base_swa`) and, on global layers, "proportional" RoPE written as per-pair
//!   divisors in `rope_freqs.weight` (1e30 on the pairs that do not rotate);
//! - **per-layer token embeddings** (E2B/E4B): each token's row of `per_layer_token_embd`
//!   (`ple_dim` values per layer, × √ple_dim) plus the RMS-normed projection of its scaled
//!   embedding (`per_layer_model_proj`, × 1/√d_model), the sum × 1/√2; after each layer,
//!   `x += norm(proj(gelu(inp_gate · x) ⊙ that layer's slice))`;
//! - a learnt scalar on each layer's output (`layer_output_scale`), per-layer feed-forward
//!   widths, final-logit soft-capping (in `model.rs`);
//! - the mixture (26B-A4B): beside each layer's dense feed-forward, GeGLU experts (`moe.rs`)
//!   fed `pre_ffw_norm_2(x)` and routed by `rms_norm(x) / √d ⊙ ffn_gate_inp.scale` (softmax,
//!   top-k renormalised, each expert's output × its `ffn_down_exps.scale`); the dense and the
//!   routed halves are normed apart (`post_ffw_norm_1`, `post_ffw_norm_2`) and summed before
//!   the layer's `post_ffw_norm`.
//!
//! Gemma 4's converter stores its norms as the multipliers they are (no `1 +` to add).

use ridge_gguf::GgufFile;
use ridge_kernels::{blocks, matmul, matmul_many, ops};

use crate::config::{HeadShape, ModelConfig};
use crate::layer::{Ffn, GateAct, LayerCtx, RopeTable, RoutedFfn};
use crate::moe::Experts;
use crate::stack::{ffn_bytes, skipped, Stack};
use crate::weights::{matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{Batch, KvCache, ModelError, Workspace};

/// Gemma 4's layers, the per-layer embedding weights, and the sliding layers' configuration
/// lent to the shared steps on those layers.
pub(crate) struct Gemma4Stack {
    layers: Vec<G4Layer>,
    ple: Option<PerLayerInput>,
    /// `cfg` with the sliding layers' head shape (the same as `cfg` where they have none).
    swa_cfg: ModelConfig,
    /// A weightless RMSNorm's weights, one head of the widest kind long (V's norm).
    ones: Vec<f32>,
}

/// One layer's weights.
struct G4Layer {
    attn_norm: Vec<f32>,
    wq: MatRef,
    /// K and V projections and K's norm where the layer keeps K/V of its own (V is K where
    /// the file has no `attn_v`).
    kv: Option<OwnKv>,
    q_norm: Vec<f32>,
    wo: MatRef,
    post_attn: Vec<f32>,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
    post_ffn: Vec<f32>,
    ple: Option<LayerPle>,
    out_scale: Option<f32>,
    /// The experts beside `ffn` in a mixture layer (26B-A4B).
    moe: Option<LayerMoe>,
}

/// A mixture layer's experts and the norms around them: the dense feed-forward's output is
/// normed by `post_dense`, the experts' input by `pre_experts` and their output by
/// `post_experts`; the router reads the RMS-normed residual × `1/√d` × `router_scale`.
struct LayerMoe {
    experts: Experts,
    router_scale: Vec<f32>,
    pre_experts: Vec<f32>,
    post_dense: Vec<f32>,
    post_experts: Vec<f32>,
}

/// The K/V weights of a layer that keeps its own.
struct OwnKv {
    wk: MatRef,
    wv: Option<MatRef>,
    k_norm: Vec<f32>,
}

/// The model-wide per-layer embedding weights.
struct PerLayerInput {
    /// `[vocab, n_layers · ple_dim]`, read a row per token.
    embd: MatRef,
    /// `[n_layers · ple_dim, d_model]`.
    proj: MatRef,
    /// `ple_dim` wide, applied to each layer's slice of the projection.
    proj_norm: Vec<f32>,
}

/// A layer's per-layer-embedding weights.
struct LayerPle {
    gate: MatRef,
    proj: MatRef,
    post_norm: Vec<f32>,
}

impl Gemma4Stack {
    /// Binds every layer (types and shapes checked against each layer's kind).
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let d = cfg.d_model;
        let pd = cfg.ple_dim;
        let ple = if pd > 0 {
            let w = cfg.n_layers * pd;
            Some(PerLayerInput {
                embd: matrix(f, "per_layer_token_embd.weight", cfg.vocab, w)?,
                proj: matrix(f, "per_layer_model_proj.weight", w, d)?,
                proj_norm: vector(f, "per_layer_proj_norm.weight", pd)?,
            })
        } else {
            None
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let HeadShape {
                head_dim: hd,
                n_kv_heads: nkv,
                ..
            } = cfg.head_shape(i);
            let (q, kvd, ffn) = (cfg.n_heads * hd, nkv * hd, cfg.ffn_dim_of(i));
            let kv = if cfg.owns_kv(i) {
                Some(OwnKv {
                    wk: matrix(f, &n("attn_k"), kvd, d)?,
                    wv: if f.has_tensor(&n("attn_v")) {
                        Some(matrix(f, &n("attn_v"), kvd, d)?)
                    } else {
                        None
                    },
                    k_norm: vector(f, &n("attn_k_norm"), hd)?,
                })
            } else {
                None
            };
            let moe = match &cfg.moe {
                Some(m) if f.has_tensor(&n("ffn_gate_inp")) => Some(LayerMoe {
                    experts: Experts::bind(f, cfg, m, i)?,
                    router_scale: vector(f, &format!("blk.{i}.ffn_gate_inp.scale"), d)?,
                    pre_experts: vector(f, &n("pre_ffw_norm_2"), d)?,
                    post_dense: vector(f, &n("post_ffw_norm_1"), d)?,
                    post_experts: vector(f, &n("post_ffw_norm_2"), d)?,
                }),
                _ => None,
            };
            let out_scale = if f.has_tensor(&n("layer_output_scale")) {
                Some(vector(f, &n("layer_output_scale"), 1)?[0])
            } else {
                None
            };
            layers.push(G4Layer {
                attn_norm: vector(f, &n("attn_norm"), d)?,
                wq: matrix(f, &n("attn_q"), q, d)?,
                kv,
                q_norm: vector(f, &n("attn_q_norm"), hd)?,
                wo: matrix(f, &n("attn_output"), d, q)?,
                post_attn: vector(f, &n("post_attention_norm"), d)?,
                ffn_norm: vector(f, &n("ffn_norm"), d)?,
                ffn: Ffn::Dense {
                    gate: matrix(f, &n("ffn_gate"), ffn, d)?,
                    up: matrix(f, &n("ffn_up"), ffn, d)?,
                    down: matrix(f, &n("ffn_down"), d, ffn)?,
                },
                post_ffn: vector(f, &n("post_ffw_norm"), d)?,
                ple: if pd > 0 {
                    Some(LayerPle {
                        gate: matrix(f, &n("inp_gate"), pd, d)?,
                        proj: matrix(f, &n("proj"), d, pd)?,
                        post_norm: vector(f, &n("post_norm"), d)?,
                    })
                } else {
                    None
                },
                out_scale,
                moe,
            });
        }
        let mut swa_cfg = cfg.clone();
        if let Some(s) = cfg.swa_shape {
            (swa_cfg.head_dim, swa_cfg.n_kv_heads, swa_cfg.rope_dim) =
                (s.head_dim, s.n_kv_heads, s.rope_dim);
        }
        let widest = cfg.head_dim.max(swa_cfg.head_dim);
        Ok(Gemma4Stack {
            layers,
            ple,
            swa_cfg,
            ones: vec![1.0; widest],
        })
    }

    /// The per-layer inputs of the batch into `ws.ple`, layer-major (`[layer][token][ple_dim]`),
    /// from the tokens and their scaled embeddings in `ws.x`.
    fn per_layer_inputs(
        &self,
        cx: &LayerCtx<'_>,
        p: &PerLayerInput,
        batch: &Batch,
        ws: &mut Workspace,
    ) {
        let (cfg, n) = (cx.cfg, batch.len());
        let (d, pd, nl) = (cfg.d_model, cfg.ple_dim, cfg.n_layers);
        let w = nl * pd;
        fit(&mut ws.ple.proj, n * w);
        matmul(
            cx.isa,
            cx.act.qkv,
            &cx.mat(&p.proj),
            &ws.x[..n * d],
            n,
            &mut ws.ple.proj,
            &mut ws.mm,
        );
        let proj = &mut ws.ple.proj[..n * w];
        ops::scale_inplace(proj, 1.0 / (d as f32).sqrt());
        ops::rms_norm_rows_inplace(cx.isa, proj, &p.proj_norm, cfg.norm_eps);
        fit(&mut ws.ple.inputs, n * w);
        fit(&mut ws.ple.row, w);
        let embd = cx.mat(&p.embd);
        let (es, mix) = ((pd as f32).sqrt(), std::f32::consts::FRAC_1_SQRT_2);
        for (t, &tok) in batch.tokens.iter().enumerate() {
            blocks::dequantize_row(embd.dtype, embd.row(tok as usize), &mut ws.ple.row[..w]);
            for l in 0..nl {
                let src = l * pd..(l + 1) * pd;
                let dst = &mut ws.ple.inputs[(l * n + t) * pd..(l * n + t + 1) * pd];
                for ((o, &e), &pr) in dst
                    .iter_mut()
                    .zip(&ws.ple.row[src.clone()])
                    .zip(&ws.ple.proj[t * w..][src])
                {
                    *o = (e * es + pr) * mix;
                }
            }
        }
    }
}

impl Gemma4Stack {
    /// A mixture layer's experts beside its dense feed-forward, whose output is in `ws.xn`:
    /// leaves `post_dense(dense) + post_experts(experts(pre_experts(x)))` there.
    fn experts(&self, cx: &LayerCtx<'_>, m: &LayerMoe, n: usize, ws: &mut Workspace) {
        let (d, eps) = (cx.cfg.d_model, cx.cfg.norm_eps);
        ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn[..n * d], &m.post_dense, eps);
        fit(&mut ws.ple.mlp, n * d);
        ws.ple.mlp.copy_from_slice(&ws.xn[..n * d]);
        fit(&mut ws.router_in, n * d);
        ops::rms_norm_rows(
            cx.isa,
            &ws.x[..n * d],
            &m.router_scale,
            eps,
            &mut ws.router_in,
        );
        ops::scale_inplace(&mut ws.router_in, 1.0 / (d as f32).sqrt());
        ops::rms_norm_rows(
            cx.isa,
            &ws.x[..n * d],
            &m.pre_experts,
            eps,
            &mut ws.xn[..n * d],
        );
        m.experts.forward_routed_by_input(cx, n, ws);
        ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn[..n * d], &m.post_experts, eps);
        ops::add_inplace(&mut ws.xn[..n * d], &ws.ple.mlp);
    }
}

impl Stack for Gemma4Stack {
    fn run(
        &self,
        cx: &LayerCtx<'_>,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) {
        let (cfg, n) = (cx.cfg, batch.len());
        let (d, eps) = (cfg.d_model, cfg.norm_eps);
        if let Some(p) = &self.ple {
            self.per_layer_inputs(cx, p, batch, ws);
        }
        let swa_cx = LayerCtx {
            cfg: &self.swa_cfg,
            ..*cx
        };
        for (li, l) in self.layers.iter().enumerate() {
            if skipped(skip, li) {
                continue;
            }
            let (table, window) = cx.window_of(li);
            // The shared steps read this layer's head shape from the configuration lent.
            let lcx = if table == RopeTable::Swa { &swa_cx } else { cx };
            let lc = lcx.cfg;
            let (hd, qd, kvd) = (lc.head_dim, lc.q_dim(), lc.kv_dim());

            // Attention block.
            ops::rms_norm_rows(
                cx.isa,
                &ws.x[..n * d],
                &l.attn_norm,
                eps,
                &mut ws.xn[..n * d],
            );
            match &l.kv {
                Some(own) => {
                    let (q, k) = (cx.mat(&l.wq), cx.mat(&own.wk));
                    let xn = &ws.xn[..n * d];
                    match &own.wv {
                        Some(wv) => {
                            let mut ys = [
                                (q, &mut ws.q[..n * qd]),
                                (k, &mut ws.k[..n * kvd]),
                                (cx.mat(wv), &mut ws.v[..n * kvd]),
                            ];
                            matmul_many(cx.isa, cx.act.qkv, &mut ys, xn, n, &mut ws.mm);
                        }
                        None => {
                            let mut ys = [(q, &mut ws.q[..n * qd]), (k, &mut ws.k[..n * kvd])];
                            matmul_many(cx.isa, cx.act.qkv, &mut ys, xn, n, &mut ws.mm);
                            ws.v[..n * kvd].copy_from_slice(&ws.k[..n * kvd]);
                        }
                    }
                    ops::rms_norm_rows_inplace(cx.isa, &mut ws.k[..n * kvd], &own.k_norm, eps);
                    ops::rms_norm_rows_inplace(cx.isa, &mut ws.v[..n * kvd], &self.ones[..hd], eps);
                }
                None => {
                    matmul(
                        cx.isa,
                        cx.act.qkv,
                        &cx.mat(&l.wq),
                        &ws.xn[..n * d],
                        n,
                        &mut ws.q[..n * qd],
                        &mut ws.mm,
                    );
                }
            }
            ops::rms_norm_rows_inplace(cx.isa, &mut ws.q[..n * qd], &l.q_norm, eps);
            if l.kv.is_some() {
                lcx.rope_and_store(li, batch, kv, ws, table, true);
            } else {
                lcx.rope_queries(li, batch, ws, table, true);
            }
            lcx.attention(li, None, batch, kv, ws, window);
            cx.mm(
                cx.act.o,
                &l.wo,
                &ws.att[..n * qd],
                n,
                &mut ws.xn[..n * d],
                &mut ws.mm,
            );
            ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn[..n * d], &l.post_attn, eps);
            ops::add_inplace(&mut ws.x[..n * d], &ws.xn[..n * d]);

            // Feed-forward block.
            ops::rms_norm_rows(
                cx.isa,
                &ws.x[..n * d],
                &l.ffn_norm,
                eps,
                &mut ws.xn[..n * d],
            );
            // The shared step fills the gate and up buffers whole: this layer's width.
            fit(&mut ws.gate, n * cfg.ffn_dim_of(li));
            fit(&mut ws.up, n * cfg.ffn_dim_of(li));
            cx.ffn(&l.ffn, n, ws, GateAct::GeluTanh);
            if let Some(m) = &l.moe {
                self.experts(cx, m, n, ws);
            }
            ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn[..n * d], &l.post_ffn, eps);
            ops::add_inplace(&mut ws.x[..n * d], &ws.xn[..n * d]);

            // Per-layer embedding.
            if let Some(pl) = &l.ple {
                let pd = cfg.ple_dim;
                fit(&mut ws.ple.gate, n * pd);
                cx.mm(
                    cx.act.gate_up,
                    &pl.gate,
                    &ws.x[..n * d],
                    n,
                    &mut ws.ple.gate,
                    &mut ws.mm,
                );
                let inp = &ws.ple.inputs[li * n * pd..(li + 1) * n * pd];
                ops::gelu_tanh_mul(cx.isa, &mut ws.ple.gate[..n * pd], inp);
                cx.mm(
                    cx.act.down,
                    &pl.proj,
                    &ws.ple.gate[..n * pd],
                    n,
                    &mut ws.xn[..n * d],
                    &mut ws.mm,
                );
                ops::rms_norm_rows_inplace(cx.isa, &mut ws.xn[..n * d], &pl.post_norm, eps);
                ops::add_inplace(&mut ws.x[..n * d], &ws.xn[..n * d]);
            }
            if let Some(s) = l.out_scale {
                ops::scale_inplace(&mut ws.x[..n * d], s);
            }
        }
    }

    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let mut v = Vec::new();
        if let Some(p) = &mut self.ple {
            // The embedding rows are read one token at a time from the file, not multiplied.
            v.push(&mut p.proj);
        }
        for l in &mut self.layers {
            v.push(&mut l.wq);
            v.push(&mut l.wo);
            if let Some(own) = &mut l.kv {
                v.push(&mut own.wk);
                if let Some(wv) = &mut own.wv {
                    v.push(wv);
                }
            }
            v.extend(l.ffn.matrices_mut(cfg));
            if let Some(m) = &mut l.moe {
                v.extend(m.experts.matrices_mut(cfg));
            }
            if let Some(pl) = &mut l.ple {
                v.push(&mut pl.gate);
                v.push(&mut pl.proj);
            }
        }
        v
    }

    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        let m = |x: &MatRef| cx.mat(x).data.len();
        let f = |x: &[f32]| 4 * x.len();
        let ple = self.ple.as_ref().map_or(0, |p| {
            // One embedding row per token, the whole projection, its norm.
            p.embd.dtype.row_bytes(p.embd.cols) + m(&p.proj) + f(&p.proj_norm)
        });
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let kv =
                    l.kv.as_ref()
                        .map_or(0, |o| m(&o.wk) + o.wv.as_ref().map_or(0, m) + f(&o.k_norm));
                let pl = l
                    .ple
                    .as_ref()
                    .map_or(0, |p| m(&p.gate) + m(&p.proj) + f(&p.post_norm));
                let moe = l.moe.as_ref().map_or(0, |e| {
                    e.experts.bytes_per_token(cx)
                        + f(&e.router_scale)
                        + f(&e.pre_experts)
                        + f(&e.post_dense)
                        + f(&e.post_experts)
                });
                m(&l.wq)
                    + m(&l.wo)
                    + kv
                    + pl
                    + moe
                    + ffn_bytes(cx, &l.ffn)
                    + f(&l.attn_norm)
                    + f(&l.q_norm)
                    + f(&l.post_attn)
                    + f(&l.ffn_norm)
                    + f(&l.post_ffn)
            })
            .sum();
        ple + layers
    }

    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        self.layers
            .iter()
            .filter_map(|l| l.moe.as_ref())
            .map(|m| m.experts.expert_bytes(cx))
            .sum()
    }
}
