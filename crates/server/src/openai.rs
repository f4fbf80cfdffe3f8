//! OpenAI's `/v1/chat/completions` and `/v1/completions`, plain and streamed.

use crate::engine::{Done, Event, Finish, Job};
use crate::error::{ApiError, parse_json};
use crate::routes::body;
use crate::{AppState, collect, new_id, now, sse};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use sampler::SamplerConfig;
use serde::Deserialize;
use serde_json::{Value, json};
use template::Message;

/// `stop`: one string or several.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `prompt` of `/v1/completions`: text, or token ids.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

#[derive(Deserialize, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The body of both routes (each checks that its own required field is there).
#[derive(Deserialize)]
pub struct Request {
    pub model: Option<String>,
    pub messages: Option<Vec<Message>>,
    pub prompt: Option<Prompt>,
    pub tools: Option<Value>,
    pub max_tokens: Option<usize>,
    pub max_completion_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
}

impl Request {
    fn job(&self, prompt: Vec<u32>) -> Result<Job, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request("only n = 1 is supported", Some("n")));
        }
        let d = SamplerConfig::default();
        let stops = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        Ok(Job {
            prompt,
            max_tokens: self
                .max_completion_tokens
                .or(self.max_tokens)
                .unwrap_or(usize::MAX),
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            sampling: SamplerConfig {
                temperature: self.temperature.unwrap_or(d.temperature),
                top_p: self.top_p.unwrap_or(d.top_p),
                top_k: self.top_k.unwrap_or(d.top_k),
                min_p: self.min_p.unwrap_or(d.min_p),
                repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
                frequency_penalty: self.frequency_penalty.unwrap_or(d.frequency_penalty),
                presence_penalty: self.presence_penalty.unwrap_or(d.presence_penalty),
                seed: self.seed,
                ..d
            },
        })
    }

    fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

fn missing(field: &str) -> ApiError {
    ApiError::bad_request(format!("missing field `{field}`"), Some(field))
}

pub fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Eog | Finish::Stop => "stop",
        Finish::Length | Finish::Cancelled => "length",
    }
}

fn usage(d: &Done) -> Value {
    json!({
        "prompt_tokens": d.prompt_tokens,
        "completion_tokens": d.completion_tokens,
        "total_tokens": d.prompt_tokens + d.completion_tokens,
    })
}

/// Which of the two routes: shapes the responses.
#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Text,
}

pub async fn chat_completions(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let r: Request = parse_json(&body(b)?)?;
    let messages = r.messages.as_deref().ok_or_else(|| missing("messages"))?;
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "messages must not be empty",
            Some("messages"),
        ));
    }
    let prompt = state.chat_prompt(messages, r.tools.as_ref())?;
    respond(&state, &r, prompt, Kind::Chat, "messages").await
}

pub async fn completions(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let r: Request = parse_json(&body(b)?)?;
    let prompt = match r.prompt.as_ref().ok_or_else(|| missing("prompt"))? {
        Prompt::Text(t) => state.tok.encode(t, true, false),
        Prompt::Texts(v) if v.len() == 1 => state.tok.encode(&v[0], true, false),
        Prompt::Texts(_) => {
            return Err(ApiError::bad_request(
                "only one prompt per request is supported",
                Some("prompt"),
            ));
        }
        Prompt::Tokens(ids) => {
            if let Some(&bad) = ids.iter().find(|&&i| i as usize >= state.tok.n_vocab()) {
                return Err(ApiError::bad_request(
                    format!("token id {bad} is out of the vocabulary"),
                    Some("prompt"),
                ));
            }
            ids.clone()
        }
    };
    respond(&state, &r, prompt, Kind::Text, "prompt").await
}

async fn respond(
    state: &AppState,
    r: &Request,
    prompt: Vec<u32>,
    kind: Kind,
    param: &str,
) -> Result<Response, ApiError> {
    let job = r.job(prompt)?;
    let rx = state.submit(job, param)?;
    let id = new_id(match kind {
        Kind::Chat => "chatcmpl-",
        Kind::Text => "cmpl-",
    });
    let model = r.model.clone().unwrap_or_else(|| state.model_id.clone());
    let created = now();
    if r.stream {
        return Ok(stream(rx, kind, id, model, created, r.include_usage()));
    }
    let (text, done) = collect(rx).await?;
    let choice = match kind {
        Kind::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": null,
            "finish_reason": finish_reason(done.finish),
        }),
        Kind::Text => json!({
            "index": 0,
            "text": text,
            "logprobs": null,
            "finish_reason": finish_reason(done.finish),
        }),
    };
    let object = match kind {
        Kind::Chat => "chat.completion",
        Kind::Text => "text_completion",
    };
    Ok(Json(json!({
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(&done),
    }))
    .into_response())
}

fn stream(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
) -> Response {
    let (tx, resp) = sse::channel();
    let object = match kind {
        Kind::Chat => "chat.completion.chunk",
        Kind::Text => "text_completion",
    };
    let chunk = move |choice: Value| {
        json!({"id": id, "object": object, "created": created, "model": model,
               "choices": [choice]})
    };
    let piece = move |text: &str, finish: Option<&str>| match kind {
        Kind::Chat => {
            json!({"index": 0, "delta": if text.is_empty() { json!({}) } else { json!({"content": text}) },
                             "logprobs": null, "finish_reason": finish})
        }
        Kind::Text => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
    };
    tokio::spawn(async move {
        if let Kind::Chat = kind {
            let first = json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                               "logprobs": null, "finish_reason": null});
            if tx.send(sse::data(&chunk(first))).is_err() {
                return;
            }
        }
        while let Some(ev) = rx.recv().await {
            let sent = match ev {
                Event::Text(t) => tx.send(sse::data(&chunk(piece(&t, None)))),
                Event::Done(d) => {
                    let _ = tx.send(sse::data(&chunk(piece("", Some(finish_reason(d.finish))))));
                    if include_usage {
                        let mut last = chunk(json!(null));
                        last["choices"] = json!([]);
                        last["usage"] = usage(&d);
                        let _ = tx.send(sse::data(&last));
                    }
                    break;
                }
                Event::Error(e) => {
                    let _ = tx.send(sse::data(&ApiError::internal(e).body()));
                    break;
                }
            };
            if sent.is_err() {
                return;
            }
        }
        let _ = tx.send(sse::done());
    });
    resp
}
