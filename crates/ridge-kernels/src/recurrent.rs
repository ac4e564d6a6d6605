//! Kernels of the recurrent mixers (linear attention and its convolution) that hybrid models
//! interleave with attention: a layer keeps a fixed-size state per sequence instead of a K/V
//! cache that grows, and each token reads and rewrites it.
//!
//! - [`causal_conv1d`]: the depthwise causal convolution over a rolling window of the last
//!   `kernel − 1` inputs (Qwen3.5's and Qwen3-Next's `ssm_conv1d`, Mamba's conv).
//! - [`gated_delta_step`]: one token of the gated delta rule (Gated DeltaNet) for one head:
//!   `S ← e^g·S;  S ← S + β (v − S k) kᵀ;  o = S q / √d`, the state a `d_v × d_k` matrix.
//! - [`ssm_scan_step`]: one token of Mamba2's selective scan for one head:
//!   `S ← e^{Δ·A}·S + (Δ·x) Bᵀ;  y = S C`, the state a `head_dim × d_state` matrix.
//! - [`l2_normalize`], [`softplus`]: the small element-wise steps around them.
//!
//! Why token by token: the recurrent form gives every token the same bits whatever chunk of a
//! prompt it arrives in and whatever else is in the batch (each (sequence, head) is one
//! independent loop), which keeps chunked prefill, batch invariance and prefix checkpoints
//! exact. Each state row is updated and read in one pass, so a head's state is streamed once
//! per token. Dot products keep eight partial sums in a fixed order and nothing is fused, so
//! the AVX2 build of the same body (`x86::avx2::recurrent`) gives the reference's bits.

pub use crate::scalar::recurrent::DeltaGates;

/// A Mamba2 head's step for one token: `dt` after softplus, and the decay `e^{dt·A}`.
#[derive(Clone, Copy, Debug)]
pub struct ScanGates {
    /// The step `Δ` (after softplus).
    pub dt: f32,
    /// `e^{Δ·A}`.
    pub decay: f32,
}
use crate::Isa;

/// Causal depthwise convolution of `n` tokens of `ch` channels (`x`, token-major) with a
/// kernel of `kernel` taps per channel (`w`, channel-major: `w[c·kernel + j]`), continuing
/// from `state` (the previous `kernel − 1` inputs, token-major, oldest first). Writes
/// `out[t·ch + c] = Σ_j win[t + j][c] · w[c·kernel + j]` over the window
/// `win = state ++ x`, and leaves the last `kernel − 1` inputs in `state`.
///
/// Panics if a slice is shorter than its shape says (a caller bug: shapes come from a
/// validated configuration).
pub fn causal_conv1d(
    x: &[f32],
    n: usize,
    ch: usize,
    w: &[f32],
    kernel: usize,
    state: &mut [f32],
    out: &mut [f32],
) {
    let keep = kernel.saturating_sub(1);
    assert!(x.len() >= n * ch && out.len() >= n * ch && w.len() >= ch * kernel);
    assert!(state.len() >= keep * ch);
    // The tap j of token t reads window row t + j: a state row below `keep`, else x's row.
    let row = |state: &[f32], r: usize, c: usize| {
        if r < keep {
            state[r * ch + c]
        } else {
            x[(r - keep) * ch + c]
        }
    };
    for t in 0..n {
        let o = &mut out[t * ch..(t + 1) * ch];
        for (c, oc) in o.iter_mut().enumerate() {
            let mut s = 0f32;
            for j in 0..kernel {
                s += row(state, t + j, c) * w[c * kernel + j];
            }
            *oc = s;
        }
    }
    // The new window tail: the last `keep` rows of state ++ x.
    if keep == 0 {
        return;
    }
    if n >= keep {
        state[..keep * ch].copy_from_slice(&x[(n - keep) * ch..n * ch]);
    } else {
        state.copy_within(n * ch..keep * ch, 0);
        state[(keep - n) * ch..keep * ch].copy_from_slice(&x[..n * ch]);
    }
}

/// One token of the gated delta rule for one head. `s` is the head's state, `d_v` rows of
/// `d_k` (row `j` holds `S[j][·]`); `q` and `k` are `d_k` long (already L2-normalized), `v`
/// and `out` are `d_v` long. Row by row: `S_j ← decay·S_j`, `δ_j = (v_j − S_j·k)·β`,
/// `S_j ← S_j + δ_j k`, `out_j = (S_j·q)·scale` — computed in two passes over the row (the
/// decay folded into the first dot product), with the same bits on every path.
pub fn gated_delta_step(
    isa: Isa,
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: DeltaGates,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: an Isa whose avx2() is true is made only after detection found AVX2.
        unsafe { crate::x86::avx2::recurrent::delta_step(s, q, k, v, g, out) };
        return;
    }
    let _ = isa;
    crate::scalar::recurrent::delta_step(s, q, k, v, g, out)
}

/// One token of Mamba2's selective scan for one head (llama.cpp's `ssm_scan` with a scalar
/// decay per head): for each of the head's `x.len()` rows `i`, its state row
/// `s[i·n..(i+1)·n]` (`n = b.len()` state entries) becomes `s·decay + b·(x[i]·dt)` and
/// `y[i] = Σ_j s[j]·c[j]` over the new row, with the head's step and decay in `g`.
///
/// Panics if a slice is shorter than its shape says (a caller bug).
pub fn ssm_scan_step(
    isa: Isa,
    s: &mut [f32],
    x: &[f32],
    b: &[f32],
    c: &[f32],
    g: ScanGates,
    y: &mut [f32],
) {
    let (dt, decay) = (g.dt, g.decay);
    assert!(c.len() == b.len() && s.len() >= x.len() * b.len() && y.len() >= x.len());
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: an Isa whose avx2() is true is made only after detection found AVX2.
        unsafe { crate::x86::avx2::recurrent::ssm_scan(s, x, b, c, dt, decay, y) };
        return;
    }
    let _ = isa;
    crate::scalar::recurrent::ssm_scan(s, x, b, c, dt, decay, y)
}

/// `x ← x / √(Σx² + eps)` (llama.cpp's L2 norm for Gated DeltaNet: an RMS norm with `eps/n`,
/// times `1/√n`, computed in that order).
pub fn l2_normalize(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let sum: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let mean = (sum / x.len().max(1) as f64) as f32;
    let scale = 1.0 / (mean + eps / n).sqrt();
    let inv = 1.0 / n.sqrt();
    for v in x.iter_mut() {
        *v = *v * scale * inv;
    }
}

/// `ln(1 + eˣ)`, and `x` itself above 20 (where the two agree in f32), as llama.cpp computes it.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// `1 / (1 + e⁻ˣ)`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conv over a whole sequence at once equals the same sequence fed in pieces.
    #[test]
    fn conv_in_pieces_equals_whole() {
        let (ch, kernel, n) = (5, 4, 9);
        let x: Vec<f32> = (0..n * ch).map(|i| ((i * 37 % 11) as f32) - 5.0).collect();
        let w: Vec<f32> = (0..ch * kernel)
            .map(|i| ((i * 13 % 7) as f32) * 0.25)
            .collect();
        let mut st = vec![0f32; (kernel - 1) * ch];
        let mut whole = vec![0f32; n * ch];
        causal_conv1d(&x, n, ch, &w, kernel, &mut st, &mut whole);
        let mut st2 = vec![0f32; (kernel - 1) * ch];
        let mut parts = vec![0f32; n * ch];
        let mut t = 0;
        for len in [1, 2, 1, 5] {
            let r = t * ch..(t + len) * ch;
            causal_conv1d(&x[r.clone()], len, ch, &w, kernel, &mut st2, &mut parts[r]);
            t += len;
        }
        assert_eq!(whole, parts);
        assert_eq!(st, st2);
        // Token 5, channel 2 by hand: taps over inputs 2..=5.
        let want: f32 = (0..kernel)
            .map(|j| x[(2 + j) * ch + 2] * w[2 * kernel + j])
            .sum();
        assert_eq!(whole[5 * ch + 2], want);
    }

    /// Mamba2's scan step against a float64 transcription of its definition, over a few
    /// tokens (the state carried between them).
    #[test]
    fn ssm_scan_step_matches_f64() {
        let (hd, n) = (5, 19);
        let mut s: Vec<f32> = (0..hd * n)
            .map(|i| ((i * 31 % 13) as f32 - 6.0) * 0.1)
            .collect();
        let mut s64: Vec<f64> = s.iter().map(|&v| v as f64).collect();
        for t in 0..4 {
            let x: Vec<f32> = (0..hd)
                .map(|i| ((i + 3 * t) % 7) as f32 * 0.3 - 1.0)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 5 + t) % 11) as f32 * 0.1 - 0.5)
                .collect();
            let c: Vec<f32> = (0..n)
                .map(|i| ((i * 7 + 2 * t) % 9) as f32 * 0.1 - 0.4)
                .collect();
            let (dt, decay) = (0.3 + 0.1 * t as f32, 0.9 - 0.05 * t as f32);
            let mut y = vec![0f32; hd];
            ssm_scan_step(
                Isa::SCALAR,
                &mut s,
                &x,
                &b,
                &c,
                ScanGates { dt, decay },
                &mut y,
            );
            for i in 0..hd {
                let mut want = 0f64;
                for j in 0..n {
                    let k = i * n + j;
                    s64[k] = s64[k] * decay as f64 + b[j] as f64 * (x[i] as f64 * dt as f64);
                    want += s64[k] * c[j] as f64;
                }
                assert!(
                    (y[i] as f64 - want).abs() < 1e-5,
                    "token {t} row {i}: {} vs {want}",
                    y[i]
                );
            }
            for (a, b) in s.iter().zip(&s64) {
                assert!((*a as f64 - b).abs() < 1e-5);
            }
        }
    }

    /// The delta rule against a float64 transcription of its definition.
    #[test]
    fn delta_step_matches_f64() {
        let (dk, dv) = (12, 6);
        let mut s: Vec<f32> = (0..dk * dv)
            .map(|i| ((i * 29 % 17) as f32 - 8.0) * 0.05)
            .collect();
        let mut s64: Vec<f64> = s.iter().map(|&v| v as f64).collect();
        for t in 0..3 {
            let f = |m: usize| -> Vec<f32> {
                (0..m)
                    .map(|i| (((i + t) * 31 % 13) as f32 - 6.0) * 0.1)
                    .collect()
            };
            let (mut q, mut k, v) = (f(dk), f(dk + 1)[1..].to_vec(), f(dv));
            l2_normalize(&mut q, 1e-6);
            l2_normalize(&mut k, 1e-6);
            let (g, beta, scale) = (-0.3f32 - t as f32 * 0.1, 0.7f32, 1.0 / (dk as f32).sqrt());
            let mut out = vec![0f32; dv];
            let gates = DeltaGates {
                decay: g.exp(),
                beta,
                scale,
            };
            gated_delta_step(Isa::SCALAR, &mut s, &q, &k, &v, gates, &mut out);
            for j in 0..dv {
                let row = &mut s64[j * dk..(j + 1) * dk];
                for r in row.iter_mut() {
                    *r *= (g as f64).exp();
                }
                let sk: f64 = row.iter().zip(&k).map(|(a, &b)| a * b as f64).sum();
                let d = (v[j] as f64 - sk) * beta as f64;
                for (r, &kk) in row.iter_mut().zip(&k) {
                    *r += d * kk as f64;
                }
                let o: f64 =
                    row.iter().zip(&q).map(|(a, &b)| a * b as f64).sum::<f64>() * scale as f64;
                assert!((out[j] as f64 - o).abs() < 1e-5, "token {t} row {j}");
            }
        }
        for (a, b) in s.iter().zip(&s64) {
            assert!((*a as f64 - b).abs() < 1e-5);
        }
    }

    /// Every path gives the reference's bits.
    #[test]
    fn delta_step_paths_agree_bitwise() {
        let (dk, dv) = (128, 128);
        let s0: Vec<f32> = (0..dk * dv)
            .map(|i| ((i * 29 % 17) as f32 - 8.0) * 0.05)
            .collect();
        let f = |m: usize, t: usize| -> Vec<f32> {
            (0..m)
                .map(|i| (((i + t) * 31 % 13) as f32 - 6.0) * 0.1)
                .collect()
        };
        let run = |isa: Isa| {
            let mut s = s0.clone();
            let mut outs = Vec::new();
            for t in 0..4 {
                let (q, k, v) = (f(dk, t), f(dk, t + 5), f(dv, t + 9));
                let gates = DeltaGates {
                    decay: 0.9,
                    beta: 0.6,
                    scale: 0.088,
                };
                let mut out = vec![0f32; dv];
                gated_delta_step(isa, &mut s, &q, &k, &v, gates, &mut out);
                outs.extend(out);
            }
            (s, outs)
        };
        let want = run(Isa::SCALAR);
        for isa in Isa::available() {
            assert!(run(isa) == want, "{:?}", isa.kind());
        }
    }

    /// The scan gives the reference's bits on every available path (19 state entries: two
    /// whole lanes of 8 and a tail).
    #[test]
    fn ssm_scan_is_bit_identical_on_every_path() {
        let (hd, n) = (6, 19);
        let f = |m: usize, t: usize| -> Vec<f32> {
            (0..m)
                .map(|i| (((i + 3 * t) * 29 % 17) as f32 - 8.0) * 0.07)
                .collect()
        };
        let run = |isa: Isa| {
            let mut s = f(hd * n, 0);
            let mut ys = Vec::new();
            for t in 1..5 {
                let mut y = vec![0f32; hd];
                ssm_scan_step(
                    isa,
                    &mut s,
                    &f(hd, t),
                    &f(n, t + 3),
                    &f(n, t + 7),
                    ScanGates {
                        dt: 0.37,
                        decay: 0.81,
                    },
                    &mut y,
                );
                ys.extend(y);
            }
            (s, ys)
        };
        let want = run(Isa::SCALAR);
        for isa in Isa::available() {
            assert!(run(isa) == want, "{:?}", isa.kind());
        }
    }

    #[test]
    fn l2_and_softplus() {
        let mut x = vec![3.0f32, 4.0];
        l2_normalize(&mut x, 0.0);
        assert!((x[0] - 0.6).abs() < 1e-6 && (x[1] - 0.8).abs() < 1e-6);
        assert_eq!(softplus(30.0), 30.0);
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-7);
    }
}
