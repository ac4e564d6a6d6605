//! The prompts a run sends, and the token counting that makes their lengths exact.
//!
//! A benchmark of "1024 input tokens" must send 1024 tokens *as the server counts them*, or
//! prefill cost and throughput figures drift by the tokenizer's whims. So every prompt's length
//! is measured with the model's own tokenizer: ridge's (`ridge-tokenizer`, from a GGUF file)
//! when the model is a local file or a known name, else the server's `POST /tokenize`.
//!
//! Random prompts are built from common English words — each a single token with its leading
//! space in every BPE vocabulary worth benchmarking — and then corrected: tokenize the whole
//! text, drop or add words by the difference, repeat until the count is exact. Fresh random
//! words on each correction break the rare oscillation (a two-token word removed, a one-token
//! word added). Every prompt differs, so a server's prefix cache cannot turn the benchmark into
//! a cache benchmark.
//!
//! Datasets: `random` (lengths `L · (1 ± range_ratio)`, uniform), `file:PATH` (one prompt per
//! non-empty line, cycled to the number of prompts), `sharegpt:PATH` (the ShareGPT JSON layout:
//! the first human turn is the prompt, the first reply's token count the output length unless
//! one is given; conversations filtered as vLLM does: prompt and reply at least 4 tokens,
//! prompt at most 1024, both at most 2048).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};

use rand::{Rng, SeedableRng};
use ridge_tokenizer::Tokenizer;
use serde::Serialize;

use super::ServeError;

/// Where prompts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatasetSpec {
    /// Random words of exact token length.
    Random,
    /// One prompt per non-empty line of a text file.
    File(PathBuf),
    /// A ShareGPT-format JSON file.
    ShareGpt(PathBuf),
}

impl std::str::FromStr for DatasetSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "random" {
            return Ok(DatasetSpec::Random);
        }
        if let Some(p) = s.strip_prefix("file:").filter(|p| !p.is_empty()) {
            return Ok(DatasetSpec::File(p.into()));
        }
        if let Some(p) = s.strip_prefix("sharegpt:").filter(|p| !p.is_empty()) {
            return Ok(DatasetSpec::ShareGpt(p.into()));
        }
        Err(format!(
            "unknown dataset `{s}` (expected random, file:PATH or sharegpt:PATH)"
        ))
    }
}

/// One request's prompt and lengths.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prompt {
    /// The prompt text.
    pub text: String,
    /// Its length in tokens (no special tokens added).
    pub input_len: usize,
    /// Output tokens to ask for.
    pub output_len: usize,
}

/// Counts tokens the way the server will: a local tokenizer, or the server's `/tokenize`.
pub enum TokenCounter {
    /// ridge's tokenizer, read from a GGUF file.
    Local(Box<Tokenizer>),
    /// `POST {base}/tokenize` on the server under test.
    Server {
        /// HTTP client.
        client: reqwest::Client,
        /// Base URL (no trailing slash).
        base: String,
        /// Model name to pass along, if any.
        model: Option<String>,
        /// Which request body the server accepted: 0 not yet known, 1 both `prompt` and
        /// `content`, 2 `prompt` only (vLLM's and ridge's name), 3 `content` only
        /// (llama-server's name), for servers strict about unknown fields.
        style: AtomicU8,
    },
}

impl TokenCounter {
    /// Opens the tokenizer of a GGUF file.
    pub fn from_gguf(path: &std::path::Path) -> Result<TokenCounter, ServeError> {
        let file =
            ridge_gguf::GgufFile::open(path).map_err(|e| ServeError::Tokenizer(e.to_string()))?;
        let t = Tokenizer::from_gguf(&file)
            .map_err(|e| ServeError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(TokenCounter::Local(Box::new(t)))
    }

    /// Counts through the server's `/tokenize`.
    pub fn server(client: reqwest::Client, base: &str, model: Option<String>) -> TokenCounter {
        TokenCounter::Server {
            client,
            base: base.trim_end_matches('/').to_string(),
            model,
            style: AtomicU8::new(0),
        }
    }

    /// A short description for the report.
    pub fn describe(&self) -> String {
        match self {
            TokenCounter::Local(_) => "local tokenizer (GGUF)".to_string(),
            TokenCounter::Server { base, .. } => format!("{base}/tokenize"),
        }
    }

    /// Tokens in `text`, without BOS/EOS.
    pub async fn count(&self, text: &str) -> Result<usize, ServeError> {
        match self {
            TokenCounter::Local(t) => t
                .encode(text, false, false)
                .map(|ids| ids.len())
                .map_err(|e| ServeError::Tokenizer(e.to_string())),
            TokenCounter::Server {
                client,
                base,
                model,
                style,
            } => {
                let url = format!("{base}/tokenize");
                let known = style.load(Ordering::Relaxed);
                let mut last_err = String::new();
                for s in [1u8, 2, 3] {
                    if known != 0 && s != known {
                        continue;
                    }
                    let mut body = serde_json::Map::new();
                    if s != 3 {
                        body.insert("prompt".into(), text.into());
                    }
                    if s != 2 {
                        body.insert("content".into(), text.into());
                    }
                    if let Some(m) = model {
                        body.insert("model".into(), m.clone().into());
                    }
                    match tokenize_once(client, &url, &body).await {
                        // A server that ignored the field it did not know answers "no tokens".
                        Ok(0) if !text.is_empty() => {
                            last_err = "answered with no tokens for a non-empty text".into()
                        }
                        Ok(n) => {
                            style.store(s, Ordering::Relaxed);
                            return Ok(n);
                        }
                        Err(e) => last_err = e,
                    }
                }
                Err(ServeError::Tokenizer(format!(
                    "{url}: {last_err} (give --tokenizer with a GGUF path or known model name \
                     to count tokens locally)"
                )))
            }
        }
    }
}

async fn tokenize_once(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<usize, String> {
    let r = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let text = r.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", truncate(&text, 200)));
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("response is not JSON: {e}"))?;
    if let Some(n) = v.get("count").and_then(|c| c.as_u64()) {
        return Ok(n as usize);
    }
    v.get("tokens")
        .and_then(|t| t.as_array())
        .map(|t| t.len())
        .ok_or_else(|| format!("no `tokens` array in {}", truncate(&text, 200)))
}

/// At most `n` characters of `s` (for error messages).
pub(crate) fn truncate(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Common English words, each one token (with its leading space) in GPT-2-style, Llama-3 and
/// SentencePiece vocabularies alike.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "it",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "also",
    "or",
    "had",
    "first",
    "one",
    "their",
    "its",
    "new",
    "after",
    "but",
    "who",
    "not",
    "they",
    "has",
    "her",
    "she",
    "two",
    "been",
    "other",
    "when",
    "there",
    "all",
    "during",
    "into",
    "school",
    "time",
    "may",
    "years",
    "more",
    "most",
    "only",
    "over",
    "city",
    "some",
    "world",
    "would",
    "where",
    "later",
    "up",
    "such",
    "used",
    "many",
    "can",
    "state",
    "about",
    "national",
    "out",
    "known",
    "university",
    "united",
    "then",
    "made",
    "between",
    "while",
    "part",
    "being",
    "year",
    "well",
    "under",
    "three",
    "war",
    "him",
    "south",
    "north",
    "these",
    "film",
    "second",
    "both",
    "series",
    "team",
    "through",
    "so",
    "people",
    "will",
    "than",
    "music",
    "de",
    "them",
    "no",
    "any",
    "work",
    "each",
    "life",
    "since",
    "family",
    "same",
    "game",
    "following",
    "water",
    "house",
    "early",
    "best",
    "against",
    "around",
    "end",
    "great",
    "high",
    "back",
    "local",
    "long",
    "light",
    "small",
    "large",
    "west",
    "east",
    "river",
    "road",
    "book",
    "line",
    "play",
    "form",
    "left",
    "right",
    "name",
    "number",
    "point",
    "power",
    "party",
    "group",
    "public",
    "general",
    "council",
    "church",
    "club",
    "age",
    "area",
    "center",
    "village",
    "building",
    "country",
    "history",
    "member",
    "court",
    "day",
    "field",
    "days",
    "place",
    "side",
    "story",
];

/// The lengths of `n` requests around `len` with `range_ratio` (uniform integers in
/// `[len·(1−r), len·(1+r)]`, at least 1).
fn lengths(rng: &mut impl Rng, n: usize, len: usize, range_ratio: f64) -> Vec<usize> {
    let lo = ((len as f64 * (1.0 - range_ratio)).floor() as usize).max(1);
    let hi = ((len as f64 * (1.0 + range_ratio)).floor() as usize).max(lo);
    (0..n).map(|_| rng.random_range(lo..=hi)).collect()
}

/// A random prompt of exactly `len` tokens as `counter` counts them.
pub async fn random_prompt(
    rng: &mut impl Rng,
    len: usize,
    counter: &TokenCounter,
) -> Result<String, ServeError> {
    let mut words: Vec<&str> = (0..len)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect();
    // Each correction moves by the measured difference; 64 rounds is far more than the two or
    // three that converge in practice.
    for _ in 0..64 {
        let text = words.join(" ");
        let n = counter.count(&text).await?;
        if n == len {
            return Ok(text);
        }
        if n > len {
            let drop = (n - len).min(words.len().saturating_sub(1)).max(1);
            words.truncate(words.len().saturating_sub(drop));
        } else {
            for _ in 0..len - n {
                words.push(WORDS[rng.random_range(0..WORDS.len())]);
            }
        }
    }
    Err(ServeError::Dataset(format!(
        "could not build a prompt of exactly {len} tokens"
    )))
}

/// Builds `n` prompts from `spec`.
///
/// `input_len` and `range_ratio` apply to `random`; `output_len` is every request's
/// `max_tokens` (for ShareGPT, `None` means each conversation's reply length; for the others it
/// must be given).
pub async fn build_prompts(
    spec: &DatasetSpec,
    n: usize,
    input_len: usize,
    output_len: Option<usize>,
    range_ratio: f64,
    seed: u64,
    counter: &TokenCounter,
) -> Result<Vec<Prompt>, ServeError> {
    if n == 0 {
        return Err(ServeError::Invalid("num-prompts must be at least 1".into()));
    }
    if !(0.0..1.0).contains(&range_ratio) {
        return Err(ServeError::Invalid(format!(
            "range-ratio must be in [0, 1), got {range_ratio}"
        )));
    }
    if output_len == Some(0) {
        return Err(ServeError::Invalid("output-len must be at least 1".into()));
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    match spec {
        DatasetSpec::Random => {
            if input_len == 0 {
                return Err(ServeError::Invalid("input-len must be at least 1".into()));
            }
            let out_len = output_len.unwrap_or(128);
            let ins = lengths(&mut rng, n, input_len, range_ratio);
            let outs = lengths(&mut rng, n, out_len, range_ratio);
            let mut prompts = Vec::with_capacity(n);
            for (i, o) in ins.into_iter().zip(outs) {
                let text = random_prompt(&mut rng, i, counter).await?;
                prompts.push(Prompt {
                    text,
                    input_len: i,
                    output_len: o,
                });
            }
            Ok(prompts)
        }
        DatasetSpec::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ServeError::Dataset(format!("{}: {e}", path.display())))?;
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            if lines.is_empty() {
                return Err(ServeError::Dataset(format!(
                    "{}: no non-empty lines",
                    path.display()
                )));
            }
            let mut counts = vec![None; lines.len()];
            let mut prompts = Vec::with_capacity(n);
            for i in 0..n {
                let k = i % lines.len();
                let len = match counts[k] {
                    Some(c) => c,
                    None => {
                        let c = counter.count(lines[k]).await?;
                        counts[k] = Some(c);
                        c
                    }
                };
                prompts.push(Prompt {
                    text: lines[k].to_string(),
                    input_len: len,
                    output_len: output_len.unwrap_or(128),
                });
            }
            Ok(prompts)
        }
        DatasetSpec::ShareGpt(path) => sharegpt(path, n, output_len, &mut rng, counter).await,
    }
}

async fn sharegpt(
    path: &std::path::Path,
    n: usize,
    output_len: Option<usize>,
    rng: &mut impl Rng,
    counter: &TokenCounter,
) -> Result<Vec<Prompt>, ServeError> {
    let bad = |m: String| ServeError::Dataset(format!("{}: {m}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let entries = v
        .as_array()
        .ok_or_else(|| bad("expected a JSON array of conversations".into()))?;
    let mut pairs: Vec<(&str, &str)> = entries
        .iter()
        .filter_map(|e| {
            let turns = e
                .get("conversations")
                .or_else(|| e.get("conversation"))?
                .as_array()?;
            let get = |i: usize| turns.get(i)?.get("value")?.as_str();
            Some((get(0)?, get(1)?))
        })
        .collect();
    // Fisher–Yates with the run's seed, so a seed picks the same conversations every time.
    for i in (1..pairs.len()).rev() {
        pairs.swap(i, rng.random_range(0..=i));
    }
    let mut prompts = Vec::with_capacity(n);
    for (prompt, reply) in pairs {
        if prompts.len() == n {
            break;
        }
        let p = counter.count(prompt).await?;
        let o = match output_len {
            Some(o) => o,
            None => counter.count(reply).await?,
        };
        if p < 4 || (output_len.is_none() && o < 4) || p > 1024 || p + o > 2048 {
            continue;
        }
        prompts.push(Prompt {
            text: prompt.to_string(),
            input_len: p,
            output_len: o,
        });
    }
    if prompts.len() < n {
        return Err(bad(format!(
            "only {} usable conversations for {n} prompts",
            prompts.len()
        )));
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_specs_parse() {
        assert_eq!("random".parse(), Ok(DatasetSpec::Random));
        assert_eq!(
            "file:/tmp/p.txt".parse(),
            Ok(DatasetSpec::File("/tmp/p.txt".into()))
        );
        assert_eq!(
            "sharegpt:x.json".parse(),
            Ok(DatasetSpec::ShareGpt("x.json".into()))
        );
        assert!("file:".parse::<DatasetSpec>().is_err());
        assert!("hf:foo".parse::<DatasetSpec>().is_err());
    }

    #[test]
    fn lengths_stay_in_range() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let l = lengths(&mut rng, 1000, 100, 0.5);
        assert!(l.iter().all(|&x| (50..=150).contains(&x)));
        assert!(l.iter().any(|&x| x < 60) && l.iter().any(|&x| x > 140));
        assert_eq!(lengths(&mut rng, 3, 7, 0.0), vec![7, 7, 7]);
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("ab", 3), "ab");
    }
}
