//! The routed (mixture-of-experts) feed-forward: a router picks `k` of `E` experts per token,
//! and the layer's output is the router-weighted sum of those experts' SwiGLU feed-forwards
//! (plus, for qwen2moe, a shared expert every token goes through, scaled by a sigmoid gate).
//!
//! Why tokens are grouped by expert: an expert's weights are the step's bytes, and a step is
//! memory-bound, so each chosen expert streams its three matrices once for all the tokens the
//! batch sent to it (one product of `m` rows), and an expert no token chose is never touched.
//! At batch 1 that is `k` experts per layer; in prefill or batched decode of `B` tokens about
//! `E·(1 − (1 − k/E)^B)`.
//!
//! Layout: llama.cpp stores each layer's experts stacked in one 3-D tensor
//! (`ffn_{gate,up,down}_exps`, `[cols, rows, E]`), bound here as one matrix of `E · rows` rows
//! whose expert `e` is the row range `e · rows ..` ([`WeightMatrix::row_range`]); the range is
//! a whole number of tile groups when `rows` is a multiple of eight, so the experts are packed
//! into tiles at load with the dense matrices and run on the same kernels.
//!
//! Routing follows llama.cpp's `build_moe_ffn` for the softmax gating these architectures use:
//! softmax over all `E` router logits (f32 activations, so the choice is not perturbed by
//! 8-bit rounding), the `k` largest probabilities, optionally renormalised to sum to one
//! (qwen3moe, Mixtral; the sum clamped below at 2⁻¹⁴ as llama.cpp does) and scaled by
//! `expert_weights_scale`. gpt-oss instead takes the `k` largest logits (after the router's
//! bias) and a softmax over those `k`, adds per-expert biases after each expert product, and
//! activates with its clamped SwiGLU.
//!
//! [`Experts`] reaches the shared layer steps through `layer.rs`'s `RoutedFfn` trait, which a
//! layer's feed-forward holds it as: `layer.rs` runs a routed feed-forward without importing
//! this file, and this file imports only the `LayerCtx` its products read (`model.rs` binds
//! the experts). Its scratch buffers are `Workspace`'s (`workspace.rs`).

use ridge_gguf::GgufFile;
use ridge_kernels::{matmul, matmul_each, matmul_many, ops, ActPrecision, WeightMatrix};

use crate::config::{Architecture, ExpertAct, Gating, ModelConfig, MoeConfig};
use crate::layer::{LayerCtx, RoutedFfn};
use crate::weights::{experts, f32_rows, matrix, vector, MatRef};
use crate::workspace::{fit, MoeScratch};
use crate::{ModelError, Workspace};

/// Smallest sum the renormalised router weights are divided by (llama.cpp's clamp: the
/// smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// One layer's experts: the router and the stacked expert matrices.
pub(crate) struct Experts {
    /// `E × d`: one logit per expert.
    pub router: MatRef,
    /// `(E · f) × d` each.
    pub gate: MatRef,
    pub up: MatRef,
    /// `(E · d) × f`.
    pub down: MatRef,
    /// The shared expert (qwen2moe).
    pub shared: Option<SharedExpert>,
    /// The router's bias, one per expert (gpt-oss).
    pub router_bias: Option<Vec<f32>>,
    /// The bias added to the sigmoid scores to choose the experts, not to weight them
    /// (`exp_probs_b`: GLM-4.5, DeepSeek-V3).
    pub selection_bias: Option<Vec<f32>>,
    /// Biases of every expert's products (gpt-oss).
    pub biases: Option<ExpertBiases>,
    /// A factor per expert on its down product (`ffn_down_exps.scale`: Gemma 4's
    /// per-expert scale), where the file has one.
    pub down_scale: Option<Vec<f32>>,
}

/// Per-expert biases added to the gate, up and down products: expert `e`'s are the `e`-th
/// `f` (gate, up) or `d` (down) values of each.
pub(crate) struct ExpertBiases {
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

/// A dense feed-forward every token goes through beside the routed ones, scaled per token by
/// `sigmoid(x · gate_inp)` where the file has the gate (qwen2moe, Qwen3.5/Qwen3-Next; Granite's
/// is added as it is).
pub(crate) struct SharedExpert {
    pub gate: MatRef,
    pub up: MatRef,
    pub down: MatRef,
    pub gate_inp: Option<Vec<f32>>,
}

impl Experts {
    /// Binds layer `i`'s router and experts (and shared expert where the configuration has
    /// one), every shape checked against the metadata.
    pub(crate) fn bind(
        f: &GgufFile,
        cfg: &ModelConfig,
        moe: &MoeConfig,
        i: usize,
    ) -> Result<Self, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let (d, e, ff) = (cfg.d_model, moe.n_expert, moe.expert_ffn);
        let shared = match moe.shared_ffn {
            Some(sf) => Some(SharedExpert {
                gate: matrix(f, &n("ffn_gate_shexp"), sf, d)?,
                up: matrix(f, &n("ffn_up_shexp"), sf, d)?,
                down: matrix(f, &n("ffn_down_shexp"), d, sf)?,
                gate_inp: if cfg.arch.shared_expert_gated() {
                    Some(vector(f, &n("ffn_gate_inp_shexp"), d)?)
                } else {
                    None
                },
            }),
            None => None,
        };
        let b = |s: &str| format!("blk.{i}.{s}.bias");
        let (router_bias, biases) = if cfg.arch == Architecture::GptOss {
            (
                Some(vector(f, &b("ffn_gate_inp"), e)?),
                Some(ExpertBiases {
                    gate: f32_rows(f, &b("ffn_gate_exps"), ff, e)?,
                    up: f32_rows(f, &b("ffn_up_exps"), ff, e)?,
                    down: f32_rows(f, &b("ffn_down_exps"), d, e)?,
                }),
            )
        } else {
            (None, None)
        };
        // The selection bias is part of sigmoid gating wherever the file has one (the
        // architectures that gate so require it).
        let probs_b = format!("blk.{i}.exp_probs_b.bias");
        let selection_bias = if moe.gating == Gating::Sigmoid
            && (cfg.arch == Architecture::Glm4Moe || f.has_tensor(&probs_b))
        {
            Some(vector(f, &probs_b, e)?)
        } else {
            None
        };
        let down_s = format!("blk.{i}.ffn_down_exps.scale");
        Ok(Experts {
            router_bias,
            selection_bias,
            biases,
            down_scale: if f.has_tensor(&down_s) {
                Some(vector(f, &down_s, e)?)
            } else {
                None
            },
            router: matrix(f, &n("ffn_gate_inp"), e, d)?,
            gate: experts(f, &n("ffn_gate_exps"), e, ff, d)?,
            up: experts(f, &n("ffn_up_exps"), e, ff, d)?,
            down: experts(f, &n("ffn_down_exps"), e, d, ff)?,
            shared,
        })
    }
}

impl Experts {
    /// The feed-forward of the `n` normed rows in `ws.xn`, routed by the rows of
    /// `ws.router_in` instead (Gemma 4 routes from the residual, normed apart); leaves its
    /// output in `ws.xn`.
    pub(crate) fn forward_routed_by_input(&self, cx: &LayerCtx<'_>, n: usize, ws: &mut Workspace) {
        match &cx.cfg.moe {
            Some(moe) => forward(cx, self, moe, n, ws, true),
            None => unreachable!("routed layers are bound only with a MoE config"),
        }
    }
}

impl RoutedFfn for Experts {
    fn forward(&self, cx: &LayerCtx<'_>, n: usize, ws: &mut Workspace) {
        match &cx.cfg.moe {
            Some(moe) => forward(cx, self, moe, n, ws, false),
            None => unreachable!("routed layers are bound only with a MoE config"),
        }
    }

    /// The experts only where each expert is a whole number of tile groups (so it stays a
    /// row range), and the shared expert. The router stays as stored (it is f32 in practice,
    /// and read in f32).
    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let Some(moe) = &cfg.moe else {
            return Vec::new();
        };
        let tile = ridge_kernels::packed::TILE_ROWS;
        let mut v = Vec::new();
        if moe.expert_ffn.is_multiple_of(tile) {
            v.push(&mut self.gate);
            v.push(&mut self.up);
        }
        if cfg.d_model.is_multiple_of(tile) {
            v.push(&mut self.down);
        }
        if let Some(s) = &mut self.shared {
            v.extend([&mut s.gate, &mut s.up, &mut s.down]);
        }
        v
    }

    /// The router, the shared expert, and `k` of the `E` experts.
    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize {
        let Some(moe) = &cx.cfg.moe else {
            return 0;
        };
        let experts = [self.gate, self.up, self.down]
            .iter()
            .map(|x| cx.mat(x).data.len())
            .sum::<usize>();
        let shared = self.shared.as_ref().map_or(0, |s| {
            [s.gate, s.up, s.down]
                .iter()
                .map(|x| cx.mat(x).data.len())
                .sum::<usize>()
                + 4 * s.gate_inp.as_ref().map_or(0, Vec::len)
        });
        let biases = self.biases.as_ref().map_or(0, |b| {
            4 * (b.gate.len() + b.up.len() + b.down.len()) / moe.n_expert * moe.n_used
        }) + 4 * self.router_bias.as_ref().map_or(0, Vec::len)
            + 4 * self.selection_bias.as_ref().map_or(0, Vec::len)
            + 4 * self.down_scale.as_ref().map_or(0, |_| moe.n_used);
        cx.mat(&self.router).data.len() + shared + experts / moe.n_expert * moe.n_used + biases
    }

    /// Its gate, up and down slices, as the products read them, and its biases where the
    /// file has them.
    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize {
        let Some(moe) = &cx.cfg.moe else {
            return 0;
        };
        let biases = self
            .biases
            .as_ref()
            .map_or(0, |b| 4 * (b.gate.len() + b.up.len() + b.down.len()));
        ([self.gate, self.up, self.down]
            .iter()
            .map(|m| cx.mat(m).data.len())
            .sum::<usize>()
            + biases)
            / moe.n_expert
    }
}

/// The routed feed-forward of the `n` normed rows in `ws.xn`; leaves its output in `ws.xn`.
/// The router reads `ws.xn` too, or `ws.router_in` where `own_router_input`.
///
/// Each chosen expert's tokens are one block of input rows: the normed rows themselves where
/// its tokens are consecutive, else its pairs' rows gathered in expert order; then one parallel
/// loop runs every chosen expert's gate and
/// up products, one its down products ([`matmul_each`]: the threads meet twice per layer,
/// not twice per expert), and the weighted outputs are summed back per token.
fn forward(
    cx: &LayerCtx<'_>,
    e: &Experts,
    moe: &MoeConfig,
    n: usize,
    ws: &mut Workspace,
    own_router_input: bool,
) {
    let d = cx.cfg.d_model;
    let ff = moe.expert_ffn;
    let s = &mut ws.moe;
    let router_x = match own_router_input {
        true => &ws.router_in[..n * d],
        false => &ws.xn[..n * d],
    };
    route(cx, e, moe, router_x, n, s, &mut ws.mm);
    let pairs = s.pairs.len();
    fit(&mut s.gate, pairs * ff);
    fit(&mut s.up, pairs * ff);
    fit(&mut s.y, pairs * d);
    let (gate_all, up_all, down_all) = (cx.mat(&e.gate), cx.mat(&e.up), cx.mat(&e.down));
    // The experts some token chose: (expert, first pair, pairs, whether their tokens are
    // consecutive). Consecutive tokens' products read the normed rows in place (always at one
    // token), so experts and products sharing them quantize them once; the others' rows are
    // gathered into expert order.
    let experts: Vec<(usize, usize, usize, bool)> = (0..moe.n_expert)
        .filter(|&x| s.start[x + 1] > s.start[x])
        .map(|x| {
            let (p0, rows) = (s.start[x], s.start[x + 1] - s.start[x]);
            let t0 = s.pairs[p0].0 as usize;
            let run = (0..rows).all(|j| s.pairs[p0 + j].0 as usize == t0 + j);
            (x, p0, rows, run)
        })
        .collect();
    fit(&mut s.x, pairs * d);
    for &(_, p0, rows, _) in experts.iter().filter(|&&(.., run)| !run) {
        for i in p0..p0 + rows {
            let t = s.pairs[i].0 as usize;
            s.x[i * d..(i + 1) * d].copy_from_slice(&ws.xn[t * d..(t + 1) * d]);
        }
    }
    {
        let mut items = Vec::with_capacity(2 * experts.len());
        let (mut gate, mut up) = (&mut s.gate[..], &mut s.up[..]);
        for &(x, p0, rows, run) in &experts {
            let (g, rest_g) = std::mem::take(&mut gate).split_at_mut(rows * ff);
            let (u, rest_u) = std::mem::take(&mut up).split_at_mut(rows * ff);
            (gate, up) = (rest_g, rest_u);
            let t0 = s.pairs[p0].0 as usize;
            let xs = match run {
                true => &ws.xn[t0 * d..(t0 + rows) * d],
                false => &s.x[p0 * d..(p0 + rows) * d],
            };
            items.push((expert(&gate_all, x, ff), xs, rows, g));
            items.push((expert(&up_all, x, ff), xs, rows, u));
        }
        matmul_each(cx.isa, cx.act.gate_up, &mut items, &mut ws.mm);
    }
    if let Some(b) = &e.biases {
        for &(x, p0, rows, _) in &experts {
            for (g, u) in s.gate[p0 * ff..(p0 + rows) * ff]
                .chunks_exact_mut(ff)
                .zip(s.up[p0 * ff..(p0 + rows) * ff].chunks_exact_mut(ff))
            {
                ops::add_inplace(g, &b.gate[x * ff..(x + 1) * ff]);
                ops::add_inplace(u, &b.up[x * ff..(x + 1) * ff]);
            }
        }
    }
    match moe.act {
        ExpertAct::Silu => ops::silu_mul(cx.isa, &mut s.gate, &s.up),
        ExpertAct::SwigluOai => swiglu_oai(&mut s.gate[..pairs * ff], &s.up[..pairs * ff]),
        ExpertAct::GeluTanh => ops::gelu_tanh_mul(cx.isa, &mut s.gate, &s.up),
    }
    {
        let mut items = Vec::with_capacity(experts.len());
        let mut y = &mut s.y[..];
        for &(x, p0, rows, _) in &experts {
            let (yx, rest) = std::mem::take(&mut y).split_at_mut(rows * d);
            y = rest;
            let act = &s.gate[p0 * ff..(p0 + rows) * ff];
            items.push((expert(&down_all, x, d), act, rows, yx));
        }
        matmul_each(cx.isa, cx.act.down, &mut items, &mut ws.mm);
    }
    if let Some(b) = &e.biases {
        for &(x, p0, rows, _) in &experts {
            for y in s.y[p0 * d..(p0 + rows) * d].chunks_exact_mut(d) {
                ops::add_inplace(y, &b.down[x * d..(x + 1) * d]);
            }
        }
    }
    if let Some(sc) = &e.down_scale {
        for &(x, p0, rows, _) in &experts {
            ops::scale_inplace(&mut s.y[p0 * d..(p0 + rows) * d], sc[x]);
        }
    }
    fit(&mut s.out, n * d);
    s.out.iter_mut().for_each(|v| *v = 0.0);
    for (i, &(t, w)) in s.pairs.iter().enumerate() {
        let t = t as usize;
        let (out, y) = (&mut s.out[t * d..(t + 1) * d], &s.y[i * d..(i + 1) * d]);
        for (o, &v) in out.iter_mut().zip(y) {
            *o += w * v;
        }
    }
    if let Some(sh) = &e.shared {
        shared_expert(cx, sh, n, ws);
    }
    let s = &mut ws.moe;
    ws.xn[..n * d].copy_from_slice(&s.out[..n * d]);
}

/// Expert `x`'s `rows`-row block of a stacked expert matrix.
fn expert<'a>(w: &WeightMatrix<'a>, x: usize, rows: usize) -> WeightMatrix<'a> {
    w.row_range(x * rows, rows)
        .expect("an expert's rows lie within its stacked tensor (bound so, tiled only whole)")
}

/// Group-limited routing (DeepSeek-V3, as llama.cpp's `build_moe_ffn` does it): the experts
/// of `scores` in `groups` equal groups, each group scored by the sum of its two highest
/// scores, and every expert outside the `used` best groups (the lower index among ties) set
/// to −∞ so the top-k cannot pick it.
fn close_groups(scores: &mut [f32], groups: usize, used: usize) {
    let per = scores.len() / groups;
    let mut by_group: Vec<(usize, f32)> = scores
        .chunks_exact(per)
        .map(|g| {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for &v in g {
                if v > a {
                    (a, b) = (v, a);
                } else if v > b {
                    b = v;
                }
            }
            a + b
        })
        .enumerate()
        .collect();
    // Stable: equal scores keep the lower group first.
    by_group.sort_by(|x, y| y.1.total_cmp(&x.1));
    for &(g, _) in &by_group[used.min(groups)..] {
        scores[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
    }
}

/// Router logits → softmax → top-k per token, then the pairs grouped by expert.
fn route(
    cx: &LayerCtx<'_>,
    e: &Experts,
    moe: &MoeConfig,
    xn: &[f32],
    n: usize,
    s: &mut MoeScratch,
    mm: &mut ridge_kernels::MatmulScratch,
) {
    let (ne, k) = (moe.n_expert, moe.n_used);
    fit(&mut s.probs, n * ne);
    let router = cx.mat(&e.router);
    matmul(cx.isa, ActPrecision::F32, &router, xn, n, &mut s.probs, mm);
    s.chosen.clear();
    let select = &mut s.select;
    for row in s.probs.chunks_exact_mut(ne) {
        if let Some(b) = &e.router_bias {
            ops::add_inplace(row, b);
        }
        match moe.gating {
            Gating::Softmax => ops::softmax_inplace(row),
            Gating::Sigmoid => row.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
            Gating::SoftmaxTopK => {}
        }
        // What the choice ranks: the scores themselves, or (copied, so that the weights stay
        // the scores) plus the selection bias and only in the open groups where routing is
        // group-limited.
        let ranked: &[f32] = if e.selection_bias.is_some() || moe.groups.is_some() {
            select.clear();
            match &e.selection_bias {
                Some(b) => select.extend(row.iter().zip(b).map(|(p, b)| p + b)),
                None => select.extend_from_slice(row),
            }
            if let Some((groups, used)) = moe.groups {
                close_groups(select, groups, used);
            }
            select
        } else {
            row
        };
        let first = s.chosen.len();
        for _ in 0..k {
            // The largest score not yet taken (the lowest index among ties).
            let mut best: Option<(usize, f32)> = None;
            for (j, &p) in ranked.iter().enumerate() {
                let taken = s.chosen[first..].iter().any(|&(c, _)| c as usize == j);
                if !taken && best.is_none_or(|(_, b)| p > b) {
                    best = Some((j, p));
                }
            }
            let j = best.map_or(0, |(j, _)| j);
            s.chosen.push((j as u32, row[j]));
        }
        let picked = &mut s.chosen[first..];
        if moe.gating == Gating::SoftmaxTopK {
            // The k chosen logits' softmax (they are in descending order: the first is the
            // maximum).
            let top = picked[0].1;
            picked.iter_mut().for_each(|(_, p)| *p = (*p - top).exp());
            let sum: f32 = picked.iter().map(|&(_, p)| p).sum();
            picked.iter_mut().for_each(|(_, p)| *p /= sum);
        }
        if moe.norm_topk {
            let sum = picked
                .iter()
                .map(|&(_, p)| p)
                .sum::<f32>()
                .max(MIN_WEIGHT_SUM);
            picked.iter_mut().for_each(|(_, p)| *p /= sum);
        }
        if moe.weights_scale != 1.0 {
            picked.iter_mut().for_each(|(_, p)| *p *= moe.weights_scale);
        }
    }
    s.start.clear();
    s.start.resize(ne + 1, 0);
    for &(x, _) in &s.chosen {
        s.start[x as usize + 1] += 1;
    }
    for x in 0..ne {
        s.start[x + 1] += s.start[x];
    }
    s.pairs.clear();
    s.pairs.resize(n * k, (0, 0.0));
    let mut next = s.start.clone();
    for (i, &(x, w)) in s.chosen.iter().enumerate() {
        let slot = &mut next[x as usize];
        s.pairs[*slot] = ((i / k) as u32, w);
        *slot += 1;
    }
}

/// `out += sigmoid(x · gate_inp) · FFN_shared(x)` for every token (without the gate where the
/// expert has none).
fn shared_expert(cx: &LayerCtx<'_>, sh: &SharedExpert, n: usize, ws: &mut Workspace) {
    let d = cx.cfg.d_model;
    let s = &mut ws.moe;
    let sf = sh.gate.rows;
    fit(&mut s.gate, n * sf);
    fit(&mut s.up, n * sf);
    fit(&mut s.y, n * d);
    let mut ys = [
        (cx.mat(&sh.gate), &mut s.gate[..]),
        (cx.mat(&sh.up), &mut s.up[..]),
    ];
    matmul_many(
        cx.isa,
        cx.act.gate_up,
        &mut ys,
        &ws.xn[..n * d],
        n,
        &mut ws.mm,
    );
    ops::silu_mul(cx.isa, &mut s.gate, &s.up);
    matmul(
        cx.isa,
        cx.act.down,
        &cx.mat(&sh.down),
        &s.gate,
        n,
        &mut s.y,
        &mut ws.mm,
    );
    for t in 0..n {
        let x = &ws.xn[t * d..(t + 1) * d];
        let g = sh.gate_inp.as_ref().map_or(1.0, |gi| {
            let logit: f32 = x.iter().zip(gi).map(|(a, b)| a * b).sum();
            1.0 / (1.0 + (-logit).exp())
        });
        let (out, y) = (&mut s.out[t * d..(t + 1) * d], &s.y[t * d..(t + 1) * d]);
        for (o, &v) in out.iter_mut().zip(y) {
            *o += g * v;
        }
    }
}

/// gpt-oss's clamped SwiGLU in place: `g ← min(g, 7) · σ(1.702 · min(g, 7)) · (clamp(u, −7, 7) + 1)`.
fn swiglu_oai(gate: &mut [f32], up: &[f32]) {
    const ALPHA: f32 = 1.702;
    const LIMIT: f32 = 7.0;
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(LIMIT);
        let y = u.clamp(-LIMIT, LIMIT);
        *g = x / (1.0 + (-ALPHA * x).exp()) * (y + 1.0);
    }
}
