//! `n` choices on the OpenAI routes: n sequences of one prompt, each its own choice (`index`),
//! plain and streamed, with seeds one apart (so a seeded request is reproducible choice by
//! choice) and the prompt counted once in the usage.

mod common;

use axum::http::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn n_choices_plain_and_streamed() {
    let app = common::app();
    let req = json!({"messages": [{"role": "user", "content": "hi"}], "n": 3, "seed": 5,
                     "temperature": 1.0, "max_tokens": 8, "ignore_eos": true});
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    let texts: Vec<&str> = choices
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    assert!(
        texts[0] != texts[1] || texts[1] != texts[2],
        "three seeds, one text: {texts:?}"
    );
    assert_eq!(v["usage"]["completion_tokens"], 24, "{v}");
    let one = |seed: u64| {
        let mut r = req.clone();
        r["n"] = json!(1);
        r["seed"] = json!(seed);
        r
    };
    // Choice i is what seed 5 + i gives alone.
    let (_, alone) = common::post_json(&app, "/v1/chat/completions", &one(6)).await;
    assert_eq!(alone["choices"][0]["message"]["content"], texts[1]);
    assert_eq!(alone["usage"]["prompt_tokens"], v["usage"]["prompt_tokens"]);

    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let (s, body) =
        common::send(&app, common::post("/v1/chat/completions", sreq.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let mut streamed = vec![String::new(); 3];
    let mut finished = [false; 3];
    let mut usage = Value::Null;
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(c) = v["choices"].as_array().and_then(|c| c.first()) {
            let i = c["index"].as_u64().unwrap() as usize;
            streamed[i].push_str(c["delta"]["content"].as_str().unwrap_or(""));
            finished[i] |= !c["finish_reason"].is_null();
        } else {
            usage = v["usage"].clone();
        }
    }
    assert_eq!(streamed, texts);
    assert_eq!(finished, [true; 3]);
    assert_eq!(usage["completion_tokens"], 24, "{body}");

    let req = json!({"prompt": "a", "n": 2, "max_tokens": 3, "temperature": 0, "logprobs": 1});
    let (s, v) = common::post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["choices"][0]["text"], v["choices"][1]["text"],
        "greedy choices agree"
    );
    assert_eq!(v["choices"][1]["index"], 1);
    assert!(v["choices"][1]["logprobs"]["tokens"].is_array());
}

/// The tiny model has no fill-in-the-middle tokens: a suffix is a 400 naming it, as is a suffix
/// with a token prompt or on chat.
#[tokio::test]
async fn a_suffix_needs_fim_tokens() {
    let app = common::app();
    for (path, req) in [
        (
            "/v1/completions",
            json!({"prompt": "a", "suffix": "b", "max_tokens": 2}),
        ),
        (
            "/v1/completions",
            json!({"prompt": [1, 2], "suffix": "b", "max_tokens": 2}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "suffix": "b"}),
        ),
    ] {
        let (s, v) = common::post_json(&app, path, &req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{req}: {v}");
        assert_eq!(v["error"]["param"], "suffix", "{v}");
    }
    let (s, v) = common::post_json(
        &app,
        "/v1/completions",
        &json!({"prompt": "a", "suffix": "", "max_tokens": 2}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "an empty suffix is none: {v}");
}
