//! Activation blocks: the other operand of the integer dot products.
//!
//! Each block of 32 activations is stored as `d · q` with `q: i8` (or `i16`) and an f32 scale
//! `d`, plus `isum = Σ q`, which lets Q4_0 (offset −8) and Q4_1 (minimum `m`) fold their
//! constant term into one multiply per block instead of per element. The types and the
//! scalar reference live in [`blocks`] (below every kernel); the quantizers here take the
//! path of an [`Isa`] through its dispatch table.

pub mod blocks;

pub use blocks::{
    quantize16_scalar, quantize_scalar, split16, Act16Block, ActBlock, ActSplit16, IntActBlock,
    Q16_MAX,
};

use crate::Isa;

/// Quantizes with the best path for `isa`. Results are identical to [`quantize_scalar`].
pub fn quantize(isa: Isa, x: &[f32], out: &mut [ActBlock]) {
    // SAFETY: the table is `isa`'s, whose kernels run on this CPU (cpu.rs); every path writes
    // at most `out.len()` blocks (it zips the blocks of `x` with `out`).
    unsafe { (isa.kernels().quantize_act)(x, out) }
}

/// Quantizes into 16-bit blocks with the best path for `isa`; identical to
/// [`quantize16_scalar`].
pub fn quantize16(isa: Isa, x: &[f32], out: &mut [Act16Block]) {
    // SAFETY: as in `quantize`.
    unsafe { (isa.kernels().quantize_act16)(x, out) }
}
