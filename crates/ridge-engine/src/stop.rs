//! Stop strings matched across token boundaries and never emitted.
//!
//! Generated text arrives in pieces that need not align with a stop string: "Hel" + "lo\n" can
//! complete "lo\n" halfway through a token. The matcher keeps every emitted byte final: text that
//! could still be the start of a stop string is held back until the next piece decides it, and a
//! match cuts the output just before the stop string.

/// Incremental stop-string matcher for one output stream.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    max_len: usize,
    text: String,
    emitted: usize,
    matched: Option<usize>,
}

/// What one piece of text produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text now safe to emit.
    pub emit: String,
    /// True when a stop string matched (the stream must end; `emit` ends just before it).
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for the given stop strings (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        let stops: Vec<String> = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        let max_len = stops.iter().map(String::len).max().unwrap_or(0);
        StopMatcher {
            stops,
            max_len,
            text: String::new(),
            emitted: 0,
            matched: None,
        }
    }

    /// Adds a piece of generated text.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        if self.stops.is_empty() {
            return StopOutcome {
                emit: piece.to_string(),
                stopped: false,
            };
        }
        self.text.push_str(piece);
        // A match must end inside the new text, so it starts after emitted − max_len + 1 —
        // and nothing before `emitted` can match (it would have been found earlier).
        let from = floor_char(&self.text, self.emitted.saturating_sub(self.max_len));
        let hay = &self.text[from..];
        let first = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(k, s)| hay.find(s.as_str()).map(|i| (from + i, k)))
            .min();
        if let Some((at, k)) = first {
            self.matched = Some(k);
            let emit = self.text[self.emitted.min(at)..at].to_string();
            self.emitted = self.text.len();
            return StopOutcome {
                emit,
                stopped: true,
            };
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        let mut hold = 0;
        for s in &self.stops {
            for k in (1..s.len().min(self.text.len() + 1)).rev() {
                if k <= hold {
                    break;
                }
                if s.is_char_boundary(k) && self.text.ends_with(&s[..k]) {
                    hold = k;
                    break;
                }
            }
        }
        let end = self.text.len() - hold;
        let emit = self.text[self.emitted.min(end)..end].to_string();
        self.emitted = self.emitted.max(end);
        // Keep the buffer short: only the tail can still matter.
        if self.emitted > 4 * self.max_len + 64 {
            let cut = floor_char(&self.text, self.emitted - self.max_len);
            self.text.drain(..cut);
            self.emitted -= cut;
        }
        StopOutcome {
            emit,
            stopped: false,
        }
    }

    /// The stop string that ended the text, once one has (the earliest match; of two
    /// starting at the same byte, the one listed first).
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|k| self.stops[k].as_str())
    }

    /// Text still held back (emitted when the stream ends for another reason).
    pub fn flush(&mut self) -> String {
        let rest = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        rest
    }
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            let o = m.push(p);
            out.push_str(&o.emit);
            if o.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn matches_across_pieces_and_never_emits_the_stop() {
        assert_eq!(
            run(&["lo\nW"], &["Hel", "lo", "\n", "World"]),
            ("Hel".into(), true)
        );
        assert_eq!(
            run(&["END"], &["abcE", "N", "D tail"]),
            ("abc".into(), true)
        );
        // The earliest of several stops wins.
        assert_eq!(run(&["b", "a"], &["xxab"]), ("xx".into(), true));
    }

    #[test]
    fn false_starts_are_released() {
        assert_eq!(run(&["abc"], &["xa", "b", "d"]), ("xabd".into(), false));
        // Held text comes out at the end of the stream.
        assert_eq!(run(&["abc"], &["xa", "b"]), ("xab".into(), false));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn every_split_of_a_text_gives_the_same_result() {
        let text = "one two. three; four ünï 終わり. five";
        for stop in ["; f", "ünï", "終わ", ". five", "zzz", "e"] {
            let expect = text.find(stop).map(|i| &text[..i]).unwrap_or(text);
            let chars: Vec<(usize, char)> = text.char_indices().collect();
            for step in 1..6 {
                let mut pieces = Vec::new();
                let mut i = 0;
                while i < chars.len() {
                    let j = (i + step).min(chars.len());
                    let a = chars[i].0;
                    let b = chars.get(j).map_or(text.len(), |c| c.0);
                    pieces.push(&text[a..b]);
                    i = j;
                }
                let (out, stopped) = run(&[stop], &pieces);
                assert_eq!(out, expect, "stop {stop:?} step {step}");
                assert_eq!(stopped, text.contains(stop));
            }
        }
    }

    #[test]
    fn long_streams_keep_a_bounded_buffer() {
        let stops = vec!["STOP".to_string()];
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for _ in 0..10_000 {
            out.push_str(&m.push("word ").emit);
        }
        assert!(m.text.len() < 200);
        let o = m.push("xSTOPy");
        out.push_str(&o.emit);
        assert!(o.stopped);
        assert_eq!(out.len(), 10_000 * 5 + 1);
    }

    #[test]
    fn names_the_stop_string_that_matched() {
        let stops = vec!["END".to_string(), "\n\n".to_string(), "EN".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("a\nb").emit, "a\nb");
        assert_eq!(m.matched(), None);
        let o = m.push(" xEND");
        assert!(o.stopped);
        // "END" and "EN" both start at the same byte: the first listed wins.
        assert_eq!((o.emit.as_str(), m.matched()), (" x", Some("END")));
        let mut m = StopMatcher::new(&stops);
        let o = m.push("one\n\ntwo END");
        assert_eq!((o.emit.as_str(), m.matched()), ("one", Some("\n\n")));
    }
}
