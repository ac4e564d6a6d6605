//! Timing events of one request and the metrics derived from them.

use std::time::{Duration, Instant};

/// Timestamps of one request, stamped by the engine.
#[derive(Clone, Debug)]
pub struct RequestTimings {
    /// When the request arrived.
    pub arrival: Instant,
    /// When the first output token was available.
    pub first_token: Option<Instant>,
    /// When the last output token was available.
    pub last_token: Option<Instant>,
    /// Prompt tokens processed.
    pub prompt_tokens: usize,
    /// Output tokens produced.
    pub output_tokens: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl RequestTimings {
    /// Starts the clock.
    pub fn start(prompt_tokens: usize) -> Self {
        RequestTimings {
            arrival: Instant::now(),
            first_token: None,
            last_token: None,
            prompt_tokens,
            output_tokens: 0,
        }
    }

    /// Records one output token now.
    pub fn token(&mut self) {
        let now = Instant::now();
        self.first_token.get_or_insert(now);
        self.last_token = Some(now);
        self.output_tokens += 1;
    }

    /// Time to first token, ms.
    pub fn ttft_ms(&self) -> Option<f64> {
        self.first_token.map(|t| ms(t - self.arrival))
    }

    /// Time per output token after the first, ms: (t_last − t_first) / (n − 1).
    pub fn tpot_ms(&self) -> Option<f64> {
        match (self.first_token, self.last_token) {
            (Some(a), Some(b)) if self.output_tokens > 1 => {
                Some(ms(b - a) / (self.output_tokens - 1) as f64)
            }
            _ => None,
        }
    }

    /// Decode rate, tokens/s (1000 / TPOT).
    pub fn decode_tok_s(&self) -> Option<f64> {
        self.tpot_ms().filter(|&t| t > 0.0).map(|t| 1e3 / t)
    }

    /// Prefill rate, prompt tokens per second of TTFT.
    pub fn prefill_tok_s(&self) -> Option<f64> {
        self.ttft_ms()
            .filter(|&t| t > 0.0)
            .map(|t| self.prompt_tokens as f64 * 1e3 / t)
    }
}
