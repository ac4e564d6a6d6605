//! Attention of a batch over one layer's KV cache, divided into parallel tasks.
//!
//! The kernels (`ridge_kernels::attention`) compute one query's heads over one chunk of
//! positions, or over all of them; this module decides how a batch's work is cut into tasks.
//! With many tokens (prefill, batched decode) each task takes a whole KV group of one token, so
//! each K/V row is read once per group. With a few (decode) there are too few such tasks for
//! the threads, and the heads of a group would each re-read the same rows, so each token's
//! positions are split into chunks spread over the pool and merged after the loop. Both give a
//! token the same bits (the kernels' chunk partials and merge are the same either way).

use ridge_kernels::attention::{
    attend_chunk, attend_group, chunks, merge_chunks, partial_len, AttnShape, KvLayer,
};
use ridge_kernels::pool::{self, SharedMut};
use ridge_kernels::Isa;

use crate::config::ModelConfig;
use crate::workspace::{fit, AttnTask};
use crate::{Batch, Workspace};

/// One layer's attention call: the kernels' inputs that do not change per token.
pub(crate) struct LayerAttention<'a> {
    pub(crate) isa: Isa,
    pub(crate) cfg: &'a ModelConfig,
    pub(crate) shape: AttnShape,
    pub(crate) kv: KvLayer<'a>,
    /// The layer's group of block tables in `Workspace::tables`.
    pub(crate) group: usize,
    /// Sliding window: a token at `p` sees only `p − window + 1 ..= p`.
    pub(crate) window: Option<usize>,
    /// One sink logit per query head (gpt-oss), joining each head's softmax denominator.
    pub(crate) sinks: Option<&'a [f32]>,
}

impl LayerAttention<'_> {
    /// Query heads per KV head.
    fn group(&self) -> usize {
        self.cfg.n_heads / self.cfg.n_kv_heads
    }

    /// The positions `first..end` token `t` of `batch` attends to.
    fn span(&self, batch: &Batch, t: usize) -> (usize, usize) {
        let end = batch.positions[t] + 1;
        (self.window.map_or(0, |w| end.saturating_sub(w)), end)
    }

    /// One task per (token, KV group), all positions, into `ws.att`.
    pub(crate) fn by_groups(&self, batch: &Batch, ws: &mut Workspace) {
        let (qd, hd, group) = (self.cfg.q_dim(), self.cfg.head_dim, self.group());
        let n_kv = self.cfg.n_kv_heads;
        let att = SharedMut(ws.att.as_mut_ptr());
        let (q, tables, table_of) = (&ws.q, &ws.tables[self.group], &ws.table_of);
        pool::parallel_for(batch.len() * n_kv, |i| {
            let (t, g) = (i / n_kv, i % n_kv);
            let off = t * qd + g * group * hd;
            let w = group * hd;
            // SAFETY: task i alone writes att[off..off + w] (distinct (t, g) give disjoint
            // ranges inside the n·qd buffer), and att outlives parallel_for.
            let out = unsafe { std::slice::from_raw_parts_mut(att.ptr().add(off), w) };
            let (first, end) = self.span(batch, t);
            attend_group(
                self.isa,
                &self.kv,
                &tables[table_of[t]],
                first,
                end,
                &self.shape,
                g,
                group,
                &q[off..off + w],
                self.sinks.map(|s| &s[g * group..(g + 1) * group]),
                out,
            );
        });
    }

    /// Decode (a few tokens): one task per (token, head subset, position chunk), with as many
    /// heads per task as still gives every thread two tasks; each subset's partials merged
    /// into `ws.att` after the loop.
    pub(crate) fn by_chunks(&self, batch: &Batch, ws: &mut Workspace) {
        let (qd, hd, group) = (self.cfg.q_dim(), self.cfg.head_dim, self.group());
        let (n, n_heads) = (batch.len(), self.cfg.n_heads);
        let all_chunks: usize = (0..n)
            .map(|t| {
                let (first, end) = self.span(batch, t);
                chunks(first, end).len()
            })
            .sum();
        let per_task = (1..=group)
            .rev()
            .filter(|d| group.is_multiple_of(*d))
            .find(|d| all_chunks * n_heads / d >= 2 * pool::threads())
            .unwrap_or(1);
        let plen = partial_len(per_task, hd);
        ws.att_tasks.clear();
        for t in 0..n {
            let (first, end) = self.span(batch, t);
            for h0 in (0..n_heads).step_by(per_task) {
                for chunk in chunks(first, end) {
                    let at = ws.att_tasks.len() * plen;
                    ws.att_tasks.push(AttnTask { t, h0, chunk, at });
                }
            }
        }
        fit(&mut ws.att_partials, ws.att_tasks.len() * plen);
        let parts = SharedMut(ws.att_partials.as_mut_ptr());
        let (q, tables, table_of, tasks) =
            (&ws.q, &ws.tables[self.group], &ws.table_of, &ws.att_tasks);
        pool::parallel_for(tasks.len(), |i| {
            let AttnTask { t, h0, chunk, at } = tasks[i];
            // SAFETY: task i alone writes its record att_partials[at..at + plen] (records are
            // laid out one per task), and the buffer outlives parallel_for.
            let part = unsafe { std::slice::from_raw_parts_mut(parts.ptr().add(at), plen) };
            let (first, end) = self.span(batch, t);
            let off = t * qd + h0 * hd;
            attend_chunk(
                self.isa,
                &self.kv,
                &tables[table_of[t]],
                first,
                end,
                &self.shape,
                h0 / group,
                per_task,
                &q[off..off + per_task * hd],
                chunk,
                part,
            );
        });
        // The tasks of one (token, head subset) are consecutive, in chunk order.
        let mut i = 0;
        while i < ws.att_tasks.len() {
            let AttnTask { t, h0, .. } = ws.att_tasks[i];
            let mut j = i;
            while j < ws.att_tasks.len() && (ws.att_tasks[j].t, ws.att_tasks[j].h0) == (t, h0) {
                j += 1;
            }
            let off = t * qd + h0 * hd;
            merge_chunks(
                &ws.att_partials[i * plen..j * plen],
                per_task,
                hd,
                self.sinks.map(|s| &s[h0..h0 + per_task]),
                &mut ws.att[off..off + per_task * hd],
            );
            i = j;
        }
    }
}
