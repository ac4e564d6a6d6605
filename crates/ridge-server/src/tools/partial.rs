//! A tool call's arguments while the model is still writing them.
//!
//! Clients show a call as it streams (OpenAI's `delta.tool_calls[].function.arguments`,
//! Anthropic's `input_json_delta`, Responses' `response.function_call_arguments.delta`), and
//! agents writing a long file through a tool wait on those arguments for minutes on a small
//! CPU. So once a call's name is known its arguments go out as they are written. What goes
//! out must be a prefix of the call's final arguments text, which is compact JSON as
//! `serde_json` prints the parsed object — the model's spacing, escapes and number spellings
//! are not kept.
//!
//! [`json_progress`] finds that prefix in a partial JSON object by *healing* it, as
//! llama.cpp's partial parser does: the text is cut at the last point that cannot change —
//! after a complete member or element, or inside an unfinished string value (before a partial
//! escape) — whatever is open is closed, serde_json parses and prints it, and the printed text
//! is cut at the same point. Keys, numbers, `true`/`false`/`null` are held until complete
//! (a number's printed form can change as digits arrive: `1` prints `1`, `1e5` `100000.0`).
//! The formats whose arguments are not JSON (Qwen3-Coder's and GLM's XML) advance one whole
//! parameter at a time ([`object_prefix`]).

use serde_json::Value;

use super::parse::json_end;

/// How far a call's arguments are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// A prefix of the final arguments text that no later text changes.
    pub stable: String,
    /// `stable` completed into a valid JSON object (what the arguments would be if the
    /// output stopped here).
    pub healed: String,
}

/// Marks the cut inside an open string: a private-use character serde_json prints as it is.
const MARK: &str = "\u{F8FF}ridge-cut\u{F8FF}";

/// What the scanner expects next inside a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// A key or `}` (objects).
    Key,
    /// `:` (objects).
    Colon,
    /// A value (objects after `:`, arrays after `[` or `,`).
    Value,
    /// `,` or the closing bracket.
    Comma,
}

/// The progress of `raw`, JSON text that starts with `{` (an object's beginning, or the whole
/// object followed by anything); `None` when it is not (the start of) a JSON object.
pub fn json_progress(raw: &str) -> Option<Progress> {
    if !raw.starts_with('{') {
        return None;
    }
    if let Some(e) = json_end(raw) {
        let text = match serde_json::from_str::<Value>(&raw[..e]).ok()? {
            v @ Value::Object(_) => v.to_string(),
            _ => return None,
        };
        return Some(Progress {
            stable: text.clone(),
            healed: text,
        });
    }
    let b = raw.as_bytes();
    // Closing brackets of the open containers, outermost first, and what each expects.
    let mut stack: Vec<(u8, Want)> = Vec::new();
    // The last safe cut: its byte offset and the closers it needs.
    let mut cut = (0usize, String::new());
    let closers =
        |stack: &[(u8, Want)]| -> String { stack.iter().rev().map(|&(c, _)| c as char).collect() };
    // An unfinished string value at the end: where its quote is.
    let mut open_value = None;
    let mut i = 0;
    'scan: while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let want = stack.last().map(|s| s.1);
        match (want, c) {
            (None, b'{') => {
                stack.push((b'}', Want::Key));
                i += 1;
                cut = (i, closers(&stack));
            }
            (None, _) => break,
            (Some(Want::Key), b'"') => match string_end(&b[i..]) {
                Some(e) => {
                    set_want(&mut stack, Want::Colon);
                    i += e;
                }
                None => break,
            },
            (Some(Want::Colon), b':') => {
                set_want(&mut stack, Want::Value);
                i += 1;
            }
            (Some(Want::Key | Want::Comma), b'}' | b']') | (Some(Want::Value), b']') => {
                if stack.last().map(|s| s.0) != Some(c) {
                    break;
                }
                stack.pop();
                i += 1;
                if stack.is_empty() {
                    break;
                }
                set_want(&mut stack, Want::Comma);
                cut = (i, closers(&stack));
            }
            (Some(Want::Comma), b',') => {
                let next = if stack.last().map(|s| s.0) == Some(b'}') {
                    Want::Key
                } else {
                    Want::Value
                };
                set_want(&mut stack, next);
                i += 1;
            }
            (Some(Want::Value), b'{' | b'[') => {
                set_want(&mut stack, Want::Comma);
                let (close, want) = if c == b'{' {
                    (b'}', Want::Key)
                } else {
                    (b']', Want::Value)
                };
                stack.push((close, want));
                i += 1;
                cut = (i, closers(&stack));
            }
            (Some(Want::Value), b'"') => match string_end(&b[i..]) {
                Some(e) => {
                    set_want(&mut stack, Want::Comma);
                    i += e;
                    cut = (i, closers(&stack));
                }
                None => {
                    open_value = Some(i);
                    break 'scan;
                }
            },
            (Some(Want::Value), _) => {
                // A number or literal: complete once a delimiter follows it.
                let len = b[i..]
                    .iter()
                    .position(|&d| matches!(d, b',' | b'}' | b']') || d.is_ascii_whitespace());
                match len {
                    Some(n) if n > 0 => {
                        set_want(&mut stack, Want::Comma);
                        i += n;
                        cut = (i, closers(&stack));
                    }
                    _ => break,
                }
            }
            _ => break,
        }
    }
    if let Some(q) = open_value {
        let body = unescaped_prefix(&raw[q + 1..]);
        let text = format!("{}\"{body}{MARK}\"{}", &raw[..q], closers(&stack));
        if let Some(p) = printed(&text) {
            if let Some(m) = p.rfind(MARK) {
                let healed = format!("{}{}", &p[..m], &p[m + MARK.len()..]);
                return Some(Progress {
                    stable: p[..m].to_string(),
                    healed,
                });
            }
        }
    }
    let (at, close) = cut;
    let p = printed(&format!("{}{close}", &raw[..at]))?;
    Some(Progress {
        stable: p[..p.len() - close.len()].to_string(),
        healed: p,
    })
}

fn set_want(stack: &mut [(u8, Want)], want: Want) {
    if let Some(top) = stack.last_mut() {
        top.1 = want;
    }
}

/// `text` parsed and printed compactly, when it is a JSON object.
fn printed(text: &str) -> Option<String> {
    match serde_json::from_str::<Value>(text).ok()? {
        v @ Value::Object(_) => Some(v.to_string()),
        _ => None,
    }
}

/// The length of the JSON string `b` starts with (its quote included), once it is closed.
pub(super) fn string_end(b: &[u8]) -> Option<usize> {
    let mut escaped = false;
    for (i, &c) in b.iter().enumerate().skip(1) {
        match c {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// An unfinished string's text without a partial escape at its end (a lone `\`, a `\u`
/// with fewer than four digits, or a high surrogate whose low half has not come).
fn unescaped_prefix(s: &str) -> &str {
    let b = s.as_bytes();
    // Start of the last escape, if the text ends inside or right after one.
    let mut i = 0;
    let mut last_escape = None;
    while i < b.len() {
        if b[i] == b'\\' {
            last_escape = Some(i);
            i += 2;
        } else {
            i += 1;
        }
    }
    let Some(e) = last_escape else {
        return s;
    };
    let esc = &s[e..];
    let partial = esc.len() < 2
        || (esc.as_bytes()[1] == b'u'
            && (esc.len() < 6
                || (esc.len() == 6
                    && u16::from_str_radix(&esc[2..6], 16)
                        .is_ok_and(|u| (0xD800..0xDC00).contains(&u)))));
    if partial {
        // What is left may now end in a high surrogate whose low half was the partial escape.
        unescaped_prefix(&s[..e])
    } else {
        s
    }
}

/// The progress of arguments that arrive one whole member at a time: `full` is the compact
/// object of the members complete so far (`None` while none can be read), `done` whether the
/// call's arguments are complete.
pub fn object_prefix(full: String, done: bool) -> Progress {
    let stable = if done {
        full.clone()
    } else {
        full[..full.len().saturating_sub(1)].to_string()
    };
    Progress {
        stable,
        healed: full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stable(raw: &str) -> String {
        json_progress(raw).map(|p| p.stable).unwrap_or_default()
    }

    #[test]
    fn every_prefix_of_an_object_yields_a_prefix_of_its_printed_form() {
        let raw = "{ \"path\" : \"a/b.txt\", \"n\": 12.50, \"big\": 1e5, \"ok\": true,\n \"list\": [1, \"x\\\"y\", {\"k\": null}, []],\n \"text\": \"line\\n\\u00e9\\ud83d\\ude00 end\", \"empty\": {} }";
        let full = serde_json::from_str::<Value>(raw).unwrap().to_string();
        let mut last = String::new();
        for end in 1..=raw.len() {
            if !raw.is_char_boundary(end) {
                continue;
            }
            let p = json_progress(&raw[..end]).unwrap_or_else(|| panic!("{:?}", &raw[..end]));
            assert!(
                full.starts_with(&p.stable),
                "{:?} -> {:?}",
                &raw[..end],
                p.stable
            );
            assert!(
                p.stable.starts_with(&last),
                "went back at {:?}",
                &raw[..end]
            );
            assert!(p.healed.starts_with(&p.stable));
            let healed: Value = serde_json::from_str(&p.healed).unwrap();
            assert!(healed.is_object());
            last = p.stable;
        }
        assert_eq!(last, full);
    }

    #[test]
    fn string_values_stream_and_held_tokens_wait() {
        assert_eq!(
            stable("{\"content\": \"hello wor"),
            "{\"content\":\"hello wor"
        );
        assert_eq!(stable("{\"a\": \"x\\"), "{\"a\":\"x");
        assert_eq!(stable("{\"a\": \"x\\u00"), "{\"a\":\"x");
        assert_eq!(stable("{\"a\": \"x\\ud83d"), "{\"a\":\"x");
        assert_eq!(stable("{\"a\": \"x\\ud83d\\u"), "{\"a\":\"x");
        assert_eq!(stable("{\"a\": 1"), "{");
        assert_eq!(stable("{\"a\": 1,"), "{\"a\":1");
        assert_eq!(stable("{\"a\": tr"), "{");
        assert_eq!(stable("{\"ke"), "{");
        assert_eq!(stable("{\"a\": [1, 2"), "{\"a\":[1");
        assert_eq!(
            json_progress("{\"a\": [\"q").unwrap().healed,
            "{\"a\":[\"q\"]}"
        );
        assert_eq!(json_progress("[1]"), None);
        assert_eq!(
            json_progress("{\"a\": 1} trailing").unwrap().stable,
            "{\"a\":1}"
        );
    }

    #[test]
    fn member_wise_progress_leaves_the_object_open_until_done() {
        assert_eq!(object_prefix("{\"a\":1}".into(), false).stable, "{\"a\":1");
        assert_eq!(object_prefix("{}".into(), false).stable, "{");
        assert_eq!(object_prefix("{\"a\":1}".into(), true).stable, "{\"a\":1}");
    }
}
