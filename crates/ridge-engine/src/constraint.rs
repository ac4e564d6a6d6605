//! Constrained decoding: a grammar as a mask over the vocabulary at every step.
//!
//! A request may ask for output that matches a JSON Schema, any JSON object, a regular
//! expression, one of a list of strings, or a Lark grammar. ridge does not parse any of these
//! itself: llguidance (the Earley-based engine llama.cpp, vLLM and SGLang integrate) compiles
//! the grammar against ridge's own vocabulary and, at each step, says which tokens may come
//! next. The engine sets every other token's logit to −∞ before sampling and feeds the chosen
//! token back, so the sampler, penalties, speculative verification and stop handling all work
//! unchanged on the masked distribution.
//!
//! Where the cost goes: [`Grammars::new`] builds the vocabulary's token trie once per model
//! (tens of milliseconds for 150 000 tokens); [`Grammars::compile`] turns one request's grammar
//! into a [`Constraint`] (bounded by [`COMPILE_LIMITS`]); [`Constraint::prepare`] computes the
//! next mask (tens to hundreds of microseconds) and is called for every constrained sequence on
//! a helper thread while the forward pass runs, so at batch 1 the mask is ready when the logits
//! are. Unconstrained sequences never touch any of this.

use std::sync::Arc;

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use ridge_tokenizer::Tokenizer;

/// What a request's output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// A JSON document valid against this JSON Schema.
    JsonSchema(serde_json::Value),
    /// Any JSON object.
    JsonObject,
    /// Text matching this regular expression, whole.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar (llguidance's dialect: `start` rule, `%json {…}` for embedded schemas).
    Lark(String),
}

/// Limits on compiling one grammar, documented in the README: a schema or grammar beyond
/// them is refused (400) rather than allowed to stall the server. They bound work, not time,
/// so the outcome does not depend on the machine's load.
pub const COMPILE_LIMITS: ParserLimits = ParserLimits {
    max_items_in_row: 2000,
    initial_lexer_fuel: 1_000_000,
    step_lexer_fuel: 200_000,
    step_max_items: 50_000,
    max_lexer_states: 250_000,
    max_grammar_size: 500_000,
    precompute_large_lexemes: true,
    verbose_errors: false,
};

/// A grammar or vocabulary that cannot be used, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GrammarError(pub String);

/// ridge's vocabulary as llguidance sees it: each token's bytes in a trie, control tokens
/// marked (llguidance's `0xFF` prefix) so that grammar text never matches them.
struct Vocab {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => self
                .tokenizer
                .encode(text, false, false)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// Compiles grammars for one model's vocabulary (build once, share).
pub struct Grammars {
    factory: ParserFactory,
    eog: Arc<[u32]>,
}

impl Grammars {
    /// Builds the token trie and the grammar factory for `tokenizer`'s vocabulary.
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<Self, GrammarError> {
        let n = tokenizer.vocab_size();
        let eog: Arc<[u32]> = tokenizer.eog_ids().into();
        let eos = tokenizer
            .eos_id()
            .or_else(|| tokenizer.eot_id())
            .or_else(|| eog.first().copied())
            .ok_or_else(|| GrammarError("the vocabulary has no end-of-generation token".into()))?;
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                if tokenizer.is_control(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tokenizer.token_str(id).unwrap_or("").as_bytes());
                    w
                } else {
                    tokenizer.token_to_piece(id, false).to_vec()
                }
            })
            .collect();
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = tokenizer.bos_id();
        info.tok_end_of_turn = tokenizer.eot_id();
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Vocab { trie, tokenizer });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = COMPILE_LIMITS;
        Ok(Grammars { factory, eog })
    }

    /// Compiles `spec` into a fresh constraint; an unusable schema or grammar is an error
    /// naming the problem.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint, GrammarError> {
        let grammar = match spec {
            GrammarSpec::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(bounded_whitespace(schema.clone()))
            }
            GrammarSpec::JsonObject => TopLevelGrammar::from_json_schema(bounded_whitespace(
                serde_json::json!({"type": "object"}),
            )),
            GrammarSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            GrammarSpec::Choice(options) => {
                if options.is_empty() {
                    return Err(GrammarError("the list of choices is empty".into()));
                }
                let alternatives: Vec<String> = options.iter().map(|o| lark_string(o)).collect();
                TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
            }
            GrammarSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        };
        let parser = llguidance::panic_utils::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.factory.create_parser(grammar)
        }));
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError(e));
        }
        Ok(Constraint {
            matcher,
            mask: None,
            eog: self.eog.clone(),
            waiting_for: None,
        })
    }
}

/// Whitespace allowed between JSON tokens: any layout a pretty-printer writes, but bounded, so
/// that a model that drifts into emitting blank space cannot do so until `max_tokens` (the
/// default is unbounded). A schema's own `x-guidance` settings take precedence.
const JSON_WHITESPACE: &str = r"[ \t\n\r]{1,64}";

fn bounded_whitespace(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({"whitespace_flexible": false, "whitespace_pattern": JSON_WHITESPACE})
        });
    }
    schema
}

/// A Lark string literal for `s`.
fn lark_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// One sequence's grammar state: where in the grammar its output stands, and the mask for
/// its next token once computed.
pub struct Constraint {
    matcher: Matcher,
    mask: Option<SimpleVob>,
    eog: Arc<[u32]>,
    /// A lazy grammar's trigger, until the output writes it: till then nothing is masked.
    waiting_for: Option<Trigger>,
}

/// What a lazy grammar waits for: its trigger token, or the same text spelled by ordinary
/// tokens (a small model that has seen `<tool_call>` written out in a prompt may write it out
/// too, and a call that opens so must not escape the grammar).
#[derive(Clone, Debug)]
struct Trigger {
    /// The trigger token (`u32::MAX` once a spelled trigger could not be followed: the output
    /// then stays free).
    token: u32,
    /// Its text (empty when it has none, or after giving up).
    text: Vec<u8>,
    /// The output's last bytes, fewer than `text.len()` kept between tokens.
    tail: Vec<u8>,
}

impl Clone for Constraint {
    /// An independent copy (for the `n` choices of one request).
    fn clone(&self) -> Self {
        Constraint {
            matcher: self.matcher.deep_clone(),
            mask: self.mask.clone(),
            eog: self.eog.clone(),
            waiting_for: self.waiting_for.clone(),
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .field("mask_ready", &self.mask.is_some())
            .field("waiting_for", &self.waiting_for)
            .finish()
    }
}

impl Constraint {
    /// This grammar as a lazy one (llama.cpp's and vLLM's for `tool_choice: "auto"`): the
    /// output is free until it writes the token `trigger`, and from there on — the trigger
    /// included — must match the grammar, which therefore has to begin with it: `None` when
    /// it does not (or when the output already began).
    pub fn after_trigger(mut self, trigger: u32) -> Option<Constraint> {
        if self.waiting_for.is_some() || self.eog.contains(&trigger) {
            return None;
        }
        self.matcher.consume_token(trigger).ok()?;
        if self.matcher.is_error() {
            return None;
        }
        let text = match self.matcher.tok_env() {
            Ok(env) => {
                let bytes = env.tok_trie().token(trigger);
                bytes
                    .strip_prefix(&[TokTrie::SPECIAL_TOKEN_MARKER])
                    .unwrap_or(bytes)
                    .to_vec()
            }
            Err(_) => Vec::new(),
        };
        self.mask = None;
        self.waiting_for = Some(Trigger {
            token: trigger,
            text,
            tail: Vec::new(),
        });
        Some(self)
    }

    /// False while a lazy grammar waits for its trigger (nothing is masked yet).
    pub fn is_active(&self) -> bool {
        self.waiting_for.is_none()
    }

    /// While waiting: whether `token` opens the grammar — the trigger token itself, or the
    /// last piece of the trigger's text spelled by ordinary tokens, in which case the bytes the
    /// piece carries past the text are fed to the grammar (re-tokenized); a grammar that
    /// refuses them is given up, leaving the output free.
    fn opens(&mut self, token: u32) -> bool {
        let Some(w) = self.waiting_for.as_mut() else {
            return false;
        };
        if token == w.token {
            return true;
        }
        if w.text.is_empty() {
            return false;
        }
        let Ok(env) = self.matcher.tok_env() else {
            return false;
        };
        let piece = env.tok_trie().token(token);
        if piece.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
            w.tail.clear();
            return false;
        }
        let before = w.tail.len();
        w.tail.extend_from_slice(piece);
        // The first place the text ends inside this piece.
        let found = (0..w.tail.len().saturating_sub(w.text.len() - 1))
            .find(|&i| i + w.text.len() > before && w.tail[i..].starts_with(&w.text));
        let Some(at) = found else {
            let keep = w.tail.len().min(w.text.len() - 1);
            w.tail.drain(..w.tail.len() - keep);
            return false;
        };
        let rest = w.tail[at + w.text.len()..].to_vec();
        if !rest.is_empty() {
            let tokens = env.tokenize_bytes(&rest);
            let fed = self.matcher.try_consume_tokens(&tokens).unwrap_or(0);
            if fed < tokens.len() || self.matcher.is_error() {
                *w = Trigger {
                    token: u32::MAX,
                    text: Vec::new(),
                    tail: Vec::new(),
                };
                return false;
            }
        }
        true
    }

    /// Computes the mask for the next token, if not done yet (the expensive part; the engine
    /// calls it while the forward pass runs).
    pub fn prepare(&mut self) -> Result<(), GrammarError> {
        if self.mask.is_none() && self.is_active() {
            let mut m = self
                .matcher
                .compute_mask_or_eos()
                .map_err(|e| GrammarError(e.to_string()))?;
            // The grammar allows ending where it allows EOS: every end-of-generation token.
            if self.eog.iter().any(|&t| m.is_allowed(t)) {
                for &t in self.eog.iter() {
                    m.allow_token(t);
                }
            }
            self.mask = Some(m);
        }
        Ok(())
    }

    /// Sets the logits of every token the grammar forbids next to −∞.
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        if !self.is_active() {
            return Ok(());
        }
        self.prepare()?;
        if let Some(m) = &self.mask {
            for (i, l) in logits.iter_mut().enumerate() {
                if !m.is_allowed(i as TokenId) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    /// Advances past `token` (end-of-generation tokens end the output and are not fed).
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        self.mask = None;
        if self.waiting_for.is_some() {
            // The matcher consumed the trigger in `after_trigger`.
            if self.opens(token) {
                self.waiting_for = None;
            }
            return Ok(());
        }
        if self.eog.contains(&token) {
            return Ok(());
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError(e.to_string()))
    }

    /// True when the grammar admits no further token: the output is complete.
    pub fn is_complete(&self) -> bool {
        self.is_active() && self.matcher.is_stopped()
    }

    /// True when the grammar would accept the output as it stands (a lazy grammar accepts
    /// anything before its trigger).
    pub fn is_accepting(&mut self) -> bool {
        !self.is_active() || self.matcher.is_accepting().unwrap_or(false)
    }
}

/// Samples the next token from one row of `logits` (or verifies `draft` against it) through
/// `constraint` when there is one: the row is copied into `scratch`, masked, sampled, and the
/// chosen token is fed to the grammar. Without a constraint this is the sampler alone.
pub(crate) fn sample_constrained(
    sampler: &mut crate::Sampler,
    history: Option<&crate::TokenHistory>,
    constraint: Option<&mut Constraint>,
    scratch: &mut Vec<f32>,
    logits: &[f32],
    draft: Option<u32>,
) -> Result<u32, GrammarError> {
    let pick = |sampler: &mut crate::Sampler, l: &[f32]| match draft {
        Some(d) => sampler.verify_draft(l, history, d),
        None => sampler.sample_with(l, history),
    };
    let Some(c) = constraint else {
        return Ok(pick(sampler, logits));
    };
    if !c.is_active() {
        let tok = pick(sampler, logits);
        c.commit(tok)?;
        return Ok(tok);
    }
    scratch.clear();
    scratch.extend_from_slice(logits);
    c.apply(scratch)?;
    if scratch.iter().all(|l| *l == f32::NEG_INFINITY) {
        return Err(GrammarError(
            "the grammar allows no token of this model's vocabulary here".into(),
        ));
    }
    let tok = pick(sampler, scratch);
    c.commit(tok)?;
    Ok(tok)
}
