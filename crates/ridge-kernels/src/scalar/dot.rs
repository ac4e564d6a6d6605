//! Scalar reference dot products: one weight row (in its stored format) against one activation
//! row. Every SIMD path is tested against these.

use crate::act::blocks::IntActBlock;
use crate::blocks::{e8m0_half, f16_at, MXFP4_VALUES};
use crate::kquant::{self, QK_K};
use half::{bf16, f16};

/// Q8_0 row · 8- or 16-bit activations.
pub fn dot_q8_0<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(34).zip(x) {
        let mut s = 0i32;
        for (i, &w) in b[2..34].iter().enumerate() {
            s += (w as i8) as i32 * a.q(i);
        }
        sum += f16_at(b) * a.scale() * s as f32;
    }
    sum
}

/// Q4_0 row · 8- or 16-bit activations.
pub fn dot_q4_0<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(18).zip(x) {
        let mut s = 0i32;
        for j in 0..16 {
            s += (b[2 + j] & 0x0F) as i32 * a.q(j);
            s += (b[2 + j] >> 4) as i32 * a.q(j + 16);
        }
        sum += f16_at(b) * a.scale() * (s - 8 * a.qsum()) as f32;
    }
    sum
}

/// MXFP4 row · 8- or 16-bit activations.
pub fn dot_mxfp4<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let k = |q: u8| MXFP4_VALUES[q as usize] as i32;
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(17).zip(x) {
        let mut s = 0i32;
        for j in 0..16 {
            s += k(b[1 + j] & 0x0F) * a.q(j);
            s += k(b[1 + j] >> 4) * a.q(j + 16);
        }
        sum += e8m0_half(b[0]) * a.scale() * s as f32;
    }
    sum
}

/// Q4_1 row · 8- or 16-bit activations.
pub fn dot_q4_1<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(20).zip(x) {
        let mut s = 0i32;
        for j in 0..16 {
            s += (b[4 + j] & 0x0F) as i32 * a.q(j);
            s += (b[4 + j] >> 4) as i32 * a.q(j + 16);
        }
        sum += f16_at(b) * a.scale() * s as f32 + f16_at(&b[2..]) * a.scale() * a.qsum() as f32;
    }
    sum
}

/// F32 row · f32 activations.
pub fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    row.chunks_exact(4)
        .zip(x)
        .map(|(c, v)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * v)
        .sum()
}

/// F16 row · f32 activations.
pub fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    row.chunks_exact(2).zip(x).map(|(c, v)| f16_at(c) * v).sum()
}

/// BF16 row · f32 activations.
pub fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    row.chunks_exact(2)
        .zip(x)
        .map(|(c, v)| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v)
        .sum()
}

/// f16 vector · f32 vector (attention scores against the KV cache).
pub fn dot_f16_f32(k: &[f16], q: &[f32]) -> f32 {
    k.iter().zip(q).map(|(a, b)| a.to_f32() * b).sum()
}

/// `out += a · v` with `v` in f16 (attention's weighted sum of values).
pub fn axpy_f16(out: &mut [f32], a: f32, v: &[f16]) {
    for (o, x) in out.iter_mut().zip(v) {
        *o += a * x.to_f32();
    }
}

/// Q8_0 row · f32 activations (dequantized weights, no activation rounding).
pub fn dot_q8_0_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(34).zip(x.chunks_exact(32)) {
        let s: f32 = b[2..34]
            .iter()
            .zip(xb)
            .map(|(&w, v)| (w as i8) as f32 * v)
            .sum();
        sum += f16_at(b) * s;
    }
    sum
}

/// Q4_0 row · f32 activations.
pub fn dot_q4_0_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(18).zip(x.chunks_exact(32)) {
        let mut s = 0f32;
        for j in 0..16 {
            s += ((b[2 + j] & 0x0F) as i32 - 8) as f32 * xb[j];
            s += ((b[2 + j] >> 4) as i32 - 8) as f32 * xb[j + 16];
        }
        sum += f16_at(b) * s;
    }
    sum
}

/// MXFP4 row · f32 activations.
pub fn dot_mxfp4_f32(row: &[u8], x: &[f32]) -> f32 {
    let k = |q: u8| MXFP4_VALUES[q as usize] as f32;
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(17).zip(x.chunks_exact(32)) {
        let mut s = 0f32;
        for j in 0..16 {
            s += k(b[1 + j] & 0x0F) * xb[j];
            s += k(b[1 + j] >> 4) * xb[j + 16];
        }
        sum += e8m0_half(b[0]) * s;
    }
    sum
}

/// Q4_1 row · f32 activations.
pub fn dot_q4_1_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        let mut s = 0f32;
        for j in 0..16 {
            s += (b[4 + j] & 0x0F) as f32 * xb[j];
            s += (b[4 + j] >> 4) as f32 * xb[j + 16];
        }
        let xs: f32 = xb.iter().sum();
        sum += f16_at(b) * s + f16_at(&b[2..]) * xs;
    }
    sum
}

/// Q5_0 row · 8- or 16-bit activations.
pub fn dot_q5_0<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(22).zip(x) {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut s = 0i32;
        for j in 0..16 {
            let lo = (b[6 + j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
            let hi = (b[6 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
            s += lo as i32 * a.q(j) + hi as i32 * a.q(j + 16);
        }
        sum += f16_at(b) * a.scale() * (s - 16 * a.qsum()) as f32;
    }
    sum
}

/// Q5_1 row · 8- or 16-bit activations: `d·dx·Σq·qx + m·dx·Σqx` per block.
pub fn dot_q5_1<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(24).zip(x) {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut s = 0i32;
        for j in 0..16 {
            let lo = (b[8 + j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
            let hi = (b[8 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
            s += lo as i32 * a.q(j) + hi as i32 * a.q(j + 16);
        }
        sum += f16_at(b) * a.scale() * s as f32 + f16_at(&b[2..]) * a.scale() * a.qsum() as f32;
    }
    sum
}

/// Q4_K (`five == false`) or Q5_K row · 8- or 16-bit activations: per sub-block of 32,
/// `d·sc·dx·Σq·qx − dmin·m·dx·Σqx`.
fn dot_q45<A: IntActBlock>(row: &[u8], x: &[A], five: bool) -> f32 {
    let bb = if five { 176 } else { 144 };
    let mut sum = 0f32;
    for (b, xs) in row.chunks_exact(bb).zip(x.chunks_exact(8)) {
        let (d, dmin, sc, m, qh, qs) = kquant::split45(b, five);
        for (j, a) in xs.iter().enumerate() {
            let mut s = 0i32;
            for i in 0..32 {
                s += kquant::q45(qs, qh, j, i) as i32 * a.q(i);
            }
            sum += d * kquant::lane(sc, j) as f32 * a.scale() * s as f32
                - dmin * kquant::lane(m, j) as f32 * a.scale() * a.qsum() as f32;
        }
    }
    sum
}

/// Q4_K row · 8- or 16-bit activations.
pub fn dot_q4_k<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    dot_q45(row, x, false)
}

/// Q5_K row · 8- or 16-bit activations.
pub fn dot_q5_k<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    dot_q45(row, x, true)
}

/// Q6_K row · 8- or 16-bit activations: each activation block spans two 16-element
/// sub-blocks.
pub fn dot_q6_k<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, xs) in row.chunks_exact(210).zip(x.chunks_exact(8)) {
        let d = f16_at(&b[208..]);
        for (j, a) in xs.iter().enumerate() {
            let mut s = 0i32;
            for half in 0..2 {
                let k = 2 * j + half;
                let mut p = 0i32;
                for i in 16 * half..16 * half + 16 {
                    p += (kquant::q6(b, 32 * j + i) as i32 - 32) * a.q(i);
                }
                s += (b[192 + k] as i8) as i32 * p;
            }
            sum += d * a.scale() * s as f32;
        }
    }
    sum
}

/// A super-block format's row · f32 activations: each super-block dequantized, then summed.
fn dot_super_f32(row: &[u8], x: &[f32], bb: usize, deq: impl Fn(&[u8], &mut [f32])) -> f32 {
    let mut w = [0f32; QK_K];
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(bb).zip(x.chunks_exact(QK_K)) {
        deq(b, &mut w);
        sum += w.iter().zip(xb).map(|(a, b)| a * b).sum::<f32>();
    }
    sum
}

/// Q5_0 row · f32 activations.
pub fn dot_q5_0_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(22).zip(x.chunks_exact(32)) {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut s = 0f32;
        for j in 0..16 {
            let lo = (b[6 + j] & 0x0F) as i32 | (((qh >> j) & 1) << 4) as i32;
            let hi = (b[6 + j] >> 4) as i32 | (((qh >> (j + 16)) & 1) << 4) as i32;
            s += (lo - 16) as f32 * xb[j];
            s += (hi - 16) as f32 * xb[j + 16];
        }
        sum += f16_at(b) * s;
    }
    sum
}

/// Q5_1 row · f32 activations.
pub fn dot_q5_1_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    let mut w = [0f32; 32];
    for (b, xb) in row.chunks_exact(24).zip(x.chunks_exact(32)) {
        crate::blocks::dequantize_row(crate::DType::Q5_1, b, &mut w);
        sum += w.iter().zip(xb).map(|(a, b)| a * b).sum::<f32>();
    }
    sum
}

/// Q4_K row · f32 activations.
pub fn dot_q4_k_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_super_f32(row, x, 144, |b, w| kquant::dequantize_q45(b, false, w))
}

/// Q5_K row · f32 activations.
pub fn dot_q5_k_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_super_f32(row, x, 176, |b, w| kquant::dequantize_q45(b, true, w))
}

/// Q6_K row · f32 activations.
pub fn dot_q6_k_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_super_f32(row, x, 210, kquant::dequantize_q6_k)
}
