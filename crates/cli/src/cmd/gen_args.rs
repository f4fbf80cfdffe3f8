//! Options shared by the commands that generate text (`run`, `chat`), and loading what they need.

use crate::backend::Backend;
use crate::generate::Limits;
use crate::{default_model, hub, progress};
use anyhow::{Context, Result, bail};
use model::Model;
use sampler::{Sampler, SamplerConfig};
use server::constrain::{Format, Grammars};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use template::ChatTemplate;
use tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct GenArgs {
    /// A GGUF file or hf:owner/repo[:file] (default: SmolLM2-135M-Instruct, fetched on first
    /// use). Downloads are cached in $MOLLA_MODELS (default ~/.cache/molla/models).
    #[arg(long, short = 'm', value_name = "MODEL")]
    pub model: Option<String>,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// KV cache element type: f32 (exact) or f16 (half the memory). Default: f32 on the CPU and
    /// wgpu, f16 on CUDA (whose f32 caches decode on the graph path, not the persistent kernel).
    #[arg(long = "cache-type", value_name = "f32|f16")]
    pub cache_type: Option<String>,
    /// CPU worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Context size in tokens (0: the model's training context, at most 8192).
    #[arg(long, default_value_t = 0)]
    pub ctx: usize,
    /// Most tokens to generate.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 512)]
    pub max_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Seed for sampling (random when absent).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: i32,
    /// Keep the most likely tokens up to this total probability (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalise tokens seen recently (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Stop when this text appears (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Answer with a JSON object.
    #[arg(long, conflicts_with_all = ["json_schema", "regex", "grammar"])]
    pub json: bool,
    /// Answer with JSON valid under this JSON schema (a file, or the schema itself).
    #[arg(long, value_name = "FILE|SCHEMA", conflicts_with_all = ["regex", "grammar"])]
    pub json_schema: Option<String>,
    /// Answer with text matching this regular expression (Rust regex syntax), whole.
    #[arg(long, value_name = "REGEX", conflicts_with = "grammar")]
    pub regex: Option<String>,
    /// Answer with text of this grammar (a file in llguidance's Lark dialect).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
    /// No progress bars or statistics on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// A model loaded for generation.
pub struct Session {
    pub backend: Backend,
    pub tok: Arc<Tokenizer>,
    /// What every answer must be, with the vocabulary's grammar compiler (`--json`, ...).
    pub format: Option<(Grammars, Format)>,
    pub template: ChatTemplate,
    pub ctx: usize,
    pub path: PathBuf,
}

impl Session {
    /// Says which model runs where, on stderr (callers do it once the input is known to be
    /// good, so that an error stays the only line).
    pub fn announce(&self) {
        eprintln!(
            "molla: {} on {}",
            self.path.display(),
            self.backend.device_name()
        );
    }
}

impl GenArgs {
    /// The model file --model names, downloading it first when it is not cached.
    pub fn model_path(&self) -> Result<PathBuf> {
        match self.model.as_deref() {
            None => default_model::path(!self.quiet),
            Some(m) => match m.strip_prefix("hf:") {
                Some(spec) => hub::fetch(spec, !self.quiet),
                None if !std::path::Path::new(m).exists() => {
                    bail!(
                        "model file {m} not found (--model takes a GGUF path or hf:owner/repo[:file])"
                    )
                }
                None => Ok(PathBuf::from(m)),
            },
        }
    }

    pub fn load(&self) -> Result<Session> {
        let device = super::parse_device(&self.device)?;
        super::set_threads(self.threads)?;
        let path = self.model_path()?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let format = self.format()?;
        let pb = progress::spinner(!self.quiet, format!("loading {name}"));
        let loaded = self.load_path(&path, device, format);
        pb.finish_and_clear();
        loaded
    }

    /// What `--json`, `--json-schema`, `--regex` or `--grammar` ask of the output (files read
    /// and the schema parsed here, so that a bad one fails before the model loads).
    pub fn format(&self) -> Result<Option<Format>> {
        if self.json {
            return Ok(Some(Format::JsonObject));
        }
        if let Some(s) = &self.json_schema {
            let text = if s.trim_start().starts_with('{') {
                s.clone()
            } else {
                std::fs::read_to_string(s).with_context(|| format!("--json-schema {s}"))?
            };
            let v = serde_json::from_str(&text)
                .with_context(|| format!("--json-schema {s}: not JSON"))?;
            return Ok(Some(Format::JsonSchema(v)));
        }
        if let Some(r) = &self.regex {
            return Ok(Some(Format::Regex(r.clone())));
        }
        if let Some(p) = &self.grammar {
            let g =
                std::fs::read_to_string(p).with_context(|| format!("--grammar {}", p.display()))?;
            return Ok(Some(Format::Lark(g)));
        }
        Ok(None)
    }

    fn load_path(
        &self,
        path: &std::path::Path,
        device: super::Device,
        format: Option<Format>,
    ) -> Result<Session> {
        let model = Model::open(path).with_context(|| path.display().to_string())?;
        let tok = Tokenizer::from_gguf(&model.file).with_context(|| path.display().to_string())?;
        let tok = Arc::new(tok);
        let format = match format {
            Some(f) => {
                let g = Grammars::new(tok.clone()).map_err(anyhow::Error::msg)?;
                // Compiled once here so that a bad schema or expression fails before the prompt.
                let flag = match f {
                    Format::JsonObject => "--json",
                    Format::JsonSchema(_) => "--json-schema",
                    Format::Regex(_) => "--regex",
                    Format::Lark(_) => "--grammar",
                };
                g.compile(&f).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
                Some((g, f))
            }
            None => None,
        };
        let template = server::chat_template(&model, &tok)?;
        let ctx = server::context_size(&model, self.ctx);
        let device = server::device_for(&model, device, self.device == "auto");
        let mut backend = Backend::new(model, device)?;
        super::apply_cache_type(&mut backend, self.cache_type.as_deref())?;
        Ok(Session {
            backend,
            tok,
            format,
            template,
            ctx,
            path: path.to_path_buf(),
        })
    }

    /// The token limit and stop strings, with an optional cancellation flag.
    pub fn limits<'a>(&'a self, s: &'a Session, cancel: Option<&'a AtomicBool>) -> Limits<'a> {
        Limits {
            max_tokens: self.max_tokens,
            stops: &self.stop,
            cancel,
            format: s.format.as_ref().map(|(g, f)| (g, f)),
        }
    }

    pub fn sampler(&self, n_vocab: usize) -> Result<Sampler> {
        let cfg = SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed,
            ..SamplerConfig::default()
        };
        Ok(Sampler::new(cfg, n_vocab)?)
    }
}
