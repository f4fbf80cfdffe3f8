//! Anthropic's `/v1/messages`, plain and streamed; errors in Anthropic's shape.

use crate::engine::{Done, Event, Finish, Job};
use crate::error::{ApiError, parse_json};
use crate::routes::body;
use crate::{AppState, collect, new_id, sse};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use sampler::SamplerConfig;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use template::Message;

/// Text, or a list of content blocks (only `text` blocks are read).
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
    pub metadata: Option<IgnoredAny>,
    pub tools: Option<IgnoredAny>,
    pub tool_choice: Option<IgnoredAny>,
    pub thinking: Option<IgnoredAny>,
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
        msgs.push(Message::new(m.role.clone(), m.content.text()?));
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
        let prompt = state.chat_prompt(&msgs, None)?;
        Ok(Json(json!({ "input_tokens": prompt.len() })).into_response())
    };
    count().map_err(ApiError::anthropic)
}

fn stop_reason(d: &Done) -> &'static str {
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
    let prompt = state.chat_prompt(&msgs, None)?;
    let d = SamplerConfig::default();
    // Anthropic's defaults: temperature 1, no top-p/top-k truncation unless asked
    let job = Job {
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
        special_text: false,
    };
    let input_tokens = job.prompt.len();
    let rx = state.submit(job, "messages")?;
    let id = new_id("msg_");
    if r.stream {
        return Ok(stream(rx, id, r.model, input_tokens));
    }
    let (text, done) = collect(rx).await?;
    Ok(Json(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason(&done),
        "stop_sequence": done.stop,
        "usage": {"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens},
    }))
    .into_response())
}

fn stream(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    id: String,
    model: String,
    input_tokens: usize,
) -> Response {
    let (tx, resp) = sse::channel();
    let ev = |name: &str, v: Value| sse::named(name, &v);
    tokio::spawn(async move {
        let start = json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}});
        let opening = [
            ev("message_start", start),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}}),
            ),
            ev("ping", json!({"type": "ping"})),
        ];
        for e in opening {
            if tx.send(e).is_err() {
                return;
            }
        }
        while let Some(e) = rx.recv().await {
            match e {
                Event::Text(t) => {
                    let delta = json!({"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": t}});
                    if tx.send(ev("content_block_delta", delta)).is_err() {
                        return;
                    }
                }
                Event::Done(d) => {
                    let _ = tx.send(ev(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": 0}),
                    ));
                    let _ = tx.send(ev(
                        "message_delta",
                        json!({"type": "message_delta",
                               "delta": {"stop_reason": stop_reason(&d), "stop_sequence": d.stop},
                               "usage": {"output_tokens": d.completion_tokens}}),
                    ));
                    let _ = tx.send(ev("message_stop", json!({"type": "message_stop"})));
                    return;
                }
                Event::Token(_) => {}
                Event::Error(msg) => {
                    let _ = tx.send(ev("error", ApiError::internal(msg).anthropic().body()));
                    return;
                }
            }
        }
    });
    resp
}
