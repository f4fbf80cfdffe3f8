//! `run` and `chat` around the shared generation loop (`server::generate`): the prompt checks
//! with their CLI messages, Ctrl-C as a cancellation flag, and statistics for stderr.

use crate::backend::{Backend, Cache};
use anyhow::{Result, bail};
use sampler::Sampler;
use server::constrain::{Format, Grammars};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokenizer::Tokenizer;

pub use server::generate::{Finish, tokenize_chat};

/// When to stop besides an end-of-generation token.
#[derive(Clone, Copy, Debug)]
pub struct Limits<'a> {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop when one of these texts appears (it is not emitted).
    pub stops: &'a [String],
    /// Checked before each token; when it is set, generation ends with [`Finish::Cancelled`].
    pub cancel: Option<&'a AtomicBool>,
    /// What the output must be (`--json`, `--json-schema`, `--regex`, `--grammar`), with the
    /// model's grammar compiler.
    pub format: Option<(&'a Grammars, &'a Format)>,
}

/// Counts and times of one generation.
#[derive(Clone, Debug)]
pub struct Stats {
    pub prompt_tokens: usize,
    pub generated: usize,
    pub prefill: Duration,
    pub decode: Duration,
    pub finish: Finish,
}

impl Stats {
    /// A one-line summary for stderr.
    pub fn summary(&self) -> String {
        let rate = |n: usize, d: Duration| {
            if d.is_zero() {
                0.0
            } else {
                n as f64 / d.as_secs_f64()
            }
        };
        format!(
            "prompt {} tokens, {:.1} tok/s; generated {} tokens, {:.1} tok/s; finished by {:?}",
            self.prompt_tokens,
            rate(self.prompt_tokens, self.prefill),
            self.generated,
            rate(self.generated.saturating_sub(1), self.decode),
            self.finish
        )
    }
}

/// Generates after `prompt` (appended to what `cache` holds), calling `emit` with text as it
/// becomes final. Returns the generated ids with the stats. Afterwards the cache holds the prompt
/// and a prefix of the generated ids ([`cache_len`] says how many).
#[allow(clippy::too_many_arguments)]
pub fn generate(
    backend: &Backend,
    cache: &mut Cache,
    capacity: usize,
    tok: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    limits: Limits,
    mut emit: impl FnMut(&str) -> Result<()>,
) -> Result<(Vec<u32>, Stats)> {
    let Limits {
        max_tokens,
        stops,
        cancel,
        format,
    } = limits;
    if prompt.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    let used = cache_len(cache);
    if used + prompt.len() >= capacity {
        bail!(
            "the prompt ({} tokens) does not fit the context of {capacity} tokens ({used} already used)",
            prompt.len()
        );
    }
    let constraint = match format {
        Some((g, f)) => Some(g.compile(f).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let mut failed = None;
    let g = server::generate::generate(
        backend,
        cache,
        capacity,
        tok,
        sampler,
        prompt,
        max_tokens,
        stops,
        constraint,
        || cancel.is_some_and(|c| c.load(Ordering::Relaxed)),
        |text| {
            if failed.is_none()
                && let Err(e) = emit(text)
            {
                failed = Some(e);
            }
            failed.is_none()
        },
    )?;
    if let Some(e) = failed {
        return Err(e);
    }
    let stats = Stats {
        prompt_tokens: prompt.len(),
        generated: g.ids.len(),
        prefill: g.prefill,
        decode: g.decode,
        finish: g.finish,
    };
    Ok((g.ids, stats))
}

/// How many tokens `cache` holds.
pub fn cache_len(cache: &Cache) -> usize {
    cache.len()
}
