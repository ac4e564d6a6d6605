//! The ceiling of prompt lookup on a given answer: what any drafting policy could reach.
//!
//! A speculative speed-up has two independent parts: what the proposer *could* guess and what
//! verifying guesses *costs* on this machine. For prompt lookup both are measurable offline.
//! Given the greedy answer, the guesses at each position are known exactly (the lookup is
//! deterministic and sees only the prompt and the answer so far), and so is how many of them
//! the answer confirms — greedy verification accepts exactly those. Given the cost `c(m)` of an
//! `m`-token pass in plain steps, the best schedule follows by dynamic programming over
//! positions: at position `p` draft any `k` up to the guesses that hold there, pay `c(1 + k)`,
//! continue at `p + k + 1`. No policy — not even one that knows the answer — does better, so
//! a measured speed-up reads as a fraction of this ceiling, and a target above it is out of
//! reach on this machine whatever the policy (sessions 11–13 chased 2× on editing prompts
//! whose ceiling here is 1.76×).

use std::time::Instant;

use ridge_model::{Batch, KvCache, Model, ModelError, Workspace};

use super::NgramProposer;

/// The lookup's guesses at one position of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guesses {
    /// Tokens the lookup proposes (at most the draft limit).
    pub made: usize,
    /// How many of them, from the first, the answer confirms.
    pub held: usize,
}

/// Speed-ups over plain decoding that drafting could reach on one answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpecBound {
    /// The best schedule, chosen knowing the answer (the ceiling of every policy).
    pub ceiling: f64,
    /// Drafting, at each step, exactly the guesses that will hold (clairvoyant but greedy).
    pub stepwise: f64,
    /// Drafting every guess the lookup makes (no sizing policy).
    pub every_guess: f64,
}

/// At each position `p` of `answer[from..]`: the guesses `lookup` makes (at most `max_k`)
/// after `prompt` and `answer[..p]`, and how many of them `answer[p..]` confirms.
pub fn lookup_guesses(
    lookup: &NgramProposer,
    prompt: &[u32],
    answer: &[u32],
    from: usize,
    max_k: usize,
) -> Vec<Guesses> {
    let from = from.min(answer.len());
    let mut seen: Vec<u32> = prompt.iter().chain(&answer[..from]).copied().collect();
    let mut guess = Vec::new();
    let mut out = Vec::with_capacity(answer.len() - from);
    for p in from..answer.len() {
        guess.clear();
        lookup.lookup(&seen, max_k, &mut guess);
        let held = guess
            .iter()
            .zip(&answer[p..])
            .take_while(|(g, a)| g == a)
            .count();
        out.push(Guesses {
            made: guess.len(),
            held,
        });
        seen.push(answer[p]);
    }
    out
}

/// The speed-ups reachable on positions with guesses `g`, where `cost[m - 1]` is the cost of
/// an `m`-token pass relative to a one-token step (`cost[0]` = 1; at least `1 + max made`
/// entries). Guesses past the cost table are not drafted. An empty answer gives 1 each.
pub fn spec_bound(g: &[Guesses], cost: &[f64]) -> SpecBound {
    let n = g.len();
    if n == 0 || cost.is_empty() {
        return SpecBound {
            ceiling: 1.0,
            stepwise: 1.0,
            every_guess: 1.0,
        };
    }
    let limit = cost.len() - 1;
    // best[p]: the least cost of generating positions p.. (best[n] = 0). Any number of the
    // guesses made may be drafted; past the held ones they only cost (the pass advances
    // `held + 1`), which can still be the cheaper pass where measured costs are not monotonic
    // in the pass length — so the best schedule is at least every fixed rule below.
    let mut best = vec![0.0f64; n + 1];
    for p in (0..n).rev() {
        let held = g[p].held.min(limit);
        best[p] = (0..=g[p].made.min(limit))
            .map(|k| cost[k] + best[(p + k.min(held) + 1).min(n)])
            .fold(f64::INFINITY, f64::min);
    }
    // A fixed rule: draft `k(p)` guesses at each step (a guess past the held ones is rejected,
    // and the target's own token follows the held ones).
    let walk = |k_at: &dyn Fn(&Guesses) -> usize| {
        let (mut p, mut total) = (0, 0.0);
        while p < n {
            let k = k_at(&g[p]).min(limit);
            total += cost[k];
            p += k.min(g[p].held) + 1;
        }
        total
    };
    let stepwise = walk(&|x| x.held);
    let every = walk(&|x| x.made);
    SpecBound {
        ceiling: n as f64 / best[0],
        stepwise: n as f64 / stepwise,
        every_guess: n as f64 / every,
    }
}

/// The cost of a pass of `m` tokens of one sequence after `at` cached positions, relative to
/// a one-token step, for `m = 1..=max_m` (`[0]` = 1): medians of `reps` passes alternating
/// over `m`, so a change in the machine's speed touches every length alike.
pub fn pass_costs(
    model: &Model,
    at: usize,
    max_m: usize,
    reps: usize,
) -> Result<Vec<f64>, ModelError> {
    let max_m = max_m.max(1);
    let mut kv = KvCache::new(model.config(), at + max_m + 8);
    let mut ws = Workspace::new();
    let seq = kv.add_seq();
    let vocab = model.config().vocab.max(1) as u32;
    // Any ids do: a pass's cost does not depend on which tokens it reads.
    let ids: Vec<u32> = (0..at.max(1) as u32)
        .map(|i| (i * 37 + 11) % vocab)
        .collect();
    let mut b = Batch::new();
    b.push_seq(&ids, 0, seq, true);
    model.forward(&b, &mut kv, &mut ws)?;
    let mut ms = vec![Vec::new(); max_m];
    for _ in 0..reps.max(1) {
        for m in 1..=max_m {
            b.clear();
            for j in 0..m {
                b.push(ids[j % ids.len()], ids.len() + j, seq, true);
            }
            let t = Instant::now();
            model.forward(&b, &mut kv, &mut ws)?;
            ms[m - 1].push(t.elapsed().as_secs_f64());
            kv.rewind(seq, ids.len());
        }
    }
    let med: Vec<f64> = ms
        .into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    Ok(med.iter().map(|v| v / med[0].max(1e-12)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gs(v: &[(usize, usize)]) -> Vec<Guesses> {
        v.iter()
            .map(|&(made, held)| Guesses { made, held })
            .collect()
    }

    #[test]
    fn guesses_follow_the_lookup_and_the_answer() {
        // Prompt 1 2 3 4 5; the answer copies "2 3 4" then diverges with 9.
        let prompt = [1, 2, 3, 4, 5];
        let answer = [2, 3, 4, 9, 9];
        let g = lookup_guesses(&NgramProposer::default(), &prompt, &answer, 0, 3);
        // Position 0 follows "… 4 5" and position 1 "5 2": neither suffix occurred before.
        // Position 2 follows "2 3", seen at 1: its continuation "4 5 2" is guessed and the
        // answer "4 9 …" confirms one. Position 3 follows "2 3 4" (the longest suffix that
        // occurred before): "5 2 3" guessed, 9 comes. Position 4 follows "4 9": nothing.
        assert_eq!(g, gs(&[(0, 0), (0, 0), (3, 1), (3, 0), (0, 0)]));
        // Starting later skips the first positions but sees the answer before them.
        assert_eq!(
            lookup_guesses(&NgramProposer::default(), &prompt, &answer, 2, 3),
            g[2..]
        );
    }

    #[test]
    fn nothing_to_guess_is_plain_decoding() {
        let b = spec_bound(&gs(&[(0, 0); 5]), &[1.0, 1.2]);
        assert_eq!((b.ceiling, b.stepwise, b.every_guess), (1.0, 1.0, 1.0));
        // Guesses that never hold cost what drafting them costs.
        let b = spec_bound(&gs(&[(1, 0); 4]), &[1.0, 1.25]);
        assert_eq!((b.ceiling, b.stepwise), (1.0, 1.0));
        assert_eq!(b.every_guess, 4.0 / 5.0);
    }

    #[test]
    fn the_ceiling_can_beat_drafting_what_holds_step_by_step() {
        // Passes of 1, 2, 3 tokens cost 1, 1.1, 1.2 steps.
        let cost = [1.0, 1.1, 1.2];
        // Two hold at 0, nothing after: drafting them (1.2, on to 3) and a plain step (1) is
        // best — 2.2 for 4 tokens either way.
        let b = spec_bound(&gs(&[(2, 2), (1, 0), (1, 0), (0, 0)]), &cost);
        assert!((b.stepwise - 4.0 / 2.2).abs() < 1e-12, "{b:?}");
        assert!((b.ceiling - 4.0 / 2.2).abs() < 1e-12, "{b:?}");
        // One holds at 0, two at 1. Step by step: 0 → 2 (1.1), then two plain steps: 3.1.
        // Best: a plain step to 1 (1), then two guesses that hold (1.2, on to 4): 2.2.
        let b = spec_bound(&gs(&[(1, 1), (2, 2), (0, 0), (0, 0)]), &cost);
        assert!((b.stepwise - 4.0 / 3.1).abs() < 1e-12, "{b:?}");
        assert!((b.ceiling - 4.0 / 2.2).abs() < 1e-12, "{b:?}");
        // Every guess made holds here, so drafting them all is the step-by-step schedule.
        assert!((b.every_guess - b.stepwise).abs() < 1e-12);
    }

    #[test]
    fn the_ceiling_is_at_least_every_rule_when_measured_costs_are_not_monotonic() {
        // A noisy measurement: a 3-token pass timed cheaper than a 2-token one. Two guesses
        // made, one holding, at each of 4 positions: drafting both (the second is rejected)
        // costs 1.2 for 2 tokens, drafting the held one 1.5 — the best schedule drafts both.
        let b = spec_bound(&gs(&[(2, 1); 4]), &[1.0, 1.5, 1.2]);
        assert!((b.every_guess - 4.0 / 2.4).abs() < 1e-12, "{b:?}");
        assert!((b.ceiling - 4.0 / 2.4).abs() < 1e-12, "{b:?}");
        assert!(
            b.ceiling >= b.stepwise && b.ceiling >= b.every_guess,
            "{b:?}"
        );
    }

    #[test]
    fn guesses_beyond_the_cost_table_are_not_drafted() {
        // Eight guesses hold but passes of at most 3 tokens were timed.
        let b = spec_bound(&gs(&[(8, 8); 9]), &[1.0, 1.1, 1.2]);
        // Three passes of 3 tokens: 9 tokens for 3.6.
        assert!((b.ceiling - 9.0 / 3.6).abs() < 1e-12, "{b:?}");
        assert!((b.every_guess - 9.0 / 3.6).abs() < 1e-12, "{b:?}");
    }
}
