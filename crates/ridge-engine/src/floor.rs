//! The bandwidth a request's roofline floor divides by, and how it is corrected.
//!
//! The floor (`bytes read per step / bandwidth`) is only a floor if the bandwidth is the
//! machine's: a probe that ran while other processes loaded the cores reads low, and every
//! answer after it then claims to beat physics ("roofline 235%"). A step that reads `B` bytes
//! in `t` seconds is itself a measurement — the memory delivered at least `B / t` — so when a
//! finished request's TPOT beats its floor, the engine raises the bandwidth to what that
//! request proved, reports the floor as re-measured (efficiency 100%, never more), and asks
//! the [`FloorProbe`] (the CLI's bandwidth probe, best of several bursts) to measure again on
//! its own thread; a higher reading replaces the figure. The bandwidth only ever rises: a
//! re-probe during a busy phase must not lower a floor a quiet phase measured.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Re-measures the memory bandwidth (GB/s) of the level the floor uses; `None` when it cannot.
/// Runs on a thread of its own, never the engine's.
#[derive(Clone)]
pub struct FloorProbe(pub Arc<dyn Fn() -> Option<f64> + Send + Sync>);

impl fmt::Debug for FloorProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FloorProbe")
    }
}

/// The mean time of one decode step of a choice whose `tokens` tokens came `tpot_ms` apart,
/// `accepted` of them speculative drafts accepted (which come in the step of the token before
/// them): `tpot · (tokens − 1) / (tokens − 1 − accepted)`; the TPOT itself without drafts.
pub(crate) fn step_ms(tpot_ms: f64, tokens: usize, accepted: usize) -> f64 {
    if accepted == 0 {
        return tpot_ms;
    }
    let gaps = tokens.saturating_sub(1);
    let steps = gaps.saturating_sub(accepted).max(1);
    tpot_ms * gaps.max(1) as f64 / steps as f64
}

/// Least time between two re-probes: a probe reads a few hundred MB and competes with decode
/// for the memory it measures.
pub const REPROBE_INTERVAL: Duration = Duration::from_secs(30);

/// The live floor bandwidth, shared by the engine thread (which reads it at every finished
/// request and raises it) and the status endpoints (which report it).
#[derive(Debug)]
pub struct FloorGauge {
    /// GB/s as `f64` bits. Positive floats order as their bits do, so `fetch_max` on the bits
    /// is a maximum of the values.
    gbs_bits: AtomicU64,
    /// The bandwidth the engine started with (the first probe or the user's figure).
    initial_gbs: f64,
    /// Times the floor was re-measured (a request beat it).
    remeasures: AtomicU64,
    probing: Arc<AtomicBool>,
    last_probe: Mutex<Option<Instant>>,
    probe: Option<FloorProbe>,
}

impl FloorGauge {
    /// A gauge starting at `gbs` (> 0), re-probed with `probe` when a request beats it.
    pub fn new(gbs: f64, probe: Option<FloorProbe>) -> Arc<FloorGauge> {
        Arc::new(FloorGauge {
            gbs_bits: AtomicU64::new(gbs.to_bits()),
            initial_gbs: gbs,
            remeasures: AtomicU64::new(0),
            probing: Arc::new(AtomicBool::new(false)),
            last_probe: Mutex::new(None),
            probe,
        })
    }

    /// The bandwidth floors divide by now, GB/s.
    pub fn gbs(&self) -> f64 {
        f64::from_bits(self.gbs_bits.load(Ordering::Relaxed))
    }

    /// The bandwidth the engine started with, GB/s.
    pub fn initial_gbs(&self) -> f64 {
        self.initial_gbs
    }

    /// How many times a request beat the floor and it was re-measured.
    pub fn remeasures(&self) -> u64 {
        self.remeasures.load(Ordering::Relaxed)
    }

    /// Whether a re-probe is running now.
    pub fn probing(&self) -> bool {
        self.probing.load(Ordering::Relaxed)
    }

    /// Raises the bandwidth to `gbs` when that is higher (finite and positive only).
    pub fn raise(&self, gbs: f64) {
        if gbs.is_finite() && gbs > 0.0 {
            self.gbs_bits.fetch_max(gbs.to_bits(), Ordering::Relaxed);
        }
    }

    /// A request's decode steps read `bytes` each at `step_ms` ([`step_ms`]) against the floor
    /// `floor_ms` computed from [`FloorGauge::gbs`]: when they beat the floor, raises the
    /// bandwidth to what they proved, starts a re-probe (at most one at a time, one per
    /// [`REPROBE_INTERVAL`]) and returns the corrected floor (= `step_ms`); else `None`.
    pub(crate) fn observe(
        self: &Arc<Self>,
        bytes: f64,
        floor_ms: f64,
        step_ms: f64,
    ) -> Option<f64> {
        if !(step_ms > 0.0 && step_ms < floor_ms) {
            return None;
        }
        self.raise(bytes / (step_ms * 1e-3) / 1e9);
        self.remeasures.fetch_add(1, Ordering::Relaxed);
        self.reprobe();
        Some(step_ms)
    }

    fn reprobe(self: &Arc<Self>) {
        let Some(probe) = self.probe.clone() else {
            return;
        };
        {
            let mut last = self.last_probe.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < REPROBE_INTERVAL) {
                return;
            }
            if self.probing.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
        }
        let gauge = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("ridge-floor-probe".into())
            .spawn(move || {
                if let Some(gbs) = (probe.0)() {
                    gauge.raise(gbs);
                }
                gauge.probing.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.probing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_a_token_unless_drafts_were_accepted() {
        assert_eq!(step_ms(10.0, 9, 0), 10.0);
        // 8 gaps, 4 of them accepted drafts: 4 steps of 20 ms.
        assert_eq!(step_ms(10.0, 9, 4), 20.0);
        assert_eq!(step_ms(10.0, 1, 0), 10.0);
        assert_eq!(step_ms(10.0, 3, 5), 20.0);
    }

    #[test]
    fn the_bandwidth_only_rises() {
        let g = FloorGauge::new(10.0, None);
        g.raise(5.0);
        assert_eq!(g.gbs(), 10.0);
        g.raise(f64::NAN);
        g.raise(f64::INFINITY);
        g.raise(-3.0);
        assert_eq!(g.gbs(), 10.0);
        g.raise(12.5);
        assert_eq!(g.gbs(), 12.5);
        assert_eq!(g.initial_gbs(), 10.0);
    }

    #[test]
    fn a_step_that_beats_the_floor_raises_it_to_what_it_proved() {
        // 1 GB per token at 10 GB/s is a 100 ms floor; a 50 ms TPOT proved 20 GB/s.
        let g = FloorGauge::new(10.0, None);
        assert_eq!(g.observe(1e9, 100.0, 120.0), None);
        assert_eq!(g.remeasures(), 0);
        assert_eq!(g.observe(1e9, 100.0, 50.0), Some(50.0));
        assert!((g.gbs() - 20.0).abs() < 1e-9, "{}", g.gbs());
        assert_eq!(g.remeasures(), 1);
    }

    #[test]
    fn a_beaten_floor_is_probed_again_on_another_thread_once() {
        let calls = Arc::new(AtomicU64::new(0));
        let c = calls.clone();
        let g = FloorGauge::new(
            10.0,
            Some(FloorProbe(Arc::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
                Some(40.0)
            }))),
        );
        assert_eq!(g.observe(1e9, 100.0, 50.0), Some(50.0));
        let t0 = Instant::now();
        while g.probing() || g.gbs() < 40.0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the re-probe never ended"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(g.gbs(), 40.0);
        // Within the interval a second beat raises the figure but starts no probe.
        assert_eq!(g.observe(1e9, 20.0, 10.0), Some(10.0));
        assert_eq!(g.gbs(), 100.0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(g.remeasures(), 2);
    }
}
