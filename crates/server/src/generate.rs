//! The generation loop shared by `molla run`/`chat` (the server's engine drives the same
//! [`Seq`] state machine in batched steps): prefill the prompt, then sample token by token,
//! passing on text that is safe to show (whole UTF-8 characters, no partial stop string) until
//! an end-of-generation token, a stop string, the token limit, the end of the context, or a
//! cancellation.

use crate::backend::{Backend, Cache};
use crate::constrain::Constraint;
use crate::error::ServerError;
use crate::seq::Seq;
use cpu::Logits;
use sampler::Sampler;
use std::time::{Duration, Instant};
use tokenizer::Tokenizer;

pub use crate::seq::Finish;

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
/// the length limit or a cancellation. With a `constraint` the output is held to it (and the
/// backend never picks tokens itself).
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
    constraint: Option<Constraint>,
    mut cancelled: impl FnMut() -> bool,
    mut emit: impl FnMut(&str) -> bool,
) -> Result<Generated, ServerError> {
    let t0 = Instant::now();
    let mut seq = Seq::new(tok, sampler, prompt, max_tokens, stops, capacity, None)
        .with_constraint(constraint);
    // The prompt, then each sampled token; each step samples from the logits where the
    // backend put them (no copy of the vocabulary's logits a token).
    let mut next: Option<u32> = None;
    let mut prefill = None;
    let mut t1 = Instant::now();
    while seq.end().is_none() {
        if cancelled() {
            break;
        }
        // Plain greedy after the prompt: the backend may chain the steps on the device (no
        // host round trip between tokens), taking each pick through `seq` as below.
        if let Some(first) = next.filter(|_| seq.backend_may_pick()) {
            let mut len = cache.len();
            let (mut cancel, mut stop, mut failed, mut follow) = (false, false, None, None);
            let max = capacity.saturating_sub(len);
            let chained = backend.decode_greedy(first, max, cache, |p| {
                len += 1;
                if cancelled() {
                    cancel = true;
                    return false;
                }
                let out = match p.and_then(|id| seq.accept(id, len)) {
                    Ok(out) => out,
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                };
                if !out.text.is_empty() && !emit(&out.text) {
                    stop = true;
                    return false;
                }
                follow = out.next;
                follow.is_some()
            });
            if let Some(r) = chained {
                r?;
                if let Some(e) = failed {
                    return Err(e);
                }
                if cancel {
                    // Step by step, a cancelled step is not run: its input is not cached.
                    cache.truncate(cache.len().saturating_sub(1));
                }
                if cancel || stop {
                    break;
                }
                match follow {
                    Some(id) => next = Some(id),
                    None => break,
                }
                continue;
            }
        }
        let input = match &next {
            Some(id) => std::slice::from_ref(id),
            None => prompt,
        };
        let len = cache.len() + input.len();
        // A plain greedy pick, or the top-k candidates of a sampler that draws from those
        // alone, may come from the backend (no logits sent back), else the row is sampled.
        let out = if let Some(id) = seq
            .backend_may_pick()
            .then(|| backend.forward_pick(input, cache))
            .flatten()
        {
            seq.accept(id?, len)?
        } else if let Some(top) = seq
            .backend_top_k()
            .and_then(|k| backend.forward_top(input, cache, k))
        {
            seq.accept_top(&top?, len)?
        } else {
            backend.forward_with(input, cache, Logits::Last, |l| seq.step(l, len))??
        };
        if prefill.is_none() {
            prefill = Some(t0.elapsed());
            t1 = Instant::now();
        }
        if !out.text.is_empty() && !emit(&out.text) {
            break;
        }
        match out.next {
            Some(id) => next = Some(id),
            None => break,
        }
    }
    let prefill = prefill.unwrap_or_default();
    let tail = seq.finish();
    if !tail.is_empty() {
        emit(&tail);
    }
    Ok(Generated {
        ids: seq.ids().to_vec(),
        finish: seq.end().unwrap_or(Finish::Cancelled),
        stop: seq.stop_string().map(String::from),
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
