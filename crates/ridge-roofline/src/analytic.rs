//! The analytic latency and cost model of DESIGN.md: for a model on a machine, at a batch size
//! and a context length, the fastest any implementation could decode, and what it would cost.
//!
//! One decode step advances every sequence of the batch by one token. It reads the weights
//! once and each sequence's KV cache once, and does `2 · params` FLOPs per sequence plus the
//! attention over its context:
//!
//! ```text
//! bytes  = W + batch · ctx · kv_bytes_per_token
//! FLOPs  = batch · (2 · params + 4 · n_layers · n_heads · head_dim · ctx)
//! t_step = max(bytes / BW, FLOPs / peak)          (= TPOT_min: one token per sequence)
//! ```
//!
//! (`4 · L · H · hd · ctx`: the `q·kᵀ` scores and the weighted sum of `v`, one multiply-add each
//! per head element per cached position.) The arithmetic intensity `FLOPs / bytes` against the
//! hardware's ridge point `peak / BW` says which roof binds. Prefill of a `P`-token prompt reads
//! the weights once for all `P` tokens, so it is compute-bound for any real prompt; its floor,
//! the TTFT floor, is `max(bytes / BW, FLOPs / peak)` with the causal attention sum
//! `Σ_{i=1..P} i = P(P+1)/2`.
//!
//! Everything is a floor: peaks are datasheet peaks, overheads are zero. The point is to know
//! where the wall is before measuring how far from it an engine stands.

use crate::hardware::{Hardware, Precision};
use crate::spec::ModelSpec;

/// How the KV cache stores its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    /// 16-bit floats: 2 bytes per element.
    F16,
    /// ggml's Q8_0 blocks: 32 int8 values and one f16 scale, 34 bytes per 32 elements.
    Q8_0,
}

impl KvDtype {
    /// Bytes per cached element.
    pub fn bytes_per_elem(self) -> f64 {
        match self {
            KvDtype::F16 => 2.0,
            KvDtype::Q8_0 => 34.0 / 32.0,
        }
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F16 => "f16",
            KvDtype::Q8_0 => "q8_0",
        }
    }
}

impl std::str::FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f16" => Ok(KvDtype::F16),
            "q8_0" => Ok(KvDtype::Q8_0),
            other => Err(format!("unknown KV dtype `{other}` (expected f16 or q8_0)")),
        }
    }
}

/// Which roof binds a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Bytes over bandwidth is the larger time.
    Memory,
    /// FLOPs over peak is the larger time.
    Compute,
}

impl Bound {
    /// `"memory"` or `"compute"`.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
        }
    }
}

/// The fixed choices of one analysis: hardware, precision, KV format, price.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The machine.
    pub hardware: Hardware,
    /// Whose peak bounds compute.
    pub precision: Precision,
    /// KV cache element format.
    pub kv_dtype: KvDtype,
    /// Price of the machine, USD per hour, for cost per token (none: no cost).
    pub price_per_hour: Option<f64>,
}

/// One operating point: a batch size at a context length, and every floor the model gives.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatingPoint {
    /// Sequences decoded together.
    pub batch: u64,
    /// Cached positions each sequence attends over.
    pub context: u64,
    /// Prompt length of the TTFT floor.
    pub prompt_len: u64,
    /// Weight bytes read per step.
    pub weights_bytes: u64,
    /// KV bytes one token of context occupies (all layers, K and V).
    pub kv_bytes_per_token: f64,
    /// KV bytes the whole batch reads per step: `batch · context · kv_bytes_per_token`
    /// (sliding-window layers read at most their window: see `ModelSpec::attended`).
    pub kv_bytes: f64,
    /// Bytes read per step: weights + KV.
    pub step_bytes: f64,
    /// FLOPs of one step.
    pub step_flops: f64,
    /// `step_flops / step_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// The hardware's ridge point at the chosen precision, FLOP per byte.
    pub ridge_point: f64,
    /// Which roof binds.
    pub bound: Bound,
    /// Where the step's bytes are read from: `"LLC"` when they fit the measured last-level
    /// cache, else `"DRAM"` (the memory a datasheet's bandwidth is of).
    pub memory_level: &'static str,
    /// The bandwidth of `memory_level` that `memory_time_ms` divides by, GB/s: the
    /// hardware's DRAM figure, or the measured LLC read bandwidth when the step fits it.
    pub floor_bandwidth_gbs: f64,
    /// `step_bytes / floor_bandwidth_gbs`, ms.
    pub memory_time_ms: f64,
    /// `step_flops / peak`, ms.
    pub compute_time_ms: f64,
    /// The step floor = TPOT floor, ms: the larger of the two.
    pub tpot_min_ms: f64,
    /// Tokens per second one user sees: `1000 / tpot_min_ms`.
    pub tokens_per_s_per_user: f64,
    /// Tokens per second over the batch: `batch · 1000 / tpot_min_ms`.
    pub tokens_per_s: f64,
    /// FLOP/s the step attains at its floor, `step_flops / step time` (a point on the roofline).
    pub attained_tflops: f64,
    /// TTFT floor of one `prompt_len`-token prompt, ms.
    pub ttft_min_ms: f64,
    /// Which roof binds that prefill.
    pub prefill_bound: Bound,
    /// USD per million output tokens at full batch, if a price was given.
    pub cost_per_mtok: Option<f64>,
}

/// Errors of an analysis.
#[derive(Debug, thiserror::Error)]
pub enum AnalyticError {
    /// The hardware has no peak at the requested precision.
    #[error("{hardware} has no {precision} rate (choose bf16)")]
    NoPrecision {
        /// Hardware name.
        hardware: String,
        /// Requested precision.
        precision: Precision,
    },
    /// A figure that must be positive is not.
    #[error("{0}")]
    Invalid(String),
}

impl Setup {
    /// KV bytes per token of context for `m`: [`ModelSpec::kv_elems_per_token`] (K and V, or
    /// one latent row, over the layers) `· bytes_per_elem`.
    pub fn kv_bytes_per_token(&self, m: &ModelSpec) -> f64 {
        m.kv_elems_per_token() as f64 * self.kv_dtype.bytes_per_elem()
    }

    fn roofs(&self) -> Result<(f64, f64), AnalyticError> {
        let peak = self.hardware.peak_tflops(self.precision).ok_or_else(|| {
            AnalyticError::NoPrecision {
                hardware: self.hardware.name.clone(),
                precision: self.precision,
            }
        })?;
        let bw = self.hardware.memory_bandwidth_gbs;
        if !(bw.is_finite() && bw > 0.0 && peak.is_finite() && peak > 0.0) {
            return Err(AnalyticError::Invalid(format!(
                "{}: bandwidth {bw} GB/s and peak {peak} TFLOP/s must be positive",
                self.hardware.name
            )));
        }
        if let Some(p) = self.price_per_hour {
            if !(p.is_finite() && p >= 0.0) {
                return Err(AnalyticError::Invalid(format!(
                    "price per hour must be a non-negative number of USD, got {p}"
                )));
            }
        }
        Ok((bw * 1e9, peak * 1e12))
    }

    /// The floors of `m` decoding `batch` sequences of `context` cached positions each, with
    /// the TTFT floor of a `prompt_len`-token prompt.
    pub fn point(
        &self,
        m: &ModelSpec,
        batch: u64,
        context: u64,
        prompt_len: u64,
    ) -> Result<OperatingPoint, AnalyticError> {
        if batch == 0 {
            return Err(AnalyticError::Invalid("batch must be at least 1".into()));
        }
        let (bw, peak) = self.roofs()?;
        let kv_per_tok = self.kv_bytes_per_token(m);
        // A mixture reads the distinct experts the batch's tokens choose.
        let w = m.weight_bytes_for(batch);
        let b = batch as f64;
        // Per layer-position attended (see `ModelSpec::attended`): K and V bytes, and FLOPs.
        let kv_per_layer_pos = kv_per_tok / m.kv_layers.max(1) as f64;
        let attn_per_layer_pos = 4.0 * (m.n_heads * m.head_dim) as f64;
        let attended = m.attended(context) as f64;

        let kv_bytes = b * attended * kv_per_layer_pos;
        // A hybrid's recurrent state: read and written whole by every sequence's step.
        let step_bytes = w + kv_bytes + b * 2.0 * m.state_bytes as f64;
        let step_flops = b * (2.0 * m.params as f64 + attn_per_layer_pos * attended);
        // In GB/s as the hardware and the probe state them (no round trip through B/s, so the
        // reported floor bandwidth is exactly the figure it was chosen from).
        let (memory_level, floor_gbs) = crate::probe::memory_level(
            step_bytes,
            self.hardware.memory_bandwidth_gbs,
            self.hardware.llc,
        );
        let step_bw = floor_gbs * 1e9;
        let memory_s = step_bytes / step_bw;
        let compute_s = step_flops / peak;
        let (step_s, bound) = if compute_s > memory_s {
            (compute_s, Bound::Compute)
        } else {
            (memory_s, Bound::Memory)
        };

        let p = prompt_len as f64;
        let prefill_flops = 2.0 * m.prefill_params(1, prompt_len)
            + attn_per_layer_pos * m.attended_prefill(prompt_len);
        let prefill_bytes = m.weight_bytes_for(prompt_len) + p * kv_per_tok;
        let (pm, pc) = (prefill_bytes / bw, prefill_flops / peak);
        let (ttft_s, prefill_bound) = if pc > pm {
            (pc, Bound::Compute)
        } else {
            (pm, Bound::Memory)
        };

        let tokens_per_s = b / step_s;
        Ok(OperatingPoint {
            batch,
            context,
            prompt_len,
            weights_bytes: m.weight_bytes,
            kv_bytes_per_token: kv_per_tok,
            kv_bytes,
            step_bytes,
            step_flops,
            arithmetic_intensity: step_flops / step_bytes,
            ridge_point: peak / bw,
            bound,
            memory_level,
            floor_bandwidth_gbs: floor_gbs,
            memory_time_ms: memory_s * 1e3,
            compute_time_ms: compute_s * 1e3,
            tpot_min_ms: step_s * 1e3,
            tokens_per_s_per_user: 1.0 / step_s,
            tokens_per_s,
            attained_tflops: step_flops / step_s / 1e12,
            ttft_min_ms: ttft_s * 1e3,
            prefill_bound,
            cost_per_mtok: self
                .price_per_hour
                .map(|usd| usd / 3600.0 / tokens_per_s * 1e6),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's shape with a round weight size.
    fn smol(weight_bytes: u64) -> ModelSpec {
        ModelSpec {
            name: "smol".into(),
            n_layers: 30,
            kv_layers: 30,
            kv_rows: 2,
            state_bytes: 0,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            weight_bytes,
            params: 134_479_872,
            head_params: 28_311_552,
            weights_format: "Q4_1".into(),
            sliding_window: None,
            experts: None,
            total_weight_bytes: weight_bytes,
        }
    }

    fn setup(hw: &str, kv: KvDtype, price: Option<f64>) -> Setup {
        Setup {
            hardware: Hardware::builtin(hw).unwrap(),
            precision: Precision::Bf16,
            kv_dtype: kv,
            price_per_hour: price,
        }
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn kv_bytes_per_token_by_dtype() {
        let m = smol(100_000_000);
        // 2 · 30 · 3 · 64 · 2 = 23 040; q8_0: 2 · 30 · 192 · 34/32 = 12 240.
        assert_eq!(
            setup("h100-sxm", KvDtype::F16, None).kv_bytes_per_token(&m),
            23_040.0
        );
        assert_eq!(
            setup("h100-sxm", KvDtype::Q8_0, None).kv_bytes_per_token(&m),
            12_240.0
        );
    }

    #[test]
    fn sliding_window_layers_read_only_their_window() {
        // SmolLM2's shape with 20 of its 30 layers windowed to 512 positions.
        let mut m = smol(100_000_000);
        m.sliding_window = Some(crate::SlidingWindow {
            positions: 512,
            layers: 20,
        });
        let s = setup("h100-sxm", KvDtype::F16, None);
        // Within the window nothing changes: 23 040 bytes per position.
        assert_eq!(s.point(&m, 1, 256, 1).unwrap().kv_bytes, 23_040.0 * 256.0);
        // At 4096: 768 bytes per layer-position over 10 · 4096 + 20 · 512 layer-positions,
        // for each of 4 sequences.
        let p = s.point(&m, 4, 4096, 1).unwrap();
        assert_eq!(p.kv_bytes, 4.0 * 768.0 * (10.0 * 4096.0 + 20.0 * 512.0));
        assert_eq!(p.step_bytes, 100_000_000.0 + p.kv_bytes);
        // Attention FLOPs shrink the same way: 4 · 9 · 64 per layer-position.
        let plain = s.point(&smol(100_000_000), 4, 4096, 1).unwrap();
        let saved = 4.0 * (4.0 * 9.0 * 64.0) * (20.0 * (4096.0 - 512.0));
        assert!(close(plain.step_flops - p.step_flops, saved, 1e-12));
    }

    #[test]
    fn smollm2_h100_batch_one_by_hand() {
        let m = smol(100_000_000);
        let s = setup("h100-sxm", KvDtype::F16, Some(2.0));
        // Context 0: 1e8 bytes / 3.35e12 B/s = 29.850 746 µs.
        let p = s.point(&m, 1, 0, 1).unwrap();
        assert!(
            close(p.tpot_min_ms, 0.029_850_746_268_656_7, 1e-12),
            "{p:?}"
        );
        assert_eq!(p.bound, Bound::Memory);
        // 2 · 134 479 872 FLOPs over 1e8 bytes = 2.689 597 44 FLOP/byte.
        assert!(close(p.arithmetic_intensity, 2.689_597_44, 1e-12));
        // Context 4096: 1e8 + 23 040 · 4096 = 194 371 840 bytes → 58.021 444 µs.
        let p = s.point(&m, 1, 4096, 1).unwrap();
        assert_eq!(p.step_bytes, 194_371_840.0);
        assert!(
            close(p.tpot_min_ms, 0.058_021_444_776_119_4, 1e-12),
            "{p:?}"
        );
        // Tokens/s = 1 / 58.021 µs = 17 235.007; $2/h → 2/3600/17 235.007 · 1e6 = $0.032 234 /Mtok.
        assert!(
            close(p.tokens_per_s, 17_235.006_881_655, 1e-10),
            "{}",
            p.tokens_per_s
        );
        assert!(close(p.cost_per_mtok.unwrap(), 0.032_234_135_986_7, 1e-10));
    }

    #[test]
    fn batching_crosses_the_ridge_point() {
        let m = smol(100_000_000);
        let s = setup("h100-sxm", KvDtype::F16, None);
        // Context 0: AI = batch · 2.6896; the bf16 ridge point is 295.22 → compute-bound from
        // batch 110 on (109 · 2.6896 = 293.2, 110 · 2.6896 = 295.86).
        assert_eq!(s.point(&m, 109, 0, 1).unwrap().bound, Bound::Memory);
        let p = s.point(&m, 110, 0, 1).unwrap();
        assert_eq!(p.bound, Bound::Compute);
        // Compute time: 110 · 2 · 134 479 872 / 989e12 s = 29.914 µs.
        assert!(close(
            p.tpot_min_ms,
            110.0 * 2.0 * 134_479_872.0 / 989e12 * 1e3,
            1e-12
        ));
        assert!(close(p.attained_tflops, 989.0, 1e-12));
        // With a 4096 context each sequence adds 94 MB of KV for 31.5 MFLOP of attention
        // (AI of the KV part = 4·9·64 / (2·3·64·2) = 3), so the step stays memory-bound.
        let p = s.point(&m, 256, 4096, 1).unwrap();
        assert_eq!(p.bound, Bound::Memory);
        let bytes = 1e8 + 256.0 * 4096.0 * 23_040.0;
        let flops = 256.0 * (2.0 * 134_479_872.0 + 4.0 * 30.0 * 9.0 * 64.0 * 4096.0);
        assert_eq!(p.step_bytes, bytes);
        assert!(close(p.step_flops, flops, 1e-12));
        assert!(close(p.tpot_min_ms, bytes / 3.35e12 * 1e3, 1e-12));
        assert!(close(p.tokens_per_s, 256.0 / (bytes / 3.35e12), 1e-12));
    }

    #[test]
    fn prefill_floor_is_compute_bound() {
        let m = smol(100_000_000);
        let s = setup("a100-80gb", KvDtype::F16, None);
        // P = 512: the body (134 479 872 less the 28 311 552-parameter head) for every token,
        // the head for the last: 2 · (106 168 320 · 512 + 28 311 552) = 108 772 982 784 FLOPs,
        // plus 4 · 30 · 9 · 64 · 512 · 513 / 2 = 9 077 391 360 of attention, over 312e12 FLOP/s.
        let p = s.point(&m, 1, 512, 512).unwrap();
        let flops = 2.0 * (106_168_320.0 * 512.0 + 28_311_552.0)
            + 4.0 * 30.0 * 9.0 * 64.0 * 512.0 * 513.0 / 2.0;
        assert_eq!(flops, 117_850_374_144.0);
        assert_eq!(p.prefill_bound, Bound::Compute);
        assert!(
            close(p.ttft_min_ms, flops / 312e12 * 1e3, 1e-12),
            "{}",
            p.ttft_min_ms
        );
        // A one-token prompt is a decode step: memory-bound.
        let p = s.point(&m, 1, 0, 1).unwrap();
        assert_eq!(p.prefill_bound, Bound::Memory);
    }

    #[test]
    fn errors_name_the_problem() {
        let m = smol(1);
        let mut s = setup("a100-80gb", KvDtype::F16, None);
        assert!(s
            .point(&m, 0, 0, 1)
            .unwrap_err()
            .to_string()
            .contains("batch"));
        s.precision = Precision::Fp8;
        let e = s.point(&m, 1, 0, 1).unwrap_err().to_string();
        assert!(e.contains("a100-80gb has no fp8"), "{e}");
        s.precision = Precision::Bf16;
        s.price_per_hour = Some(-1.0);
        assert!(s
            .point(&m, 1, 0, 1)
            .unwrap_err()
            .to_string()
            .contains("price"));
    }

    #[test]
    fn a_model_that_fits_the_measured_cache_is_bounded_by_its_bandwidth() {
        let mut hw = Hardware::local(25.0, 200.0, 2);
        hw.llc = Some(crate::probe::CacheProbe {
            bytes: 300 << 20,
            read_bandwidth_gbs: 250.0,
        });
        let setup = |hw: &Hardware| Setup {
            hardware: hw.clone(),
            precision: Precision::Bf16,
            kv_dtype: KvDtype::F16,
            price_per_hour: None,
        };
        let m = smol(97_000_000);
        let p = setup(&hw).point(&m, 1, 0, 1).unwrap();
        assert_eq!(p.memory_level, "LLC");
        assert!(
            (p.memory_time_ms - 97e6 / 250e9 * 1e3).abs() < 1e-9,
            "{p:?}"
        );
        // A 1.1 GB model does not fit: DRAM.
        let big = smol(1_100_000_000);
        let p = setup(&hw).point(&big, 1, 0, 1).unwrap();
        assert_eq!(p.memory_level, "DRAM");
        assert!(
            (p.memory_time_ms - 1.1e9 / 25e9 * 1e3).abs() < 1e-9,
            "{p:?}"
        );
    }
}
