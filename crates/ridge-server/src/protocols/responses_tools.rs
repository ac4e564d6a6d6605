//! The Responses API's tool kinds, translated to what a chat template knows — functions — and
//! the model's calls translated back, named as OpenAI's API names them.
//!
//! - `function` tools are functions.
//! - `namespace` tools group functions (Codex puts its sub-agent functions in one): each
//!   function is offered under its own name (`namespace__name` when that name is taken), and a
//!   call comes back as a `function_call` with `name` and `namespace` apart.
//! - `custom` tools take free text instead of JSON (Codex's `apply_patch`, whose input follows
//!   a Lark grammar): offered as a function of one string argument `input`, with the grammar in
//!   its description; a call comes back as a `custom_tool_call` whose `input` is that string.
//! - Hosted tools — `web_search`, `file_search`, `code_interpreter`, `image_generation`,
//!   `computer_use_preview`, `mcp`, `tool_search`, `local_shell`, … — run on OpenAI's servers,
//!   which this server is not: they are left out of the prompt, named in the request's log line
//!   and in an `x-ridge-dropped-tools` response header, never refused (Codex always offers its
//!   web search, turned off with `external_web_access: false`, and would otherwise fail).

use serde_json::{json, Value};

use crate::error::ApiError;

/// One offered tool: the name the model sees and what it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    presented: String,
    name: String,
    namespace: Option<String>,
    custom: bool,
}

/// The offered tools, for naming calls both ways.
#[derive(Clone, Debug, Default)]
pub struct ToolMap {
    entries: Vec<Entry>,
}

/// A call as the Responses API names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedCall {
    /// The function's own name.
    pub name: String,
    /// The namespace it was offered in.
    pub namespace: Option<String>,
    /// A custom (free-text) tool: `arguments` is its raw input.
    pub custom: bool,
    /// JSON arguments (functions) or the raw input (custom tools).
    pub arguments: String,
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::invalid("tools", msg)
}

impl ToolMap {
    /// Translates `tools` into chat functions and the map that names their calls back.
    pub fn translate(tools: &Value) -> Result<(Value, ToolMap), ApiError> {
        let Value::Array(list) = tools else {
            return Err(invalid("`tools` must be an array"));
        };
        let mut offered: Vec<(Entry, Value)> = Vec::new();
        for (i, t) in list.iter().enumerate() {
            match t.get("type").and_then(Value::as_str) {
                Some("function") => offered.push(function(t, &format!("tools[{i}]"), None)?),
                Some("custom") => offered.push(custom(t, &format!("tools[{i}]"), None)?),
                Some("namespace") => {
                    let Some(ns) = t.get("name").and_then(Value::as_str) else {
                        return Err(invalid(format!("tools[{i}]: a namespace needs `name`")));
                    };
                    let Some(inner) = t.get("tools").and_then(Value::as_array) else {
                        return Err(invalid(format!("tools[{i}]: a namespace needs `tools`")));
                    };
                    for (j, f) in inner.iter().enumerate() {
                        let at = format!("tools[{i}].tools[{j}]");
                        match f.get("type").and_then(Value::as_str) {
                            Some("function") => offered.push(function(f, &at, Some(ns))?),
                            Some("custom") => offered.push(custom(f, &at, Some(ns))?),
                            _ => {
                                return Err(invalid(format!(
                                    "{at}: a namespace holds function and custom tools"
                                )))
                            }
                        }
                    }
                }
                Some(hosted) => crate::access_log::note_dropped_tool(hosted),
                None => return Err(invalid(format!("tools[{i}] needs `type`"))),
            }
        }
        // A namespaced function keeps its own name unless another tool has it.
        let mut entries: Vec<Entry> = offered.iter().map(|(e, _)| e.clone()).collect();
        for k in 0..entries.len() {
            let taken = entries
                .iter()
                .enumerate()
                .any(|(j, e)| j != k && e.name == entries[k].name);
            if let (true, Some(ns)) = (taken, &entries[k].namespace) {
                entries[k].presented = format!("{ns}__{}", entries[k].name);
            }
        }
        for k in 0..entries.len() {
            if entries[..k]
                .iter()
                .any(|e| e.presented == entries[k].presented)
            {
                return Err(invalid(format!(
                    "two tools are named `{}`",
                    entries[k].presented
                )));
            }
        }
        let functions = offered
            .into_iter()
            .zip(&entries)
            .map(|((_, mut f), e)| {
                f["function"]["name"] = json!(e.presented);
                f
            })
            .collect();
        Ok((Value::Array(functions), ToolMap { entries }))
    }

    /// The name the model knows a tool by (`name` in `namespace`).
    pub fn presented(&self, namespace: Option<&str>, name: &str) -> String {
        self.entries
            .iter()
            .find(|e| e.name == name && e.namespace.as_deref() == namespace)
            .map_or_else(|| name.to_string(), |e| e.presented.clone())
    }

    /// A call the model made (under a presented name), as the Responses API names it.
    pub fn call(&self, presented: &str, arguments: &str) -> NamedCall {
        match self.entries.iter().find(|e| e.presented == presented) {
            Some(e) if e.custom => NamedCall {
                name: e.name.clone(),
                namespace: e.namespace.clone(),
                custom: true,
                arguments: serde_json::from_str::<Value>(arguments)
                    .ok()
                    .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_default(),
            },
            Some(e) => NamedCall {
                name: e.name.clone(),
                namespace: e.namespace.clone(),
                custom: false,
                arguments: arguments.to_string(),
            },
            None => NamedCall {
                name: presented.to_string(),
                namespace: None,
                custom: false,
                arguments: arguments.to_string(),
            },
        }
    }

    /// `tool_choice` under presented names (a hosted tool's choice becomes `auto`).
    pub fn choice(&self, c: &Value) -> Result<Value, ApiError> {
        let bad = || {
            ApiError::invalid(
                "tool_choice",
                "`tool_choice` must be none, auto, required or {\"type\": \"function\", \"name\": …}",
            )
        };
        match c {
            Value::String(_) => Ok(c.clone()),
            Value::Object(o) => match (o.get("type").and_then(Value::as_str), o.get("name")) {
                (Some("function" | "custom"), Some(Value::String(n))) => {
                    let ns = o.get("namespace").and_then(Value::as_str);
                    Ok(json!({"type": "function", "function": {"name": self.presented(ns, n)}}))
                }
                (Some("function" | "custom"), _) | (None, _) => Err(bad()),
                // `allowed_tools` and hosted tools' choices: the model picks among what is
                // offered.
                (Some(_), _) => Ok(json!("auto")),
            },
            _ => Err(bad()),
        }
    }
}

fn function(t: &Value, at: &str, ns: Option<&str>) -> Result<(Entry, Value), ApiError> {
    let Some(name) = t.get("name").and_then(Value::as_str) else {
        return Err(invalid(format!(
            "{at} must be {{\"type\": \"function\", \"name\": …}}"
        )));
    };
    let mut func = json!({"name": name});
    for k in ["description", "parameters", "strict"] {
        if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
            func[k] = v.clone();
        }
    }
    Ok((
        entry(name, ns, false),
        json!({"type": "function", "function": func}),
    ))
}

fn custom(t: &Value, at: &str, ns: Option<&str>) -> Result<(Entry, Value), ApiError> {
    let Some(name) = t.get("name").and_then(Value::as_str) else {
        return Err(invalid(format!("{at}: a custom tool needs `name`")));
    };
    let mut description = t
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(f) = t.get("format").filter(|f| f["type"] == "grammar") {
        let syntax = f["syntax"].as_str().unwrap_or("lark");
        if let Some(def) = f["definition"].as_str() {
            description.push_str(&format!(
                "\n\nThe `input` string must follow this {syntax} grammar:\n{def}"
            ));
        }
    }
    let func = json!({
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The tool's raw input."}},
            "required": ["input"],
        },
    });
    Ok((
        entry(name, ns, true),
        json!({"type": "function", "function": func}),
    ))
}

fn entry(name: &str, ns: Option<&str>, custom: bool) -> Entry {
    Entry {
        presented: name.to_string(),
        name: name.to_string(),
        namespace: ns.map(str::to_string),
        custom,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_flatten_and_calls_come_back_named_apart() {
        let tools = json!([
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "agents", "tools": [
                {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
                {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]},
            {"type": "custom", "name": "apply_patch", "description": "Patch.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"x\""}},
            {"type": "web_search", "external_web_access": false},
        ]);
        let (f, map) = ToolMap::translate(&tools).unwrap();
        let names: Vec<&str> = f
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "exec_command",
                "spawn_agent",
                "multi_agent_v1__exec_command",
                "apply_patch"
            ]
        );
        let patch = &f[3]["function"];
        assert!(patch["description"]
            .as_str()
            .unwrap()
            .ends_with("lark grammar:\nstart: \"x\""));
        assert_eq!(patch["parameters"]["required"], json!(["input"]));
        assert_eq!(
            map.call("spawn_agent", "{\"a\":1}"),
            NamedCall {
                name: "spawn_agent".into(),
                namespace: Some("multi_agent_v1".into()),
                custom: false,
                arguments: "{\"a\":1}".into()
            }
        );
        assert_eq!(
            map.call("multi_agent_v1__exec_command", "{}")
                .namespace
                .as_deref(),
            Some("multi_agent_v1")
        );
        let c = map.call("apply_patch", "{\"input\":\"*** Begin Patch\"}");
        assert!(c.custom);
        assert_eq!(c.arguments, "*** Begin Patch");
        assert_eq!(map.call("unknown", "{}").name, "unknown");
        assert_eq!(
            map.presented(Some("multi_agent_v1"), "exec_command"),
            "multi_agent_v1__exec_command"
        );
        assert_eq!(map.presented(None, "exec_command"), "exec_command");
        assert_eq!(
            map.choice(
                &json!({"type": "function", "name": "exec_command", "namespace": "multi_agent_v1"})
            )
            .unwrap(),
            json!({"type": "function", "function": {"name": "multi_agent_v1__exec_command"}})
        );
        assert_eq!(
            map.choice(&json!({"type": "web_search"})).unwrap(),
            json!("auto")
        );
        assert!(map.choice(&json!({"type": "function"})).is_err());
    }

    #[test]
    fn malformed_tools_name_the_entry() {
        for (tools, needle) in [
            (json!({}), "must be an array"),
            (json!([{"name": "f"}]), "tools[0] needs `type`"),
            (json!([{"type": "function"}]), "tools[0] must be"),
            (json!([{"type": "namespace", "tools": []}]), "needs `name`"),
            (
                json!([{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]),
                "tools[0].tools[0]",
            ),
            (
                json!([{"type": "function", "name": "f"}, {"type": "custom", "name": "f"}]),
                "two tools are named `f`",
            ),
        ] {
            let e = ToolMap::translate(&tools).unwrap_err();
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
    }
}
