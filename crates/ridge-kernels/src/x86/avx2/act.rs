//! AVX2 quantization of activations into 8- and 16-bit blocks: the same scale, rounding
//! (half to even) and sums as the scalar reference in [`crate::act::blocks`].

use crate::act::blocks::{Act16Block, ActBlock, Q16_MAX};
use std::arch::x86_64::*;

/// One block of 32 activations at `p` to integers of at most `qmax` in magnitude, as
/// `act::quantize_block` computes them: the scale, the four vectors of eight quants, their sum.
#[inline(always)]
unsafe fn quantize_block(p: *const f32, qmax: f32) -> (f32, [__m256i; 4], i32) {
    let sign = _mm256_set1_ps(-0.0);
    let v = [
        _mm256_loadu_ps(p),
        _mm256_loadu_ps(p.add(8)),
        _mm256_loadu_ps(p.add(16)),
        _mm256_loadu_ps(p.add(24)),
    ];
    let mut m = _mm256_andnot_ps(sign, v[0]);
    for vi in &v[1..] {
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vi));
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    let d = amax / qmax;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    // A loop, not a closure: closures do not inherit the target features.
    let mut q = [_mm256_setzero_si256(); 4];
    for k in 0..4 {
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(
            _mm256_mul_ps(v[k], idv),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        ));
    }
    let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b01_00_11_10));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0b00_00_00_01));
    (d, q, _mm_cvtsi128_si32(s1))
}

/// Quantizes activations exactly as `act::quantize_scalar` does (same scale, round half to even).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act(x: &[f32], out: &mut [ActBlock]) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, q, isum) = quantize_block(b.as_ptr(), 127.0);
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_packs_epi16(p16a, p16b);
        let fixed = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(o.qs.as_mut_ptr() as *mut __m256i, fixed);
        o.d = d;
        o.isum = isum;
        o.derive_sums();
    }
}

/// Quantizes activations into 16-bit blocks exactly as `act::quantize16_scalar` does.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act16(x: &[f32], out: &mut [Act16Block]) {
    for (b, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, q, isum) = quantize_block(b.as_ptr(), Q16_MAX);
        // packs works within 128-bit halves; the 64-bit permute restores element order.
        let lo = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0b11_01_10_00);
        let hi = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0b11_01_10_00);
        let qp = o.qs.as_mut_ptr() as *mut __m256i;
        _mm256_storeu_si256(qp, lo);
        _mm256_storeu_si256(qp.add(1), hi);
        o.d = d;
        o.isum = isum;
    }
}
