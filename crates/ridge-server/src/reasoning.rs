//! Reasoning models: the model's thinking apart from its answer.
//!
//! Reasoning models write their thoughts before the answer, in a syntax their chat template
//! knows; OpenAI-compatible servers return the thoughts as `reasoning_content` (vLLM, llama.cpp)
//! and only the answer as `content`. Which syntax a model uses is read off its chat template
//! ([`format_of`]), as the tool-call format is (`crate::tools`):
//!
//! - [`ReasoningFormat::Think`]: `<think>…</think>`, then the answer (Qwen3, QwQ, DeepSeek-R1
//!   and its distills, DeepSeek-V3.1). Templates of thinking models often open the `<think>`
//!   in the generation prompt (DeepSeek-R1's `<｜Assistant｜><think>\n`), so the output starts
//!   inside the thoughts; Qwen3's with `enable_thinking=false` writes an empty, closed
//!   `<think>\n\n</think>` instead, and the output is all answer. Both are read off the
//!   rendered prompt ([`ReasoningParser::new`]).
//! - [`ReasoningFormat::MistralThink`]: the same with `[THINK]…[/THINK]` (Magistral,
//!   Ministral-3 Reasoning).
//! - [`ReasoningFormat::GemmaChannel`]: Gemma 4 thinks in `<|channel>thought\n…<channel|>`
//!   (with `enable_thinking`; without it the generation prompt closes an empty one). The
//!   thoughts may come again later in the output (between tool calls), each block is
//!   reasoning; a `<|channel>` that opens no thoughts and a stray `<channel|>` are dropped, as
//!   llama.cpp drops them.
//! - [`ReasoningFormat::Harmony`]: gpt-oss writes messages on channels,
//!   `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…`;
//!   `analysis` is reasoning, `final` (and `commentary` addressed to no one, a preamble) is the
//!   answer. A message addressed to a function (`to=functions.NAME`, in the header before or
//!   after `<|channel|>`) is a tool call: it is passed on as content in one canonical form,
//!   the form gpt-oss's template renders a past call in,
//!   `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`,
//!   which the harmony tool-call parser (`crate::tools`, format `harmony`) reads; so for
//!   gpt-oss this parser runs first and the tool-call parser on its content. No other control
//!   token reaches the content. The parser needs the output with control tokens rendered as
//!   text: harmony's structure is only in them.
//!
//! Text arrives in arbitrary pieces, so a tag may be split across pieces: the parser holds
//! back only a suffix that could still be the start of a tag, and releases everything else at
//! once, so thoughts and answer stream as they are written.

use ridge_tokenizer::ChatTemplate;

/// The opening of a gpt-oss call as the reasoning parser passes it on (`crate::reasoning`),
/// the form gpt-oss's template renders a past call in:
/// `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`.
pub const HARMONY_CALL_START: &str = "<|start|>assistant to=functions.";

/// Length of the longest suffix of `s` that is a proper prefix of one of `tags` (on a char
/// boundary): text that may still become a tag.
pub(crate) fn partial_suffix(s: &str, tags: &[&str]) -> usize {
    tags.iter()
        .map(|tag| {
            (1..tag.len().min(s.len() + 1))
                .rev()
                .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// A family's reasoning syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// `<think>…</think>` before the answer.
    Think,
    /// `[THINK]…[/THINK]` before the answer (Mistral's reasoning models).
    MistralThink,
    /// gpt-oss's harmony channels (`analysis` is reasoning, `final` the answer).
    Harmony,
    /// Gemma 4's `<|channel>thought\n…<channel|>`, anywhere in the output.
    GemmaChannel,
}

/// What opens Gemma 4's thoughts (the whitespace after it is layout).
pub const GEMMA_THOUGHT_OPEN: &str = "<|channel>thought";
/// What closes them.
pub const GEMMA_THOUGHT_CLOSE: &str = "<channel|>";
/// The channel token alone (a channel that is not `thought` is dropped).
const GEMMA_CHANNEL: &str = "<|channel>";

/// The reasoning syntax of a chat template, if it has one ridge knows.
pub fn format_of(template: &ChatTemplate) -> Option<ReasoningFormat> {
    format_of_source(template.source())
}

/// [`format_of`] on a template's source text.
fn format_of_source(src: &str) -> Option<ReasoningFormat> {
    if src.contains("<|channel|>") && src.contains("analysis") {
        Some(ReasoningFormat::Harmony)
    } else if src.contains(GEMMA_THOUGHT_OPEN) && src.contains(GEMMA_THOUGHT_CLOSE) {
        Some(ReasoningFormat::GemmaChannel)
    } else if src.contains("[THINK]") {
        Some(ReasoningFormat::MistralThink)
    } else if src.contains("<think>") || src.contains("</think>") {
        Some(ReasoningFormat::Think)
    } else {
        None
    }
}

/// Whether `prompt` (a rendered prompt) ends inside an opened `<think>`, so that the output
/// starts in the model's thoughts.
pub fn opens_thoughts(prompt: &str) -> bool {
    prompt.trim_end().ends_with("<think>")
}

/// A piece of a choice's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// The model's thinking (`reasoning_content`).
    Reasoning(String),
    /// The answer (`content`; for harmony, tool calls in canonical form too).
    Content(String),
}

/// Splits a choice's streamed text into reasoning and content.
#[derive(Debug)]
pub struct ReasoningParser {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Tags(TagParser),
    Harmony(HarmonyParser),
    Gemma(GemmaParser),
}

impl ReasoningParser {
    /// A parser for output in `format` that follows `prompt` (the rendered prompt text: where
    /// it leaves an open `<think>`, the output starts in reasoning).
    pub fn new(format: ReasoningFormat, prompt: &str) -> Self {
        let inner = match format {
            ReasoningFormat::Think => Inner::Tags(TagParser::new("<think>", "</think>", prompt)),
            ReasoningFormat::MistralThink => {
                Inner::Tags(TagParser::new("[THINK]", "[/THINK]", prompt))
            }
            ReasoningFormat::Harmony => Inner::Harmony(HarmonyParser::default()),
            ReasoningFormat::GemmaChannel => Inner::Gemma(GemmaParser::new(prompt)),
        };
        ReasoningParser { inner }
    }

    /// Feeds `text`; returns what became final.
    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        let mut out = Out::default();
        match &mut self.inner {
            Inner::Tags(p) => p.push(text, &mut out),
            Inner::Harmony(p) => p.push(text, &mut out),
            Inner::Gemma(p) => p.push(text, &mut out),
        }
        out.0
    }

    /// The end of the output: whatever is held back is released.
    pub fn finish(&mut self) -> Vec<Segment> {
        let mut out = Out::default();
        match &mut self.inner {
            Inner::Tags(p) => p.finish(&mut out),
            Inner::Harmony(p) => p.finish(&mut out),
            Inner::Gemma(p) => p.finish(&mut out),
        }
        out.0
    }
}

/// Segments being collected: empty text dropped, neighbours of one kind merged.
#[derive(Default)]
struct Out(Vec<Segment>);

impl Out {
    fn reasoning(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(Segment::Reasoning(r)) => r.push_str(s),
            _ => self.0.push(Segment::Reasoning(s.to_string())),
        }
    }

    fn content(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(Segment::Content(c)) => c.push_str(s),
            _ => self.0.push(Segment::Content(s.to_string())),
        }
    }
}

/// Where a tag-delimited output stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagState {
    /// Nothing but whitespace yet: the opening tag may still come (where the prompt opened
    /// the thoughts, some models write it again).
    Start,
    /// Inside the thoughts.
    Reasoning,
    /// Just past the closing tag: newlines there are layout, dropped.
    AfterClose,
    /// The answer.
    Content,
}

/// `open…close` reasoning before the answer.
#[derive(Debug)]
struct TagParser {
    open: &'static str,
    close: &'static str,
    /// The prompt opened the thoughts: output that does not open them starts in them.
    opened: bool,
    state: TagState,
    buf: String,
}

impl TagParser {
    fn new(open: &'static str, close: &'static str, prompt: &str) -> Self {
        TagParser {
            open,
            close,
            opened: prompt.trim_end().ends_with(open),
            state: TagState::Start,
            buf: String::new(),
        }
    }

    fn push(&mut self, text: &str, out: &mut Out) {
        self.buf.push_str(text);
        while self.step(out) {}
    }

    /// One transition; false when the parser needs more text.
    fn step(&mut self, out: &mut Out) -> bool {
        match self.state {
            TagState::Start => {
                let t = self.buf.trim_start();
                if let Some(rest) = t.strip_prefix(self.open) {
                    self.buf = rest.to_string();
                    self.state = TagState::Reasoning;
                    true
                } else if self.open.starts_with(t) {
                    false
                } else {
                    self.state = if self.opened {
                        TagState::Reasoning
                    } else {
                        TagState::Content
                    };
                    true
                }
            }
            TagState::Reasoning => {
                if let Some(i) = self.buf.find(self.close) {
                    out.reasoning(&self.buf[..i]);
                    self.buf.drain(..i + self.close.len());
                    self.state = TagState::AfterClose;
                    return true;
                }
                let cut = self.buf.len() - partial_suffix(&self.buf, &[self.close]);
                out.reasoning(&self.buf[..cut]);
                self.buf.drain(..cut);
                false
            }
            TagState::AfterClose => {
                let newlines = self.buf.len() - self.buf.trim_start_matches(['\n', '\r']).len();
                self.buf.drain(..newlines);
                if self.buf.is_empty() {
                    return false;
                }
                self.state = TagState::Content;
                true
            }
            TagState::Content => {
                out.content(&self.buf);
                self.buf.clear();
                false
            }
        }
    }

    fn finish(&mut self, out: &mut Out) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            TagState::Start if self.opened => out.reasoning(&rest),
            TagState::Start | TagState::Content => out.content(&rest),
            TagState::Reasoning => out.reasoning(&rest),
            TagState::AfterClose => {}
        }
    }
}

/// Gemma 4's thought blocks, anywhere in the output.
#[derive(Debug)]
struct GemmaParser {
    /// In a thought block.
    thinking: bool,
    /// Just past the opening: whitespace is layout, dropped.
    fresh: bool,
    buf: String,
}

impl GemmaParser {
    fn new(prompt: &str) -> Self {
        // A prompt that ends in an opened thought (a continued turn) starts the output in it.
        let opened = prompt.trim_end().ends_with(GEMMA_THOUGHT_OPEN);
        GemmaParser {
            thinking: opened,
            fresh: opened,
            buf: String::new(),
        }
    }

    fn push(&mut self, text: &str, out: &mut Out) {
        self.buf.push_str(text);
        while self.step(out, false) {}
    }

    /// One transition; false when the parser needs more text (at the end, never waits).
    fn step(&mut self, out: &mut Out, end: bool) -> bool {
        if self.thinking {
            if self.fresh {
                let ws = self.buf.len() - self.buf.trim_start().len();
                self.buf.drain(..ws);
                if self.buf.is_empty() {
                    return false;
                }
                self.fresh = false;
            }
            if let Some(i) = self.buf.find(GEMMA_THOUGHT_CLOSE) {
                out.reasoning(&self.buf[..i]);
                self.buf.drain(..i + GEMMA_THOUGHT_CLOSE.len());
                self.thinking = false;
                return true;
            }
            let keep = if end {
                0
            } else {
                partial_suffix(&self.buf, &[GEMMA_THOUGHT_CLOSE])
            };
            let cut = self.buf.len() - keep;
            out.reasoning(&self.buf[..cut]);
            self.buf.drain(..cut);
            return false;
        }
        let next = [GEMMA_CHANNEL, GEMMA_THOUGHT_CLOSE]
            .iter()
            .filter_map(|t| self.buf.find(t).map(|i| (i, *t)))
            .min_by_key(|&(i, _)| i);
        let Some((i, tag)) = next else {
            let keep = if end {
                0
            } else {
                partial_suffix(&self.buf, &[GEMMA_CHANNEL, GEMMA_THOUGHT_CLOSE])
            };
            let cut = self.buf.len() - keep;
            out.content(&self.buf[..cut]);
            self.buf.drain(..cut);
            return false;
        };
        out.content(&self.buf[..i]);
        self.buf.drain(..i);
        if tag == GEMMA_THOUGHT_CLOSE {
            // A stray close: no answer.
            self.buf.drain(..tag.len());
            return true;
        }
        if self.buf.starts_with(GEMMA_THOUGHT_OPEN) {
            self.buf.drain(..GEMMA_THOUGHT_OPEN.len());
            self.thinking = true;
            self.fresh = true;
            return true;
        }
        if GEMMA_THOUGHT_OPEN.starts_with(self.buf.as_str()) && !end {
            // `<|channel>` and part of `thought`: wait.
            return false;
        }
        // A channel that is not `thought` (or an unfinished one at the end): no answer.
        self.buf.drain(..GEMMA_CHANNEL.len());
        true
    }

    fn finish(&mut self, out: &mut Out) {
        while self.step(out, true) {}
        let rest = std::mem::take(&mut self.buf);
        if self.thinking {
            out.reasoning(&rest);
        } else {
            out.content(&rest);
        }
    }
}

/// Where a harmony output stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Harmony {
    /// Reading a message header (up to `<|message|>`); never content.
    Header,
    /// In a message's body.
    Body(Channel),
    /// The output does not look like harmony: everything is content.
    Plain,
}

/// Where a message's body goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Channel {
    Reasoning,
    Content,
    /// A call of the named function: held until the body ends, then passed on whole.
    Call(String),
}

const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const START: &str = "<|start|>";
/// What ends a message body: the three end tokens, and a new header where the model skipped
/// the end (`<|start|>` is consumed, `<|channel|>` stays to begin the next header).
const BODY_ENDS: &[&str] = &["<|end|>", "<|return|>", "<|call|>", START, CHANNEL];
/// Longest header ridge waits for: a longer run without `<|message|>` is not harmony.
const MAX_HEADER: usize = 512;

/// gpt-oss's channels.
#[derive(Debug)]
struct HarmonyParser {
    state: Harmony,
    buf: String,
}

impl Default for HarmonyParser {
    fn default() -> Self {
        // The generation prompt ends with `<|start|>assistant`: the output begins in a header.
        HarmonyParser {
            state: Harmony::Header,
            buf: String::new(),
        }
    }
}

impl HarmonyParser {
    fn push(&mut self, text: &str, out: &mut Out) {
        self.buf.push_str(text);
        while self.step(out) {}
    }

    /// One transition; false when the parser needs more text.
    fn step(&mut self, out: &mut Out) -> bool {
        match self.state.clone() {
            Harmony::Header => {
                if let Some(i) = self.buf.find(MESSAGE) {
                    self.state = Harmony::Body(classify(&self.buf[..i]));
                    self.buf.drain(..i + MESSAGE.len());
                    true
                } else if self.buf.len() > MAX_HEADER {
                    self.state = Harmony::Plain;
                    true
                } else {
                    false
                }
            }
            Harmony::Body(channel) => self.body(channel, out),
            Harmony::Plain => {
                out.content(&self.buf);
                self.buf.clear();
                false
            }
        }
    }

    /// Releases a body's text up to its end, if it has come.
    fn body(&mut self, channel: Channel, out: &mut Out) -> bool {
        let end = BODY_ENDS
            .iter()
            .filter_map(|t| self.buf.find(t).map(|i| (i, *t)))
            .min_by_key(|&(i, _)| i);
        let Some((i, tag)) = end else {
            if !matches!(channel, Channel::Call(_)) {
                let cut = self.buf.len() - partial_suffix(&self.buf, BODY_ENDS);
                emit(&channel, &self.buf[..cut], out);
                self.buf.drain(..cut);
            }
            return false;
        };
        emit(&channel, &self.buf[..i], out);
        let consumed = if tag == CHANNEL { i } else { i + tag.len() };
        self.buf.drain(..consumed);
        self.state = Harmony::Header;
        true
    }

    fn finish(&mut self, out: &mut Out) {
        let rest = std::mem::take(&mut self.buf);
        match &self.state {
            // An unfinished header that holds no control token is plain text.
            Harmony::Header if !rest.contains("<|") => out.content(&rest),
            Harmony::Header => {}
            // A call's `<|call|>` ends the generation, so it may be missing.
            Harmony::Body(channel) => emit(channel, &rest, out),
            Harmony::Plain => out.content(&rest),
        }
        self.state = Harmony::Header;
    }
}

/// A body's text where its channel sends it (a call whole, in canonical form).
fn emit(channel: &Channel, text: &str, out: &mut Out) {
    match channel {
        Channel::Reasoning => out.reasoning(text),
        Channel::Content => out.content(text),
        Channel::Call(name) => out.content(&format!(
            "{HARMONY_CALL_START}{name}{CHANNEL}commentary json{MESSAGE}{text}<|call|>"
        )),
    }
}

/// Where a message with this header goes: its recipient (`to=…`) and channel decide.
fn classify(header: &str) -> Channel {
    let word = |s: &str| {
        s.split(|c: char| c.is_whitespace() || c == '<')
            .next()
            .unwrap_or("")
            .to_string()
    };
    let recipient = header.find("to=").map(|i| word(&header[i + 3..]));
    let channel = header
        .rfind(CHANNEL)
        .map(|i| word(&header[i + CHANNEL.len()..]));
    match (recipient, channel.as_deref()) {
        (Some(r), _) => match r.strip_prefix("functions.") {
            Some(name) if !name.is_empty() => Channel::Call(name.to_string()),
            // A built-in tool (browser, python): the model's own business, not the answer.
            _ => Channel::Reasoning,
        },
        (None, Some("analysis")) => Channel::Reasoning,
        (None, _) => Channel::Content,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` through a fresh parser one piece, one char at a time and in two halves at every
    /// split point; all must agree (after merging neighbours), and the one-piece result is
    /// returned.
    fn parse(format: ReasoningFormat, prompt: &str, text: &str) -> Vec<Segment> {
        let run = |pieces: &[&str]| {
            let mut p = ReasoningParser::new(format, prompt);
            let mut out = Out::default();
            for piece in pieces {
                for s in p.push(piece) {
                    add(&mut out, s);
                }
            }
            for s in p.finish() {
                add(&mut out, s);
            }
            out.0
        };
        let whole = run(&[text]);
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&refs), whole, "one char at a time: {text:?}");
        for (i, _) in text.char_indices().skip(1) {
            let (a, b) = text.split_at(i);
            assert_eq!(run(&[a, b]), whole, "split at {i}: {text:?}");
        }
        whole
    }

    fn add(out: &mut Out, s: Segment) {
        match s {
            Segment::Reasoning(r) => out.reasoning(&r),
            Segment::Content(c) => out.content(&c),
        }
    }

    fn r(s: &str) -> Segment {
        Segment::Reasoning(s.into())
    }

    fn c(s: &str) -> Segment {
        Segment::Content(s.into())
    }

    const QWEN3_PROMPT: &str = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";

    #[test]
    fn think_tags_split_thoughts_from_the_answer() {
        let out = parse(
            ReasoningFormat::Think,
            QWEN3_PROMPT,
            "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?",
        );
        assert_eq!(
            out,
            vec![r("\nThe user greets me.\n"), c("Hello! How can I help?")]
        );
        // Leading whitespace before the tag is allowed.
        let out = parse(ReasoningFormat::Think, QWEN3_PROMPT, "\n<think>a</think>b");
        assert_eq!(out, vec![r("a"), c("b")]);
    }

    #[test]
    fn a_prompt_that_opens_the_thoughts_starts_the_output_in_them() {
        // DeepSeek-R1's generation prompt.
        let prompt = "<｜User｜>What is 2+2?<｜Assistant｜><think>\n";
        let out = parse(
            ReasoningFormat::Think,
            prompt,
            "Two and two make four.\n</think>\n\n2 + 2 = 4.",
        );
        assert_eq!(out, vec![r("Two and two make four.\n"), c("2 + 2 = 4.")]);
        // The tag written again is not part of the thoughts.
        let out = parse(ReasoningFormat::Think, prompt, "<think>\nFour.</think>4");
        assert_eq!(out, vec![r("\nFour."), c("4")]);
        // Unclosed at the end: all reasoning (the model ran out of tokens while thinking).
        let out = parse(ReasoningFormat::Think, prompt, "Hmm, let me think </thi");
        assert_eq!(out, vec![r("Hmm, let me think </thi")]);
    }

    #[test]
    fn a_closed_empty_think_in_the_prompt_means_all_answer() {
        // Qwen3 with enable_thinking=false.
        let prompt = format!("{QWEN3_PROMPT}<think>\n\n</think>\n\n");
        let out = parse(
            ReasoningFormat::Think,
            &prompt,
            "Hello there. <think> is a tag.",
        );
        assert_eq!(out, vec![c("Hello there. <think> is a tag.")]);
    }

    #[test]
    fn output_without_thoughts_is_all_answer() {
        for text in ["Hello", " <thin", "<thunk>x</think>", "", "  \n"] {
            let out = parse(ReasoningFormat::Think, QWEN3_PROMPT, text);
            let want = if text.is_empty() {
                vec![]
            } else {
                vec![c(text)]
            };
            assert_eq!(out, want, "{text:?}");
        }
    }

    #[test]
    fn mistral_think_tags() {
        let out = parse(
            ReasoningFormat::MistralThink,
            "[INST]Hi[/INST]",
            "[THINK]Greeting.[/THINK]Hello!",
        );
        assert_eq!(out, vec![r("Greeting."), c("Hello!")]);
    }

    #[test]
    fn harmony_channels() {
        let text = "<|channel|>analysis<|message|>User says hi. Respond.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>";
        let out = parse(ReasoningFormat::Harmony, "<|start|>assistant", text);
        assert_eq!(
            out,
            vec![r("User says hi. Respond."), c("Hello! How can I help?")]
        );
        // Without `<|return|>` (an end-of-generation token the decoder may not render).
        let out = parse(
            ReasoningFormat::Harmony,
            "",
            "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>y",
        );
        assert_eq!(out, vec![r("x"), c("y")]);
    }

    #[test]
    fn harmony_calls_pass_on_in_canonical_form() {
        let want_call = format!(
            "{HARMONY_CALL_START}get_weather<|channel|>commentary json<|message|>{{\"city\":\"Paris\"}}<|call|>"
        );
        // Recipient after the channel, with a constrain token.
        let text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
        let out = parse(ReasoningFormat::Harmony, "<|start|>assistant", text);
        assert_eq!(out, vec![r("Need weather."), c(&want_call)]);
        // Recipient before the channel, and no `<|call|>` (it ended the generation).
        let text =
            " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}";
        let out = parse(ReasoningFormat::Harmony, "<|start|>assistant", text);
        assert_eq!(out, vec![c(&want_call)]);
        // A preamble on commentary is content.
        let text = "<|channel|>commentary<|message|>Checking.<|end|>";
        let out = parse(ReasoningFormat::Harmony, "", text);
        assert_eq!(out, vec![c("Checking.")]);
    }

    #[test]
    fn harmony_without_structure_is_plain_text() {
        let text = "x".repeat(MAX_HEADER + 5);
        let out = parse(ReasoningFormat::Harmony, "", &text);
        assert_eq!(out, vec![c(&text)]);
        let out = parse(ReasoningFormat::Harmony, "", "just text");
        assert_eq!(out, vec![c("just text")]);
    }

    #[test]
    fn gemma_thought_channels() {
        let on = "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n";
        let g = ReasoningFormat::GemmaChannel;
        let out = parse(
            g,
            on,
            "<|channel>thought\nThe user greets me.\n<channel|>Hello! <b>How</b> can I help?",
        );
        assert_eq!(
            out,
            vec![
                r("The user greets me.\n"),
                c("Hello! <b>How</b> can I help?")
            ]
        );
        // Thoughts again later (between calls), each block reasoning.
        let out = parse(
            g,
            on,
            "<|channel>thought\nA<channel|><|tool_call>x<|channel>thought B<channel|>y",
        );
        assert_eq!(out, vec![r("A"), c("<|tool_call>x"), r("B"), c("y")]);
        // A channel that opens no thoughts and a stray close are dropped.
        let out = parse(g, on, "<|channel><|channel>thought\nx<channel|>y<channel|>");
        assert_eq!(out, vec![r("x"), c("y")]);
        // Unclosed at the end: all reasoning; a `<|channel>` cut off at the end: dropped.
        let out = parse(g, on, "<|channel>thought\nstill thinking <chan");
        assert_eq!(out, vec![r("still thinking <chan")]);
        let out = parse(g, on, "Hi<|channel>tho");
        assert_eq!(out, vec![c("Hitho")]);
        // Thinking off: the prompt closed an empty thought, the output is the answer.
        let off = format!("{on}<|channel>thought\n<channel|>");
        assert_eq!(parse(g, &off, "Hello!"), vec![c("Hello!")]);
        // A prompt that ends in an opened thought (a continued turn) starts in it.
        let open = format!("{on}<|channel>thought\n");
        assert_eq!(parse(g, &open, "hm<channel|>4"), vec![r("hm"), c("4")]);
        // Text that only looks like the tags stays content.
        assert_eq!(
            parse(g, on, "<|chan>thought <channel>"),
            vec![c("<|chan>thought <channel>")]
        );
    }

    #[test]
    fn formats_are_read_off_the_templates() {
        let cases = [
            ("Qwen-Qwen3-0.6B.jinja", Some(ReasoningFormat::Think)),
            ("Qwen-QwQ-32B.jinja", Some(ReasoningFormat::Think)),
            (
                "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                Some(ReasoningFormat::Think),
            ),
            (
                "deepseek-ai-DeepSeek-V3.1.jinja",
                Some(ReasoningFormat::Think),
            ),
            ("openai-gpt-oss-120b.jinja", Some(ReasoningFormat::Harmony)),
            (
                "google-gemma-4-31B-it.jinja",
                Some(ReasoningFormat::GemmaChannel),
            ),
            (
                "google-gemma-4-31B-it-interleaved.jinja",
                Some(ReasoningFormat::GemmaChannel),
            ),
            ("Qwen-Qwen2.5-7B-Instruct.jinja", None),
            ("meta-llama-Llama-3.1-8B-Instruct.jinja", None),
        ];
        for (name, want) in cases {
            let t = crate::tools::test_template(name);
            assert_eq!(format_of(&t), want, "{name}");
        }
    }

    #[test]
    fn rendered_prompts_set_the_starting_state() {
        let user = [ridge_tokenizer::ChatMessage::new("user", "Hi")];
        // Qwen3: thinking on leaves the output to open `<think>`; off closes an empty one.
        let t = crate::tools::test_template("Qwen-Qwen3-0.6B.jinja");
        let mut extra = serde_json::Map::new();
        extra.insert("enable_thinking".into(), false.into());
        let off = t.render_with(&user, true, &extra).unwrap_or_default();
        let out = parse(ReasoningFormat::Think, &off, "Hello!");
        assert_eq!(out, vec![c("Hello!")]);
        let on = t.render(&user, true).unwrap_or_default();
        let out = parse(
            ReasoningFormat::Think,
            &on,
            "<think>\nhm\n</think>\n\nHello!",
        );
        assert_eq!(out, vec![r("\nhm\n"), c("Hello!")]);
        // DeepSeek-R1's distills open `<think>` (llama.cpp's copy closes it again unless
        // `enable_thinking`).
        let t = crate::tools::test_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
        let mut extra = serde_json::Map::new();
        extra.insert("enable_thinking".into(), true.into());
        let p = t.render_with(&user, true, &extra).unwrap_or_default();
        let out = parse(ReasoningFormat::Think, &p, "Say hi.\n</think>\n\nHi!");
        assert_eq!(out, vec![r("Say hi.\n"), c("Hi!")]);
        let p = t.render(&user, true).unwrap_or_default();
        assert_eq!(parse(ReasoningFormat::Think, &p, "Hi!"), vec![c("Hi!")]);
        // gpt-oss's prompt ends in an assistant header.
        let t = crate::tools::test_template("openai-gpt-oss-120b.jinja");
        let p = t.render(&user, true).unwrap_or_default();
        assert!(p.ends_with("<|start|>assistant"), "{p}");
        // DeepSeek-V3.1 with thinking opens `<think>` in the prompt.
        let t = crate::tools::test_template("deepseek-ai-DeepSeek-V3.1.jinja");
        let mut extra = serde_json::Map::new();
        extra.insert("thinking".into(), true.into());
        let p = t.render_with(&user, true, &extra).unwrap_or_default();
        assert!(p.ends_with("<think>"), "{p}");
        let out = parse(ReasoningFormat::Think, &p, "hm</think>Hello!");
        assert_eq!(out, vec![r("hm"), c("Hello!")]);
        // Gemma 4: thinking off closes an empty thought; on, the model opens its own.
        let t = crate::tools::test_template("google-gemma-4-31B-it.jinja");
        let g = ReasoningFormat::GemmaChannel;
        let off = t.render(&user, true).unwrap_or_default();
        assert!(off.ends_with("<|channel>thought\n<channel|>"), "{off}");
        assert_eq!(parse(g, &off, "Hello!"), vec![c("Hello!")]);
        let mut extra = serde_json::Map::new();
        extra.insert("enable_thinking".into(), true.into());
        let on = t.render_with(&user, true, &extra).unwrap_or_default();
        let out = parse(g, &on, "<|channel>thought\nSay hi.<channel|>Hi!");
        assert_eq!(out, vec![r("Say hi."), c("Hi!")]);
    }
}
