//! The event stream of `/v1/messages`: `message_start`, then the answer's content blocks in
//! order (a reasoning model's `thinking`, the `text`, each `tool_use`), each opened when its
//! first content comes, then `message_delta` and `message_stop`.

use crate::answer::Reader;
use crate::anthropic::stop_reason;
use crate::anthropic_tools;
use crate::engine::Event;
use crate::error::ApiError;
use crate::sse::{self, SseTx};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

/// The blocks sent so far: the next index and the one still open.
struct Blocks {
    tx: SseTx,
    next: usize,
    open: Option<(&'static str, usize)>,
}

fn ev(name: &str, v: Value) -> axum::response::sse::Event {
    sse::named(name, &v)
}

impl Blocks {
    fn send(&self, name: &str, v: Value) -> bool {
        self.tx.send(ev(name, v)).is_ok()
    }

    fn close(&mut self) -> bool {
        match self.open.take() {
            Some((_, index)) => self.send(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ),
            None => true,
        }
    }

    /// The open block of `kind` ("text" or "thinking"), opened after closing another.
    fn ensure(&mut self, kind: &'static str) -> Option<usize> {
        if let Some((k, i)) = self.open
            && k == kind
        {
            return Some(i);
        }
        let index = self.next;
        let block = match kind {
            "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
            _ => json!({"type": "text", "text": ""}),
        };
        let ok = self.close()
            && self.send(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            );
        self.next += 1;
        self.open = Some((kind, index));
        ok.then_some(index)
    }

    fn text(&mut self, t: &str) -> bool {
        let Some(index) = self.ensure("text") else {
            return false;
        };
        self.send(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "text_delta", "text": t}}),
        )
    }

    fn thinking(&mut self, t: &str) -> bool {
        let Some(index) = self.ensure("thinking") else {
            return false;
        };
        self.send(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "thinking_delta", "thinking": t}}),
        )
    }

    /// A whole `tool_use` block: its start (input empty), the input in one
    /// `input_json_delta`, its stop.
    fn tool_use(&mut self, mut block: Value) -> bool {
        let index = self.next;
        self.next += 1;
        let input = block["input"].to_string();
        block["input"] = json!({});
        self.close()
            && self.send(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            )
            && self.send(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": input}}),
            )
            && self.send(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            )
    }
}

/// Streams the answer as Anthropic's events. With nothing to read for, the text block opens
/// at once (before `ping`), as Anthropic's API sends it.
pub fn stream(
    mut rx: UnboundedReceiver<Event>,
    id: String,
    model: String,
    input_tokens: usize,
    mut read: Reader,
) -> Response {
    let (tx, resp) = sse::channel();
    tokio::spawn(async move {
        let mut b = Blocks {
            tx,
            next: 0,
            open: None,
        };
        let start = json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}});
        if !b.send("message_start", start) {
            return;
        }
        if read.is_plain() && b.ensure("text").is_none() {
            return;
        }
        if !b.send("ping", json!({"type": "ping"})) {
            return;
        }
        while let Some(e) = rx.recv().await {
            match e {
                Event::Text(t) => {
                    let Some(t) = read.push(&t, &mut |r| b.thinking(r)) else {
                        return;
                    };
                    if !t.is_empty() && !b.text(&t) {
                        return;
                    }
                }
                Event::Done(d) => {
                    let (rest, found) = read.finish(&mut |r| b.thinking(r));
                    if !rest.is_empty() {
                        b.text(&rest);
                    }
                    for block in anthropic_tools::tool_use_blocks(&found) {
                        b.tool_use(block);
                    }
                    b.close();
                    let reason = if found.is_empty() {
                        stop_reason(&d)
                    } else {
                        "tool_use"
                    };
                    b.send(
                        "message_delta",
                        json!({"type": "message_delta",
                               "delta": {"stop_reason": reason, "stop_sequence": d.stop},
                               "usage": {"output_tokens": d.completion_tokens}}),
                    );
                    b.send("message_stop", json!({"type": "message_stop"}));
                    return;
                }
                Event::Token(_) => {}
                Event::Error(msg) => {
                    b.send("error", ApiError::internal(msg).anthropic().body());
                    return;
                }
            }
        }
    });
    resp
}
