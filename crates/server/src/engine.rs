//! The engine: one OS thread that owns the backend and its KV cache and runs queued requests
//! one at a time (FIFO), streaming what it generates back over a channel per request.

use crate::backend::{Backend, Cache};
use crate::error::ServerError;
use sampler::{Sampler, SamplerConfig};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use tokenizer::Tokenizer;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

pub use crate::generate::Finish;

/// One generation to run.
#[derive(Clone, Debug)]
pub struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub stops: Vec<String>,
    pub sampling: SamplerConfig,
}

/// What the engine reports about a job.
#[derive(Clone, Debug)]
pub enum Event {
    /// Text that is final (whole characters, never part of a stop string).
    Text(String),
    /// Generation ended.
    Done(Done),
    /// Generation failed.
    Error(String),
}

#[derive(Clone, Debug)]
pub struct Done {
    pub finish: Finish,
    /// The stop string that ended generation, if one did.
    pub stop: Option<String>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

/// A handle to the engine thread; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    tx: SyncSender<(Job, UnboundedSender<Event>)>,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    Full,
    Gone,
}

impl Engine {
    /// Starts the engine thread; up to `queue` jobs wait behind the one running.
    pub fn start(
        backend: Backend,
        tok: Arc<Tokenizer>,
        ctx: usize,
        queue: usize,
    ) -> Result<Engine, ServerError> {
        let cache = backend.new_cache(ctx)?;
        let (tx, rx) = sync_channel(queue);
        std::thread::Builder::new()
            .name("molla-engine".into())
            .spawn(move || run(backend, cache, ctx, &tok, rx))?;
        Ok(Engine { tx })
    }

    /// Queues `job`; its events arrive on the returned receiver. Dropping the receiver cancels
    /// the job at its next token.
    pub fn submit(&self, job: Job) -> Result<UnboundedReceiver<Event>, SubmitError> {
        let (etx, erx) = unbounded_channel();
        match self.tx.try_send((job, etx)) {
            Ok(()) => Ok(erx),
            Err(TrySendError::Full(_)) => Err(SubmitError::Full),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::Gone),
        }
    }
}

fn run(
    backend: Backend,
    mut cache: Cache,
    ctx: usize,
    tok: &Tokenizer,
    rx: Receiver<(Job, UnboundedSender<Event>)>,
) {
    while let Ok((job, events)) = rx.recv() {
        if events.is_closed() {
            continue;
        }
        cache.clear();
        let n_vocab = backend.hparams().n_vocab;
        let result = Sampler::new(job.sampling.clone(), n_vocab)
            .map_err(ServerError::from)
            .and_then(|mut s| generate(&backend, &mut cache, ctx, tok, &mut s, &job, &events));
        let event = match result {
            Ok(Some(done)) => Event::Done(done),
            Ok(None) => continue, // the client went away
            Err(e) => Event::Error(e.to_string()),
        };
        let _ = events.send(event);
    }
}

/// Runs `job` unless there is nothing to generate; None when the client stopped listening.
fn generate(
    backend: &Backend,
    cache: &mut Cache,
    capacity: usize,
    tok: &Tokenizer,
    sampler: &mut Sampler,
    job: &Job,
    events: &UnboundedSender<Event>,
) -> Result<Option<Done>, ServerError> {
    let prompt = &job.prompt;
    if prompt.is_empty() || prompt.len() >= capacity || job.max_tokens == 0 {
        let done = Done {
            finish: Finish::Length,
            stop: None,
            prompt_tokens: prompt.len(),
            completion_tokens: 0,
        };
        return Ok(Some(done));
    }
    let g = crate::generate::generate(
        backend,
        cache,
        capacity,
        tok,
        sampler,
        prompt,
        job.max_tokens,
        &job.stops,
        || events.is_closed(),
        |text| events.send(Event::Text(text.to_string())).is_ok(),
    )?;
    if g.finish == Finish::Cancelled {
        return Ok(None);
    }
    Ok(Some(Done {
        finish: g.finish,
        stop: g.stop,
        prompt_tokens: prompt.len(),
        completion_tokens: g.ids.len(),
    }))
}
