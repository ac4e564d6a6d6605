//! The activation block types and their scalar reference quantizers (what every kernel,
//! scalar or SIMD, reads; [`crate::act`] adds the quantizers that pick a path).
//!
//! Each block of 32 activations is stored as `d · q` with `q: i8` and an f32 scale `d`, plus
//! `isum = Σ q`, which lets Q4_0 (offset −8) and Q4_1 (minimum `m`) fold their constant term
//! into one multiply per block instead of per element.

/// One quantized block of 32 activations.
///
/// The quants come first and the block is 32-byte aligned (64 bytes with padding), so a
/// 32-byte load of `qs` never straddles two cache lines (with 40-byte blocks three in eight
/// did, and which ones depended on where the allocator put the buffer).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(32))]
pub struct ActBlock {
    /// Quantized values.
    pub qs: [i8; 32],
    /// Scale.
    pub d: f32,
    /// Sum of `qs`.
    pub isum: i32,
    /// `32 · Σq` over each half (elements 0..16, 16..32): the offset that unsigned Q6_K quants
    /// (`q + 32`) add to a 16-element sub-block's integer sum.
    pub off32: [i32; 2],
    /// `d · Σq` (f32, rounded once): the activation factor of the minimum and offset terms of
    /// Q4_0/Q4_1/Q5_0/Q5_1/Q4_K, computed once per block here instead of once per product
    /// (the same rounding, so the same bits; a tile kernel then broadcasts it from memory).
    pub dsum: f32,
    /// `k << 23` where `2^k ≤ d < 2^(k+1)`: for a block whose scale is a power of two
    /// ([`quantize_pow2_scalar`]), what an integer add to a float's bits multiplies it by `d`.
    pub se: i32,
}

impl ActBlock {
    /// Sets [`ActBlock::isum`], [`ActBlock::off32`] and [`ActBlock::dsum`] from `qs` and `d`.
    #[inline]
    pub fn derive_sums(&mut self) {
        let half = |h: usize| {
            self.qs[16 * h..16 * h + 16]
                .iter()
                .map(|&q| q as i32)
                .sum::<i32>()
        };
        self.set_sums([half(0), half(1)]);
    }

    /// Sets the sums from `halves` (Σ `qs[0..16]`, Σ `qs[16..32]`) and `d`.
    #[inline]
    pub fn set_sums(&mut self, halves: [i32; 2]) {
        self.isum = halves[0] + halves[1];
        self.off32 = halves.map(|h| 32 * h);
        self.dsum = dsum(self.d, self.isum);
        self.se = exponent_bits(self.d);
    }
}

/// `k << 23` for `2^k ≤ d < 2^(k+1)` (0 for zero, NaN or subnormal `d`).
#[inline]
fn exponent_bits(d: f32) -> i32 {
    let e = ((d.to_bits() >> 23) & 0xFF) as i32;
    if d > 0.0 && e > 0 {
        (e - 127) << 23
    } else {
        0
    }
}

/// The smallest power-of-two activation scale, `2^-60` (blocks whose largest magnitude is
/// below `127 · 2^-60 ≈ 1.1e-16` round on this coarser grid).
pub const POW2_MIN: f32 = f32::from_bits((127 - 60) << 23);

/// The largest power-of-two activation scale, `2^100` (a weight scale below `2^24` times it
/// stays finite; values beyond `127 · 2^100 ≈ 1.6e32` saturate at ±127).
pub const POW2_MAX: f32 = f32::from_bits((127 + 100) << 23);

/// The power-of-two 8-bit scale of a block whose ideal scale is `s = amax / 127`: `s` clamped
/// to [`POW2_MIN`]..=[`POW2_MAX`] and rounded up to a power of two; zero and NaN pass through.
///
/// Why: a Q4_K tile kernel scales each (sub-block, token) sum by weight scale × activation
/// scale, a float multiply on the ports its `vpdpbusd` products use. With `d = 2^k` that
/// product is the weight scale with `k` added to its exponent bits — an integer add on
/// another port — and bitwise what the plain multiply gives (scaling by a power of two is
/// exact while the result is a normal float, which the clamps guarantee for f16-scaled
/// weights), so every path, multiplying or adding, gives the same bits. The cost: a scale up
/// to 2× coarser than the block's own, about 1.5× its rounding error (measured: perplexity
/// +0.03 points on the 1.5B, `BENCHMARKS.md`), so only the matrices whose kernels gain take it
/// (`matmul::pow2_acts`).
#[inline]
pub fn pow2_scale(s: f32) -> f32 {
    // Zero and NaN are not above zero.
    if s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return s;
    }
    let b = s.clamp(POW2_MIN, POW2_MAX).to_bits();
    f32::from_bits((b + 0x7F_FFFF) & !0x7F_FFFF)
}

/// `d · Σq` as every block type stores it (one rounding; the tile kernels' constant terms).
#[inline]
fn dsum(d: f32, isum: i32) -> f32 {
    d * isum as f32
}

/// One block of 32 values to integers of at most `qmax` in magnitude: `put(i, q_i)` for each,
/// returning the scale `d = amax / qmax` ([`pow2_scale`] of it if `pow2`) and `Σ q` (round
/// half to even, as the SIMD paths).
fn quantize_block(b: &[f32], qmax: f32, pow2: bool, mut put: impl FnMut(usize, i32)) -> (f32, i32) {
    let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / qmax;
    let d = if pow2 { pow2_scale(d) } else { d };
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut s = 0i32;
    for (i, v) in b.iter().enumerate() {
        let q = (v * id).round_ties_even().clamp(-qmax, qmax) as i32;
        put(i, q);
        s += q;
    }
    (d, s)
}

/// Quantizes `x` (length a multiple of 32) into `out` (length `x.len() / 32`). Scalar reference.
pub fn quantize_scalar(x: &[f32], out: &mut [ActBlock]) {
    quantize8(x, out, false);
}

/// As [`quantize_scalar`] with power-of-two scales ([`pow2_scale`]). Scalar reference.
pub fn quantize_pow2_scalar(x: &[f32], out: &mut [ActBlock]) {
    quantize8(x, out, true);
}

/// [`quantize_scalar`] (`pow2` false) or [`quantize_pow2_scalar`].
fn quantize8(x: &[f32], out: &mut [ActBlock], pow2: bool) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        // |q| <= 127 (clamped above), so the narrowing is exact.
        (o.d, o.isum) = quantize_block(b, 127.0, pow2, |i, q| o.qs[i] = q as i8);
        o.derive_sums();
    }
}

/// One block of 32 activations quantized to 16 bits: `d · q` with `q: i16`.
///
/// The rounding error is 1/256 of the 8-bit blocks' (about 1.5e-5 of the block's largest
/// magnitude), small enough for the matrices whose inputs 8-bit blocks round too coarsely,
/// while the dot products stay integer (`pmaddwd`, exact 32-bit sums) and cost about what the
/// 8-bit ones do, instead of dequantizing every weight to f32.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct Act16Block {
    /// Quantized values.
    pub qs: [i16; 32],
    /// Scale.
    pub d: f32,
    /// Sum of `qs`.
    pub isum: i32,
}

impl Default for Act16Block {
    fn default() -> Self {
        Act16Block {
            qs: [0; 32],
            d: 0.0,
            isum: 0,
        }
    }
}

/// The largest 16-bit quant: `d = amax / Q16_MAX`.
pub const Q16_MAX: f32 = 32767.0;

/// Quantizes `x` (length a multiple of 32) into 16-bit blocks (length `x.len() / 32`). Scalar
/// reference.
pub fn quantize16_scalar(x: &[f32], out: &mut [Act16Block]) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        // |q| <= 32767 (clamped above), so the narrowing is exact.
        (o.d, o.isum) = quantize_block(b, Q16_MAX, false, |i, q| o.qs[i] = q as i16);
    }
}

/// What the scalar integer dot products need from an activation block of either width.
pub trait IntActBlock {
    /// Scale `d`.
    fn scale(&self) -> f32;
    /// Sum of the quants.
    fn qsum(&self) -> i32;
    /// Quant `i` (0..32).
    fn q(&self, i: usize) -> i32;
}

/// Both block widths store the same fields; only the quant type differs.
macro_rules! int_act_block {
    ($t:ty) => {
        impl IntActBlock for $t {
            fn scale(&self) -> f32 {
                self.d
            }
            fn qsum(&self) -> i32 {
                self.isum
            }
            fn q(&self, i: usize) -> i32 {
                self.qs[i] as i32
            }
        }
    };
}
int_act_block!(ActBlock);
int_act_block!(Act16Block);

/// A 16-bit activation block split into bytes for the tiled kernels: `q = 256 · hi + lo`
/// with `lo` in 0..256 and `hi` in −128..128, so a 16-bit product is two 8-bit
/// `pmaddubsw` products (exact, see `x86::avx2::tiles`).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct ActSplit16 {
    /// Low bytes of the quants (unsigned).
    pub lo: [u8; 32],
    /// High bytes of the quants (signed).
    pub hi: [i8; 32],
    /// Scale.
    pub d: f32,
    /// Sum of the 16-bit quants.
    pub isum: i32,
    /// `d · Σq`, as [`ActBlock::dsum`].
    pub dsum: f32,
}

impl Default for ActSplit16 {
    fn default() -> Self {
        ActSplit16 {
            lo: [0; 32],
            hi: [0; 32],
            d: 0.0,
            isum: 0,
            dsum: 0.0,
        }
    }
}

/// Splits 16-bit blocks into [`ActSplit16`] (`out.len() == x.len()`).
pub fn split16(x: &[Act16Block], out: &mut [ActSplit16]) {
    for (a, o) in x.iter().zip(out.iter_mut()) {
        for i in 0..32 {
            // Two's complement: q = 256 · (q >> 8) + (q & 0xFF) for every i16.
            o.lo[i] = (a.qs[i] & 0xFF) as u8;
            o.hi[i] = (a.qs[i] >> 8) as i8;
        }
        o.d = a.d;
        o.isum = a.isum;
        o.dsum = dsum(a.d, a.isum);
    }
}
