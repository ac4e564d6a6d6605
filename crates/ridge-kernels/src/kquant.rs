//! The k-quant super-block formats (Q4_K, Q5_K, Q6_K): byte layouts, scalar dequantization and
//! simple quantizers. A super-block holds 256 elements in sub-blocks whose scales are
//! themselves quantized against f16 super-block scales.
//!
//! Layouts (little-endian; worked out from the `gguf` Python package's dequantizer, which the
//! fixtures in `tests/data/` come from):
//! - Q4_K, 144 bytes: `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]`. Eight sub-blocks of
//!   32; sub-block `j` has a 6-bit scale `sc[j]` and a 6-bit minimum `m[j]` packed in `scales`
//!   (see `scales_mins`); x = `d·sc[j]·q − dmin·m[j]`. The quants come in four 32-byte groups:
//!   group `g` holds sub-block `2g` in its low nibbles and `2g + 1` in its high nibbles, element
//!   `i` of each in byte `i`.
//! - Q5_K, 176 bytes: `d, dmin, scales` as Q4_K, then `qh: [u8; 32]`, then `qs: [u8; 128]` laid
//!   out as Q4_K's. Element `i` of sub-block `j` takes bit `j` of `qh[i]` as its fifth (top)
//!   bit, q in 0..32.
//! - Q6_K, 210 bytes: `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`. Two halves of 128
//!   elements; in half `h`, element `l` (0..128) has low bits `(ql[64h + l % 64] >> 4·(l / 64))
//!   & 15` and high bits `(qh[32h + l % 32] >> 2·(l / 32)) & 3`; q in 0..64, sixteen sub-blocks of
//!   16 with int8 scales, x = d·scales[e / 16]·(q − 32) for element `e`.

use crate::fields::f16_at;
use half::f16;

/// Elements per super-block.
pub const QK_K: usize = 256;

/// Unpacks the 12 bytes of Q4_K/Q5_K sub-block scales and minimums (6 bits each, eight of
/// each). Bytes 0..4 hold scales 0..4 in their low 6 bits and the top two bits of scales 4..8
/// in bits 6..8; bytes 4..8 do the same for the minimums; bytes 8..12 hold the low 4 bits of
/// scales 4..8 (low nibble) and minimums 4..8 (high nibble). Returned as little-endian byte
/// lanes: byte `j` of the first u64 is `sc[j]`, of the second `m[j]`.
#[inline(always)]
pub(crate) fn scales_mins(s: &[u8]) -> (u64, u64) {
    let a = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let b = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let c = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let sc_lo = a & 0x3f3f_3f3f;
    let sc_hi = (c & 0x0f0f_0f0f) | ((a >> 2) & 0x3030_3030);
    let m_lo = b & 0x3f3f_3f3f;
    let m_hi = ((c >> 4) & 0x0f0f_0f0f) | ((b >> 2) & 0x3030_3030);
    (
        sc_lo as u64 | (sc_hi as u64) << 32,
        m_lo as u64 | (m_hi as u64) << 32,
    )
}

/// The inverse of [`scales_mins`]: packs eight 6-bit scales and minimums into 12 bytes.
pub(crate) fn pack_scales_mins(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[4 + j] = m[j] | ((m[j + 4] >> 4) << 6);
        s[8 + j] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
    }
    s
}

/// The 6-bit value `j` of an unpacked [`scales_mins`] lane word.
#[inline(always)]
pub(crate) fn lane(v: u64, j: usize) -> u8 {
    (v >> (8 * j)) as u8
}

/// The 4- or 5-bit quant `i` (0..32) of sub-block `j` (0..8) of a Q4_K (`qh` empty) or Q5_K
/// super-block.
#[inline(always)]
pub(crate) fn q45(qs: &[u8], qh: &[u8], j: usize, i: usize) -> u8 {
    let lo = (qs[32 * (j / 2) + i] >> (4 * (j % 2))) & 0x0F;
    if qh.is_empty() {
        lo
    } else {
        lo | (((qh[i] >> j) & 1) << 4)
    }
}

/// The 6-bit quant (0..64) of element `e` (0..256) of a Q6_K super-block.
#[inline(always)]
pub(crate) fn q6(b: &[u8], e: usize) -> u8 {
    let (h, l) = (e / 128, e % 128);
    let lo = (b[64 * h + l % 64] >> (4 * (l / 64))) & 0x0F;
    let hi = (b[128 + 32 * h + l % 32] >> (2 * (l / 32))) & 0x03;
    lo | (hi << 4)
}

/// Byte offset of the quants (and of Q5_K's high bits) in a Q4_K/Q5_K super-block.
pub(crate) const Q45_QH: usize = 16;

/// Splits a Q4_K (`five == false`) or Q5_K super-block into `(d, dmin, sc, m, qh, qs)`.
#[inline(always)]
pub(crate) fn split45(b: &[u8], five: bool) -> (f32, f32, u64, u64, &[u8], &[u8]) {
    let (sc, m) = scales_mins(&b[4..16]);
    let (qh, qs) = if five {
        (&b[Q45_QH..Q45_QH + 32], &b[Q45_QH + 32..Q45_QH + 160])
    } else {
        (&b[..0], &b[Q45_QH..Q45_QH + 128])
    };
    (f16_at(b), f16_at(&b[2..]), sc, m, qh, qs)
}

/// Dequantizes one Q4_K or Q5_K super-block into `out` (256 values).
pub(crate) fn dequantize_q45(b: &[u8], five: bool, out: &mut [f32]) {
    let (d, dmin, sc, m, qh, qs) = split45(b, five);
    for j in 0..8 {
        let scale = d * lane(sc, j) as f32;
        let min = dmin * lane(m, j) as f32;
        for i in 0..32 {
            out[32 * j + i] = scale * q45(qs, qh, j, i) as f32 - min;
        }
    }
}

/// Dequantizes one Q6_K super-block into `out` (256 values).
pub(crate) fn dequantize_q6_k(b: &[u8], out: &mut [f32]) {
    let d = f16_at(&b[208..]);
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        let scale = d * b[192 + e / 16] as i8 as f32;
        *o = scale * (q6(b, e) as i32 - 32) as f32;
    }
}

/// Rounds to f16 and back.
fn f16r(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Quantizes 256 values as Q4_K (`five == false`) or Q5_K, appending the super-block to `out`.
/// Not optimal (no search for the best scales): each sub-block spans `[min(x, 0), max(x)]`,
/// sub-block scales and minimums are rounded up so that the range is always representable.
pub(crate) fn quantize_q45(x: &[f32], five: bool, out: &mut Vec<u8>) {
    let levels = if five { 31.0 } else { 15.0 };
    let mut step = [0f32; 8];
    let mut neg_min = [0f32; 8];
    for j in 0..8 {
        let b = &x[32 * j..32 * (j + 1)];
        let lo = b.iter().fold(0f32, |a, &v| a.min(v));
        let hi = b.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        step[j] = (hi - lo) / levels;
        neg_min[j] = -lo;
    }
    let d = f16r(step.iter().fold(0f32, |a, &v| a.max(v)) / 63.0);
    let dmin = f16r(neg_min.iter().fold(0f32, |a, &v| a.max(v)) / 63.0);
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        if d > 0.0 {
            sc[j] = (step[j] / d).ceil().clamp(0.0, 63.0) as u8;
        }
        if dmin > 0.0 {
            m[j] = (neg_min[j] / dmin).ceil().clamp(0.0, 63.0) as u8;
        }
    }
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(dmin).to_le_bytes());
    out.extend_from_slice(&pack_scales_mins(&sc, &m));
    let mut q = [0u8; QK_K];
    for j in 0..8 {
        let scale = d * sc[j] as f32;
        let min = dmin * m[j] as f32;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for i in 0..32 {
            let v = ((x[32 * j + i] + min) * inv).round();
            q[32 * j + i] = v.clamp(0.0, levels) as u8;
        }
    }
    if five {
        let mut qh = [0u8; 32];
        for j in 0..8 {
            for i in 0..32 {
                qh[i] |= (q[32 * j + i] >> 4) << j;
            }
        }
        out.extend_from_slice(&qh);
    }
    for g in 0..4 {
        for i in 0..32 {
            let lo = q[64 * g + i] & 0x0F;
            let hi = q[64 * g + 32 + i] & 0x0F;
            out.push(lo | (hi << 4));
        }
    }
}

/// Quantizes 256 values as Q6_K, appending the super-block to `out`. Each sub-block of 16 gets
/// the scale that maps its largest magnitude to 31 (rounded up, so nothing clips).
pub(crate) fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut step = [0f32; 16];
    for (k, s) in step.iter_mut().enumerate() {
        *s = x[16 * k..16 * (k + 1)]
            .iter()
            .fold(0f32, |a, v| a.max(v.abs()))
            / 31.0;
    }
    let d = f16r(step.iter().fold(0f32, |a, &v| a.max(v)) / 127.0);
    let mut sc = [0i8; 16];
    if d > 0.0 {
        for k in 0..16 {
            sc[k] = (step[k] / d).ceil().clamp(0.0, 127.0) as i8;
        }
    }
    let mut q = [0u8; QK_K];
    for (e, qe) in q.iter_mut().enumerate() {
        let scale = d * sc[e / 16] as f32;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        *qe = ((x[e] * inv).round().clamp(-32.0, 31.0) as i32 + 32) as u8;
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for (e, &qe) in q.iter().enumerate() {
        let (h, l) = (e / 128, e % 128);
        ql[64 * h + l % 64] |= (qe & 0x0F) << (4 * (l / 64));
        qh[32 * h + l % 32] |= (qe >> 4) << (2 * (l / 32));
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_packing_round_trips() {
        // Every 6-bit value in every position survives packing and unpacking.
        for v in 0..64u8 {
            let sc: [u8; 8] = std::array::from_fn(|j| (v + j as u8 * 7) % 64);
            let m: [u8; 8] = std::array::from_fn(|j| (v + j as u8 * 13 + 1) % 64);
            let (a, b) = scales_mins(&pack_scales_mins(&sc, &m));
            for j in 0..8 {
                assert_eq!(lane(a, j), sc[j]);
                assert_eq!(lane(b, j), m[j]);
            }
        }
    }
}
