//! Scalar reference dot products of the low-bit formats (Q2_K, Q3_K, IQ4_NL, IQ4_XS; layouts in
//! [`crate::lowbit`]) against 8- or 16-bit activation blocks and f32. The SIMD kernels are
//! tested against these.
//!
//! With integer activations each 32-element activation block meets one integer sum per weight
//! (sub-)block, scaled once: Q2_K and Q3_K fold their two 16-element sub-scales into that sum
//! (`Σ_h sc_h · Σ q·qx`, exact in i32), Q2_K's minimums go through the halves' activation sums.

use crate::act::blocks::IntActBlock;
use crate::fields::f16_at;
use crate::kquant::QK_K;
use crate::lowbit::{self as lb, IQ4_VALUES};

/// Q2_K row · 8- or 16-bit activations: per activation block `c`,
/// `d·dx·Σ_h sc_h·Σ q·qx − dmin·dx·Σ_h m_h·Σ qx`.
pub fn dot_q2_k<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, xs) in row.chunks_exact(lb::Q2_K_BYTES).zip(x.chunks_exact(8)) {
        let (d, dmin) = (f16_at(&b[lb::Q2_K_D..]), f16_at(&b[lb::Q2_K_D + 2..]));
        let qs = &b[lb::Q2_K_QS..];
        for (c, a) in xs.iter().enumerate() {
            let (mut s, mut m) = (0i32, 0i32);
            for h in 0..2 {
                let sc = b[2 * c + h];
                let (mut p, mut xsum) = (0i32, 0i32);
                for i in 16 * h..16 * h + 16 {
                    p += lb::low2(qs, 32 * c + i) as i32 * a.q(i);
                    xsum += a.q(i);
                }
                s += (sc & 0x0F) as i32 * p;
                m += (sc >> 4) as i32 * xsum;
            }
            sum += d * a.scale() * s as f32 - dmin * a.scale() * m as f32;
        }
    }
    sum
}

/// Q3_K row · 8- or 16-bit activations: per activation block `c`, `d·dx·Σ_h sc_h·Σ q·qx`.
pub fn dot_q3_k<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, xs) in row.chunks_exact(lb::Q3_K_BYTES).zip(x.chunks_exact(8)) {
        let d = f16_at(&b[lb::Q3_K_D..]);
        let sc = lb::q3_scales(b);
        for (c, a) in xs.iter().enumerate() {
            let mut s = 0i32;
            for h in 0..2 {
                let mut p = 0i32;
                for i in 16 * h..16 * h + 16 {
                    p += lb::q3(b, 32 * c + i) * a.q(i);
                }
                s += sc[2 * c + h] as i32 * p;
            }
            sum += d * a.scale() * s as f32;
        }
    }
    sum
}

/// IQ4_NL row · 8- or 16-bit activations.
pub fn dot_iq4_nl<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(lb::IQ4_NL_BYTES).zip(x) {
        let mut s = 0i32;
        for i in 0..32 {
            s += IQ4_VALUES[lb::iq4_code(&b[2..], i)] as i32 * a.q(i);
        }
        sum += f16_at(b) * a.scale() * s as f32;
    }
    sum
}

/// IQ4_XS row · 8- or 16-bit activations: per sub-block `j`, `(d·ls_j)·dx·Σ K[q]·qx`.
pub fn dot_iq4_xs<A: IntActBlock>(row: &[u8], x: &[A]) -> f32 {
    let mut sum = 0f32;
    for (b, xs) in row.chunks_exact(lb::IQ4_XS_BYTES).zip(x.chunks_exact(8)) {
        let d = f16_at(b);
        let ls = lb::iq4xs_scales(b);
        for (j, a) in xs.iter().enumerate() {
            let qs = &b[lb::IQ4_XS_QS + 16 * j..];
            let mut s = 0i32;
            for i in 0..32 {
                s += IQ4_VALUES[lb::iq4_code(qs, i)] as i32 * a.q(i);
            }
            sum += d * ls[j] as f32 * a.scale() * s as f32;
        }
    }
    sum
}

/// A super-block format's row · f32 activations: each super-block dequantized, then summed
/// in partial sums of 32 (as the SIMD kernels do: one running sum over a long row loses
/// digits that Q2_K's minimum terms make visible).
fn dot_super_f32(row: &[u8], x: &[f32], bb: usize, deq: fn(&[u8], &mut [f32])) -> f32 {
    let mut w = [0f32; QK_K];
    let mut sum = 0f32;
    for (b, xb) in row.chunks_exact(bb).zip(x.chunks_exact(QK_K)) {
        deq(b, &mut w);
        for (wc, xc) in w.chunks_exact(32).zip(xb.chunks_exact(32)) {
            sum += wc.iter().zip(xc).map(|(a, b)| a * b).sum::<f32>();
        }
    }
    sum
}

/// Q2_K row · f32 activations.
pub fn dot_q2_k_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_super_f32(row, x, lb::Q2_K_BYTES, lb::dequantize_q2_k)
}

/// Q3_K row · f32 activations.
pub fn dot_q3_k_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_super_f32(row, x, lb::Q3_K_BYTES, lb::dequantize_q3_k)
}

/// IQ4_XS row · f32 activations.
pub fn dot_iq4_xs_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_super_f32(row, x, lb::IQ4_XS_BYTES, lb::dequantize_iq4_xs)
}

/// IQ4_NL row · f32 activations.
pub fn dot_iq4_nl_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    let mut w = [0f32; 32];
    for (b, xb) in row.chunks_exact(lb::IQ4_NL_BYTES).zip(x.chunks_exact(32)) {
        lb::dequantize_iq4_nl(b, &mut w);
        sum += w.iter().zip(xb).map(|(a, b)| a * b).sum::<f32>();
    }
    sum
}

/// A lattice or ternary format's row (`iquant`) · 8- or 16-bit activations: per activation
/// block, `dx·(scale_lo·Σ_lo w·qx + scale_hi·Σ_hi w·qx)` over the decoded signed values.
pub fn dot_lattice<A: IntActBlock>(dtype: crate::DType, row: &[u8], x: &[A]) -> f32 {
    let mut w = [0i8; 32];
    let mut sum = 0f32;
    for (b, xs) in row.chunks_exact(dtype.block_bytes()).zip(x.chunks_exact(8)) {
        for (c, a) in xs.iter().enumerate() {
            let sc = crate::iquant::decode32(dtype, b, c, &mut w);
            let s: [i32; 2] =
                std::array::from_fn(|h| (16 * h..16 * h + 16).map(|i| w[i] as i32 * a.q(i)).sum());
            sum += a.scale() * (sc[0] * s[0] as f32 + sc[1] * s[1] as f32);
        }
    }
    sum
}

/// A lattice or ternary format's row · f32 activations.
pub fn dot_lattice_f32(dtype: crate::DType, row: &[u8], x: &[f32]) -> f32 {
    let mut w = [0f32; QK_K];
    let mut sum = 0f32;
    for (b, xb) in row
        .chunks_exact(dtype.block_bytes())
        .zip(x.chunks_exact(QK_K))
    {
        crate::iquant::dequantize(dtype, b, &mut w);
        for (wc, xc) in w.chunks_exact(32).zip(xb.chunks_exact(32)) {
            sum += wc.iter().zip(xc).map(|(a, b)| a * b).sum::<f32>();
        }
    }
    sum
}
