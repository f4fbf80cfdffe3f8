//! Anthropic's tool use on `/v1/messages`: its `tools` and `tool_choice` in the shape the
//! templates and [`crate::openai_tools::ToolMode`] take, its `tool_use` and `tool_result` blocks
//! as template messages, and the answer's calls as `tool_use` blocks.

use crate::error::ApiError;
use crate::new_id;
use crate::openai_tools::Choice;
use crate::tools::Call;
use serde_json::{Value, json};

/// Anthropic's tools (`[{"name", "description", "input_schema"}]`) as OpenAI's
/// (`[{"type": "function", "function": {"name", "description", "parameters"}}]`). Server tools
/// (a `type` other than `custom`) are refused.
pub fn openai_tools(tools: &[Value]) -> Result<Value, ApiError> {
    let bad = |m: String| ApiError::bad_request(m, Some("tools"));
    tools
        .iter()
        .map(|t| {
            if let Some(kind) = t.get("type").and_then(Value::as_str)
                && kind != "custom"
            {
                return Err(bad(format!(
                    "tools of type '{kind}' are not supported (only custom tools)"
                )));
            }
            let name = t["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("each tool needs a name".into()))?;
            let schema = &t["input_schema"];
            if !schema.is_object() {
                return Err(bad(format!("tool '{name}' needs an input_schema object")));
            }
            let mut f = json!({"name": name, "parameters": schema});
            if let Some(d) = t.get("description").filter(|d| d.is_string()) {
                f["description"] = d.clone();
            }
            Ok(json!({"type": "function", "function": f}))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// Anthropic's `tool_choice`: `{"type": "auto"|"any"|"none"}` or `{"type": "tool", "name": ...}`.
pub fn choice(v: Option<&Value>) -> Result<Choice, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Choice::Auto);
    };
    match (v["type"].as_str(), v["name"].as_str()) {
        (Some("auto"), _) => Ok(Choice::Auto),
        (Some("any"), _) => Ok(Choice::Required),
        (Some("none"), _) => Ok(Choice::None),
        (Some("tool"), Some(n)) => Ok(Choice::Named(n.to_string())),
        _ => Err(ApiError::bad_request(
            "tool_choice must be {\"type\": \"auto\"|\"any\"|\"none\"} or {\"type\": \"tool\", \"name\": ...}",
            Some("tool_choice"),
        )),
    }
}

/// `calls` as `tool_use` content blocks (inputs that are not objects become `{"value": ...}`:
/// Anthropic's inputs are objects).
pub fn tool_use_blocks(calls: &[Call]) -> Vec<Value> {
    calls
        .iter()
        .map(|c| {
            let input = match &c.arguments {
                Value::Object(_) => c.arguments.clone(),
                v => json!({"value": v}),
            };
            json!({"type": "tool_use", "id": new_id("toolu_"), "name": c.name, "input": input})
        })
        .collect()
}
