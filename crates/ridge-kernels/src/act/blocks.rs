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
    }
}

/// `d · Σq` as every block type stores it (one rounding; the tile kernels' constant terms).
#[inline]
fn dsum(d: f32, isum: i32) -> f32 {
    d * isum as f32
}

/// One block of 32 values to integers of at most `qmax` in magnitude: `put(i, q_i)` for each,
/// returning the scale `d = amax / qmax` and `Σ q` (round half to even, as the SIMD paths).
fn quantize_block(b: &[f32], qmax: f32, mut put: impl FnMut(usize, i32)) -> (f32, i32) {
    let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / qmax;
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
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        // |q| <= 127 (clamped above), so the narrowing is exact.
        (o.d, o.isum) = quantize_block(b, 127.0, |i, q| o.qs[i] = q as i8);
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
        (o.d, o.isum) = quantize_block(b, Q16_MAX, |i, q| o.qs[i] = q as i16);
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
