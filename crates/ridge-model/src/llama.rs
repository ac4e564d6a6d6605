//! The llama architecture (Llama 2/3, Mistral-style, SmolLM2): pre-norm transformer with
//! RMSNorm, rotary position embeddings (adjacent-pair layout, as the GGUF converter permutes
//! Q/K for llama), grouped-query attention and a SwiGLU feed-forward; the output head is
//! `output.weight` or, when absent, the tied embedding table.
//!
//! `forward` reads top to bottom like the math; every heavy loop is a kernel call.

use std::path::Path;
use std::sync::Arc;

use ridge_gguf::GgufFile;
use ridge_kernels::attention::{attend_group, AttnShape};
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::{blocks, matmul, ops, ActPrecision, Isa};

use crate::config::ModelConfig;
use crate::weights::{matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{ActPolicy, Batch, KvCache, ModelError, Workspace};

struct Layer {
    attn_norm: Vec<f32>,
    wq: MatRef,
    wk: MatRef,
    wv: MatRef,
    wo: MatRef,
    ffn_norm: Vec<f32>,
    w_gate: MatRef,
    w_up: MatRef,
    w_down: MatRef,
}

/// A loaded model: configuration plus weights bound in place in the memory-mapped file.
pub struct Model {
    file: Arc<GgufFile>,
    cfg: ModelConfig,
    isa: Isa,
    embd: MatRef,
    output: MatRef,
    output_norm: Vec<f32>,
    layers: Vec<Layer>,
    act: ActPlan,
}

/// Per-matrix activation precision resolved from an [`ActPolicy`].
#[derive(Clone, Copy, Debug)]
struct ActPlan {
    qkv: ActPrecision,
    o: ActPrecision,
    gate_up: ActPrecision,
    down: ActPrecision,
    head: ActPrecision,
}

impl ActPlan {
    fn new(policy: ActPolicy) -> Self {
        use ActPrecision::{Int8, F32};
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
            ActPolicy::Mixed => ActPlan {
                o: F32,
                down: F32,
                ..all(Int8)
            },
        }
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("file", &self.file.path())
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Model {
    /// Opens a GGUF file and binds its weights. Kernel paths are chosen here, once.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let file = Arc::new(GgufFile::open(path)?);
        Self::from_gguf(file)
    }

    /// Binds the weights of an already opened file.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, ModelError> {
        let cfg = ModelConfig::from_gguf(&file)?;
        let f = &*file;
        let (d, q, kv, ffn) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let embd = matrix(f, "token_embd.weight", cfg.vocab, d)?;
        let output = if f.has_tensor("output.weight") {
            matrix(f, "output.weight", cfg.vocab, d)?
        } else {
            embd
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: vector(f, &n("attn_norm"), d)?,
                wq: matrix(f, &n("attn_q"), q, d)?,
                wk: matrix(f, &n("attn_k"), kv, d)?,
                wv: matrix(f, &n("attn_v"), kv, d)?,
                wo: matrix(f, &n("attn_output"), d, q)?,
                ffn_norm: vector(f, &n("ffn_norm"), d)?,
                w_gate: matrix(f, &n("ffn_gate"), ffn, d)?,
                w_up: matrix(f, &n("ffn_up"), ffn, d)?,
                w_down: matrix(f, &n("ffn_down"), d, ffn)?,
            });
        }
        let output_norm = vector(f, "output_norm.weight", d)?;
        Ok(Model {
            file,
            cfg,
            isa: Isa::detect(),
            embd,
            output,
            output_norm,
            layers,
            act: ActPlan::new(ActPolicy::default()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The underlying file (for the tokenizer and metadata).
    pub fn gguf(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// The kernel path in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Forces a kernel path (tests compare paths; `Isa::Scalar` is always valid).
    pub fn set_isa(&mut self, isa: Isa) {
        if isa == Isa::Scalar || isa == Isa::detect() {
            self.isa = isa;
        }
    }

    /// Chooses how activations meet quantized weights (see [`ActPolicy`]).
    pub fn set_act_policy(&mut self, policy: ActPolicy) {
        self.act = ActPlan::new(policy);
    }

    /// Bytes of weights read for one decode step: every layer matrix, the norms and the output
    /// head (the embedding table contributes one row per token, negligible).
    pub fn weight_bytes_per_token(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                [l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down]
                    .iter()
                    .map(MatRef::bytes)
                    .sum::<usize>()
                    + 8 * self.cfg.d_model
            })
            .sum();
        layers + self.output.bytes() + 4 * self.cfg.d_model
    }

    /// Checks the batch against the cache and reserves blocks. Returns, per token, the index of
    /// its sequence's block table in `ws.tables`.
    fn prepare(
        &self,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
    ) -> Result<(), ModelError> {
        let seq_of = &mut ws.seq_of;
        let n = batch.len();
        if batch.positions.len() != n || batch.seqs.len() != n || batch.logits.len() != n {
            return Err(ModelError::BadBatch("field lengths differ".into()));
        }
        seq_of.clear();
        for i in 0..n {
            let tok = batch.tokens[i];
            if tok as usize >= self.cfg.vocab {
                return Err(ModelError::BadToken {
                    id: tok,
                    vocab: self.cfg.vocab,
                });
            }
            let seq = batch.seqs[i];
            let next = match seq_of.iter_mut().find(|(s, _)| *s == seq) {
                Some(e) => &mut e.1,
                None => {
                    seq_of.push((seq, kv.seq_len(seq)));
                    &mut seq_of.last_mut().expect("just pushed").1
                }
            };
            if batch.positions[i] != *next {
                return Err(ModelError::BadBatch(format!(
                    "sequence {} expects position {}, got {}",
                    seq.0, next, batch.positions[i]
                )));
            }
            *next += 1;
            if *next > self.cfg.ctx_len {
                return Err(ModelError::ContextOverflow {
                    len: *next,
                    ctx: self.cfg.ctx_len,
                });
            }
        }
        for &(seq, len) in seq_of.iter() {
            kv.reserve(seq, len)?;
        }
        ws.tables.resize_with(seq_of.len(), Vec::new);
        for (t, &(seq, _)) in ws.tables.iter_mut().zip(seq_of.iter()) {
            t.clear();
            t.extend_from_slice(kv.block_table(seq));
        }
        ws.table_of.clear();
        let seq_of = &ws.seq_of;
        ws.table_of.extend(
            batch
                .seqs
                .iter()
                .map(|s| seq_of.iter().position(|(x, _)| x == s).unwrap_or(0)),
        );
        Ok(())
    }

    /// Runs one forward pass over `batch`, appending its tokens to their sequences in `kv`.
    /// Returns logits (`vocab` per row) for the tokens whose `logits` flag is set, in batch
    /// order.
    // Token index `t` addresses several parallel buffers at once; a range loop reads clearest.
    #[allow(clippy::needless_range_loop)]
    pub fn forward<'w>(
        &self,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], ModelError> {
        self.prepare(batch, kv, ws)?;
        let cfg = &self.cfg;
        let isa = self.isa;
        let bytes = self.file.bytes();
        let n = batch.len();
        let (d, qd, kvd, hd) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let half = cfg.rope_dim / 2;

        fit(&mut ws.x, n * d);
        fit(&mut ws.xn, n * d);
        fit(&mut ws.q, n * qd);
        fit(&mut ws.k, n * kvd);
        fit(&mut ws.v, n * kvd);
        fit(&mut ws.att, n * qd);
        fit(&mut ws.gate, n * cfg.ffn_dim);
        fit(&mut ws.up, n * cfg.ffn_dim);
        fit(&mut ws.cos, n * half);
        fit(&mut ws.sin, n * half);

        // Embeddings: one dequantized row per token.
        let embd = self.embd.view(bytes);
        for (t, &tok) in batch.tokens.iter().enumerate() {
            blocks::dequantize_row(
                embd.dtype,
                embd.row(tok as usize),
                &mut ws.x[t * d..(t + 1) * d],
            );
        }
        for (t, &pos) in batch.positions.iter().enumerate() {
            let r = t * half..(t + 1) * half;
            ops::rope_table(
                pos,
                cfg.rope_dim,
                cfg.rope_base,
                &mut ws.cos[r.clone()],
                &mut ws.sin[r],
            );
        }
        let shape = AttnShape {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };

        for (li, l) in self.layers.iter().enumerate() {
            // Attention block.
            ops::rms_norm_rows(&ws.x, &l.attn_norm, cfg.norm_eps, &mut ws.xn);
            matmul(
                isa,
                self.act.qkv,
                &l.wq.view(bytes),
                &ws.xn,
                n,
                &mut ws.q,
                &mut ws.mm,
            );
            matmul(
                isa,
                self.act.qkv,
                &l.wk.view(bytes),
                &ws.xn,
                n,
                &mut ws.k,
                &mut ws.mm,
            );
            matmul(
                isa,
                self.act.qkv,
                &l.wv.view(bytes),
                &ws.xn,
                n,
                &mut ws.v,
                &mut ws.mm,
            );
            for t in 0..n {
                let (c, s) = (
                    &ws.cos[t * half..(t + 1) * half],
                    &ws.sin[t * half..(t + 1) * half],
                );
                for h in ws.q[t * qd..(t + 1) * qd].chunks_exact_mut(hd) {
                    ops::rope_apply(h, c, s, false);
                }
                for h in ws.k[t * kvd..(t + 1) * kvd].chunks_exact_mut(hd) {
                    ops::rope_apply(h, c, s, false);
                }
                let slot = kv.slot(&ws.tables[ws.table_of[t]], batch.positions[t]);
                kv.write(
                    li,
                    slot,
                    &ws.k[t * kvd..(t + 1) * kvd],
                    &ws.v[t * kvd..(t + 1) * kvd],
                );
            }
            let layer_kv = kv.layer(li);
            let att = SharedMut(ws.att.as_mut_ptr());
            let (q, tables, table_of, positions) =
                (&ws.q, &ws.tables, &ws.table_of, &batch.positions);
            // Tasks of whole KV groups (each K/V row read once per group) when there are
            // enough of them to keep every thread busy, else of single heads (decode).
            let group = cfg.n_heads / cfg.n_kv_heads;
            let per_task = if n * cfg.n_kv_heads >= 2 * pool::threads() {
                group
            } else {
                1
            };
            let tasks_per_token = cfg.n_heads / per_task;
            pool::parallel_for(n * tasks_per_token, |i| {
                let (t, h0) = (i / tasks_per_token, (i % tasks_per_token) * per_task);
                let off = t * qd + h0 * hd;
                let w = per_task * hd;
                // SAFETY: task i alone writes att[off..off + w] (distinct (t, h0) give disjoint
                // ranges inside the n·qd buffer), and att outlives parallel_for.
                let out = unsafe { std::slice::from_raw_parts_mut(att.ptr().add(off), w) };
                let table = &tables[table_of[t]];
                let q = &q[off..off + w];
                let g = h0 / group;
                attend_group(
                    isa,
                    &layer_kv,
                    table,
                    0,
                    positions[t] + 1,
                    &shape,
                    g,
                    per_task,
                    q,
                    out,
                );
            });
            matmul(
                isa,
                self.act.o,
                &l.wo.view(bytes),
                &ws.att,
                n,
                &mut ws.xn,
                &mut ws.mm,
            );
            ops::add_inplace(&mut ws.x, &ws.xn);

            // Feed-forward block.
            ops::rms_norm_rows(&ws.x, &l.ffn_norm, cfg.norm_eps, &mut ws.xn);
            matmul(
                isa,
                self.act.gate_up,
                &l.w_gate.view(bytes),
                &ws.xn,
                n,
                &mut ws.gate,
                &mut ws.mm,
            );
            matmul(
                isa,
                self.act.gate_up,
                &l.w_up.view(bytes),
                &ws.xn,
                n,
                &mut ws.up,
                &mut ws.mm,
            );
            ops::silu_mul(&mut ws.gate, &ws.up);
            matmul(
                isa,
                self.act.down,
                &l.w_down.view(bytes),
                &ws.gate,
                n,
                &mut ws.xn,
                &mut ws.mm,
            );
            ops::add_inplace(&mut ws.x, &ws.xn);
        }
        for &(seq, len) in &ws.seq_of {
            kv.set_len(seq, len);
        }

        // Output head for the rows that asked for logits.
        ws.out_rows.clear();
        ws.out_rows.extend((0..n).filter(|&t| batch.logits[t]));
        let m = ws.out_rows.len();
        for (i, &t) in ws.out_rows.iter().enumerate() {
            let (src, dst) = (t * d, i * d);
            // xn is free now; gather the normed rows at its front (i <= t, so no overlap issue).
            ops::rms_norm(
                &ws.x[src..src + d],
                &self.output_norm,
                cfg.norm_eps,
                &mut ws.xn[dst..dst + d],
            );
        }
        fit(&mut ws.logits, m * cfg.vocab);
        matmul(
            isa,
            self.act.head,
            &self.output.view(bytes),
            &ws.xn[..m * d],
            m,
            &mut ws.logits,
            &mut ws.mm,
        );
        Ok(&ws.logits[..m * cfg.vocab])
    }
}
