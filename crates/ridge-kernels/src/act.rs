//! 8-bit activation blocks: the other operand of the integer dot products.
//!
//! Each block of 32 activations is stored as `d · q` with `q: i8` and an f32 scale `d`, plus
//! `isum = Σ q`, which lets Q4_0 (offset −8) and Q4_1 (minimum `m`) fold their constant term
//! into one multiply per block instead of per element.

/// One quantized block of 32 activations.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(8))]
pub struct ActBlock {
    /// Scale.
    pub d: f32,
    /// Sum of `qs`.
    pub isum: i32,
    /// Quantized values.
    pub qs: [i8; 32],
}

/// Quantizes `x` (length a multiple of 32) into `out` (length `x.len() / 32`). Scalar reference.
pub fn quantize_scalar(x: &[f32], out: &mut [ActBlock]) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut s = 0i32;
        for (q, v) in o.qs.iter_mut().zip(b) {
            *q = (v * id).round_ties_even() as i8;
            s += *q as i32;
        }
        o.d = d;
        o.isum = s;
    }
}

/// Quantizes with the best path for `isa`. Results are identical to [`quantize_scalar`].
pub fn quantize(isa: crate::Isa, x: &[f32], out: &mut [ActBlock]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Isa::Avx2 is only produced by Isa::detect after checking avx2/fma/f16c.
        crate::Isa::Avx2 => unsafe { crate::dot_avx2::quantize_act(x, out) },
        _ => quantize_scalar(x, out),
    }
}
