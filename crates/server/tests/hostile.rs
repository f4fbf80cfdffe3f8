//! Hostile inputs to the server: model files that lie (a vocabulary that does not match the
//! embedding, a missing tokenizer, NaN weights: an error response, not garbage text) and requests
//! at the resource bounds (huge `max_tokens`, very many messages, a wrong method).

mod common;

use axum::http::StatusCode;
use common::*;
use gguf::{Array, GgufFile, Value};
use serde_json::{Value as Json, json};
use std::sync::Arc;

/// `bytes` rewritten with `edit` applied to its metadata and `patch` to each tensor's data.
fn rewrite(
    bytes: Vec<u8>,
    edit: impl FnOnce(&mut Vec<(String, Value)>),
    patch: impl Fn(&str, &mut Vec<u8>),
) -> Vec<u8> {
    gguf::rewrite(&GgufFile::from_bytes(bytes).unwrap(), edit, patch).unwrap()
}

fn load(bytes: Vec<u8>) -> Result<server::State, server::ServerError> {
    let model = model::Model::from_file(GgufFile::from_bytes(bytes).unwrap()).unwrap();
    let cfg = server::Config {
        ctx: 256,
        ..server::Config::default()
    };
    server::State::from_model(model, "tiny".into(), &cfg)
}

fn load_err(bytes: Vec<u8>) -> String {
    match load(bytes) {
        Ok(_) => panic!("the lying model was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn vocabulary_larger_or_smaller_than_the_embedding_is_refused() {
    for extra in [5i64, -3] {
        let bytes = rewrite(
            tiny_chat_model(None),
            |md| {
                for (k, v) in md.iter_mut() {
                    match (k.as_str(), v) {
                        ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                            if extra > 0 {
                                t.extend((0..extra).map(|i| format!("<extra_{i}>")));
                            } else {
                                t.truncate((t.len() as i64 + extra) as usize);
                            }
                        }
                        ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) => {
                            if extra > 0 {
                                t.extend((0..extra).map(|_| 1));
                            } else {
                                t.truncate((t.len() as i64 + extra) as usize);
                            }
                        }
                        _ => {}
                    }
                }
                if extra < 0 {
                    // the special ids must stay inside the shortened vocabulary
                    md.retain(|(k, _)| !k.ends_with("_token_id"));
                }
            },
            |_, _| {},
        );
        let err = load_err(bytes);
        let n = (259 + extra).to_string();
        assert!(
            err.contains(&n) && err.contains("259") && err.contains("token_embd"),
            "{err}"
        );
    }
}

#[test]
fn missing_tokenizer_is_refused() {
    let bytes = rewrite(
        tiny_chat_model(None),
        |md| md.retain(|(k, _)| !k.starts_with("tokenizer.")),
        |_, _| {},
    );
    let err = load_err(bytes);
    assert!(err.contains("tokenizer.ggml"), "{err}");
}

/// The tiny chat model with NaN in its final norm: every logit is NaN.
fn nan_app() -> axum::Router {
    let bytes = rewrite(
        tiny_chat_model(None),
        |_| {},
        |name, data| {
            if name == "output_norm.weight" {
                for c in data.chunks_exact_mut(4) {
                    c.copy_from_slice(&f32::NAN.to_le_bytes());
                }
            }
        },
    );
    server::app(Arc::new(load(bytes).unwrap()))
}

#[tokio::test]
async fn nan_weights_give_an_error_not_text() {
    let app = nan_app();
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let (s, v) = post_json(&app, "/v1/chat/completions", &chat).await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
    // the CPU backend refuses non-finite activations; the sampler refuses NaN logits
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("finite") || msg.contains("NaN"), "{msg}");
    let msg_req = json!({"model": "m", "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}]});
    let (s, v) = post_json(&app, "/v1/messages", &msg_req).await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
    assert_eq!(v["type"], "error", "{v}");
    // streamed: the stream carries an error event and no text
    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    let (s, body) = send(&app, post("/v1/chat/completions", stream.to_string())).await;
    assert_eq!(s, StatusCode::OK);
    let events = sse_events(&body);
    let data: Vec<Json> = events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str(d).ok())
        .collect();
    assert!(data.iter().any(|d| d.get("error").is_some()), "{body}");
    assert!(
        !data.iter().any(|d| d["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty())),
        "{body}"
    );
}

#[tokio::test]
async fn huge_max_tokens_is_capped_by_the_context() {
    let app = app();
    let req = json!({"prompt": "hello", "max_tokens": u64::MAX, "temperature": 0,
                     "ignore_eos": true});
    let (s, v) = post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let u = &v["usage"];
    let total = u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap();
    assert_eq!(total, 256, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn too_many_messages_is_a_clear_400() {
    let app = app();
    let many: Vec<Json> = (0..server::MAX_MESSAGES + 1)
        .map(|_| json!({"role": "user", "content": ""}))
        .collect();
    let t0 = std::time::Instant::now();
    let (s, v) = post_json(
        &app,
        "/v1/chat/completions",
        &json!({"messages": many, "max_tokens": 1}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("messages") && msg.contains("at most"), "{msg}");
    let (s, v) = post_json(
        &app,
        "/v1/messages",
        &json!({"model": "m", "messages": many, "max_tokens": 1}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(t0.elapsed().as_secs() < 5, "{:?}", t0.elapsed());
    // a long conversation under the cap that does not fit the context is a 400 as well
    let fits: Vec<Json> = (0..2000)
        .map(|_| json!({"role": "user", "content": "x"}))
        .collect();
    let (s, v) = post_json(
        &app,
        "/v1/chat/completions",
        &json!({"messages": fits, "max_tokens": 1}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

#[tokio::test]
async fn wrong_method_is_a_json_405() {
    let app = app();
    let (s, b) = send(&app, get("/v1/chat/completions")).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{b}");
    let v: Json = serde_json::from_str(&b).unwrap();
    assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
    let (s, b) = send(&app, get("/v1/messages")).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{b}");
    let v: Json = serde_json::from_str(&b).unwrap();
    assert_eq!(v["type"], "error", "{v}");
}

#[tokio::test]
async fn stop_strings_are_bounded() {
    // every token is checked against every stop string on the shared engine thread: a megabyte
    // of them would stall all requests for ~10 ms a token
    let app = app();
    let long = vec!["q".repeat(server::MAX_STOP_BYTES + 1)];
    let many: Vec<String> = (0..=server::MAX_STOPS).map(|i| format!("s{i}")).collect();
    for stop in [long, many] {
        let req = json!({"prompt": "hello", "max_tokens": 2, "stop": stop});
        let (s, v) = post_json(&app, "/v1/completions", &req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["param"], "stop", "{v}");
        let req = json!({"model": "m", "max_tokens": 2, "stop_sequences": stop,
                         "messages": [{"role": "user", "content": "hi"}]});
        let (s, v) = post_json(&app, "/v1/messages", &req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("stop_sequences"),
            "{v}"
        );
    }
    // at the bounds: accepted
    let ok: Vec<String> = (0..server::MAX_STOPS)
        .map(|i| format!("{i}").repeat(server::MAX_STOP_BYTES / 3))
        .collect();
    let req = json!({"prompt": "hello", "max_tokens": 2, "stop": ok});
    let (s, v) = post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}
