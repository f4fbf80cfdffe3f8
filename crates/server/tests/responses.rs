//! OpenAI's Responses API on the tiny model: the response object, the typed event stream (its
//! order, sequence numbers, and the same text as the plain answer), JSON and forced function
//! calls held to their schemas, input items, and the 400s.

mod common;

use axum::http::StatusCode;
use serde_json::{Value, json};

async fn create(app: &axum::Router, req: Value) -> (StatusCode, Value) {
    common::post_json(app, "/v1/responses", &req).await
}

/// The stream's events, in order.
async fn events(app: &axum::Router, mut req: Value) -> Vec<Value> {
    req["stream"] = json!(true);
    let (s, body) = common::send(app, common::post("/v1/responses", req.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let mut names = Vec::new();
    let mut out = Vec::new();
    for line in body.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            names.push(n.to_string());
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap();
            assert_eq!(
                Some(&v["type"].as_str().unwrap().to_string()),
                names.last(),
                "{body}"
            );
            out.push(v);
        }
    }
    for (i, e) in out.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{body}");
    }
    out
}

fn output_text(r: &Value) -> String {
    r["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["type"] == "message")
        .flat_map(|o| o["content"].as_array().unwrap().iter())
        .map(|c| c["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_response_and_its_stream_agree() {
    let app = common::app();
    let req = json!({"input": "hi", "max_output_tokens": 12, "temperature": 0, "instructions": "Be brief."});
    let (s, r) = create(&app, req.clone()).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["object"], "response");
    assert!(r["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(r["usage"]["output_tokens"], 12, "{r}");
    assert_eq!(
        (&r["status"], &r["incomplete_details"]["reason"]),
        (&json!("incomplete"), &json!("max_output_tokens"))
    );
    let text = output_text(&r);
    assert!(!text.is_empty());
    let ev = events(&app, req).await;
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        &kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(
        &kinds[kinds.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete"
        ]
    );
    let deltas: String = ev
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text);
    assert_eq!(output_text(&ev.last().unwrap()["response"]), text);
}

#[tokio::test]
async fn json_and_forced_calls_hold() {
    let app = common::app();
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                        "required": ["n"], "additionalProperties": false});
    let req = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                     "max_output_tokens": 60, "temperature": 1.0,
                     "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}});
    let (s, r) = create(&app, req).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let v: Value = serde_json::from_str(&output_text(&r)).unwrap_or_else(|e| panic!("{e}: {r}"));
    assert!((0..=9).contains(&v["n"].as_i64().unwrap()), "{r}");
    assert_eq!(r["status"], "completed");

    let tools = json!([{"type": "function", "name": "pick", "parameters": schema}]);
    let req = json!({"input": "hi", "max_output_tokens": 60, "temperature": 0, "tools": tools,
                     "tool_choice": {"type": "function", "name": "pick"}});
    let (s, r) = create(&app, req.clone()).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let out = r["output"].as_array().unwrap();
    assert_eq!(out.len(), 1, "{r}");
    assert_eq!(
        (&out[0]["type"], &out[0]["name"]),
        (&json!("function_call"), &json!("pick"))
    );
    let args: Value = serde_json::from_str(out[0]["arguments"].as_str().unwrap()).unwrap();
    assert!((0..=9).contains(&args["n"].as_i64().unwrap()), "{r}");
    let ev = events(&app, req).await;
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(ev[4]["arguments"], out[0]["arguments"]);

    // The call and its output go back in.
    let follow = json!({"input": [{"role": "user", "content": "hi"},
                                  {"type": "function_call", "call_id": "call_1", "name": "pick", "arguments": "{\"n\": 3}"},
                                  {"type": "function_call_output", "call_id": "call_1", "output": "ok"}],
                        "tools": tools, "max_output_tokens": 3});
    let (s, r) = create(&app, follow).await;
    assert_eq!(s, StatusCode::OK, "{r}");
}

#[tokio::test]
async fn bad_responses_requests_are_400s() {
    let app = common::app();
    for (req, param) in [
        (
            json!({"input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"input": "hi", "background": true}), "background"),
        (json!({"input": []}), "input"),
        (
            json!({"input": [{"type": "input_image", "image_url": "x"}]}),
            "input",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
            "input",
        ),
        (
            json!({"input": [{"role": "robot", "content": "x"}]}),
            "input",
        ),
        (
            json!({"input": "hi", "tools": [{"type": "web_search"}]}),
            "tools",
        ),
        (
            json!({"input": "hi", "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"input": "hi", "text": {"format": {"type": "yaml"}}}),
            "text",
        ),
        (
            json!({"input": "hi", "text": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}}),
            "text",
        ),
        (json!({"input": "hi", "temperature": 3}), "temperature"),
        (json!({"input": "hi", "unknown": 1}), "unknown"),
        (json!({"model": "m"}), "input"),
    ] {
        let (s, v) = create(&app, req.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{req}: {v}");
        assert_eq!(v["error"]["param"], param, "{req}: {v}");
    }
}
