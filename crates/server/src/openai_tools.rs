//! OpenAI's tool calling on `/v1/chat/completions`: what `tools` and `tool_choice` ask for, and
//! the `tool_calls` of the answer ([`crate::tools`] finds them).

use crate::error::ApiError;
use crate::openai::Request;
use crate::tools::{self, Call, Syntax};
use crate::{State, new_id};
use serde_json::{Value, json};
use template::{Content, Message, ToolCall};

/// A chat request's tools, when it has some and `tool_choice` is not `"none"`.
pub struct ToolMode<'r> {
    /// OpenAI-shaped, for the chat template.
    pub tools: &'r Value,
    /// The functions' names: only calls to these count.
    pub names: Vec<String>,
    /// A Lark grammar that forces one call (`tool_choice` `"required"` or a named function).
    pub forced: Option<String>,
}

impl<'r> ToolMode<'r> {
    pub fn of(state: &State, r: &'r Request) -> Result<Option<ToolMode<'r>>, ApiError> {
        let bad = |m: &str, p: &str| ApiError::bad_request(m, Some(p));
        let tools = match &r.tools {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) if a.is_empty() => None,
            Some(t @ Value::Array(_)) => Some(t),
            Some(_) => return Err(bad("tools must be an array", "tools")),
        };
        let names = tools.map(tools::names).unwrap_or_default();
        if tools.is_some() && names.len() != tools.and_then(Value::as_array).map_or(0, Vec::len) {
            return Err(bad(
                "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tools",
            ));
        }
        let only = match &r.tool_choice {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "auto" => None,
            Some(Value::String(s)) if s == "none" => return Ok(None),
            Some(Value::String(s)) if s == "required" => Some(None),
            Some(v) if v["type"] == "function" && v["function"]["name"].is_string() => {
                Some(v["function"]["name"].as_str())
            }
            Some(_) => {
                return Err(bad(
                    "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tool_choice",
                ));
            }
        };
        let Some(tools) = tools else {
            return match only {
                None => Ok(None),
                Some(_) => Err(bad(
                    "tool_choice asks for a call but there are no tools",
                    "tool_choice",
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
                let g = tools::forced_call(tools, name, syntax, &open).ok_or_else(|| {
                    bad(
                        "tool_choice names a function that is not in tools",
                        "tool_choice",
                    )
                })?;
                Some(g)
            }
        };
        Ok(Some(ToolMode {
            tools,
            names,
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
