//! The analytic floor of one decode step: bytes read over bandwidth.

/// The byte counts of a model that a decode step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RooflineInputs {
    /// Bytes of weights read once per forward pass (every layer matrix, the norms and the output
    /// head, at their stored — quantized — size).
    pub weight_bytes: usize,
    /// Bytes of KV cache one token of context occupies in the layers that attend over every
    /// position (all layers, for a model without sliding-window layers), K and V together.
    pub kv_bytes_per_token: usize,
    /// Layers that attend through a sliding window (Gemma 3: five of six), if any: they read at
    /// most `window.positions` positions per sequence, whatever the context.
    pub window: Option<WindowedKv>,
    /// A mixture of experts' routed experts, if any: `weight_bytes` counts the `k` a single
    /// token reads; a step of more tokens reads the distinct experts they chose.
    pub experts: Option<RoutedExperts>,
    /// A hybrid's recurrent state per sequence (every recurrent layer's convolution window and
    /// delta-rule or SSM state), read and written by every step whatever the context; 0 for a
    /// model whose every layer attends.
    pub state_bytes_per_seq: usize,
}

/// The routed experts of a mixture, for the bytes a step of several tokens reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedExperts {
    /// Bytes of one expert in every layer together (its gate, up and down slices).
    pub bytes_per_expert: usize,
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts per token.
    pub n_used: usize,
}

impl RoutedExperts {
    /// Expected distinct experts per layer that `tokens` independently routed tokens choose:
    /// `E · (1 − (1 − k/E)^B)` (each expert is missed by one token with probability
    /// `1 − k/E`); `k` for one token, at most `E`.
    pub fn expected_distinct(&self, tokens: usize) -> f64 {
        let (e, k) = (self.n_expert as f64, self.n_used as f64);
        if tokens == 0 || e == 0.0 {
            return 0.0;
        }
        e * (1.0 - (1.0 - k / e).powi(tokens.min(i32::MAX as usize) as i32))
    }
}

/// The KV reads of a model's sliding-window layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowedKv {
    /// Positions a token of these layers sees (itself included).
    pub positions: usize,
    /// Bytes of KV cache one position occupies in these layers, K and V together.
    pub bytes_per_token: usize,
}

impl RooflineInputs {
    /// Inputs for a model whose KV cache stores f16 (2 bytes per element) in every layer over
    /// every position: `kv_bytes_per_token = 2 (K and V) · n_layers · kv_dim · 2`, with
    /// `kv_dim = n_kv_heads · head_dim`.
    pub fn with_f16_kv(weight_bytes: usize, n_layers: usize, kv_dim: usize) -> Self {
        RooflineInputs {
            weight_bytes,
            kv_bytes_per_token: 2 * n_layers * kv_dim * 2,
            window: None,
            experts: None,
            state_bytes_per_seq: 0,
        }
    }

    /// As [`RooflineInputs::with_f16_kv`] for a model of which `windowed_layers` attend through
    /// a sliding window of `window` positions.
    pub fn with_f16_kv_windowed(
        weight_bytes: usize,
        n_layers: usize,
        kv_dim: usize,
        windowed_layers: usize,
        window: usize,
    ) -> Self {
        let windowed_layers = windowed_layers.min(n_layers);
        RooflineInputs {
            weight_bytes,
            kv_bytes_per_token: 2 * (n_layers - windowed_layers) * kv_dim * 2,
            window: (windowed_layers > 0).then_some(WindowedKv {
                positions: window,
                bytes_per_token: 2 * windowed_layers * kv_dim * 2,
            }),
            experts: None,
            state_bytes_per_seq: 0,
        }
    }

    /// Bytes one token of context adds to the cache while the context is within every window
    /// (all layers).
    pub fn kv_bytes_per_token_all_layers(&self) -> usize {
        self.kv_bytes_per_token + self.window.map_or(0, |w| w.bytes_per_token)
    }

    /// KV bytes one sequence attending over `context` positions reads in one step, with a
    /// hybrid's recurrent state read and written once.
    pub fn kv_bytes(&self, context: usize) -> usize {
        2 * self.state_bytes_per_seq
            + self.kv_bytes_per_token * context
            + self
                .window
                .map_or(0, |w| w.bytes_per_token * context.min(w.positions))
    }

    /// Bytes one forward pass reads when the batch's sequences attend over `contexts` tokens
    /// each: the weights once, plus each sequence's KV reads ([`RooflineInputs::kv_bytes`]).
    pub fn step_bytes(&self, contexts: &[usize]) -> usize {
        self.weights_for(contexts.len()) + contexts.iter().map(|&c| self.kv_bytes(c)).sum::<usize>()
    }

    /// Weight bytes a step of `tokens` tokens reads: `weight_bytes`, plus for a mixture the
    /// expected distinct experts beyond the `k` one token reads
    /// ([`RoutedExperts::expected_distinct`]).
    pub fn weights_for(&self, tokens: usize) -> usize {
        match self.experts {
            Some(x) if tokens > 1 => {
                let extra = x.expected_distinct(tokens) - x.n_used as f64;
                self.weight_bytes + (extra.max(0.0) * x.bytes_per_expert as f64).round() as usize
            }
            _ => self.weight_bytes,
        }
    }

    /// The latency floor in milliseconds of a step over `contexts` at `bw_gbs` GB/s.
    pub fn floor_ms(&self, contexts: &[usize], bw_gbs: f64) -> f64 {
        floor_ms(self.step_bytes(contexts), bw_gbs)
    }
}

/// Bytes one forward pass reads: the weights once, plus each sequence's KV cache —
/// `weights + Σ_seq kv_bytes_per_token · context(seq)` (every layer over every position; see
/// [`RooflineInputs::step_bytes`] for sliding-window layers).
///
/// `contexts` holds, per sequence in the batch, the number of cached positions its new token
/// attends over (including itself).
pub fn step_bytes(weights: usize, kv_bytes_per_token: usize, contexts: &[usize]) -> usize {
    weights
        + contexts
            .iter()
            .map(|&c| kv_bytes_per_token * c)
            .sum::<usize>()
}

/// The time in milliseconds to read `bytes` at `bw_gbs` GB/s (10⁹ bytes per second): the floor
/// no implementation can beat on a memory-bound step. Returns infinity when the bandwidth is
/// not positive.
pub fn floor_ms(bytes: usize, bw_gbs: f64) -> f64 {
    if bw_gbs > 0.0 {
        bytes as f64 / (bw_gbs * 1e9) * 1e3
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_of_many_tokens_reads_the_distinct_experts_they_chose() {
        let x = RoutedExperts {
            bytes_per_expert: 1000,
            n_expert: 128,
            n_used: 8,
        };
        assert_eq!(x.expected_distinct(1), 8.0);
        // 16 tokens: 128 · (1 − (120/128)^16) = 82.42 of 128.
        assert!((x.expected_distinct(16) - 82.4225).abs() < 1e-3);
        assert!(x.expected_distinct(4096) <= 128.0 && x.expected_distinct(4096) > 127.99);
        let r = RooflineInputs {
            weight_bytes: 50_000,
            kv_bytes_per_token: 0,
            window: None,
            experts: Some(x),
            state_bytes_per_seq: 0,
        };
        assert_eq!(r.step_bytes(&[0]), 50_000);
        assert_eq!(r.step_bytes(&[0; 16]), 50_000 + 74_423);
    }

    #[test]
    fn step_bytes_adds_each_sequences_cache() {
        assert_eq!(step_bytes(1000, 10, &[]), 1000);
        assert_eq!(step_bytes(1000, 10, &[5]), 1050);
        // 1000 + 10·(5 + 7 + 0) = 1120
        assert_eq!(step_bytes(1000, 10, &[5, 7, 0]), 1120);
    }

    #[test]
    fn floor_is_bytes_over_bandwidth() {
        // 1 GB at 10 GB/s = 0.1 s.
        assert!((floor_ms(1_000_000_000, 10.0) - 100.0).abs() < 1e-9);
        // 42 MB at 42 GB/s = 1 ms.
        assert!((floor_ms(42_000_000, 42.0) - 1.0).abs() < 1e-12);
        assert!(floor_ms(1, 0.0).is_infinite());
    }

    #[test]
    fn windowed_layers_read_at_most_their_window() {
        // Gemma 3 270M: 18 layers, 15 with a 512-position window, kv_dim 256.
        let r = RooflineInputs::with_f16_kv_windowed(246_587_904, 18, 256, 15, 512);
        assert_eq!(r.kv_bytes_per_token, 3 * 1024);
        assert_eq!(r.kv_bytes_per_token_all_layers(), 18 * 1024);
        // Within the window every layer reads every position: 18 KB each.
        assert_eq!(r.kv_bytes(100), 100 * 18 * 1024);
        // At 4096: 3 global layers over 4096 positions, 15 over 512.
        assert_eq!(r.kv_bytes(4096), 4096 * 3 * 1024 + 512 * 15 * 1024);
        assert_eq!(
            r.step_bytes(&[4096, 100]),
            246_587_904 + r.kv_bytes(4096) + r.kv_bytes(100)
        );
        // No windowed layers: the plain formula.
        let plain = RooflineInputs::with_f16_kv_windowed(1000, 4, 8, 0, 512);
        assert_eq!(plain, RooflineInputs::with_f16_kv(1000, 4, 8));
        assert_eq!(plain.step_bytes(&[5, 7]), step_bytes(1000, 128, &[5, 7]));
    }

    #[test]
    fn smollm2_batch_one_floor() {
        // SmolLM2-135M: 30 layers, 3 KV heads × 64 = kv_dim 192.
        // KV per token: 2 · 30 · 192 · 2 = 23 040 bytes.
        let r = RooflineInputs::with_f16_kv(96_600_000, 30, 192);
        assert_eq!(r.kv_bytes_per_token, 23_040);
        // At context 512: 96 600 000 + 23 040 · 512 = 108 396 480 bytes.
        assert_eq!(r.step_bytes(&[512]), 108_396_480);
        // Over 42 GB/s: 108 396 480 / 42e9 s = 2.580 868 57… ms.
        let ms = r.floor_ms(&[512], 42.0);
        assert!((ms - 2.580_868_571_428_571).abs() < 1e-9, "{ms}");
        // Sixteen sequences share the weights but each brings its own cache:
        // 96 600 000 + 16 · 23 040 · 512 = 285 343 680.
        assert_eq!(r.step_bytes(&[512; 16]), 285_343_680);
    }
}
