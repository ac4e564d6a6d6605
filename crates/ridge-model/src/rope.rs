//! RoPE angle tables beyond the plain `pos · base^(−2i/d)` (which `ridge_kernels::ops` has):
//! Llama 3's per-pair frequency divisors, and the position scaling GGUF metadata asks for —
//! linear interpolation and YaRN — computed as llama.cpp's `rope_yarn` does, so a model
//! trained with them sees the positions it was trained on.
//!
//! YaRN in brief: with `s = 1/factor`, each rotated pair `i` turns by a blend of the original
//! angle `θ` and the interpolated `s·θ`: pairs that rotate many times over the original
//! context (high frequency, `i` below YaRN's low correction dimension) keep `θ`, pairs that
//! rotate less than once (above the high one) take `s·θ`, a linear ramp between. The cos/sin
//! are then multiplied by `1 + 0.1·ln(factor)` (attention gets sharper as contexts grow).

use crate::config::RopeScaling;

/// Llama 3's scaling: pair `i` turns by `pos · base^(−2i/dim) / factors[i]`.
pub(crate) fn table_with_factors(
    pos: usize,
    dim: usize,
    base: f32,
    factors: &[f32],
    cos: &mut [f32],
    sin: &mut [f32],
) {
    for (i, ((c, s), &ff)) in cos.iter_mut().zip(sin.iter_mut()).zip(factors).enumerate() {
        let freq = (base as f64).powf(-2.0 * i as f64 / dim as f64) / ff as f64;
        let a = pos as f64 * freq;
        *c = a.cos() as f32;
        *s = a.sin() as f32;
    }
}

/// YaRN's correction dimension: the pair index at which a pair turns `rotations` times over
/// `orig_ctx` positions.
fn corr_dim(dim: usize, orig_ctx: usize, rotations: f32, base: f32) -> f32 {
    dim as f32 * (orig_ctx as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// The angles of position `pos` under `scaling` with angle factor `freq_scale` (the global or
/// the sliding layers' one), and Llama 3's divisors where given: `cos[i]`, `sin[i]` for each of
/// the `dim / 2` pairs, scaled by the table's magnitude factor.
#[allow(clippy::too_many_arguments)]
pub(crate) fn table(
    pos: usize,
    dim: usize,
    base: f32,
    factors: Option<&[f32]>,
    freq_scale: f32,
    scaling: &RopeScaling,
    cos: &mut [f32],
    sin: &mut [f32],
) {
    let mut mscale = scaling.attn_factor;
    let mut ramp = None;
    if let Some(y) = scaling.yarn.as_ref().filter(|y| y.ext_factor != 0.0) {
        let lo = corr_dim(dim, y.orig_ctx, y.beta_fast, base)
            .floor()
            .max(0.0);
        let hi = corr_dim(dim, y.orig_ctx, y.beta_slow, base)
            .ceil()
            .min(dim as f32 - 1.0);
        ramp = Some((lo, hi, y.ext_factor));
        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
    }
    for (i, (c, s)) in cos.iter_mut().zip(sin.iter_mut()).enumerate() {
        let ff = factors.and_then(|f| f.get(i)).copied().unwrap_or(1.0) as f64;
        let extrap = pos as f64 * (base as f64).powf(-2.0 * i as f64 / dim as f64) / ff;
        let interp = freq_scale as f64 * extrap;
        let theta = match ramp {
            None => interp,
            Some((lo, hi, ext)) => {
                let y = (i as f32 - lo) / (hi - lo).max(0.001);
                let mix = ((1.0 - y.clamp(0.0, 1.0)) * ext) as f64;
                interp * (1.0 - mix) + extrap * mix
            }
        };
        *c = theta.cos() as f32 * mscale;
        *s = theta.sin() as f32 * mscale;
    }
}
