//! Sizing drafts from the running acceptance: a sequence whose guesses keep landing drafts
//! more, one whose guesses miss drafts fewer, and one whose guesses keep missing stops drafting
//! for a while (then tries again), so speculation switches itself off where it does not pay.

/// Per-sequence speculation state.
#[derive(Clone, Debug)]
pub struct SpecState {
    /// Drafts to ask for next.
    pub k: usize,
    /// Moving average of accepted / drafted.
    pub rate: f32,
    /// Steps left before drafting again after switching off.
    pub pause: u32,
    /// Length of the next pause (doubles each time, reset by a good run).
    backoff: u32,
}

/// Acceptance below this turns drafting off for a while.
const MIN_RATE: f32 = 0.3;

impl SpecState {
    /// A fresh state drafting `k` tokens.
    pub fn new(k: usize) -> Self {
        SpecState {
            k,
            rate: 0.6,
            pause: 0,
            backoff: 8,
        }
    }

    /// Whether to draft this step (counts down a pause).
    pub fn wants_draft(&mut self) -> bool {
        if self.pause > 0 {
            self.pause -= 1;
            return false;
        }
        self.k > 0
    }

    /// Records a verification of `drafted` guesses of which the first `accepted` held.
    pub fn record(&mut self, drafted: usize, accepted: usize, max_k: usize) {
        if drafted == 0 {
            return;
        }
        let r = accepted as f32 / drafted as f32;
        self.rate = 0.7 * self.rate + 0.3 * r;
        self.k = if accepted == drafted {
            (self.k + 2).min(max_k)
        } else {
            (accepted + 1).min(max_k)
        };
        if self.rate < MIN_RATE {
            self.pause = self.backoff;
            self.backoff = (self.backoff * 2).min(256);
            self.rate = 0.6;
            self.k = self.k.max(1);
        } else if self.rate > 0.6 {
            self.backoff = 8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_on_hits_shrinks_on_misses_and_pauses() {
        let mut s = SpecState::new(2);
        s.record(2, 2, 8);
        assert_eq!(s.k, 4);
        s.record(4, 1, 8);
        assert_eq!(s.k, 2);
        // Persistent misses pause drafting, for 8 steps the first time.
        for _ in 0..10 {
            if s.wants_draft() {
                s.record(s.k, 0, 8);
            }
        }
        assert!(s.pause > 0);
        let mut skipped = 0;
        while !s.wants_draft() {
            skipped += 1;
        }
        assert!(skipped <= 16, "{skipped}");
    }
}
