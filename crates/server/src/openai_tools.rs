//! OpenAI's tool calling on `/v1/chat/completions`: what `tools` and `tool_choice` ask for, and
//! the `tool_calls` of the answer ([`crate::tools`] finds them).

use crate::error::ApiError;
use crate::openai::Request;
use crate::tools::{self, Call, Syntax};
use crate::{State, new_id};
use serde_json::{Value, json};
use template::{Content, Message, ToolCall};

/// What a request's tool choice asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Choice {
    /// The model may call a tool or answer.
    Auto,
    /// No tools: they are left out of the prompt.
    None,
    /// One call to any of the tools.
    Required,
    /// One call to this tool.
    Named(String),
}

/// A chat request's tools, when it has some and its choice is not [`Choice::None`].
pub struct ToolMode {
    /// OpenAI-shaped (`[{"type": "function", "function": {...}}]`), for the chat template.
    pub tools: Value,
    /// The functions' names: only calls to these count.
    pub names: Vec<String>,
    /// A Lark grammar that forces one call ([`Choice::Required`] or [`Choice::Named`]).
    pub forced: Option<String>,
}

impl ToolMode {
    /// OpenAI's `tools` and `tool_choice` (`"none"`, `"auto"`, `"required"` or
    /// `{"type": "function", "function": {"name": ...}}`).
    pub fn of(state: &State, r: &Request) -> Result<Option<ToolMode>, ApiError> {
        let bad = |m: &str, p: &str| ApiError::bad_request(m, Some(p));
        let tools = match &r.tools {
            None | Some(Value::Null) => None,
            Some(t @ Value::Array(_)) => Some(t),
            Some(_) => return Err(bad("tools must be an array", "tools")),
        };
        if let Some(t) = tools
            && tools::names(t).len() != t.as_array().map_or(0, Vec::len)
        {
            return Err(bad(
                "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tools",
            ));
        }
        let choice = match &r.tool_choice {
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::String(s)) if s == "none" => Choice::None,
            Some(Value::String(s)) if s == "required" => Choice::Required,
            Some(v) if v["type"] == "function" && v["function"]["name"].is_string() => {
                Choice::Named(
                    v["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            }
            Some(_) => {
                return Err(bad(
                    "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tool_choice",
                ));
            }
        };
        ToolMode::new(state, tools.cloned(), choice, "tool_choice")
    }

    /// The mode for OpenAI-shaped `tools` (None or an empty array: no tools) and `choice`;
    /// `param` names the choice's field in errors.
    pub fn new(
        state: &State,
        tools: Option<Value>,
        choice: Choice,
        param: &str,
    ) -> Result<Option<ToolMode>, ApiError> {
        let bad = |m: &str| ApiError::bad_request(format!("{param}: {m}"), Some(param));
        let tools = tools.filter(|t| t.as_array().is_some_and(|a| !a.is_empty()));
        let only = match choice {
            Choice::None => return Ok(None),
            Choice::Auto => None,
            Choice::Required => Some(None),
            Choice::Named(ref n) => Some(Some(n.as_str())),
        };
        let Some(tools) = tools else {
            return match only {
                None => Ok(None),
                Some(_) => Err(bad(
                    "the tool choice asks for a call but there are no tools",
                )),
            };
        };
        let forced = match only {
            None => None,
            Some(name) => {
                let syntax = Syntax::of_template(state.template.source());
                let open = match state.tok.token_id("<tool_call>") {
                    Some(id) if state.tok.is_control(id) => format!("<[{id}]>"),
                    _ => "\"<tool_call>\"".to_string(),
                };
                let g = tools::forced_call(&tools, name, syntax, &open)
                    .ok_or_else(|| bad("the tool choice names a tool that is not in tools"))?;
                Some(g)
            }
        };
        Ok(Some(ToolMode {
            names: tools::names(&tools),
            tools,
            forced,
        }))
    }
}

/// `calls` as a message's `tool_calls` (with `index`, as stream deltas carry them, when
/// `indexed`); each gets a fresh id.
pub fn tool_calls_json(calls: &[Call], indexed: bool) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = json!({"id": new_id("call_"), "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments.to_string()}});
            if indexed {
                v["index"] = json!(i);
            }
            v
        })
        .collect()
}

/// `messages` as chat templates take them: the arguments of earlier calls as objects (OpenAI
/// clients send JSON strings; templates write them with `tojson`, so a string would come out
/// quoted and the model would imitate it), and an assistant turn that only made calls given a
/// text content: empty where the template writes `tool_calls` itself, else the calls as the
/// JSON lines molla parses (templates without tools would fail on a null content, or hide the
/// calls from the model).
pub fn for_template(messages: &[Message], template: &str) -> Vec<Message> {
    let writes_calls = template.contains("tool_calls");
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            for c in m.tool_calls.iter_mut().flatten() {
                let f = &c.function;
                *c = ToolCall {
                    kind: c.kind.clone(),
                    ..ToolCall::new(c.id.as_deref(), &f.name, f.arguments.clone())
                };
            }
            if m.content.is_none()
                && let Some(calls) = m.tool_calls.as_ref().filter(|c| !c.is_empty())
            {
                let text = if writes_calls {
                    String::new()
                } else {
                    let lines: Vec<String> = calls
                        .iter()
                        .map(|c| {
                            json!({"name": c.function.name, "arguments": c.function.arguments})
                                .to_string()
                        })
                        .collect();
                    lines.join("\n")
                };
                m.content = Some(Content::Text(text));
            }
            m
        })
        .collect()
}
