//! OpenAI's Responses API, `POST /v1/responses` (what the openai SDKs' `responses.create` and
//! `responses.stream` call): text or message items in, a response of output items out (an
//! assistant message, function calls), plain or as its typed event stream. Nothing is stored:
//! `previous_response_id` and background responses are refused with a 400.

use crate::constrain::Format;
use crate::engine::{Done, Finish, Job};
use crate::error::{ApiError, parse_json};
use crate::openai_tools::{Choice, ToolMode, for_template};
use crate::routes::body;
use crate::tools::Call;
use crate::{AppState, collect, new_id, now};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use sampler::SamplerConfig;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use template::{Message, ToolCall};

/// `input`: a text (one user message) or a list of items.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// A Responses request. A field the API does not define is a 400; fields it defines that molla
/// does not act on are accepted ([`IgnoredAny`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub model: Option<String>,
    pub input: Input,
    /// A system message before the input.
    pub instructions: Option<String>,
    pub max_output_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    #[serde(default)]
    pub stream: bool,
    /// Function tools: `[{"type": "function", "name", "description", "parameters"}]`.
    pub tools: Option<Vec<Value>>,
    /// `"auto"`, `"none"`, `"required"` or `{"type": "function", "name": ...}`.
    pub tool_choice: Option<Value>,
    /// `{"format": {"type": "text"|"json_object"|"json_schema", ...}}`.
    pub text: Option<Value>,
    /// Echoed in the response.
    pub metadata: Option<Value>,
    /// Refused: nothing is stored.
    pub previous_response_id: Option<String>,
    pub conversation: Option<Value>,
    pub background: Option<bool>,
    // Defined by the API, accepted and ignored:
    pub store: Option<IgnoredAny>,
    pub parallel_tool_calls: Option<IgnoredAny>,
    pub user: Option<IgnoredAny>,
    pub include: Option<IgnoredAny>,
    pub reasoning: Option<IgnoredAny>,
    pub service_tier: Option<IgnoredAny>,
    pub truncation: Option<IgnoredAny>,
    pub prompt_cache_key: Option<IgnoredAny>,
    pub safety_identifier: Option<IgnoredAny>,
    pub stream_options: Option<IgnoredAny>,
    pub max_tool_calls: Option<IgnoredAny>,
    pub top_logprobs: Option<IgnoredAny>,
}

fn bad(message: impl Into<String>, param: &str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// The text of a message item's `content`: a string, or `input_text` / `output_text` parts.
fn item_text(content: &Value) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
                (Some("input_text" | "output_text" | "text"), Some(t)) => Ok(t),
                (kind, _) => Err(bad(
                    format!(
                        "content parts of type '{}' are not supported",
                        kind.unwrap_or("?")
                    ),
                    "input",
                )),
            })
            .collect(),
        _ => Err(bad(
            "a message's content must be text or a list of parts",
            "input",
        )),
    }
}

/// The conversation as template messages: the instructions, then each input item (messages,
/// earlier function calls and their outputs).
fn chat_messages(r: &Request) -> Result<Vec<Message>, ApiError> {
    let mut msgs = Vec::new();
    if let Some(i) = &r.instructions {
        msgs.push(Message::new("system", i.as_str()));
    }
    let items = match &r.input {
        Input::Text(t) => return Ok([msgs, vec![Message::new("user", t.as_str())]].concat()),
        Input::Items(items) => items,
    };
    if items.is_empty() {
        return Err(bad("input must not be empty", "input"));
    }
    crate::check_message_count(items.len())?;
    for it in items {
        match (it["type"].as_str(), it["role"].as_str()) {
            (None | Some("message"), Some(role)) => {
                let role = match role {
                    "developer" => "system",
                    "user" | "assistant" | "system" => role,
                    other => return Err(bad(format!("role '{other}' is not supported"), "input")),
                };
                msgs.push(Message::new(role, item_text(&it["content"])?));
            }
            (Some("function_call"), _) => {
                let (Some(name), Some(id)) = (it["name"].as_str(), it["call_id"].as_str()) else {
                    return Err(bad("a function_call item needs name and call_id", "input"));
                };
                let call = ToolCall::new(Some(id), name, it["arguments"].clone());
                match msgs.last_mut() {
                    Some(m) if m.role == "assistant" => {
                        m.tool_calls.get_or_insert_default().push(call)
                    }
                    _ => {
                        let mut m = Message::new("assistant", "");
                        m.content = None;
                        m.tool_calls = Some(vec![call]);
                        msgs.push(m);
                    }
                }
            }
            (Some("function_call_output"), _) => {
                let id = it["call_id"].as_str().map(str::to_string);
                let out = match &it["output"] {
                    Value::String(s) => s.clone(),
                    v => item_text(v)?,
                };
                let m = crate::answer::tool_result(&msgs, id, out);
                msgs.push(m);
            }
            (kind, _) => {
                return Err(bad(
                    format!(
                        "input items of type '{}' are not supported",
                        kind.unwrap_or("?")
                    ),
                    "input",
                ));
            }
        }
    }
    Ok(msgs)
}

/// `text.format` as a constraint, if it asks for JSON.
fn format(text: Option<&Value>) -> Result<Option<Format>, ApiError> {
    let Some(f) = text.map(|t| &t["format"]).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match f["type"].as_str() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Format::JsonObject)),
        Some("json_schema") => match &f["schema"] {
            Value::Null => Err(bad("text.format.schema is missing", "text")),
            s => Ok(Some(Format::JsonSchema(s.clone()))),
        },
        _ => Err(bad(
            "text.format.type must be text, json_object or json_schema",
            "text",
        )),
    }
}

/// Function tools as the chat shape the templates and [`ToolMode`] take.
fn chat_tools(tools: &[Value]) -> Result<Value, ApiError> {
    tools
        .iter()
        .map(|t| match (t["type"].as_str(), t["name"].as_str()) {
            (Some("function"), Some(name)) => {
                let mut f = json!({"name": name, "parameters": t["parameters"]});
                if t["description"].is_string() {
                    f["description"] = t["description"].clone();
                }
                Ok(json!({"type": "function", "function": f}))
            }
            (Some("function"), None) => Err(bad("a function tool needs a name", "tools")),
            (kind, _) => Err(bad(
                format!(
                    "tools of type '{}' are not supported (only function tools)",
                    kind.unwrap_or("?")
                ),
                "tools",
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn choice(v: Option<&Value>) -> Result<Choice, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Choice::Auto),
        Some(Value::String(s)) if s == "auto" => Ok(Choice::Auto),
        Some(Value::String(s)) if s == "none" => Ok(Choice::None),
        Some(Value::String(s)) if s == "required" => Ok(Choice::Required),
        Some(v) if v["type"] == "function" && v["name"].is_string() => Ok(Choice::Named(
            v["name"].as_str().unwrap_or_default().to_string(),
        )),
        Some(_) => Err(bad(
            "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
            "tool_choice",
        )),
    }
}

/// What a response echoes of its request, and its identity.
pub struct Head {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub echo: Value,
}

impl Head {
    /// The response object with `status`, `output` and (once done) `usage`.
    pub fn response(&self, status: &str, output: Vec<Value>, done: Option<&Done>) -> Value {
        let mut v = json!({"id": self.id, "object": "response", "created_at": self.created,
                           "status": status, "error": null, "incomplete_details": null,
                           "model": self.model, "output": output, "usage": null});
        for (k, x) in self.echo.as_object().into_iter().flatten() {
            v[k] = x.clone();
        }
        if status == "incomplete" {
            v["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if let Some(d) = done {
            v["usage"] = json!({"input_tokens": d.prompt_tokens,
                                "input_tokens_details": {"cached_tokens": d.cached_tokens},
                                "output_tokens": d.completion_tokens,
                                "output_tokens_details": {"reasoning_tokens": 0},
                                "total_tokens": d.prompt_tokens + d.completion_tokens});
        }
        v
    }
}

pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}])
    } else {
        json!([])
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

/// A reasoning model's thoughts as an output item.
pub fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [],
           "content": [{"type": "reasoning_text", "text": text}]})
}

pub fn call_item(c: &Call, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": new_id("fc_"), "call_id": new_id("call_"),
           "name": c.name, "arguments": arguments, "status": status})
}

pub fn status(d: &Done, calls: bool) -> &'static str {
    match d.finish {
        Finish::Length | Finish::Cancelled if !calls => "incomplete",
        _ => "completed",
    }
}

pub async fn responses(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let r: Request = parse_json(&body(b)?)?;
    if r.previous_response_id.is_some() || r.conversation.is_some() {
        let p = if r.conversation.is_some() {
            "conversation"
        } else {
            "previous_response_id"
        };
        return Err(bad(
            "molla stores no responses: send the whole conversation as input",
            p,
        ));
    }
    if r.background == Some(true) {
        return Err(bad("background responses are not supported", "background"));
    }
    for (name, v, hi) in [("temperature", r.temperature, 2.0), ("top_p", r.top_p, 1.0)] {
        if v.is_some_and(|x| !(0.0..=hi).contains(&x)) {
            return Err(bad(format!("{name} must be between 0 and {hi}"), name));
        }
    }
    let msgs = chat_messages(&r)?;
    let tools = r.tools.as_deref().map(chat_tools).transpose()?;
    let tools = ToolMode::new(
        &state,
        tools,
        choice(r.tool_choice.as_ref())?,
        "tool_choice",
    )?;
    let msgs = for_template(&msgs, state.template.source());
    let (prompt, think) = state.render_chat(&msgs, tools.as_ref().map(|t| &t.tools), None, None)?;
    let format = format(r.text.as_ref())?.map(|f| (f, "text"));
    let forced = tools.as_ref().and_then(|t| t.forced.clone());
    let constraint = crate::request_constraint(&state, format, forced).await?;
    let d = SamplerConfig::default();
    let job = Job {
        prompt,
        max_tokens: r.max_output_tokens.unwrap_or(usize::MAX),
        stops: Vec::new(),
        // OpenAI's defaults: temperature 1, no truncation.
        sampling: SamplerConfig {
            temperature: r.temperature.unwrap_or(1.0),
            top_p: r.top_p.unwrap_or(1.0),
            top_k: 0,
            min_p: 0.0,
            ..d
        },
        logprobs: None,
        client: None,
        constraint,
        special_text: tools.is_some(),
    };
    let rx = state.submit(job, "input")?;
    let head = Head {
        id: new_id("resp_"),
        created: now(),
        model: r.model.clone().unwrap_or_else(|| state.model_id.clone()),
        echo: json!({"instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
                     "metadata": r.metadata.clone().unwrap_or_else(|| json!({})),
                     "parallel_tool_calls": true, "previous_response_id": null,
                     "temperature": r.temperature.unwrap_or(1.0), "top_p": r.top_p.unwrap_or(1.0),
                     "tool_choice": r.tool_choice.clone().unwrap_or_else(|| json!("auto")),
                     "tools": r.tools.clone().unwrap_or_default(),
                     "text": r.text.clone().unwrap_or_else(|| json!({"format": {"type": "text"}})),
                     "truncation": "disabled", "store": false}),
    };
    let names = tools.map(|t| t.names);
    if r.stream {
        let read = crate::answer::Reader::new(names, think);
        return Ok(crate::responses_stream::stream(rx, head, read));
    }
    let (text, done) = collect(rx).await?;
    let (thoughts, text, calls) = crate::answer::read_whole(text, names.as_deref(), think);
    let mut output: Vec<Value> = thoughts
        .map(|t| reasoning_item(&new_id("rs_"), &t))
        .into_iter()
        .collect();
    if !text.is_empty() || calls.is_empty() {
        output.push(message_item(&new_id("msg_"), &text, "completed"));
    }
    output.extend(
        calls
            .iter()
            .map(|c| call_item(c, &c.arguments.to_string(), "completed")),
    );
    let st = status(&done, !calls.is_empty());
    Ok(Json(head.response(st, output, Some(&done))).into_response())
}
