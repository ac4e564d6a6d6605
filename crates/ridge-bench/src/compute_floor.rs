//! The compute side of a step's floor: the time its multiply-accumulates take at the CPU's
//! probed peaks, set beside the memory floor so a report can say which bound applies.
//!
//! ridge's linear layers multiply int8 activations by weights widened to int8, so their
//! products run at the int8 peak ([`ridge_roofline::probe::int8_peak`]); attention (QK and
//! PV over the cached positions) runs in f32 FMAs at the f32 peak. A step of `T` tokens
//! therefore needs at least
//!
//! ```text
//! MACs / int8_MAC_rate  +  2 · n_heads · head_dim · Σ_tokens attended / f32_FMA_rate
//! ```
//!
//! seconds, with `MACs = T · params` for decode (`params` counts what one token multiplies:
//! for a mixture, its `k` experts) and, for a prefill, the output head only for the one row
//! per prompt that samples ([`ModelSpec::prefill_params`]). The
//! step's floor is the larger of that and the memory floor (bytes read / bandwidth): prefill
//! and large batches are compute-bound, batch-1 decode memory-bound. The sum treats the two
//! kinds of work as serial; a kernel that overlapped them perfectly could beat it by at most
//! the smaller term (attention is a few percent of a short-context step).

use ridge_roofline::ModelSpec;

/// The probed compute roofs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ComputeRoof {
    /// int8 multiply-accumulates per second over all threads, 10⁹.
    pub int8_gmacs: f64,
    /// f32 fused multiply-adds per second over all threads, 10⁹ (half the GFLOP/s figure).
    pub f32_gmacs: f64,
}

impl ComputeRoof {
    /// The faster of two readings of the same roofs, field by field: a roof is the machine's
    /// limit, so interference can only make a reading slower.
    pub fn best(self, other: ComputeRoof) -> ComputeRoof {
        ComputeRoof {
            int8_gmacs: self.int8_gmacs.max(other.int8_gmacs),
            f32_gmacs: self.f32_gmacs.max(other.f32_gmacs),
        }
    }

    /// Milliseconds a step takes at the peaks when its tokens together attend over
    /// `attended` layer-positions (see [`ModelSpec::attended`]).
    /// `macs` is the linear layers' multiply-adds (`tokens · params` for decode,
    /// [`ModelSpec::prefill_params`] for a prefill).
    pub fn step_ms(&self, spec: &ModelSpec, macs: f64, attended: f64) -> f64 {
        let linear = macs / (self.int8_gmacs * 1e9);
        let attention =
            2.0 * (spec.n_heads * spec.head_dim) as f64 * attended / (self.f32_gmacs * 1e9);
        1e3 * (linear + attention)
    }

    /// The compute floor of a prefill of `batch` prompts of `prompt` tokens, ms.
    pub fn prefill_ms(&self, spec: &ModelSpec, batch: usize, prompt: usize) -> f64 {
        let b = batch as f64;
        self.step_ms(
            spec,
            spec.prefill_params(batch as u64, (batch * prompt) as u64),
            b * spec.attended_prefill(prompt as u64),
        )
    }

    /// The compute floor of one decode step of `batch` sequences at a mean context of
    /// `context` cached positions, ms.
    pub fn decode_step_ms(&self, spec: &ModelSpec, batch: usize, context: f64) -> f64 {
        let b = batch as f64;
        self.step_ms(
            spec,
            b * spec.params as f64,
            b * spec.attended(context.round() as u64) as f64,
        )
    }
}

/// Which floor is the larger: `"memory"` or `"compute"`.
pub fn bound(memory_ms: f64, compute_ms: f64) -> &'static str {
    if compute_ms > memory_ms {
        "compute"
    } else {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_keeps_the_faster_reading_of_each_roof() {
        let a = ComputeRoof {
            int8_gmacs: 236.4,
            f32_gmacs: 117.0,
        };
        let b = ComputeRoof {
            int8_gmacs: 469.6,
            f32_gmacs: 58.2,
        };
        let want = ComputeRoof {
            int8_gmacs: 469.6,
            f32_gmacs: 117.0,
        };
        assert_eq!(a.best(b), want);
        assert_eq!(b.best(a), want);
    }

    fn spec() -> ModelSpec {
        ModelSpec {
            name: "t".into(),
            n_layers: 2,
            kv_layers: 2,
            kv_rows: 2,
            state_bytes: 0,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 8,
            weight_bytes: 1000,
            params: 1_000_000,
            head_params: 100_000,
            weights_format: "Q4_0".into(),
            sliding_window: None,
            experts: None,
            total_weight_bytes: 1000,
        }
    }

    #[test]
    fn floors_by_hand() {
        let r = ComputeRoof {
            int8_gmacs: 1.0,
            f32_gmacs: 0.5,
        };
        let s = spec();
        // 10⁷ MACs at 10⁹/s = 10 ms; attention 2 · 32 · 100 / 0.5·10⁹ = 12.8 µs.
        let ms = r.step_ms(&s, 1e7, 100.0);
        assert!((ms - (10.0 + 0.0128)).abs() < 1e-9, "{ms}");
        // Prefill of 2 × 4 tokens: 8 tokens through the body (9·10⁵ MACs each), the head
        // (10⁵) for 2 of them; 2 · (2 layers · (1+2+3+4)) = 40 layer-positions.
        let p = r.prefill_ms(&s, 2, 4);
        let linear = (8.0 * 0.9e6 + 2.0 * 0.1e6) / 1e9 * 1e3;
        assert!(
            (p - (linear + 2.0 * 32.0 * 40.0 / 0.5e9 * 1e3)).abs() < 1e-9,
            "{p}"
        );
        // Decode of 3 sequences at context 5: 3 tokens, 3 · 2 · 5 layer-positions.
        let d = r.decode_step_ms(&s, 3, 5.0);
        assert!(
            (d - (3.0 + 2.0 * 32.0 * 30.0 / 0.5e9 * 1e3)).abs() < 1e-9,
            "{d}"
        );
        assert_eq!(bound(1.0, 2.0), "compute");
        assert_eq!(bound(2.0, 1.0), "memory");
    }
}
