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

/// Held to a JSON schema, the real SmolLM2 answers in it, and still knows the answer.
#[tokio::test]
async fn smollm2_answers_in_json() {
    let app = common::real_app("SmolLM2-135M-Instruct.Q4_1.gguf", 512);
    let schema = json!({"type": "object", "properties": {"country": {"type": "string"},
                        "capital": {"type": "string"}}, "required": ["country", "capital"],
                        "additionalProperties": false});
    let req = json!({"messages": [{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
                     "temperature": 0, "max_tokens": 40,
                     "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}});
    let t = std::time::Instant::now();
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    eprintln!(
        "{text} ({:?}, {} tokens)",
        t.elapsed(),
        v["usage"]["completion_tokens"]
    );
    let a: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(a["capital"].as_str().unwrap().contains("Paris"), "{text}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

/// A backend's own greedy pick (CUDA's `forward_pick`) goes through `Seq::accept`: given the
/// sampler's choice, it must produce what `Seq::step` produces from the logits, step by step
/// (text, next token, end). Here both run on the CPU over the real SmolLM2.
#[test]
fn accepting_the_greedy_pick_equals_sampling_it() {
    let (tok, vocab, backend) = smol_on_cpu();
    let prompt = tok.encode("The capital of France is", true, false);
    let greedy = || sampler::Sampler::new(sampler::SamplerConfig::greedy(), vocab).unwrap();
    assert!(greedy().is_plain_greedy());
    let stops = [" Berlin".to_string()];
    let mut a = server::seq::Seq::new(&tok, greedy(), &prompt, 20, &stops, 256, None);
    let mut b = server::seq::Seq::new(&tok, greedy(), &prompt, 20, &stops, 256, None);
    assert!(b.backend_may_pick());
    let mut cache = backend.new_cache(256).unwrap();
    let mut input = prompt.clone();
    let mut picker = greedy();
    for step in 0..24 {
        let len = cache.len() + input.len();
        let logits = backend
            .forward(&input, &mut cache, cpu::Logits::Last)
            .unwrap();
        let sa = a.step(&logits, len).unwrap();
        let id = picker.sample(&logits, &[]).unwrap();
        let sb = b.accept(id, len).unwrap();
        assert_eq!((&sa.text, sa.next), (&sb.text, sb.next), "step {step}");
        assert_eq!(a.end(), b.end(), "step {step}");
        match sa.next {
            Some(id) => input = vec![id],
            None => break,
        }
    }
    assert_eq!(a.ids(), b.ids());
    assert!(!a.ids().is_empty());
}

/// Sampling from the top-k candidates alone (the path CUDA's device top-k takes: `accept_top`)
/// gives what sampling the whole row gives, step by step, with llama.cpp's default sampler.
#[test]
fn sampling_from_the_top_k_equals_sampling_the_row() {
    let (tok, vocab, backend) = smol_on_cpu();
    let prompt = tok.encode("Once upon a time", true, false);
    let cfg = sampler::SamplerConfig {
        seed: Some(11),
        ..sampler::SamplerConfig::default()
    };
    let sampler = || sampler::Sampler::new(cfg.clone(), vocab).unwrap();
    let mut a = server::seq::Seq::new(&tok, sampler(), &prompt, 40, &[], 256, None);
    let mut b = server::seq::Seq::new(&tok, sampler(), &prompt, 40, &[], 256, None);
    let k = b
        .backend_top_k()
        .expect("the default sampler draws from its top 40");
    let mut cache = backend.new_cache(256).unwrap();
    let mut input = prompt.clone();
    for step in 0..40 {
        let len = cache.len() + input.len();
        let logits = backend
            .forward(&input, &mut cache, cpu::Logits::Last)
            .unwrap();
        let sa = a.step(&logits, len).unwrap();
        let sb = b
            .accept_top(&sampler::top_candidates(&logits, k), len)
            .unwrap();
        assert_eq!((&sa.text, sa.next), (&sb.text, sb.next), "step {step}");
        match sa.next {
            Some(id) => input = vec![id],
            None => break,
        }
    }
    assert_eq!(a.ids(), b.ids());
    assert!(a.ids().len() > 5);
}

/// The real SmolLM2 on the CPU backend: its tokenizer, vocabulary size and backend.
fn smol_on_cpu() -> (tokenizer::Tokenizer, usize, server::backend::Backend) {
    let p = common::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models (or set MOLLA_MODELS)",
        p.display()
    );
    let model = model::Model::open(&p).unwrap();
    let tok = tokenizer::Tokenizer::from_gguf(&model.file).unwrap();
    let vocab = model.hp.n_vocab;
    (
        tok,
        vocab,
        server::backend::Backend::new(model, server::Device::Cpu).unwrap(),
    )
}

/// The real Qwen2.5-Coder-0.5B (its template writes Hermes-style `<tool_call>` blocks, a control
/// token in its vocabulary) calls the weather tool unforced; given the tool's result and
/// `tool_choice` "none", it answers from it.
#[tokio::test]
async fn qwen_calls_a_tool_and_uses_its_result() {
    let app = common::real_app("qwen2.5-coder-0.5b-instruct.gguf", 1024);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let mut messages =
        json!([{"role": "user", "content": "What is the weather like in Paris today?"}]);
    let req = json!({"messages": messages, "tools": tools, "temperature": 0, "max_tokens": 60});
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let m = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &m["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: serde_json::Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["city"], "Paris", "{v}");
    let msgs = messages.as_array_mut().unwrap();
    msgs.push(m.clone());
    msgs.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "22 degrees Celsius and sunny"}));
    let req = json!({"messages": messages, "tools": tools, "tool_choice": "none", "temperature": 0, "max_tokens": 60});
    let (s, v) = common::post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("22"), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
}

/// `suffix` on completions fills in the middle with Qwen2.5-Coder's FIM tokens.
#[tokio::test]
async fn qwen_coder_fills_in_the_middle() {
    let app = common::real_app("qwen2.5-coder-0.5b-instruct.gguf", 256);
    let req = json!({"prompt": "def add(a, b):\n", "suffix": "\n\nprint(add(1, 2))\n",
                     "max_tokens": 30, "temperature": 0});
    let (s, v) = common::post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains("return a + b"), "{v}");
    // Without the suffix it is a plain completion of the prefix: a different prompt.
    let plain = json!({"prompt": "def add(a, b):\n", "max_tokens": 1, "temperature": 0});
    let (_, w) = common::post_json(&app, "/v1/completions", &plain).await;
    assert!(
        w["usage"]["prompt_tokens"].as_u64() < v["usage"]["prompt_tokens"].as_u64(),
        "{w}"
    );
}
