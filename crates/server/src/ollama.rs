//! Ollama's API (`/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`, `/api/tags`,
//! `/api/show`, `/api/ps`, `/api/version`), for the tools and SDKs that speak it: answers as one
//! JSON object or, by default, as newline-delimited JSON chunks; `format` (`"json"` or a schema),
//! `tools`, `think` and the sampling `options`. Errors are Ollama's `{"error": "..."}`.

use crate::answer::Reader;
use crate::constrain::Format;
use crate::engine::{Done, Event, Finish, Job};
use crate::error::{ApiError, parse_json};
use crate::openai_tools::{Choice, ToolMode, for_template};
use crate::routes::body;
use crate::{AppState, now};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use sampler::SamplerConfig;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use std::time::Instant;
use template::Message;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// The sampling `options` molla acts on (the others, e.g. `num_ctx` or `num_gpu`, are the
/// server's to set and are ignored, as Ollama ignores options a model does not take).
#[derive(Deserialize, Default)]
pub struct Options {
    pub num_predict: Option<i64>,
    pub temperature: Option<f32>,
    pub top_k: Option<i32>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub typical_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Vec<String>>,
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<i32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    #[serde(default)]
    pub messages: Vec<Message>,
    pub tools: Option<Value>,
    pub format: Option<Value>,
    pub options: Option<Options>,
    #[serde(default = "yes")]
    pub stream: bool,
    pub think: Option<Value>,
    pub keep_alive: Option<IgnoredAny>,
}

#[derive(Deserialize)]
pub struct GenerateRequest {
    pub model: Option<String>,
    #[serde(default)]
    pub prompt: String,
    pub suffix: Option<String>,
    pub system: Option<String>,
    pub template: Option<String>,
    #[serde(default)]
    pub raw: bool,
    pub images: Option<Vec<Value>>,
    pub format: Option<Value>,
    pub options: Option<Options>,
    #[serde(default = "yes")]
    pub stream: bool,
    pub think: Option<Value>,
    pub context: Option<IgnoredAny>,
    pub keep_alive: Option<IgnoredAny>,
}

fn bad(m: impl Into<String>, p: &str) -> ApiError {
    ApiError::bad_request(m, Some(p)).ollama()
}

/// `format`: `"json"` (any JSON value) or a JSON schema.
fn format(f: Option<&Value>) -> Result<Option<Format>, ApiError> {
    match f {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(Format::JsonSchema(json!({})))),
        Some(s @ Value::Object(_)) => Ok(Some(Format::JsonSchema(s.clone()))),
        Some(_) => Err(bad("format must be \"json\" or a JSON schema", "format")),
    }
}

/// The job for `prompt` with `options` (Ollama's defaults: temperature 0.8, top-k 40, top-p 0.9,
/// no min-p, repeat penalty 1.1 over the last 64 tokens).
fn job(prompt: Vec<u32>, o: Option<Options>) -> Result<Job, ApiError> {
    let o = o.unwrap_or_default();
    let d = SamplerConfig::default();
    let max_tokens = match o.num_predict {
        None => usize::MAX,
        Some(n) if n < 0 => usize::MAX,
        Some(n) => n as usize,
    };
    let stops = o.stop.unwrap_or_default();
    crate::check_stops(&stops, "options.stop")?;
    Ok(Job {
        prompt,
        max_tokens,
        stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
        sampling: SamplerConfig {
            temperature: o.temperature.unwrap_or(0.8),
            top_k: o.top_k.unwrap_or(40),
            top_p: o.top_p.unwrap_or(0.9),
            min_p: o.min_p.unwrap_or(0.0),
            typical_p: o.typical_p.unwrap_or(d.typical_p),
            repeat_penalty: o.repeat_penalty.unwrap_or(1.1),
            penalty_last_n: o.repeat_last_n.unwrap_or(64),
            presence_penalty: o.presence_penalty.unwrap_or(d.presence_penalty),
            frequency_penalty: o.frequency_penalty.unwrap_or(d.frequency_penalty),
            seed: o.seed.map(|s| s as u64),
            ..d
        },
        logprobs: None,
        client: None,
        constraint: None,
        special_text: false,
    })
}

/// The template variables for `think`: false turns a reasoning model's thoughts off (its
/// template's `enable_thinking`), anything else leaves them on.
fn think_kwargs(think: Option<&Value>) -> Option<serde_json::Map<String, Value>> {
    matches!(think, Some(Value::Bool(false))).then(crate::reasoning::thinking_off)
}

/// RFC 3339 in UTC, as Ollama's `created_at`.
fn rfc3339(unix: u64) -> String {
    let (days, secs) = ((unix / 86400) as i64, unix % 86400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// What every chunk carries, and the timings of the final one.
struct Head {
    model: String,
    chat: bool,
    start: Instant,
    /// Newline-delimited chunks (else one object).
    stream: bool,
}

impl Head {
    fn chunk(
        &self,
        text: &str,
        thinking: Option<&str>,
        calls: Option<Value>,
        done: Option<(&Done, Instant)>,
    ) -> Value {
        let mut v =
            json!({"model": self.model, "created_at": rfc3339(now()), "done": done.is_some()});
        if self.chat {
            let mut m = json!({"role": "assistant", "content": text});
            if let Some(t) = thinking {
                m["thinking"] = json!(t);
            }
            if let Some(c) = calls {
                m["tool_calls"] = c;
            }
            v["message"] = m;
        } else {
            v["response"] = json!(text);
            if let Some(t) = thinking {
                v["thinking"] = json!(t);
            }
        }
        if let Some((d, first)) = done {
            let ns = |t: std::time::Duration| t.as_nanos() as u64;
            let end = Instant::now();
            v["done_reason"] = json!(match d.finish {
                Finish::Length | Finish::Cancelled => "length",
                Finish::Eog | Finish::Stop => "stop",
            });
            v["total_duration"] = json!(ns(end - self.start));
            v["load_duration"] = json!(0);
            v["prompt_eval_count"] = json!(d.prompt_tokens);
            v["prompt_eval_duration"] = json!(ns(first - self.start));
            v["eval_count"] = json!(d.completion_tokens);
            v["eval_duration"] = json!(ns(end - first));
        }
        v
    }
}

/// Ollama's tool calls: `[{"function": {"name", "arguments": {...}}}]`.
fn calls_json(calls: &[crate::tools::Call]) -> Option<Value> {
    (!calls.is_empty()).then(|| {
        calls
            .iter()
            .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
            .collect()
    })
}

/// Generates after prompt `ids` with the request's `options`, held to its `format`, and
/// answers: one object, or newline-delimited chunks.
async fn answer(
    state: &AppState,
    head: Head,
    ids: Vec<u32>,
    options: Option<Options>,
    fmt: Option<&Value>,
    tools: Option<ToolMode>,
    think: Option<bool>,
) -> Result<Response, ApiError> {
    let param = if head.chat { "messages" } else { "prompt" };
    let mut job = job(ids, options)?;
    let fmt = format(fmt)?.map(|f| (f, "format"));
    let forced = tools.as_ref().and_then(|t| t.forced.clone());
    job.constraint = crate::request_constraint(state, fmt, forced).await?;
    job.special_text = tools.is_some();
    let rx = state.submit(job, param)?;
    let read = Reader::new(tools.map(|t| t.names), think);
    if head.stream {
        return Ok(ndjson(rx, head, read));
    }
    let (mut text, mut thoughts, mut first) = (String::new(), String::new(), None);
    let mut read = read;
    let mut rx = rx;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => {
                first.get_or_insert_with(Instant::now);
                if let Some(t) = read.push(&t, &mut |r| {
                    thoughts.push_str(r);
                    true
                }) {
                    text.push_str(&t);
                }
            }
            Event::Token(_) => {}
            Event::Done(d) => {
                let (rest, calls) = read.finish(&mut |r| {
                    thoughts.push_str(r);
                    true
                });
                text.push_str(&rest);
                let th = (!thoughts.is_empty()).then_some(thoughts.trim());
                let first = first.unwrap_or_else(Instant::now);
                let v = head.chunk(&text, th, calls_json(&calls), Some((&d, first)));
                return Ok(Json(v).into_response());
            }
            Event::Error(e) => return Err(ApiError::internal(e).ollama()),
        }
    }
    Err(ApiError::internal(crate::ServerError::EngineGone.to_string()).ollama())
}

/// The answer as newline-delimited JSON chunks: text (and thoughts) as they come, then any tool
/// calls, then the final chunk with the counts and timings.
fn ndjson(mut rx: UnboundedReceiver<Event>, head: Head, mut read: Reader) -> Response {
    let (tx, brx) = unbounded_channel::<Result<Bytes, std::convert::Infallible>>();
    let send = |tx: &UnboundedSender<Result<Bytes, std::convert::Infallible>>, v: Value| {
        tx.send(Ok(Bytes::from(format!("{v}\n")))).is_ok()
    };
    tokio::spawn(async move {
        let mut first = None;
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Text(t) => {
                    first.get_or_insert_with(Instant::now);
                    let Some(t) =
                        read.push(&t, &mut |r| send(&tx, head.chunk("", Some(r), None, None)))
                    else {
                        return;
                    };
                    if !t.is_empty() && !send(&tx, head.chunk(&t, None, None, None)) {
                        return;
                    }
                }
                Event::Token(_) => {}
                Event::Done(d) => {
                    let (rest, calls) =
                        read.finish(&mut |r| send(&tx, head.chunk("", Some(r), None, None)));
                    if !rest.is_empty() || !calls.is_empty() {
                        send(&tx, head.chunk(&rest, None, calls_json(&calls), None));
                    }
                    let first = first.unwrap_or_else(Instant::now);
                    send(&tx, head.chunk("", None, None, Some((&d, first))));
                    return;
                }
                Event::Error(e) => {
                    send(&tx, json!({"error": e}));
                    return;
                }
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(brx));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// Parses the body as `R` and runs `f` on it with the time the request came; errors in
/// Ollama's shape.
async fn handle<R, F>(
    b: Result<Bytes, BytesRejection>,
    f: impl FnOnce(R, Instant) -> F,
) -> Result<Response, ApiError>
where
    R: serde::de::DeserializeOwned,
    F: std::future::Future<Output = Result<Response, ApiError>>,
{
    let start = Instant::now();
    let run = async {
        let r: R = parse_json(&body(b)?)?;
        f(r, start).await
    };
    run.await.map_err(ApiError::ollama)
}

/// POST /api/chat
pub async fn chat(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(b, |r, start| chat_inner(state, r, start)).await
}

async fn chat_inner(state: AppState, r: ChatRequest, start: Instant) -> Result<Response, ApiError> {
    if r.messages.is_empty() {
        // Ollama loads the model and answers done at once.
        let v = json!({"model": r.model.unwrap_or_else(|| state.model_id.clone()), "created_at": rfc3339(now()),
                       "message": {"role": "assistant", "content": ""}, "done_reason": "load", "done": true});
        return Ok(Json(v).into_response());
    }
    crate::check_message_count(r.messages.len())?;
    let mut msgs = r.messages.clone();
    for m in &mut msgs {
        if m.extra
            .get("images")
            .is_some_and(|i| i.as_array().is_some_and(|a| !a.is_empty()))
        {
            return Err(bad(
                "images are not supported (molla runs text models)",
                "messages",
            ));
        }
        if m.name.is_none()
            && let Some(n) = m.extra.get("tool_name").and_then(Value::as_str)
        {
            m.name = Some(n.to_string());
        }
    }
    let tools = ToolMode::new(&state, r.tools.clone(), Choice::Auto, "tools")?;
    let msgs = for_template(&msgs, state.template.source());
    let kwargs = think_kwargs(r.think.as_ref());
    let tools_json = tools.as_ref().map(|t| &t.tools);
    let (ids, think) = state.render_chat(&msgs, tools_json, kwargs.as_ref(), None)?;
    let head = Head {
        model: r.model.unwrap_or_else(|| state.model_id.clone()),
        chat: true,
        start,
        stream: r.stream,
    };
    answer(
        &state,
        head,
        ids,
        r.options,
        r.format.as_ref(),
        tools,
        think,
    )
    .await
}

/// POST /api/generate
pub async fn generate(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(b, |r, start| generate_inner(state, r, start)).await
}

async fn generate_inner(
    state: AppState,
    r: GenerateRequest,
    start: Instant,
) -> Result<Response, ApiError> {
    if r.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(bad(
            "images are not supported (molla runs text models)",
            "images",
        ));
    }
    if r.template.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(bad(
            "a Go template is not supported: send raw prompts with raw: true",
            "template",
        ));
    }
    let model = r.model.clone().unwrap_or_else(|| state.model_id.clone());
    if r.prompt.is_empty() && r.suffix.as_deref().is_none_or(str::is_empty) {
        let v = json!({"model": model, "created_at": rfc3339(now()), "response": "", "done_reason": "load", "done": true});
        return Ok(Json(v).into_response());
    }
    let (ids, think) = match (r.suffix.as_deref().filter(|s| !s.is_empty()), r.raw) {
        (Some(suffix), _) => (
            crate::openai::fim_prompt(&state.tok, &r.prompt, suffix)?,
            None,
        ),
        (None, true) => (state.tok.encode(&r.prompt, true, true), None),
        (None, false) => {
            let mut msgs = Vec::new();
            if let Some(s) = &r.system {
                msgs.push(Message::new("system", s.as_str()));
            }
            msgs.push(Message::new("user", r.prompt.as_str()));
            let kwargs = think_kwargs(r.think.as_ref());
            state.render_chat(&msgs, None, kwargs.as_ref(), None)?
        }
    };
    let head = Head {
        model,
        chat: false,
        start,
        stream: r.stream,
    };
    answer(&state, head, ids, r.options, r.format.as_ref(), None, think).await
}

#[derive(Deserialize)]
pub struct EmbedRequest {
    pub model: Option<String>,
    /// `/api/embed`: one text or several.
    pub input: Option<Value>,
    /// `/api/embeddings` (the older route): one text.
    pub prompt: Option<String>,
    pub truncate: Option<IgnoredAny>,
    pub options: Option<IgnoredAny>,
    pub keep_alive: Option<IgnoredAny>,
}

/// POST /api/embed (`{"embeddings": [[...]]}`) and /api/embeddings (`{"embedding": [...]}`).
async fn embed_any(
    state: AppState,
    r: EmbedRequest,
    start: Instant,
    legacy: bool,
) -> Result<Response, ApiError> {
    let texts: Vec<String> = match (&r.input, &r.prompt) {
        (Some(Value::String(s)), _) => vec![s.clone()],
        (Some(Value::Array(a)), _) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad("input must be text or a list of texts", "input"))
            })
            .collect::<Result<_, _>>()?,
        (None, Some(p)) => vec![p.clone()],
        _ => return Err(bad("input must be text or a list of texts", "input")),
    };
    let ids = texts
        .iter()
        .map(|t| state.tok.encode(t, true, false))
        .collect();
    let (vecs, tokens) = crate::embeddings::embed(&state, ids).await?;
    let model = r.model.unwrap_or_else(|| state.model_id.clone());
    let v = if legacy {
        json!({"embedding": vecs[0]})
    } else {
        json!({"model": model, "embeddings": vecs, "total_duration": start.elapsed().as_nanos() as u64,
               "load_duration": 0, "prompt_eval_count": tokens})
    };
    Ok(Json(v).into_response())
}

pub async fn embed(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(b, |r, start| embed_any(state, r, start, false)).await
}

pub async fn embeddings(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    handle(b, |r, start| embed_any(state, r, start, true)).await
}

/// The model as `/api/tags` and `/api/ps` list it.
fn model_entry(state: &AppState) -> Value {
    let name = format!("{}:latest", state.model_id);
    json!({"name": name, "model": name, "modified_at": rfc3339(now()), "size": 0, "digest": "",
           "details": details(state)})
}

fn details(state: &AppState) -> Value {
    json!({"parent_model": "", "format": "gguf", "family": state.arch, "families": [state.arch],
           "parameter_size": "", "quantization_level": ""})
}

/// GET /api/tags
pub async fn tags(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"models": [model_entry(&state)]}))
}

/// GET /api/ps
pub async fn ps(State(state): State<AppState>) -> Json<Value> {
    let mut m = model_entry(&state);
    m["expires_at"] = json!("9999-12-31T23:59:59Z");
    m["size_vram"] = json!(0);
    Json(json!({"models": [m]}))
}

/// GET /api/version
pub async fn version() -> Json<Value> {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}

/// POST /api/show: the model's template, details and what it can do.
pub async fn show(State(state): State<AppState>) -> Json<Value> {
    let src = state.template.source();
    let mut caps = vec!["completion"];
    if src.contains("tools") {
        caps.push("tools");
    }
    if crate::reasoning::template_thinks(src) {
        caps.push("thinking");
    }
    if state.tok.special_ids().fim_pre.is_some() {
        caps.push("insert");
    }
    Json(
        json!({"modelfile": "", "parameters": "", "template": src, "details": details(&state),
                "model_info": {"general.architecture": state.arch, "embedding_length": state.n_embd,
                               "context_length": state.ctx},
                "capabilities": caps, "modified_at": rfc3339(now())}),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_796_400_000 + 3661), "2026-12-04T17:01:01Z");
    }
}
