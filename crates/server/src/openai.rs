//! OpenAI's `/v1/chat/completions` and `/v1/completions`, plain and streamed.

use crate::constrain::Format;
use crate::engine::{Done, Finish, Job};
use crate::error::{ApiError, parse_json};
use crate::openai_tools::{ToolMode, tool_calls_json};
use crate::routes::body;
use crate::seq::TokenLogprob;
use crate::{AppState, collect_all, new_id, now};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use sampler::SamplerConfig;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use std::collections::HashMap;
use template::Message;
use tokenizer::Tokenizer;

/// Most choices one request may ask for (`n`): each is a sequence of its own in the engine.
pub const MAX_N: u32 = 16;

/// Most alternatives `top_logprobs` (chat) or `logprobs` (completions) may ask for.
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// `logprobs`: a flag on chat, a count of alternatives on completions.
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
pub enum LogprobsParam {
    Flag(bool),
    Count(u32),
}

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

/// The body of both routes (each checks that its own required field is there). A field
/// neither API defines is a 400 (as OpenAI answers); fields they define that molla does not act
/// on are listed as [`IgnoredAny`] and accepted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub logprobs: Option<LogprobsParam>,
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    /// Token id (as a string) to a bias added to its logit (-100 bans it, 100 forces it).
    pub logit_bias: Option<HashMap<String, f32>>,
    /// llama.cpp's: keep generating past end-of-generation tokens (they are banned).
    #[serde(default)]
    pub ignore_eos: bool,
    /// llama.cpp's: locally typical sampling mass (1: off).
    pub typical_p: Option<f32>,
    /// llama.cpp's: how many recent tokens the penalties see (-1: all, 0: none).
    pub repeat_last_n: Option<i32>,
    /// Completions: only `false` (the prompt is not echoed).
    pub echo: Option<bool>,
    /// Completions: only 1.
    pub best_of: Option<u32>,
    /// Completions: only null or empty.
    pub suffix: Option<String>,
    /// `{"type": "text"}`, `{"type": "json_object"}` (llama.cpp's: with a `schema`) or
    /// `{"type": "json_schema", "json_schema": {"schema": {...}, ...}}`.
    pub response_format: Option<ResponseFormat>,
    /// llama.cpp's: the output is JSON valid under this schema.
    pub json_schema: Option<Value>,
    /// vLLM's: the output is JSON valid under this schema.
    pub guided_json: Option<Value>,
    /// vLLM's: the output matches this regular expression.
    pub guided_regex: Option<String>,
    /// llama.cpp's: `"none"` leaves a reasoning model's `<think>` thoughts in the content
    /// (otherwise they come as `reasoning_content`).
    pub reasoning_format: Option<String>,
    /// llama.cpp's and vLLM's: extra variables for the chat template (e.g. Qwen3's
    /// `{"enable_thinking": false}`).
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    // Defined by OpenAI, accepted and ignored:
    pub user: Option<IgnoredAny>,
    pub metadata: Option<IgnoredAny>,
    pub store: Option<IgnoredAny>,
    pub service_tier: Option<IgnoredAny>,
    pub parallel_tool_calls: Option<IgnoredAny>,
    /// `"none"`, `"auto"` (the default), `"required"` or `{"type": "function", "function":
    /// {"name": ...}}`: the last two force a call (a grammar written for the template's syntax).
    pub tool_choice: Option<Value>,
    pub functions: Option<IgnoredAny>,
    pub function_call: Option<IgnoredAny>,
    pub reasoning_effort: Option<IgnoredAny>,
    pub verbosity: Option<IgnoredAny>,
    pub modalities: Option<IgnoredAny>,
    pub prediction: Option<IgnoredAny>,
    pub prompt_cache_key: Option<IgnoredAny>,
    pub safety_identifier: Option<IgnoredAny>,
    pub web_search_options: Option<IgnoredAny>,
    pub audio: Option<IgnoredAny>,
    /// llama.cpp's prompt cache switch (molla keeps no prompt cache yet).
    pub cache_prompt: Option<IgnoredAny>,
}

#[derive(Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    /// With `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
    /// llama.cpp's, with `json_object`.
    pub schema: Option<Value>,
}

/// OpenAI's `response_format.json_schema`.
#[derive(Deserialize)]
pub struct JsonSchemaFormat {
    pub schema: Option<Value>,
    // Accepted: the output is held to the schema whatever `strict` says.
    pub name: Option<IgnoredAny>,
    pub description: Option<IgnoredAny>,
    pub strict: Option<IgnoredAny>,
}

impl Request {
    /// The job for `prompt`, checking the fields against a vocabulary of `vocab` tokens whose
    /// end-of-generation ids are `eog`.
    fn job(
        &self,
        prompt: Vec<u32>,
        kind: Kind,
        vocab: usize,
        eog: &[u32],
    ) -> Result<Job, ApiError> {
        if self.n.is_some_and(|n| !(1..=MAX_N).contains(&n)) {
            return Err(ApiError::bad_request(
                format!("n must be between 1 and {MAX_N}"),
                Some("n"),
            ));
        }
        let logprobs = self.logprobs(kind)?;
        let range = |v: Option<f32>, name: &str, lo: f32, hi: f32| match v {
            Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::bad_request(
                format!("{name} must be between {lo} and {hi}"),
                Some(name),
            )),
            _ => Ok(()),
        };
        range(self.temperature, "temperature", 0.0, f32::MAX)?;
        range(self.top_p, "top_p", 0.0, 1.0)?;
        range(self.min_p, "min_p", 0.0, 1.0)?;
        range(self.frequency_penalty, "frequency_penalty", -2.0, 2.0)?;
        range(self.presence_penalty, "presence_penalty", -2.0, 2.0)?;
        range(self.typical_p, "typical_p", 0.0, 1.0)?;
        let unsupported = |ok: bool, name: &str, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(ApiError::bad_request(
                    format!("{name}: {what} is not supported"),
                    Some(name),
                ))
            }
        };
        unsupported(self.echo != Some(true), "echo", "echoing the prompt")?;
        unsupported(
            self.best_of.is_none_or(|b| b == 1),
            "best_of",
            "best_of > 1",
        )?;
        unsupported(
            matches!(kind, Kind::Text) || self.suffix.as_deref().is_none_or(str::is_empty),
            "suffix",
            "a suffix on chat completions",
        )?;
        let mut logit_bias = Vec::new();
        for (id, &bias) in self.logit_bias.iter().flatten() {
            let bad = |m: String| ApiError::bad_request(m, Some("logit_bias"));
            let id: u32 = id
                .parse()
                .map_err(|_| bad(format!("'{id}' is not a token id")))?;
            if id as usize >= vocab {
                return Err(bad(format!("token id {id} is out of the vocabulary")));
            }
            if !(-100.0..=100.0).contains(&bias) {
                return Err(bad(format!("bias {bias} is not between -100 and 100")));
            }
            logit_bias.push((id, bias));
        }
        if self.ignore_eos {
            logit_bias.extend(eog.iter().map(|&id| (id, f32::NEG_INFINITY)));
        }
        let d = SamplerConfig::default();
        let stops = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        crate::check_stops(&stops, "stop")?;
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
                typical_p: self.typical_p.unwrap_or(d.typical_p),
                penalty_last_n: self.repeat_last_n.unwrap_or(d.penalty_last_n),
                logit_bias,
            },
            logprobs,
            client: None,
            constraint: None,
            special_text: false,
        })
    }

    /// What the output must be, if the request says (`response_format`, llama.cpp's
    /// `json_schema`, vLLM's `guided_json` or `guided_regex`; at most one of them), and the
    /// field that said it.
    fn format(&self) -> Result<Option<(Format, &'static str)>, ApiError> {
        let mut found = Vec::new();
        if let Some(f) = &self.response_format {
            let p = "response_format";
            let bad = |m: &str| Err(ApiError::bad_request(m, Some(p)));
            match (f.kind.as_str(), &f.json_schema, &f.schema) {
                ("text", None, None) => {}
                ("json_object", None, None) => found.push((Format::JsonObject, p)),
                ("json_object", None, Some(s)) => found.push((Format::JsonSchema(s.clone()), p)),
                ("json_schema", Some(j), None) => {
                    // No schema: any JSON value.
                    let s = j.schema.clone().unwrap_or_else(|| json!({}));
                    found.push((Format::JsonSchema(s), p));
                }
                ("json_schema", None, _) => return bad("response_format.json_schema is missing"),
                ("text" | "json_object" | "json_schema", _, _) => {
                    return bad("response_format has fields its type does not take");
                }
                (other, _, _) => {
                    return Err(ApiError::bad_request(
                        format!(
                            "response_format type '{other}' is not supported (text, json_object, json_schema)"
                        ),
                        Some(p),
                    ));
                }
            }
        }
        if let Some(s) = &self.json_schema {
            found.push((Format::JsonSchema(s.clone()), "json_schema"));
        }
        if let Some(s) = &self.guided_json {
            found.push((Format::JsonSchema(s.clone()), "guided_json"));
        }
        if let Some(r) = &self.guided_regex {
            found.push((Format::Regex(r.clone()), "guided_regex"));
        }
        if found.len() > 1 {
            let names: Vec<_> = found.iter().map(|f| f.1).collect();
            return Err(ApiError::bad_request(
                format!("give at most one of {}", names.join(", ")),
                Some(found[1].1),
            ));
        }
        Ok(found.pop())
    }

    /// How many alternatives to report per token, if logprobs are wanted: chat takes
    /// `logprobs: true` with `top_logprobs: k`, completions `logprobs: k`.
    fn logprobs(&self, kind: Kind) -> Result<Option<usize>, ApiError> {
        let (k, param) = match (kind, self.logprobs) {
            (_, None) | (Kind::Chat, Some(LogprobsParam::Flag(false))) => {
                if self.top_logprobs.is_some_and(|k| k > 0) {
                    return Err(ApiError::bad_request(
                        "top_logprobs needs logprobs: true",
                        Some("top_logprobs"),
                    ));
                }
                return Ok(None);
            }
            (Kind::Chat, Some(LogprobsParam::Flag(true))) => {
                (self.top_logprobs.unwrap_or(0), "top_logprobs")
            }
            (Kind::Text, Some(LogprobsParam::Count(k))) => (k, "logprobs"),
            (Kind::Chat, Some(LogprobsParam::Count(_))) => {
                return Err(ApiError::bad_request(
                    "logprobs must be a boolean here (use top_logprobs for a count)",
                    Some("logprobs"),
                ));
            }
            (Kind::Text, Some(LogprobsParam::Flag(_))) => {
                return Err(ApiError::bad_request(
                    "logprobs must be an integer (alternatives per token) here",
                    Some("logprobs"),
                ));
            }
        };
        if k > MAX_TOP_LOGPROBS {
            return Err(ApiError::bad_request(
                format!("{param} must be at most {MAX_TOP_LOGPROBS}"),
                Some(param),
            ));
        }
        Ok(Some(k as usize))
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

pub fn usage(d: &Done) -> Value {
    json!({
        "prompt_tokens": d.prompt_tokens,
        "completion_tokens": d.completion_tokens,
        "total_tokens": d.prompt_tokens + d.completion_tokens,
        // As OpenAI reports prompt caching: part of prompt_tokens, not prefilled again.
        "prompt_tokens_details": {"cached_tokens": d.cached_tokens},
    })
}

/// Which of the two routes: shapes the responses.
#[derive(Clone, Copy)]
pub enum Kind {
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
    crate::check_message_count(messages.len())?;
    let tools = ToolMode::of(&state, &r)?;
    let messages = crate::openai_tools::for_template(messages, state.template.source());
    let (prompt, think) = state.render_chat(
        &messages,
        tools.as_ref().map(|t| &t.tools),
        r.chat_template_kwargs.as_ref(),
        r.reasoning_format.as_deref(),
    )?;
    respond(&state, &r, prompt, Kind::Chat, "messages", tools, think).await
}

/// Fill in the middle: the prompt before the cursor and the `suffix` after it, in the model's
/// FIM tokens (prefix, suffix, middle: the order Qwen2.5-Coder, StarCoder, CodeLlama and
/// DeepSeek-Coder were trained on, and llama.cpp's `/infill`), so the model writes what goes
/// between (ending at its end-of-text or FIM padding token).
pub(crate) fn fim_prompt(
    tok: &Tokenizer,
    prefix: &str,
    suffix: &str,
) -> Result<Vec<u32>, ApiError> {
    let ids = tok.special_ids();
    let (Some(pre), Some(suf), Some(mid)) = (ids.fim_pre, ids.fim_suf, ids.fim_mid) else {
        return Err(ApiError::bad_request(
            "this model has no fill-in-the-middle tokens, so it cannot take a suffix",
            Some("suffix"),
        ));
    };
    let mut out = Vec::new();
    if tok.add_bos() {
        out.extend(tok.bos());
    }
    out.push(pre);
    out.extend(tok.encode(prefix, false, false));
    out.push(suf);
    out.extend(tok.encode(suffix, false, false));
    out.push(mid);
    Ok(out)
}

pub async fn completions(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let r: Request = parse_json(&body(b)?)?;
    let suffix = r.suffix.as_deref().filter(|s| !s.is_empty());
    let prompt = match r.prompt.as_ref().ok_or_else(|| missing("prompt"))? {
        Prompt::Text(t) if suffix.is_some() => fim_prompt(&state.tok, t, suffix.unwrap_or(""))?,
        Prompt::Texts(v) if v.len() == 1 && suffix.is_some() => {
            fim_prompt(&state.tok, &v[0], suffix.unwrap_or(""))?
        }
        Prompt::Tokens(_) if suffix.is_some() => {
            return Err(ApiError::bad_request(
                "a suffix needs a text prompt",
                Some("suffix"),
            ));
        }
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
    if r.tools.is_some() {
        return Err(ApiError::bad_request(
            "tools are taken by /v1/chat/completions only",
            Some("tools"),
        ));
    }
    respond(&state, &r, prompt, Kind::Text, "prompt", None, None).await
}

async fn respond(
    state: &AppState,
    r: &Request,
    prompt: Vec<u32>,
    kind: Kind,
    param: &str,
    tools: Option<ToolMode>,
    think: Option<bool>,
) -> Result<Response, ApiError> {
    let mut job = r.job(prompt, kind, state.tok.n_vocab(), state.tok.eog_ids())?;
    let forced = tools.as_ref().and_then(|t| t.forced.clone());
    job.constraint = crate::request_constraint(state, r.format()?, forced).await?;
    job.special_text = tools.is_some();
    let names = tools.map(|t| t.names);
    let wants_logprobs = job.logprobs.is_some();
    // n choices: n sequences, seeds one apart when the request gives one.
    let mut rxs = Vec::new();
    for i in 0..r.n.unwrap_or(1) {
        let mut j = job.clone();
        j.sampling.seed = job.sampling.seed.map(|s| s.wrapping_add(u64::from(i)));
        rxs.push(state.submit(j, param)?);
    }
    let id = new_id(match kind {
        Kind::Chat => "chatcmpl-",
        Kind::Text => "cmpl-",
    });
    let model = r.model.clone().unwrap_or_else(|| state.model_id.clone());
    let created = now();
    if r.stream {
        let chunks = crate::openai_stream::Chunks {
            kind,
            id,
            model,
            created,
            include_usage: r.include_usage(),
            tok: state.tok.clone(),
            names,
            think,
        };
        return Ok(crate::openai_stream::stream(rxs, chunks));
    }
    let mut choices = Vec::new();
    let mut dones = Vec::new();
    for (index, rx) in rxs.into_iter().enumerate() {
        let (text, lps, done) = collect_all(rx).await?;
        let (thoughts, text, calls) = crate::answer::read_whole(text, names.as_deref(), think);
        let lp = if wants_logprobs {
            logprobs_json(&state.tok, kind, &lps, &mut 0)
        } else {
            Value::Null
        };
        choices.push(match kind {
            Kind::Chat if !calls.is_empty() => json!({
                "index": index,
                "message": {"role": "assistant", "content": (!text.is_empty()).then_some(text),
                            "tool_calls": tool_calls_json(&calls, false)},
                "logprobs": lp,
                "finish_reason": "tool_calls",
            }),
            Kind::Chat => json!({
                "index": index,
                "message": {"role": "assistant", "content": text},
                "logprobs": lp,
                "finish_reason": finish_reason(done.finish),
            }),
            Kind::Text => json!({
                "index": index,
                "text": text,
                "logprobs": lp,
                "finish_reason": finish_reason(done.finish),
            }),
        });
        if let Some(t) = thoughts {
            choices.last_mut().expect("pushed")["message"]["reasoning_content"] = json!(t);
        }
        dones.push(done);
    }
    let object = match kind {
        Kind::Chat => "chat.completion",
        Kind::Text => "text_completion",
    };
    Ok(Json(json!({
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(&crate::openai_stream::combined(&dones)),
    }))
    .into_response())
}

/// A token's text as the client sees it (invalid UTF-8 of a partial character replaced) and its
/// bytes.
fn piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_to_piece(id).unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// The `logprobs` object of a choice for `lps`: chat's `{"content": [...]}` or completions'
/// parallel lists; `offset` is the completion text's length before these tokens (advanced).
pub fn logprobs_json(
    tok: &Tokenizer,
    kind: Kind,
    lps: &[TokenLogprob],
    offset: &mut usize,
) -> Value {
    match kind {
        Kind::Chat => {
            let entry = |id: u32, lp: f32| {
                let (text, bytes) = piece(tok, id);
                json!({"token": text, "logprob": lp, "bytes": bytes})
            };
            let content: Vec<Value> = lps
                .iter()
                .map(|t| {
                    let mut e = entry(t.id, t.logprob);
                    e["top_logprobs"] = t.top.iter().map(|&(i, l)| entry(i, l)).collect();
                    e
                })
                .collect();
            json!({"content": content, "refusal": null})
        }
        Kind::Text => {
            let mut tokens = Vec::new();
            let mut offsets = Vec::new();
            let mut tops = Vec::new();
            for t in lps {
                let text = piece(tok, t.id).0;
                offsets.push(*offset);
                *offset += text.len();
                tokens.push(text);
                let top: serde_json::Map<String, Value> = t
                    .top
                    .iter()
                    .map(|&(i, l)| (piece(tok, i).0, json!(l)))
                    .collect();
                tops.push(top);
            }
            let lp: Vec<f32> = lps.iter().map(|t| t.logprob).collect();
            json!({"tokens": tokens, "token_logprobs": lp, "top_logprobs": tops,
                   "text_offset": offsets})
        }
    }
}
