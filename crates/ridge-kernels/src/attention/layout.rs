//! The paged K/V layout attention reads (storage, head rows, shapes): the types every
//! attention kernel, scalar or SIMD, takes, kept below them all (see [`crate::attention`] for
//! why rows are head-major).

use half::f16;

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
        let row = head_row(slot, group, self.kv_dim / hd, self.block_size);
        match self.data {
            KvData::F16 { k, v } => {
                let r = row * hd;
                let src = if value { v } else { k };
                src[r..r + hd].convert_to_f32_slice(out);
            }
            KvData::Q8_0 { k, v } => {
                let r = row * (hd / 32 * Q8_BLOCK_BYTES);
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

/// The head row holding KV head `head` of `slot` (see the module doc): rows of `head_dim`
/// elements (f16) or `head_dim / 32` Q8_0 blocks, one KV head's rows of a block contiguous.
#[inline]
pub fn head_row(slot: usize, head: usize, n_kv_heads: usize, block_size: usize) -> usize {
    (slot / block_size * n_kv_heads + head) * block_size + slot % block_size
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

/// Most query heads one [`crate::attention::attend_group`] call handles.
pub const MAX_GROUP: usize = 16;
