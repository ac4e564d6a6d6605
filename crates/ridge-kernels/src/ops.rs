//! Element-wise and row-wise operations of a transformer layer. These touch activations only
//! (kilobytes per token), but on a decode step they run on one thread between the parallel
//! matrix products, so the ones on that path have AVX2 versions (`elementwise_avx2`) that
//! perform the same operations in the same order and give the same bits.

use crate::Isa;

/// `out = x / sqrt(mean(x²) + eps) · w` (RMSNorm), one row. The sum of squares is taken in
/// eight interleaved partial sums as in [`softmax_inplace`] (a single serial sum was most of a
/// norm's time: one dependent add per element).
pub fn rms_norm(isa: Isa, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let scale = inv_rms(isa, x, eps);
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: an Isa whose avx2() holds is produced only after detecting AVX2/FMA/F16C.
        return unsafe { crate::elementwise_avx2::scale_mul(x, scale, w, out) };
    }
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares in eight partial sums (see [`rms_norm`]).
fn inv_rms(isa: Isa, x: &[f32], eps: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    let ss = if isa.avx2() {
        // SAFETY: as in `rms_norm`.
        unsafe { crate::elementwise_avx2::sum_squares(x) }
    } else {
        sum_squares(x)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let ss = {
        let _ = isa;
        sum_squares(x)
    };
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// `Σ x²`: element `i` of every whole group of eight into partial sum `i`, the partial sums
/// combined by [`lane_sum`], the last `len % 8` squares added one by one.
fn sum_squares(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let groups = x.chunks_exact(8);
    let tail = groups.remainder();
    for g in groups {
        for (l, &v) in lanes.iter_mut().zip(g) {
            *l += v * v;
        }
    }
    tail.iter().fold(lane_sum(&lanes), |s, &v| s + v * v)
}

/// RMSNorm of every `w.len()`-wide row of `x` into the same row of `out`.
pub fn rms_norm_rows(isa: Isa, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rms_norm(isa, xr, w, eps, or);
    }
}

/// RMSNorm of every `w.len()`-wide row of `x` in place (per-head norms: `w` is one head
/// wide). The same arithmetic as [`rms_norm`].
pub fn rms_norm_rows_inplace(isa: Isa, x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let scale = inv_rms(isa, xr, eps);
        #[cfg(target_arch = "x86_64")]
        if isa.avx2() {
            // SAFETY: as in `rms_norm`; in place is allowed (each element is read before
            // it is written, by the same lane).
            unsafe { crate::elementwise_avx2::scale_mul_inplace(xr, scale, w) };
            continue;
        }
        for (v, &g) in xr.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    }
}

/// Fills `cos`/`sin` (length `dim / 2`) for position `pos`: angle_i = pos · base^(−2i/dim).
/// Computed in f64 so long positions keep their precision.
pub fn rope_table(pos: usize, dim: usize, base: f32, cos: &mut [f32], sin: &mut [f32]) {
    for i in 0..dim / 2 {
        let freq = (base as f64).powf(-2.0 * i as f64 / dim as f64);
        let a = pos as f64 * freq;
        cos[i] = a.cos() as f32;
        sin[i] = a.sin() as f32;
    }
}

/// Rotates one head vector in place. `neox = false` rotates adjacent pairs `(x[2i], x[2i+1])`
/// (llama.cpp's normal mode, used for llama whose Q/K the GGUF converter permuted); `neox =
/// true` rotates `(x[i], x[i + dim/2])`. Only the first `2 · cos.len()` elements rotate.
pub fn rope_apply(x: &mut [f32], cos: &[f32], sin: &[f32], neox: bool) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = if neox {
            (i, i + half)
        } else {
            (2 * i, 2 * i + 1)
        };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * cos[i] - x1 * sin[i];
        x[b] = x0 * sin[i] + x1 * cos[i];
    }
}

/// `gate = silu(gate) · up` (SwiGLU), element-wise, with [`exp_approx`] so the loop
/// vectorises (the library `expf` was 3% of a batched decode step, on one thread).
pub fn silu_mul(isa: Isa, gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: as in `rms_norm`.
        return unsafe { crate::elementwise_avx2::silu_mul(gate, up) };
    }
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp_approx(-*g)) * u;
    }
}

/// `gate = gelu(gate) · up` (GeGLU) with the tanh approximation of GELU,
/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, as Gemma and llama.cpp use it.
///
/// Computed as the identical `x / (1 + e^(−2y))` (since `(1 + tanh y) / 2 = σ(2y)`) with
/// [`exp_approx`], so the loop vectorises: a prefill of 512 tokens evaluates it 19 million
/// times for Gemma 3 270M, and the library `tanhf` alone took ~8% of prefill.
pub fn gelu_tanh_mul(isa: Isa, gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: as in `rms_norm`.
        return unsafe { crate::elementwise_avx2::gelu_tanh_mul(gate, up) };
    }
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let y = GELU_C * x * (1.0 + 0.044715 * x * x);
        *g = x * u / (1.0 + exp_approx(-y));
    }
}

/// `2·√(2/π)`: GELU's tanh argument doubled (see [`gelu_tanh_mul`]).
pub(crate) const GELU_C: f32 = 2.0 * 0.797_884_6;

/// `e^x` to about 2e-7 relative error, in plain arithmetic the compiler vectorises (no libm
/// call): `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`, a degree-6 Taylor polynomial for `e^r`
/// (truncation error `r⁷/7! < 1.3e-7`), and `2^n` built in the exponent bits. Inputs are
/// clamped to `[−87, 88]`, where `2^n` stays a normal float: below, the result is ~1e-38
/// instead of 0; above, ~1.7e38 instead of infinity.
///
/// `n` never goes through a float-to-integer conversion (Rust's saturating `as` kept the loops
/// scalar): adding `1.5·2²³ + 127` rounds `x·log2 e` to an integer held, biased by 127, in the
/// low mantissa bits, which a shift moves into the exponent field.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so n·LN2_HI is exact for the |n| <= 127 used here.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5·2²³ + 127: the sum's ulp is 1, so adding it rounds to the nearest integer
    // (|x·log2 e| < 2²²), and its low bits hold n + 127 (bit 22 shifts out below).
    const ROUND: f32 = 12_583_039.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    p * f32::from_bits(t.to_bits() << 23)
}

/// `x *= s`, element-wise.
pub fn scale_inplace(x: &mut [f32], s: f32) {
    for v in x.iter_mut() {
        *v *= s;
    }
}

/// `x = cap · tanh(x / cap)` (logit soft-capping), element-wise.
pub fn softcap_inplace(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = cap * (*v / cap).tanh();
    }
}

/// `x += y`, element-wise.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// In-place softmax of a row (nothing to do on an empty one), with [`exp_approx`] and the sum
/// of the exponentials taken in eight interleaved partial sums (element `i` of every whole
/// group of eight into sum `i`, combined as `hsum` combines a vector's lanes), the last
/// `len % 8` elements added one by one after them. The AVX2 version (`elementwise_avx2::softmax`)
/// performs exactly these operations on vectors, so both give the same bits; a libm `exp` per
/// score with one serial sum was a third of decode attention's arithmetic.
pub fn softmax_inplace(x: &mut [f32]) {
    let (_, sum) = softmax_partial(x);
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The unnormalised half of [`softmax_inplace`]: replaces `x` by `exp(x − max)` and returns
/// `(max, Σ exp(x − max))`, the sum taken as there. Attention over a chunk of positions keeps
/// these and merges chunks afterwards. An empty row gives `(−∞, 0)`.
pub fn softmax_partial(x: &mut [f32]) -> (f32, f32) {
    if x.is_empty() {
        return (f32::NEG_INFINITY, 0.0);
    }
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut lanes = [0f32; 8];
    let mut groups = x.chunks_exact_mut(8);
    for g in &mut groups {
        for (v, l) in g.iter_mut().zip(&mut lanes) {
            *v = exp_approx(*v - max);
            *l += *v;
        }
    }
    let mut sum = lane_sum(&lanes);
    for v in groups.into_remainder() {
        *v = exp_approx(*v - max);
        sum += *v;
    }
    (max, sum)
}

/// The eight partial sums added in the order `hsum` adds a vector's lanes:
/// `((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))`.
pub(crate) fn lane_sum(l: &[f32; 8]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|i| l[i] + l[i + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_approx_is_close_to_exp() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let want = (x as f64).exp();
            let got = exp_approx(x) as f64;
            worst = worst.max((got - want).abs() / want);
            x += 0.001_37;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert!(exp_approx(-1e4) >= 0.0 && exp_approx(-1e4) < 1e-37);
        assert!(exp_approx(1e4).is_finite());
    }

    #[test]
    fn rms_norm_matches_float64() {
        for n in [1usize, 9, 64, 576, 1000] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 101) as f32 * 0.05 - 2.4)
                .collect();
            let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
            let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
            let mut got = vec![0f32; n];
            rms_norm(Isa::SCALAR, &x, &w, 1e-6, &mut got);
            for i in 0..n {
                let want = x[i] as f64 / (ms + 1e-6).sqrt() * w[i] as f64;
                assert!(
                    (got[i] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "n {n} i {i}"
                );
            }
        }
    }

    #[test]
    fn softmax_matches_a_float64_softmax() {
        for n in [1usize, 5, 8, 13, 64, 300] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 103) as f32 * 0.37 - 19.0)
                .collect();
            let max = x.iter().fold(f64::MIN, |a, &b| a.max(b as f64));
            let z: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
            let mut got = x.clone();
            softmax_inplace(&mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = (v as f64 - max).exp() / z;
                assert!(
                    (g as f64 - want).abs() <= 1e-6 * want + 1e-12,
                    "n {n}: {g} vs {want}"
                );
            }
        }
        softmax_inplace(&mut []);
    }

    #[test]
    fn gelu_tanh_matches_the_tanh_formula() {
        let xs: Vec<f32> = (0..4001).map(|i| (i as f32 - 2000.0) * 0.01).collect();
        let mut g = xs.clone();
        gelu_tanh_mul(Isa::SCALAR, &mut g, &vec![1.0; xs.len()]);
        for (&x, &got) in xs.iter().zip(&g) {
            let x64 = x as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let want = 0.5 * x64 * (1.0 + (c * (x64 + 0.044715 * x64.powi(3))).tanh());
            assert!(
                (got as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "gelu({x}) = {got}, want {want}"
            );
        }
    }
}
