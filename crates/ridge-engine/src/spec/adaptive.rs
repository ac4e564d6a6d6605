//! Sizing drafts by what they buy. A verification step over `m = 1 + k` tokens costs `c(m)`
//! decode steps (measured on this machine, by the engine, at batch 1) and, if each guess holds
//! with probability `α`, yields `E(k) = (1 − α^(k+1)) / (1 − α)` tokens. Each step a sequence
//! drafts the `k` that maximises `E(k) / c(1 + k)`; when no `k` clearly beats plain decoding
//! (ratio ≤ 1.1) it stops drafting for a while — 8 steps, doubling while it keeps not paying,
//! at most 64 — and then probes with 2 guesses (a 3-token step is one kernel pass), which
//! refreshes both estimates. So speculation switches itself off where it does not pay: on text
//! with nothing to copy, on a slow draft, on a machine where verification is expensive.

/// Measured cost of single-sequence steps: the plain step time (moving average), the marginal
/// cost `β` of each extra verified token in the forward pass, and the proposer's cost `δ` per
/// guess, so that a step verifying `m` tokens costs `1 + (β + δ)(m − 1)` plain steps. Each is
/// one parameter learnt from every drafting step, so a transient slow step cannot freeze the
/// estimate for one draft length.
///
/// `δ` is timed apart from the forward pass because a draft model's first call after a pause
/// must first read every token generated meanwhile: timed together, that catch-up made the
/// probe after a pause look several steps dear, the policy paused again, and the next probe
/// paid the same catch-up — a draft model that pays with a fixed length (1.09–1.34× on the
/// 1.5B) was switched off (0.95×). A guess's sample is capped at twice the current estimate.
#[derive(Clone, Debug)]
pub struct StepCosts {
    plain_ms: Option<f64>,
    beta: f64,
    /// Proposer cost per guess, in plain steps (`None` until measured: then 0).
    draft: Option<f64>,
    /// Plain (one-token) steps measured so far.
    plain_samples: u32,
}

impl Default for StepCosts {
    fn default() -> Self {
        StepCosts {
            plain_ms: None,
            // Prior: an extra verified token costs half a plain step.
            beta: 0.5,
            draft: None,
            plain_samples: 0,
        }
    }
}

impl StepCosts {
    /// Records a step of one sequence that computed `m` tokens in `ms` milliseconds.
    pub fn record(&mut self, m: usize, ms: f64) {
        if m == 0 || !ms.is_finite() || ms <= 0.0 {
            return;
        }
        if m == 1 {
            self.plain_samples += 1;
            self.plain_ms = Some(match self.plain_ms {
                Some(old) => 0.9 * old + 0.1 * ms,
                None => ms,
            });
            return;
        }
        if let Some(one) = self.plain_ms {
            let b = ((ms / one - 1.0) / (m - 1) as f64).clamp(0.0, 2.0);
            self.beta = 0.8 * self.beta + 0.2 * b;
        }
    }

    /// Records the proposer's time `ms` for a step that drafted `k` guesses for one sequence.
    pub fn record_draft(&mut self, k: usize, ms: f64) {
        let Some(one) = self.plain_ms else {
            return;
        };
        if k == 0 || !ms.is_finite() || ms < 0.0 {
            return;
        }
        let x = ms / k as f64 / one;
        self.draft = Some(match self.draft {
            None => x.min(1.0),
            Some(d) => 0.8 * d + 0.2 * x.min(2.0 * d.max(0.05)),
        });
    }

    /// Sets the proposer's cost per guess (in plain steps) to `per_guess` until one is
    /// measured; a measured estimate is kept.
    pub fn seed_draft(&mut self, per_guess: f64) {
        if self.draft.is_none() && per_guess.is_finite() {
            self.draft = Some(per_guess.clamp(0.0, 1.0));
        }
    }

    /// Whether plain steps have been timed often enough to compare against.
    pub fn calibrated(&self) -> bool {
        self.plain_samples >= 3
    }

    /// Cost of an `m`-token step in plain decode steps (never below one: more tokens never
    /// cost less than one).
    pub fn relative(&self, m: usize) -> f64 {
        let per_guess = self.beta + self.draft.unwrap_or(0.0);
        (1.0 + per_guess * m.saturating_sub(1) as f64).max(1.0)
    }
}

/// Per-sequence speculation state.
#[derive(Clone, Debug)]
pub struct SpecState {
    /// Decayed count of accepted guesses.
    acc: f64,
    /// Decayed count of rejected guesses (at most one per verification).
    rej: f64,
    /// Steps left before drafting again after switching off.
    pub pause: u32,
    /// Length of the next pause (doubles each time drafting does not pay, up to 64 steps).
    backoff: u32,
    /// After a pause: the next step probes with a short draft.
    probing: bool,
    /// Guesses in a probe: 2, or 1 for proposers expected to miss (their guesses cost more).
    probe_len: usize,
}

/// Longest pause: a copy-heavy stretch often follows text with nothing to copy, and a probe of
/// 2 guesses every 64 steps costs little (a few percent even for the self draft).
const MAX_PAUSE: u32 = 64;

/// Predicted speed-up below which a sequence decodes plainly.
const MIN_GAIN: f64 = 1.1;

/// Prior: guesses hold four times in five until measured (optimistic: a proposer that found
/// a match is usually right, and one probe must not condemn it).
const PRIOR: (f64, f64) = (4.0, 1.0);

impl Default for SpecState {
    fn default() -> Self {
        SpecState {
            acc: PRIOR.0,
            rej: PRIOR.1,
            pause: 0,
            backoff: 8,
            probing: false,
            probe_len: 2,
        }
    }
}

impl SpecState {
    /// A state whose acceptance estimate starts at `alpha` (the proposer's prior) with the
    /// weight of five observations.
    pub fn with_prior(alpha: f64) -> Self {
        let a = alpha.clamp(0.05, 0.95);
        SpecState {
            acc: 5.0 * a,
            rej: 5.0 * (1.0 - a),
            probe_len: if a < 0.5 { 1 } else { 2 },
            ..Self::default()
        }
    }

    /// Estimated probability that a guess holds.
    pub fn alpha(&self) -> f64 {
        self.acc / (self.acc + self.rej)
    }

    /// Expected tokens from a verification of `k` guesses.
    fn expected(alpha: f64, k: usize) -> f64 {
        if alpha >= 1.0 {
            return (k + 1) as f64;
        }
        (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
    }

    /// Drafts to ask for this step (0: decode plainly), at most `max_k`; counts down a pause,
    /// probes after one, and starts one when no draft length pays.
    pub fn choose_k(&mut self, max_k: usize, costs: &StepCosts) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        if !costs.calibrated() {
            // Time a few plain steps first: the baseline every draft must beat.
            return 0;
        }
        if self.probing {
            // Explore: a short draft refreshes both the acceptance and the cost estimates.
            self.probing = false;
            return max_k.min(self.probe_len);
        }
        let alpha = self.alpha();
        // A draft must promise a clear gain: step times are noisy, and losing is worse than
        // not winning.
        let (mut best, mut best_gain) = (0, MIN_GAIN);
        for k in 1..=max_k {
            let gain = Self::expected(alpha, k) / costs.relative(k + 1);
            if gain > best_gain {
                (best, best_gain) = (k, gain);
            }
        }
        if best == 0 {
            self.pause = self.backoff;
            self.backoff = (self.backoff * 2).min(MAX_PAUSE);
            self.probing = true;
        } else if best_gain > 1.2 {
            self.backoff = 8;
        }
        best
    }

    /// Records a verification of `drafted` guesses of which the first `accepted` held.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.acc = 0.8 * self.acc + accepted as f64;
        self.rej = 0.8 * self.rej + if accepted < drafted { 1.0 } else { 0.0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_long_when_guesses_hold_and_cheap() {
        let mut costs = StepCosts::default();
        let mut s = SpecState::default();
        assert_eq!(s.choose_k(8, &costs), 0, "uncalibrated: plain");
        for _ in 0..3 {
            costs.record(1, 10.0);
        }
        for m in 2..=9 {
            costs.record(m, 10.0 + 3.0 * (m - 1) as f64);
        }
        for _ in 0..20 {
            s.record(5, 5);
        }
        assert!(s.alpha() > 0.95);
        assert_eq!(s.choose_k(8, &costs), 8);
    }

    #[test]
    fn a_draft_models_catch_up_after_a_pause_does_not_switch_it_off() {
        // Verifying costs 0.15 of a step per extra token, each guess of the draft model 0.3:
        // with ~83% acceptance two guesses pay ~1.25x.
        let mut costs = StepCosts::default();
        for _ in 0..3 {
            costs.record(1, 30.0);
        }
        for _ in 0..10 {
            costs.record(4, 30.0 * (1.0 + 0.15 * 3.0));
            costs.record_draft(3, 3.0 * 0.3 * 30.0);
        }
        let mut s = SpecState::with_prior(0.85);
        for _ in 0..10 {
            s.record(3, 3);
            s.record(3, 2);
        }
        assert!(s.choose_k(5, &costs) >= 2);
        // A catch-up of 64 tokens after a pause: one slow draft call (a prefill of the draft
        // model, ~5 plain steps) must not take drafting away.
        costs.record_draft(2, 5.0 * 30.0);
        assert!(costs.relative(4) < 1.0 + 3.0 * 0.8, "{}", costs.relative(4));
        assert!(s.choose_k(5, &costs) >= 2);
    }

    #[test]
    fn a_seeded_guess_cost_survives_a_cold_first_guess() {
        // Verifying costs ~0.1 of a step per extra token (one pass for up to 8 tokens); the
        // draft's bytes say a guess costs 0.28 of a step, but the first one, cold, took a
        // whole step.
        let calibrated = || {
            let mut c = StepCosts::default();
            for _ in 0..3 {
                c.record(1, 36.0);
            }
            for _ in 0..10 {
                c.record(3, 36.0 * 1.2);
            }
            c
        };
        let mut costs = calibrated();
        costs.seed_draft(0.28);
        costs.record_draft(1, 36.0);
        assert!(costs.relative(4) < 1.0 + 3.0 * 0.6, "{}", costs.relative(4));
        assert!(SpecState::with_prior(0.8).choose_k(7, &costs) >= 2);
        // A measured estimate is not replaced by a later seed.
        costs.seed_draft(0.9);
        assert!(costs.relative(4) < 1.0 + 3.0 * 0.6);
        // Unseeded, the cold guess sets the estimate at a whole step: nothing pays.
        let mut cold = calibrated();
        cold.record_draft(1, 36.0);
        assert_eq!(SpecState::with_prior(0.8).choose_k(7, &cold), 0);
    }

    #[test]
    fn switches_off_when_verification_does_not_pay_and_backs_off() {
        // Verifying m tokens costs m decode steps: no draft can pay.
        let mut costs = StepCosts::default();
        for m in [1, 1, 1, 2, 3, 4, 5, 6] {
            costs.record(m, 10.0 * m as f64);
        }
        let mut s = SpecState::default();
        assert_eq!(s.choose_k(5, &costs), 0);
        assert_eq!(s.pause, 8);
        let paused = (0..100).take_while(|_| s.choose_k(5, &costs) == 0).count();
        assert_eq!(paused, 8);
        // The step after the pause probed 2 guesses; they miss, so the next pause is longer,
        // up to 64 steps.
        s.record(2, 0);
        assert_eq!(s.choose_k(5, &costs), 0);
        assert_eq!(s.pause, 16);
        for _ in 0..5 {
            while s.choose_k(5, &costs) == 0 {}
            s.record(2, 0);
        }
        assert_eq!(s.choose_k(5, &costs), 0);
        assert_eq!(s.pause, 64);
    }

    #[test]
    fn low_acceptance_means_short_or_no_drafts() {
        let mut costs = StepCosts::default();
        for _ in 0..3 {
            costs.record(1, 10.0);
        }
        for m in 2..=6 {
            costs.record(m, 10.0 + 5.0 * (m - 1) as f64);
        }
        let mut s = SpecState::default();
        for _ in 0..20 {
            s.record(3, 0);
        }
        assert_eq!(s.choose_k(5, &costs), 0);
        let mut s = SpecState::default();
        for _ in 0..20 {
            s.record(4, 2);
        }
        let k = s.choose_k(5, &costs);
        assert!((1..=3).contains(&k), "{k}");
    }

    #[test]
    fn a_sceptical_prior_waits_and_probes_with_one_guess() {
        // Extra verified tokens cost half a step: with a 0.4 prior no draft pays at first, and
        // the probe after the pause is a single guess.
        let mut costs = StepCosts::default();
        for _ in 0..3 {
            costs.record(1, 10.0);
        }
        let mut s = SpecState::with_prior(0.4);
        assert_eq!(s.choose_k(5, &costs), 0);
        assert_eq!(s.pause, 8);
        while s.choose_k(5, &costs) == 0 {}
        assert_eq!(s.pause, 0);
        let mut s = SpecState::with_prior(0.4);
        s.choose_k(5, &costs);
        let probe = loop {
            let k = s.choose_k(5, &costs);
            if k > 0 {
                break k;
            }
        };
        assert_eq!(probe, 1);
        // The optimistic default probes with two.
        let mut d = SpecState::default();
        for _ in 0..20 {
            d.record(3, 0);
        }
        assert_eq!(d.choose_k(5, &costs), 0);
        let probe = loop {
            let k = d.choose_k(5, &costs);
            if k > 0 {
                break k;
            }
        };
        assert_eq!(probe, 2);
    }
}
