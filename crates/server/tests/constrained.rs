//! Constrained generation through the OpenAI routes: on the tiny synthetic model (random
//! weights, so nothing but the constraint makes its output valid), sampled outputs must parse
//! and satisfy the schema or expression; bad formats are 400s naming the field.

mod common;

use axum::http::StatusCode;
use serde_json::{Value, json};

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    })
}

/// Checks `v` against `person_schema` by hand.
fn check_person(v: &Value) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    let mut keys: Vec<_> = o.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["age", "name", "tags"], "{v}");
    assert!(o["name"].as_str().unwrap().chars().count() <= 6, "{v}");
    let age = o["age"].as_i64().unwrap_or_else(|| panic!("age: {v}"));
    assert!((0..=120).contains(&age), "{v}");
    let tags = o["tags"].as_array().unwrap();
    assert!(
        tags.len() <= 3 && tags.iter().all(|t| t == "a" || t == "b"),
        "{v}"
    );
}

async fn chat(app: &axum::Router, extra: Value) -> (StatusCode, Value) {
    let mut req = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 120});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    common::post_json(app, "/v1/chat/completions", &req).await
}

#[tokio::test]
async fn sampled_json_satisfies_the_schema() {
    let app = common::app();
    for seed in 0..6 {
        let (s, v) = chat(
            &app,
            json!({"seed": seed, "temperature": 1.0,
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "person", "schema": person_schema(), "strict": true}}}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let parsed: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        check_person(&parsed);
    }
}

#[tokio::test]
async fn the_other_spellings_hold_too() {
    let app = common::app();
    // llama.cpp's json_schema field and json_object with a schema; vLLM's guided_json.
    for extra in [
        json!({"json_schema": person_schema()}),
        json!({"response_format": {"type": "json_object", "schema": person_schema()}}),
        json!({"guided_json": person_schema()}),
    ] {
        let mut with = extra.clone();
        with["seed"] = json!(7);
        with["temperature"] = json!(0.8);
        let (s, v) = chat(&app, with).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        check_person(
            &serde_json::from_str(text).unwrap_or_else(|e| panic!("{extra}: {e}: {text:?}")),
        );
    }
}

#[tokio::test]
async fn json_object_gives_an_object_and_regex_a_match() {
    let app = common::app();
    let (s, v) = chat(
        &app,
        json!({"seed": 3, "temperature": 0.7, "max_tokens": 400,
               "response_format": {"type": "json_object"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let finish = &v["choices"][0]["finish_reason"];
    // Random weights may run out of tokens inside the object; a finished one must parse.
    if finish == "stop" {
        let parsed: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(parsed.is_object(), "{text}");
    } else {
        assert_eq!(finish, "length");
        assert!(text.trim_start().starts_with('{'), "{text}");
    }
    for seed in 0..4 {
        let req = json!({"prompt": "code:", "max_tokens": 20, "seed": seed, "temperature": 1.0,
                         "guided_regex": "[a-c]{3}-[0-9]{2}"});
        let (s, v) = common::post_json(&app, "/v1/completions", &req).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let text = v["choices"][0]["text"].as_str().unwrap();
        let b = text.as_bytes();
        assert!(
            b.len() == 6
                && b[..3].iter().all(|c| (b'a'..=b'c').contains(c))
                && b[3] == b'-'
                && b[4..].iter().all(u8::is_ascii_digit),
            "{text:?}"
        );
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    }
}

#[tokio::test]
async fn a_stream_is_held_to_the_schema() {
    let app = common::app();
    let req = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 120,
                     "stream": true, "seed": 11, "temperature": 1.0,
                     "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": person_schema()}}});
    let (s, body) = common::send(&app, common::post("/v1/chat/completions", req.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let mut text = String::new();
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    check_person(&serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}")));
}

#[tokio::test]
async fn bad_formats_are_400s_naming_the_field() {
    let app = common::app();
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "yaml"}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "text", "schema": {}}}),
            "response_format",
        ),
        (
            json!({"json_schema": {"type": "object"}, "guided_regex": "a"}),
            "guided_regex",
        ),
        (json!({"guided_regex": "(unclosed"}), "guided_regex"),
        // Refers only to itself: no value ends.
        (json!({"guided_json": {"$ref": "#"}}), "guided_json"),
        // Unsatisfiable: no output exists.
        (
            json!({"guided_json": {"type": "integer", "minimum": 5, "maximum": 1}}),
            "guided_json",
        ),
        (
            json!({"guided_json": {"$ref": "https://example.invalid/schema.json"}}),
            "guided_json",
        ),
        (
            json!({"guided_regex": "a".repeat(300 << 10)}),
            "guided_regex",
        ),
    ];
    for (extra, param) in cases {
        let (s, v) = chat(&app, extra.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{extra}: {v}");
        assert_eq!(v["error"]["param"], param, "{extra}: {v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    // The server still answers.
    let (s, v) = chat(&app, json!({"max_tokens": 3})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}
