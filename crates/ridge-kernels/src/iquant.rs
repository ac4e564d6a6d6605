//! The lattice formats (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and the ternary
//! ones (TQ1_0, TQ2_0): super-blocks of 256 whose values are small integers from a codebook
//! (`iq_grids`) or a base-3 packing, times a float scale per 16 or 32 values.
//!
//! One shape serves every kernel: [`decode32`] turns the 32 values of activation block `c` of a
//! super-block into signed bytes `w` and the scales of its two halves, with value =
//! `scale[i / 16] · w[i]`. That is exact: dequantization gives the same bits as the `gguf`
//! Python package (the fixtures in `tests/data/` check it), and the integer kernels multiply
//! `w` into 8-bit activations as they do any signed weights. (IQ1's values are `g ± 1/8` for
//! a grid value g in −1..=1: `w = 8g ± 1` with the scale divided by 8, a power of two.)
//!
//! Layouts (little-endian; `d` is an f16 super-block scale; a "sign byte" negates element k
//! of its group of 8 where bit k is set):
//! - IQ2_XXS, 66 bytes: `d, qs: [u32; 64]` as 8 pairs per 32 values: the first word's four
//!   bytes index `iq_grids::IQ2XXS_GRID` (8 values each), the second holds four 7-bit
//!   sign indices (bit 7 of the sign byte makes the parity even) and the 4-bit scale `s` in its
//!   top bits: scale `d·(0.5 + s)·0.25`.
//! - IQ2_XS, 74 bytes: `d, qs: [u16; 32], scales: [u8; 8]`: each u16 is a 9-bit grid index
//!   and a 7-bit sign index for 8 values; a 4-bit scale per 16 values (low nibble first).
//! - IQ2_S, 82 bytes: `d, qs: [u8; 32], signs: [u8; 32], qh: [u8; 8], scales: [u8; 8]`: a
//!   10-bit grid index per 8 values (two bits from `qh`), one sign byte each, 4-bit scales per
//!   16 values.
//! - IQ3_XXS, 98 bytes: `d, qs: [u8; 64], aux: [u32; 8]`: a grid index per 4 values; per 32
//!   values one word of four 7-bit sign indices and a 4-bit scale: `d·(0.5 + s)·0.5`.
//! - IQ3_S, 110 bytes: `d, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4]`: a
//!   9-bit grid index per 4 values (one bit from `qh`), sign bytes, a 4-bit scale per 32
//!   values: `d·(1 + 2s)`.
//! - IQ1_S, 50 bytes: `d, qs: [u8; 32], qh: [u16; 8]`: per 32 values one `qh` word holds four
//!   3-bit high parts of 11-bit grid indices, a 3-bit scale `s` (`d·(2s + 1)`) and the sign of
//!   the shift ±1/8 (bit 15 set: −).
//! - IQ1_M, 56 bytes: `qs: [u8; 32], qh: [u8; 16], scales: [u16; 4]`: per 8 values a grid
//!   index from `qs` and a `qh` nibble (3 high bits, and bit 3 the shift's sign), 3-bit scales
//!   per 16 values in the scale words' low 12 bits, and `d` (f16) spread over their top nibbles.
//! - TQ1_0, 54 bytes: `qs: [u8; 48], qh: [u8; 4], d`: five base-3 digits per byte of `qs`
//!   (four per byte of `qh`), digit k of byte b read as `((b·3^k mod 256)·3) >> 8`; value
//!   `d·(digit − 1)`. Bytes 0..32 hold elements `32k + i`, bytes 32..48 `160 + 16k + i`, `qh`
//!   `240 + 4k + i`.
//! - TQ2_0, 66 bytes: `qs: [u8; 64], d`: two bits per value laid out as Q2_K's, value
//!   `d·(q − 1)`.

use crate::dtype::lattice;
use crate::fields::f16_at;
use crate::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::kquant::QK_K;
use crate::DType;

/// The sign byte of a 7-bit sign index: its bits, and bit 7 set where they are odd in number
/// (the formats store only sign patterns of even parity).
#[inline(always)]
pub(crate) fn ksign(i: u32) -> u8 {
    let i = (i & 0x7F) as u8;
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// Eight grid bytes (little-endian in `g`) into `w`, negated where `signs` has a bit set.
#[inline(always)]
fn put8(w: &mut [i8], g: u64, signs: u8) {
    for (k, o) in w.iter_mut().enumerate().take(8) {
        let v = (g >> (8 * k)) as u8 as i8;
        *o = if signs >> k & 1 != 0 { -v } else { v };
    }
}

/// Four grid bytes (little-endian in `g`) into `w`, negated where `signs` (4 bits) says.
#[inline(always)]
fn put4(w: &mut [i8], g: u32, signs: u8) {
    for (k, o) in w.iter_mut().enumerate().take(4) {
        let v = (g >> (8 * k)) as u8 as i8;
        *o = if signs >> k & 1 != 0 { -v } else { v };
    }
}

/// The little-endian u32 at `b[o..o + 4]`.
#[inline(always)]
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// The little-endian u16 at `b[o..o + 2]`.
#[inline(always)]
pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// Whether `dtype` is one of this module's formats.
pub fn is_lattice(dtype: DType) -> bool {
    matches!(dtype, lattice!())
}

/// Base-3 digit `k` of byte `q` as TQ1_0 stores it (0..3).
#[inline(always)]
fn trit(q: u8, k: u32) -> i8 {
    let p = q.wrapping_mul(3u8.pow(k));
    ((p as u16 * 3) >> 8) as i8
}

/// IQ1_M's super-block scale, spread over the top nibbles of its four scale words.
#[inline(always)]
fn iq1m_d(b: &[u8]) -> f32 {
    let s = |k: usize| u16_at(b, 48 + 2 * k);
    let bits = (s(0) >> 12) | ((s(1) >> 8) & 0x00F0) | ((s(2) >> 4) & 0x0F00) | (s(3) & 0xF000);
    half::f16::from_bits(bits).to_f32()
}

/// Activation block `c` (values `32c..32c + 32`) of the super-block `b` of `dtype` (one of
/// [`is_lattice`]'s formats): its values as signed bytes in `w`, and the scales of its halves
/// (values 0..16 and 16..32), value = `scale[i / 16] · w[i]`.
pub fn decode32(dtype: DType, b: &[u8], c: usize, w: &mut [i8; 32]) -> [f32; 2] {
    match dtype {
        DType::IQ2_XXS => {
            let (grid, aux) = (u32_at(b, 2 + 8 * c), u32_at(b, 6 + 8 * c));
            for l in 0..4 {
                let g = IQ2XXS_GRID[(grid >> (8 * l) & 0xFF) as usize];
                put8(&mut w[8 * l..], g, ksign(aux >> (7 * l)));
            }
            let db = f16_at(b) * (0.5 + (aux >> 28) as f32) * 0.25;
            [db, db]
        }
        DType::IQ2_XS => {
            for l in 0..4 {
                let q = u16_at(b, 2 + 2 * (4 * c + l));
                let g = IQ2XS_GRID[(q & 511) as usize];
                put8(&mut w[8 * l..], g, ksign((q >> 9) as u32));
            }
            let s = b[66 + c];
            let d = f16_at(b);
            [s & 0x0F, s >> 4].map(|v| d * (0.5 + v as f32) * 0.25)
        }
        DType::IQ2_S => {
            for l in 0..4 {
                let i = 4 * c + l;
                let hi = (b[66 + c] >> (2 * l)) as usize & 3;
                let g = IQ2S_GRID[b[2 + i] as usize | hi << 8];
                put8(&mut w[8 * l..], g, b[34 + i]);
            }
            let s = b[74 + c];
            let d = f16_at(b);
            [s & 0x0F, s >> 4].map(|v| d * (0.5 + v as f32) * 0.25)
        }
        DType::IQ3_XXS => {
            let aux = u32_at(b, 66 + 4 * c);
            for l in 0..4 {
                let signs = ksign(aux >> (7 * l));
                for h in 0..2 {
                    let g = IQ3XXS_GRID[b[2 + 8 * c + 2 * l + h] as usize];
                    put4(&mut w[8 * l + 4 * h..], g, signs >> (4 * h));
                }
            }
            let db = f16_at(b) * (0.5 + (aux >> 28) as f32) * 0.5;
            [db, db]
        }
        DType::IQ3_S => {
            for l in 0..8 {
                let i = 8 * c + l;
                let hi = (b[66 + c] >> l) as usize & 1;
                let g = IQ3S_GRID[b[2 + i] as usize | hi << 8];
                let signs = b[74 + 4 * c + l / 2] >> (4 * (l % 2));
                put4(&mut w[4 * l..], g, signs);
            }
            let s = (b[106 + c / 2] >> (4 * (c % 2))) & 0x0F;
            let db = f16_at(b) * (1 + 2 * s) as f32;
            [db, db]
        }
        DType::IQ1_S => {
            let qh = u16_at(b, 34 + 2 * c);
            let delta: i8 = if qh & 0x8000 == 0 { 1 } else { -1 };
            for l in 0..4 {
                let idx = b[2 + 4 * c + l] as usize | ((qh >> (3 * l)) as usize & 7) << 8;
                iq1_put8(&mut w[8 * l..], IQ1S_GRID[idx], delta);
            }
            let dl = f16_at(b) * (2 * ((qh >> 12) & 7) + 1) as f32;
            [dl * 0.125, dl * 0.125]
        }
        DType::IQ1_M => {
            for l in 0..4 {
                let nib = (b[32 + 2 * c + l / 2] >> (4 * (l % 2))) & 0x0F;
                let idx = b[4 * c + l] as usize | ((nib & 7) as usize) << 8;
                let delta: i8 = if nib & 8 == 0 { 1 } else { -1 };
                iq1_put8(&mut w[8 * l..], IQ1S_GRID[idx], delta);
            }
            let d = iq1m_d(b);
            let sw = u16_at(b, 48 + 2 * (c / 2));
            std::array::from_fn(|h| {
                let s = (sw >> (3 * (2 * (c % 2) + h))) & 7;
                d * (2 * s + 1) as f32 * 0.125
            })
        }
        DType::TQ1_0 => {
            for (i, o) in w.iter_mut().enumerate() {
                let e = 32 * c + i;
                let t = if e < 160 {
                    trit(b[e % 32], (e / 32) as u32)
                } else if e < 240 {
                    trit(b[32 + (e - 160) % 16], ((e - 160) / 16) as u32)
                } else {
                    trit(b[48 + (e - 240) % 4], ((e - 240) / 4) as u32)
                };
                *o = t - 1;
            }
            let d = f16_at(&b[52..]);
            [d, d]
        }
        DType::TQ2_0 => {
            let shift = 2 * (c % 4);
            for (i, o) in w.iter_mut().enumerate() {
                *o = ((b[32 * (c / 4) + i] >> shift) & 3) as i8 - 1;
            }
            let d = f16_at(&b[64..]);
            [d, d]
        }
        _ => unreachable!("decode32: {dtype:?} is not a lattice format"),
    }
}

/// Eight IQ1 grid values (−1, 0, 1 as i8 bytes of `g`) plus the shift ±1/8, times 8.
#[inline(always)]
fn iq1_put8(w: &mut [i8], g: u64, delta: i8) {
    for (k, o) in w.iter_mut().enumerate().take(8) {
        *o = 8 * (g >> (8 * k)) as u8 as i8 + delta;
    }
}

/// Dequantizes one super-block of a lattice format into `out` (256 values).
pub(crate) fn dequantize(dtype: DType, b: &[u8], out: &mut [f32]) {
    let mut w = [0i8; 32];
    for c in 0..QK_K / 32 {
        let sc = decode32(dtype, b, c, &mut w);
        for (i, o) in out[32 * c..32 * c + 32].iter_mut().enumerate() {
            *o = sc[i / 16] * w[i] as f32;
        }
    }
}

/// Activation block `c` of an IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS or IQ3_S super-block as
/// magnitudes and signs: the 32 grid bytes (little-endian words, element order), a sign bit
/// per element (bit i set: element i is negative) and the halves' scales — the form the SIMD
/// kernels take (the magnitudes go straight into `pmaddubsw`, the signs onto the
/// activations). `d` is the super-block's scale (its f16 at byte 0, which the caller converts
/// once per super-block). `None` for the other formats.
#[inline(always)]
pub(crate) fn magnitudes32(
    dtype: DType,
    b: &[u8],
    c: usize,
    d: f32,
) -> Option<([u64; 4], u32, [f32; 2])> {
    let c = c & 7;
    let mut g = [0u64; 4];
    let mut signs = 0u32;
    let sc: [f32; 2];
    // Fixed-size views, so that every index below (c < 8) is provably in bounds.
    match dtype {
        DType::IQ2_XXS => {
            let b: &[u8; 66] = b.get(..66)?.try_into().ok()?;
            let (grid, aux) = (u32_at(b, 2 + 8 * c), u32_at(b, 6 + 8 * c));
            for (l, gl) in g.iter_mut().enumerate() {
                *gl = IQ2XXS_GRID[(grid >> (8 * l) & 0xFF) as usize];
                signs |= (ksign(aux >> (7 * l)) as u32) << (8 * l);
            }
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            sc = [db, db];
        }
        DType::IQ2_XS => {
            let b: &[u8; 74] = b.get(..74)?.try_into().ok()?;
            for (l, gl) in g.iter_mut().enumerate() {
                let q = u16_at(b, 2 + 2 * (4 * c + l));
                *gl = IQ2XS_GRID[(q & 511) as usize];
                signs |= (ksign((q >> 9) as u32) as u32) << (8 * l);
            }
            let s = b[66 + c];
            sc = [s & 0x0F, s >> 4].map(|v| d * (0.5 + v as f32) * 0.25);
        }
        DType::IQ2_S => {
            let b: &[u8; 82] = b.get(..82)?.try_into().ok()?;
            let qh = b[66 + c] as usize;
            for (l, gl) in g.iter_mut().enumerate() {
                *gl = IQ2S_GRID[b[2 + 4 * c + l] as usize | (qh >> (2 * l) & 3) << 8];
            }
            signs = u32_at(b, 34 + 4 * c);
            let s = b[74 + c];
            sc = [s & 0x0F, s >> 4].map(|v| d * (0.5 + v as f32) * 0.25);
        }
        DType::IQ3_XXS => {
            let b: &[u8; 98] = b.get(..98)?.try_into().ok()?;
            let aux = u32_at(b, 66 + 4 * c);
            for (l, gl) in g.iter_mut().enumerate() {
                let lo = IQ3XXS_GRID[b[2 + 8 * c + 2 * l] as usize] as u64;
                let hi = IQ3XXS_GRID[b[3 + 8 * c + 2 * l] as usize] as u64;
                *gl = lo | hi << 32;
                signs |= (ksign(aux >> (7 * l)) as u32) << (8 * l);
            }
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            sc = [db, db];
        }
        DType::IQ3_S => {
            let b: &[u8; 110] = b.get(..110)?.try_into().ok()?;
            let qh = b[66 + c] as usize;
            for (l, gl) in g.iter_mut().enumerate() {
                let i0 = b[2 + 8 * c + 2 * l] as usize | (qh >> (2 * l) & 1) << 8;
                let i1 = b[3 + 8 * c + 2 * l] as usize | (qh >> (2 * l + 1) & 1) << 8;
                *gl = IQ3S_GRID[i0] as u64 | (IQ3S_GRID[i1] as u64) << 32;
            }
            signs = u32_at(b, 74 + 4 * c);
            let s = (b[106 + c / 2] >> (4 * (c % 2))) & 0x0F;
            let db = d * (1 + 2 * s) as f32;
            sc = [db, db];
        }
        _ => return None,
    }
    Some((g, signs, sc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magnitudes_and_signs_are_the_decoded_values() {
        // Every lattice format with a magnitude form, on patterned blocks: |w| and sign(w)
        // of `decode32` element by element, the same scales.
        for dtype in [
            DType::IQ2_XXS,
            DType::IQ2_XS,
            DType::IQ2_S,
            DType::IQ3_XXS,
            DType::IQ3_S,
        ] {
            for seed in 0..8u32 {
                let mut b: Vec<u8> = (0..dtype.block_bytes() as u32)
                    .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed * 97) >> 13) as u8)
                    .collect();
                b[0] = 0x00;
                b[1] = 0x3c; // d = 1.0
                for c in 0..8 {
                    let mut w = [0i8; 32];
                    let sc = decode32(dtype, &b, c, &mut w);
                    let (g, signs, sc2) =
                        magnitudes32(dtype, &b, c, 1.0).expect("a lattice format");
                    assert_eq!(sc, sc2, "{dtype:?} block {c}");
                    for (i, &v) in w.iter().enumerate() {
                        let m = (g[i / 8] >> (8 * (i % 8))) as u8 as i8;
                        let neg = signs >> i & 1 == 1;
                        assert_eq!(v, if neg { -m } else { m }, "{dtype:?} block {c} elem {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn sign_bytes_have_even_parity_and_keep_their_index() {
        for i in 0..128u32 {
            let s = ksign(i);
            assert_eq!(s & 0x7F, i as u8);
            assert_eq!(s.count_ones() % 2, 0);
        }
    }

    #[test]
    fn base3_digits_invert_the_packing() {
        // A byte holding digits t_k (k = 0..5, t_0 most significant) is ceil(v·256/243) for
        // v = Σ t_k·3^(4−k), as the quantizer packs them.
        for v in 0..243u16 {
            let q = ((v * 256).div_ceil(243)) as u8;
            let digits: Vec<u16> = (0..5).map(|k| v / 3u16.pow(4 - k) % 3).collect();
            for (k, &t) in digits.iter().enumerate() {
                assert_eq!(trit(q, k as u32) as u16, t, "v {v} digit {k}");
            }
        }
    }
}
