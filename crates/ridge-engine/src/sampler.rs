//! Token sampling, per request: logit bias, repetition / presence / frequency penalties,
//! temperature, top-k, top-p, min-p, and a per-request seeded RNG, so the same seed gives the
//! same text however the request was batched (the RNG is consumed once per sampled token of
//! this request only).
//!
//! The order follows vLLM's: bias and penalties change the logits, temperature scales them,
//! then the candidate set is cut by top-k, top-p and min-p before drawing.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::EngineError;

/// Sampling parameters of one request.
#[derive(Clone, Debug)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0 = off).
    pub min_p: f32,
    /// Divides positive logits (multiplies negative ones) of tokens seen in the prompt or the
    /// output (1 = off).
    pub repetition_penalty: f32,
    /// Subtracted from the logit of every token already generated (0 = off).
    pub presence_penalty: f32,
    /// Subtracted once per earlier occurrence in the output (0 = off).
    pub frequency_penalty: f32,
    /// Added to the logits of the given tokens.
    pub logit_bias: Vec<(u32, f32)>,
    /// RNG seed; `None` picks one from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding, no penalties.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            ..Default::default()
        }
    }

    /// Rejects values outside their ranges.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::InvalidParam(m));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if self
            .logit_bias
            .iter()
            .any(|&(_, b)| !(-100.0..=100.0).contains(&b))
        {
            return bad("logit_bias values must be in [-100, 100]".into());
        }
        Ok(())
    }

    fn needs_history(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
    }
}

/// Tokens a request has seen, for the penalties.
#[derive(Clone, Debug, Default)]
pub struct TokenHistory {
    /// Occurrences of each generated token.
    output_counts: HashMap<u32, u32>,
    /// Distinct prompt tokens (only kept when a repetition penalty is set).
    prompt: Vec<u32>,
}

impl TokenHistory {
    /// Starts from a prompt.
    pub fn new(prompt: &[u32], params: &SamplingParams) -> Self {
        let mut prompt = if params.repetition_penalty != 1.0 {
            prompt.to_vec()
        } else {
            Vec::new()
        };
        prompt.sort_unstable();
        prompt.dedup();
        TokenHistory {
            output_counts: HashMap::new(),
            prompt,
        }
    }

    /// Records a generated token.
    pub fn push(&mut self, token: u32) {
        *self.output_counts.entry(token).or_insert(0) += 1;
    }
}

/// The log-probability of a token and its most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// The sampled token's log-probability under the model.
    pub logprob: f32,
    /// The most likely tokens with their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Log-probabilities of `token` and of the `top_n` most likely tokens, from raw logits (before
/// any bias, penalty or temperature, as vLLM reports them).
pub fn logprobs(logits: &[f32], token: u32, top_n: usize) -> TokenLogprobs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max + sum.ln() as f32;
    let lp = |t: u32| {
        logits
            .get(t as usize)
            .map_or(f32::NEG_INFINITY, |&l| l - lse)
    };
    let mut top: Vec<(u32, f32)> = Vec::new();
    if top_n > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let desc = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let k = top_n.min(idx.len());
        if k < idx.len() {
            idx.select_nth_unstable_by(k - 1, desc);
            idx.truncate(k);
        }
        idx.sort_unstable_by(desc);
        top = idx.into_iter().map(|t| (t, lp(t))).collect();
    }
    TokenLogprobs {
        logprob: lp(token),
        top,
    }
}

/// A sampler with its own RNG and reusable buffers.
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    cand: Vec<(f32, u32)>,
    work: Vec<f32>,
}

impl Sampler {
    /// A sampler for one request.
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(s) => ChaCha8Rng::seed_from_u64(s),
            None => ChaCha8Rng::from_os_rng(),
        };
        Sampler {
            params,
            rng,
            cand: Vec::new(),
            work: Vec::new(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from one row of logits (no penalties).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_with(logits, None)
    }

    /// Picks the next token, applying logit bias and the penalties against `history`.
    pub fn sample_with(&mut self, logits: &[f32], history: Option<&TokenHistory>) -> u32 {
        self.pick(logits, history, None)
    }

    /// Verifies a speculative `draft` token against the target's logits and returns the token
    /// to emit: the draft itself when accepted, else a replacement.
    ///
    /// Greedy: the argmax (accepted iff it equals the draft). Sampling: the draft was proposed
    /// deterministically (a point mass q = δ_draft), so the rule of Leviathan et al. (2023) —
    /// accept with probability min(1, p/q), else draw from the normalised residual
    /// max(0, p − q) — becomes: accept with probability p(draft), else draw from p with the
    /// draft removed. Either way the emitted token is distributed exactly as
    /// [`Sampler::sample_with`]'s (p is the same processed distribution: penalties, bias,
    /// temperature, top-k/p, min-p).
    pub fn verify_draft(
        &mut self,
        logits: &[f32],
        history: Option<&TokenHistory>,
        draft: u32,
    ) -> u32 {
        self.pick(logits, history, Some(draft))
    }

    fn pick(&mut self, logits: &[f32], history: Option<&TokenHistory>, draft: Option<u32>) -> u32 {
        let p = &self.params;
        let adjust = !p.logit_bias.is_empty() || (history.is_some() && p.needs_history());
        let logits = if adjust {
            self.work.clear();
            self.work.extend_from_slice(logits);
            let w = &mut self.work;
            if let Some(h) = history {
                if p.repetition_penalty != 1.0 {
                    let seen = h.prompt.iter().chain(h.output_counts.keys());
                    for &t in seen {
                        if let Some(l) = w.get_mut(t as usize) {
                            if *l > 0.0 {
                                *l /= p.repetition_penalty;
                            } else {
                                *l *= p.repetition_penalty;
                            }
                        }
                    }
                }
                for (&t, &c) in &h.output_counts {
                    if let Some(l) = w.get_mut(t as usize) {
                        *l -= p.presence_penalty + p.frequency_penalty * c as f32;
                    }
                }
            }
            for &(t, b) in &p.logit_bias {
                if let Some(l) = w.get_mut(t as usize) {
                    *l += b;
                }
            }
            &self.work[..]
        } else {
            logits
        };
        if p.temperature <= 0.0 {
            return argmax(logits);
        }
        let inv_t = 1.0 / p.temperature;
        self.cand.clear();
        self.cand.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (l * inv_t, i as u32)),
        );
        let by_logit_desc =
            |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let k = p.top_k;
        if k > 0 && k < self.cand.len() {
            self.cand.select_nth_unstable_by(k - 1, by_logit_desc);
            self.cand.truncate(k);
        }
        let max = self
            .cand
            .iter()
            .map(|c| c.0)
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for c in self.cand.iter_mut() {
            c.0 = (c.0 - max).exp();
            sum += c.0;
        }
        // Top-p needs the most likely tokens in order, but only as many as the nucleus holds:
        // select a growing head and sort just that (a full sort of a 50k–260k vocabulary per
        // token would cost milliseconds).
        let mut keep = self.cand.len();
        if p.top_p < 1.0 {
            let target = p.top_p * sum;
            let mut m = 64.min(keep);
            loop {
                if m < self.cand.len() {
                    self.cand.select_nth_unstable_by(m - 1, by_logit_desc);
                }
                self.cand[..m].sort_unstable_by(by_logit_desc);
                let mut acc = 0f32;
                let found = self.cand[..m].iter().position(|c| {
                    acc += c.0;
                    acc >= target
                });
                if let Some(i) = found {
                    keep = i + 1;
                    break;
                }
                if m == self.cand.len() {
                    break;
                }
                m = (m * 4).min(self.cand.len());
            }
        }
        self.cand.truncate(keep);
        // Min-p: relative to the most likely token (weight 1 after the shift above).
        if p.min_p > 0.0 {
            self.cand.retain(|c| c.0 >= p.min_p);
        }
        let keep = self.cand.len();
        let total: f32 = self.cand[..keep].iter().map(|c| c.0).sum();
        let Some(x) = draft else {
            let mut r = self.rng.random::<f32>() * total;
            for c in &self.cand[..keep] {
                r -= c.0;
                if r <= 0.0 {
                    return c.1;
                }
            }
            return self.cand[keep - 1].1;
        };
        let wx = self.cand.iter().find(|c| c.1 == x).map_or(0.0, |c| c.0);
        if self.rng.random::<f32>() * total < wx {
            return x;
        }
        // Rejected: the residual is p without the draft token.
        let rest = total - wx;
        let mut r = self.rng.random::<f32>() * rest;
        let mut last = x;
        for c in self.cand.iter().filter(|c| c.1 != x) {
            last = c.1;
            r -= c.0;
            if r <= 0.0 {
                return c.1;
            }
        }
        last
    }
}

/// Index of the largest logit (the lowest index among ties).
pub fn argmax(logits: &[f32]) -> u32 {
    // Two passes the compiler vectorises (a 262 144-entry vocabulary is read in ~30 µs instead
    // of a serial compare chain): the maximum in 16 independent lanes (NaN never wins a `>`),
    // then the first index holding it, so ties go to the lowest id.
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = logits.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    logits.iter().position(|&l| l == max).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_is_the_first_maximum_at_every_length_and_ignores_nan() {
        let naive = |x: &[f32]| {
            let mut best: Option<usize> = None;
            for (i, &v) in x.iter().enumerate() {
                if !v.is_nan() && best.is_none_or(|b| v > x[b]) {
                    best = Some(i);
                }
            }
            best.unwrap_or(0) as u32
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in (1..70).chain([262_144]) {
            // Few distinct values, so ties are common.
            let mut x: Vec<f32> = (0..n)
                .map(|_| rng.random_range(0..6) as f32 - 3.0)
                .collect();
            assert_eq!(argmax(&x), naive(&x), "n {n}");
            x[n / 2] = f32::NAN;
            assert_eq!(argmax(&x), naive(&x), "n {n} with NaN");
        }
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }

    #[test]
    fn greedy_picks_max_and_lowest_tie() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 0.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 3.0]), 1);
    }

    #[test]
    fn same_seed_same_tokens_and_top_k_restricts() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 5,
            top_p: 1.0,
            seed: Some(42),
            ..Default::default()
        };
        let (mut a, mut b) = (Sampler::new(p.clone()), Sampler::new(p));
        let mut top5: Vec<u32> = (0..100).collect();
        top5.sort_by(|&x, &y| logits[y as usize].total_cmp(&logits[x as usize]));
        top5.truncate(5);
        for _ in 0..200 {
            let x = a.sample(&logits);
            assert_eq!(x, b.sample(&logits));
            assert!(top5.contains(&x));
        }
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // One token holds ~99.99% of the mass: top_p 0.5 must always return it.
        let mut logits = vec![0.0f32; 50];
        logits[7] = 20.0;
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            seed: Some(1),
            ..Default::default()
        });
        for _ in 0..100 {
            assert_eq!(s.sample(&logits), 7);
        }
    }

    #[test]
    fn sampling_follows_the_distribution() {
        // Two tokens with probabilities 0.8 / 0.2 (logit gap ln 4).
        let logits = [4f32.ln(), 0.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: Some(3),
            ..Default::default()
        });
        let n = 20_000;
        let zeros = (0..n).filter(|_| s.sample(&logits) == 0).count();
        let frac = zeros as f64 / n as f64;
        // 5 standard deviations of a binomial(0.8) mean over 20k draws is ~0.014.
        assert!((frac - 0.8).abs() < 0.015, "{frac}");
    }

    fn draws(
        p: SamplingParams,
        logits: &[f32],
        history: Option<&TokenHistory>,
        n: usize,
    ) -> Vec<usize> {
        let mut s = Sampler::new(p);
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[s.sample_with(logits, history) as usize] += 1;
        }
        counts
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // Probabilities ∝ 1, 0.5, 0.05: min_p 0.1 keeps the first two, in ratio 2:1.
        let logits = [0.0f32, 0.5f32.ln(), 0.05f32.ln()];
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.1,
            seed: Some(9),
            ..Default::default()
        };
        let c = draws(p, &logits, None, 30_000);
        assert_eq!(c[2], 0);
        let frac = c[0] as f64 / 30_000.0;
        assert!((frac - 2.0 / 3.0).abs() < 0.015, "{frac}");
    }

    #[test]
    fn penalties_and_bias_follow_their_formulas() {
        // Token 0 was generated twice and is in the prompt; token 1 only in the prompt.
        let logits = [2.0f32, -1.0, 0.5, 0.0];
        let p = SamplingParams {
            repetition_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            logit_bias: vec![(3, 1.0)],
            ..SamplingParams::greedy()
        };
        let mut h = TokenHistory::new(&[0, 1, 1], &p);
        h.push(0);
        h.push(0);
        // token 0: 2/2 − 0.5 − 0.25·2 = 0; token 1: −1·2 = −2; token 2: 0.5; token 3: 0 + 1.
        let mut s = Sampler::new(p.clone());
        assert_eq!(s.sample_with(&logits, Some(&h)), 3);
        // Without the bias token 2 (0.5) beats token 0 (0).
        let p2 = SamplingParams {
            logit_bias: vec![],
            ..p
        };
        let mut s = Sampler::new(p2);
        assert_eq!(s.sample_with(&logits, Some(&h)), 2);
        // With no history the raw argmax wins.
        assert_eq!(s.sample_with(&logits, None), 0);
    }

    #[test]
    fn temperature_sampling_matches_softmax_frequencies() {
        // Chi-square over 4 outcomes at T = 0.7 against the exact softmax.
        let logits = [1.0f32, 0.3, -0.4, 0.9];
        let t = 0.7f64;
        let n = 40_000;
        let c = draws(
            SamplingParams {
                temperature: t as f32,
                top_k: 0,
                top_p: 1.0,
                seed: Some(5),
                ..Default::default()
            },
            &logits,
            None,
            n,
        );
        let w: Vec<f64> = logits.iter().map(|&l| (l as f64 / t).exp()).collect();
        let z: f64 = w.iter().sum();
        let chi2: f64 = c
            .iter()
            .zip(&w)
            .map(|(&o, &wi)| {
                let e = n as f64 * wi / z;
                (o as f64 - e).powi(2) / e
            })
            .sum();
        // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
        assert!(chi2 < 16.27, "chi2 {chi2}, counts {c:?}");
    }

    #[test]
    fn logprobs_are_log_softmax_with_sorted_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, -1.0];
        let lp = logprobs(&logits, 0, 2);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        let exact = |i: usize| (logits[i] as f64 - z.ln()) as f32;
        assert!((lp.logprob - exact(0)).abs() < 1e-6);
        assert_eq!(lp.top.len(), 2);
        assert_eq!((lp.top[0].0, lp.top[1].0), (1, 2));
        assert!((lp.top[0].1 - exact(1)).abs() < 1e-6);
    }

    #[test]
    fn validation_rejects_out_of_range() {
        for p in [
            SamplingParams {
                min_p: 1.5,
                ..Default::default()
            },
            SamplingParams {
                repetition_penalty: 0.0,
                ..Default::default()
            },
            SamplingParams {
                presence_penalty: 2.5,
                ..Default::default()
            },
            SamplingParams {
                logit_bias: vec![(1, 101.0)],
                ..Default::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..Default::default()
            },
        ] {
            assert!(p.validate().is_err(), "{p:?}");
        }
        assert!(SamplingParams::default().validate().is_ok());
    }

    #[test]
    fn draft_verification_keeps_the_target_distribution() {
        // Whatever token is drafted — likely, unlikely, or outside top-k — the emitted token
        // must follow the processed distribution (T = 0.8, top-k 4 of 5). Chi-square per draft.
        let logits = [1.0f32, 0.3, -0.4, 0.9, -3.0];
        let t = 0.8f64;
        let mut w: Vec<f64> = logits.iter().map(|&l| (l as f64 / t).exp()).collect();
        w[4] = 0.0; // cut by top-k
        let z: f64 = w.iter().sum();
        let n = 40_000;
        for draft in 0..5u32 {
            let mut s = Sampler::new(SamplingParams {
                temperature: t as f32,
                top_k: 4,
                top_p: 1.0,
                seed: Some(11 + draft as u64),
                ..Default::default()
            });
            let mut c = [0usize; 5];
            for _ in 0..n {
                c[s.verify_draft(&logits, None, draft) as usize] += 1;
            }
            assert_eq!(c[4], 0, "a token outside top-k was emitted (draft {draft})");
            let chi2: f64 = (0..4)
                .map(|i| {
                    let e = n as f64 * w[i] / z;
                    (c[i] as f64 - e).powi(2) / e
                })
                .sum();
            // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
            assert!(chi2 < 16.27, "draft {draft}: chi2 {chi2}, counts {c:?}");
        }
        // Greedy: the argmax, whatever the draft.
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(g.verify_draft(&logits, None, 3), 0);
        assert_eq!(g.verify_draft(&logits, None, 0), 0);
    }
}
