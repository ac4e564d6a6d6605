//! Structured outputs as clients ask for them: OpenAI's `response_format` and vLLM's
//! `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` and `structured_outputs`
//! object, read into one [`GrammarSpec`] (at most one per request) with the field that gave it,
//! so a schema the compiler refuses is reported against the right `param`.
//!
//! Reading is pure (no compilation): the fuzzed validator runs it. Compiling happens when the
//! request is submitted (`generate::run`), off the async runtime's threads.

use serde_json::{Map, Value};

use ridge_engine::GrammarSpec;

use crate::error::ApiError;
use crate::params::Fields;

/// Most alternatives in `guided_choice`.
pub const MAX_CHOICES: usize = 1024;
/// Largest schema, regex or grammar text, bytes (as serialized JSON for schemas).
pub const MAX_GRAMMAR_BYTES: usize = 256 << 10;

/// A request's grammar and the field it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Structured {
    /// What the output must match.
    pub spec: GrammarSpec,
    /// The request field that asked for it (the error's `param`).
    pub param: &'static str,
    /// A lazy grammar's trigger token: the output is free until it writes this token, which
    /// the grammar begins with (tool calls under `tool_choice: "auto"`).
    pub trigger: Option<u32>,
}

fn too_big(param: &'static str) -> ApiError {
    ApiError::invalid(
        param,
        format!("`{param}` is larger than {MAX_GRAMMAR_BYTES} bytes"),
    )
}

/// A JSON Schema given as an object, a boolean, or a string holding one.
fn schema(param: &'static str, v: &Value) -> Result<GrammarSpec, ApiError> {
    let parsed;
    let v = match v {
        Value::String(s) => {
            if s.len() > MAX_GRAMMAR_BYTES {
                return Err(too_big(param));
            }
            parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                ApiError::invalid(param, format!("`{param}` is not valid JSON: {e}"))
            })?;
            &parsed
        }
        v => v,
    };
    match v {
        Value::Object(_) | Value::Bool(_) => {
            if v.to_string().len() > MAX_GRAMMAR_BYTES {
                return Err(too_big(param));
            }
            Ok(GrammarSpec::JsonSchema(v.clone()))
        }
        _ => Err(ApiError::invalid(
            param,
            format!("`{param}` must be a JSON Schema (an object)"),
        )),
    }
}

fn text(param: &'static str, v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) if s.len() > MAX_GRAMMAR_BYTES => Err(too_big(param)),
        Value::String(s) => Ok(s.clone()),
        _ => Err(ApiError::invalid(
            param,
            format!("`{param}` must be a string"),
        )),
    }
}

fn choice(param: &'static str, v: &Value) -> Result<GrammarSpec, ApiError> {
    let wrong = || {
        ApiError::invalid(
            param,
            format!("`{param}` must be a non-empty array of strings (at most {MAX_CHOICES})"),
        )
    };
    let Value::Array(a) = v else {
        return Err(wrong());
    };
    if a.is_empty() || a.len() > MAX_CHOICES {
        return Err(wrong());
    }
    let options: Vec<String> = a
        .iter()
        .map(|o| o.as_str().map(str::to_string).ok_or_else(wrong))
        .collect::<Result<_, _>>()?;
    if options.iter().map(String::len).sum::<usize>() > MAX_GRAMMAR_BYTES {
        return Err(too_big(param));
    }
    Ok(GrammarSpec::Choice(options))
}

/// `response_format`: `text`, `json_object`, or `json_schema` with `{name, schema, strict}`.
fn response_format(m: &Map<String, Value>) -> Result<Option<GrammarSpec>, ApiError> {
    const P: &str = "response_format";
    let f = Fields::new(m);
    match f.str("type")? {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(GrammarSpec::JsonObject)),
        Some("json_schema") => {
            let js = f.object("json_schema")?.ok_or_else(|| {
                ApiError::invalid(
                    P,
                    "`response_format.json_schema` is required for type json_schema",
                )
            })?;
            let s = Fields::new(js).get("schema").ok_or_else(|| {
                ApiError::invalid(P, "`response_format.json_schema.schema` is required")
            })?;
            schema(P, s).map(Some)
        }
        Some(other) => Err(ApiError::invalid(
            P,
            format!(
                "`response_format.type` {other:?} is not one of text, json_object, json_schema"
            ),
        )),
    }
}

/// vLLM's `structured_outputs` object: one of `json`, `regex`, `choice`, `grammar`,
/// `json_object`.
fn structured_outputs(m: &Map<String, Value>) -> Result<Vec<GrammarSpec>, ApiError> {
    const P: &str = "structured_outputs";
    let f = Fields::new(m);
    let mut out = Vec::new();
    if let Some(v) = f.get("json") {
        out.push(schema(P, v)?);
    }
    if let Some(v) = f.get("regex") {
        out.push(GrammarSpec::Regex(text(P, v)?));
    }
    if let Some(v) = f.get("choice") {
        out.push(choice(P, v)?);
    }
    if let Some(v) = f.get("grammar") {
        out.push(GrammarSpec::Lark(text(P, v)?));
    }
    if f.bool("json_object", false)? {
        out.push(GrammarSpec::JsonObject);
    }
    Ok(out)
}

/// The request's structured-output constraint, if it asks for one; two at once is a 400.
pub fn read(f: &Fields) -> Result<Option<Structured>, ApiError> {
    read_structured(f).map_err(|e| f.spell(e))
}

fn read_structured(f: &Fields) -> Result<Option<Structured>, ApiError> {
    let mut found: Vec<Structured> = Vec::new();
    let mut add = |param: &'static str, spec: GrammarSpec| {
        found.push(Structured {
            spec,
            param,
            trigger: None,
        });
    };
    if let Some(m) = f.object("response_format")? {
        if let Some(s) = response_format(m)? {
            add(f.wire("response_format"), s);
        }
    }
    if let Some(v) = f.get("guided_json") {
        add("guided_json", schema("guided_json", v)?);
    }
    if let Some(v) = f.get("guided_regex") {
        add("guided_regex", GrammarSpec::Regex(text("guided_regex", v)?));
    }
    if let Some(v) = f.get("guided_choice") {
        add("guided_choice", choice("guided_choice", v)?);
    }
    if let Some(v) = f.get("guided_grammar") {
        add(
            "guided_grammar",
            GrammarSpec::Lark(text("guided_grammar", v)?),
        );
    }
    if let Some(m) = f.object("structured_outputs")? {
        for s in structured_outputs(m)? {
            add("structured_outputs", s);
        }
    }
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(ApiError::invalid(
            found[1].param,
            format!(
                "only one structured-output constraint per request (got {})",
                found
                    .iter()
                    .map(|s| s.param)
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_body(v: Value) -> Result<Option<Structured>, ApiError> {
        let m = v.as_object().cloned().unwrap();
        read(&Fields::new(&m))
    }

    #[test]
    fn every_spelling_reads_into_one_spec() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let cases = [
            (json!({"response_format": {"type": "text"}}), None),
            (
                json!({"response_format": {"type": "json_object"}}),
                Some(GrammarSpec::JsonObject),
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}}),
                Some(GrammarSpec::JsonSchema(schema.clone())),
            ),
            (
                json!({"guided_json": schema.to_string()}),
                Some(GrammarSpec::JsonSchema(schema.clone())),
            ),
            (
                json!({"guided_regex": "[0-9]+"}),
                Some(GrammarSpec::Regex("[0-9]+".into())),
            ),
            (
                json!({"guided_choice": ["yes", "no"]}),
                Some(GrammarSpec::Choice(vec!["yes".into(), "no".into()])),
            ),
            (
                json!({"guided_grammar": "start: \"a\""}),
                Some(GrammarSpec::Lark("start: \"a\"".into())),
            ),
            (
                json!({"structured_outputs": {"choice": ["a"]}}),
                Some(GrammarSpec::Choice(vec!["a".into()])),
            ),
        ];
        for (body, want) in cases {
            let got = read_body(body.clone()).unwrap().map(|s| s.spec);
            assert_eq!(got, want, "{body}");
        }
    }

    #[test]
    fn mistakes_name_their_field() {
        for (body, param) in [
            (
                json!({"response_format": {"type": "yaml"}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format",
            ),
            (json!({"response_format": "json"}), "response_format"),
            (json!({"guided_json": "{not json"}), "guided_json"),
            (json!({"guided_json": 3}), "guided_json"),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_choice": [1]}), "guided_choice"),
            (json!({"guided_regex": 5}), "guided_regex"),
            (
                json!({"guided_regex": "a", "guided_choice": ["b"]}),
                "guided_choice",
            ),
            (
                json!({"guided_regex": "x".repeat(MAX_GRAMMAR_BYTES + 1)}),
                "guided_regex",
            ),
        ] {
            let e = read_body(body.clone()).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
        }
    }
}
