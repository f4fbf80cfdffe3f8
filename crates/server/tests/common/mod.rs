//! Helpers for the server's tests: a tiny synthetic chat model (a `model::synth` llama with
//! gpt2-style byte-level tokenizer metadata and ChatML), an app over it, and request helpers.
#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use gguf::{Array, GgufFile, GgufWriter, TensorSpec, Value};
use model::synth::{SynthSpec, build};
use serde_json::Value as Json;
use std::path::PathBuf;
use std::sync::Arc;
use tower::ServiceExt;

/// GPT-2's byte-to-unicode table: the printable character standing for each byte.
fn byte_char(b: u8) -> char {
    let printable = |c: u32| {
        (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || (0xae..=0xff).contains(&c)
    };
    if printable(b as u32) {
        return char::from(b);
    }
    let n = (0..b as u32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// Token ids of the tiny chat model's special tokens (after the 256 byte tokens).
pub const ENDOFTEXT: u32 = 256;
pub const IM_START: u32 = 257;
pub const IM_END: u32 = 258;

/// A tiny llama (random weights, 259 tokens: the 256 bytes and three ChatML specials) with
/// byte-level BPE metadata and `template` as `tokenizer.chat_template` (ChatML when None).
pub fn tiny_chat_model(template: Option<&str>) -> Vec<u8> {
    let spec = SynthSpec {
        n_vocab: 259,
        ..SynthSpec::tiny("llama")
    };
    let base = GgufFile::from_bytes(build(&spec).unwrap()).unwrap();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
    let mut types = vec![1i32; 256];
    types.extend([3, 3, 3]);
    let mut md: Vec<(String, Value)> = base.metadata().to_vec();
    let s = |v: &str| Value::String(v.into());
    md.extend([
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.pre".into(), s("gpt2")),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(Vec::new())),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(ENDOFTEXT)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(IM_END)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]);
    if let Some(t) = template {
        md.push(("tokenizer.chat_template".into(), s(t)));
    }
    let specs: Vec<TensorSpec> = base
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &specs).unwrap();
    for t in base.tensors() {
        w.write_tensor(base.tensor_data(t)).unwrap();
    }
    w.finish().unwrap()
}

/// The app over the tiny model (ChatML template) with `cfg`.
pub fn tiny_app(cfg: server::Config) -> Router {
    let file = GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
    let model = model::Model::from_file(file).unwrap();
    let cfg = server::Config {
        ctx: if cfg.ctx == 0 { 256 } else { cfg.ctx },
        ..cfg
    };
    let state = server::State::from_model(model, "tiny".into(), &cfg).unwrap();
    server::app(Arc::new(state))
}

pub fn app() -> Router {
    tiny_app(server::Config::default())
}

/// Sends `req`: the status and the body as text.
pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

pub fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

pub fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// POSTs JSON: the status and the parsed body.
pub async fn post_json(app: &Router, path: &str, body: &Json) -> (StatusCode, Json) {
    let (s, text) = send(app, post(path, body.to_string())).await;
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (s, v)
}

/// Parses an SSE body: (event name, data) pairs.
pub fn sse_events(text: &str) -> Vec<(Option<String>, String)> {
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = Some(n.trim().to_string());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            (name, data)
        })
        .collect()
}

pub fn models_dir() -> PathBuf {
    std::env::var_os("MOLLA_MODELS").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/molla/models"),
        PathBuf::from,
    )
}
