//! Helpers for the server's tests: a tiny synthetic chat model (a `model::synth` llama with
//! gpt2-style byte-level tokenizer metadata and ChatML), an app over it, and request helpers.
#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use gguf::GgufFile;
use serde_json::Value as Json;
use std::path::PathBuf;
use std::sync::Arc;
use tower::ServiceExt;

/// A tiny llama with byte-level tokenizer metadata and `template` as its chat template
/// (`model::synth::chat_model`).
pub fn tiny_chat_model(template: Option<&str>) -> Vec<u8> {
    model::synth::chat_model(template).unwrap()
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

/// A two-worker runtime and a listener on a free loopback port, for tests that run
/// `server::serve` on a thread of their own.
pub fn runtime_and_listener() -> (tokio::runtime::Runtime, tokio::net::TcpListener, u16) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    (rt, listener, port)
}

/// POSTs `body` with `"stream": true` added: the SSE data lines as JSON, in order (an OpenAI
/// stream's `[DONE]` left out).
pub async fn stream_events(app: &Router, path: &str, body: &Json) -> Vec<Json> {
    let mut body = body.clone();
    body["stream"] = Json::Bool(true);
    let (s, text) = send(app, post(path, body.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|l| *l != "[DONE]")
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The real model `name` from the models directory (failing, naming the fetch script, when it
/// is missing) served with a context of `ctx`.
pub fn real_app(name: &str, ctx: usize) -> Router {
    let p = models_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models (or set MOLLA_MODELS)",
        p.display()
    );
    let cfg = server::Config {
        ctx,
        ..server::Config::default()
    };
    server::app(Arc::new(server::State::load(&p, &cfg).unwrap()))
}
