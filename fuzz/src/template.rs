//! Target `template`: a chat template's source and a conversation, rendered in the sandbox.
//!
//! Input: the template source, a NUL byte, then a JSON object
//! `{"messages": [...], "tools": [...], "add_generation_prompt": bool, "bos": "...", "eos": "..."}`
//! (a part that is not such JSON leaves the defaults: a four-turn conversation, no tools).
//!
//! Limits are the defaults except a smaller fuel budget (200k, a tenth), which keeps each run
//! short; the output cap (1 MiB) and recursion limit (200) are the defaults. Checks beyond "no
//! panic": every error is one line, and output never exceeds the cap.

use serde_json::Value;
use template::{ChatTemplate, Limits, Message};

fn default_messages() -> Vec<Message> {
    vec![
        Message::new("system", "You are terse."),
        Message::new("user", "Hi <|im_start|> there"),
        Message::new("assistant", "Hello!"),
        Message::new("user", "2+2?"),
    ]
}

/// The limits the fuzzer renders under.
pub fn limits() -> Limits {
    Limits {
        fuel: 200_000,
        ..Limits::default()
    }
}

pub fn run(data: &[u8]) {
    let (source, rest) = crate::split_at_byte(data, 0);
    let Ok(source) = std::str::from_utf8(source) else {
        return;
    };
    let ctx: Value = serde_json::from_slice(rest).unwrap_or(Value::Null);
    let messages = ctx
        .get("messages")
        .and_then(|m| serde_json::from_value::<Vec<Message>>(m.clone()).ok())
        .unwrap_or_else(default_messages);
    let tools = ctx.get("tools");
    let add_gen = ctx
        .get("add_generation_prompt")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let bos = ctx.get("bos").and_then(Value::as_str).unwrap_or("<s>");
    let eos = ctx.get("eos").and_then(Value::as_str).unwrap_or("</s>");
    let limits = limits();
    let t = match ChatTemplate::with_limits(source, bos, eos, limits) {
        Ok(t) => t.with_fixed_time(1_700_000_000),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
            return;
        }
    };
    match t.render(&messages, tools, add_gen) {
        Ok(out) => assert!(out.len() <= limits.max_output_bytes),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
        }
    }
}
