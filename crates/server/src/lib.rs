//! `molla serve`: an OpenAI- and Anthropic-compatible HTTP server over one model.
//!
//! The engine ([`engine`]) runs on its own thread and owns the backend; requests are queued
//! (bounded: a full queue answers 503; FIFO with per-client fairness, and a free slot already
//! holding the prompt's prefix preferred) and up to `parallel` sequences generate at once,
//! batched step by step (continuous batching). The HTTP layer ([`routes`], [`openai`],
//! [`anthropic`]) parses, renders the chat template, tokenizes and turns the engine's events
//! into JSON or SSE. [`serve`] runs the app on a TCP listener with the connection limits;
//! [`limits`] holds the per-request ones.

pub mod answer;
pub mod anthropic;
pub mod anthropic_stream;
pub mod anthropic_tools;
pub mod backend;
pub mod constrain;
pub mod embeddings;
pub mod engine;
pub mod error;
pub mod generate;
pub mod limits;
pub mod metrics;
pub mod ollama;
pub mod openai;
pub mod openai_stream;
pub mod openai_tools;
pub mod pace;
pub mod reasoning;
pub mod responses;
pub mod responses_stream;
pub mod routes;
pub mod seq;
pub mod serve;
pub mod sse;
pub mod tools;

pub use backend::{Device, device_for};
pub use error::{ApiError, ServerError};
pub use routes::app;
pub use serve::serve;

use backend::Backend;
use constrain::{Constraint, Format, Grammars};
use engine::{Done, Engine, Event, Job, SubmitError};
use metrics::Metrics;
use model::Model;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use template::{ChatTemplate, Message};
use tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedReceiver;

/// Server settings besides the model.
#[derive(Clone, Debug)]
pub struct Config {
    /// Context size in tokens (0: the model's training context, at most 8192).
    pub ctx: usize,
    pub device: Device,
    /// Required as `Authorization: Bearer KEY` or `x-api-key: KEY` when set.
    pub api_key: Option<String>,
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// Sequences generating at once (slots, each with a KV cache of up to `ctx` positions).
    pub parallel: usize,
    /// KV cache blocks ([`cpu::BLOCK_POSITIONS`] positions each) that the slots share on the
    /// CPU (0: `parallel` full contexts' worth). A request starts only when its prompt plus
    /// `max_tokens` fit in the blocks no running sequence may still need.
    pub kv_blocks: usize,
    /// Most prompt tokens one engine step prefills (a longer prompt takes several steps, so
    /// running sequences keep generating meanwhile).
    pub prefill_chunk: usize,
    /// Prompt chunks of at most this many tokens run as rows of the step's batched decode pass
    /// instead of a prefill pass of their own (0: never). Which path a chunk takes depends only
    /// on its length, so a request's output does not depend on the load. Meant for CUDA, where
    /// a short prompt prefilled alone is bound by its few hundred launches (~5 ms for 30
    /// tokens); on the CPU the prefill's matmuls beat rows of decode (30 tokens: 51 vs 93 ms).
    /// `None`: the backend's default, [`DEFAULT_MIX_MAX_CUDA`] on CUDA and 0 elsewhere.
    pub mix_max: Option<usize>,
    /// Largest request body in bytes.
    pub body_limit: usize,
    /// Generation requests (chat, completions, messages, embeddings) one client may have in
    /// flight, streams included; more get 429 (0: no cap). A client is the API key when the
    /// server requires one, else the peer's IP address ([`limits::client_id`]).
    pub max_per_client: usize,
    /// Longest a client may take to send a request's headers, and then its body (zero: no
    /// limit); a slower client is disconnected (headers) or answered 408 (body). Only the
    /// request is timed, never the generation or the stream that answers it.
    pub request_timeout: Duration,
    /// Connections open at once (0: no limit); further ones wait in the listen backlog until
    /// one closes. Idle keep-alive connections close after `request_timeout`.
    pub max_connections: usize,
    /// `device` is `auto`'s choice: a model of a family the GPU backends do not run goes to the
    /// CPU instead ([`backend::device_for`]).
    pub auto_device: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ctx: 0,
            device: Device::Cpu,
            api_key: None,
            queue: 64,
            parallel: 1,
            kv_blocks: 0,
            prefill_chunk: 512,
            mix_max: None,
            body_limit: 4 << 20,
            max_per_client: 8,
            request_timeout: Duration::from_secs(30),
            max_connections: 512,
            auto_device: false,
        }
    }
}

/// The KV block pool's size: `cfg.kv_blocks`, or `parallel` full contexts; an error when it
/// cannot hold one full context (a request the server accepts could never start).
fn kv_blocks(cfg: &Config, ctx: usize, parallel: usize) -> Result<usize, ServerError> {
    let one = cpu::KvPool::blocks_for(ctx);
    match cfg.kv_blocks {
        0 => Ok(one * parallel),
        n if n < one => Err(ServerError::Config(format!(
            "--kv-blocks {n} cannot hold one context of {ctx} tokens ({one} blocks of {})",
            cpu::BLOCK_POSITIONS
        ))),
        n => Ok(n),
    }
}

/// What the handlers share.
pub struct State {
    pub engine: Engine,
    pub tok: Arc<Tokenizer>,
    pub template: ChatTemplate,
    /// The id `/v1/models` lists: the file name without `.gguf`.
    pub model_id: String,
    pub ctx: usize,
    pub api_key: Option<String>,
    pub body_limit: usize,
    /// Generation requests in flight per client ([`Config::max_per_client`]).
    pub client_slots: Arc<limits::ClientSlots>,
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub device_name: String,
    pub metrics: Arc<Metrics>,
    pub n_embd: usize,
    /// The model's architecture (`general.architecture`: llama, qwen2, ...).
    pub arch: &'static str,
    /// The grammar compiler for the model's vocabulary, built on the first constrained
    /// request (or why it could not be).
    pub grammars: OnceLock<Result<Arc<Grammars>, String>>,
}

pub type AppState = Arc<State>;

/// The model's chat template (ChatML when the file has none), with its BOS/EOS texts.
pub fn chat_template(model: &Model, tok: &Tokenizer) -> Result<ChatTemplate, ServerError> {
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_text(i).ok())
            .unwrap_or("")
            .to_string()
    };
    let source = model
        .file
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str());
    let (bos, eos) = (piece(tok.bos()), piece(tok.eos()));
    // Without a template, a vocabulary with Gemma's turn markers gets Gemma's format (ChatML
    // markers would be plain text to it), any other ChatML.
    if source.is_none_or(|s| s.trim().is_empty()) && tok.token_id("<start_of_turn>").is_some() {
        return Ok(ChatTemplate::gemma(&bos, &eos));
    }
    Ok(ChatTemplate::from_metadata(source, &bos, &eos)?)
}

/// Most messages one chat request may hold (OpenAI's and Anthropic's routes): a clear 400
/// before any template work, rather than when the template hits its fuel or output cap.
pub const MAX_MESSAGES: usize = 4096;

/// Most stop strings one request may give, and the longest one in bytes: every generated token
/// is checked against all of them on the engine thread, which all requests share (a megabyte
/// of stop strings would cost ~10 ms a token).
pub const MAX_STOPS: usize = 16;
pub const MAX_STOP_BYTES: usize = 512;

/// A 400 naming `param` when `stops` are too many or one is too long.
pub fn check_stops(stops: &[String], param: &str) -> Result<(), ApiError> {
    if stops.len() > MAX_STOPS {
        return Err(ApiError::bad_request(
            format!(
                "{param} holds {} strings; at most {MAX_STOPS} are accepted",
                stops.len()
            ),
            Some(param),
        ));
    }
    if let Some(s) = stops.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad_request(
            format!(
                "{param}: a stop string of {} bytes is longer than {MAX_STOP_BYTES}",
                s.len()
            ),
            Some(param),
        ));
    }
    Ok(())
}

/// A 400 when a request holds more than [`MAX_MESSAGES`] messages.
pub fn check_message_count(n: usize) -> Result<(), ApiError> {
    if n > MAX_MESSAGES {
        return Err(ApiError::bad_request(
            format!("messages holds {n} messages; at most {MAX_MESSAGES} are accepted"),
            Some("messages"),
        ));
    }
    Ok(())
}

/// The context size to use: `requested`, or with 0 the model's training context capped at 8192.
pub fn context_size(model: &Model, requested: usize) -> usize {
    match requested {
        0 => model.hp.n_ctx_train.clamp(1, 8192),
        n => n,
    }
}

/// `--mix-max` on CUDA when none is given: H200, SmolLM2 Q4_1, 64 streams of 64 tokens
/// (docs/bench/serve-cuda-2026-12-01-s7.md): 4198 tok/s without mixing, 5686-6328 with it.
pub const DEFAULT_MIX_MAX_CUDA: usize = 64;

impl State {
    /// Loads the GGUF file at `path` and starts the engine.
    pub fn load(path: &Path, cfg: &Config) -> Result<State, ServerError> {
        let model = Model::open(path)?;
        let model_id = path
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
            .unwrap_or_else(|| "model".into());
        State::from_model(model, model_id, cfg)
    }

    pub fn from_model(model: Model, model_id: String, cfg: &Config) -> Result<State, ServerError> {
        let tok = Arc::new(Tokenizer::from_gguf(&model.file)?);
        let template = chat_template(&model, &tok)?;
        let ctx = context_size(&model, cfg.ctx);
        let device = backend::device_for(&model, cfg.device, cfg.auto_device);
        let model_arch = model.arch.name;
        let backend = Backend::new(model, device)?;
        let device_name = backend.device_name();
        let mix = cfg.mix_max.unwrap_or(backend.default_mix_max());
        let n_embd = backend.hparams().n_embd;
        let arch = model_arch;
        let parallel = cfg.parallel.max(1);
        let metrics = Arc::new(Metrics::new(parallel));
        let engine = Engine::start(
            backend,
            tok.clone(),
            engine::Sizes {
                ctx,
                queue: cfg.queue,
                parallel,
                chunk: cfg.prefill_chunk,
                mix,
                kv_blocks: kv_blocks(cfg, ctx, parallel)?,
            },
            metrics.clone(),
        )?;
        Ok(State {
            engine,
            tok,
            template,
            model_id,
            ctx,
            api_key: cfg.api_key.clone(),
            body_limit: cfg.body_limit,
            client_slots: limits::ClientSlots::new(cfg.max_per_client),
            request_timeout: cfg.request_timeout,
            max_connections: cfg.max_connections,
            device_name,
            metrics,
            n_embd,
            arch,
            grammars: OnceLock::new(),
        })
    }

    /// `format` compiled for the model: a 400 naming `param` when it cannot be (a schema or
    /// expression llguidance rejects, one too large, one that admits no output).
    pub fn constraint(&self, format: &Format, param: &str) -> Result<Constraint, ApiError> {
        let size = match format {
            Format::JsonObject => 0,
            Format::JsonSchema(v) => serde_json::to_string(v).map_or(usize::MAX, |s| s.len()),
            Format::Regex(s) | Format::Lark(s) => s.len(),
        };
        if size > constrain::MAX_GRAMMAR_BYTES {
            return Err(ApiError::bad_request(
                format!(
                    "{param} is {size} bytes; at most {} are accepted",
                    constrain::MAX_GRAMMAR_BYTES
                ),
                Some(param),
            ));
        }
        let grammars = self
            .grammars
            .get_or_init(|| Grammars::new(self.tok.clone()).map(Arc::new))
            .as_ref()
            .map_err(|e| ApiError::bad_request(e.clone(), Some(param)))?;
        grammars
            .compile(format)
            .map_err(|e| ApiError::bad_request(format!("{param}: {e}"), Some(param)))
    }

    /// Renders `messages` with the chat template and tokenizes the result (special tokens
    /// parsed; BOS added where the model asks for it and the template did not write it).
    pub fn chat_prompt(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
    ) -> Result<Vec<u32>, ApiError> {
        self.render_chat(messages, tools, None, None)
            .map(|(ids, _)| ids)
    }

    /// [`chat_prompt`](Self::chat_prompt) with the request's `chat_template_kwargs` (Qwen3's
    /// `enable_thinking`, ...), and how to read its answer for thoughts: None when there are
    /// none to split (the template writes no `<think>`, or `reasoning_format` is `none`), else
    /// whether the prompt opened `<think>` itself.
    pub fn render_chat(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
        reasoning_format: Option<&str>,
    ) -> Result<(Vec<u32>, Option<bool>), ApiError> {
        let text = self
            .template
            .render_with(messages, tools, true, kwargs)
            .map_err(|e| ApiError::bad_request(e.to_string(), Some("messages")))?;
        let splits =
            reasoning_format != Some("none") && reasoning::template_thinks(self.template.source());
        Ok((
            generate::tokenize_chat(&self.tok, &text),
            splits.then(|| reasoning::prompt_opens(&text)),
        ))
    }

    /// Checks the prompt fits, caps `max_tokens` to the context left, and queues the job.
    pub fn submit(&self, mut job: Job, param: &str) -> Result<UnboundedReceiver<Event>, ApiError> {
        if job.prompt.is_empty() {
            return Err(ApiError::bad_request(
                "the prompt is empty after tokenization",
                Some(param),
            ));
        }
        if job.prompt.len() >= self.ctx {
            let mut e = ApiError::bad_request(
                format!(
                    "the prompt ({} tokens) does not fit the context of {} tokens",
                    job.prompt.len(),
                    self.ctx
                ),
                Some(param),
            );
            e.code = Some("context_length_exceeded");
            return Err(e);
        }
        job.max_tokens = job.max_tokens.min(self.ctx - job.prompt.len());
        job.client = routes::CLIENT.try_with(Clone::clone).ok();
        sampler::Sampler::new(job.sampling.clone(), self.tok.n_vocab())
            .map_err(|e| ApiError::bad_request(e.to_string(), None))?;
        self.engine.submit(job).map_err(|e| match e {
            SubmitError::Full => ApiError::busy(),
            SubmitError::Gone => ApiError::internal(ServerError::EngineGone.to_string()),
        })
    }
}

/// [`State::constraint`] off the async threads (the first builds the vocabulary's trie, and a
/// large schema takes a while to compile).
pub async fn compile_constraint(
    state: &AppState,
    format: Format,
    param: &'static str,
) -> Result<Constraint, ApiError> {
    let st = state.clone();
    tokio::task::spawn_blocking(move || st.constraint(&format, param))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

/// The constraint a request asks for, compiled: a `format` (with the field that gave it) or a
/// call `forced` by its tool choice (a grammar, [`openai_tools::ToolMode`]); both at once is a
/// 400 naming `tool_choice`.
pub async fn request_constraint(
    state: &AppState,
    format: Option<(Format, &'static str)>,
    forced: Option<String>,
) -> Result<Option<Constraint>, ApiError> {
    let (format, param) = match (format, forced) {
        (Some((_, field)), Some(_)) => {
            return Err(ApiError::bad_request(
                format!("a tool_choice that forces a call and {field} cannot both hold"),
                Some("tool_choice"),
            ));
        }
        (Some(f), None) => f,
        (None, Some(g)) => (Format::Lark(g), "tool_choice"),
        (None, None) => return Ok(None),
    };
    compile_constraint(state, format, param).await.map(Some)
}

/// Waits for a job to end: its whole text and how it finished.
pub async fn collect(rx: UnboundedReceiver<Event>) -> Result<(String, Done), ApiError> {
    collect_all(rx).await.map(|(text, _, done)| (text, done))
}

/// Waits for a job to end: its whole text, the log-probabilities of its tokens (when the job
/// asked for them), and how it finished.
pub async fn collect_all(
    mut rx: UnboundedReceiver<Event>,
) -> Result<(String, Vec<seq::TokenLogprob>, Done), ApiError> {
    let mut text = String::new();
    let mut lps = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Token(t) => lps.push(t),
            Event::Done(d) => return Ok((text, lps, d)),
            Event::Error(e) => return Err(ApiError::internal(e)),
        }
    }
    Err(ApiError::internal(ServerError::EngineGone.to_string()))
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh id with `prefix` (unique within this process, unpredictable enough for ids).
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}{:x}{n:04x}", t ^ (std::process::id() as u64) << 40)
}
