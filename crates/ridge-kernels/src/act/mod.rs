//! Activation blocks: the other operand of the integer dot products.
//!
//! Each block of 32 activations is stored as `d · q` with `q: i8` (or `i16`) and an f32 scale
//! `d`, plus `isum = Σ q`, which lets Q4_0 (offset −8) and Q4_1 (minimum `m`) fold their
//! constant term into one multiply per block instead of per element. The types and the
//! scalar reference live in [`blocks`] (below every kernel); the quantizers here take the
//! path of an [`Isa`] through its dispatch table.

pub mod blocks;

pub use blocks::{
    pow2_scale, quantize16_scalar, quantize_pow2_scalar, quantize_scalar, split16, Act16Block,
    ActBlock, ActSplit16, IntActBlock, POW2_MAX, POW2_MIN, Q16_MAX,
};

use crate::pool::{for_ranges, SharedMut};
use crate::Isa;

/// Blocks from which a quantization is split across the pool (a prefill's rows; a decode
/// step's few rows stay on one thread, where a parallel loop would cost more than it saves).
const PAR_BLOCKS: usize = 1024;

/// `kernel(x, out)` over pieces of whole blocks, in parallel for large inputs. Blocks are
/// quantized independently, so the result is the same however the input is split.
///
/// # Safety
/// `kernel` runs on this CPU (it is from the dispatch table of an [`Isa`] detection made) and
/// writes at most `out.len()` blocks, one per 32 elements of its input.
unsafe fn by_pieces<B>(x: &[f32], out: &mut [B], kernel: unsafe fn(&[f32], &mut [B])) {
    let nb = out.len().min(x.len() / 32);
    if nb < PAR_BLOCKS {
        // SAFETY: this function's contract.
        return unsafe { kernel(x, out) };
    }
    let o = SharedMut(out.as_mut_ptr());
    for_ranges(nb, 1, PAR_BLOCKS, |b0, b1| {
        // SAFETY: pieces of 0..nb are disjoint and inside `out` (nb <= out.len()), which
        // outlives the loop; x[32·b0..32·b1] lies inside x (nb <= x.len() / 32); the kernel
        // as this function's contract says.
        unsafe {
            let out = std::slice::from_raw_parts_mut(o.ptr().add(b0), b1 - b0);
            kernel(&x[32 * b0..32 * b1], out)
        }
    });
}

/// Quantizes with the best path for `isa`. Results are identical to [`quantize_scalar`].
pub fn quantize(isa: Isa, x: &[f32], out: &mut [ActBlock]) {
    // SAFETY: the table is `isa`'s, whose kernels run on this CPU (cpu.rs); every path writes
    // at most `out.len()` blocks (it zips the blocks of `x` with `out`).
    unsafe { by_pieces(x, out, isa.kernels().quantize_act) }
}

/// Quantizes with power-of-two scales with the best path for `isa`; identical to
/// [`quantize_pow2_scalar`].
pub fn quantize_pow2(isa: Isa, x: &[f32], out: &mut [ActBlock]) {
    // SAFETY: as in `quantize`.
    unsafe { by_pieces(x, out, isa.kernels().quantize_act_pow2) }
}

/// Quantizes into 16-bit blocks with the best path for `isa`; identical to
/// [`quantize16_scalar`].
pub fn quantize16(isa: Isa, x: &[f32], out: &mut [Act16Block]) {
    // SAFETY: as in `quantize`.
    unsafe { by_pieces(x, out, isa.kernels().quantize_act16) }
}
