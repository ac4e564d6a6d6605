//! Token sampling: greedy, temperature, top-k, top-p, with a per-request seeded RNG so the same
//! seed gives the same text.

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
    /// RNG seed; `None` picks one from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Rejects values outside their ranges.
    pub fn validate(&self) -> Result<(), EngineError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(EngineError::InvalidParam(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(EngineError::InvalidParam(format!(
                "top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// A sampler with its own RNG and reusable candidate buffer.
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    cand: Vec<(f32, u32)>,
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
        }
    }

    /// Picks the next token from one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.params.temperature;
        self.cand.clear();
        self.cand.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (l * inv_t, i as u32)),
        );
        let by_logit_desc =
            |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let k = self.params.top_k;
        if k > 0 && k < self.cand.len() {
            self.cand.select_nth_unstable_by(k - 1, by_logit_desc);
            self.cand.truncate(k);
        }
        self.cand.sort_unstable_by(by_logit_desc);
        let max = self.cand[0].0;
        let mut sum = 0f32;
        for c in self.cand.iter_mut() {
            c.0 = (c.0 - max).exp();
            sum += c.0;
        }
        // Top-p over the sorted probabilities.
        let mut keep = self.cand.len();
        if self.params.top_p < 1.0 {
            let mut acc = 0f32;
            for (i, c) in self.cand.iter().enumerate() {
                acc += c.0 / sum;
                if acc >= self.params.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        let total: f32 = self.cand[..keep].iter().map(|c| c.0).sum();
        let mut r = self.rng.random::<f32>() * total;
        for c in &self.cand[..keep] {
            r -= c.0;
            if r <= 0.0 {
                return c.1;
            }
        }
        self.cand[keep - 1].1
    }
}

/// Index of the largest logit (the lowest index among ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

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
        });
        let n = 20_000;
        let zeros = (0..n).filter(|_| s.sample(&logits) == 0).count();
        let frac = zeros as f64 / n as f64;
        // 5 standard deviations of a binomial(0.8) mean over 20k draws is ~0.014.
        assert!((frac - 0.8).abs() < 0.015, "{frac}");
    }
}
