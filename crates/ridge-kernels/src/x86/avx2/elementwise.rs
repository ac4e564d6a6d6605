//! AVX2 versions of the element-wise operations in `ops` that sit on a decode step's critical
//! path between the matrix products (one thread runs them while the others wait). Each performs
//! the scalar version's operations in the same order on eight lanes, so both give the same bits
//! and the scalar one stays the reference the tests compare against.
//!
//! Every function is `unsafe`: call it only on a CPU with AVX2/FMA/F16C (an `Isa` whose `avx2()` holds).

use crate::scalar::elementwise::{exp_approx, GELU_C};
use crate::x86::shared::hsum;
use std::arch::x86_64::*;

/// [`crate::ops::softmax_partial`] on vectors: the same operations in the same order (its
/// `exp_approx` with separate multiplies and adds, no FMA; eight partial sums in the lanes,
/// reduced by `hsum`; the tail one element at a time), so the results are its bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn softmax_partial(x: &mut [f32]) -> (f32, f32) {
    let n = x.len();
    if n == 0 {
        return (f32::NEG_INFINITY, 0.0);
    }
    let p = x.as_mut_ptr();
    let whole = n - n % 8;
    let mut m8 = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..whole).step_by(8) {
        m8 = _mm256_max_ps(m8, _mm256_loadu_ps(p.add(i)));
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m8);
    let max = x[whole..]
        .iter()
        .chain(lanes.iter())
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mx = _mm256_set1_ps(max);
    let mut acc = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mx));
        _mm256_storeu_ps(p.add(i), e);
        acc = _mm256_add_ps(acc, e);
    }
    let mut sum = hsum(acc);
    for v in &mut x[whole..] {
        *v = exp_approx(*v - max);
        sum += *v;
    }
    (max, sum)
}

/// `Σ x²` as `ops::sum_squares` computes it (partial sums in the lanes, `hsum`, tail last).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn sum_squares(x: &[f32]) -> f32 {
    let whole = x.len() - x.len() % 8;
    let p = x.as_ptr();
    let mut acc = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        let v = _mm256_loadu_ps(p.add(i));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    x[whole..].iter().fold(hsum(acc), |s, &v| s + v * v)
}

/// `out = x · scale · w`, element-wise (RMSNorm's second half). `out`, `w` at least `x`'s
/// length.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_mul(x: &[f32], scale: f32, w: &[f32], out: &mut [f32]) {
    let n = x.len().min(w.len()).min(out.len());
    scale_mul_raw(x.as_ptr(), scale, w, out.as_mut_ptr(), n);
}

/// [`scale_mul`] in place: `x = x · scale · w`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_mul_inplace(x: &mut [f32], scale: f32, w: &[f32]) {
    let n = x.len().min(w.len());
    let p = x.as_mut_ptr();
    scale_mul_raw(p, scale, w, p, n);
}

/// The loop of [`scale_mul`]: `n` elements from `src` to `dst`, which may be the same buffer
/// (each element is read before it is written, by the same lane).
///
/// # Safety
/// AVX2 is available; `src` is readable and `dst` writable for `n` floats, `w.len() >= n`.
#[inline(always)]
unsafe fn scale_mul_raw(src: *const f32, scale: f32, w: &[f32], dst: *mut f32, n: usize) {
    let whole = n - n % 8;
    let s8 = _mm256_set1_ps(scale);
    let wp = w.as_ptr();
    for i in (0..whole).step_by(8) {
        let v = _mm256_mul_ps(_mm256_loadu_ps(src.add(i)), s8);
        _mm256_storeu_ps(dst.add(i), _mm256_mul_ps(v, _mm256_loadu_ps(wp.add(i))));
    }
    for (i, &g) in w.iter().enumerate().take(n).skip(whole) {
        *dst.add(i) = *src.add(i) * scale * g;
    }
}

/// `ops::silu_mul`: `gate = gate / (1 + e^(−gate)) · up`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let whole = n - n % 8;
    let (gp, up_) = (gate.as_mut_ptr(), up.as_ptr());
    let one = _mm256_set1_ps(1.0);
    let neg = _mm256_set1_ps(-0.0);
    for i in (0..whole).step_by(8) {
        let g = _mm256_loadu_ps(gp.add(i));
        let e = exp8(_mm256_xor_ps(g, neg));
        let s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(gp.add(i), _mm256_mul_ps(s, _mm256_loadu_ps(up_.add(i))));
    }
    for i in whole..n {
        let g = gate[i];
        gate[i] = g / (1.0 + exp_approx(-g)) * up[i];
    }
}

/// `ops::gelu_tanh_mul`: `gate = gate · up / (1 + e^(−y))`, `y = c · gate · (1 + 0.044715 ·
/// gate²)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let whole = n - n % 8;
    let (gp, up_) = (gate.as_mut_ptr(), up.as_ptr());
    let one = _mm256_set1_ps(1.0);
    let neg = _mm256_set1_ps(-0.0);
    let c = _mm256_set1_ps(GELU_C);
    let k = _mm256_set1_ps(0.044715);
    for i in (0..whole).step_by(8) {
        let x = _mm256_loadu_ps(gp.add(i));
        let inner = _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(k, x), x));
        let y = _mm256_mul_ps(_mm256_mul_ps(c, x), inner);
        let e = exp8(_mm256_xor_ps(y, neg));
        let xu = _mm256_mul_ps(x, _mm256_loadu_ps(up_.add(i)));
        _mm256_storeu_ps(gp.add(i), _mm256_div_ps(xu, _mm256_add_ps(one, e)));
    }
    for i in whole..n {
        let x = gate[i];
        let y = GELU_C * x * (1.0 + 0.044715 * x * x);
        gate[i] = x * up[i] / (1.0 + exp_approx(-y));
    }
}

/// [`crate::ops::exp_approx`] of eight lanes, operation for operation.
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
        _mm256_set1_ps(88.0),
    );
    let round = _mm256_set1_ps(12_583_039.0);
    let t = _mm256_add_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        round,
    );
    let n = _mm256_sub_ps(t, round);
    let r = _mm256_sub_ps(
        _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693_145_75))),
        _mm256_mul_ps(n, _mm256_set1_ps(1.428_606_8e-6)),
    );
    let c = |v: f32| _mm256_set1_ps(v);
    let mut p = _mm256_add_ps(c(1.0 / 120.0), _mm256_mul_ps(r, c(1.0 / 720.0)));
    p = _mm256_add_ps(c(1.0 / 24.0), _mm256_mul_ps(r, p));
    p = _mm256_add_ps(c(1.0 / 6.0), _mm256_mul_ps(r, p));
    p = _mm256_add_ps(c(0.5), _mm256_mul_ps(r, p));
    p = _mm256_add_ps(c(1.0), _mm256_mul_ps(r, p));
    p = _mm256_add_ps(c(1.0), _mm256_mul_ps(r, p));
    let two_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    _mm256_mul_ps(p, two_n)
}

#[cfg(test)]
mod tests {
    use crate::{ops, Isa};

    /// Deterministic pseudo-random values in about ±`scale`.
    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32 - 0.5) * 2.0 * scale
            })
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    #[test]
    fn norms_and_gated_activations_give_the_portable_bits() {
        let Some(avx2) = Isa::of(crate::IsaKind::Avx2) else {
            return; // nothing to compare on this CPU; the portable versions are tested in `ops`
        };
        for n in [1usize, 7, 8, 9, 64, 250, 576, 2048] {
            let x = values(n, n as u32, 3.0);
            let w = values(n, 7 + n as u32, 1.5);
            let up = values(n, 11 + n as u32, 2.0);
            let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
            ops::rms_norm(Isa::SCALAR, &x, &w, 1e-6, &mut want);
            ops::rms_norm(avx2, &x, &w, 1e-6, &mut got);
            assert_eq!(bits(&got), bits(&want), "rms_norm n {n}");
            let mut inplace = x.clone();
            ops::rms_norm_rows_inplace(avx2, &mut inplace, &w, 1e-6);
            assert_eq!(bits(&inplace), bits(&want), "rms_norm in place n {n}");
            for gelu in [false, true] {
                let (mut want, mut got) = (x.clone(), x.clone());
                let f = if gelu {
                    ops::gelu_tanh_mul
                } else {
                    ops::silu_mul
                };
                f(Isa::SCALAR, &mut want, &up);
                f(avx2, &mut got, &up);
                assert_eq!(bits(&got), bits(&want), "gelu {gelu} n {n}");
            }
        }
    }

    #[test]
    fn softmax_partial_gives_the_portable_bits() {
        if !Isa::detect().avx2() {
            return; // nothing to compare on this CPU; the portable version is tested in `ops`
        }
        for n in (0..41).chain([127, 128, 1000]) {
            for (seed, scale) in [(1, 1.0), (2, 30.0), (3, 200.0)] {
                let x = values(n, seed + n as u32, scale);
                let (mut want, mut got) = (x.clone(), x.clone());
                let (m0, s0) = ops::softmax_partial(&mut want);
                // SAFETY: an AVX2 Isa was detected above.
                let (m1, s1) = unsafe { super::softmax_partial(&mut got) };
                assert_eq!(bits(&got), bits(&want), "n {n} seed {seed}");
                assert_eq!((m1.to_bits(), s1.to_bits()), (m0.to_bits(), s0.to_bits()));
                if n > 0 {
                    let sum: f64 = got.iter().map(|&v| v as f64).sum();
                    assert!((sum / s1 as f64 - 1.0).abs() < 1e-5, "n {n}: sum {sum}");
                }
            }
        }
    }
}
