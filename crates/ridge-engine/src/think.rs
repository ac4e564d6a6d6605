//! A thinking budget: a cap on how many tokens a reasoning model may spend inside its
//! thoughts (`<think>…</think>` and the like) before it must answer.
//!
//! The engine counts a choice's tokens while it is inside its thoughts; once the budget is
//! spent it stops sampling and writes the closing tag's tokens itself, one per step, so the
//! model goes on to its answer (llama.cpp's `--reasoning-budget` does the same). Counting and
//! forcing happen where tokens are chosen, so a budget works alike in plain decoding, batched
//! decoding and speculative verification (a forced token is what a draft is checked against).
//! Under a grammar the budget is not forced: a forced token could leave the grammar's
//! language, and the grammar already decides where the thoughts end.

/// A request's thinking budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkBudget {
    /// Most tokens of thought (0: the closing tag comes at once).
    pub max_tokens: usize,
    /// The opening tag's tokens (the choice enters its thoughts when it writes them).
    pub open: Vec<u32>,
    /// The closing tag's tokens (written by the engine when the budget is spent).
    pub close: Vec<u32>,
    /// The prompt already opened the thoughts (DeepSeek-R1's template, Qwen3 thinking).
    pub starts_inside: bool,
}

/// Where one choice stands against its budget.
#[derive(Clone, Debug)]
pub(crate) struct ThinkState {
    budget: ThinkBudget,
    inside: bool,
    done: bool,
    used: usize,
    /// Closing-tag tokens already forced.
    forced: usize,
    recent: Vec<u32>,
}

impl ThinkState {
    pub(crate) fn new(budget: ThinkBudget) -> Self {
        ThinkState {
            inside: budget.starts_inside,
            budget,
            done: false,
            used: 0,
            forced: 0,
            recent: Vec::new(),
        }
    }

    /// The token to write instead of sampling, when the budget is spent.
    pub(crate) fn forced(&self) -> Option<u32> {
        let spent = self.forced > 0 || self.used >= self.budget.max_tokens;
        if self.inside && !self.done && spent {
            self.budget.close.get(self.forced).copied()
        } else {
            None
        }
    }

    /// Records the token the choice wrote.
    pub(crate) fn observe(&mut self, tok: u32, was_forced: bool) {
        if self.done {
            return;
        }
        let keep = self.budget.open.len().max(self.budget.close.len()).max(1);
        self.recent.push(tok);
        if self.recent.len() > keep {
            self.recent.remove(0);
        }
        if self.inside {
            if was_forced {
                self.forced += 1;
            } else {
                self.used += 1;
            }
            if self.forced >= self.budget.close.len() && self.forced > 0
                || (!self.budget.close.is_empty() && self.recent.ends_with(&self.budget.close))
            {
                self.inside = false;
                self.done = true;
            }
        } else if !self.budget.open.is_empty() && self.recent.ends_with(&self.budget.open) {
            self.inside = true;
            self.recent.clear();
        }
    }

    /// Tokens of thought so far.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(max: usize, inside: bool) -> ThinkBudget {
        ThinkBudget {
            max_tokens: max,
            open: vec![1, 2],
            close: vec![3, 4],
            starts_inside: inside,
        }
    }

    /// Runs a model that would write `model` (token by token) under the budget; returns what
    /// was written.
    fn run(mut st: ThinkState, model: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut it = model.iter();
        while out.len() < 40 {
            let (tok, forced) = match st.forced() {
                Some(t) => (t, true),
                None => match it.next() {
                    Some(&t) => (t, false),
                    None => break,
                },
            };
            st.observe(tok, forced);
            out.push(tok);
        }
        out
    }

    #[test]
    fn the_closing_tag_is_forced_once_the_budget_is_spent() {
        // Opens its thoughts itself, would think for ten tokens.
        let model = [1, 2, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 3, 4, 7, 7];
        let out = run(ThinkState::new(budget(3, false)), &model);
        assert_eq!(out[..7], [1, 2, 9, 9, 9, 3, 4]);
        // After the forced close the model's own tokens follow, unforced.
        assert!(out[7..]
            .iter()
            .all(|&t| t == 9 || t == 3 || t == 4 || t == 7));
        // Within budget nothing changes.
        assert_eq!(run(ThinkState::new(budget(20, false)), &model), model);
        // Started inside by the prompt: counted from the first token.
        let out = run(ThinkState::new(budget(2, true)), &[9, 9, 9, 9, 3, 4, 7]);
        assert_eq!(out[..4], [9, 9, 3, 4]);
        // Budget 0: the close comes at once.
        let out = run(ThinkState::new(budget(0, true)), &[9, 9, 3, 4, 7]);
        assert_eq!(out[..2], [3, 4]);
    }

    #[test]
    fn a_model_that_never_thinks_is_left_alone_and_closing_ends_the_count() {
        let model = [5, 6, 7, 8, 9, 9, 9, 9, 9];
        assert_eq!(run(ThinkState::new(budget(1, false)), &model), model);
        let mut st = ThinkState::new(budget(5, true));
        for t in [9, 9, 3, 4] {
            st.observe(t, false);
        }
        assert_eq!(st.used(), 4);
        for _ in 0..10 {
            assert_eq!(st.forced(), None);
            st.observe(9, false);
        }
    }
}
