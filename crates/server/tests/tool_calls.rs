//! OpenAI tool calling: on the tiny random-weight model (a ChatML template that shows no tool
//! format), `tool_choice` `"required"` or a named function must still give a well-formed call to
//! one of the tools, plain and streamed; bad tool requests are 400s naming the field.

mod common;

use axum::http::StatusCode;
use serde_json::{Value, json};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                        "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
                        "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add",
         "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
                        "required": ["a"], "additionalProperties": false}}}
    ])
}

fn check_call(c: &Value, only: Option<&str>) {
    assert_eq!(c["type"], "function", "{c}");
    assert!(c["id"].as_str().unwrap().starts_with("call_"), "{c}");
    let name = c["function"]["name"].as_str().unwrap();
    let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
    match name {
        "get_weather" => {
            assert!(
                args["city"].as_str().unwrap().chars().count() <= 8,
                "{args}"
            );
            assert!(args["unit"] == "c" || args["unit"] == "f", "{args}");
            assert_eq!(args.as_object().unwrap().len(), 2, "{args}");
        }
        "add" => assert!((0..=99).contains(&args["a"].as_i64().unwrap()), "{args}"),
        _ => panic!("unknown function {name}"),
    }
    if let Some(o) = only {
        assert_eq!(name, o);
    }
}

fn request(extra: Value) -> Value {
    let mut r = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 120,
                       "temperature": 1.0, "tools": tools()});
    for (k, v) in extra.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

#[tokio::test]
async fn a_required_call_is_well_formed() {
    let app = common::app();
    for seed in 0..5 {
        for (choice, only) in [
            (json!("required"), None),
            (
                json!({"type": "function", "function": {"name": "add"}}),
                Some("add"),
            ),
        ] {
            let req = request(json!({"seed": seed, "tool_choice": choice}));
            let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            let c = &v["choices"][0];
            assert_eq!(c["finish_reason"], "tool_calls", "{v}");
            assert!(c["message"]["content"].is_null(), "{v}");
            let calls = c["message"]["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{v}");
            check_call(&calls[0], only);
        }
    }
}

#[tokio::test]
async fn a_streamed_call_comes_as_a_tool_calls_delta() {
    let app = common::app();
    let req = request(json!({"seed": 3, "stream": true, "tool_choice": "required"}));
    let (s, body) = common::send(&app, common::post("/v1/chat/completions", req.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (mut calls, mut text, mut finish) = (Vec::new(), String::new(), Value::Null);
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(line).unwrap();
        let c = &v["choices"][0];
        text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
        calls.extend(
            c["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
        if !c["finish_reason"].is_null() {
            finish = c["finish_reason"].clone();
        }
    }
    assert_eq!(
        (text.as_str(), &finish),
        ("", &json!("tool_calls")),
        "{body}"
    );
    assert_eq!(calls.len(), 1, "{body}");
    assert_eq!(calls[0]["index"], 0);
    check_call(&calls[0], None);
}

#[tokio::test]
async fn bad_tool_requests_are_400s() {
    let app = common::app();
    let cases = [
        (request(json!({"tool_choice": "sometimes"})), "tool_choice"),
        (
            request(json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "tool_choice",
        ),
        (request(json!({"tools": {"a": 1}})), "tools"),
        (request(json!({"tools": [{"type": "function"}]})), "tools"),
        (
            request(json!({"tools": [], "tool_choice": "required"})),
            "tool_choice",
        ),
        (
            request(json!({"tool_choice": "required", "response_format": {"type": "json_object"}})),
            "tool_choice",
        ),
    ];
    for (req, param) in cases {
        let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{req}: {v}");
        assert_eq!(v["error"]["param"], param, "{req}: {v}");
    }
    let req = json!({"prompt": "hi", "max_tokens": 2, "tools": tools()});
    let (s, v) = common::post_json(&app, "/v1/completions", &req).await;
    assert_eq!(
        (s, &v["error"]["param"]),
        (StatusCode::BAD_REQUEST, &json!("tools")),
        "{v}"
    );
    // "none" and "auto" without a forced call answer as usual.
    for choice in ["none", "auto"] {
        let req = request(json!({"tool_choice": choice, "max_tokens": 4}));
        let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
}

fn anthropic_tools() -> Value {
    tools()
        .as_array()
        .unwrap()
        .iter()
        .map(
            |t| json!({"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}),
        )
        .collect()
}

#[tokio::test]
async fn anthropic_tool_use_blocks() {
    let app = common::app();
    // Greedy, so that the stream must give the same call.
    let req = json!({"model": "m", "max_tokens": 120, "temperature": 0,
                     "messages": [{"role": "user", "content": "hi"}],
                     "tools": anthropic_tools(), "tool_choice": {"type": "tool", "name": "get_weather"}});
    let (s, v) = common::post_json(&app, "/v1/messages", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let blocks = v["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{v}");
    let b = &blocks[0];
    assert_eq!(
        (&b["type"], &b["name"]),
        (&json!("tool_use"), &json!("get_weather")),
        "{v}"
    );
    assert!(b["id"].as_str().unwrap().starts_with("toolu_"));
    assert!(
        b["input"]["unit"] == "c" || b["input"]["unit"] == "f",
        "{v}"
    );

    // Streamed: message_start, ping, then the tool_use block alone (no empty text block).
    let events = common::stream_events(&app, "/v1/messages", &req).await;
    let body = Value::Array(events.clone());
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{body}"
    );
    assert_eq!(events[2]["content_block"]["type"], "tool_use");
    let input: Value =
        serde_json::from_str(events[3]["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(
        input, b["input"],
        "the same seedless greedy? no: only the shape"
    );
    assert_eq!(events[5]["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn anthropic_tool_results_go_back_in_and_bad_tools_are_400s() {
    let app = common::app();
    let history = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me see."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"},
            {"type": "text", "text": "thanks"}]}
    ]);
    let req =
        json!({"model": "m", "max_tokens": 4, "messages": history, "tools": anthropic_tools()});
    let (s, v) = common::post_json(&app, "/v1/messages", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = common::post_json(&app, "/v1/messages/count_tokens", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["input_tokens"].as_u64().unwrap() > 10, "{v}");
    for (extra, param) in [
        (
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "tools",
        ),
        (json!({"tools": [{"name": "x"}]}), "tools"),
        (json!({"tool_choice": {"type": "sometimes"}}), "tool_choice"),
        (
            json!({"tool_choice": {"type": "tool", "name": "nope"}}),
            "tool_choice",
        ),
    ] {
        let mut r = req.clone();
        for (k, x) in extra.as_object().unwrap() {
            r[k] = x.clone();
        }
        let (s, v) = common::post_json(&app, "/v1/messages", &r).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{extra}: {v}");
        assert_eq!(v["type"], "error", "Anthropic's shape: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(param) || param == "tools",
            "{v}"
        );
    }
}
