//! The typed event stream of `/v1/responses`: `response.created`, `response.in_progress`, the
//! output items in order (a reasoning model's `reasoning` item, the `message`, each
//! `function_call`), each opened at its first content, then `response.completed` (or
//! `response.incomplete`). Events are named and numbered (`sequence_number`).

use crate::answer::Reader;
use crate::engine::Event;
use crate::new_id;
use crate::responses::{Head, call_item, message_item, reasoning_item, status};
use crate::sse::{self, SseTx};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

/// The items sent so far and the one still open (its kind, id and text).
struct Items {
    tx: SseTx,
    seq: u64,
    output: Vec<Value>,
    open: Option<(&'static str, String, String)>,
}

impl Items {
    fn send(&mut self, kind: &str, mut v: Value) -> bool {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.tx.send(sse::named(kind, &v)).is_ok()
    }

    /// The text delta and done events of an item kind ("message" or "reasoning").
    fn names(kind: &str) -> (&'static str, &'static str) {
        match kind {
            "reasoning" => (
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
            ),
            _ => ("response.output_text.delta", "response.output_text.done"),
        }
    }

    fn close(&mut self) -> bool {
        let Some((kind, id, text)) = self.open.take() else {
            return true;
        };
        let index = self.output.len();
        let (_, done) = Self::names(kind);
        let item = match kind {
            "reasoning" => reasoning_item(&id, &text),
            _ => message_item(&id, &text, "completed"),
        };
        let ok = self.send(
            done,
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
        ) && (kind == "reasoning"
            || self.send(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": item["content"][0]}),
            ))
            && self.send("response.output_item.done", json!({"output_index": index, "item": item}));
        self.output.push(item);
        ok
    }

    /// Adds `t` to the open item of `kind`, opening it (after closing another) if need be.
    fn text(&mut self, kind: &'static str, t: &str) -> bool {
        if !matches!(&self.open, Some((k, _, _)) if *k == kind) {
            if !self.close() {
                return false;
            }
            let index = self.output.len();
            let (id, item) = match kind {
                "reasoning" => {
                    let id = new_id("rs_");
                    let mut item = reasoning_item(&id, "");
                    item["content"] = json!([]);
                    (id, item)
                }
                _ => {
                    let id = new_id("msg_");
                    let item = message_item(&id, "", "in_progress");
                    (id, item)
                }
            };
            let ok = self.send(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ) && (kind == "reasoning"
                || self.send(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                ));
            if !ok {
                return false;
            }
            self.open = Some((kind, id, String::new()));
        }
        let index = self.output.len();
        let Some((_, id, text)) = self.open.as_mut() else {
            return false;
        };
        text.push_str(t);
        let id = id.clone();
        let (delta, _) = Self::names(kind);
        self.send(
            delta,
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t, "logprobs": []}),
        )
    }
}

/// Streams the answer as the Responses API's events.
pub fn stream(mut rx: UnboundedReceiver<Event>, head: Head, mut read: Reader) -> Response {
    let (tx, resp) = sse::channel();
    tokio::spawn(async move {
        let mut it = Items {
            tx,
            seq: 0,
            output: Vec::new(),
            open: None,
        };
        let start = head.response("in_progress", Vec::new(), None);
        if !it.send("response.created", json!({"response": start}))
            || !it.send("response.in_progress", json!({"response": start}))
        {
            return;
        }
        while let Some(e) = rx.recv().await {
            match e {
                Event::Text(t) => {
                    let Some(t) = read.push(&t, &mut |r| it.text("reasoning", r)) else {
                        return;
                    };
                    if !t.is_empty() && !it.text("message", &t) {
                        return;
                    }
                }
                Event::Done(d) => {
                    let (rest, found) = read.finish(&mut |r| it.text("reasoning", r));
                    let has_message = it.output.iter().any(|o| o["type"] == "message")
                        || matches!(&it.open, Some((k, _, _)) if *k == "message");
                    // An answer with neither text nor calls still has its (empty) message.
                    if !rest.is_empty() || (found.is_empty() && !has_message) {
                        it.text("message", &rest);
                    }
                    it.close();
                    for c in &found {
                        let index = it.output.len();
                        let args = c.arguments.to_string();
                        let mut item = call_item(c, "", "in_progress");
                        let id = item["id"].clone();
                        it.send(
                            "response.output_item.added",
                            json!({"output_index": index, "item": item}),
                        );
                        it.send(
                            "response.function_call_arguments.delta",
                            json!({"item_id": id, "output_index": index, "delta": args}),
                        );
                        it.send(
                            "response.function_call_arguments.done",
                            json!({"item_id": id, "output_index": index, "name": c.name, "arguments": args}),
                        );
                        item["arguments"] = json!(args);
                        item["status"] = json!("completed");
                        it.send(
                            "response.output_item.done",
                            json!({"output_index": index, "item": item}),
                        );
                        it.output.push(item);
                    }
                    let st = status(&d, !found.is_empty());
                    let end = head.response(st, std::mem::take(&mut it.output), Some(&d));
                    let kind = if st == "completed" {
                        "response.completed"
                    } else {
                        "response.incomplete"
                    };
                    it.send(kind, json!({"response": end}));
                    return;
                }
                Event::Token(_) => {}
                Event::Error(msg) => {
                    it.send(
                        "error",
                        json!({"code": "server_error", "message": msg, "param": null}),
                    );
                    return;
                }
            }
        }
    });
    resp
}
