//! The pieces of a transformer layer that every architecture shares: its weights ([`Layer`])
//! and the steps of its forward pass ([`LayerCtx`]'s methods), each one operation an
//! architecture's layer loop names in the order its math applies them.
//!
//! Why a module of its own: the architectures (`llama.rs`, `gemma3.rs`) and the routed
//! feed-forward (`moe.rs`) are built from these steps, and `model.rs` picks an architecture
//! and runs it, so the steps must sit below both. Here they depend on neither: a step reads
//! only a [`LayerCtx`] — the kernel path, the configuration, the activation plan and where
//! each bound matrix's bytes are — which `Model` lends for one forward pass, and a routed
//! feed-forward is reached through the [`RoutedFfn`] trait that `moe.rs` implements. The
//! imports then run one way — `model.rs` → `llama.rs`, `gemma3.rs`, `moe.rs` → this module —
//! and adding an architecture adds a file without touching the shared steps.
//!
//! What an architecture has beyond these weights (Gemma 3's sandwich norms, a mixture's
//! experts) it binds and keeps in its own file.

use ridge_gguf::GgufFile;
use ridge_kernels::attention::AttnShape;
use ridge_kernels::pool;
use ridge_kernels::{
    matmul, matmul_many, ops, ActPrecision, Isa, MatmulScratch, PackedMatrix, WeightMatrix,
};

use crate::attend::LayerAttention;
use crate::config::{Architecture, ModelConfig, MoeConfig};
use crate::weights::{matrix, matrix_parts, vector, MatRef};
use crate::{ActPolicy, Batch, KvCache, ModelError, Workspace};

/// The weights every architecture's layer has.
pub(crate) struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: MatRef,
    pub wk: MatRef,
    pub wv: MatRef,
    pub wo: MatRef,
    pub ffn_norm: Vec<f32>,
    /// The feed-forward: dense, or routed over experts.
    pub ffn: Ffn,
    /// Biases added to the Q, K and V projections (qwen2; `None` where the file has none).
    pub qkv_bias: Option<QkvBias>,
    /// Per-head RMSNorm weights for queries and keys, applied before RoPE (gemma3, qwen3).
    pub qk_norm: Option<QkNorm>,
    /// Bias added to the attention output projection (gpt-oss; `None` where the file has
    /// none).
    pub o_bias: Option<Vec<f32>>,
    /// One learnt sink logit per query head (gpt-oss's `attn_sinks`).
    pub sinks: Option<Vec<f32>>,
}

/// A layer's feed-forward, chosen at bind time: every architecture's loop calls
/// [`LayerCtx::ffn`], which runs either kind.
pub(crate) enum Ffn {
    /// `down(act(gate · x) ⊙ (up · x))`.
    Dense {
        gate: MatRef,
        up: MatRef,
        down: MatRef,
    },
    /// A mixture of experts (`moe.rs`).
    Routed(Box<dyn RoutedFfn>),
}

impl Ffn {
    /// Binds layer `i`'s feed-forward: dense (`ffn_gate`, `ffn_up`, `ffn_down`), or, where the
    /// configuration has a mixture of experts, what `routed` binds.
    pub(crate) fn bind(
        f: &GgufFile,
        cfg: &ModelConfig,
        i: usize,
        routed: impl FnOnce(&MoeConfig) -> Result<Box<dyn RoutedFfn>, ModelError>,
    ) -> Result<Self, ModelError> {
        let (d, ffn) = (cfg.d_model, cfg.ffn_dim);
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        Ok(match &cfg.moe {
            // The leading dense layers of GLM-4.5 / DeepSeek are dense (of `ffn_dim`).
            Some(moe) if i >= moe.dense_lead => Ffn::Routed(routed(moe)?),
            // Phi-3 stores gate and up as one matrix, the gate's rows first.
            _ if !f.has_tensor(&n("ffn_gate")) && f.has_tensor(&n("ffn_up")) => {
                let [gate, up] = matrix_parts(f, &n("ffn_up"), [ffn, ffn], d)?;
                Ffn::Dense {
                    gate,
                    up,
                    down: matrix(f, &n("ffn_down"), d, ffn)?,
                }
            }
            _ => Ffn::Dense {
                gate: matrix(f, &n("ffn_gate"), ffn, d)?,
                up: matrix(f, &n("ffn_up"), ffn, d)?,
                down: matrix(f, &n("ffn_down"), d, ffn)?,
            },
        })
    }

    /// The matrices that may be packed into tiles or re-encoded.
    pub(crate) fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        match self {
            Ffn::Dense { gate, up, down } => vec![gate, up, down],
            Ffn::Routed(e) => e.matrices_mut(cfg),
        }
    }
}

/// A routed (mixture-of-experts) feed-forward's weights, as the shared steps and `model.rs`
/// use them. `moe.rs` implements it; the trait is what lets [`Ffn`] hold experts without this
/// module importing the file that defines them.
pub(crate) trait RoutedFfn: Send + Sync {
    /// The feed-forward of the `n` normed rows in `ws.xn`; leaves its output in `ws.xn`.
    fn forward(&self, cx: &LayerCtx<'_>, n: usize, ws: &mut Workspace);

    /// The matrices that may be packed into tiles or re-encoded.
    fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef>;

    /// Bytes one token's step reads.
    fn bytes_per_token(&self, cx: &LayerCtx<'_>) -> usize;

    /// Bytes of one expert (its products' weights and biases).
    fn expert_bytes(&self, cx: &LayerCtx<'_>) -> usize;
}

/// The activation of a dense feed-forward's gate.
#[derive(Clone, Copy)]
pub(crate) enum GateAct {
    /// SwiGLU (llama, qwen, every routed expert).
    Silu,
    /// GeGLU with the tanh approximation (gemma3).
    GeluTanh,
}

/// The per-head RMSNorm weights of a layer's queries and keys (one head wide each; the whole
/// query / key width for OLMoE).
pub(crate) struct QkNorm {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
}

impl QkNorm {
    /// Binds layer `i`'s `attn_q_norm` and `attn_k_norm` where the architecture has them.
    fn bind(f: &GgufFile, cfg: &ModelConfig, i: usize) -> Result<Option<Self>, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let optional = cfg.arch.qk_norm_optional() && f.has_tensor(&n("attn_q_norm"));
        if !cfg.arch.has_qk_norm() && !optional {
            return Ok(None);
        }
        let (q, k) = if cfg.arch.qk_norm_full_width() {
            (cfg.q_dim(), cfg.kv_dim())
        } else {
            (cfg.head_dim, cfg.head_dim)
        };
        Ok(Some(QkNorm {
            q: vector(f, &n("attn_q_norm"), q)?,
            k: vector(f, &n("attn_k_norm"), k)?,
        }))
    }

    /// Bytes read per decode step (f32).
    pub(crate) fn bytes(&self) -> usize {
        4 * (self.q.len() + self.k.len())
    }
}

/// The biases of a layer's Q, K and V projections.
pub(crate) struct QkvBias {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl QkvBias {
    /// Binds layer `i`'s Q/K/V biases: all three or none (qwen2 requires them; other
    /// architectures take them where a file has them, as llama.cpp does).
    fn bind(f: &GgufFile, cfg: &ModelConfig, i: usize) -> Result<Option<Self>, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}.bias");
        // A fused projection's bias is one vector, Q's part first.
        let fused = n("attn_qkv");
        if f.has_tensor(&fused) {
            let (q, kv) = (cfg.q_dim(), cfg.kv_dim());
            let all = vector(f, &fused, q + 2 * kv)?;
            return Ok(Some(QkvBias {
                q: all[..q].to_vec(),
                k: all[q..q + kv].to_vec(),
                v: all[q + kv..].to_vec(),
            }));
        }
        let names = [n("attn_q"), n("attn_k"), n("attn_v")];
        if !cfg.arch.requires_qkv_bias() && !names.iter().any(|t| f.has_tensor(t)) {
            return Ok(None);
        }
        Ok(Some(QkvBias {
            q: vector(f, &names[0], cfg.q_dim())?,
            k: vector(f, &names[1], cfg.kv_dim())?,
            v: vector(f, &names[2], cfg.kv_dim())?,
        }))
    }

    /// Bytes read per decode step (f32).
    pub(crate) fn bytes(&self) -> usize {
        4 * (self.q.len() + self.k.len() + self.v.len())
    }
}

impl Layer {
    /// Binds layer `i` (types and shapes checked, tensors in the order the file is checked
    /// in: attention, FFN norm, feed-forward, biases and norms). A dense feed-forward is bound
    /// here; where the configuration has a mixture of experts, `routed` binds it (the caller
    /// knows the architecture file that owns experts).
    pub(crate) fn bind(
        f: &GgufFile,
        cfg: &ModelConfig,
        i: usize,
        routed: impl FnOnce(&MoeConfig) -> Result<Box<dyn RoutedFfn>, ModelError>,
    ) -> Result<Self, ModelError> {
        let (d, q, kv) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim());
        let gpt_oss = cfg.arch == Architecture::GptOss;
        // gpt-oss and GLM-4.5 name their pre-FFN norm after the attention it follows.
        let ffn_norm = cfg.arch.ffn_norm_name();
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let o_bias = format!("blk.{i}.attn_output.bias");
        // Q, K and V as one matrix (Phi-3, and any file llama.cpp's loader would fuse them
        // in): three row ranges of it, bound as three matrices.
        let [wq, wk, wv] = if f.has_tensor(&n("attn_qkv")) && !f.has_tensor(&n("attn_q")) {
            matrix_parts(f, &n("attn_qkv"), [q, kv, kv], d)?
        } else {
            [
                matrix(f, &n("attn_q"), q, d)?,
                matrix(f, &n("attn_k"), kv, d)?,
                matrix(f, &n("attn_v"), kv, d)?,
            ]
        };
        Ok(Layer {
            attn_norm: vector(f, &n("attn_norm"), d)?,
            wq,
            wk,
            wv,
            wo: matrix(f, &n("attn_output"), d, q)?,
            ffn_norm: vector(f, &n(ffn_norm), d)?,
            ffn: Ffn::bind(f, cfg, i, routed)?,
            qkv_bias: QkvBias::bind(f, cfg, i)?,
            qk_norm: QkNorm::bind(f, cfg, i)?,
            o_bias: if gpt_oss || f.has_tensor(&o_bias) {
                Some(vector(f, &o_bias, d)?)
            } else {
                None
            },
            sinks: if gpt_oss {
                Some(vector(f, &n("attn_sinks"), cfg.n_heads)?)
            } else {
                None
            },
        })
    }

    /// The layer's matrices that may be packed into tiles or re-encoded (see
    /// [`RoutedFfn::matrices_mut`] for a routed feed-forward's).
    pub(crate) fn matrices_mut(&mut self, cfg: &ModelConfig) -> Vec<&mut MatRef> {
        let mut v = vec![&mut self.wq, &mut self.wk, &mut self.wv, &mut self.wo];
        v.extend(self.ffn.matrices_mut(cfg));
        v
    }
}

/// Per-matrix activation precision resolved from an [`ActPolicy`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActPlan {
    pub qkv: ActPrecision,
    pub o: ActPrecision,
    pub gate_up: ActPrecision,
    pub down: ActPrecision,
    pub head: ActPrecision,
}

impl ActPlan {
    /// The plan `policy` gives architecture `arch`.
    pub(crate) fn new(policy: ActPolicy, arch: Architecture) -> Self {
        use ActPrecision::{Int16, Int8, F32};
        let all = |p| ActPlan {
            qkv: p,
            o: p,
            gate_up: p,
            down: p,
            head: p,
        };
        match policy {
            ActPolicy::F32 => all(F32),
            ActPolicy::Int8 => all(Int8),
            // Measured in act_policy.rs: on both Qwen2.5 models 8-bit blocks everywhere are as
            // close to the exact perplexity as 16-bit ones, and prefill is ~25% faster.
            ActPolicy::Mixed if arch == Architecture::Qwen2 => all(Int8),
            // Measured in act_policy.rs: both projections whose inputs 8-bit blocks round worst,
            // 16-bit blocks where the format has a 16-bit path, f32 otherwise (gemma3's Q6_K).
            ActPolicy::Mixed => ActPlan {
                o: Int16,
                down: Int16,
                ..all(Int8)
            },
        }
    }
}

/// Which RoPE table a layer uses: the global base, or the sliding-window layers' base.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RopeTable {
    Global,
    Swa,
}

/// What a layer's steps read beside the layer's own weights, lent by `Model` for one forward
/// pass: the kernel path, the configuration, the activation plan, and the bytes behind every
/// bound matrix (the mapped file, and the tiled copies made at load).
#[derive(Clone, Copy)]
pub(crate) struct LayerCtx<'a> {
    pub isa: Isa,
    pub cfg: &'a ModelConfig,
    pub act: ActPlan,
    /// The mapped file's bytes, which untiled [`MatRef`]s index.
    pub bytes: &'a [u8],
    /// The tiled copies a [`MatRef::tiles`] points into.
    pub tiles: &'a [PackedMatrix],
}

impl<'a> LayerCtx<'a> {
    /// A bound matrix as the products take it: its tiled copy if it has one, else its bytes in
    /// the file.
    #[inline]
    pub(crate) fn mat(&self, m: &MatRef) -> WeightMatrix<'a> {
        match m.tiles {
            Some(i) => self.tiles[i].view(),
            None => m.view(self.bytes),
        }
    }

    /// `y = x · Wᵀ` for the `n` rows of `x`.
    #[inline]
    pub(crate) fn mm(
        &self,
        precision: ActPrecision,
        w: &MatRef,
        x: &[f32],
        n: usize,
        y: &mut [f32],
        scratch: &mut MatmulScratch,
    ) {
        matmul(self.isa, precision, &self.mat(w), x, n, y, scratch);
    }

    /// `q, k, v = xn · Wq/Wk/Wvᵀ` (+ the layer's biases, if it has them).
    pub(crate) fn qkv(&self, l: &Layer, n: usize, ws: &mut Workspace) {
        let mut ys = [
            (self.mat(&l.wq), &mut ws.q[..]),
            (self.mat(&l.wk), &mut ws.k[..]),
            (self.mat(&l.wv), &mut ws.v[..]),
        ];
        matmul_many(self.isa, self.act.qkv, &mut ys, &ws.xn, n, &mut ws.mm);
        if let Some(b) = &l.qkv_bias {
            for (y, bias) in [(&mut ws.q, &b.q), (&mut ws.k, &b.k), (&mut ws.v, &b.v)] {
                for row in y[..n * bias.len()].chunks_exact_mut(bias.len()) {
                    ops::add_inplace(row, bias);
                }
            }
        }
    }

    /// The attention output projection of the `n` rows of `ws.att` into `ws.xn` (+ its bias,
    /// where the layer has one).
    pub(crate) fn attn_out(&self, l: &Layer, n: usize, ws: &mut Workspace) {
        self.mm(self.act.o, &l.wo, &ws.att, n, &mut ws.xn, &mut ws.mm);
        if let Some(b) = &l.o_bias {
            for row in ws.xn[..n * b.len()].chunks_exact_mut(b.len()) {
                ops::add_inplace(row, b);
            }
        }
    }

    /// Layer `li`'s RoPE table and attention window: the sliding-window ones where the
    /// layer is windowed (Gemma 3's local layers, gpt-oss's even ones), else the global.
    pub(crate) fn window_of(&self, li: usize) -> (RopeTable, Option<usize>) {
        if self.cfg.is_sliding(li) {
            (RopeTable::Swa, self.cfg.sliding_window)
        } else {
            (RopeTable::Global, None)
        }
    }

    /// Per-head RMSNorm of `ws.q` and `ws.k` (the first `n` tokens), where the layer has one.
    pub(crate) fn qk_norm(&self, l: &Layer, n: usize, ws: &mut Workspace) {
        if let Some(qk) = &l.qk_norm {
            let eps = self.cfg.norm_eps;
            let (qd, kvd) = (self.cfg.q_dim(), self.cfg.kv_dim());
            ops::rms_norm_rows_inplace(self.isa, &mut ws.q[..n * qd], &qk.q, eps);
            ops::rms_norm_rows_inplace(self.isa, &mut ws.k[..n * kvd], &qk.k, eps);
        }
    }

    /// The layer's feed-forward of the `n` normed rows in `ws.xn`, leaving its output in
    /// `ws.xn`: dense (`act` on the gate) or routed over experts (SwiGLU experts).
    pub(crate) fn ffn(&self, ffn: &Ffn, n: usize, ws: &mut Workspace, act: GateAct) {
        match ffn {
            Ffn::Dense { gate, up, down } => {
                let mut ys = [
                    (self.mat(gate), &mut ws.gate[..]),
                    (self.mat(up), &mut ws.up[..]),
                ];
                matmul_many(self.isa, self.act.gate_up, &mut ys, &ws.xn, n, &mut ws.mm);
                match act {
                    GateAct::Silu => ops::silu_mul(self.isa, &mut ws.gate, &ws.up),
                    GateAct::GeluTanh => ops::gelu_tanh_mul(self.isa, &mut ws.gate, &ws.up),
                }
                matmul(
                    self.isa,
                    self.act.down,
                    &self.mat(down),
                    &ws.gate,
                    n,
                    &mut ws.xn,
                    &mut ws.mm,
                );
            }
            Ffn::Routed(e) => e.forward(self, n, ws),
        }
    }

    /// Rotates every query head of `ws.q` by its token's position (`neox`: halves layout,
    /// else adjacent pairs), where layer `li` rotates at all: on its own, the step of a layer
    /// that reads another layer's K/V (Gemma 4's last layers).
    pub(crate) fn rope_queries(
        &self,
        li: usize,
        batch: &Batch,
        ws: &mut Workspace,
        table: RopeTable,
        neox: bool,
    ) {
        // Granite 4.0-H's attention may have no positions at all (`use_rope`), SmolLM3's
        // every fourth layer none.
        if !self.cfg.rotates(li) {
            return;
        }
        let (qd, hd, half) = (self.cfg.q_dim(), self.cfg.head_dim, self.cfg.rope_dim / 2);
        let (cos, sin) = match table {
            RopeTable::Global => (&ws.cos, &ws.sin),
            RopeTable::Swa => (&ws.cos_swa, &ws.sin_swa),
        };
        for t in 0..batch.len() {
            let (c, s) = (
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
            for h in ws.q[t * qd..(t + 1) * qd].chunks_exact_mut(hd) {
                ops::rope_apply(h, c, s, neox);
            }
        }
    }

    /// Rotates every head of `ws.q` and `ws.k` by its token's position (`neox`: halves
    /// layout, else adjacent pairs) and writes each token's K and V into its cache slot of
    /// layer `li`.
    pub(crate) fn rope_and_store(
        &self,
        li: usize,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        table: RopeTable,
        neox: bool,
    ) {
        self.rope_queries(li, batch, ws, table, neox);
        let (kvd, hd, half) = (self.cfg.kv_dim(), self.cfg.head_dim, self.cfg.rope_dim / 2);
        let rotates = self.cfg.rotates(li);
        let (cos, sin) = match table {
            RopeTable::Global => (&ws.cos, &ws.sin),
            RopeTable::Swa => (&ws.cos_swa, &ws.sin_swa),
        };
        for t in 0..batch.len() {
            if rotates {
                let (c, s) = (
                    &cos[t * half..(t + 1) * half],
                    &sin[t * half..(t + 1) * half],
                );
                for h in ws.k[t * kvd..(t + 1) * kvd].chunks_exact_mut(hd) {
                    ops::rope_apply(h, c, s, neox);
                }
            }
            let slot = kv.slot(
                &ws.tables[kv.group_of(li)][ws.table_of[t]],
                batch.positions[t],
            );
            kv.write(
                li,
                slot,
                &ws.k[t * kvd..(t + 1) * kvd],
                &ws.v[t * kvd..(t + 1) * kvd],
            );
        }
    }

    /// Llama 4's attention temperature (Mistral 3): each token's query heads in `ws.q`
    /// multiplied by the factor of its position, after RoPE; nothing where the model has none.
    pub(crate) fn attn_temperature(&self, batch: &Batch, ws: &mut Workspace) {
        if let Some(t) = &self.cfg.attn_temp {
            let qd = self.cfg.q_dim();
            for (row, &pos) in ws.q.chunks_exact_mut(qd).zip(&batch.positions) {
                ops::scale_inplace(row, t.factor(pos));
            }
        }
    }

    /// Causal attention of every token of the batch over its sequence in layer `li` (with
    /// the layer's learnt sink logits, where it has them), into `ws.att`. With a `window`, a token at position
    /// `p` sees only positions `p − window + 1 ..= p` (older slots stay in the cache but are
    /// not read).
    pub(crate) fn attention(
        &self,
        li: usize,
        sinks: Option<&[f32]>,
        batch: &Batch,
        kv: &KvCache,
        ws: &mut Workspace,
        window: Option<usize>,
    ) {
        let layer = LayerAttention {
            isa: self.isa,
            cfg: self.cfg,
            shape: self.attn_shape(),
            kv: kv.layer(li),
            group: kv.group_of(li),
            window,
            sinks,
        };
        // Whole KV groups per task (each K/V row read once per group) when the batch has
        // enough of them to keep every thread busy (prefill, batched decode).
        if batch.len() * self.cfg.n_kv_heads >= 2 * pool::threads() {
            layer.by_groups(batch, ws);
        } else {
            layer.by_chunks(batch, ws);
        }
    }

    /// The attention shape of every layer.
    fn attn_shape(&self) -> AttnShape {
        AttnShape {
            n_heads: self.cfg.n_heads,
            n_kv_heads: self.cfg.n_kv_heads,
            head_dim: self.cfg.head_dim,
            scale: self.cfg.attn_scale,
        }
    }
}

/// Makes the tiled copies of every layer matrix and of the output head where the format has a
/// tile layout, pointing each one's [`MatRef::tiles`] at its copy, and releases the file
/// pages the copies replace, so resident memory stays about the file's size. (A head tied to
/// the embeddings keeps its file bytes for the embedding lookups, which fault back in only
/// the rows of the tokens they read.)
pub(crate) fn tile_matrices(
    f: &GgufFile,
    layers: Vec<&mut MatRef>,
    output: &mut MatRef,
    isa: Isa,
) -> Vec<PackedMatrix> {
    let mut tiles = Vec::new();
    let mut one = |m: &mut MatRef| {
        if m.tiles.is_some() || !ridge_kernels::packed::tiles_pay_on(m.dtype, isa) {
            return;
        }
        let rb = m.dtype.row_bytes(m.cols);
        let off = m.offset;
        let packed = PackedMatrix::pack_with(&m.view(f.bytes()), |r0, r1| {
            f.release(off + r0 * rb, (r1 - r0) * rb)
        });
        if let Some(p) = packed {
            m.tiles = Some(tiles.len());
            tiles.push(p);
        }
    };
    one(output);
    for m in layers {
        one(m);
    }
    tiles
}
