//! Causal attention of one query token over a sequence's cached keys and values, read through
//! a paged KV layout.
//!
//! The cache stores K and V as f16 rows of `kv_dim = n_kv_heads · head_dim`, one row per token
//! slot; a sequence's positions map to slots through its block table
//! (`slot = table[pos / block_size] · block_size + pos % block_size`). Grouped-query attention:
//! query head `h` reads KV head `h / (n_heads / n_kv_heads)`.

use crate::{ops, Isa};
use half::f16;
use std::cell::RefCell;

/// Cached K and V storage of one layer: `n_slots` rows of `kv_dim` elements each.
#[derive(Clone, Copy)]
pub enum KvData<'a> {
    /// f16 elements.
    F16 {
        /// Keys.
        k: &'a [f16],
        /// Values.
        v: &'a [f16],
    },
    /// Q8_0 blocks (f16 scale + 32 int8) — half the bytes of f16; needs `head_dim % 32 == 0`.
    Q8_0 {
        /// Keys, `kv_dim / 32 · 34` bytes per row.
        k: &'a [u8],
        /// Values, same layout.
        v: &'a [u8],
    },
}

/// The cached keys and values of one layer, addressed by slot.
#[derive(Clone, Copy)]
pub struct KvLayer<'a> {
    /// The storage.
    pub data: KvData<'a>,
    /// Elements per slot row.
    pub kv_dim: usize,
    /// Tokens per block.
    pub block_size: usize,
}

/// Bytes of one Q8_0 block of 32 elements.
pub const Q8_BLOCK_BYTES: usize = 34;

impl<'a> KvLayer<'a> {
    /// f16 storage.
    pub fn f16(k: &'a [f16], v: &'a [f16], kv_dim: usize, block_size: usize) -> Self {
        KvLayer {
            data: KvData::F16 { k, v },
            kv_dim,
            block_size,
        }
    }

    /// Q8_0 storage.
    pub fn q8_0(k: &'a [u8], v: &'a [u8], kv_dim: usize, block_size: usize) -> Self {
        KvLayer {
            data: KvData::Q8_0 { k, v },
            kv_dim,
            block_size,
        }
    }

    /// KV head `group`'s K (`value = false`) or V row at `slot`, as f32 (`out.len()` is the
    /// head dimension).
    pub fn load_head(&self, value: bool, slot: usize, group: usize, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        let hd = out.len();
        match self.data {
            KvData::F16 { k, v } => {
                let r = slot * self.kv_dim + group * hd;
                let src = if value { v } else { k };
                src[r..r + hd].convert_to_f32_slice(out);
            }
            KvData::Q8_0 { k, v } => {
                let row = self.kv_dim / 32 * Q8_BLOCK_BYTES;
                let r = slot * row + group * hd / 32 * Q8_BLOCK_BYTES;
                let src = if value { v } else { k };
                crate::blocks::dequantize_row(
                    crate::DType::Q8_0,
                    &src[r..r + hd / 32 * Q8_BLOCK_BYTES],
                    out,
                );
            }
        }
    }
}

/// Attention shape parameters.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Score scale, usually `1/sqrt(head_dim)`.
    pub scale: f32,
}

thread_local! {
    /// Per-thread score buffer; grows to the longest context seen, never per call.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread buffers for one K or V row converted to f32, and group scores.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread K/V row index of every position one AVX2 attention call reads.
    static SLOTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// f32 · f32 with eight independent accumulators (vectorised by the compiler).
#[inline]
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Computes `gs` query heads that share KV group `group` over positions `first..n_ctx`,
/// reading each cached K and V row once for all of them (GQA: `n_heads / n_kv_heads` heads share
/// one KV head, so this divides the cache traffic and f16 conversions by that factor). Callers
/// pass the whole group, or a subset of its heads when they need more parallel tasks.
///
/// `q` holds the heads' queries back to back (`gs · head_dim`), `out` receives their attended
/// values in the same layout. `gs` is at most [`MAX_GROUP`].
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    isa: Isa,
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    group: usize,
    gs: usize,
    q: &[f32],
    out: &mut [f32],
) {
    debug_assert!(gs <= MAX_GROUP && q.len() == gs * shape.head_dim);
    #[cfg(target_arch = "x86_64")]
    let simd_ok = match kv.data {
        KvData::F16 { .. } => shape.head_dim.is_multiple_of(8),
        KvData::Q8_0 { .. } => shape.head_dim.is_multiple_of(32),
    };
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && simd_ok {
        SCORES.with(|sc| {
            SLOTS.with(|sl| {
                let (mut scores, mut slots) = (sc.borrow_mut(), sl.borrow_mut());
                let len = n_ctx - first;
                if scores.len() < gs * len {
                    scores.resize(gs * len, 0.0);
                }
                if slots.len() < len {
                    slots.resize(len, 0);
                }
                // SAFETY: Isa::Avx2 is produced only after detecting avx2/fma/f16c; head_dim
                // is a multiple of 8; the table maps every position below n_ctx into kv
                // (caller's contract); q/out hold gs heads, scores gs·len, slots len.
                unsafe {
                    crate::dot_avx2::attend_group(
                        kv,
                        table,
                        first,
                        n_ctx,
                        shape,
                        group,
                        gs,
                        q,
                        out,
                        &mut scores[..gs * len],
                        &mut slots[..len],
                    )
                }
            })
        });
        return;
    }
    attend_group_scalar(kv, table, first, n_ctx, shape, group, gs, q, out)
}

/// Most query heads one [`attend_group`] call handles.
pub const MAX_GROUP: usize = 16;

#[allow(clippy::too_many_arguments)]
fn attend_group_scalar(
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    group: usize,
    gs: usize,
    q: &[f32],
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let len = n_ctx - first;
    let slot =
        |pos: usize| table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size;
    SCORES.with(|sc| {
        ROW.with(|rw| {
            let (mut scores, mut row) = (sc.borrow_mut(), rw.borrow_mut());
            if scores.len() < gs * len {
                scores.resize(gs * len, 0.0);
            }
            if row.len() < hd {
                row.resize(hd, 0.0);
            }
            let row = &mut row[..hd];
            for j in 0..len {
                kv.load_head(false, slot(first + j), group, row);
                for h in 0..gs {
                    scores[h * len + j] = dot_f32(row, &q[h * hd..(h + 1) * hd]) * shape.scale;
                }
            }
            for h in 0..gs {
                ops::softmax_inplace(&mut scores[h * len..(h + 1) * len]);
            }
            out[..gs * hd].fill(0.0);
            for j in 0..len {
                kv.load_head(true, slot(first + j), group, row);
                for h in 0..gs {
                    let p = scores[h * len + j];
                    for (o, v) in out[h * hd..(h + 1) * hd].iter_mut().zip(row.iter()) {
                        *o += p * v;
                    }
                }
            }
        })
    });
}

/// Scalar reference: one query head over positions `first..n_ctx` of a sequence, the plainest
/// possible loop; the tests hold [`attend_group`]'s paths against it.
///
/// `q` is the head's query (`head_dim`), `out` receives the attended value (`head_dim`).
/// `table` must map every position below `n_ctx` to a slot inside `kv`.
#[allow(clippy::too_many_arguments)]
pub fn attend_head(
    kv: &KvLayer<'_>,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    shape: &AttnShape,
    head: usize,
    q: &[f32],
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let g = head / (shape.n_heads / shape.n_kv_heads);
    let mut row = vec![0f32; hd];
    let slot =
        |pos: usize| table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size;
    SCORES.with(|cell| {
        let mut scores = cell.borrow_mut();
        if scores.len() < n_ctx - first {
            scores.resize(n_ctx - first, 0.0);
        }
        let s = &mut scores[..n_ctx - first];
        for (j, sj) in s.iter_mut().enumerate() {
            kv.load_head(false, slot(first + j), g, &mut row);
            let d: f64 = row.iter().zip(q).map(|(a, b)| *a as f64 * *b as f64).sum();
            *sj = d as f32 * shape.scale;
        }
        ops::softmax_inplace(s);
        out.fill(0.0);
        for (j, &p) in s.iter().enumerate() {
            kv.load_head(true, slot(first + j), g, &mut row);
            for (o, v) in out.iter_mut().zip(&row) {
                *o += p * v;
            }
        }
    });
}
