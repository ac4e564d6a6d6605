//! Protocol adapters: each API ridge speaks is a small translator between its wire shapes and
//! the one generation path in [`crate::session`].
//!
//! An adapter owns its request parsing (body → [`Job`](crate::session::Job), through the shared
//! [`Validator`]), its full answer, its stream framing and its error objects; nothing about a
//! protocol leaks into the session, and nothing about the engine leaks into an adapter.
//! Requests of every protocol end as the same neutral conversation (messages → the model's chat
//! template → tokens, sampling, constraint, stop), so a fix in templating, parsing or
//! streaming reaches every client at once.
//!
//! - [`openai`]: `/v1/chat/completions` and `/v1/completions`.
//! - [`anthropic`]: `/v1/messages` and `/v1/messages/count_tokens`.
//! - [`responses`]: `/v1/responses` (and its bounded store of past responses).

pub mod anthropic;
pub mod openai;
pub mod responses;
pub mod responses_tools;

use serde_json::{Map, Value};

use ridge_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

use crate::error::ApiError;
use crate::state::ModelState;
use crate::tools::Tools;

pub use crate::session::{Adapter, Frame};

/// Everything request validation needs from the server, and nothing more: no engine, no I/O.
///
/// The handlers build one from [`ModelState`]; the fuzz targets and regression tests build one
/// from a small synthetic vocabulary, so the exact code that turns an untrusted body into a
/// [`Job`](crate::session::Job) runs without a model.
pub struct Validator<'a> {
    /// The model's tokenizer (prompts are tokenized during validation).
    pub tokenizer: &'a Tokenizer,
    /// The chat template, if the model has one.
    pub template: Option<&'a ChatTemplate>,
    /// Vocabulary size: token ids must lie below it.
    pub vocab: usize,
    /// Split thinking from answers (`--reasoning-format none` keeps it in the content).
    pub parse_reasoning: bool,
    /// The server's thinking budget in tokens (`--reasoning-budget`), when it has one.
    pub reasoning_budget: Option<usize>,
}

/// A conversation rendered for the model: its tokens and the text they came from (the
/// reasoning parser and the forced-call grammar look at how the prompt ends).
pub struct Rendered {
    /// The prompt's tokens.
    pub tokens: Vec<u32>,
    /// The prompt's text.
    pub text: String,
}

impl<'a> Validator<'a> {
    /// The validator of a running server.
    pub fn of(st: &'a ModelState) -> Self {
        Validator {
            tokenizer: &st.tokenizer,
            template: st.template.as_ref(),
            vocab: st.engine.info().vocab,
            parse_reasoning: st.parse_reasoning,
            reasoning_budget: st.reasoning_budget,
        }
    }

    /// `text` tokenized as a prompt (special tokens parsed, BOS as the model wants).
    pub(crate) fn tokenize_text(&self, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
        self.tokenizer
            .encode(text, true, true)
            .map_err(|e| ApiError::invalid(param, format!("cannot tokenize: {e}")))
    }

    /// Token ids given in a request, each checked against the vocabulary.
    pub(crate) fn token_ids(&self, items: &[Value], param: &str) -> Result<Vec<u32>, ApiError> {
        let vocab = self.vocab;
        items
            .iter()
            .map(|v| match v.as_u64() {
                Some(t) if (t as usize) < vocab => Ok(t as u32),
                _ => Err(ApiError::invalid(
                    param,
                    format!("token ids must be integers in [0, {vocab})"),
                )),
            })
            .collect()
    }

    /// The neutral conversation rendered through the model's chat template and tokenized.
    /// `extra` holds template variables beyond the messages (`enable_thinking`,
    /// `reasoning_effort`, …); the tools are added from `tools`.
    pub(crate) fn render(
        &self,
        msgs: &[ChatMessage],
        tools: Option<&Tools>,
        add_generation_prompt: bool,
        mut extra: Map<String, Value>,
    ) -> Result<Rendered, ApiError> {
        let Some(template) = self.template else {
            return Err(ApiError::bad_request(
                "this model has no chat template; use /v1/completions with a plain prompt",
            ));
        };
        if let Some(t) = tools.and_then(Tools::template_var) {
            extra.insert("tools".into(), t);
        }
        let folded = crate::tools::fold_tool_results(template, msgs);
        let msgs = folded.as_deref().unwrap_or(msgs);
        let shown = tools.and_then(|t| t.conversation(msgs));
        let msgs = shown.as_deref().unwrap_or(msgs);
        let text = match template.render_with(msgs, add_generation_prompt, &extra) {
            Ok(t) if later_system_turns_kept(msgs, &t) => t,
            first => match merge_system_turns(msgs) {
                // The template refuses or drops a system turn after the conversation began
                // (many allow one, first): its text joins the leading system message.
                Some(merged) => template.render_with(&merged, add_generation_prompt, &extra),
                None => first,
            }
            .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?,
        };
        let tokens = self
            .tokenizer
            .encode_chat_prompt(&text)
            .map_err(|e| ApiError::invalid("messages", format!("cannot tokenize: {e}")))?;
        Ok(Rendered { tokens, text })
    }

    /// How this model's output is split into reasoning and answer, for a prompt rendered as
    /// `r` (`None`: not split); `budget` is the request's thinking budget in tokens (else
    /// the server's).
    pub(crate) fn reasoning(
        &self,
        r: &Rendered,
        budget: Option<usize>,
    ) -> Option<crate::session::Reasoning> {
        let format = crate::reasoning::format_of(self.template?)?;
        // Harmony's channels are always parsed (their control tokens are no answer); with
        // `--reasoning-format none` the analysis goes to the content.
        let harmony = format == crate::reasoning::ReasoningFormat::Harmony;
        let budget = budget
            .or(self.reasoning_budget)
            .and_then(|n| self.think_budget(format, &r.text, n));
        (self.parse_reasoning || harmony || budget.is_some()).then(|| crate::session::Reasoning {
            format,
            prompt_tail: tail(&r.text, 256).to_string(),
            keep_apart: self.parse_reasoning,
            budget,
        })
    }

    /// The engine's budget for a family that thinks between tags (harmony models budget
    /// themselves through the template's `reasoning_effort`).
    fn think_budget(
        &self,
        format: crate::reasoning::ReasoningFormat,
        prompt: &str,
        max_tokens: usize,
    ) -> Option<ridge_engine::ThinkBudget> {
        use crate::reasoning::ReasoningFormat as F;
        // The opening's tokens, its text at the end of a prompt that opened the thoughts, and
        // the closing (Gemma 4's thoughts open with the channel token; `thought` follows).
        let (open, opened, close) = match format {
            F::Think => ("<think>", "<think>", "</think>"),
            F::MistralThink => ("[THINK]", "[THINK]", "[/THINK]"),
            F::GemmaChannel => (
                "<|channel>",
                crate::reasoning::GEMMA_THOUGHT_OPEN,
                crate::reasoning::GEMMA_THOUGHT_CLOSE,
            ),
            F::Harmony => return None,
        };
        let ids = |t: &str| {
            self.tokenizer
                .encode(t, false, true)
                .ok()
                .filter(|v| !v.is_empty())
        };
        Some(ridge_engine::ThinkBudget {
            max_tokens,
            open: ids(open)?,
            close: ids(close)?,
            starts_inside: prompt.trim_end().ends_with(opened),
        })
    }
}

/// Whether every system turn after the first non-system one shows in the rendered text.
fn later_system_turns_kept(msgs: &[ChatMessage], text: &str) -> bool {
    let Some(first) = msgs.iter().position(|m| m.role != "system") else {
        return true;
    };
    msgs[first..]
        .iter()
        .filter(|m| m.role == "system")
        .all(|m| text.contains(m.content.trim()))
}

/// The conversation with every system turn merged into one leading system message, in order
/// (`None` when there is nothing to merge: no system turn after the conversation began).
fn merge_system_turns(msgs: &[ChatMessage]) -> Option<Vec<ChatMessage>> {
    let first = msgs.iter().position(|m| m.role != "system")?;
    if !msgs[first..].iter().any(|m| m.role == "system") {
        return None;
    }
    let system: Vec<&str> = msgs
        .iter()
        .filter(|m| m.role == "system")
        .map(|m| m.content.as_str())
        .filter(|c| !c.is_empty())
        .collect();
    let mut out = vec![ChatMessage::new("system", system.join("\n\n"))];
    out.extend(msgs.iter().filter(|m| m.role != "system").cloned());
    Some(out)
}

/// The last `n` bytes of `s` (or a little more, to stay on a character boundary).
fn tail(s: &str, n: usize) -> &str {
    let mut at = s.len().saturating_sub(n);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[at..]
}

/// The thinking budget an effort level stands for, on models that think between tags:
/// `low` 1024 tokens, `medium` 8192, `minimal` none at all, `high` unbounded.
pub(crate) fn effort_budget(effort: Option<&str>) -> Option<usize> {
    match effort {
        Some("minimal") => Some(0),
        Some("low") => Some(1024),
        Some("medium") => Some(8192),
        _ => None,
    }
}
