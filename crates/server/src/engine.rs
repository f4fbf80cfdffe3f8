//! The engine: one OS thread that owns the backend and `parallel` KV caches (slots), and runs
//! continuous batching over them. Each step admits waiting requests into free slots (the client
//! with the fewest running sequences first, FIFO among equals; a request takes the free slot
//! whose cache already holds the longest run of whole prefill chunks of its prompt, and keeps
//! them: prefix reuse, the same bits as prefilling them again), prefills whole chunks of waiting
//! prompts up to a per-step token budget (oldest first; while other sequences decode, only about
//! a decode step's worth of time: [`crate::pace`]), then runs one batched decode over every
//! active sequence's next token ([`Backend::forward_mixed_with`]: the weights are read once for
//! all rows on the CPU and on CUDA, and the logits read where they land). A sequence whose
//! client went away is dropped before the next step and its slot is free at once. Events
//! stream back over a channel per request.

use crate::backend::{Backend, Cache};
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::pace::Pace;
use crate::seq::{Seq, TokenLogprob};
use cpu::KvPool;
use cpu::Logits;
use rayon::prelude::*;
use sampler::{Sampler, SamplerConfig};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::time::Instant;
use tokenizer::Tokenizer;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

pub use crate::seq::Finish;

/// Sequences in a decode step from which their sampling runs on several threads.
const PARALLEL_SAMPLING: usize = 8;

/// One generation to run.
#[derive(Clone, Debug)]
pub struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub stops: Vec<String>,
    pub sampling: SamplerConfig,
    /// Report each token's log-probability with this many alternatives (None: no logprobs).
    pub logprobs: Option<usize>,
    /// Who asked (the API key or peer address the server limits by): free slots go first to
    /// the waiting request whose client has the fewest sequences running.
    pub client: Option<String>,
    /// What the output must be (JSON, a schema, a grammar), compiled for the model
    /// ([`crate::constrain`]); None: free text.
    pub constraint: Option<crate::constrain::Constraint>,
    /// Render control tokens in the text (tool requests: Qwen's `<tool_call>` is one).
    pub special_text: bool,
}

/// What the engine reports about a job.
#[derive(Clone, Debug)]
pub enum Event {
    /// A sampled token's log-probability (only when the job asked), sent before the text the
    /// token completes.
    Token(TokenLogprob),
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
    /// Prompt tokens whose keys and values were already in the slot's cache (not prefilled).
    pub cached_tokens: usize,
}

/// Embedding vectors of several inputs, or why they failed.
pub type Embeddings = Result<Vec<Vec<f32>>, String>;
type EmbedReply = oneshot::Sender<Embeddings>;

enum Work {
    Generate(Job, UnboundedSender<Event>),
    Embed(Vec<Vec<u32>>, EmbedReply),
}

/// A handle to the engine thread; cheap to clone. The thread ends once every handle is dropped
/// and the requests it accepted are finished.
#[derive(Clone)]
pub struct Engine {
    tx: SyncSender<(Work, Instant)>,
    metrics: Arc<Metrics>,
    /// Most requests waiting (in the channel and in the engine's own queue together).
    queue: usize,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    Full,
    Gone,
}

/// The engine's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Positions a sequence may reach.
    pub ctx: usize,
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// Slots: sequences generating at once.
    pub parallel: usize,
    /// Most prompt tokens prefilled in one step.
    pub chunk: usize,
    /// Prompt chunks of at most this many tokens run inside the batched decode pass (0: none).
    pub mix: usize,
    /// KV blocks the slots share (CPU; see [`crate::Config::kv_blocks`]).
    pub kv_blocks: usize,
}

impl Engine {
    /// Starts the engine thread with `parallel` slots of up to `ctx` positions each (paged from
    /// a pool of `kv_blocks` blocks on the CPU); up to `queue` requests wait for a slot;
    /// prompts are prefilled `chunk` tokens a step.
    pub fn start(
        backend: Backend,
        tok: Arc<Tokenizer>,
        sizes: Sizes,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, ServerError> {
        let Sizes {
            ctx,
            queue,
            parallel,
            chunk,
            mix,
            kv_blocks,
        } = sizes;
        let pool = backend.kv_pool(kv_blocks);
        let caches = (0..parallel.max(1))
            .map(|_| backend.slot_cache(ctx, pool.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let (tx, rx) = sync_channel(queue);
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("molla-engine".into())
            .spawn(move || {
                let mut e = Runner {
                    backend: &backend,
                    tok: &tok,
                    ctx,
                    queue: queue.max(1),
                    waiting: VecDeque::new(),
                    chunk: chunk.max(1),
                    mix,
                    metrics: &m,
                    free: caches
                        .into_iter()
                        .map(|cache| Slot {
                            cache,
                            prompt: Vec::new(),
                        })
                        .collect(),
                    active: Vec::new(),
                    pace: Pace::default(),
                    pool,
                };
                e.run(rx)
            })?;
        Ok(Engine {
            tx,
            metrics,
            queue: queue.max(1),
        })
    }

    /// Queues `job`; its events arrive on the returned receiver. Dropping the receiver cancels
    /// the job before its next step.
    pub fn submit(&self, job: Job) -> Result<UnboundedReceiver<Event>, SubmitError> {
        let (etx, erx) = unbounded_channel();
        self.send(Work::Generate(job, etx))?;
        Ok(erx)
    }

    /// Queues an embedding request: one vector per input (see [`embed`]).
    pub fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
    ) -> Result<oneshot::Receiver<Embeddings>, SubmitError> {
        let (tx, rx) = oneshot::channel();
        self.send(Work::Embed(inputs, tx))?;
        Ok(rx)
    }

    fn send(&self, w: Work) -> Result<(), SubmitError> {
        if self.metrics.queued(1) > self.queue as i64 {
            self.metrics.queued(-1);
            return Err(SubmitError::Full);
        }
        let r = self.tx.try_send((w, Instant::now()));
        if r.is_err() {
            self.metrics.queued(-1);
        }
        match r {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(SubmitError::Full),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::Gone),
        }
    }
}

/// A free slot: its cache, and the prompt tokens whose prefill is in it (positions
/// 0..prompt.len(), in whole chunks as the engine prefilled them).
struct Slot {
    cache: Cache,
    prompt: Vec<u32>,
}

/// A generation request waiting for a slot.
struct Waiting {
    job: Job,
    events: UnboundedSender<Event>,
    at: Instant,
}

/// A sequence in a slot.
struct Active<'t> {
    seq: Seq<'t>,
    /// Who asked (Job::client).
    client: Option<String>,
    cache: Cache,
    events: UnboundedSender<Event>,
    /// The token to feed at the next step.
    next: u32,
    queued_at: Instant,
    last_token: Option<Instant>,
    prompt: Vec<u32>,
    /// Prompt tokens in the cache: the sequence is prefilling until they are all there.
    prefilled: usize,
    /// Prompt tokens taken from the slot's cache.
    cached_tokens: usize,
    /// KV blocks set aside for it: what its prompt and `max_tokens` can fill.
    reserve: usize,
}

impl Active<'_> {
    fn prefilling(&self) -> bool {
        self.prefilled < self.prompt.len()
    }

    /// The slot back, with what of the prompt its cache holds; the generated positions are
    /// dropped at once (a paged cache's blocks past the prompt go back to the pool).
    fn into_slot(mut self) -> Slot {
        self.cache.truncate(self.prefilled);
        self.prompt.truncate(self.cache.len());
        Slot {
            cache: self.cache,
            prompt: self.prompt,
        }
    }
}

struct Runner<'a> {
    backend: &'a Backend,
    tok: &'a Tokenizer,
    ctx: usize,
    /// Most prompt tokens prefilled in one step.
    chunk: usize,
    /// Prompt chunks of at most this many tokens join the batched decode pass (0: none).
    mix: usize,
    metrics: &'a Metrics,
    /// The free slots.
    free: Vec<Slot>,
    /// Generation requests taken off the channel, waiting for a slot (at most `queue`).
    waiting: VecDeque<Waiting>,
    queue: usize,
    active: Vec<Active<'a>>,
    /// What decode steps and prefill cost lately: how much prefill a step may take on.
    pace: Pace,
    /// The KV blocks the slots' caches share (CPU).
    pool: Option<KvPool>,
}

impl<'a> Runner<'a> {
    fn run(&mut self, rx: Receiver<(Work, Instant)>) {
        let mut open = true;
        loop {
            // What has arrived: embeddings run at once, generation requests join `waiting` (up
            // to `queue` of them; more stay in the channel). Block only when there is no work.
            while open && self.waiting.len() < self.queue {
                let got = if self.active.is_empty() && self.waiting.is_empty() {
                    rx.recv().map_err(|_| TryRecvError::Disconnected)
                } else {
                    rx.try_recv()
                };
                match got {
                    Ok((Work::Embed(inputs, reply), _)) => {
                        self.metrics.queued(-1);
                        let _ = reply.send(embed(self.backend, &inputs).map_err(|e| e.to_string()));
                    }
                    Ok((Work::Generate(job, events), at)) => {
                        self.waiting.push_back(Waiting { job, events, at })
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.drop_cancelled();
            self.admit_waiting();
            self.report_load();
            if self.active.is_empty() {
                if open || !self.waiting.is_empty() {
                    continue;
                }
                return;
            }
            self.step();
            self.report_load();
        }
    }

    fn report_load(&self) {
        self.metrics.set_active(self.active.len());
        if let Some(p) = &self.pool {
            self.metrics.set_kv_blocks(p.used(), p.total());
        }
    }

    /// KV blocks `job` may fill (0 without a pool).
    fn kv_need(&self, job: &Job) -> usize {
        match self.pool {
            Some(_) => KvPool::blocks_for((job.prompt.len() + job.max_tokens).min(self.ctx)),
            None => 0,
        }
    }

    /// Whether `job`'s blocks fit beside what the running sequences may still fill.
    fn kv_room(&self, job: &Job) -> bool {
        let Some(p) = &self.pool else { return true };
        let committed: usize = self.active.iter().map(|a| a.reserve).sum();
        committed + self.kv_need(job) <= p.total()
    }

    /// Frees blocks that idle slots keep for prefix reuse until the running sequences and
    /// one of `reserve` blocks that holds `held` can all grow to their reservations.
    fn make_kv_room(&mut self, reserve: usize, held: usize) {
        let Some(p) = &self.pool else { return };
        let to_take: usize = self
            .active
            .iter()
            .map(|a| a.reserve.saturating_sub(a.cache.blocks()))
            .sum::<usize>()
            + reserve.saturating_sub(held);
        for slot in self.free.iter_mut() {
            if p.total() - p.used() >= to_take {
                return;
            }
            if slot.cache.blocks() > 0 {
                slot.cache.clear();
                slot.prompt.clear();
            }
        }
    }

    /// Sequences running for `client`.
    fn running(&self, client: &Option<String>) -> usize {
        self.active.iter().filter(|a| &a.client == client).count()
    }

    /// Fills free slots from `waiting`: each time the request whose client has the fewest
    /// sequences running, the oldest of those (FIFO with per-client fairness), once its KV
    /// blocks fit (it waits for running sequences to end, and the requests after it with it).
    fn admit_waiting(&mut self) {
        while !self.free.is_empty() && !self.waiting.is_empty() {
            let Some(i) = (0..self.waiting.len())
                .min_by_key(|&i| (self.running(&self.waiting[i].job.client), i))
            else {
                return;
            };
            let w = &self.waiting[i];
            if !w.events.is_closed() && !self.kv_room(&w.job) {
                return;
            }
            let Some(w) = self.waiting.remove(i) else {
                return;
            };
            self.metrics.queued(-1);
            if w.events.is_closed() {
                continue;
            }
            if let Some(slot) = self.pick_slot(&w.job.prompt) {
                self.admit(w.job, w.events, slot, w.at);
            }
        }
    }

    /// Prompt tokens a slot holding `held` can keep for `prompt`: the common prefix in whole
    /// chunks (prefilled at the same chunk boundaries, so the same bits), and never the last
    /// token (its logits are needed).
    fn reusable(&self, held: &[u32], prompt: &[u32]) -> usize {
        common_prefix(held, prompt, self.chunk)
    }

    /// The longest prefix of `prompt` that another slot's paged cache holds (running or idle)
    /// in whole chunks that are also whole KV blocks, short of the last prompt token: its
    /// length and that cache, to share blocks with ([`Cache::share_prefix`]).
    fn shared_source(&self, prompt: &[u32]) -> Option<(usize, &Cache)> {
        self.pool.as_ref()?;
        let unit = lcm(self.chunk, cpu::BLOCK_POSITIONS);
        let held = self
            .active
            .iter()
            .map(|a| (&a.prompt[..a.prefilled], &a.cache))
            .chain(self.free.iter().map(|f| (&f.prompt[..], &f.cache)));
        held.map(|(p, c)| (common_prefix(p, prompt, unit).min(c.len() / unit * unit), c))
            .filter(|&(n, _)| n > 0)
            .max_by_key(|&(n, _)| n)
    }

    /// Takes the free slot that can keep the most of `prompt` (the most recently freed of
    /// equals).
    fn pick_slot(&mut self, prompt: &[u32]) -> Option<Slot> {
        let best = (0..self.free.len())
            .max_by_key(|&i| (self.reusable(&self.free[i].prompt, prompt), i))?;
        Some(self.free.swap_remove(best))
    }

    /// Takes `job` into a slot: its prompt is prefilled over the next steps, a chunk a step,
    /// after what the slot's cache already holds of it.
    fn admit(
        &mut self,
        job: Job,
        events: UnboundedSender<Event>,
        mut slot: Slot,
        queued_at: Instant,
    ) {
        tracing::debug!(prompt = job.prompt.len(), max = job.max_tokens, "admit");
        let prompt = &job.prompt;
        if prompt.is_empty() || prompt.len() >= self.ctx || job.max_tokens == 0 {
            self.metrics.prompt_tokens(prompt.len());
            let _ = events.send(Event::Done(Done {
                finish: Finish::Length,
                stop: None,
                prompt_tokens: prompt.len(),
                completion_tokens: 0,
                cached_tokens: 0,
            }));
            self.free.push(slot);
            return;
        }
        let sampler = match Sampler::new(job.sampling.clone(), self.backend.hparams().n_vocab) {
            Ok(s) => s,
            Err(e) => {
                let _ = events.send(Event::Error(e.to_string()));
                self.free.push(slot);
                return;
            }
        };
        let mut keep = self.reusable(&slot.prompt, prompt).min(slot.cache.len());
        if let Some((n, src)) = self.shared_source(prompt)
            && n > keep
            && slot.cache.share_prefix(src, n)
        {
            keep = n;
        }
        slot.cache.truncate(keep);
        // A tail block shared with another slot is kept only whole: back to a chunk boundary.
        while !slot.cache.len().is_multiple_of(self.chunk) {
            slot.cache
                .truncate(slot.cache.len() / self.chunk * self.chunk);
        }
        let keep = slot.cache.len();
        let reserve = self.kv_need(&job);
        self.make_kv_room(reserve, slot.cache.blocks());
        self.metrics.prompt_tokens(prompt.len() - keep);
        self.metrics.cached_prompt_tokens(keep);
        let seq = Seq::new(
            self.tok,
            sampler,
            prompt,
            job.max_tokens,
            &job.stops,
            self.ctx,
            job.logprobs,
        )
        .with_constraint(job.constraint)
        .with_special_text(job.special_text);
        self.active.push(Active {
            seq,
            client: job.client,
            cache: slot.cache,
            events,
            next: 0,
            queued_at,
            last_token: None,
            prompt: job.prompt,
            prefilled: keep,
            cached_tokens: keep,
            reserve,
        });
    }

    fn drop_cancelled(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|w| !w.events.is_closed());
        self.metrics.queued(-((before - self.waiting.len()) as i64));
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.active)
            .into_iter()
            .partition(|a| a.events.is_closed());
        self.active = kept;
        self.free.extend(gone.into_iter().map(Active::into_slot));
    }

    /// One step: the next prompt chunk of the sequences still prefilling, oldest first, while
    /// the step's budget (`chunk` tokens) lasts and, when other sequences are decoding, while
    /// the prefill fits in about one decode step's time ([`Pace`]); the oldest always gets its
    /// chunk. Chunks of at most `mix` tokens are not prefilled on their own but join the
    /// batched pass as rows (up to as many tokens as there are decoding sequences, or `mix`,
    /// or the whole budget when none decode; the oldest always joins). A sequence's first
    /// token is sampled when its prompt is done. Then one batched pass over every sequence that
    /// is generating, and the joined chunks.
    fn step(&mut self) {
        let active = std::mem::take(&mut self.active);
        let mut budget = self.chunk;
        let mut first = true;
        let decoders = active.iter().filter(|a| !a.prefilling()).count();
        let waiting_on_us = decoders > 0;
        let mut mix_budget = if waiting_on_us {
            self.mix.max(decoders)
        } else {
            self.chunk
        };
        let mut spent = 0.0;
        let mut decoding = Vec::with_capacity(active.len());
        // Sequences whose next chunk (up to `.1`) joins the batched pass.
        let mut mixing: Vec<(Active, usize)> = Vec::new();
        for mut a in active {
            if !a.prefilling() {
                decoding.push(a);
                continue;
            }
            let next = self.next_chunk(a.prompt.len(), a.prefilled);
            if next <= self.mix {
                if mixing.is_empty() || next <= mix_budget {
                    mix_budget = mix_budget.saturating_sub(next);
                    let end = a.prefilled + next;
                    mixing.push((a, end));
                } else {
                    self.active.push(a);
                }
                continue;
            }
            if !first && (next > budget || !self.pace.fits(next, spent, waiting_on_us)) {
                self.active.push(a);
                continue;
            }
            first = false;
            budget = budget.saturating_sub(next);
            let t = Instant::now();
            let done = self.prefill_chunk(&mut a);
            let dt = t.elapsed().as_secs_f64();
            spent += dt;
            self.pace.prefilled(next, dt);
            match done {
                Ok(false) => self.active.push(a),
                Ok(true) => self.free.push(a.into_slot()),
                Err(e) => {
                    let _ = a.events.send(Event::Error(e.to_string()));
                    self.free.push(a.into_slot());
                }
            }
        }
        if decoding.is_empty() && mixing.is_empty() {
            return;
        }
        let nv = self.backend.hparams().n_vocab;
        let before: Vec<usize> = decoding
            .iter()
            .chain(mixing.iter().map(|(a, _)| a))
            .map(|a| a.seq.ids().len())
            .collect();
        let t = Instant::now();
        // Each sequence's tokens and cache for the pass, and its sampler with the cache length
        // after it (only a prompt's last chunk samples: its first token), for reading the
        // logits where the backend put them.
        let ids: Vec<[u32; 1]> = decoding.iter().map(|a| [a.next]).collect();
        let mut seqs: Vec<(&[u32], &mut Cache)> = Vec::with_capacity(before.len());
        let mut work: Vec<Option<(&mut Seq, usize)>> = Vec::with_capacity(before.len());
        for (a, id) in decoding.iter_mut().zip(&ids) {
            work.push(Some((&mut a.seq, a.cache.len() + 1)));
            seqs.push((&id[..], &mut a.cache));
        }
        for (a, end) in mixing.iter_mut() {
            work.push((*end == a.prompt.len()).then_some((&mut a.seq, *end)));
            seqs.push((&a.prompt[a.prefilled..*end], &mut a.cache));
        }
        let outs = self
            .backend
            .forward_mixed_with(&mut seqs, |logits| sample_all(&mut work, logits, nv));
        let outs = match outs {
            Ok(outs) => outs,
            Err(e) => {
                for a in decoding
                    .into_iter()
                    .chain(mixing.into_iter().map(|(a, _)| a))
                {
                    let _ = a.events.send(Event::Error(e.to_string()));
                    self.free.push(a.into_slot());
                }
                return;
            }
        };
        let all = decoding
            .into_iter()
            .map(|a| (a, None))
            .chain(mixing.into_iter().map(|(mut a, end)| {
                a.prefilled = end;
                (a, Some(end))
            }));
        for (((mut a, _), before), out) in all.zip(before).zip(outs) {
            let Some(out) = out else {
                self.active.push(a); // a prompt chunk that is not its last
                continue;
            };
            match self.report(&mut a, before, out) {
                Ok(false) => self.active.push(a),
                Ok(true) => self.free.push(a.into_slot()),
                Err(e) => {
                    let _ = a.events.send(Event::Error(e.to_string()));
                    self.free.push(a.into_slot());
                }
            }
        }
        self.pace.decoded(t.elapsed().as_secs_f64());
    }

    /// Tokens in the next chunk of a prompt of `len` tokens of which `pos` are in the cache.
    /// Chunks start at multiples of `chunk` whatever the load, so a prompt is cut the same way
    /// alone and in a busy server (the same bits either way).
    fn next_chunk(&self, len: usize, pos: usize) -> usize {
        (pos / self.chunk * self.chunk + self.chunk).min(len) - pos
    }

    /// Runs `a`'s next prompt chunk; after the last one samples its first token. True when `a`
    /// is finished.
    fn prefill_chunk(&self, a: &mut Active) -> Result<bool, ServerError> {
        let (pos, len) = (a.prefilled, a.prompt.len());
        let end = pos + self.next_chunk(len, pos);
        let logits = self
            .backend
            .forward(&a.prompt[pos..end], &mut a.cache, Logits::Last)?;
        a.prefilled = end;
        if end < len {
            return Ok(false);
        }
        self.advance(a, &logits)
    }

    /// Samples `a`'s next token from `logits` and sends what it produced; true when `a` is
    /// finished (done, or its client went away).
    fn advance(&self, a: &mut Active, logits: &[f32]) -> Result<bool, ServerError> {
        let before = a.seq.ids().len();
        let out = a.seq.step(logits, a.cache.len());
        self.report(a, before, out)
    }

    /// Sends what `a`'s step (`out`, sampled when it had `before` tokens) produced; true when
    /// `a` is finished.
    fn report(
        &self,
        a: &mut Active,
        before: usize,
        out: Result<crate::seq::Out, ServerError>,
    ) -> Result<bool, ServerError> {
        let out = out?;
        if a.seq.ids().len() > before {
            let now = Instant::now();
            match a.last_token {
                None => self.metrics.ttft(now - a.queued_at),
                Some(t) => self.metrics.itl(now - t),
            }
            a.last_token = Some(now);
            self.metrics.generated_tokens(1);
        }
        let mut ok = true;
        if let Some(lp) = out.logprob {
            ok &= a.events.send(Event::Token(lp)).is_ok();
        }
        if !out.text.is_empty() {
            ok &= a.events.send(Event::Text(out.text)).is_ok();
        }
        if !ok {
            return Ok(true);
        }
        if let Some(id) = out.next {
            a.next = id;
            return Ok(false);
        }
        let tail = a.seq.finish();
        if !tail.is_empty() {
            let _ = a.events.send(Event::Text(tail));
        }
        tracing::debug!(
            prompt = a.prompt.len(),
            generated = a.seq.ids().len(),
            finish = ?a.seq.end(),
            "done"
        );
        let _ = a.events.send(Event::Done(Done {
            finish: a.seq.end().unwrap_or(Finish::Length),
            stop: a.seq.stop_string().map(String::from),
            prompt_tokens: a.prompt.len(),
            completion_tokens: a.seq.ids().len(),
            cached_tokens: a.cached_tokens,
        }));
        Ok(true)
    }
}

/// Embeddings: per input, the mean over its tokens of the final hidden states after the output
/// norm, scaled to unit L2 length.
pub fn embed(backend: &Backend, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, ServerError> {
    let e = backend.hparams().n_embd;
    inputs
        .iter()
        .map(|ids| {
            let h = backend.hidden_states(ids)?;
            let mut mean = vec![0.0f64; e];
            for row in h.chunks_exact(e) {
                for (m, &v) in mean.iter_mut().zip(row) {
                    *m += f64::from(v);
                }
            }
            let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
            let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            Ok(mean.iter().map(|v| (v * scale) as f32).collect())
        })
        .collect()
}

/// Samples (and detokenizes) each sequence with work from its row of `logits` (`nv` a row);
/// None for rows without work. Each sequence has its own sampler and random stream, so when
/// there are many they are spread over threads.
fn sample_all(
    work: &mut [Option<(&mut Seq, usize)>],
    logits: &[f32],
    nv: usize,
) -> Vec<Option<Result<crate::seq::Out, ServerError>>> {
    let mut items: Vec<_> = work.iter_mut().zip(logits.chunks_exact(nv)).collect();
    let step = |(w, l): &mut (&mut Option<(&mut Seq, usize)>, &[f32])| {
        w.as_mut().map(|(seq, len)| seq.step(l, *len))
    };
    if items.len() >= PARALLEL_SAMPLING {
        items.par_iter_mut().map(step).collect()
    } else {
        items.iter_mut().map(step).collect()
    }
}

/// The common prefix of `held` and `prompt` in whole units of `unit` tokens, short of the
/// prompt's last token (its logits are needed).
fn common_prefix(held: &[u32], prompt: &[u32], unit: usize) -> usize {
    let common = held.iter().zip(prompt).take_while(|(a, b)| a == b).count();
    common.min(prompt.len().saturating_sub(1)) / unit * unit
}

fn lcm(a: usize, b: usize) -> usize {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x.max(1) * b
}
