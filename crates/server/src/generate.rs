//! The generation loop shared by the server's engine and the CLI's `run`/`chat`: prefill the
//! prompt, then sample token by token, passing on text that is safe to show (whole UTF-8
//! characters, no partial stop string) until an end-of-generation token, a stop string, the
//! token limit, the end of the context, or a cancellation.

use crate::backend::{Backend, Cache};
use crate::error::ServerError;
use cpu::Logits;
use sampler::{Sampler, StopMatcher};
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
    /// The caller asked to stop (a client went away, Ctrl-C).
    Cancelled,
}

/// What one generation produced.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The sampled ids (an end-of-generation token is not included).
    pub ids: Vec<u32>,
    pub finish: Finish,
    /// The stop string that ended generation, if one did.
    pub stop: Option<String>,
    pub prefill: Duration,
    pub decode: Duration,
}

/// Generates after `prompt`, appended to what `cache` holds (at most `capacity` positions).
/// `cancelled` is asked before each token; `emit` receives text as it becomes final and returns
/// false to stop (both end generation with [`Finish::Cancelled`]; held-back text is still
/// offered to `emit` then). Afterwards the cache holds the
/// prompt and the generated ids, but for the last one when generation ended by a stop string,
/// the length limit or a cancellation.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    backend: &Backend,
    cache: &mut Cache,
    capacity: usize,
    tok: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    max_tokens: usize,
    stops: &[String],
    mut cancelled: impl FnMut() -> bool,
    mut emit: impl FnMut(&str) -> bool,
) -> Result<Generated, ServerError> {
    let t0 = Instant::now();
    let mut logits = backend.forward(prompt, cache, Logits::Last)?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let mut history = prompt.to_vec();
    let mut ids = Vec::new();
    let mut stream = tok.stream_decoder().skip_special(true);
    let mut stop = StopMatcher::new(stops);
    let mut finish = Finish::Length;
    while ids.len() < max_tokens {
        if cancelled() {
            finish = Finish::Cancelled;
            break;
        }
        let id = sampler.sample(&logits, &history)?;
        if tok.is_eog(id) {
            finish = Finish::Eog;
            break;
        }
        ids.push(id);
        history.push(id);
        let piece = stop.push(&stream.push(id)?);
        if !piece.emit.is_empty() && !emit(&piece.emit) {
            finish = Finish::Cancelled;
            break;
        }
        if piece.stopped {
            finish = Finish::Stop;
            break;
        }
        if ids.len() >= max_tokens || cache.len() + 1 >= capacity {
            break;
        }
        logits = backend.forward(&[id], cache, Logits::Last)?;
    }
    if finish != Finish::Stop {
        let tail = stop.push(&stream.finish_generation());
        if !tail.emit.is_empty() {
            emit(&tail.emit);
        }
        if tail.stopped {
            finish = Finish::Stop;
        } else {
            let rest = stop.finish();
            if !rest.is_empty() {
                emit(&rest);
            }
        }
    }
    Ok(Generated {
        ids,
        finish,
        stop: stop.matched().map(String::from),
        prefill,
        decode: t1.elapsed(),
    })
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
