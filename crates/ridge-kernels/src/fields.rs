//! The scalar fields block formats store (f16 scales, e8m0 exponents, MXFP4's code values):
//! read by the block layouts (`blocks`), the k-quants (`kquant`) and every kernel, so they sit
//! below all of them.

use half::f16;

/// Reads a little-endian f16 at `b[0..2]` as f32.
#[inline(always)]
pub fn f16_at(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// The doubled e2m1 values an MXFP4 code stands for (bit 3 is the sign; code 8 is −0).
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// An MXFP4 block's scale: half the e8m0 value `2^(e − 127)`, i.e. `2^(e − 128)`, exact in
/// f32 for every byte (the two smallest are subnormal). The all-ones byte, NaN in the OCP
/// specification, reads as 2¹²⁷ as ggml reads it.
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}
