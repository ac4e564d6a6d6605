//! The gated delta rule and Mamba2's scan on 256-bit vectors: the reference bodies
//! (`scalar::recurrent`) compiled with AVX2 enabled. The body uses no fused multiply-add and keeps its eight dot-product lanes,
//! so the wider code gives the reference's bits.

use crate::scalar::recurrent::{delta_step as body, ssm_scan as scan_body, DeltaGates};

/// One token of one head (see `crate::recurrent::gated_delta_step`).
///
/// # Safety
/// The CPU must support AVX2 (callers reach this only through an [`crate::Isa`] whose
/// `avx2()` is true).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn delta_step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: DeltaGates,
    out: &mut [f32],
) {
    body(s, q, k, v, g, out)
}

/// One token of Mamba2's scan for one head (see `crate::recurrent::ssm_scan_step`).
///
/// # Safety
/// The CPU must support AVX2 (callers reach this only through an [`crate::Isa`] whose
/// `avx2()` is true).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn ssm_scan(
    s: &mut [f32],
    x: &[f32],
    b: &[f32],
    c: &[f32],
    dt: f32,
    decay: f32,
    y: &mut [f32],
) {
    scan_body(s, x, b, c, dt, decay, y)
}
