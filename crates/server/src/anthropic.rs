//! Anthropic's `/v1/messages`, plain and streamed; errors in Anthropic's shape.

use crate::anthropic_tools;
use crate::engine::{Done, Finish, Job};
use crate::error::{ApiError, parse_json};
use crate::openai_tools::ToolMode;
use crate::routes::body;
use crate::{AppState, collect, new_id};
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

/// Text, or a list of content blocks (`text`, and in the messages `tool_use` and `tool_result`).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
pub struct Block {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    /// `tool_use`: the call's id, the tool and its input.
    pub id: Option<String>,
    pub name: Option<String>,
    pub input: Option<Value>,
    /// `tool_result`: the call it answers, and what the tool gave.
    pub tool_use_id: Option<String>,
    pub content: Option<Box<Content>>,
    pub is_error: Option<bool>,
}

impl Content {
    fn text(&self) -> Result<String, ApiError> {
        match self {
            Content::Text(t) => Ok(t.clone()),
            Content::Blocks(b) => b
                .iter()
                .map(|b| match (b.kind.as_str(), &b.text) {
                    ("text", Some(t)) => Ok(t.as_str()),
                    (k, _) => Err(ApiError::bad_request(
                        format!("content blocks of type '{k}' are not supported"),
                        Some("messages"),
                    )),
                })
                .collect(),
        }
    }
}

impl Block {
    fn bad(&self) -> ApiError {
        ApiError::bad_request(
            format!(
                "content blocks of type '{}' are not supported here",
                self.kind
            ),
            Some("messages"),
        )
    }
}

#[derive(Deserialize)]
pub struct InMessage {
    pub role: String,
    pub content: Content,
}

/// A Messages request. A field the API does not define is a 400; fields it defines that molla
/// does not act on are accepted ([`IgnoredAny`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub model: String,
    pub messages: Vec<InMessage>,
    pub max_tokens: usize,
    pub system: Option<Content>,
    #[serde(default)]
    pub stop_sequences: Vec<String>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    #[serde(default)]
    pub stream: bool,
    // Defined by the Messages API, accepted and ignored:
    /// Custom tools: `[{"name", "description", "input_schema"}]`.
    pub tools: Option<Vec<Value>>,
    /// `{"type": "auto"|"any"|"none"}` or `{"type": "tool", "name": ...}`.
    pub tool_choice: Option<Value>,
    // Defined by the Messages API, accepted and ignored:
    pub metadata: Option<IgnoredAny>,
    /// `{"type": "disabled"}` asks a reasoning model's template not to think
    /// (`enable_thinking` false); otherwise its thoughts come as `thinking` blocks.
    pub thinking: Option<Value>,
    pub service_tier: Option<IgnoredAny>,
    pub container: Option<IgnoredAny>,
    pub mcp_servers: Option<IgnoredAny>,
    pub context_management: Option<IgnoredAny>,
    pub cache_control: Option<IgnoredAny>,
    pub output_config: Option<IgnoredAny>,
}

/// `/v1/messages/count_tokens`: the fields of a message request that shape the prompt.
/// Other fields of a message request are accepted and ignored.
#[derive(Deserialize)]
pub struct CountRequest {
    pub messages: Vec<InMessage>,
    pub system: Option<Content>,
    pub tools: Option<Vec<Value>>,
}

/// The conversation as template messages: the system prompt, then user/assistant turns.
fn chat_messages(
    system: Option<&Content>,
    messages: &[InMessage],
) -> Result<Vec<Message>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "messages must not be empty",
            Some("messages"),
        ));
    }
    crate::check_message_count(messages.len())?;
    let mut msgs = Vec::new();
    if let Some(s) = system {
        msgs.push(Message::new("system", s.text()?));
    }
    for m in messages {
        if m.role != "user" && m.role != "assistant" {
            return Err(ApiError::bad_request(
                format!("messages: role '{}' is not user or assistant", m.role),
                Some("messages"),
            ));
        }
        match (&m.content, m.role.as_str()) {
            (Content::Text(t), _) => msgs.push(Message::new(m.role.clone(), t.clone())),
            (Content::Blocks(b), "assistant") => msgs.push(assistant_turn(b)?),
            (Content::Blocks(b), _) => {
                let turn = user_turn(b, &msgs)?;
                msgs.extend(turn);
            }
        }
    }
    Ok(msgs)
}

/// An assistant turn of text and `tool_use` blocks: its text, and the calls as OpenAI-shaped
/// tool calls (the templates' form).
fn assistant_turn(blocks: &[Block]) -> Result<Message, ApiError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in blocks {
        match (b.kind.as_str(), &b.text, &b.name) {
            ("text", Some(t), _) => text.push_str(t),
            ("tool_use", _, Some(name)) => calls.push(ToolCall::new(
                b.id.as_deref(),
                name,
                b.input.clone().unwrap_or_else(|| json!({})),
            )),
            _ => return Err(b.bad()),
        }
    }
    let mut m = Message::new("assistant", text);
    if !calls.is_empty() {
        if m.content
            .as_ref()
            .is_some_and(|c| matches!(c, template::Content::Text(t) if t.is_empty()))
        {
            m.content = None;
        }
        m.tool_calls = Some(calls);
    }
    Ok(m)
}

/// A user turn of `tool_result` and text blocks: a `tool` message for each result (named after
/// the call it answers, found in `before`), then the text as a user message.
fn user_turn(blocks: &[Block], before: &[Message]) -> Result<Vec<Message>, ApiError> {
    let mut msgs = Vec::new();
    let mut text = String::new();
    for b in blocks {
        match (b.kind.as_str(), &b.text) {
            ("text", Some(t)) => text.push_str(t),
            ("tool_result", _) => {
                let mut out = match b.content.as_deref() {
                    None => String::new(),
                    Some(c) => c.text()?,
                };
                if b.is_error == Some(true) {
                    out = format!("Error: {out}");
                }
                msgs.push(crate::answer::tool_result(
                    before,
                    b.tool_use_id.clone(),
                    out,
                ));
            }
            _ => return Err(b.bad()),
        }
    }
    if !text.is_empty() || blocks.is_empty() {
        msgs.push(Message::new("user", text));
    }
    Ok(msgs)
}

/// POST /v1/messages/count_tokens: `{"input_tokens": N}` for the templated prompt.
pub async fn count_tokens(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let count = || -> Result<Response, ApiError> {
        let r: CountRequest = parse_json(&body(b)?)?;
        let msgs = chat_messages(r.system.as_ref(), &r.messages)?;
        let tools = r
            .tools
            .as_deref()
            .map(anthropic_tools::openai_tools)
            .transpose()?;
        let msgs = crate::openai_tools::for_template(&msgs, state.template.source());
        let tools = tools.filter(|t| t.as_array().is_some_and(|a| !a.is_empty()));
        let prompt = state.chat_prompt(&msgs, tools.as_ref())?;
        Ok(Json(json!({ "input_tokens": prompt.len() })).into_response())
    };
    count().map_err(ApiError::anthropic)
}

pub fn stop_reason(d: &Done) -> &'static str {
    match d.finish {
        Finish::Eog => "end_turn",
        Finish::Stop => "stop_sequence",
        Finish::Length | Finish::Cancelled => "max_tokens",
    }
}

pub async fn messages(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(state, b).await.map_err(ApiError::anthropic)
}

async fn handle(state: AppState, b: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let r: Request = parse_json(&body(b)?)?;
    let msgs = chat_messages(r.system.as_ref(), &r.messages)?;
    for (name, v) in [("temperature", r.temperature), ("top_p", r.top_p)] {
        if v.is_some_and(|x| !(0.0..=1.0).contains(&x)) {
            return Err(ApiError::bad_request(
                format!("{name} must be between 0 and 1"),
                Some(name),
            ));
        }
    }
    crate::check_stops(&r.stop_sequences, "stop_sequences")?;
    let tools = r
        .tools
        .as_deref()
        .map(anthropic_tools::openai_tools)
        .transpose()?;
    let choice = anthropic_tools::choice(r.tool_choice.as_ref())?;
    let tools = ToolMode::new(&state, tools, choice, "tool_choice")?;
    let msgs = crate::openai_tools::for_template(&msgs, state.template.source());
    let disabled = r.thinking.as_ref().is_some_and(|t| t["type"] == "disabled");
    let off = crate::reasoning::thinking_off();
    let kwargs = disabled.then_some(&off);
    let (prompt, think) =
        state.render_chat(&msgs, tools.as_ref().map(|t| &t.tools), kwargs, None)?;
    let d = SamplerConfig::default();
    // Anthropic's defaults: temperature 1, no top-p/top-k truncation unless asked
    let mut job = Job {
        prompt,
        max_tokens: r.max_tokens,
        stops: r.stop_sequences.clone(),
        sampling: SamplerConfig {
            temperature: r.temperature.unwrap_or(1.0),
            top_p: r.top_p.unwrap_or(1.0),
            top_k: r.top_k.unwrap_or(0),
            min_p: 0.0,
            ..d
        },
        logprobs: None,
        client: None,
        constraint: None,
        special_text: tools.is_some(),
    };
    let forced = tools.as_ref().and_then(|t| t.forced.clone());
    job.constraint = crate::request_constraint(&state, None, forced).await?;
    let names = tools.map(|t| t.names);
    let input_tokens = job.prompt.len();
    let rx = state.submit(job, "messages")?;
    let id = new_id("msg_");
    if r.stream {
        let read = crate::answer::Reader::new(names, think);
        return Ok(crate::anthropic_stream::stream(
            rx,
            id,
            r.model,
            input_tokens,
            read,
        ));
    }
    let (text, done) = collect(rx).await?;
    let (thoughts, text, calls) = crate::answer::read_whole(text, names.as_deref(), think);
    let mut content: Vec<Value> = thoughts
        .map(|t| json!({"type": "thinking", "thinking": t, "signature": ""}))
        .into_iter()
        .collect();
    let reason = if calls.is_empty() {
        content.push(json!({"type": "text", "text": text}));
        stop_reason(&done)
    } else {
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        content.extend(anthropic_tools::tool_use_blocks(&calls));
        "tool_use"
    };
    Ok(Json(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": done.stop,
        "usage": {"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens},
    }))
    .into_response())
}
