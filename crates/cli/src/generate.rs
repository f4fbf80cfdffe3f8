//! The generation loop shared by `molla run` and `molla chat`: prefill the prompt, then sample
//! token by token, streaming text that is safe to show (whole UTF-8 characters, no partial stop
//! string) until an end-of-generation token, a stop string, the token limit or a cancellation.

use crate::backend::{Backend, Cache};
use anyhow::{Result, bail};
use cpu::Logits;
use sampler::{Sampler, StopMatcher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokenizer::Tokenizer;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token (EOS, `<|im_end|>`, ...).
    Eog,
    /// A stop string appeared in the text.
    Stop,
    /// The token limit or the context filled up.
    Length,
    /// The cancellation flag was raised (Ctrl-C in `molla chat`).
    Cancelled,
}

/// When to stop besides an end-of-generation token.
#[derive(Clone, Copy, Debug)]
pub struct Limits<'a> {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop when one of these texts appears (it is not emitted).
    pub stops: &'a [String],
    /// Checked before each token; when it is set, generation ends with [`Finish::Cancelled`].
    pub cancel: Option<&'a AtomicBool>,
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
    } = limits;
    let cancelled = || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
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
    let t0 = Instant::now();
    let mut logits = backend.forward(prompt, cache, Logits::Last)?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let mut history: Vec<u32> = prompt.to_vec();
    let mut out = Vec::new();
    let mut stream = tok.stream_decoder().skip_special(true);
    let mut stop = StopMatcher::new(stops);
    let mut finish = Finish::Length;
    while out.len() < max_tokens {
        if cancelled() {
            finish = Finish::Cancelled;
            break;
        }
        let id = sampler.sample(&logits, &history)?;
        if tok.is_eog(id) {
            finish = Finish::Eog;
            break;
        }
        out.push(id);
        history.push(id);
        let piece = stop.push(&stream.push(id)?);
        emit(&piece.emit)?;
        if piece.stopped {
            finish = Finish::Stop;
            break;
        }
        if out.len() >= max_tokens || cache_len(cache) + 1 >= capacity {
            break;
        }
        logits = backend.forward(&[id], cache, Logits::Last)?;
    }
    if finish != Finish::Stop {
        let tail = stop.push(&stream.finish_generation());
        emit(&tail.emit)?;
        if tail.stopped {
            finish = Finish::Stop;
        } else {
            emit(&stop.finish())?;
        }
    }
    let stats = Stats {
        prompt_tokens: prompt.len(),
        generated: out.len(),
        prefill,
        decode: t1.elapsed(),
        finish,
    };
    Ok((out, stats))
}

/// How many tokens `cache` holds.
pub fn cache_len(cache: &Cache) -> usize {
    cache.len()
}

/// Tokenizes a rendered chat prompt: special tokens parsed, and BOS added only where the model
/// asks for it and the template did not already write it.
pub fn tokenize_chat(tok: &Tokenizer, text: &str) -> Vec<u32> {
    let mut ids = tok.encode(text, false, true);
    if tok.add_bos()
        && let Some(bos) = tok.bos()
        && ids.first() != Some(&bos)
    {
        ids.insert(0, bos);
    }
    ids
}
