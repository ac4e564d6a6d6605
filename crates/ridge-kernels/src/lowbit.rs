//! The low-bit formats people download to fit big mixtures in RAM: the 2- and 3-bit k-quants
//! (Q2_K, Q3_K) and the non-linear 4-bit formats (IQ4_NL, IQ4_XS) — byte layouts, scalar
//! dequantization (bit-exact with the `gguf` Python package's, which the fixtures in
//! `tests/data/` come from) and simple quantizers for test data and synthetic models.
//!
//! Layouts (little-endian, as in GGUF). In the two k-quants, element `e` (0..256) of a
//! super-block takes its two low bits from byte `32·(e / 128) + e % 32` of `qs`, shifted right
//! by `2·((e % 128) / 32)`; so each 32-element activation block `c = e / 32` reads one 32-byte
//! group of `qs` at one shift, and its two halves are sub-blocks `2c` and `2c + 1` of 16.
//! - Q2_K, 84 bytes: `scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16`. Sub-block `k` has
//!   a 4-bit scale (low nibble of `scales[k]`) and a 4-bit minimum (high nibble); x =
//!   `d·sc_k·q − dmin·m_k`, q in 0..4.
//! - Q3_K, 110 bytes: `hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16`. Element `e`'s
//!   third bit is bit `e / 32` of `hmask[e % 32]`; q = low bits − 4 where that bit is clear
//!   (q in −4..4). Sixteen 6-bit scales: low nibbles from `scales[k % 8] >> 4·(k / 8)`, top
//!   two bits from `scales[8 + k % 4] >> 2·(k / 4)`, stored with an offset of 32; x =
//!   `d·(sc_k − 32)·q`.
//! - IQ4_NL, 18 bytes: `d: f16, qs: [u8; 16]`, nibbles as Q4_0's (element j < 16 low nibble
//!   of `qs[j]`, j + 16 its high nibble), x = `d·K[q]` with [`IQ4_VALUES`] the sixteen
//!   non-uniform levels.
//! - IQ4_XS, 136 bytes: `d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]`; eight
//!   sub-blocks of 32, sub-block `j`'s quants laid out as an IQ4_NL block in `qs[16j..16j +
//!   16]` and its 6-bit scale `ls_j` = `(scales_l[j / 2] >> 4·(j % 2)) & 15 | ((scales_h >>
//!   2j) & 3) << 4`; x = `d·(ls_j − 32)·K[q]`.

use crate::fields::f16_at;
use crate::kquant::QK_K;
use crate::DType;
use half::f16;

/// The sixteen levels of IQ4_NL and IQ4_XS (a non-uniform grid fitted to weight
/// distributions; the value of code `q` is `K[q]` times the block's scale).
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Bytes of one block of each format.
pub(crate) const Q2_K_BYTES: usize = 84;
/// See [`Q2_K_BYTES`].
pub(crate) const Q3_K_BYTES: usize = 110;
/// See [`Q2_K_BYTES`].
pub(crate) const IQ4_NL_BYTES: usize = 18;
/// See [`Q2_K_BYTES`].
pub(crate) const IQ4_XS_BYTES: usize = 136;

/// Offsets of the fields inside a Q2_K super-block.
pub(crate) const Q2_K_QS: usize = 16;
/// See [`Q2_K_QS`].
pub(crate) const Q2_K_D: usize = 80;
/// Offsets of the fields inside a Q3_K super-block.
pub(crate) const Q3_K_QS: usize = 32;
/// See [`Q3_K_QS`].
pub(crate) const Q3_K_SCALES: usize = 96;
/// See [`Q3_K_QS`].
pub(crate) const Q3_K_D: usize = 108;
/// Offset of the quants inside an IQ4_XS super-block.
pub(crate) const IQ4_XS_QS: usize = 8;

/// The two low bits of element `e` of a Q2_K/Q3_K super-block whose `qs` is given.
#[inline(always)]
pub(crate) fn low2(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3
}

/// The Q3_K quant of element `e` (−4..4) of the super-block `b`.
#[inline(always)]
pub(crate) fn q3(b: &[u8], e: usize) -> i32 {
    let high = (b[e % 32] >> (e / 32)) & 1;
    low2(&b[Q3_K_QS..], e) as i32 - if high == 0 { 4 } else { 0 }
}

/// The sixteen Q3_K sub-block scales of `b`, offset removed (−32..32).
#[inline(always)]
pub(crate) fn q3_scales(b: &[u8]) -> [i8; 16] {
    let s = &b[Q3_K_SCALES..Q3_K_SCALES + 12];
    std::array::from_fn(|k| {
        let lo = (s[k % 8] >> (4 * (k / 8))) & 0x0F;
        let hi = (s[8 + k % 4] >> (2 * (k / 4))) & 0x03;
        (lo | hi << 4) as i8 - 32
    })
}

/// The eight IQ4_XS sub-block scales of `b`, offset removed (−32..32).
#[inline(always)]
pub(crate) fn iq4xs_scales(b: &[u8]) -> [i8; 8] {
    let h = u16::from_le_bytes([b[2], b[3]]);
    std::array::from_fn(|j| {
        let lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
        let hi = ((h >> (2 * j)) & 3) as u8;
        (lo | hi << 4) as i8 - 32
    })
}

/// The IQ4 code of element `i` (0..32) of a 16-byte nibble group.
#[inline(always)]
pub(crate) fn iq4_code(qs: &[u8], i: usize) -> usize {
    ((qs[i % 16] >> (4 * (i / 16))) & 0x0F) as usize
}

/// Dequantizes one Q2_K super-block into `out` (256 values).
pub(crate) fn dequantize_q2_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(&b[Q2_K_D..]), f16_at(&b[Q2_K_D + 2..]));
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        let sc = b[e / 16];
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *o = dl * low2(&b[Q2_K_QS..], e) as f32 - ml;
    }
}

/// Dequantizes one Q3_K super-block into `out` (256 values).
pub(crate) fn dequantize_q3_k(b: &[u8], out: &mut [f32]) {
    let d = f16_at(&b[Q3_K_D..]);
    let sc = q3_scales(b);
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        *o = d * sc[e / 16] as f32 * q3(b, e) as f32;
    }
}

/// Dequantizes one IQ4_NL block into `out` (32 values).
pub(crate) fn dequantize_iq4_nl(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b);
    for (i, o) in out.iter_mut().enumerate().take(32) {
        *o = d * IQ4_VALUES[iq4_code(&b[2..], i)] as f32;
    }
}

/// Dequantizes one IQ4_XS super-block into `out` (256 values).
pub(crate) fn dequantize_iq4_xs(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b);
    let ls = iq4xs_scales(b);
    for j in 0..8 {
        let dl = d * ls[j] as f32;
        let qs = &b[IQ4_XS_QS + 16 * j..];
        for i in 0..32 {
            out[32 * j + i] = dl * IQ4_VALUES[iq4_code(qs, i)] as f32;
        }
    }
}

/// Activation block `c` (values `32c..32c + 32`) of a Q2_K, Q3_K or IQ4_XS super-block, or
/// of a lattice format (`iquant`), as signed bytes `w` with per-half scales and minimums:
/// value = `scale[i / 16] · w[i] − min[i / 16]` (the minimum is Q2_K's; zero elsewhere). The
/// 16-bit integer kernels multiply through this form.
pub fn decode32(dtype: DType, b: &[u8], c: usize, w: &mut [i8; 32]) -> ([f32; 2], [f32; 2]) {
    match dtype {
        DType::Q2_K => {
            let (d, dmin) = (f16_at(&b[Q2_K_D..]), f16_at(&b[Q2_K_D + 2..]));
            for (i, o) in w.iter_mut().enumerate() {
                *o = low2(&b[Q2_K_QS..], 32 * c + i) as i8;
            }
            let sc = [b[2 * c], b[2 * c + 1]];
            (
                sc.map(|s| d * (s & 0x0F) as f32),
                sc.map(|s| dmin * (s >> 4) as f32),
            )
        }
        DType::Q3_K => {
            let d = f16_at(&b[Q3_K_D..]);
            for (i, o) in w.iter_mut().enumerate() {
                *o = q3(b, 32 * c + i) as i8;
            }
            let sc = q3_scales(b);
            ([sc[2 * c], sc[2 * c + 1]].map(|s| d * s as f32), [0.0; 2])
        }
        DType::IQ4_XS => {
            let qs = &b[IQ4_XS_QS + 16 * c..];
            for (i, o) in w.iter_mut().enumerate() {
                *o = IQ4_VALUES[iq4_code(qs, i)];
            }
            let dl = f16_at(b) * iq4xs_scales(b)[c] as f32;
            ([dl, dl], [0.0; 2])
        }
        _ => (crate::iquant::decode32(dtype, b, c, w), [0.0; 2]),
    }
}

/// Rounds to f16 and back.
fn f16r(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// The largest magnitude of `x`.
fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |a, v| a.max(v.abs()))
}

/// The IQ4 code whose level is nearest `v` (in units of the block scale).
fn nearest_iq4(v: f32) -> u8 {
    let mut best = 0;
    for (q, &k) in IQ4_VALUES.iter().enumerate() {
        if (v - k as f32).abs() < (v - IQ4_VALUES[best] as f32).abs() {
            best = q;
        }
    }
    best as u8
}

/// Packs 32 codes as IQ4_NL/IQ4_XS nibbles (element j low nibble of byte j, j + 16 high).
fn push_nibbles(q: &[u8], out: &mut Vec<u8>) {
    for j in 0..16 {
        out.push(q[j] | q[j + 16] << 4);
    }
}

/// Packs 256 two-bit values into a Q2_K/Q3_K `qs` (see the module docs).
fn push_low2(q: &[u8; QK_K], out: &mut Vec<u8>) {
    let mut qs = [0u8; 64];
    for (e, &v) in q.iter().enumerate() {
        qs[32 * (e / 128) + e % 32] |= (v & 3) << (2 * ((e % 128) / 32));
    }
    out.extend_from_slice(&qs);
}

/// Quantizes 256 values as Q2_K. Not optimal (no search): each sub-block of 16 spans
/// `[min(x, 0), max(x)]` with scales and minimums rounded up so the range is representable.
pub(crate) fn quantize_q2_k(x: &[f32], out: &mut Vec<u8>) {
    let mut step = [0f32; 16];
    let mut neg_min = [0f32; 16];
    for k in 0..16 {
        let b = &x[16 * k..16 * k + 16];
        let lo = b.iter().fold(0f32, |a, &v| a.min(v));
        let hi = b.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        step[k] = (hi - lo) / 3.0;
        neg_min[k] = -lo;
    }
    let d = f16r(step.iter().fold(0f32, |a, &v| a.max(v)) / 15.0);
    let dmin = f16r(neg_min.iter().fold(0f32, |a, &v| a.max(v)) / 15.0);
    let mut scales = [0u8; 16];
    let mut q = [0u8; QK_K];
    for k in 0..16 {
        let sc = if d > 0.0 {
            (step[k] / d).ceil().clamp(0.0, 15.0)
        } else {
            0.0
        };
        let m = if dmin > 0.0 {
            (neg_min[k] / dmin).ceil().clamp(0.0, 15.0)
        } else {
            0.0
        };
        scales[k] = sc as u8 | (m as u8) << 4;
        let (scale, min) = (d * sc, dmin * m);
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for e in 16 * k..16 * k + 16 {
            q[e] = ((x[e] + min) * inv).round().clamp(0.0, 3.0) as u8;
        }
    }
    out.extend_from_slice(&scales);
    push_low2(&q, out);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(dmin).to_le_bytes());
}

/// Quantizes 256 values as Q3_K: each sub-block of 16 gets the (positive) scale that maps its
/// largest magnitude to 3 (q reaches −4 but only +3), rounded up.
pub(crate) fn quantize_q3_k(x: &[f32], out: &mut Vec<u8>) {
    let step: [f32; 16] = std::array::from_fn(|k| amax(&x[16 * k..16 * k + 16]) / 3.0);
    let d = f16r(step.iter().fold(0f32, |a, &v| a.max(v)) / 31.0);
    let mut sc = [0u8; 16];
    let mut q = [0u8; QK_K];
    let mut hmask = [0u8; 32];
    for k in 0..16 {
        let s = if d > 0.0 {
            (step[k] / d).ceil().clamp(0.0, 31.0)
        } else {
            0.0
        };
        sc[k] = s as u8 + 32;
        let inv = if s > 0.0 { 1.0 / (d * s) } else { 0.0 };
        for e in 16 * k..16 * k + 16 {
            let v = (x[e] * inv).round().clamp(-4.0, 3.0) as i32 + 4;
            q[e] = (v & 3) as u8;
            hmask[e % 32] |= ((v >> 2) as u8 & 1) << (e / 32);
        }
    }
    out.extend_from_slice(&hmask);
    push_low2(&q, out);
    let mut s = [0u8; 12];
    for k in 0..16 {
        s[k % 8] |= (sc[k] & 0x0F) << (4 * (k / 8));
        s[8 + k % 4] |= (sc[k] >> 4) << (2 * (k / 4));
    }
    out.extend_from_slice(&s);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
}

/// Quantizes 32 values as IQ4_NL: the scale maps the largest magnitude onto −127 (with its
/// sign), each value takes the nearest level.
pub(crate) fn quantize_iq4_nl(x: &[f32], out: &mut Vec<u8>) {
    let max = x
        .iter()
        .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
    let d = f16r(max / -127.0);
    let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q: Vec<u8> = x.iter().map(|&v| nearest_iq4(v * inv)).collect();
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    push_nibbles(&q, out);
}

/// Quantizes 256 values as IQ4_XS: per sub-block the signed scale that maps its largest
/// magnitude onto −127, quantized to 6 bits against the super-block scale.
pub(crate) fn quantize_iq4_xs(x: &[f32], out: &mut Vec<u8>) {
    let step: [f32; 8] = std::array::from_fn(|j| {
        let b = &x[32 * j..32 * j + 32];
        b.iter()
            .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a })
            / -127.0
    });
    let d = f16r(step.iter().fold(0f32, |a, v| a.max(v.abs())) / 31.0);
    let ls: [i32; 8] = std::array::from_fn(|j| {
        if d > 0.0 {
            (step[j] / d).round().clamp(-32.0, 31.0) as i32
        } else {
            0
        }
    });
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    let u = ls.map(|l| (l + 32) as u16);
    let h = (0..8).fold(0u16, |a, j| a | (u[j] >> 4) << (2 * j));
    out.extend_from_slice(&h.to_le_bytes());
    for p in 0..4 {
        out.push((u[2 * p] & 0x0F) as u8 | ((u[2 * p + 1] & 0x0F) as u8) << 4);
    }
    for j in 0..8 {
        let scale = d * ls[j] as f32;
        let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        let q: Vec<u8> = x[32 * j..32 * j + 32]
            .iter()
            .map(|&v| nearest_iq4(v * inv))
            .collect();
        push_nibbles(&q, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizers_round_trip_within_a_step() {
        let x: Vec<f32> = (0..QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let mut out = [0f32; QK_K];
        for (name, bytes, deq, tol) in [
            (
                "q2_k",
                Q2_K_BYTES,
                dequantize_q2_k as fn(&[u8], &mut [f32]),
                0.45,
            ),
            ("q3_k", Q3_K_BYTES, dequantize_q3_k, 0.25),
            ("iq4_xs", IQ4_XS_BYTES, dequantize_iq4_xs, 0.15),
        ] {
            let mut b = Vec::new();
            match name {
                "q2_k" => quantize_q2_k(&x, &mut b),
                "q3_k" => quantize_q3_k(&x, &mut b),
                _ => quantize_iq4_xs(&x, &mut b),
            }
            assert_eq!(b.len(), bytes, "{name}");
            deq(&b, &mut out);
            for (e, (a, w)) in out.iter().zip(&x).enumerate() {
                assert!((a - w).abs() <= tol, "{name} element {e}: {a} vs {w}");
            }
        }
        let mut b = Vec::new();
        quantize_iq4_nl(&x[..32], &mut b);
        assert_eq!(b.len(), IQ4_NL_BYTES);
        dequantize_iq4_nl(&b, &mut out[..32]);
        for (a, w) in out[..32].iter().zip(&x) {
            assert!((a - w).abs() <= 0.15, "iq4_nl: {a} vs {w}");
        }
    }
}
