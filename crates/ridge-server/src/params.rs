//! Request bodies → engine requests, with every field checked.
//!
//! Bodies are parsed as untyped JSON and read field by field, so each mistake is reported with
//! the field's name and what was expected (serde's derived messages name neither reliably), and
//! unknown fields are ignored as OpenAI's API does. Every client-controlled count has a bound
//! (choices, prompts, stop strings, logit-bias entries), so no allocation grows without one.

use serde_json::{Map, Value};

use ridge_engine::{Request, SamplingParams};

use crate::error::ApiError;

/// Most choices per request (`n`).
pub const MAX_N: usize = 16;
/// Most prompts in one completions request.
pub const MAX_PROMPTS: usize = 32;
/// Most stop strings.
pub const MAX_STOP: usize = 16;
/// Longest stop string, bytes.
pub const MAX_STOP_LEN: usize = 256;
/// Most logit-bias entries.
pub const MAX_LOGIT_BIAS: usize = 1024;
/// Most alternatives per token in logprobs.
pub const MAX_LOGPROBS: usize = 20;
/// Most chat messages.
pub const MAX_MESSAGES: usize = 4096;

/// One field the readers share (`common`, `tools::read`, `structured::read`), as a protocol
/// spells it.
pub struct Spelling {
    /// The shared name (Chat Completions'), the one the readers ask for.
    pub shared: &'static str,
    /// The protocol's name: where the body holds it, and what its errors call it.
    pub wire: &'static str,
    /// Whether the body's value is read as is; `false` when the adapter translates it (its
    /// tools, its output format) into the map [`Fields::spelled`] takes.
    pub direct: bool,
}

impl Spelling {
    /// A field the protocol names as Chat Completions does.
    pub const fn same(name: &'static str) -> Spelling {
        Spelling {
            shared: name,
            wire: name,
            direct: true,
        }
    }

    /// A field the protocol renames.
    pub const fn renamed(shared: &'static str, wire: &'static str) -> Spelling {
        Spelling {
            shared,
            wire,
            direct: true,
        }
    }

    /// A field whose value the adapter translates; errors name the protocol's `wire` field.
    pub const fn translated(shared: &'static str, wire: &'static str) -> Spelling {
        Spelling {
            shared,
            wire,
            direct: false,
        }
    }
}

/// Fields every protocol has under the same name: vLLM's constraint fields, which ridge
/// accepts everywhere as an extension (read, and refused when combined, with a protocol's own
/// constraint field).
const EXTENSIONS: [Spelling; 5] = [
    Spelling::same("guided_json"),
    Spelling::same("guided_regex"),
    Spelling::same("guided_choice"),
    Spelling::same("guided_grammar"),
    Spelling::same("structured_outputs"),
];

/// Typed access to the fields of a JSON object.
///
/// The shared readers ask for fields by their Chat Completions names; a protocol that names
/// them otherwise (Anthropic's `stop_sequences`, Responses' `max_output_tokens`) gives its
/// spelling table, so its body is read where it stands and the errors name its own fields — no
/// copy under other names, no renaming afterwards. A shared field missing from the table is
/// one the protocol does not have (Messages has no `n`): it reads as absent; vLLM's
/// constraint fields ([`EXTENSIONS`]) every protocol has.
pub struct Fields<'a> {
    body: &'a Map<String, Value>,
    spelling: Option<&'static [Spelling]>,
    translated: Option<&'a Map<String, Value>>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Fields<'a> {
    /// The fields of `body` under their own names (Chat Completions, and every nested object).
    pub fn new(body: &'a Map<String, Value>) -> Fields<'a> {
        Fields {
            body,
            spelling: None,
            translated: None,
        }
    }

    /// The fields of a body in a protocol's `spelling`, with the values its adapter
    /// `translated` (under the shared names).
    pub fn spelled(
        body: &'a Map<String, Value>,
        spelling: &'static [Spelling],
        translated: &'a Map<String, Value>,
    ) -> Fields<'a> {
        Fields {
            body,
            spelling: Some(spelling),
            translated: Some(translated),
        }
    }

    /// The protocol's entry for the shared field `name`; `None` when its body names fields
    /// as the readers do.
    fn entry(&self, name: &str) -> Option<Option<&'static Spelling>> {
        self.spelling
            .map(|table| table.iter().chain(&EXTENSIONS).find(|s| s.shared == name))
    }

    /// The protocol's name for the shared field `name` (itself where the protocol keeps it).
    pub fn wire(&self, name: &'static str) -> &'static str {
        match self.entry(name) {
            Some(Some(s)) => s.wire,
            _ => name,
        }
    }

    /// An error a shared reader raised under the shared names, in this protocol's names:
    /// its `param`, and the field where the message quotes it.
    pub fn spell(&self, mut e: ApiError) -> ApiError {
        let Some(Some(s)) = e.param.as_deref().and_then(|p| self.entry(p)) else {
            return e;
        };
        if s.shared != s.wire {
            e.message = e
                .message
                .replace(&format!("`{}`", s.shared), &format!("`{}`", s.wire));
            e.param = Some(s.wire.into());
        }
        e
    }

    /// Parses a body into an object.
    pub fn parse(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid UTF-8: {e}")))?;
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(other) => Err(ApiError::bad_request(format!(
                "the body must be a JSON object, got {}",
                type_name(&other)
            ))),
            Err(e) => Err(ApiError::bad_request(format!("malformed JSON: {e}"))),
        }
    }

    /// The raw value (absent and null are both `None`).
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        let value = match self.entry(name) {
            None => self.body.get(name),
            Some(None) => None,
            Some(Some(s)) if s.direct => self.body.get(s.wire),
            Some(Some(_)) => self.translated?.get(name),
        };
        value.filter(|v| !v.is_null())
    }

    fn wrong(name: &str, expected: &str, v: &Value) -> ApiError {
        ApiError::invalid(
            name,
            format!("`{name}` must be {expected}, got {}", type_name(v)),
        )
    }

    /// A number in `[lo, hi]`.
    pub fn f32_in(&self, name: &str, default: f32, lo: f32, hi: f32) -> Result<f32, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        let x = v.as_f64().ok_or_else(|| Self::wrong(name, "a number", v))?;
        if !(x >= lo as f64 && x <= hi as f64) {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` must be between {lo} and {hi}, got {x}"),
            ));
        }
        Ok(x as f32)
    }

    /// An integer in `[lo, hi]`.
    pub fn int_in(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let x = v
            .as_i64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| Self::wrong(name, "an integer", v))?;
        if x < lo || x > hi {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` must be between {lo} and {hi}, got {x}"),
            ));
        }
        Ok(Some(x))
    }

    /// A boolean.
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(Self::wrong(name, "a boolean", v)),
        }
    }

    /// A string.
    pub fn str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Self::wrong(name, "a string", v)),
        }
    }

    /// An object.
    pub fn object(&self, name: &str) -> Result<Option<&'a Map<String, Value>>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(Self::wrong(name, "an object", v)),
        }
    }
}

/// What both endpoints share: sampling, limits, stops, streaming.
#[derive(Clone, Debug)]
pub struct Common {
    /// `max_tokens` / `max_completion_tokens` when given.
    pub max_tokens: Option<usize>,
    /// Sampling.
    pub sampling: SamplingParams,
    /// Choices per prompt.
    pub n: usize,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stop token ids.
    pub stop_token_ids: Vec<u32>,
    /// Generate past EOS.
    pub ignore_eos: bool,
    /// Stream with SSE.
    pub stream: bool,
    /// Send a usage chunk at the end of the stream.
    pub include_usage: bool,
    /// Render special tokens in the output.
    pub render_special: bool,
    /// `speculative` (ridge's extension, default true): false opts this request out of
    /// speculative decoding.
    pub speculative: bool,
    /// A `max_tokens` past the context is clamped to the room left (noted in the request's
    /// log line and an `x-ridge-max-tokens-clamped` header) instead of refused.
    pub clamp_max_tokens: bool,
}

/// Reads the shared fields. `vocab` bounds token ids in `logit_bias` and `stop_token_ids`.
pub fn common(f: &Fields, vocab: usize) -> Result<Common, ApiError> {
    read_common(f, vocab).map_err(|e| f.spell(e))
}

fn read_common(f: &Fields, vocab: usize) -> Result<Common, ApiError> {
    let max_tokens = match f.int_in("max_completion_tokens", 1, i64::from(u32::MAX))? {
        Some(m) => Some(m),
        None => f.int_in("max_tokens", 1, i64::from(u32::MAX))?,
    }
    .map(|m| m as usize);
    let top_k = f
        .int_in("top_k", -1, i64::from(u32::MAX))?
        .unwrap_or(0)
        .max(0) as usize;
    let seed = f.int_in("seed", i64::MIN, i64::MAX)?.map(|s| s as u64);
    let sampling = SamplingParams {
        temperature: f.f32_in("temperature", 1.0, 0.0, 2.0)?,
        top_k,
        top_p: match f.f32_in("top_p", 1.0, 0.0, 1.0)? {
            p if p > 0.0 => p,
            _ => return Err(ApiError::invalid("top_p", "`top_p` must be in (0, 1]")),
        },
        min_p: f.f32_in("min_p", 0.0, 0.0, 1.0)?,
        repetition_penalty: f.f32_in("repetition_penalty", 1.0, 0.01, 10.0)?,
        presence_penalty: f.f32_in("presence_penalty", 0.0, -2.0, 2.0)?,
        frequency_penalty: f.f32_in("frequency_penalty", 0.0, -2.0, 2.0)?,
        logit_bias: logit_bias(f, vocab)?,
        seed,
    };
    let n = f.int_in("n", 1, MAX_N as i64)?.unwrap_or(1) as usize;
    let stream = f.bool("stream", false)?;
    let include_usage = match f.object("stream_options")? {
        Some(o) => Fields::new(o).bool("include_usage", false)?,
        None => false,
    };
    Ok(Common {
        max_tokens,
        sampling,
        n,
        stop: stop(f)?,
        stop_token_ids: stop_token_ids(f, vocab)?,
        ignore_eos: f.bool("ignore_eos", false)?,
        stream,
        include_usage,
        render_special: !f.bool("skip_special_tokens", true)?,
        speculative: f.bool("speculative", true)?,
        clamp_max_tokens: false,
    })
}

fn stop(f: &Fields) -> Result<Vec<String>, ApiError> {
    let list: Vec<&Value> = match f.get("stop") {
        None => return Ok(Vec::new()),
        Some(v @ Value::String(_)) => vec![v],
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => return Err(Fields::wrong("stop", "a string or an array of strings", v)),
    };
    if list.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOP} stop strings, got {}", list.len()),
        ));
    }
    list.into_iter()
        .map(|v| match v {
            Value::String(s) if s.is_empty() => {
                Err(ApiError::invalid("stop", "stop strings must not be empty"))
            }
            Value::String(s) if s.len() > MAX_STOP_LEN => Err(ApiError::invalid(
                "stop",
                format!("stop strings must be at most {MAX_STOP_LEN} bytes"),
            )),
            Value::String(s) => Ok(s.clone()),
            other => Err(Fields::wrong(
                "stop",
                "a string or an array of strings",
                other,
            )),
        })
        .collect()
}

fn token_id(name: &str, v: &Value, vocab: usize) -> Result<u32, ApiError> {
    match v.as_u64() {
        Some(t) if (t as usize) < vocab => Ok(t as u32),
        _ => Err(ApiError::invalid(
            name,
            format!("token ids must be integers in [0, {vocab})"),
        )),
    }
}

fn stop_token_ids(f: &Fields, vocab: usize) -> Result<Vec<u32>, ApiError> {
    match f.get("stop_token_ids") {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) if a.len() <= MAX_LOGIT_BIAS => a
            .iter()
            .map(|v| token_id("stop_token_ids", v, vocab))
            .collect(),
        Some(Value::Array(_)) => Err(ApiError::invalid(
            "stop_token_ids",
            format!("at most {MAX_LOGIT_BIAS} stop token ids"),
        )),
        Some(v) => Err(Fields::wrong("stop_token_ids", "an array of token ids", v)),
    }
}

fn logit_bias(f: &Fields, vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(m) = f.object("logit_bias")? else {
        return Ok(Vec::new());
    };
    if m.len() > MAX_LOGIT_BIAS {
        return Err(ApiError::invalid(
            "logit_bias",
            format!("at most {MAX_LOGIT_BIAS} entries, got {}", m.len()),
        ));
    }
    m.iter()
        .map(|(k, v)| {
            let id = k
                .parse::<u64>()
                .ok()
                .filter(|&t| (t as usize) < vocab)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "logit_bias",
                        format!("keys must be token ids in [0, {vocab}), got {k:?}"),
                    )
                })?;
            let b = v
                .as_f64()
                .filter(|b| (-100.0..=100.0).contains(b))
                .ok_or_else(|| {
                    ApiError::invalid("logit_bias", "values must be numbers in [-100, 100]")
                })?;
            Ok((id as u32, b as f32))
        })
        .collect()
}

/// Checks the `model` field's type. Which model serves the name is the pool's decision
/// ([`crate::pool::ModelPool::resolve`]), made once before the body is validated.
pub fn check_model(f: &Fields) -> Result<(), ApiError> {
    f.str("model").map(|_| ())
}

/// Builds the engine request for one prompt, checking prompt + max_tokens against the context.
pub fn engine_request(
    prompt: Vec<u32>,
    c: &Common,
    default_max: Option<usize>,
    logprobs: Option<usize>,
    ctx: usize,
) -> Result<Request, ApiError> {
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt is empty"));
    }
    if prompt.len() >= ctx {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {ctx} tokens. However, the prompt has {} tokens.",
            prompt.len()
        )));
    }
    let max_tokens = match c.max_tokens.or(default_max) {
        Some(m) => {
            if prompt.len() + m > ctx && c.clamp_max_tokens {
                let room = ctx - prompt.len();
                crate::access_log::note_clamped(m, room);
                room
            } else if prompt.len() + m > ctx {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!(
                        "This model's maximum context length is {ctx} tokens. However, you requested {} tokens ({} in the prompt, {m} in the completion).",
                        prompt.len() + m,
                        prompt.len()
                    ),
                ));
            } else {
                m
            }
        }
        None => ctx - prompt.len(),
    };
    Ok(Request {
        prompt,
        max_tokens,
        sampling: c.sampling.clone(),
        stop: c.stop.clone(),
        stop_token_ids: c.stop_token_ids.clone(),
        ignore_eos: c.ignore_eos,
        n: c.n,
        logprobs,
        render_special: c.render_special,
        speculative: c.speculative,
        constraint: None,
        think_budget: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Common, ApiError> {
        let m = v.as_object().cloned().unwrap();
        common(&Fields::new(&m), 100)
    }

    #[test]
    fn defaults_and_ranges() {
        let c = parse(json!({})).unwrap();
        assert_eq!(
            (c.n, c.sampling.temperature, c.sampling.top_p),
            (1, 1.0, 1.0)
        );
        for (body, param) in [
            (json!({"temperature": -1}), "temperature"),
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"top_p": 1.5}), "top_p"),
            (json!({"n": 0}), "n"),
            (json!({"n": 17}), "n"),
            (json!({"n": 1.5}), "n"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"stop": ""}), "stop"),
            (json!({"stop": [1]}), "stop"),
            (json!({"stop": vec!["a"; 17]}), "stop"),
            (json!({"logit_bias": {"100": 1}}), "logit_bias"),
            (json!({"logit_bias": {"5": 101}}), "logit_bias"),
            (json!({"logit_bias": {"x": 1}}), "logit_bias"),
            (json!({"stream": "yes"}), "stream"),
            (
                json!({"stream_options": {"include_usage": 1}}),
                "include_usage",
            ),
            (json!({"presence_penalty": 3}), "presence_penalty"),
        ] {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
        }
        let c = parse(json!({"stop": "x", "top_k": -1, "seed": -3, "logit_bias": {"7": -100}, "n": 2, "max_completion_tokens": 5, "max_tokens": 9, "unknown": {"a": 1}}))
            .unwrap();
        assert_eq!(c.stop, vec!["x".to_string()]);
        assert_eq!(c.sampling.top_k, 0);
        assert_eq!(c.sampling.logit_bias, vec![(7, -100.0)]);
        assert_eq!(c.max_tokens, Some(5));
        assert_eq!(c.n, 2);
    }

    #[test]
    fn context_limits() {
        let c = parse(json!({"max_tokens": 10})).unwrap();
        assert!(engine_request(vec![1; 90], &c, None, None, 100).is_ok());
        let e = engine_request(vec![1; 91], &c, None, None, 100).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert!(engine_request(vec![], &c, None, None, 100).is_err());
        let c = parse(json!({})).unwrap();
        assert_eq!(
            engine_request(vec![1; 30], &c, None, None, 100)
                .unwrap()
                .max_tokens,
            70
        );
    }

    #[test]
    fn a_protocol_s_spelling_is_read_where_it_stands_and_named_in_errors() {
        const T: [Spelling; 3] = [
            Spelling::renamed("stop", "stop_sequences"),
            Spelling::same("temperature"),
            Spelling::translated("response_format", "output_config"),
        ];
        let body = json!({"stop_sequences": ["x"], "stop": ["ignored"], "n": 3, "temperature": 0.5,
            "output_config": {"format": 1}, "response_format": {"type": "json_object"}});
        let body = body.as_object().cloned().unwrap();
        let none = Map::new();
        let f = Fields::spelled(&body, &T, &none);
        let c = common(&f, 100).unwrap();
        // Read under the protocol's name; `n` and `stop` are not this protocol's fields.
        assert_eq!(c.stop, vec!["x".to_string()]);
        assert_eq!((c.n, c.sampling.temperature), (1, 0.5));
        // A translated field is the adapter's value or nothing, never the body's.
        assert!(f.get("response_format").is_none());
        let translated = json!({"response_format": {"type": "json_object"}});
        let translated = translated.as_object().cloned().unwrap();
        let g = Fields::spelled(&body, &T, &translated);
        assert_eq!(g.get("response_format"), translated.get("response_format"));
        assert_eq!(g.wire("response_format"), "output_config");
        // Errors name the protocol's field.
        let bad = json!({"stop_sequences": 7}).as_object().cloned().unwrap();
        let e = common(&Fields::spelled(&bad, &T, &none), 100).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stop_sequences"));
        assert!(e.message.contains("`stop_sequences`"), "{}", e.message);
        assert!(!e.message.contains("`stop`"), "{}", e.message);
    }

    #[test]
    fn bodies_that_are_not_objects() {
        assert!(Fields::parse(b"[1]").is_err());
        assert!(Fields::parse(b"{").is_err());
        assert!(Fields::parse(b"\xff{}").is_err());
        assert!(Fields::parse(b"{}").is_ok());
    }
}
