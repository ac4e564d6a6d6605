//! Element-wise and row-wise operations of a transformer layer. These touch activations only
//! (kilobytes per token), but on a decode step they run on one thread between the parallel
//! matrix products, so the ones on that path have SIMD versions (`x86::avx2::elementwise`)
//! that perform the scalar reference's operations (`scalar::elementwise`) in the same order
//! and give the same bits; each call takes its [`Isa`]'s entry of the dispatch table.

pub use crate::scalar::elementwise::{exp_approx, softmax_partial};
use crate::Isa;

/// `out = x / sqrt(mean(x²) + eps) · w` (RMSNorm), one row. The sum of squares is taken in
/// eight interleaved partial sums as in [`softmax_inplace`] (a single serial sum was most of a
/// norm's time: one dependent add per element).
pub fn rms_norm(isa: Isa, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let scale = inv_rms(isa, x, eps);
    // SAFETY: the table is `isa`'s, whose kernels run on this CPU (cpu.rs); every version
    // touches at most the shortest of the three slices.
    unsafe { (isa.kernels().scale_mul)(x, scale, w, out) }
}

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares in eight partial sums (see [`rms_norm`]).
fn inv_rms(isa: Isa, x: &[f32], eps: f32) -> f32 {
    // SAFETY: as in `rms_norm`.
    let ss = unsafe { (isa.kernels().sum_squares)(x) };
    1.0 / (ss / x.len() as f32 + eps).sqrt()
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
        // SAFETY: as in `rms_norm`; in place is allowed (each element is read before it is
        // written, by the same lane).
        unsafe { (isa.kernels().scale_mul_inplace)(xr, scale, w) };
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
    // SAFETY: as in `rms_norm` (the shorter slice bounds every version).
    unsafe { gated_by_pieces(gate, up, isa.kernels().silu_mul) }
}

/// Elements from which a gated activation is split across the pool (a prefill's FFN rows).
const PAR_GATED: usize = 1 << 15;

/// `kernel(gate, up)` over pieces of `gate` (and the same range of `up`), in parallel for
/// large inputs. Each element is computed on its own and pieces start at multiples of 64, so
/// every element meets the same vector lanes as in one call: the same bits however it is split.
///
/// # Safety
/// `kernel` runs on this CPU (from the dispatch table of a detected [`Isa`]) and touches only
/// the first `min(gate.len(), up.len())` elements of each slice.
unsafe fn gated_by_pieces(gate: &mut [f32], up: &[f32], kernel: unsafe fn(&mut [f32], &[f32])) {
    let n = gate.len().min(up.len());
    if n < PAR_GATED {
        // SAFETY: this function's contract.
        return unsafe { kernel(gate, up) };
    }
    let g = crate::pool::SharedMut(gate.as_mut_ptr());
    crate::pool::for_ranges(n, 64, PAR_GATED, |lo, hi| {
        // SAFETY: pieces of 0..n are disjoint and inside `gate` (n <= gate.len()), which
        // outlives the loop; the kernel as this function's contract says.
        unsafe {
            kernel(
                std::slice::from_raw_parts_mut(g.ptr().add(lo), hi - lo),
                &up[lo..hi],
            )
        }
    });
}

/// `gate = gelu(gate) · up` (GeGLU) with the tanh approximation of GELU,
/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, as Gemma and llama.cpp use it.
///
/// Computed as the identical `x / (1 + e^(−2y))` (since `(1 + tanh y) / 2 = σ(2y)`) with
/// [`exp_approx`], so the loop vectorises: a prefill of 512 tokens evaluates it 19 million
/// times for Gemma 3 270M, and the library `tanhf` alone took ~8% of prefill.
pub fn gelu_tanh_mul(isa: Isa, gate: &mut [f32], up: &[f32]) {
    // SAFETY: as in `rms_norm`.
    unsafe { gated_by_pieces(gate, up, isa.kernels().gelu_tanh_mul) }
}

/// `x *= s`, element-wise.
pub fn scale_inplace(x: &mut [f32], s: f32) {
    for v in x.iter_mut() {
        *v *= s;
    }
}

/// `x = cap · tanh(x / cap)` (logit soft-capping), element-wise, with the library `tanhf`;
/// split across the pool for a vocabulary's worth of logits (Gemma 4's 262 144 took ~5% of a
/// decode step on one thread). Each element is computed alone: the same bits however split.
pub fn softcap_inplace(x: &mut [f32], cap: f32) {
    let cap_all = move |v: &mut [f32]| {
        for e in v.iter_mut() {
            *e = cap * (*e / cap).tanh();
        }
    };
    let n = x.len();
    if n < PAR_GATED {
        return cap_all(x);
    }
    let p = crate::pool::SharedMut(x.as_mut_ptr());
    crate::pool::for_ranges(n, 64, PAR_GATED, |lo, hi| {
        // SAFETY: pieces of 0..n are disjoint and inside `x`, which outlives the loop.
        cap_all(unsafe { std::slice::from_raw_parts_mut(p.ptr().add(lo), hi - lo) })
    });
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
/// `len % 8` elements added one by one after them. The AVX2 version (`x86::avx2::elementwise::softmax_partial`)
/// performs exactly these operations on vectors, so both give the same bits; a libm `exp` per
/// score with one serial sum was a third of decode attention's arithmetic.
pub fn softmax_inplace(x: &mut [f32]) {
    let (_, sum) = softmax_partial(x);
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
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

    /// A vocabulary's worth of logits, split across the pool, gets each element's own
    /// `cap · tanh(x / cap)`, within float rounding of float64.
    #[test]
    fn softcap_split_is_each_elements_tanh() {
        let n = 262_144 + 37;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 4001) as f32 * 0.03 - 60.0)
            .collect();
        let mut got = x.clone();
        softcap_inplace(&mut got, 30.0);
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            assert_eq!(g, 30.0 * (v / 30.0).tanh(), "element {i}");
            let want = 30.0 * (v as f64 / 30.0).tanh();
            assert!(
                (g as f64 - want).abs() <= 1e-5 * want.abs().max(1.0),
                "element {i}"
            );
        }
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
