//! Tools for a model whose chat template shows none.
//!
//! Small and older models (SmolLM2, Gemma 3, Phi-3) have templates that never read `tools`, so
//! a request with tools — what every coding agent sends — had nowhere to put them. As
//! llama-server does for such templates, ridge then writes the tools into the system message
//! with one way to call them: an answer that is only `{"tool_calls": [{"name", "arguments"}]}`.
//! Earlier calls in the conversation are shown as that JSON and their results as user turns
//! (templates without tools seldom know a `tool` role), so the model sees the protocol it is
//! asked to follow. `tool_choice: "required"` or a named function constrains the answer to
//! that object (`grammar.rs`); with `auto` the model may answer in prose instead.

use serde_json::{json, Value};

use ridge_tokenizer::ChatMessage;

use super::{ToolChoice, Tools};

/// The instructions put before the tools' list.
const HOW: &str = "You can call tools. To call one or more, answer with only this JSON object, nothing before or after it:\n{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments as the tool's parameters describe>}}]}\nOtherwise answer normally. A call's result comes back in the next user message.\nThe tools:";

/// `msgs` with the tools described in the leading system message, assistant calls written
/// as the JSON the model is asked for, and tool results as user turns.
pub(super) fn conversation(tools: &Tools, msgs: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut listing = String::from(HOW);
    for d in &tools.defs {
        let f = &d["function"];
        let mut entry = json!({"name": f["name"]});
        if let Some(desc) = f.get("description").filter(|v| v.is_string()) {
            entry["description"] = desc.clone();
        }
        entry["parameters"] = f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        listing.push('\n');
        listing.push_str(&entry.to_string());
    }
    let mut out = Vec::with_capacity(msgs.len() + 1);
    match msgs.first() {
        // `tool_choice: "none"`: the tools are not shown (earlier calls still are).
        _ if tools.choice == ToolChoice::None => {}
        Some(m) if m.role == "system" => {
            let mut m = m.clone();
            m.content = format!("{}\n\n{listing}", m.content);
            out.push(m);
        }
        _ => out.push(ChatMessage::new("system", &listing)),
    }
    let skip = usize::from(
        tools.choice != ToolChoice::None && msgs.first().is_some_and(|m| m.role == "system"),
    );
    for m in &msgs[skip..] {
        match m.role.as_str() {
            "assistant" if m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) => {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .flatten()
                    .map(|c| json!({"name": c["function"]["name"], "arguments": c["function"]["arguments"]}))
                    .collect();
                let mut a = m.clone();
                let text = json!({"tool_calls": calls}).to_string();
                a.content = if a.content.trim().is_empty() {
                    text
                } else {
                    format!("{}\n{text}", a.content)
                };
                a.tool_calls = None;
                out.push(a);
            }
            "tool" => {
                let who = m
                    .name
                    .clone()
                    .or_else(|| m.tool_call_id.clone())
                    .unwrap_or_else(|| "the tool".into());
                out.push(ChatMessage::new(
                    "user",
                    format!("Result of {who}:\n{}", m.content),
                ));
            }
            _ => out.push(m.clone()),
        }
    }
    out
}
