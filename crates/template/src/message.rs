//! Chat messages as transformers' templates see them (OpenAI-style dicts).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One chat message: the `messages[i]` a template reads.
///
/// Serialized with the fields in this order (`role`, `content`, `name`, `tool_calls`,
/// `tool_call_id`, then `extra` in its own order); fields that are `None` are left out,
/// so the template sees them as undefined, as with a Python dict lacking the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, or whatever the template accepts.
    pub role: String,
    /// A string, or a list of typed parts. Absent for an assistant turn that only calls
    /// tools (OpenAI's `null` deserializes to `None` as well).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// The tool's name on a `tool` message (some templates print it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Calls made by an assistant turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// On a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Any other keys (e.g. `reasoning_content`), passed through to the template.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A message's content: plain text or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// `"content": "text"`
    Text(String),
    /// `"content": [{"type": "text", "text": "..."}, ...]`
    Parts(Vec<ContentPart>),
}

/// One typed part of a message's content, e.g. `{"type": "text", "text": "hi"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// `text`, `image`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Other keys of the part (an image's url, ...), passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call made by the assistant, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, echoed by the `tool` message that answers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `function` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// What is called.
    pub function: FunctionCall,
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// The arguments. HF templates expect an object (they `tojson` it); OpenAI clients
    /// send a JSON string, which callers should parse first (see [`ToolCall::new`]).
    pub arguments: Value,
}

impl ToolCall {
    /// A function call; `arguments` given as a JSON string (OpenAI's wire form) is parsed
    /// into an object when it parses, and kept as a string otherwise.
    pub fn new(id: Option<&str>, name: &str, arguments: Value) -> Self {
        let arguments = match arguments {
            Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
            v => v,
        };
        ToolCall {
            id: id.map(str::to_string),
            kind: function_kind(),
            function: FunctionCall {
                name: name.to_string(),
                arguments,
            },
        }
    }
}

fn function_kind() -> String {
    "function".to_string()
}

impl Message {
    /// A message with a role and text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: Some(Content::Text(content.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            extra: Map::new(),
        }
    }

    /// An assistant turn that calls tools and says nothing.
    pub fn assistant_tool_calls(calls: Vec<ToolCall>) -> Self {
        Message {
            content: None,
            tool_calls: Some(calls),
            ..Message::new("assistant", "")
        }
    }

    /// A `tool` message answering the call `tool_call_id` of the function `name`.
    pub fn tool_result(tool_call_id: &str, name: &str, content: impl Into<String>) -> Self {
        Message {
            name: Some(name.to_string()),
            tool_call_id: Some(tool_call_id.to_string()),
            ..Message::new("tool", content)
        }
    }

    /// The text of the content: the string itself, or the `text` parts joined with
    /// `"\n"` (other parts are dropped); `None` when there is no content.
    pub fn text(&self) -> Option<String> {
        match self.content.as_ref()? {
            Content::Text(s) => Some(s.clone()),
            Content::Parts(parts) => Some(join_text_parts(parts)),
        }
    }
}

/// The `text` of the text parts, joined with `"\n"`: what a template that cannot read
/// parts gets instead of them.
pub fn join_text_parts(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter(|p| p.kind == "text")
        .filter_map(|p| p.text.as_deref())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_messages_deserialize() {
        let m: Message = serde_json::from_value(json!({
            "role": "assistant", "content": null, "reasoning_content": "hmm",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]
        }))
        .unwrap();
        assert_eq!(m.content, None);
        assert_eq!(m.extra["reasoning_content"], "hmm");
        let call = &m.tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.function.arguments, json!("{\"a\": 1}")); // as sent; see ToolCall::new
        assert_eq!(
            ToolCall::new(Some("c1"), "f", call.function.arguments.clone())
                .function
                .arguments,
            json!({"a": 1})
        );
        let parts: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "b"}
        ]}))
        .unwrap();
        assert_eq!(parts.text().unwrap(), "a\nb");
    }

    #[test]
    fn serializes_in_field_order_without_absent_fields() {
        let m = Message::tool_result("c1", "f", "42");
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"role":"tool","content":"42","name":"f","tool_call_id":"c1"}"#
        );
        let calls =
            Message::assistant_tool_calls(vec![ToolCall::new(None, "g", json!({"z": 1, "a": 2}))]);
        assert_eq!(
            serde_json::to_string(&calls).unwrap(),
            r#"{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"g","arguments":{"z":1,"a":2}}}]}"#
        );
    }
}
