//! The loaded model: binding its weights, and the two ends of a forward pass.
//!
//! [`Model`] binds the weights once (types and shapes checked, kept as offsets into the map),
//! and [`Model::forward`] is the same for every architecture at its two ends: validate the
//! batch and reserve KV blocks, embed the tokens, … , write back the sequence lengths, norm the
//! rows that want logits and run the output head. Only the layer stack differs: one file per
//! architecture implements `stack::Stack` (`llama.rs`, which qwen2, qwen3, the mixtures of
//! experts and gpt-oss share; `gemma3.rs`; `qwen35.rs`, the hybrids), and the table in
//! `arches.rs` picks it by `cfg.arch`. `Model` keeps one `Box<dyn Stack>` and no field that
//! only one architecture uses.
//!
//! The layering, imports one way, top down:
//! - this module: load and bind, `forward`'s two ends;
//! - `arches.rs`: the table of architectures;
//! - the architectures' files and the routed feed-forward (`moe.rs`), each binding and keeping
//!   the weights only it has (Gemma 3's extra norms, a hybrid's recurrent weights, the
//!   experts);
//! - `stack.rs` (the trait and the byte counts every stack shares) and `layer.rs`: the weights
//!   every attention layer has and the steps every architecture is built from (the Q/K/V
//!   products with their biases, the per-head Q/K norms, RoPE plus the KV write, paged
//!   attention, the feed-forward), each reading a `LayerCtx` this module lends for one pass
//!   instead of the `Model`.
//!
//! Why: with the shared steps here, as they were, every architecture imported this module and
//! this module imported every architecture, so no file could be read or changed without the
//! others; now an architecture sees only the steps, and only this module sees the `Model`.

use std::path::Path;
use std::sync::Arc;

use ridge_gguf::GgufFile;
use ridge_kernels::{blocks, matmul, ops, Isa, PackedMatrix, WeightMatrix};

use crate::arches;
use crate::config::ModelConfig;
use crate::layer::{tile_matrices, ActPlan, LayerCtx};
use crate::stack::Stack;
use crate::weights::{matrix, vector, MatRef};
use crate::workspace::fit;
use crate::{rope, ActPolicy, Batch, KvCache, ModelError, Workspace};

/// A loaded model: configuration plus weights bound in place in the memory-mapped file.
pub struct Model {
    file: Arc<GgufFile>,
    cfg: ModelConfig,
    isa: Isa,
    embd: MatRef,
    output: MatRef,
    output_norm: Vec<f32>,
    /// The architecture's layers (`stack.rs`: one file per architecture).
    layers: Box<dyn Stack>,
    /// Per-pair RoPE frequency divisors (`rope_dim / 2` of them: Llama 3's
    /// `rope_freqs.weight`, Phi-3's LongRoPE factors), where the file has them.
    rope_freqs: Option<Vec<f32>>,
    act: ActPlan,
    /// Token ids the head computes logits for: `0..head_rows` (the whole vocabulary unless
    /// [`Model::restrict_head`] narrowed it).
    head_rows: usize,
    /// Tiled copies of the layer matrices that have a tile layout (see
    /// `ridge_kernels::packed`), made at load on CPUs with tile kernels.
    tiles: Vec<PackedMatrix>,
    /// The reranker's classifier head, bound when the file declares rank pooling.
    rank: Option<Arc<crate::RankHead>>,
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
        let d = cfg.d_model;
        let embd = matrix(f, "token_embd.weight", cfg.vocab, d)?;
        let output = if f.has_tensor("output.weight") {
            matrix(f, "output.weight", cfg.vocab, d)?
        } else {
            embd
        };
        let mut layers = arches::bind(f, &cfg)?;
        let output_norm = vector(f, cfg.arch.output_norm_tensor(), d)?;
        // Llama 3.1+ stores its RoPE scaling as one frequency divisor per rotated pair, Phi-3's
        // LongRoPE as two such sets (`config.rs` picks the tensor).
        let rope_freqs = match cfg.rope_factors {
            Some(name) => {
                let ff = vector(f, name, cfg.rope_dim / 2)?;
                if let Some(bad) = ff.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                    return Err(ModelError::Unsupported {
                        path: f.path().display().to_string(),
                        message: format!("{name} holds {bad}; expected positive factors"),
                    });
                }
                Some(ff)
            }
            None => None,
        };
        let rank = match crate::Pooling::declared(f)? {
            crate::Pooling::Rank => Some(Arc::new(crate::RankHead::bind(f, &cfg)?)),
            _ => None,
        };
        let act = ActPlan::new(ActPolicy::default(), cfg.arch);
        let isa = Isa::detect();
        let head_rows = cfg.vocab;
        let mut output = output;
        let tiles = if isa.avx2() {
            tile_matrices(f, layers.matrices_mut(&cfg), &mut output, isa)
        } else {
            Vec::new()
        };
        Ok(Model {
            file,
            cfg,
            isa,
            embd,
            output,
            output_norm,
            layers,
            rope_freqs,
            act,
            head_rows,
            tiles,
            rank,
        })
    }

    /// What the layer steps read beside each layer's weights (see `layer.rs`), lent for
    /// one pass.
    #[inline]
    fn ctx(&self) -> LayerCtx<'_> {
        LayerCtx {
            isa: self.isa,
            cfg: &self.cfg,
            act: self.act,
            bytes: self.bytes(),
            tiles: &self.tiles,
        }
    }

    /// A bound matrix as the products take it: its tiled copy if it has one, else its bytes in
    /// the file.
    #[inline]
    fn mat(&self, m: &MatRef) -> WeightMatrix<'_> {
        self.ctx().mat(m)
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The pooling the file declares for embeddings (see [`crate::Pooling::declared`]).
    pub fn pooling(&self) -> Result<crate::Pooling, ModelError> {
        crate::Pooling::declared(&self.file)
    }

    /// The reranker's classifier head, for a file that declares rank pooling (see `rank.rs`).
    pub fn rank_head(&self) -> Option<&Arc<crate::RankHead>> {
        self.rank.as_ref()
    }

    /// The underlying file (for the tokenizer and metadata).
    pub fn gguf(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// The kernel path in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Forces a kernel path (tests compare paths): any of [`Isa::available`], else ignored.
    pub fn set_isa(&mut self, isa: Isa) {
        if Isa::available().contains(&isa) {
            self.isa = isa;
        }
    }

    /// Chooses how activations meet quantized weights (see [`ActPolicy`]). The tile kernels
    /// are integer kernels: f32 activations read the file's row layout (its pages fault back
    /// in), and leaving f32 makes the tiled copies again.
    pub fn set_act_policy(&mut self, policy: ActPolicy) {
        self.act = ActPlan::new(policy, self.cfg.arch);
        if policy == ActPolicy::F32 {
            self.tiles.clear();
            for m in self.layers.matrices_mut(&self.cfg) {
                m.tiles = None;
            }
            self.output.tiles = None;
        } else if self.tiles.is_empty() && Isa::detect().avx2() {
            let file = Arc::clone(&self.file);
            let mats = self.layers.matrices_mut(&self.cfg);
            self.tiles = tile_matrices(&file, mats, &mut self.output, Isa::detect());
        }
    }

    /// Computes logits only for the token ids below `rows` (rounded down to a whole number
    /// of tile groups, kept between 8 and the vocabulary): a draft model's guesses from the
    /// frequent end of a BPE vocabulary, whose merges are learnt most frequent first, for a
    /// fraction of the head's bytes. Logit rows are then [`Model::logit_width`] wide.
    pub fn restrict_head(&mut self, rows: usize) {
        let tile = ridge_kernels::packed::TILE_ROWS;
        self.head_rows = (rows / tile * tile).clamp(tile.min(self.cfg.vocab), self.cfg.vocab);
    }

    /// Re-encodes every layer matrix and the head whose format takes more bytes per weight
    /// than `to` (a format with tiles) into `to`'s tiles, returning how many bytes smaller
    /// the re-encoded matrices are (the whole head, even where a step reads only its
    /// restricted rows). Lossy: for a draft model, whose guesses the target checks, fewer
    /// bytes per guess can be worth a few more misses. Only where tile kernels run (an AVX2 CPU, integer
    /// activations); `set_act_policy(ActPolicy::F32)` goes back to the file's weights.
    pub fn requantize(&mut self, to: ridge_kernels::DType) -> usize {
        if self.tiles.is_empty() {
            return 0;
        }
        let per_weight = |d: ridge_kernels::DType, cols: usize| d.row_bytes(cols) * 64 / cols;
        let bytes = self.file.bytes();
        let mut mats: Vec<&mut MatRef> = vec![&mut self.output];
        mats.extend(self.layers.matrices_mut(&self.cfg));
        let mut saved = 0;
        for m in mats {
            let cur = match m.tiles {
                Some(i) => self.tiles[i].view(),
                None => m.view(bytes),
            };
            if per_weight(cur.dtype, cur.cols) <= per_weight(to, cur.cols) {
                continue;
            }
            let Some(p) = PackedMatrix::requantize(&cur, to) else {
                continue;
            };
            saved += cur.data.len().saturating_sub(p.view().data.len());
            match m.tiles {
                Some(i) => self.tiles[i] = p,
                None => {
                    m.tiles = Some(self.tiles.len());
                    self.tiles.push(p);
                }
            }
        }
        saved
    }

    /// Logits per row that [`Model::forward`] returns: the vocabulary, or what
    /// [`Model::restrict_head`] kept of it.
    pub fn logit_width(&self) -> usize {
        self.head_rows
    }

    /// Bytes of weights read for one decode step of one token: every layer matrix, the norms
    /// and the output head (the embedding table contributes one row per token, negligible);
    /// of a mixture of experts, the router, any shared expert and `k` of the `E` experts.
    pub fn weight_bytes_per_token(&self) -> usize {
        let layers = self.layers.bytes_per_token(&self.ctx());
        let head = self.mat(&self.output).data.len() / self.cfg.vocab.max(1) * self.head_rows;
        layers + head + 4 * self.cfg.d_model
    }

    /// Bytes of one routed expert in every layer together (its gate, up and down slices, as
    /// the products read them, and its biases where the file has them); 0 for a dense model.
    pub fn expert_bytes(&self) -> usize {
        if self.cfg.moe.is_none() {
            return 0;
        }
        self.layers.expert_bytes(&self.ctx())
    }

    /// The matrix bytes of the mapped file.
    #[inline]
    fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    /// Checks the batch against the cache and reserves blocks. Fills `ws.seq_of` (sequences
    /// with their length after the batch), `ws.tables` (per layer group, their block tables)
    /// and `ws.table_of`
    /// (per token, the index of its sequence's table).
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
        ws.tables.resize_with(kv.groups(), Vec::new);
        for (g, tables) in ws.tables.iter_mut().enumerate() {
            tables.resize_with(seq_of.len(), Vec::new);
            for (t, &(seq, _)) in tables.iter_mut().zip(seq_of.iter()) {
                t.clear();
                t.extend_from_slice(kv.block_table(seq, g));
            }
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
    /// Returns logits ([`Model::logit_width`] per row: the vocabulary unless restricted) for
    /// the tokens whose `logits` flag is set, in batch order.
    pub fn forward<'w>(
        &self,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], ModelError> {
        self.forward_skipping(batch, kv, ws, None)
    }

    /// Takes sequence `id` back to its first `len` tokens (rejected draft tokens), as
    /// [`KvCache::rewind`] does — and on a hybrid model its recurrent state too: the journal
    /// opened before the pass ([`KvCache::open_journal`]) is closed and the kept rows are
    /// replayed from the state it copied. A hybrid's sequence without an open journal keeps
    /// its length (its state could not follow), and never goes below where the journal
    /// opened.
    pub fn rewind(&self, kv: &mut KvCache, id: crate::SeqId, len: usize) {
        if kv.can_rewind() {
            kv.rewind(id, len);
            return;
        }
        let Some(j) = kv.close_journal(id) else {
            return;
        };
        let old = kv.seq_len(id);
        let new = kv.rewind_positions(id, len.max(j.from));
        let cx = self.ctx();
        kv.with_state(id, j, |j, state| {
            if new < old {
                self.layers.replay(&cx, j, new - j.from, state);
            }
        });
    }

    /// As [`Model::forward`], but layers with `skip[i]` set are left out (the residual stream
    /// passes them unchanged, and their K/V at the batch's positions are not written): a
    /// cheaper, approximate model sharing this one's weights and cache — self-speculation's
    /// draft. The positions it appends must be rewritten by a full pass before anything
    /// relies on them.
    pub fn forward_skipping<'w>(
        &self,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &'w mut Workspace,
        skip: Option<&[bool]>,
    ) -> Result<&'w [f32], ModelError> {
        self.run_layers(batch, kv, ws, skip)?;
        let n = self.head(batch, ws);
        Ok(&ws.logits[..n])
    }

    /// As [`Model::forward`], and also the final hidden states — after the output norm,
    /// where the head would read them, `d_model` per row — of the tokens with `hidden[t]`
    /// set, in batch order: what embeddings pool. A row may ask for either, both or neither;
    /// the head runs only for the rows that want logits (none, for a batch of embeddings).
    pub fn forward_outputs<'w>(
        &self,
        batch: &Batch,
        hidden: &[bool],
        kv: &mut KvCache,
        ws: &'w mut Workspace,
    ) -> Result<Outputs<'w>, ModelError> {
        if hidden.len() != batch.len() {
            return Err(ModelError::BadBatch(format!(
                "{} hidden-state flags for a batch of {} tokens",
                hidden.len(),
                batch.len()
            )));
        }
        self.run_layers(batch, kv, ws, None)?;
        let d = self.cfg.d_model;
        let rows = hidden.iter().filter(|&&h| h).count();
        fit(&mut ws.hidden, rows * d);
        for (i, t) in (0..batch.len()).filter(|&t| hidden[t]).enumerate() {
            ops::rms_norm(
                self.isa,
                &ws.x[t * d..(t + 1) * d],
                &self.output_norm,
                self.cfg.norm_eps,
                &mut ws.hidden[i * d..(i + 1) * d],
            );
        }
        let n = self.head(batch, ws);
        let ws: &'w Workspace = ws;
        Ok(Outputs {
            logits: &ws.logits[..n],
            hidden: &ws.hidden[..rows * d],
        })
    }

    /// Checks the batch, embeds it and runs the layer stack, leaving the residual stream in
    /// `ws.x` and the sequences' new lengths in `kv`.
    fn run_layers(
        &self,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
        skip: Option<&[bool]>,
    ) -> Result<(), ModelError> {
        self.prepare(batch, kv, ws)?;
        self.embed(batch, ws);
        self.layers.run(&self.ctx(), batch, kv, ws, skip);
        for &(seq, len) in &ws.seq_of {
            kv.set_len(seq, len);
        }
        Ok(())
    }

    /// Sizes the activation buffers for `n` tokens, writes the (scaled) embedding rows into
    /// `ws.x` and the RoPE tables of every token's position.
    fn embed(&self, batch: &Batch, ws: &mut Workspace) {
        let cfg = &self.cfg;
        let n = batch.len();
        let (d, (qd, kvd)) = (cfg.d_model, cfg.widest_q_kv());
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

        let embd = self.embd.view(self.bytes());
        for (t, &tok) in batch.tokens.iter().enumerate() {
            let row = &mut ws.x[t * d..(t + 1) * d];
            blocks::dequantize_row(embd.dtype, embd.row(tok as usize), row);
            if cfg.embd_scale != 1.0 {
                ops::scale_inplace(row, cfg.embd_scale);
            }
        }
        let scaling = &cfg.rope_scaling;
        for (t, &pos) in batch.positions.iter().enumerate() {
            let r = t * half..(t + 1) * half;
            let (cos, sin) = (&mut ws.cos[r.clone()], &mut ws.sin[r]);
            let ff = self.rope_freqs.as_deref();
            match ff {
                _ if !scaling.is_identity() => {
                    let s = scaling.freq_scale;
                    rope::table(pos, cfg.rope_dim, cfg.rope_base, ff, s, scaling, cos, sin)
                }
                None => ops::rope_table(pos, cfg.rope_dim, cfg.rope_base, cos, sin),
                Some(ff) => {
                    rope::table_with_factors(pos, cfg.rope_dim, cfg.rope_base, ff, cos, sin)
                }
            }
        }
        // M-RoPE sections a text token has no position in (`hybrid.rs`) stay unrotated.
        if let Some(rot) = &cfg.rope_rotated {
            for (c, s) in ws
                .cos
                .chunks_exact_mut(half)
                .zip(ws.sin.chunks_exact_mut(half))
            {
                for (i, _) in rot.iter().enumerate().filter(|(_, &r)| !r) {
                    (c[i], s[i]) = (1.0, 0.0);
                }
            }
        }
        if cfg.sliding_window.is_some() {
            // Gemma 4's sliding layers rotate heads of their own width.
            let dim = cfg.rope_dim_swa();
            let half = dim / 2;
            fit(&mut ws.cos_swa, n * half);
            fit(&mut ws.sin_swa, n * half);
            for (t, &pos) in batch.positions.iter().enumerate() {
                let r = t * half..(t + 1) * half;
                let (cos, sin) = (&mut ws.cos_swa[r.clone()], &mut ws.sin_swa[r]);
                let base = cfg.rope_base_swa;
                if scaling.is_identity() {
                    ops::rope_table(pos, dim, base, cos, sin);
                } else {
                    let s = scaling.freq_scale_swa;
                    rope::table(pos, dim, base, None, s, scaling, cos, sin);
                }
            }
        }
    }

    /// Final norm and output head for the rows that asked for logits, into `ws.logits`;
    /// returns how many values it wrote.
    fn head(&self, batch: &Batch, ws: &mut Workspace) -> usize {
        let cfg = &self.cfg;
        let d = cfg.d_model;
        ws.out_rows.clear();
        ws.out_rows
            .extend((0..batch.len()).filter(|&t| batch.logits[t]));
        let m = ws.out_rows.len();
        if m == 0 {
            return 0;
        }
        for (i, &t) in ws.out_rows.iter().enumerate() {
            let (src, dst) = (t * d, i * d);
            // xn is free now; gather the normed rows at its front (i <= t, so no overlap issue).
            ops::rms_norm(
                self.isa,
                &ws.x[src..src + d],
                &self.output_norm,
                cfg.norm_eps,
                &mut ws.xn[dst..dst + d],
            );
        }
        let full = self.mat(&self.output);
        // restrict_head keeps head_rows a whole number of tile groups within the vocabulary.
        let w = full.first_rows(self.head_rows).unwrap_or(full);
        fit(&mut ws.logits, m * w.rows);
        matmul(
            self.isa,
            self.act.head,
            &w,
            &ws.xn[..m * d],
            m,
            &mut ws.logits,
            &mut ws.mm,
        );
        if let Some(cap) = cfg.logit_softcap {
            ops::softcap_inplace(&mut ws.logits, cap);
        }
        if cfg.logit_scale != 1.0 {
            ops::scale_inplace(&mut ws.logits[..m * w.rows], 1.0 / cfg.logit_scale);
        }
        m * w.rows
    }
}

/// What [`Model::forward_outputs`] returns.
#[derive(Clone, Copy, Debug)]
pub struct Outputs<'w> {
    /// [`Model::logit_width`] logits per row that asked for them, in batch order.
    pub logits: &'w [f32],
    /// `d_model` normed final hidden states per row that asked for them, in batch order.
    pub hidden: &'w [f32],
}
