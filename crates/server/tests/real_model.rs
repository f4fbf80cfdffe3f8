//! The real SmolLM2-135M-Instruct (fetched by scripts/fetch-models; the test fails, naming the
//! script, when it is missing): a greedy chat completion knows the capital of France.

mod common;

use axum::http::StatusCode;
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn smollm2_knows_paris() {
    let p = common::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models (or set MOLLA_MODELS)",
        p.display()
    );
    let cfg = server::Config {
        ctx: 512,
        ..server::Config::default()
    };
    let state = server::State::load(&p, &cfg).unwrap();
    let app = server::app(Arc::new(state));
    let req = json!({"messages": [{"role": "user", "content": "What is the capital of France?"}],
                     "temperature": 0, "max_tokens": 24});
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("Paris"), "{text}");
}
