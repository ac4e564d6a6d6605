//! Byte layouts of the block formats, scalar dequantization, and quantizers (used to build
//! test weights and synthetic models).
//!
//! Layouts (little-endian, as in GGUF):
//! - Q8_0: `d: f16, qs: [i8; 32]`, x = d·q.
//! - Q4_0: `d: f16, qs: [u8; 16]`, element j < 16 in the low nibble of `qs[j]`, element j + 16
//!   in its high nibble; x = d·(q − 8).
//! - Q4_1: `d: f16, m: f16, qs: [u8; 16]` (nibbles as Q4_0), x = d·q + m.
//! - Q5_0: `d: f16, qh: u32, qs: [u8; 16]` (low four bits as Q4_0's nibbles; bit j of `qh` is
//!   element j's fifth, top bit), x = d·(q − 16).
//! - MXFP4: `e: u8, qs: [u8; 16]` (nibbles as Q4_0's), x = 2^(e − 128) · K[q] with
//!   [`MXFP4_VALUES`] the doubled e2m1 values (so the scale is half the e8m0 `2^(e − 127)`).
//! - Q4_K, Q5_K, Q6_K: 256-element super-blocks, see [`crate::kquant`].
//! - Q2_K, Q3_K, IQ4_NL, IQ4_XS: see [`crate::lowbit`].

use crate::dtype::lattice;
pub use crate::fields::{e8m0_half, f16_at, MXFP4_VALUES};
use crate::kquant::{self, QK_K};
use crate::lowbit;
use crate::DType;
use half::{bf16, f16};

/// Dequantizes one row (`out.len()` elements) stored in `dtype` into f32.
///
/// `row` must hold exactly `dtype.row_bytes(out.len())` bytes.
pub fn dequantize_row(dtype: DType, row: &[u8], out: &mut [f32]) {
    debug_assert_eq!(row.len(), dtype.row_bytes(out.len()));
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(row.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o = f16_at(c);
            }
        }
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        DType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(34)) {
                let d = f16_at(b);
                for (x, &q) in o.iter_mut().zip(&b[2..34]) {
                    *x = d * (q as i8) as f32;
                }
            }
        }
        DType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(18)) {
                let d = f16_at(b);
                for j in 0..16 {
                    o[j] = d * ((b[2 + j] & 0x0F) as i32 - 8) as f32;
                    o[j + 16] = d * ((b[2 + j] >> 4) as i32 - 8) as f32;
                }
            }
        }
        DType::MXFP4 => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(17)) {
                let d = e8m0_half(b[0]);
                for j in 0..16 {
                    o[j] = d * MXFP4_VALUES[(b[1 + j] & 0x0F) as usize] as f32;
                    o[j + 16] = d * MXFP4_VALUES[(b[1 + j] >> 4) as usize] as f32;
                }
            }
        }
        DType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(20)) {
                let d = f16_at(b);
                let m = f16_at(&b[2..]);
                for j in 0..16 {
                    o[j] = d * (b[4 + j] & 0x0F) as f32 + m;
                    o[j + 16] = d * (b[4 + j] >> 4) as f32 + m;
                }
            }
        }
        DType::Q5_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(22)) {
                let d = f16_at(b);
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                for j in 0..16 {
                    let lo = (b[6 + j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
                    let hi = (b[6 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
                    o[j] = d * (lo as i32 - 16) as f32;
                    o[j + 16] = d * (hi as i32 - 16) as f32;
                }
            }
        }
        DType::Q5_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(24)) {
                let (d, m) = (f16_at(b), f16_at(&b[2..]));
                let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                for j in 0..16 {
                    let lo = (b[8 + j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
                    let hi = (b[8 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
                    o[j] = d * lo as f32 + m;
                    o[j + 16] = d * hi as f32 + m;
                }
            }
        }
        DType::Q4_K | DType::Q5_K => {
            let five = dtype == DType::Q5_K;
            for (o, b) in out
                .chunks_exact_mut(QK_K)
                .zip(row.chunks_exact(dtype.block_bytes()))
            {
                kquant::dequantize_q45(b, five, o);
            }
        }
        DType::Q6_K => {
            for (o, b) in out.chunks_exact_mut(QK_K).zip(row.chunks_exact(210)) {
                kquant::dequantize_q6_k(b, o);
            }
        }
        DType::IQ4_NL => {
            for (o, b) in out.chunks_exact_mut(32).zip(row.chunks_exact(18)) {
                lowbit::dequantize_iq4_nl(b, o);
            }
        }
        lattice!() => {
            let bb = dtype.block_bytes();
            for (o, b) in out.chunks_exact_mut(QK_K).zip(row.chunks_exact(bb)) {
                crate::iquant::dequantize(dtype, b, o);
            }
        }
        DType::Q2_K | DType::Q3_K | DType::IQ4_XS => {
            let deq = match dtype {
                DType::Q2_K => lowbit::dequantize_q2_k,
                DType::Q3_K => lowbit::dequantize_q3_k,
                _ => lowbit::dequantize_iq4_xs,
            };
            let bb = dtype.block_bytes();
            for (o, b) in out.chunks_exact_mut(QK_K).zip(row.chunks_exact(bb)) {
                deq(b, o);
            }
        }
    }
}

/// A block's minimum and the scale (and its inverse, 0 for a constant block) that maps
/// `min..=max` onto quants `0..=top` (Q4_1, Q5_1).
fn min_scale(b: &[f32], top: f32) -> (f32, f32, f32) {
    let min = b.iter().fold(f32::INFINITY, |a, &v| a.min(v));
    let max = b.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let d = (max - min) / top;
    (min, d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// Quantizes an f32 row into `dtype`'s byte layout (length must be a multiple of the block
/// size). Used for test data and synthetic models, not on the inference path.
///
/// Panics for the lattice formats (`iquant`): ridge reads them but has no quantizer for them
/// (their test data are random blocks).
pub fn quantize_row(dtype: DType, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dtype.row_bytes(x.len()));
    match dtype {
        DType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        DType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        DType::BF16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        DType::Q8_0 => {
            for b in x.chunks_exact(32) {
                let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend(b.iter().map(|v| (v * id).round() as i8 as u8));
            }
        }
        DType::Q4_0 => {
            for b in x.chunks_exact(32) {
                let max = b
                    .iter()
                    .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
                for j in 0..16 {
                    out.push(q(b[j]) | (q(b[j + 16]) << 4));
                }
            }
        }
        DType::MXFP4 => {
            for b in x.chunks_exact(32) {
                let e = mxfp4_exponent(b);
                let d = e8m0_half(e);
                out.push(e);
                // The nearest representable magnitude (the smaller one at a tie), signed.
                let q = |v: f32| {
                    let a = v.abs() / d;
                    let m = [0.5f32, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0]
                        .iter()
                        .filter(|&&t| a > t)
                        .count() as u8;
                    if v < 0.0 && m > 0 {
                        m | 8
                    } else {
                        m
                    }
                };
                for j in 0..16 {
                    out.push(q(b[j]) | (q(b[j + 16]) << 4));
                }
            }
        }
        DType::Q4_1 => {
            for b in x.chunks_exact(32) {
                let (min, d, id) = min_scale(b, 15.0);
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
                for j in 0..16 {
                    out.push(q(b[j]) | (q(b[j + 16]) << 4));
                }
            }
        }
        DType::Q5_0 => {
            for b in x.chunks_exact(32) {
                let max = b
                    .iter()
                    .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = max / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q: Vec<u32> = b
                    .iter()
                    .map(|&v| ((v * id + 16.5) as i32).clamp(0, 31) as u32)
                    .collect();
                let qh = q
                    .iter()
                    .enumerate()
                    .fold(0u32, |a, (j, &v)| a | (v >> 4) << j);
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&qh.to_le_bytes());
                for j in 0..16 {
                    out.push((q[j] & 0x0F) as u8 | ((q[j + 16] & 0x0F) as u8) << 4);
                }
            }
        }
        DType::Q5_1 => {
            for b in x.chunks_exact(32) {
                let (min, d, id) = min_scale(b, 31.0);
                let q: Vec<u32> = b
                    .iter()
                    .map(|&v| (((v - min) * id + 0.5) as i32).clamp(0, 31) as u32)
                    .collect();
                let qh = q
                    .iter()
                    .enumerate()
                    .fold(0u32, |a, (j, &v)| a | (v >> 4) << j);
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                out.extend_from_slice(&qh.to_le_bytes());
                for j in 0..16 {
                    out.push((q[j] & 0x0F) as u8 | ((q[j + 16] & 0x0F) as u8) << 4);
                }
            }
        }
        DType::Q4_K | DType::Q5_K => {
            for b in x.chunks_exact(QK_K) {
                kquant::quantize_q45(b, dtype == DType::Q5_K, &mut out);
            }
        }
        DType::Q6_K => {
            for b in x.chunks_exact(QK_K) {
                kquant::quantize_q6_k(b, &mut out);
            }
        }
        DType::IQ4_NL => {
            for b in x.chunks_exact(32) {
                lowbit::quantize_iq4_nl(b, &mut out);
            }
        }
        lattice!() => {
            panic!("quantize_row: ridge has no quantizer for {dtype:?} (it computes with it)")
        }
        DType::Q2_K | DType::Q3_K | DType::IQ4_XS => {
            let quant = match dtype {
                DType::Q2_K => lowbit::quantize_q2_k,
                DType::Q3_K => lowbit::quantize_q3_k,
                _ => lowbit::quantize_iq4_xs,
            };
            for b in x.chunks_exact(QK_K) {
                quant(b, &mut out);
            }
        }
    }
    out
}

/// The smallest MXFP4 scale byte whose largest value (12 · 2^(e − 128)) covers the block's
/// largest magnitude, so nothing clips (2 for an all-zero block).
fn mxfp4_exponent(b: &[f32]) -> u8 {
    let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
    (2..=254u8)
        .find(|&e| 12.0 * e8m0_half(e) >= amax)
        .unwrap_or(254)
}
