//! Element-wise and row-wise operations of a transformer layer. These touch activations only
//! (kilobytes per token), so they are simple loops the compiler vectorises.

/// `out = x / sqrt(mean(x²) + eps) · w` (RMSNorm), one row.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let scale = 1.0 / (ss + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// RMSNorm of every `w.len()`-wide row of `x` into the same row of `out`.
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rms_norm(xr, w, eps, or);
    }
}

/// RMSNorm of every `w.len()`-wide row of `x` in place (per-head norms: `w` is one head
/// wide). The same arithmetic as [`rms_norm`].
pub fn rms_norm_rows_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / xr.len() as f32;
        let scale = 1.0 / (ss + eps).sqrt();
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

/// `gate = silu(gate) · up` (SwiGLU), element-wise.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `gate = gelu(gate) · up` (GeGLU) with the tanh approximation of GELU,
/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, as Gemma and llama.cpp use it.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let t = (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh();
        *g = 0.5 * x * (1.0 + t) * u;
    }
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

/// In-place softmax of a row; returns nothing on an empty row.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}
