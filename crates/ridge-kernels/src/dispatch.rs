//! The dispatch table: for each instruction-set path, the kernel behind every operation whose
//! speed depends on the path. An [`crate::Isa`] carries its path's table, chosen once when the
//! `Isa` is made (by detection, which checks the CPU first), so every call site asks the table
//! instead of matching on the path, and a new instruction set is a new folder plus one table
//! here.
//!
//! Every entry is an `unsafe fn`: the kernels behind them need CPU features, and the only
//! guarantee that the CPU has them is that the table was reached through an `Isa`. Entries
//! that a path lacks are `None` (the caller then takes the portable code). Scalar entries are
//! the reference implementations themselves.

use crate::act::blocks::{
    quantize16_scalar, quantize_pow2_scalar, quantize_scalar, Act16Block, ActBlock,
};
use crate::attention::layout::{AttnShape, KvLayer};
use crate::matmul::acts::CallActs;
use crate::matrix::WeightMatrix;
use crate::pool::SharedMut;
use crate::scalar::{dot as sdot, elementwise as sel};

/// A product over rows `r0..r1` of a matrix for `n` tokens into `y` (`rows` floats per
/// token); see `matmul::rows_of_chunk` for the contract.
pub(crate) type ChunkFn =
    unsafe fn(&WeightMatrix<'_>, &CallActs<'_>, usize, usize, usize, SharedMut<f32>, usize);

/// [`ChunkFn`] that may decline a format (returns false, computing nothing).
pub(crate) type StoredChunkFn =
    unsafe fn(&WeightMatrix<'_>, &CallActs<'_>, usize, usize, usize, SharedMut<f32>, usize) -> bool;

/// Grouped attention over one chunk of positions (see `x86::avx2::attention`).
pub(crate) type AttendFn = unsafe fn(
    &KvLayer<'_>,
    &[u32],
    usize,
    usize,
    &AttnShape,
    usize,
    usize,
    &[f32],
    &mut [f32],
    &mut [f32],
    &mut [f32],
    &mut [usize],
);

/// One path's kernels.
pub(crate) struct Kernels {
    /// Activations to 8-bit blocks (`act::quantize`).
    pub(crate) quantize_act: unsafe fn(&[f32], &mut [ActBlock]),
    /// Activations to 8-bit blocks with power-of-two scales (`act::quantize_pow2`).
    pub(crate) quantize_act_pow2: unsafe fn(&[f32], &mut [ActBlock]),
    /// Activations to 16-bit blocks (`act::quantize16`).
    pub(crate) quantize_act16: unsafe fn(&[f32], &mut [Act16Block]),
    /// `Σ x²` in eight partial sums (RMSNorm).
    pub(crate) sum_squares: unsafe fn(&[f32]) -> f32,
    /// `out = x · s · w`.
    pub(crate) scale_mul: unsafe fn(&[f32], f32, &[f32], &mut [f32]),
    /// `x = x · s · w`.
    pub(crate) scale_mul_inplace: unsafe fn(&mut [f32], f32, &[f32]),
    /// SwiGLU's `gate = silu(gate) · up`.
    pub(crate) silu_mul: unsafe fn(&mut [f32], &[f32]),
    /// GeGLU's `gate = gelu(gate) · up`.
    pub(crate) gelu_tanh_mul: unsafe fn(&mut [f32], &[f32]),
    /// F32 row · f32.
    pub(crate) dot_f32: unsafe fn(&[u8], &[f32]) -> f32,
    /// F16 row · f32.
    pub(crate) dot_f16: unsafe fn(&[u8], &[f32]) -> f32,
    /// BF16 row · f32.
    pub(crate) dot_bf16: unsafe fn(&[u8], &[f32]) -> f32,
    /// Grouped attention over a chunk (f16 rows with `head_dim % 8 == 0`, Q8_0 rows with
    /// `head_dim % 32 == 0`); `None`: the portable loop.
    pub(crate) attend_group: Option<AttendFn>,
    /// Prefetches `bytes` bytes into L2 (a no-op where the path has no prefetch).
    pub(crate) prefetch_l2: unsafe fn(*const u8, usize),
    /// Quantized matrices in the stored layout.
    pub(crate) stored_chunk: Option<StoredChunkFn>,
    /// Tiled matrices whose format and path have tile kernels (`tiles::has_kernel`).
    pub(crate) tiled_chunk: Option<ChunkFn>,
    /// Above how many tokens a tiled product's chunks are cut in pairs of row groups (for
    /// kernels that take two groups per pass); `usize::MAX`: never.
    pub(crate) tile_pairs_above: usize,
}

/// Does nothing (the portable path does not prefetch).
fn no_prefetch(_: *const u8, _: usize) {}

/// The portable reference path.
pub(crate) const SCALAR: Kernels = Kernels {
    quantize_act: quantize_scalar,
    quantize_act_pow2: quantize_pow2_scalar,
    quantize_act16: quantize16_scalar,
    sum_squares: sel::sum_squares,
    scale_mul: sel::scale_mul,
    scale_mul_inplace: sel::scale_mul_inplace,
    silu_mul: sel::silu_mul,
    gelu_tanh_mul: sel::gelu_tanh_mul,
    dot_f32: sdot::dot_f32,
    dot_f16: sdot::dot_f16,
    dot_bf16: sdot::dot_bf16,
    attend_group: None,
    prefetch_l2: no_prefetch,
    stored_chunk: None,
    tiled_chunk: None,
    tile_pairs_above: usize::MAX,
};

/// AVX2 + FMA + F16C.
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX2: Kernels = {
    use crate::x86::avx2::{act, attention, dot, elementwise as el, rows, tiles};
    Kernels {
        quantize_act: act::quantize_act,
        quantize_act_pow2: act::quantize_act_pow2,
        quantize_act16: act::quantize_act16,
        sum_squares: el::sum_squares,
        scale_mul: el::scale_mul,
        scale_mul_inplace: el::scale_mul_inplace,
        silu_mul: el::silu_mul,
        gelu_tanh_mul: el::gelu_tanh_mul,
        dot_f32: dot::dot_f32,
        dot_f16: dot::dot_f16,
        dot_bf16: dot::dot_bf16,
        attend_group: Some(attention::attend_group),
        prefetch_l2: crate::x86::shared::prefetch_l2,
        stored_chunk: Some(rows::stored_chunk::<false>),
        tiled_chunk: Some(tiles::tiled_chunk),
        tile_pairs_above: usize::MAX,
    }
};

/// AVX-512 F/BW/VL/VNNI: AVX2's table with the tile products and attention of `x86::avx512`,
/// and the row kernels fetching lattice grids by gathers.
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX512: Kernels = {
    use crate::x86::avx512;
    Kernels {
        attend_group: Some(avx512::attention::attend_group_zmm),
        tiled_chunk: Some(avx512::tiled_chunk),
        tile_pairs_above: avx512::tiles::MAX_TOKENS,
        // The lattice formats' grid entries by gathers (`x86::avx2::lowbit::gathered32`).
        stored_chunk: Some(crate::x86::avx2::rows::stored_chunk::<true>),
        ..AVX2
    }
};

/// AMX-TILE/INT8: AVX-512's table with the tile-register products of `x86::amx` (16-token
/// blocks; the rest through AVX-512's).
#[cfg(target_arch = "x86_64")]
pub(crate) const AMX: Kernels = Kernels {
    tiled_chunk: Some(crate::x86::amx::tiled_chunk),
    ..AVX512
};
