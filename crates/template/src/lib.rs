//! Chat templates: render a model's `tokenizer.chat_template` (Jinja, from GGUF metadata)
//! the way transformers' `apply_chat_template` does, in a sandbox.
//!
//! The template sees `messages`, `tools` (or `none`), `add_generation_prompt`,
//! `bos_token`, `eos_token` and `documents` (`none`), plus `raise_exception(msg)`,
//! `strftime_now(fmt)` (UTC) and transformers' `tojson`. Python string and dict methods
//! (`.strip()`, `.startswith()`, `.split()`, `.items()`, `.get()`, ...) come from
//! minijinja-contrib's pycompat.
//!
//! Sandbox: no loader (templates cannot read files), a fuel budget that bounds both the
//! steps a render takes and the data it builds, minijinja's recursion limit and a cap on
//! the output's size. Every failure is a [`TemplateError`] with a one-line message.
//!
//! No reference cycles: namespace attributes hold only plain data (strings, numbers, lists,
//! dicts; never a namespace or a loop object), checked as each value is stored, and `loop`
//! cannot be used as a value; so a template cannot make a value refer to itself and leak it
//! (`{% set ns.x = ns %}` was such a leak). The same check bounds how deep and how large a
//! value carried through a namespace can grow. See `setattr.rs` and `plain.rs`.
//!
//! A model without a template gets ChatML (`<|im_start|>{role}\n{content}<|im_end|>\n`
//! per message, then `<|im_start|>assistant\n` when a generation prompt is asked for),
//! as llama.cpp does; see [`ChatTemplate::chatml`].
//!
//! Content given as a list of parts reaches the template as is when the template renders
//! parts (probed once, at construction: see [`ChatTemplate::supports_content_parts`]);
//! otherwise each list's `text` parts are joined with `"\n"` into a string first.
//!
//! minijinja 3.1.0 charges no fuel when it materializes a list built by more than 32 nested
//! concatenations; such a list can only grow across loop iterations through a namespace,
//! where the plain-data check copies it and counts its items (`plain::MAX_ITEMS`), so
//! doubling a list (`{% set ns.l = ns.l + ns.l %}` in a loop) stops with an error.
//!
//! Templates emit special tokens (e.g. Gemma's `{{ bos_token }}`) as text, so the
//! tokenizer must parse special tokens in the rendered prompt and not add a second BOS.

mod env;
mod error;
mod message;
mod plain;
mod pyjson;
mod setattr;
mod strftime;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use minijinja::value::{Serde, Value};
use minijinja::{Environment, ErrorKind, context};

pub use error::TemplateError;
pub use message::{Content, ContentPart, FunctionCall, Message, ToolCall, join_text_parts};

use error::{describe, one_line};

/// The ChatML template used when a model has none.
pub const CHATML_TEMPLATE: &str = include_str!("chatml.jinja");

/// Gemma's turn format (`<start_of_turn>user ... <end_of_turn>`, the assistant as "model",
/// system text opening the first user turn): the fallback for a Gemma vocabulary without a
/// template in its metadata.
pub const GEMMA_TEMPLATE: &str = include_str!("gemma.jinja");

/// Text the parts probe looks for in the output.
const PARTS_PROBE: &str = "molla_content_probe";

/// Bounds on one render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// minijinja fuel: one unit per instruction, plus one per 64 bytes of data built or
    /// written. Qwen2.5's template spends under 200k rendering a 1 MiB prompt of 3000
    /// turns; the default (2M) leaves ten times that and stops nested `range(100000)`
    /// loops or string doubling within about 0.1 s. Raise it with `max_output_bytes`.
    pub fuel: u64,
    /// Largest output in bytes (default 1 MiB).
    pub max_output_bytes: usize,
    /// minijinja's recursion limit (nested blocks, macro calls); at most 500.
    pub recursion_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 2_000_000,
            max_output_bytes: 1 << 20,
            recursion_limit: 200,
        }
    }
}

/// A compiled chat template with the model's BOS/EOS strings.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos: String,
    eos: String,
    limits: Limits,
    clock: Arc<AtomicI64>,
    supports_parts: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("limits", &self.limits)
            .field("supports_parts", &self.supports_parts)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` (a Jinja chat template) with the model's BOS and EOS token text,
    /// under the default [`Limits`].
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self, TemplateError> {
        Self::with_limits(source, bos, eos, Limits::default())
    }

    /// Like [`ChatTemplate::new`] with explicit limits.
    pub fn with_limits(
        source: &str,
        bos: &str,
        eos: &str,
        limits: Limits,
    ) -> Result<Self, TemplateError> {
        let clock = Arc::new(AtomicI64::new(env::SYSTEM_CLOCK));
        let source = env::rewrite_generation_tags(source);
        let syntax = env::syntax().map_err(|e| TemplateError::Syntax(describe(&e, false, "")))?;
        let source = setattr::guard(&source, syntax).map_err(TemplateError::Syntax)?;
        let env = env::build(&source, &limits, clock.clone())
            .map_err(|e| TemplateError::Syntax(describe(&e, false, &source)))?;
        let (bos, eos) = (bos.to_string(), eos.to_string());
        let mut template = ChatTemplate {
            env,
            source,
            bos,
            eos,
            limits,
            clock,
            supports_parts: false,
        };
        template.supports_parts = template.probe_parts();
        Ok(template)
    }

    /// The ChatML fallback ([`CHATML_TEMPLATE`]) for a model without a template.
    pub fn chatml(bos: &str, eos: &str) -> Self {
        Self::new(CHATML_TEMPLATE, bos, eos).expect("the built-in ChatML template compiles")
    }

    /// The Gemma fallback ([`GEMMA_TEMPLATE`]) for a Gemma model without a template.
    pub fn gemma(bos: &str, eos: &str) -> Self {
        Self::new(GEMMA_TEMPLATE, bos, eos).expect("the built-in Gemma template compiles")
    }

    /// The model's template when its metadata has a non-empty one, else ChatML.
    pub fn from_metadata(
        source: Option<&str>,
        bos: &str,
        eos: &str,
    ) -> Result<Self, TemplateError> {
        match source {
            Some(s) if !s.trim().is_empty() => Self::new(s, bos, eos),
            _ => Ok(Self::chatml(bos, eos)),
        }
    }

    /// Pins `strftime_now` to `unix_seconds` (UTC), for reproducible prompts and tests.
    pub fn with_fixed_time(self, unix_seconds: i64) -> Self {
        self.clock
            .store(unix_seconds.max(env::SYSTEM_CLOCK + 1), Ordering::Relaxed);
        self
    }

    /// Whether the template renders content given as a list of parts (checked by
    /// rendering one user message whose content is a single text part). When it does
    /// not, parts are joined into a string before rendering.
    pub fn supports_content_parts(&self) -> bool {
        self.supports_parts
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The limits renders run under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Renders the conversation. `tools` is a JSON array of tool schemas (OpenAI's
    /// `{"type": "function", "function": {...}}`) or `None`; `add_generation_prompt`
    /// appends the opening of the assistant's turn.
    pub fn render(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with(messages, tools, add_generation_prompt, None)
    }

    /// [`render`](Self::render) with extra variables for the template (`chat_template_kwargs`,
    /// e.g. Qwen3's `enable_thinking`); they never replace the standard ones (`messages`,
    /// `tools`, ...).
    pub fn render_with(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<String, TemplateError> {
        if let Some(t) = tools
            && !(t.is_array() || t.is_null())
        {
            return Err(TemplateError::Input(
                "tools must be a JSON array".to_string(),
            ));
        }
        let flattened: Vec<Message>;
        let messages = if self.supports_parts || !messages.iter().any(has_parts) {
            messages
        } else {
            flattened = messages.iter().map(flatten_parts).collect();
            &flattened
        };
        let tools = tools
            .filter(|t| !t.is_null())
            .map_or(Value::from(()), |t| Value::from(Serde(t)));
        let extra = kwargs.map_or(Value::from(()), |k| Value::from(Serde(k)));
        self.render_context(context! {
            messages => Value::from(Serde(messages)),
            tools => tools,
            documents => (),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
            ..extra
        })
    }

    fn render_context(&self, ctx: Value) -> Result<String, TemplateError> {
        let template = self
            .env
            .get_template(env::TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render(describe(&e, true, "")))?;
        let mut out = CappedWriter {
            buf: Vec::new(),
            cap: self.limits.max_output_bytes,
            overflowed: false,
        };
        plain::start_render();
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.buf).map_err(|e| TemplateError::Render(one_line(e))),
            Err(_) if out.overflowed => {
                Err(TemplateError::OutputTooLarge(self.limits.max_output_bytes))
            }
            Err(e) => Err(self.classify(e)),
        }
    }

    fn classify(&self, e: minijinja::Error) -> TemplateError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = source {
            match err.downcast_ref::<env::Thrown>() {
                Some(env::Thrown::Raised(msg)) => return TemplateError::Raised(one_line(msg)),
                Some(env::Thrown::Refused(msg)) => {
                    let line = e.line().map(|l| format!(" (line {l})")).unwrap_or_default();
                    return TemplateError::Render(one_line(format!("{msg}{line}")));
                }
                None => {}
            }
            source = err.source();
        }
        match e.kind() {
            ErrorKind::OutOfFuel => TemplateError::OutOfFuel(self.limits.fuel),
            _ => TemplateError::Render(describe(&e, true, &self.source)),
        }
    }

    fn probe_parts(&self) -> bool {
        let probe = serde_json::json!([{"role": "user", "content": [{"type": "text", "text": PARTS_PROBE}]}]);
        let ctx = context! {
            messages => Value::from(Serde(&probe)),
            tools => (),
            documents => (),
            add_generation_prompt => false,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        };
        self.render_context(ctx)
            .is_ok_and(|out| out.contains(PARTS_PROBE))
    }
}

fn has_parts(m: &Message) -> bool {
    matches!(m.content, Some(Content::Parts(_)))
}

fn flatten_parts(m: &Message) -> Message {
    let mut m = m.clone();
    if let Some(Content::Parts(parts)) = &m.content {
        m.content = Some(Content::Text(join_text_parts(parts)));
    }
    m
}

/// An `io::Write` into memory that fails once `cap` bytes would be exceeded.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.overflowed = true;
            return Err(std::io::Error::other("output cap reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
