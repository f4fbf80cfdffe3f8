//! The SSE stream of `/v1/chat/completions` and `/v1/completions`: the engine's events of each
//! of a request's `n` sequences as OpenAI chunks, choice by choice (`index`), then the usage
//! chunk when asked for and `[DONE]`.

use crate::answer::Reader;
use crate::engine::{Done, Event};
use crate::error::ApiError;
use crate::openai::{Kind, finish_reason, logprobs_json, usage};
use crate::openai_tools::tool_calls_json;
use crate::seq::TokenLogprob;
use crate::sse;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;
use tokenizer::Tokenizer;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// What every chunk of a stream carries, and how its choices are read.
pub struct Chunks {
    pub kind: Kind,
    pub id: String,
    pub model: String,
    pub created: u64,
    pub include_usage: bool,
    pub tok: Arc<Tokenizer>,
    /// The request's tool names: the answers are read for calls ([`crate::tools::Stream`]).
    pub names: Option<Vec<String>>,
    /// Answers are split into thoughts and answer ([`crate::reasoning`]), the prompt having
    /// opened `<think>` itself (true) or not.
    pub think: Option<bool>,
}

/// One choice's state: its log-probabilities, its answer's reader, and how it ended.
struct Choice {
    log: Logs,
    read: Reader,
    done: Option<Done>,
}

/// Log-probabilities of tokens whose text has not been sent yet, and the text's length so far
/// (completions' offsets).
#[derive(Default)]
struct Logs {
    pending: Vec<TokenLogprob>,
    offset: usize,
}

impl Chunks {
    fn chunk(&self, choice: Value) -> Value {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Text => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
               "choices": [choice]})
    }

    fn piece(&self, index: usize, text: &str, lp: Value, finish: Option<&str>) -> Value {
        match self.kind {
            Kind::Chat => {
                let delta = if text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!({"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish})
            }
            Kind::Text => {
                json!({"index": index, "text": text, "logprobs": lp, "finish_reason": finish})
            }
        }
    }

    /// Sends thoughts as a `reasoning_content` delta of choice `i`.
    fn thought(&self, tx: &sse::SseTx, i: usize, log: &mut Logs, r: &str) -> bool {
        let l = self.logprobs(log);
        let delta = json!({"index": i, "delta": {"reasoning_content": r}, "logprobs": l,
                           "finish_reason": null});
        tx.send(sse::data(&self.chunk(delta))).is_ok()
    }

    fn logprobs(&self, log: &mut Logs) -> Value {
        if log.pending.is_empty() {
            return Value::Null;
        }
        let v = logprobs_json(&self.tok, self.kind, &log.pending, &mut log.offset);
        log.pending.clear();
        v
    }
}

/// Streams the sequences of `rxs` (choice i from `rxs[i]`) as one response.
pub fn stream(rxs: Vec<UnboundedReceiver<Event>>, a: Chunks) -> Response {
    let (tx, resp) = sse::channel();
    let n = rxs.len();
    // The choices' events on one channel, tagged with their index.
    let (mtx, mut mrx) = unbounded_channel();
    for (i, mut rx) in rxs.into_iter().enumerate() {
        let mtx = mtx.clone();
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if mtx.send((i, e)).is_err() {
                    return;
                }
            }
        });
    }
    drop(mtx);
    tokio::spawn(async move {
        let mut choices: Vec<Choice> = (0..n)
            .map(|_| Choice {
                log: Logs::default(),
                read: Reader::new(a.names.clone(), a.think),
                done: None,
            })
            .collect();
        if let Kind::Chat = a.kind {
            for i in 0..n {
                let first = json!({"index": i, "delta": {"role": "assistant", "content": ""},
                                   "logprobs": null, "finish_reason": null});
                if tx.send(sse::data(&a.chunk(first))).is_err() {
                    return;
                }
            }
        }
        let mut left = n;
        while let Some((i, ev)) = mrx.recv().await {
            let c = &mut choices[i];
            let sent = match ev {
                Event::Token(t) => {
                    c.log.pending.push(t);
                    Ok(())
                }
                Event::Text(t) => {
                    let Choice { log, read, .. } = c;
                    let Some(t) = read.push(&t, &mut |r| a.thought(&tx, i, log, r)) else {
                        return;
                    };
                    if t.is_empty() {
                        continue;
                    }
                    let l = a.logprobs(log);
                    tx.send(sse::data(&a.chunk(a.piece(i, &t, l, None))))
                }
                Event::Done(d) => {
                    let Choice { log, read, .. } = c;
                    let (rest, found) = read.finish(&mut |r| a.thought(&tx, i, log, r));
                    if !log.pending.is_empty() || !rest.is_empty() {
                        let l = a.logprobs(log);
                        let _ = tx.send(sse::data(&a.chunk(a.piece(i, &rest, l, None))));
                    }
                    let mut reason = Some(finish_reason(d.finish));
                    if !found.is_empty() {
                        let delta = json!({"index": i, "delta": {"tool_calls": tool_calls_json(&found, true)},
                                           "logprobs": null, "finish_reason": null});
                        let _ = tx.send(sse::data(&a.chunk(delta)));
                        reason = Some("tool_calls");
                    }
                    c.done = Some(d);
                    left -= 1;
                    tx.send(sse::data(&a.chunk(a.piece(i, "", Value::Null, reason))))
                }
                Event::Error(e) => {
                    let _ = tx.send(sse::data(&ApiError::internal(e).body()));
                    break;
                }
            };
            if sent.is_err() {
                return;
            }
            if left == 0 {
                if a.include_usage {
                    let dones: Vec<Done> = choices.iter().filter_map(|c| c.done.clone()).collect();
                    let mut last = a.chunk(json!(null));
                    last["choices"] = json!([]);
                    last["usage"] = usage(&combined(&dones));
                    let _ = tx.send(sse::data(&last));
                }
                break;
            }
        }
        let _ = tx.send(sse::done());
    });
    resp
}

/// The usage of `n` sequences of one prompt: the prompt counted once, the completions summed.
pub fn combined(dones: &[Done]) -> Done {
    let mut d = dones[0].clone();
    d.completion_tokens = dones.iter().map(|x| x.completion_tokens).sum();
    d
}
