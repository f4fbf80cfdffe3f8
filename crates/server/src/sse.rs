//! Server-sent events: a response body fed by a channel, so a task can translate the engine's
//! events into OpenAI chunks or Anthropic events as they come.

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// The sending end of an SSE response; when the client goes away, sends fail.
pub type SseTx = UnboundedSender<Event>;

/// A channel and the SSE response that streams what is sent on it until the sender drops.
pub fn channel() -> (SseTx, Response) {
    let (tx, rx) = unbounded_channel();
    let body = UnboundedReceiverStream::new(rx).map(Ok::<_, Infallible>);
    (tx, Sse::new(body).into_response())
}

/// `data: {json}`
pub fn data(v: &serde_json::Value) -> Event {
    Event::default().data(v.to_string())
}

/// `event: name` then `data: {json}` (Anthropic's style).
pub fn named(name: &str, v: &serde_json::Value) -> Event {
    Event::default().event(name).data(v.to_string())
}

/// OpenAI's end of stream: `data: [DONE]`.
pub fn done() -> Event {
    Event::default().data("[DONE]")
}
