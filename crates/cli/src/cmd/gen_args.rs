//! Options shared by the commands that generate text (`run`, `chat`), and loading what they need.

use crate::backend::Backend;
use crate::default_model;
use anyhow::{Context, Result};
use model::Model;
use sampler::{Sampler, SamplerConfig};
use std::path::PathBuf;
use template::ChatTemplate;
use tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct GenArgs {
    /// GGUF model file (default: SmolLM2-135M-Instruct, fetched on first use).
    #[arg(long, short = 'm')]
    pub model: Option<PathBuf>,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
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
    #[arg(long, default_value_t = 40)]
    pub top_k: i32,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Stop when this text appears (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// No statistics on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// A model loaded for generation.
pub struct Session {
    pub backend: Backend,
    pub tok: Tokenizer,
    pub template: ChatTemplate,
    pub ctx: usize,
}

impl GenArgs {
    pub fn load(&self) -> Result<Session> {
        let device = super::parse_device(&self.device)?;
        super::set_threads(self.threads)?;
        let path = match &self.model {
            Some(p) => p.clone(),
            None => default_model::path(!self.quiet)?,
        };
        let model = Model::open(&path).with_context(|| path.display().to_string())?;
        let tok = Tokenizer::from_gguf(&model.file).with_context(|| path.display().to_string())?;
        let piece = |id: Option<u32>| id.and_then(|i| tok.token_text(i).ok()).unwrap_or("").to_string();
        let source = model.file.get("tokenizer.chat_template").and_then(|v| v.as_str());
        let template = ChatTemplate::from_metadata(source, &piece(tok.bos()), &piece(tok.eos()))?;
        let ctx = match self.ctx {
            0 => model.hp.n_ctx_train.clamp(1, 8192),
            n => n,
        };
        let backend = Backend::new(model, device)?;
        if !self.quiet {
            eprintln!("molla: {} on {}", path.display(), backend.device_name());
        }
        Ok(Session { backend, tok, template, ctx })
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
