//! When each request is sent: an open-loop arrival process.
//!
//! Open loop means arrivals do not wait for responses — a slow server faces the same offered
//! load as a fast one, as real users would give it, and its queue (and so its TTFT) grows. A
//! closed loop (send the next request when one finishes) hides exactly the overload a
//! benchmark should show.
//!
//! Inter-arrival gaps are gamma-distributed with shape `k = burstiness` and scale
//! `θ = 1 / (rate · k)`, so the mean gap is `k · θ = 1 / rate` whatever the burstiness, and the
//! coefficient of variation is `1 / √k`: `k = 1` is the exponential distribution (a Poisson
//! process), `k < 1` burstier, `k > 1` more regular. No rate means every request at time 0.

use rand::SeedableRng;
use rand_distr::{Distribution, Gamma};

/// Send times in seconds from the start of the run, one per request, non-decreasing.
///
/// `rate` is requests per second (`None` or infinite: all at 0); `burstiness` must be
/// positive. The sequence is a pure function of `seed`.
pub fn arrival_times(
    n: usize,
    rate: Option<f64>,
    burstiness: f64,
    seed: u64,
) -> Result<Vec<f64>, String> {
    if !(burstiness.is_finite() && burstiness > 0.0) {
        return Err(format!(
            "burstiness must be a positive number, got {burstiness}"
        ));
    }
    let rate = match rate {
        None => return Ok(vec![0.0; n]),
        Some(r) if r.is_infinite() && r > 0.0 => return Ok(vec![0.0; n]),
        Some(r) if r.is_finite() && r > 0.0 => r,
        Some(r) => return Err(format!("request rate must be positive, got {r}")),
    };
    let gamma = Gamma::new(burstiness, 1.0 / (rate * burstiness))
        .map_err(|e| format!("gamma(shape {burstiness}, rate {rate}): {e}"))?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut t = 0.0;
    Ok((0..n)
        .map(|_| {
            t += gamma.sample(&mut rng);
            t
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(times: &[f64]) -> Vec<f64> {
        let mut prev = 0.0;
        times
            .iter()
            .map(|&t| {
                let g = t - prev;
                prev = t;
                g
            })
            .collect()
    }

    fn mean_cv(g: &[f64]) -> (f64, f64) {
        let n = g.len() as f64;
        let mean = g.iter().sum::<f64>() / n;
        let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn mean_rate_matches_for_any_burstiness() {
        // 20 000 gaps: the sample mean's standard error is cv/√n ≤ 1.5 %, so 5 % is ~3σ+.
        for (k, cv) in [(1.0, 1.0), (0.5, 2f64.sqrt()), (4.0, 0.5)] {
            let t = arrival_times(20_000, Some(8.0), k, 7).unwrap();
            assert!(t.windows(2).all(|w| w[1] >= w[0]));
            let (mean, got_cv) = mean_cv(&gaps(&t));
            assert!(
                (mean - 0.125).abs() < 0.05 * 0.125,
                "k {k}: mean gap {mean}"
            );
            // Shape k → coefficient of variation 1/√k (Poisson: 1).
            assert!((got_cv - cv).abs() < 0.06 * cv, "k {k}: cv {got_cv}");
        }
    }

    #[test]
    fn no_rate_sends_everything_at_once_and_seeds_repeat() {
        assert_eq!(arrival_times(3, None, 1.0, 0).unwrap(), vec![0.0; 3]);
        assert_eq!(
            arrival_times(2, Some(f64::INFINITY), 1.0, 0).unwrap(),
            vec![0.0; 2]
        );
        assert_eq!(
            arrival_times(50, Some(3.0), 1.0, 42).unwrap(),
            arrival_times(50, Some(3.0), 1.0, 42).unwrap()
        );
        assert!(arrival_times(1, Some(0.0), 1.0, 0).is_err());
        assert!(arrival_times(1, Some(1.0), 0.0, 0).is_err());
    }
}
