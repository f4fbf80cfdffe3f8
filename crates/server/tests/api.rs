//! Every route over a tiny synthetic model, plain and streamed, and the error cases.

mod common;

use axum::http::{Request, StatusCode};
use common::*;
use serde_json::{Value, json};

fn chat_body(stream: bool) -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "max_tokens": 5, "temperature": 0, "stream": stream,
           "stream_options": {"include_usage": true}})
}

#[tokio::test]
async fn health_and_models() {
    let app = app();
    let (s, b) = send(&app, get("/health")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = send(&app, get("/v1/models")).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["data"][0]["id"], "tiny");
    let (s, _) = send(&app, get("/v1/models/tiny")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = send(&app, get("/v1/models/nope")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn chat_completion() {
    let app = app();
    let (s, v) = post_json(&app, "/v1/chat/completions", &chat_body(false)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"].is_string());
    let u = &v["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(u["completion_tokens"].as_u64().unwrap() <= 5);
    let reason = v["choices"][0]["finish_reason"].as_str().unwrap();
    assert!(reason == "stop" || reason == "length", "{reason}");
}

#[tokio::test]
async fn chat_completion_streamed() {
    let app = app();
    let (s, body) = send(
        &app,
        post("/v1/chat/completions", chat_body(true).to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    let n = usage["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n <= 5);
    let fin = &chunks[chunks.len() - 2]["choices"][0]["finish_reason"];
    assert!(fin == "stop" || fin == "length", "{fin}");
}

#[tokio::test]
async fn completion_plain_and_streamed_agree_when_greedy() {
    let app = app();
    let req = json!({"prompt": "hello", "max_tokens": 4, "temperature": 0});
    let (s, v) = post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "text_completion");
    let text = v["choices"][0]["text"].as_str().unwrap().to_string();
    let mut req = req;
    req["stream"] = json!(true);
    let (s, body) = send(&app, post("/v1/completions", req.to_string())).await;
    assert_eq!(s, StatusCode::OK);
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let streamed: String = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| {
            let c: Value = serde_json::from_str(d).unwrap();
            c["choices"][0]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(streamed, text);
}

#[tokio::test]
async fn max_tokens_zero_is_length() {
    let app = app();
    let req = json!({"prompt": "hello", "max_tokens": 0});
    let (s, v) = post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 0);
}

#[tokio::test]
async fn anthropic_messages() {
    let app = app();
    let req = json!({"model": "tiny", "max_tokens": 3, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "temperature": 0, "stop_sequences": ["zzz"]});
    let (s, v) = post_json(&app, "/v1/messages", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["type"], "text");
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let r = v["stop_reason"].as_str().unwrap();
    assert!(["end_turn", "max_tokens", "stop_sequence"].contains(&r));

    let mut req = req;
    req["stream"] = json!(true);
    let (s, body) = send(&app, post("/v1/messages", req.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let events = sse_events(&body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    assert_eq!(
        &names[..3],
        ["message_start", "content_block_start", "ping"]
    );
    assert_eq!(
        &names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    for (n, d) in &events {
        let v: Value = serde_json::from_str(d).unwrap();
        assert_eq!(v["type"].as_str(), n.as_deref());
    }
    let delta: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() <= 3);

    let (s, c) = post_json(&app, "/v1/messages/count_tokens", &req).await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(
        c["input_tokens"], v["usage"]["input_tokens"],
        "count_tokens agrees with usage"
    );
    let (s, e) = post_json(&app, "/v1/messages/count_tokens", &json!({"messages": []})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    assert_eq!(e["type"], "error", "Anthropic error shape: {e}");
}

#[tokio::test]
async fn tokenize_roundtrip() {
    let app = app();
    let (s, v) = post_json(&app, "/tokenize", &json!({"content": "hey <|im_end|>"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ids = v["tokens"].clone();
    assert!(ids.as_array().unwrap().contains(&json!(258)));
    let (s, v) = post_json(&app, "/detokenize", &json!({"tokens": [104, 105]})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["content"], "hi");
}

/// Asserts an OpenAI-shaped error with `status` whose message or param mentions `needle`.
async fn assert_error(
    app: &axum::Router,
    req: Request<axum::body::Body>,
    status: StatusCode,
    needle: &str,
) {
    let (s, b) = send(app, req).await;
    assert_eq!(s, status, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap_or_else(|e| panic!("{e}: {b}"));
    let e = &v["error"];
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    let all = format!("{} {}", e["message"], e["param"]);
    assert!(all.contains(needle), "{needle:?} not in {v}");
}

#[tokio::test]
async fn bad_requests() {
    let app = app();
    let chat = "/v1/chat/completions";
    assert_error(
        &app,
        post(chat, "{not json"),
        StatusCode::BAD_REQUEST,
        "invalid",
    )
    .await;
    assert_error(
        &app,
        post(chat, r#"{"model":"x"}"#),
        StatusCode::BAD_REQUEST,
        "messages",
    )
    .await;
    let wrong = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":"many"}"#;
    assert_error(
        &app,
        post(chat, wrong),
        StatusCode::BAD_REQUEST,
        "max_tokens",
    )
    .await;
    let two = r#"{"prompt":"hi","n":17}"#;
    assert_error(
        &app,
        post("/v1/completions", two),
        StatusCode::BAD_REQUEST,
        "n",
    )
    .await;
    assert_error(
        &app,
        post("/v1/completions", "{}"),
        StatusCode::BAD_REQUEST,
        "prompt",
    )
    .await;
    assert_error(
        &app,
        get("/v1/nothing"),
        StatusCode::NOT_FOUND,
        "/v1/nothing",
    )
    .await;
    let big = format!(r#"{{"prompt":"{}"}}"#, "a".repeat(5 << 20));
    assert_error(
        &app,
        post("/v1/completions", big),
        StatusCode::PAYLOAD_TOO_LARGE,
        "large",
    )
    .await;
    let long = format!(r#"{{"prompt":"{}"}}"#, "a ".repeat(400));
    assert_error(
        &app,
        post("/v1/completions", long),
        StatusCode::BAD_REQUEST,
        "context",
    )
    .await;

    // Anthropic's route answers in Anthropic's shape
    let (s, b) = send(&app, post("/v1/messages", r#"{"model":"x","messages":[]}"#)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"),
        "{v}"
    );
}

#[tokio::test]
async fn api_key() {
    let app = tiny_app(server::Config {
        api_key: Some("sekrit".into()),
        ..server::Config::default()
    });
    let (s, _) = send(&app, get("/health")).await;
    assert_eq!(s, StatusCode::OK);
    assert_error(&app, get("/v1/models"), StatusCode::UNAUTHORIZED, "API key").await;
    let wrong = Request::get("/v1/models")
        .header("authorization", "Bearer nope")
        .body(axum::body::Body::empty())
        .unwrap();
    assert_error(&app, wrong, StatusCode::UNAUTHORIZED, "API key").await;
    let good = Request::get("/v1/models")
        .header("authorization", "Bearer sekrit")
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(send(&app, good).await.0, StatusCode::OK);
    let (s, b) = send(&app, post("/v1/messages", "{}")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(b.contains("authentication_error"), "{b}");
    let x = Request::post("/v1/messages")
        .header("x-api-key", "sekrit")
        .body(axum::body::Body::from("{}"))
        .unwrap();
    assert_eq!(send(&app, x).await.0, StatusCode::BAD_REQUEST);
}
