//! AVX2 versions of the element-wise operations in `ops` that sit on a decode step's critical
//! path between the matrix products (one thread runs them while the others wait). Each performs
//! the scalar version's operations in the same order on eight lanes, so both give the same bits
//! and the scalar one stays the reference the tests compare against.
//!
//! Every function is `unsafe`: call it only on a CPU with AVX2/FMA/F16C (an `Isa::Avx2`).
#![cfg(target_arch = "x86_64")]

use crate::dot_avx2::hsum;
use std::arch::x86_64::*;

/// [`crate::ops::softmax_inplace`] on vectors: the same operations in the same order (its
/// `exp_approx` with separate multiplies and adds, no FMA; eight partial sums in the lanes,
/// reduced by `hsum`; the tail one element at a time), so the results are its bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn softmax(x: &mut [f32]) {
    let n = x.len();
    if n == 0 {
        return;
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
        *v = crate::ops::exp_approx(*v - max);
        sum += *v;
    }
    let inv = _mm256_set1_ps(1.0 / sum);
    for i in (0..whole).step_by(8) {
        _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), inv));
    }
    for v in &mut x[whole..] {
        *v *= 1.0 / sum;
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

    #[test]
    fn softmax_gives_the_portable_bits_and_sums_to_one() {
        if Isa::detect() != Isa::Avx2 {
            return; // nothing to compare on this CPU; the portable version is tested in `ops`
        }
        for n in (0..41).chain([127, 128, 1000]) {
            for (seed, scale) in [(1, 1.0), (2, 30.0), (3, 200.0)] {
                let x = values(n, seed + n as u32, scale);
                let (mut want, mut got) = (x.clone(), x.clone());
                ops::softmax_inplace(&mut want);
                // SAFETY: Isa::Avx2 was detected above.
                unsafe { super::softmax(&mut got) };
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "n {n} seed {seed}");
                if n > 0 {
                    let sum: f64 = got.iter().map(|&v| v as f64).sum();
                    assert!((sum - 1.0).abs() < 1e-5, "n {n}: sum {sum}");
                }
            }
        }
    }
}
