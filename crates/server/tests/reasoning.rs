//! A reasoning model's `<think>` thoughts as `reasoning_content`: on the tiny model with a
//! Qwen3-like template, its answer forced by a regular expression into thoughts and an answer
//! (random weights write neither on their own), plain and streamed; `reasoning_format` `none`
//! keeps them in the content; `chat_template_kwargs` reach the template (`enable_thinking`).

mod common;

use axum::http::StatusCode;
use gguf::GgufFile;
use serde_json::{Value, json};
use std::sync::Arc;

/// ChatML whose generation prompt opens `<think>` unless `enable_thinking` is false (then it
/// writes an empty, closed one, as Qwen3's template does).
const TEMPLATE: &str = "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}\
{%- if add_generation_prompt %}<|im_start|>assistant\n\
{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{%- else %}<think>\n{%- endif %}{%- endif %}";

fn app() -> axum::Router {
    let file = GgufFile::from_bytes(common::tiny_chat_model(Some(TEMPLATE))).unwrap();
    let model = model::Model::from_file(file).unwrap();
    let cfg = server::Config {
        ctx: 256,
        ..server::Config::default()
    };
    server::app(Arc::new(
        server::State::from_model(model, "tiny".into(), &cfg).unwrap(),
    ))
}

fn req(extra: Value) -> Value {
    let mut r = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
                       "temperature": 1.0, "seed": 2,
                       "guided_regex": "[a-c]{3}\n</think>\n\n[d-f]{2}"});
    for (k, v) in extra.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

#[tokio::test]
async fn thoughts_come_apart_from_the_answer() {
    let app = app();
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &req(json!({}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let m = &v["choices"][0]["message"];
    let thoughts = m["reasoning_content"].as_str().unwrap();
    let answer = m["content"].as_str().unwrap();
    assert!(
        thoughts.len() == 3 && thoughts.bytes().all(|b| (b'a'..=b'c').contains(&b)),
        "{v}"
    );
    assert!(
        answer.len() == 2 && answer.bytes().all(|b| (b'd'..=b'f').contains(&b)),
        "{v}"
    );

    let (s, body) = common::send(
        &app,
        common::post(
            "/v1/chat/completions",
            req(json!({"stream": true})).to_string(),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (mut r, mut c) = (String::new(), String::new());
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            break;
        }
        let d: Value = serde_json::from_str(line).unwrap();
        let delta = &d["choices"][0]["delta"];
        r.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        c.push_str(delta["content"].as_str().unwrap_or(""));
    }
    assert_eq!((r.trim(), c.as_str()), (thoughts, answer), "{body}");

    // reasoning_format none: all in the content, as the model wrote it.
    let (_, v) = common::post_json(
        &app,
        "/v1/chat/completions",
        &req(json!({"reasoning_format": "none"})),
    )
    .await;
    let m = &v["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none(), "{v}");
    assert_eq!(
        m["content"].as_str().unwrap(),
        format!("{thoughts}\n</think>\n\n{answer}")
    );
}

#[tokio::test]
async fn template_kwargs_turn_thinking_off() {
    let app = app();
    // The template closes the thoughts itself: the answer is all content.
    let r = req(
        json!({"chat_template_kwargs": {"enable_thinking": false}, "guided_regex": "[d-f]{2}"}),
    );
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &r).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let m = &v["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none(), "{v}");
    assert_eq!(m["content"].as_str().unwrap().len(), 2, "{v}");
    // The prompt is longer by the closed thoughts.
    let on = common::post_json(&app, "/v1/chat/completions", &req(json!({"max_tokens": 1})))
        .await
        .1;
    assert!(
        v["usage"]["prompt_tokens"].as_u64() > on["usage"]["prompt_tokens"].as_u64(),
        "{v} {on}"
    );
    let bad = req(json!({"chat_template_kwargs": [1]}));
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &bad).await;
    assert_eq!(
        (s, &v["error"]["param"]),
        (StatusCode::BAD_REQUEST, &json!("chat_template_kwargs")),
        "{v}"
    );
}

/// On `/v1/messages` the thoughts are a `thinking` block (the template opens them and random
/// weights never close them, so all the answer is thought); `thinking` disabled turns them off.
#[tokio::test]
async fn anthropic_thinking_blocks() {
    let app = app();
    let req = json!({"model": "m", "max_tokens": 6, "messages": [{"role": "user", "content": "hi"}],
                     "temperature": 0});
    let (s, v) = common::post_json(&app, "/v1/messages", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let c = v["content"].as_array().unwrap();
    assert_eq!(
        (&c[0]["type"], &c[0]["signature"]),
        (&json!("thinking"), &json!("")),
        "{v}"
    );
    assert!(!c[0]["thinking"].as_str().unwrap().is_empty(), "{v}");

    let events = common::stream_events(&app, "/v1/messages", &req).await;
    let body = Value::Array(events.clone());
    assert_eq!(events[0]["type"], "message_start");
    assert_eq!(events[1]["type"], "ping");
    assert_eq!(events[2]["content_block"]["type"], "thinking", "{body}");
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .collect();
    assert!(
        !deltas.is_empty()
            && deltas
                .iter()
                .all(|d| d["delta"]["type"] == "thinking_delta"),
        "{body}"
    );
    let n = events.len();
    assert_eq!(
        [
            &events[n - 3]["type"],
            &events[n - 2]["type"],
            &events[n - 1]["type"]
        ],
        [
            &json!("content_block_stop"),
            &json!("message_delta"),
            &json!("message_stop")
        ],
        "{body}"
    );

    let mut off = req.clone();
    off["thinking"] = json!({"type": "disabled"});
    let (s, v) = common::post_json(&app, "/v1/messages", &off).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let c = v["content"].as_array().unwrap();
    assert_eq!((c.len(), &c[0]["type"]), (1, &json!("text")), "{v}");
}

/// On `/v1/responses` the thoughts are a `reasoning` item before the message, plain and
/// streamed (its `reasoning_text` events, then the message's).
#[tokio::test]
async fn responses_reasoning_items() {
    let app = app();
    // Greedy (the API takes no seed): the same answer every run.
    let req = json!({"input": "hi", "max_output_tokens": 6, "temperature": 0});
    let (s, v) = common::post_json(&app, "/v1/responses", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let out = v["output"].as_array().unwrap();
    assert_eq!(out[0]["type"], "reasoning", "{v}");
    assert!(out[0]["id"].as_str().unwrap().starts_with("rs_"));
    assert!(
        !out[0]["content"][0]["text"].as_str().unwrap().is_empty(),
        "{v}"
    );
    assert_eq!(out[1]["type"], "message", "{v}");

    let events = common::stream_events(&app, "/v1/responses", &req).await;
    let body = Value::Array(events.clone());
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        &kinds[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ]
    );
    assert_eq!(events[2]["item"]["type"], "reasoning");
    assert_eq!(kinds[3], "response.reasoning_text.delta", "{body}");
    let thought: String = events
        .iter()
        .filter(|e| e["type"] == "response.reasoning_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let done = events
        .iter()
        .find(|e| e["type"] == "response.reasoning_text.done")
        .unwrap();
    assert_eq!(done["text"], thought);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete", "{body}");
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], thought);
    assert_eq!(last["response"]["output"][1]["type"], "message");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i);
    }
}
