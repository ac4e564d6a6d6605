//! The scalar reference of the element-wise operations (`ops`): plain loops in a fixed order
//! that the SIMD versions (`x86::avx2::elementwise`) repeat on lanes, so both give the same
//! bits. Kept below every kernel: the SIMD tails and the public `ops` both call these.

/// `Σ x²`: element `i` of every whole group of eight into partial sum `i`, the partial sums
/// combined by [`lane_sum`], the last `len % 8` squares added one by one.
pub(crate) fn sum_squares(x: &[f32]) -> f32 {
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

/// The unnormalised half of [`crate::ops::softmax_inplace`]: replaces `x` by `exp(x − max)` and returns
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

/// `out = x · scale · w`, element-wise (RMSNorm's second half).
pub(crate) fn scale_mul(x: &[f32], scale: f32, w: &[f32], out: &mut [f32]) {
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// [`scale_mul`] in place: `x = x · scale · w`.
pub(crate) fn scale_mul_inplace(x: &mut [f32], scale: f32, w: &[f32]) {
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// `gate = gate / (1 + e^(−gate)) · up` (SwiGLU's gate).
pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp_approx(-*g)) * u;
    }
}

/// `gate = x · up / (1 + e^(−y))`, `y = GELU_C · x · (1 + 0.044715 · x²)` (GeGLU, tanh form).
pub(crate) fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let y = GELU_C * x * (1.0 + 0.044715 * x * x);
        *g = x * u / (1.0 + exp_approx(-y));
    }
}
