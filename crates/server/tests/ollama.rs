//! Ollama's API on the tiny model: chat and generate, one object and newline-delimited chunks
//! (the same text), `format` held, the model listing and details, embeddings, and errors in
//! Ollama's `{"error": ...}` shape.

mod common;

use axum::http::StatusCode;
use serde_json::{Value, json};

/// The NDJSON lines of a streamed answer.
async fn lines(app: &axum::Router, path: &str, req: &Value) -> Vec<Value> {
    let (s, body) = common::send(app, common::post(path, req.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test]
async fn chat_and_generate_plain_and_streamed() {
    let app = common::app();
    let req = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": false,
                     "options": {"temperature": 0, "num_predict": 8, "seed": 1}});
    let (s, v) = common::post_json(&app, "/api/chat", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["done"], &v["message"]["role"]),
        (&json!(true), &json!("assistant")),
        "{v}"
    );
    assert!(
        v["done_reason"] == "length" || v["done_reason"] == "stop",
        "{v}"
    );
    assert!(
        v["prompt_eval_count"].as_u64().unwrap() > 3 && v["eval_count"].as_u64().unwrap() <= 8,
        "{v}"
    );
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));
    let text = v["message"]["content"].as_str().unwrap();

    let mut sreq = req.clone();
    sreq.as_object_mut().unwrap().remove("stream"); // Ollama streams by default
    let chunks = lines(&app, "/api/chat", &sreq).await;
    let streamed: String = chunks
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, text);
    let last = chunks.last().unwrap();
    assert_eq!(
        (&last["done"], &last["eval_count"]),
        (&json!(true), &v["eval_count"])
    );
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["done"] == false)
    );

    let g =
        json!({"prompt": "hello", "raw": true, "options": {"temperature": 0, "num_predict": 5}});
    let chunks = lines(&app, "/api/generate", &g).await;
    assert!(chunks.last().unwrap()["done"] == true);
    let streamed: String = chunks
        .iter()
        .map(|c| c["response"].as_str().unwrap())
        .collect();
    let mut g1 = g.clone();
    g1["stream"] = json!(false);
    let (_, v) = common::post_json(&app, "/api/generate", &g1).await;
    assert_eq!(v["response"].as_str().unwrap(), streamed, "{v}");
}

#[tokio::test]
async fn format_and_forced_shapes() {
    let app = common::app();
    let schema = json!({"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"],
                        "additionalProperties": false});
    let req = json!({"messages": [{"role": "user", "content": "hi"}], "stream": false, "format": schema,
                     "options": {"temperature": 1.0, "seed": 4, "num_predict": 30}});
    let (s, v) = common::post_json(&app, "/api/chat", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let parsed: Value = serde_json::from_str(v["message"]["content"].as_str().unwrap()).unwrap();
    assert!(parsed["k"] == "a" || parsed["k"] == "b", "{v}");
    let req = json!({"prompt": "hi", "stream": false, "format": "json",
                     "options": {"temperature": 1.0, "seed": 4, "num_predict": 60}});
    let (s, v) = common::post_json(&app, "/api/generate", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    if v["done_reason"] == "stop" {
        serde_json::from_str::<Value>(v["response"].as_str().unwrap()).unwrap();
    }
}

#[tokio::test]
async fn listing_details_embeddings_and_errors() {
    let app = common::app();
    let (s, body) = common::send(&app, common::get("/api/tags")).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["models"][0]["name"], "tiny:latest");
    assert_eq!(v["models"][0]["details"]["family"], "llama");
    let (_, body) = common::send(&app, common::get("/api/version")).await;
    assert!(serde_json::from_str::<Value>(&body).unwrap()["version"].is_string());
    let (s, v) = common::post_json(&app, "/api/show", &json!({"model": "tiny"})).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        v["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("completion")),
        "{v}"
    );
    assert!(v["template"].as_str().unwrap().contains("im_start"), "{v}");

    let (s, v) = common::post_json(&app, "/api/embed", &json!({"input": ["a", "bc"]})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["embeddings"].as_array().unwrap().len(), 2);
    let (s, old) = common::post_json(&app, "/api/embeddings", &json!({"prompt": "a"})).await;
    assert_eq!(s, StatusCode::OK, "{old}");
    assert_eq!(old["embedding"], v["embeddings"][0]);

    for (path, req) in [
        ("/api/chat", json!({"messages": "hi"})),
        (
            "/api/chat",
            json!({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}),
        ),
        (
            "/api/chat",
            json!({"messages": [{"role": "user", "content": "x"}], "format": 3}),
        ),
        (
            "/api/chat",
            json!({"messages": [{"role": "user", "content": "x"}], "format": {"type": "nope"}}),
        ),
        (
            "/api/generate",
            json!({"prompt": "x", "template": "{{ .Prompt }}"}),
        ),
        ("/api/generate", json!({"prompt": "x", "suffix": "y"})),
        ("/api/embed", json!({"input": 3})),
    ] {
        let (s, v) = common::post_json(&app, path, &req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{req}: {v}");
        assert!(v["error"].is_string(), "Ollama's shape: {v}");
    }
    // An empty conversation only loads the model, as Ollama answers it.
    let (s, v) = common::post_json(&app, "/api/chat", &json!({"model": "tiny"})).await;
    assert_eq!(
        (s, &v["done_reason"]),
        (StatusCode::OK, &json!("load")),
        "{v}"
    );
}
