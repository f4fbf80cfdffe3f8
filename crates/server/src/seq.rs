//! One sequence's generation state, step by step: sample from the logits, decode the token to
//! text that is safe to show (whole UTF-8 characters, no partial stop string), and decide
//! whether to go on. The caller runs the forward passes, so the same state machine serves the
//! CLI's loop ([`crate::generate::generate`]) and the engine's batched steps.

use crate::constrain::Constraint;
use crate::error::ServerError;
use sampler::{Sampler, StopMatcher};
use std::borrow::BorrowMut;
use tokenizer::{StreamDecoder, Tokenizer};

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

/// The log-probability of a sampled token under the model (log-softmax of the raw logits, before
/// temperature, penalties or filters), with the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// `(id, logprob)`, most likely first; as many as were asked for.
    pub top: Vec<(u32, f32)>,
}

/// What one step produced.
#[derive(Debug, Default)]
pub struct Out {
    /// Text that became final with this token (may be empty).
    pub text: String,
    /// The sampled token's log-probability, when asked for (none for an end-of-generation
    /// token).
    pub logprob: Option<TokenLogprob>,
    /// The token to feed next; None when generation is over (see [`Seq::end`]).
    pub next: Option<u32>,
}

/// A sequence being generated, with its sampler owned (`S = Sampler`) or borrowed.
pub struct Seq<'t, S: BorrowMut<Sampler> = Sampler> {
    tok: &'t Tokenizer,
    sampler: S,
    history: Vec<u32>,
    ids: Vec<u32>,
    stream: StreamDecoder<'t>,
    stop: StopMatcher,
    max_tokens: usize,
    capacity: usize,
    top_logprobs: Option<usize>,
    constraint: Option<Constraint>,
    end: Option<Finish>,
}

impl<'t, S: BorrowMut<Sampler>> Seq<'t, S> {
    /// A sequence after `prompt`, producing at most `max_tokens` within a cache of `capacity`
    /// positions; with `top_logprobs` = Some(k) each step reports its token's log-probability
    /// and the k most likely tokens.
    pub fn new(
        tok: &'t Tokenizer,
        sampler: S,
        prompt: &[u32],
        max_tokens: usize,
        stops: &[String],
        capacity: usize,
        top_logprobs: Option<usize>,
    ) -> Seq<'t, S> {
        Seq {
            tok,
            sampler,
            history: prompt.to_vec(),
            ids: Vec::new(),
            stream: tok.stream_decoder().skip_special(true),
            stop: StopMatcher::new(stops),
            max_tokens,
            capacity,
            top_logprobs,
            constraint: None,
            end: (max_tokens == 0).then_some(Finish::Length),
        }
    }

    /// The sequence with its tokens held to `constraint` (JSON, a schema, a grammar): each
    /// step samples among the tokens it allows, and generation ends when the output is
    /// complete.
    pub fn with_constraint(mut self, constraint: Option<Constraint>) -> Self {
        self.constraint = constraint;
        self
    }

    /// The sequence with control tokens rendered in its text (an end-of-generation token
    /// still ends it unseen): tool calls are parsed from it, and Qwen's `<tool_call>` is one.
    pub fn with_special_text(mut self, special: bool) -> Self {
        if special {
            self.stream = self.tok.stream_decoder();
        }
        self
    }

    /// Samples the next token from `logits` (the model's output after everything fed so far;
    /// the cache now holds `cache_len` positions).
    pub fn step(&mut self, logits: &[f32], cache_len: usize) -> Result<Out, ServerError> {
        if self.end.is_some() {
            return Ok(Out::default());
        }
        let id = match self.constraint.as_mut() {
            Some(c) => {
                let allowed = c.masked(logits).map_err(ServerError::Constraint)?;
                self.sampler.borrow_mut().sample(&allowed, &self.history)?
            }
            None => self.sampler.borrow_mut().sample(logits, &self.history)?,
        };
        if let Some(k) = self.top_logprobs
            && !self.tok.is_eog(id)
        {
            let lp = logprob(logits, id, k);
            let mut out = self.accept(id, cache_len)?;
            out.logprob = Some(lp);
            return Ok(out);
        }
        self.accept(id, cache_len)
    }

    /// Whether the next token may be picked by the backend (see
    /// [`Sampler::is_plain_greedy`]) and given to [`accept`](Self::accept): plain greedy, and
    /// no log-probabilities asked for, no constraint (its mask needs the whole row).
    pub fn backend_may_pick(&self) -> bool {
        self.top_logprobs.is_none()
            && self.constraint.is_none()
            && self.sampler.borrow().is_plain_greedy()
    }

    /// The `k` of the row's top-k candidates the next token may be sampled from by
    /// [`accept_top`](Self::accept_top) (see [`Sampler::top_k_only`]), when no
    /// log-probabilities are asked for.
    pub fn backend_top_k(&self) -> Option<usize> {
        if self.top_logprobs.is_some() || self.constraint.is_some() {
            return None;
        }
        self.sampler.borrow().top_k_only()
    }

    /// Samples the next token from `top`, the row's top-k candidates for
    /// [`backend_top_k`](Self::backend_top_k)'s k (found by the backend), as
    /// [`step`](Self::step) samples it from the whole row.
    pub fn accept_top(&mut self, top: &[(u32, f32)], cache_len: usize) -> Result<Out, ServerError> {
        if self.end.is_some() {
            return Ok(Out::default());
        }
        let id = self.sampler.borrow_mut().sample_top(top)?;
        self.accept(id, cache_len)
    }

    /// Goes on with `id` as the next token, picked by the caller as [`step`](Self::step) would
    /// have sampled it (the cache now holds `cache_len` positions).
    pub fn accept(&mut self, id: u32, cache_len: usize) -> Result<Out, ServerError> {
        let mut out = Out::default();
        if self.end.is_some() {
            return Ok(out);
        }
        if self.tok.is_eog(id) {
            self.end = Some(Finish::Eog);
            return Ok(out);
        }
        if let Some(c) = self.constraint.as_mut() {
            c.consume(id).map_err(ServerError::Constraint)?;
        }
        self.ids.push(id);
        self.history.push(id);
        let piece = self.stop.push(&self.stream.push(id)?);
        out.text = piece.emit;
        if piece.stopped {
            self.end = Some(Finish::Stop);
        } else if self.constraint.as_ref().is_some_and(Constraint::is_done) {
            // The output is complete (a closed JSON value): as if the model ended it.
            self.end = Some(Finish::Eog);
        } else if self.ids.len() >= self.max_tokens || cache_len + 1 >= self.capacity {
            self.end = Some(Finish::Length);
        } else {
            out.next = Some(id);
        }
        Ok(out)
    }

    /// Ends generation (as [`Finish::Cancelled`] unless a step already ended it) and returns
    /// the text held back so far (an incomplete character, a possible stop-string prefix).
    pub fn finish(&mut self) -> String {
        let end = *self.end.get_or_insert(Finish::Cancelled);
        if end == Finish::Stop {
            return String::new();
        }
        let tail = self.stop.push(&self.stream.finish_generation());
        let mut text = tail.emit;
        if tail.stopped {
            self.end = Some(Finish::Stop);
        } else {
            text.push_str(&self.stop.finish());
        }
        text
    }

    /// How generation ended, once it has.
    pub fn end(&self) -> Option<Finish> {
        self.end
    }

    /// The sampled ids (an end-of-generation token is not included).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The stop string that ended generation, if one did.
    pub fn stop_string(&self) -> Option<&str> {
        self.stop.matched()
    }
}

/// The log-softmax of `logits` at `id`, and the `k` most likely tokens (ties: lower id first).
pub fn logprob(logits: &[f32], id: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f64 = logits.iter().map(|&v| f64::from(v - max).exp()).sum();
    let lse = f64::from(max) + sum.ln();
    let lp = |i: usize| (f64::from(logits[i]) - lse) as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (i, &v) in logits.iter().enumerate() {
            if top.len() == k && v <= logits[top[k - 1].0 as usize] {
                continue;
            }
            let at = top.partition_point(|&(j, _)| logits[j as usize] >= v);
            top.insert(at, (i as u32, 0.0));
            top.truncate(k);
        }
        for t in &mut top {
            t.1 = lp(t.0 as usize);
        }
    }
    TokenLogprob {
        id,
        logprob: lp(id as usize),
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::logprob;

    #[test]
    fn logprob_and_top() {
        let l = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let t = logprob(&l, 2, 3);
        let lse = l.iter().map(|&v| f64::from(v).exp()).sum::<f64>().ln();
        assert!((f64::from(t.logprob) - (2.0 - lse)).abs() < 1e-6);
        let ids: Vec<u32> = t.top.iter().map(|x| x.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert!(logprob(&l, 0, 0).top.is_empty());
    }
}
