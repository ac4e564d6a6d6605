//! The gated delta rule's reference (see `crate::recurrent`): one token of one head, in two
//! passes over each state row. Written so that the same body compiled for wider vectors
//! (`x86::avx2::recurrent`) gives the same bits: every product and sum is a separate f32
//! operation in a fixed order (no fused multiply-add), and the dot products keep eight
//! independent lanes.

/// The scalars of one token's delta-rule update of one head.
#[derive(Clone, Copy, Debug)]
pub struct DeltaGates {
    /// `e^g` (g ≤ 0, the gate): how much of the state survives the token.
    pub decay: f32,
    /// The write strength β.
    pub beta: f32,
    /// The output's factor (`1/√d_k`).
    pub scale: f32,
}

/// Eight-lane dot product in a fixed reduction order.
#[inline(always)]
fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0f32; 8];
    let mut i = 0;
    while i + 8 <= n {
        for l in 0..8 {
            acc[l] += a[i + l] * b[i + l];
        }
        i += 8;
    }
    let mut tail = 0f32;
    while i < n {
        tail += a[i] * b[i];
        i += 1;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// One token of the gated delta rule for one head; see `crate::recurrent::gated_delta_step`.
/// Per row `S_j`: `δ_j = (v_j − decay·(S_j·k))·β`, then in one pass
/// `S_j ← decay·S_j + δ_j k` while `out_j = (S_j·q)·scale` accumulates.
#[inline(always)]
pub(crate) fn delta_step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: DeltaGates,
    out: &mut [f32],
) {
    let DeltaGates { decay, beta, scale } = g;
    let dk = k.len();
    for ((row, &vj), oj) in s.chunks_exact_mut(dk).zip(v).zip(out.iter_mut()) {
        let delta = (vj - decay * dot8(row, k)) * beta;
        let mut acc = [0f32; 8];
        let mut i = 0;
        while i + 8 <= dk {
            for l in 0..8 {
                let r = row[i + l] * decay + delta * k[i + l];
                row[i + l] = r;
                acc[l] += r * q[i + l];
            }
            i += 8;
        }
        let mut tail = 0f32;
        while i < dk {
            let r = row[i] * decay + delta * k[i];
            row[i] = r;
            tail += r * q[i];
            i += 1;
        }
        let dot = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        *oj = (dot + tail) * scale;
    }
}

/// One token of Mamba2's scan for one head (see `crate::recurrent::ssm_scan_step`): each state
/// row is updated and dotted with `c` in one pass, eight lanes at a time in a fixed order
/// (lane `k mod 8` of every row), no fused multiply-add — so the AVX2 build of this body
/// (`x86::avx2::recurrent`) gives these bits.
#[inline(always)]
pub(crate) fn ssm_scan(
    s: &mut [f32],
    x: &[f32],
    b: &[f32],
    c: &[f32],
    dt: f32,
    decay: f32,
    y: &mut [f32],
) {
    let n = b.len();
    let whole = n / 8 * 8;
    for ((row, &xi), yi) in s.chunks_exact_mut(n).zip(x).zip(y.iter_mut()) {
        let xdt = xi * dt;
        let mut acc = [0f32; 8];
        for ((sv, bv), cv) in row[..whole]
            .chunks_exact_mut(8)
            .zip(b[..whole].chunks_exact(8))
            .zip(c[..whole].chunks_exact(8))
        {
            for l in 0..8 {
                let v = sv[l] * decay + bv[l] * xdt;
                sv[l] = v;
                acc[l] += v * cv[l];
            }
        }
        for k in whole..n {
            let v = row[k] * decay + b[k] * xdt;
            row[k] = v;
            acc[k % 8] += v * c[k];
        }
        *yi = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}
