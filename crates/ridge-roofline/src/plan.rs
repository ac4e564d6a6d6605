//! Capacity planning on paper: how many replicas a traffic needs, from the analytic floors
//! of [`crate::analytic`] and a small queueing model of a continuous-batching engine.
//!
//! # The traffic and the replica
//!
//! Requests arrive as a Poisson stream of `rate` per second, each with `I` prompt tokens and
//! `O` output tokens (the first from prefill, then `O − 1` decode steps). A replica is one
//! engine on `1/K` of a machine (`K` replicas per machine share its bandwidth and compute
//! evenly: on a CPU, `K = cores / threads per replica`; on an accelerator usually `K = 1`).
//! Its two step times come from the analytic model, divided by an `efficiency` (the fraction
//! of the floor an engine attains; 1 = the floor itself):
//!
//! ```text
//! t_p    = prefill floor of one I-token prompt           (compute- or memory-bound)
//! t_d(B) = decode step floor at batch B, context I + O/2  (weights + B sequences' KV)
//! ```
//!
//! `t_d` is computed at every integer batch up to `max_batch` and interpolated linearly.
//!
//! # The model
//!
//! A continuous-batching engine (ridge, vLLM) runs one step after another; every step carries
//! the running decodes and, while prompts wait, a prefill chunk. Per second, `ρ_p = rate · t_p`
//! goes to prefill; the decodes get the rest, so a request's decode steps are stretched:
//!
//! ```text
//! TPOT = t_d(B) / (1 − ρ_p)                       B = max(1, fixed point of B = rate · (O − 1) · TPOT)
//! ```
//!
//! (Little's law: the mean number of requests decoding is their arrival rate times the time
//! each spends decoding.) `B = g(B)` with `g` increasing and piecewise linear, so its least
//! fixed point is found exactly, segment by segment; when `g(1) ≤ 1` the engine is not always
//! busy and every step serves about one request (`B = 1`); when no fixed point lies at or
//! below `max_batch` the decodes cannot keep up and the queue grows without bound.
//!
//! A new request waits for the prefills ahead of it — an M/D/1 queue, Poisson arrivals and a
//! deterministic service `t_p` (Pollaczek–Khinchine) — and for the step already running when
//! it arrives (a decode step with probability `ρ_d`, half of it left on average):
//!
//! ```text
//! TTFT = t_p + ρ_p · t_p / (2 (1 − ρ_p)) + ρ_d · t_d(B) / 2      ρ_d = rate · (O − 1) · t_d(B) / B
//! ```
//!
//! The replica is stable while `ρ_p + ρ_d ≤ 1` with `B ≤ max_batch`; its **capacity** is the
//! largest rate at which it is stable and the mean TTFT and mean TPOT meet their SLOs (each
//! grows with the rate, so a bisection finds it). Then `replicas = ⌈rate / capacity⌉`,
//! `machines = ⌈replicas / K⌉`, and with a price per machine-hour, the cost per million
//! output tokens is `machines · price / (3600 · rate · O) · 10⁶`.
//!
//! # Why this model
//!
//! It is the simplest one that keeps the two effects that decide capacity: batching makes the
//! decode side cheap (one weight read serves `B` requests, so decode capacity grows with load
//! until KV reads or compute bind), and prefill is paid per request at full price and delays
//! everyone (TTFT queueing, TPOT stretching). It neglects what a floor-based model cannot know
//! (scheduler overheads, the decode tokens riding in prefill steps, prefix-cache hits, the
//! spread of lengths) and models means, not tails: a p99 SLO needs headroom on top. Since the
//! step times are floors, at `efficiency = 1` the capacity is an upper bound and the replica
//! count a lower bound; a measured efficiency (e.g. `ridge bench`'s roofline fraction) turns
//! them into estimates. BENCHMARKS.md checks both against measured runs.

use crate::analytic::{AnalyticError, Setup};
use crate::spec::ModelSpec;

/// The traffic to plan for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traffic {
    /// Requests per second (Poisson arrivals).
    pub rate: f64,
    /// Prompt tokens per request.
    pub input_len: u64,
    /// Output tokens per request (the first from prefill).
    pub output_len: u64,
}

/// Latency targets for the mean request, milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    /// Mean time to first token.
    pub ttft_ms: f64,
    /// Mean time per output token after the first.
    pub tpot_ms: f64,
}

/// How replicas are built from the hardware.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplicaShape {
    /// Replicas sharing one machine (each gets `1/K` of its bandwidth, compute and cache).
    pub replicas_per_machine: u32,
    /// Fraction of the analytic floors an engine attains (0 < e ≤ 1); step times are divided
    /// by it.
    pub efficiency: f64,
    /// Most requests one replica decodes together (ridge's `--max-seqs`).
    pub max_batch: u64,
}

impl Default for ReplicaShape {
    fn default() -> Self {
        ReplicaShape {
            replicas_per_machine: 1,
            efficiency: 1.0,
            max_batch: 64,
        }
    }
}

/// Errors of a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The analytic model refused the setup.
    #[error(transparent)]
    Analytic(#[from] AnalyticError),
    /// An input out of range.
    #[error("{0}")]
    Invalid(String),
    /// No number of replicas meets the SLOs: even an idle replica misses one.
    #[error("{0}")]
    Infeasible(String),
}

/// One replica under a given request rate, as the model predicts it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadPoint {
    /// Requests per second arriving at this replica.
    pub rate: f64,
    /// Mean requests decoding (Little's law; below 1 when the engine idles at times).
    pub batch: f64,
    /// Share of time spent in prefill, `ρ_p`.
    pub prefill_share: f64,
    /// Share of time spent in decode steps, `ρ_d`.
    pub decode_share: f64,
    /// Mean time per output token, ms.
    pub tpot_ms: f64,
    /// Mean time to first token, ms.
    pub ttft_ms: f64,
}

impl LoadPoint {
    /// `ρ_p + ρ_d`: the share of time the replica is busy.
    pub fn utilisation(&self) -> f64 {
        self.prefill_share + self.decode_share
    }
}

/// What bounds a replica's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The TTFT SLO.
    Ttft,
    /// The TPOT SLO.
    Tpot,
    /// Stability: past this rate the queue grows without bound (compute, bandwidth or the
    /// batch cap).
    Saturation,
}

impl Limit {
    /// `"ttft"`, `"tpot"` or `"saturation"`.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Ttft => "ttft",
            Limit::Tpot => "tpot",
            Limit::Saturation => "saturation",
        }
    }
}

/// One replica's step times and its response to load.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaModel {
    /// Prefill time of one prompt, seconds (`t_p`).
    pub prefill_s: f64,
    /// Decode step time at batch `b + 1`, seconds (`t_d`), for `b < max_batch`.
    pub decode_s: Vec<f64>,
    /// Output tokens per request.
    pub output_len: u64,
    /// Which roof binds the prefill floor (`"compute"` or `"memory"`).
    pub prefill_bound: &'static str,
    /// The bandwidth one replica's decode floor divides by, GB/s.
    pub bandwidth_gbs: f64,
    /// One replica's peak, TFLOP/s.
    pub peak_tflops: f64,
}

/// `setup` with its machine split `k` ways.
fn split(setup: &Setup, k: u32) -> Setup {
    let k = f64::from(k);
    let mut s = setup.clone();
    let hw = &mut s.hardware;
    hw.memory_bandwidth_gbs /= k;
    hw.bf16_tflops /= k;
    hw.fp8_tflops = hw.fp8_tflops.map(|t| t / k);
    hw.int8_tops = hw.int8_tops.map(|t| t / k);
    if let Some(c) = hw.llc.as_mut() {
        c.bytes = (c.bytes as f64 / k) as usize;
        c.read_bandwidth_gbs /= k;
    }
    s
}

impl ReplicaModel {
    /// The step times of one replica of `m` on `1/K` of `setup`'s machine.
    pub fn new(
        setup: &Setup,
        m: &ModelSpec,
        input_len: u64,
        output_len: u64,
        shape: &ReplicaShape,
    ) -> Result<ReplicaModel, PlanError> {
        if input_len == 0 || output_len == 0 {
            return Err(PlanError::Invalid(
                "input and output lengths must be at least 1 token".into(),
            ));
        }
        if shape.replicas_per_machine == 0 {
            return Err(PlanError::Invalid(
                "replicas per machine must be at least 1".into(),
            ));
        }
        if !(shape.efficiency > 0.0 && shape.efficiency <= 1.0) {
            return Err(PlanError::Invalid(format!(
                "efficiency must be in (0, 1], got {}",
                shape.efficiency
            )));
        }
        if shape.max_batch == 0 {
            return Err(PlanError::Invalid("max batch must be at least 1".into()));
        }
        let s = split(setup, shape.replicas_per_machine);
        let e = shape.efficiency;
        let context = input_len + output_len / 2;
        let first = s.point(m, 1, context, input_len)?;
        let decode_s = (1..=shape.max_batch)
            .map(|b| Ok(s.point(m, b, context, 1)?.tpot_min_ms / 1e3 / e))
            .collect::<Result<Vec<f64>, AnalyticError>>()?;
        Ok(ReplicaModel {
            prefill_s: first.ttft_min_ms / 1e3 / e,
            decode_s,
            output_len,
            prefill_bound: first.prefill_bound.name(),
            bandwidth_gbs: s.hardware.memory_bandwidth_gbs,
            peak_tflops: s.hardware.peak_tflops(s.precision).unwrap_or(0.0),
        })
    }

    /// Largest batch the model allows.
    pub fn max_batch(&self) -> u64 {
        self.decode_s.len() as u64
    }

    /// `t_d(b)`, seconds, linear between integer batches (`b` in 1..=max_batch).
    pub fn decode_step_s(&self, b: f64) -> f64 {
        let b = b.clamp(1.0, self.decode_s.len() as f64);
        let lo = b.floor() as usize;
        let frac = b - lo as f64;
        let at = |n: usize| self.decode_s[n - 1];
        if frac == 0.0 || lo >= self.decode_s.len() {
            at(lo)
        } else {
            at(lo) + frac * (at(lo + 1) - at(lo))
        }
    }

    /// The replica at `rate` requests per second; `None` when it cannot keep up.
    pub fn at(&self, rate: f64) -> Option<LoadPoint> {
        if !(rate.is_finite() && rate >= 0.0) {
            return None;
        }
        let tp = self.prefill_s;
        let rho_p = rate * tp;
        if rho_p >= 1.0 {
            return None;
        }
        let steps = (self.output_len - 1) as f64;
        // g(B) = rate · (O − 1) · t_d(B) / (1 − ρ_p); B = the least fixed point ≥ 1.
        let g = |b: f64| rate * steps * self.decode_step_s(b) / (1.0 - rho_p);
        let step_batch = if g(1.0) <= 1.0 {
            1.0
        } else {
            let mut found = None;
            for n in 1..self.decode_s.len() {
                let (lo, hi) = (n as f64, n as f64 + 1.0);
                let (h_lo, h_hi) = (g(lo) - lo, g(hi) - hi);
                if h_hi <= 0.0 {
                    found = Some(lo + h_lo / (h_lo - h_hi));
                    break;
                }
            }
            found?
        };
        let td = self.decode_step_s(step_batch);
        let tpot_s = td / (1.0 - rho_p);
        let batch = rate * steps * tpot_s;
        let rho_d = rate * steps * td / step_batch;
        if rho_p + rho_d > 1.0 + 1e-9 {
            return None;
        }
        let wait = rho_p * tp / (2.0 * (1.0 - rho_p));
        let ttft_s = tp + wait + rho_d * td / 2.0;
        Some(LoadPoint {
            rate,
            batch,
            prefill_share: rho_p,
            decode_share: rho_d,
            tpot_ms: if self.output_len > 1 {
                tpot_s * 1e3
            } else {
                0.0
            },
            ttft_ms: ttft_s * 1e3,
        })
    }

    /// The largest rate at which `ok` holds (it must hold at rate 0 and fail past saturation),
    /// by bisection.
    fn sup_rate(&self, ok: impl Fn(&LoadPoint) -> bool) -> f64 {
        let (mut lo, mut hi) = (0.0, 1.0 / self.prefill_s);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if self.at(mid).is_some_and(|p| ok(&p)) {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo <= 1e-12 * hi {
                break;
            }
        }
        lo
    }

    /// The largest stable rate, requests per second (no SLO).
    pub fn saturation_rate(&self) -> f64 {
        self.sup_rate(|_| true)
    }
}

/// A sized fleet for a traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The traffic planned for.
    pub traffic: Traffic,
    /// The SLOs.
    pub slo: Slo,
    /// How replicas are built.
    pub shape: ReplicaShape,
    /// One replica's step times.
    pub replica: ReplicaModel,
    /// Largest rate per replica that meets the TTFT SLO (and is stable).
    pub ttft_rate: f64,
    /// Largest rate per replica that meets the TPOT SLO (and is stable).
    pub tpot_rate: f64,
    /// Largest stable rate per replica.
    pub saturation_rate: f64,
    /// Capacity per replica: the smallest of the three.
    pub capacity: f64,
    /// Which of them it is.
    pub limit: Limit,
    /// Replicas: `⌈rate / capacity⌉`, or the count given.
    pub replicas: u64,
    /// Machines: `⌈replicas / replicas_per_machine⌉`.
    pub machines: u64,
    /// Each replica at its share of the traffic (`None`: a given count that cannot keep up).
    pub per_replica: Option<LoadPoint>,
    /// Whether `per_replica` meets both SLOs.
    pub meets_slo: bool,
    /// USD per hour of the fleet, with a price.
    pub cost_per_hour: Option<f64>,
    /// USD per million output tokens, with a price.
    pub cost_per_mtok_output: Option<f64>,
    /// USD per million tokens, prompt and output together, with a price.
    pub cost_per_mtok_total: Option<f64>,
}

/// Sizes a fleet of replicas of `m` on `setup`'s machines for `traffic` under `slo`
/// (module docs); `replicas` evaluates that many instead of sizing. The price, if any, is
/// `setup.price_per_hour` per machine.
pub fn plan(
    setup: &Setup,
    m: &ModelSpec,
    traffic: Traffic,
    slo: Slo,
    shape: ReplicaShape,
    replicas: Option<u64>,
) -> Result<Plan, PlanError> {
    if !(traffic.rate.is_finite() && traffic.rate > 0.0) {
        return Err(PlanError::Invalid(format!(
            "rate must be a positive number of requests per second, got {}",
            traffic.rate
        )));
    }
    for (name, v) in [("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(PlanError::Invalid(format!(
                "the {name} SLO must be a positive number of ms, got {v}"
            )));
        }
    }
    if replicas == Some(0) {
        return Err(PlanError::Invalid("replicas must be at least 1".into()));
    }
    let r = ReplicaModel::new(setup, m, traffic.input_len, traffic.output_len, &shape)?;
    let idle = r.at(0.0).expect("an idle replica is stable");
    let hw = &setup.hardware.name;
    if idle.ttft_ms > slo.ttft_ms && replicas.is_none() {
        return Err(PlanError::Infeasible(format!(
            "the TTFT SLO of {} ms is below one {}-token prefill on a replica of {hw} ({:.1} ms): \
             no number of replicas meets it",
            slo.ttft_ms, traffic.input_len, idle.ttft_ms
        )));
    }
    if idle.tpot_ms > slo.tpot_ms && replicas.is_none() {
        return Err(PlanError::Infeasible(format!(
            "the TPOT SLO of {} ms is below one decode step on a replica of {hw} ({:.3} ms): \
             no number of replicas meets it",
            slo.tpot_ms, idle.tpot_ms
        )));
    }
    let ttft_rate = r.sup_rate(|p| p.ttft_ms <= slo.ttft_ms);
    let tpot_rate = r.sup_rate(|p| p.tpot_ms <= slo.tpot_ms);
    let saturation_rate = r.saturation_rate();
    let (capacity, limit) = [
        (saturation_rate, Limit::Saturation),
        (ttft_rate, Limit::Ttft),
        (tpot_rate, Limit::Tpot),
    ]
    .into_iter()
    .fold((f64::INFINITY, Limit::Saturation), |best, (c, l)| {
        if c < best.0 * (1.0 - 1e-9) {
            (c, l)
        } else {
            best
        }
    });
    let replicas = replicas.unwrap_or_else(|| {
        // The bisection's answer sits a hair under the true bound; a rate that is an exact
        // multiple of it needs no extra replica.
        ((traffic.rate / capacity) * (1.0 - 1e-9)).ceil().max(1.0) as u64
    });
    let k = u64::from(shape.replicas_per_machine);
    let machines = replicas.div_ceil(k);
    let per_replica = r.at(traffic.rate / replicas as f64);
    let meets_slo =
        per_replica.is_some_and(|p| p.ttft_ms <= slo.ttft_ms && p.tpot_ms <= slo.tpot_ms);
    let cost_per_hour = setup.price_per_hour.map(|p| p * machines as f64);
    let per_mtok =
        |tokens: u64| cost_per_hour.map(|c| c / (3600.0 * traffic.rate * tokens as f64) * 1e6);
    Ok(Plan {
        traffic,
        slo,
        shape,
        cost_per_mtok_output: per_mtok(traffic.output_len),
        cost_per_mtok_total: per_mtok(traffic.input_len + traffic.output_len),
        replica: r,
        ttft_rate,
        tpot_rate,
        saturation_rate,
        capacity,
        limit,
        replicas,
        machines,
        per_replica,
        meets_slo,
        cost_per_hour,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytic::KvDtype;
    use crate::hardware::{Hardware, Precision};

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    /// A dense model with round numbers: 1e9 bytes of weights, 1e9 parameters, one layer of
    /// one KV head of dimension 1 (2 · 1 · 1 · 2 = 4 bytes of f16 KV per token).
    fn toy() -> ModelSpec {
        ModelSpec {
            name: "toy".into(),
            n_layers: 1,
            kv_layers: 1,
            kv_rows: 2,
            state_bytes: 0,
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            weight_bytes: 1_000_000_000,
            params: 1_000_000_000,
            head_params: 0,
            weights_format: "Q8_0".into(),
            sliding_window: None,
            experts: None,
            total_weight_bytes: 1_000_000_000,
        }
    }

    /// 1000 GB/s and 100 TFLOP/s: a decode step reads 1e9 bytes in 1 ms; a prefill of P
    /// tokens does 2e9 · P FLOPs, 0.02 ms per token.
    fn setup(price: Option<f64>) -> Setup {
        let mut hw = Hardware::local(1000.0, 100_000.0, 1);
        hw.name = "toy-hw".into();
        Setup {
            hardware: hw,
            precision: Precision::Bf16,
            kv_dtype: KvDtype::F16,
            price_per_hour: price,
        }
    }

    #[test]
    fn step_times_by_hand() {
        let r =
            ReplicaModel::new(&setup(None), &toy(), 1000, 101, &ReplicaShape::default()).unwrap();
        // Prefill of 1000 tokens: 2e9 · 1000 + 4 · 1 · 1000 · 1001 / 2 = 2.000 002 002e12 FLOPs
        // over 1e14 FLOP/s = 20.000 020 02 ms; its bytes (1e9 + 4000) take 1 ms: compute-bound.
        assert!(
            close(r.prefill_s, 0.020_000_020_02, 1e-12),
            "{}",
            r.prefill_s
        );
        assert_eq!(r.prefill_bound, "compute");
        // Decode at batch 1, context 1000 + 50: 1e9 + 4 · 1050 bytes over 1e12 B/s.
        assert!(
            close(r.decode_s[0], 1.000_004_2e-3, 1e-12),
            "{}",
            r.decode_s[0]
        );
        // Batch 10 reads 10 sequences' KV: 1e9 + 42 000 bytes; 10 · 2e9 FLOPs = 0.2 ms, so
        // still memory-bound.
        assert!(close(r.decode_s[9], 1.000_042e-3, 1e-12));
        // Batch 64: 1.28e11 FLOPs = 1.28 ms > 1.000 27 ms of bytes: compute-bound.
        assert!(close(
            r.decode_s[63],
            1.28e-3 * (1.0 + 4.0 * 1050.0 / 2e9),
            1e-9
        ));
        assert!(close(
            r.decode_step_s(9.5),
            0.5 * (r.decode_s[8] + r.decode_s[9]),
            1e-12
        ));
    }

    #[test]
    fn light_load_by_hand() {
        let r =
            ReplicaModel::new(&setup(None), &toy(), 1000, 101, &ReplicaShape::default()).unwrap();
        // 5 req/s: ρ_p = 5 · 0.020 000 020 02 = 0.100 000 100 1; g(1) = 5 · 100 · 1.000 004 2 ms / 0.9
        // = 0.5556 < 1, so B = 1 and TPOT = t_d(1) / (1 − ρ_p).
        let p = r.at(5.0).unwrap();
        let (tp, td) = (r.prefill_s, r.decode_s[0]);
        let rho_p = 5.0 * tp;
        assert!(close(p.prefill_share, rho_p, 1e-12));
        assert!(close(p.tpot_ms, td / (1.0 - rho_p) * 1e3, 1e-12));
        assert!(close(p.batch, 5.0 * 100.0 * td / (1.0 - rho_p), 1e-12));
        // ρ_d = 5 · 100 · t_d(1) = 0.5000021.
        assert!(close(p.decode_share, 0.500_002_1, 1e-9));
        // TTFT = t_p + ρ_p t_p / (2 (1 − ρ_p)) + ρ_d t_d / 2
        //      = 20.000 020 + 1.111 114 + 0.250 002 ms = 21.361 136 ms.
        let want = tp + rho_p * tp / (2.0 * (1.0 - rho_p)) + 0.500_002_1 * td / 2.0;
        assert!(close(p.ttft_ms, want * 1e3, 1e-9));
        assert!(close(p.ttft_ms, 21.361_135_58, 1e-9), "{}", p.ttft_ms);
        // Idle: TTFT is the prefill floor, TPOT the batch-1 step.
        let idle = r.at(0.0).unwrap();
        assert_eq!(idle.ttft_ms, tp * 1e3);
        assert_eq!(idle.tpot_ms, td * 1e3);
    }

    #[test]
    fn batching_fixed_point_by_hand() {
        // Without prefill cost to speak of (1-token prompts) and 1001 output tokens, the
        // decode side alone: memory-bound t_d(B) = a + b · B with a = 1 ms, b = 4 · 501 bytes
        // / 1e12 B/s. At 4 req/s: B = 4 · 1000 · t_d(B) / (1 − ρ_p).
        let r = ReplicaModel::new(&setup(None), &toy(), 1, 1001, &ReplicaShape::default()).unwrap();
        let rho_p = 4.0 * r.prefill_s;
        let a = 1e-3;
        let b = 4.0 * 501.0 / 1e12;
        let want = 4.0 * 1000.0 * a / ((1.0 - rho_p) - 4.0 * 1000.0 * b);
        let p = r.at(4.0).unwrap();
        assert!(close(p.batch, want, 1e-9), "{} vs {want}", p.batch);
        // Always busy: ρ_p + ρ_d = 1.
        assert!(close(p.utilisation(), 1.0, 1e-9));
        // Compute binds from batch 51 on (2e9 · B / 1e14 > 1 ms + KV): there t_d(B) = f · B, so
        // g(B) = c · B and a fixed point survives only while c = rate · 1000 · f / (1 − rate ·
        // t_p) ≤ 1: the largest stable rate is 1 / (1000 f + t_p) = 47.6 req/s (batch 51, under
        // the cap of 64).
        let sat = r.saturation_rate();
        let f = r.decode_s[63] / 64.0;
        let want = 1.0 / (1000.0 * f + r.prefill_s);
        assert!(close(want, 47.619, 1e-4), "{want}");
        assert!(close(sat, want, 1e-6), "{sat} vs {want}");
        assert!(r.at(sat * 1.001).is_none());
    }

    #[test]
    fn replicas_and_cost_by_hand() {
        let m = toy();
        let traffic = Traffic {
            rate: 30.0,
            input_len: 1000,
            output_len: 101,
        };
        let slo = Slo {
            ttft_ms: 25.0,
            tpot_ms: 5.0,
        };
        let p = plan(
            &setup(Some(2.0)),
            &m,
            traffic,
            slo,
            ReplicaShape::default(),
            None,
        )
        .unwrap();
        // Prefill dominates: TTFT 25 ms ⇔ t_p + ρ_p t_p / (2(1 − ρ_p)) + ρ_d t_d/2 = 25 ms.
        assert_eq!(p.limit, Limit::Ttft);
        let at = p.replica.at(p.capacity).unwrap();
        assert!(close(at.ttft_ms, 25.0, 1e-6), "{at:?}");
        assert!(p.tpot_rate > p.capacity && p.saturation_rate > p.capacity);
        // The TTFT bound: t_p = 20 ms, so ρ_p t_p / (2(1 − ρ_p)) + ρ_d t_d / 2 = 5 ms leaves
        // ρ_p ≈ 1/3 (1/3 · 20 / (4/3) = 5 ms) less the residual: capacity a bit under 16.7.
        assert!(p.capacity > 15.0 && p.capacity < 16.7, "{}", p.capacity);
        assert_eq!(p.replicas, (30.0 / p.capacity).ceil() as u64);
        assert_eq!(p.replicas, 2);
        assert_eq!(p.machines, 2);
        assert!(p.meets_slo);
        // $2 per machine-hour · 2 machines over 30 · 101 output tokens per second.
        assert!(close(p.cost_per_hour.unwrap(), 4.0, 1e-12));
        assert!(close(
            p.cost_per_mtok_output.unwrap(),
            4.0 / (3600.0 * 30.0 * 101.0) * 1e6,
            1e-12
        ));
        assert!(close(
            p.cost_per_mtok_total.unwrap(),
            4.0 / (3600.0 * 30.0 * 1101.0) * 1e6,
            1e-12
        ));
        // Exactly the capacity needs one replica, not two.
        let one = plan(
            &setup(None),
            &m,
            Traffic {
                rate: p.capacity,
                ..traffic
            },
            slo,
            ReplicaShape::default(),
            None,
        )
        .unwrap();
        assert_eq!(one.replicas, 1);
        assert!(one.cost_per_hour.is_none());
    }

    #[test]
    fn sharing_a_machine_splits_its_roofs() {
        let m = toy();
        let shape = ReplicaShape {
            replicas_per_machine: 2,
            ..ReplicaShape::default()
        };
        let whole =
            ReplicaModel::new(&setup(None), &m, 1000, 101, &ReplicaShape::default()).unwrap();
        let half = ReplicaModel::new(&setup(None), &m, 1000, 101, &shape).unwrap();
        assert!(close(half.prefill_s, 2.0 * whole.prefill_s, 1e-12));
        assert!(close(half.decode_s[0], 2.0 * whole.decode_s[0], 1e-12));
        assert_eq!(half.bandwidth_gbs, 500.0);
        // Every roof is split, the int8 one too.
        let mut s8 = setup(None);
        s8.hardware.int8_tops = Some(400.0);
        s8.precision = Precision::Int8;
        assert_eq!(split(&s8, 4).hardware.int8_tops, Some(100.0));
        let h = split(&s8, 4).hardware;
        assert_eq!((h.bf16_tflops, h.memory_bandwidth_gbs), (25.0, 250.0));
        // Three half-machine replicas take two machines; efficiency 0.5 doubles step times.
        let p = plan(
            &setup(Some(1.0)),
            &m,
            Traffic {
                rate: 1.0,
                input_len: 1000,
                output_len: 101,
            },
            Slo {
                ttft_ms: 1e6,
                tpot_ms: 1e6,
            },
            shape,
            Some(3),
        )
        .unwrap();
        assert_eq!((p.replicas, p.machines), (3, 2));
        assert!(close(p.cost_per_hour.unwrap(), 2.0, 1e-12));
        let slow = ReplicaModel::new(
            &setup(None),
            &m,
            1000,
            101,
            &ReplicaShape {
                efficiency: 0.5,
                ..ReplicaShape::default()
            },
        )
        .unwrap();
        assert!(close(slow.prefill_s, 2.0 * whole.prefill_s, 1e-12));
    }

    #[test]
    fn impossible_slos_and_bad_input_are_named() {
        let m = toy();
        let t = Traffic {
            rate: 1.0,
            input_len: 1000,
            output_len: 101,
        };
        let go = |t: Traffic, slo: Slo| {
            plan(&setup(None), &m, t, slo, ReplicaShape::default(), None)
                .unwrap_err()
                .to_string()
        };
        let e = go(
            t,
            Slo {
                ttft_ms: 10.0,
                tpot_ms: 100.0,
            },
        );
        assert!(
            e.contains("TTFT SLO of 10 ms") && e.contains("no number"),
            "{e}"
        );
        let e = go(
            t,
            Slo {
                ttft_ms: 100.0,
                tpot_ms: 0.5,
            },
        );
        assert!(e.contains("TPOT SLO of 0.5 ms"), "{e}");
        let ok = Slo {
            ttft_ms: 100.0,
            tpot_ms: 100.0,
        };
        assert!(go(Traffic { rate: 0.0, ..t }, ok).contains("rate"));
        assert!(go(Traffic { output_len: 0, ..t }, ok).contains("at least 1 token"));
        assert!(go(
            t,
            Slo {
                ttft_ms: f64::NAN,
                tpot_ms: 1.0
            }
        )
        .contains("TTFT SLO must be"));
        let e = plan(
            &setup(None),
            &m,
            t,
            ok,
            ReplicaShape {
                efficiency: 1.5,
                ..ReplicaShape::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("efficiency"), "{e}");
    }

    #[test]
    fn one_output_token_has_no_decode() {
        let r = ReplicaModel::new(&setup(None), &toy(), 1000, 1, &ReplicaShape::default()).unwrap();
        let p = r.at(10.0).unwrap();
        assert_eq!((p.tpot_ms, p.decode_share, p.batch), (0.0, 0.0, 0.0));
        // Pure prefill: saturation at ρ_p = 1.
        assert!(close(r.saturation_rate(), 1.0 / r.prefill_s, 1e-9));
    }
}
