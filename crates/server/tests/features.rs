//! Logprobs, embeddings, metrics and continuous batching over the tiny synthetic model.

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

fn chat(extra: Value) -> Value {
    let mut v = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
                       "temperature": 0});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[tokio::test]
async fn chat_logprobs_shape() {
    let app = app();
    let req = chat(json!({"logprobs": true, "top_logprobs": 2}));
    let (s, v) = post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for t in content {
        let lp = t["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0, "{t}");
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        // greedy: the sampled token is the most likely one
        assert_eq!(top[0]["token"], t["token"]);
        assert!(top[0]["logprob"].as_f64().unwrap() >= top[1]["logprob"].as_f64().unwrap());
        assert!(t["bytes"].is_array());
    }
    let (s, v) = post_json(&app, "/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["choices"][0]["logprobs"].is_null());
    for bad in [
        json!({"logprobs": true, "top_logprobs": 21}),
        json!({"top_logprobs": 2}),
        json!({"logprobs": 3}),
        json!({"temperature": -0.5}),
        json!({"top_p": 1.5}),
        json!({"frequency_penalty": 3}),
        json!({"unknown_field": 1}),
        json!({"logit_bias": {"999999": 1}}),
        json!({"response_format": {"type": "yaml"}}),
    ] {
        let (s, v) = post_json(&app, "/v1/chat/completions", &chat(bad.clone())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert!(v["error"]["param"].is_string(), "{v}");
    }
}

#[tokio::test]
async fn completion_logprobs_shape_and_stream() {
    let app = app();
    let req = json!({"prompt": "hello", "max_tokens": 5, "temperature": 0, "logprobs": 3});
    let (s, v) = post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    let n = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(lp["tokens"].as_array().unwrap().len(), n);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n);
    assert_eq!(lp["text_offset"].as_array().unwrap().len(), n);
    assert!(lp["top_logprobs"][0].as_object().unwrap().len() <= 3);
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    let (s, body) = send(&app, post("/v1/completions", sreq.to_string())).await;
    assert_eq!(s, StatusCode::OK);
    let streamed: Vec<Value> = sse_events(&body)
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .flat_map(|(_, d)| {
            let c: Value = serde_json::from_str(d).unwrap();
            let l = &c["choices"][0]["logprobs"]["token_logprobs"];
            l.as_array().cloned().unwrap_or_default()
        })
        .collect();
    assert_eq!(&streamed, lp["token_logprobs"].as_array().unwrap());
}

#[tokio::test]
async fn embeddings_are_unit_vectors() {
    let app = app();
    let req = json!({"input": ["hello", "hello", "other words"], "model": "tiny"});
    let (s, v) = post_json(&app, "/v1/embeddings", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let vecs: Vec<Vec<f64>> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(vecs.len(), 3);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    assert!((dot(&vecs[0], &vecs[0]) - 1.0).abs() < 1e-4);
    assert_eq!(vecs[0], vecs[1]);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let req = json!({"input": "hello", "encoding_format": "base64"});
    let (s, v) = post_json(&app, "/v1/embeddings", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let b64 = v["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(b64.len(), (vecs[0].len() * 4).div_ceil(3) * 4);
    for bad in [
        json!({"input": []}),
        json!({"input": ""}),
        json!({"input": [[1, 999999]]}),
    ] {
        let (s, v) = post_json(&app, "/v1/embeddings", &bad).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
    }
}

#[tokio::test]
async fn metrics_count_requests_and_tokens() {
    let app = app();
    post_json(&app, "/v1/chat/completions", &chat(json!({}))).await;
    send(&app, get("/nope")).await;
    let (s, text) = send(&app, get("/metrics")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        text.contains("molla_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("molla_requests_total{route=\"other\",status=\"404\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("molla_time_to_first_token_seconds_count 1"),
        "{text}"
    );
    assert!(!text.contains("molla_generated_tokens_total 0\n"), "{text}");
}

/// Eight greedy requests at once over four slots give what each gives alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_greedy_equals_alone() {
    // prompts of 3..11 tokens prefilled 4 a step: prefill chunks interleave with decode steps
    batched_equals_alone(4, 8, 4, 0).await;
}

/// Twelve at once over twelve slots: the decode steps sample on several threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_batches_sample_in_parallel_and_equal_alone() {
    // every prompt prefilled within two steps: twelve sequences decode together
    batched_equals_alone(12, 12, 64, 0).await;
}

/// Prompt chunks that join the batched decode pass (`mix_max`): all of them (chunks of 8 mixed up to 8), or only prompts' short last chunks beside
/// prefills of their own (up to 5): eight at once still give what each gives alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_prefill_batches_equal_alone() {
    // Chunks of 8 (more than the CPU's 4 rows of matvec: a prefill of its own has other bits).
    batched_equals_alone(4, 8, 8, 8).await;
    batched_equals_alone(4, 8, 8, 5).await;
}

/// A mixed chunk runs as decode rows: its logits differ from a prefill's within rounding (which
/// shows that the path was taken), and the text is the same.
#[tokio::test]
async fn mixed_chunks_are_decode_rows() {
    let cfg = |mix_max| server::Config {
        mix_max: Some(mix_max),
        ..server::Config::default()
    };
    let req = json!({"prompt": "hello x x x x x", "max_tokens": 6, "temperature": 0,
                     "logprobs": 2});
    let (s, mixed) = post_json(&tiny_app(cfg(64)), "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{mixed}");
    let (_, plain) = post_json(&tiny_app(cfg(0)), "/v1/completions", &req).await;
    assert_eq!(mixed["choices"][0]["text"], plain["choices"][0]["text"]);
    let lps = |v: &Value| -> Vec<f64> {
        v["choices"][0]["logprobs"]["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (a, b) = (lps(&mixed), lps(&plain));
    assert_eq!(a.len(), b.len());
    assert_ne!(a, b, "the mixed path was not taken");
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-3, "{a:?} vs {b:?}");
    }
}

/// Each completion request's choice (text, logprobs when asked for), sent one after another.
async fn choices_alone(app: &axum::Router, reqs: &[Value]) -> Vec<Value> {
    let mut alone = Vec::new();
    for r in reqs {
        let (s, v) = post_json(app, "/v1/completions", r).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        alone.push(v["choices"][0].clone());
    }
    alone
}

/// The completion requests sent all at once.
fn send_at_once(
    app: &axum::Router,
    reqs: &[Value],
) -> Vec<tokio::task::JoinHandle<(StatusCode, Value)>> {
    reqs.iter()
        .map(|r| {
            let (app, r) = (app.clone(), r.clone());
            tokio::spawn(async move { post_json(&app, "/v1/completions", &r).await })
        })
        .collect()
}

/// Each task's answer is OK with the choice its request gave alone.
async fn expect_choices(tasks: Vec<tokio::task::JoinHandle<(StatusCode, Value)>>, alone: &[Value]) {
    for (i, t) in tasks.into_iter().enumerate() {
        let (s, v) = t.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["choices"][0], alone[i], "request {i}");
    }
}

async fn batched_equals_alone(parallel: usize, n: usize, prefill_chunk: usize, mix_max: usize) {
    let app = tiny_app(server::Config {
        parallel,
        prefill_chunk,
        mix_max: Some(mix_max),
        max_per_client: 0,
        ..server::Config::default()
    });
    let reqs: Vec<Value> = (0..n)
        .map(|i| {
            json!({"prompt": format!("hello {}", "x ".repeat(2 * i)), "max_tokens": 12,
                        "temperature": 0, "logprobs": 2})
        })
        .collect();
    let alone = choices_alone(&app, &reqs).await;
    let tasks = send_at_once(&app, &reqs);
    expect_choices(tasks, &alone).await;
    let (_, text) = send(&app, get("/metrics")).await;
    assert!(text.contains(&format!("molla_slots {parallel}")), "{text}");
}

#[tokio::test]
async fn ignore_eos_runs_to_the_limit_and_known_fields_pass() {
    let app = app();
    let req = chat(json!({"ignore_eos": true, "max_tokens": 9, "user": "u1",
                          "metadata": {"a": "b"}, "logit_bias": {"5": -100}}));
    let (s, v) = post_json(&app, "/v1/chat/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 9, "{v}");
    let bad = json!({"model": "x", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}],
                     "nope": true});
    let (s, v) = post_json(&app, "/v1/messages", &bad).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["type"], "error");
}

/// A request whose prompt starts like the previous one's keeps that prefix's keys and values (in
/// whole prefill chunks) and answers with the bits a fresh server gives it.
#[tokio::test]
async fn prefix_reuse_keeps_the_bits() {
    let cfg = || server::Config {
        parallel: 1,
        prefill_chunk: 4,
        ..server::Config::default()
    };
    let (warm, fresh) = (tiny_app(cfg()), tiny_app(cfg()));
    let req = |tail: &str| {
        json!({"prompt": format!("hello {}{tail}", "x ".repeat(12)), "max_tokens": 8,
               "temperature": 0, "logprobs": 3})
    };
    let (s, v) = post_json(&warm, "/v1/completions", &req("first")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let (_, reused) = post_json(&warm, "/v1/completions", &req("second one")).await;
    let (_, alone) = post_json(&fresh, "/v1/completions", &req("second one")).await;
    let cached = reused["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 8 && cached % 4 == 0, "{reused}");
    assert_eq!(alone["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(reused["choices"], alone["choices"], "text and logprobs");
    let (_, text) = send(&warm, get("/metrics")).await;
    assert!(
        text.contains(&format!("molla_prompt_tokens_cached_total {cached}\n")),
        "{text}"
    );
    // The same prompt again: everything but the last token's chunk is kept.
    let (_, again) = post_json(&warm, "/v1/completions", &req("second one")).await;
    assert_eq!(again["choices"], alone["choices"]);
    let n = again["usage"]["prompt_tokens"].as_u64().unwrap();
    let kept = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(kept, (n - 1) / 4 * 4, "{again}");
}

/// With two slots held by one client's requests, a second client's request waiting behind two
/// more of the first's gets the next free slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_goes_before_one_already_running() {
    use server::engine::{Engine, Event, Job, Sizes};
    let file = gguf::GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
    let model = model::Model::from_file(file).unwrap();
    let tok = std::sync::Arc::new(tokenizer::Tokenizer::from_gguf(&model.file).unwrap());
    // Every request runs to its token limit.
    let no_end: Vec<(u32, f32)> = (0..tok.n_vocab() as u32)
        .filter(|&id| tok.is_eog(id))
        .map(|id| (id, f32::NEG_INFINITY))
        .collect();
    let backend = server::backend::Backend::new(model, server::backend::Device::Cpu).unwrap();
    let metrics = std::sync::Arc::new(server::metrics::Metrics::new(2));
    let sizes = Sizes {
        ctx: 256,
        queue: 16,
        parallel: 2,
        chunk: 64,
        mix: 0,
        kv_blocks: 32,
    };
    let engine = Engine::start(backend, tok, sizes, metrics).unwrap();
    let job = |client: &str, max_tokens: usize| Job {
        prompt: vec![1, 2, 3],
        max_tokens,
        stops: Vec::new(),
        sampling: sampler::SamplerConfig {
            temperature: 0.0,
            logit_bias: no_end.clone(),
            ..Default::default()
        },
        logprobs: None,
        client: Some(client.into()),
        constraint: None,
        special_text: false,
    };
    let mut rxs = Vec::new();
    for (client, n) in [("a", 40), ("a", 40), ("a", 40), ("a", 40), ("b", 4)] {
        rxs.push(engine.submit(job(client, n)).unwrap());
    }
    // When each request produced its first text.
    let mut firsts = Vec::new();
    for mut rx in rxs {
        firsts.push(tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if matches!(ev, Event::Text(_) | Event::Done(_)) {
                    return std::time::Instant::now();
                }
            }
            panic!("no event");
        }));
    }
    let mut t = Vec::new();
    for f in firsts {
        t.push(f.await.unwrap());
    }
    assert!(
        t[4] < t[2] && t[4] < t[3],
        "client b waited behind client a's queued requests"
    );
}

/// The queue holds `--queue` waiting requests in all; one more is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses() {
    use server::engine::{Engine, Job, Sizes, SubmitError};
    let file = gguf::GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
    let model = model::Model::from_file(file).unwrap();
    let tok = std::sync::Arc::new(tokenizer::Tokenizer::from_gguf(&model.file).unwrap());
    let backend = server::backend::Backend::new(model, server::backend::Device::Cpu).unwrap();
    let metrics = std::sync::Arc::new(server::metrics::Metrics::new(1));
    let sizes = Sizes {
        ctx: 8192,
        queue: 2,
        parallel: 1,
        chunk: 64,
        mix: 0,
        kv_blocks: 8192 / cpu::BLOCK_POSITIONS,
    };
    // The running request cannot end early (an end-of-generation token would free its slot
    // while the queue is being filled; and its 8000 tokens take the tiny model ~0.1 s, so a
    // test thread held off the CPU for a few milliseconds cannot see it end either).
    let no_end: Vec<(u32, f32)> = (0..tok.n_vocab() as u32)
        .filter(|&id| tok.is_eog(id))
        .map(|id| (id, f32::NEG_INFINITY))
        .collect();
    let engine = Engine::start(backend, tok, sizes, metrics).unwrap();
    let job = || Job {
        prompt: vec![1, 2, 3],
        max_tokens: 8000,
        stops: Vec::new(),
        sampling: sampler::SamplerConfig {
            logit_bias: no_end.clone(),
            ..Default::default()
        },
        logprobs: None,
        client: None,
        constraint: None,
        special_text: false,
    };
    // One runs, two wait: the fourth finds the queue full. The first is running once its first
    // event arrives; filling the queue before the engine took it off would leave room for one
    // more by the time the last submit comes (seen in a loaded .ci/run).
    let mut held = vec![engine.submit(job()).unwrap()];
    assert!(held[0].recv().await.is_some(), "the first request runs");
    while engine.submit(job()).map(|rx| held.push(rx)).is_ok() {
        assert!(held.len() <= 3, "more than one running and two waiting");
    }
    assert_eq!(engine.submit(job()).err(), Some(SubmitError::Full));
}

/// Eight slots sharing KV blocks for two full contexts: requests whose prompt and max_tokens
/// fill a context take turns (at most two run at once, the rest wait for their blocks), each
/// answers with the bits it gets alone, and /metrics shows the pool. A pool smaller than one
/// context is refused at startup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_blocks_bound_what_runs_at_once() {
    let cfg = |kv_blocks| server::Config {
        ctx: 64,
        parallel: 8,
        kv_blocks,
        prefill_chunk: 16,
        max_per_client: 0,
        ..server::Config::default()
    };
    // 64 positions = 4 blocks of 16: room for two full contexts.
    let app = tiny_app(cfg(8));
    let reqs: Vec<Value> = (0..6)
        .map(|i| {
            json!({"prompt": format!("hello {}", "y ".repeat(i)), "max_tokens": 40,
                   "temperature": 0, "ignore_eos": true})
        })
        .collect();
    let alone = choices_alone(&app, &reqs).await;
    let tasks = send_at_once(&app, &reqs);
    // While they run, the pool never holds more than its 8 blocks and never more than two
    // sequences generate.
    let mut most_active = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        let (_, text) = send(&app, get("/metrics")).await;
        let gauge = |name: &str| -> i64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap();
            line.split(' ').nth(1).unwrap().parse().unwrap()
        };
        assert!(gauge("molla_kv_blocks_used") <= 8, "{text}");
        assert_eq!(gauge("molla_kv_blocks_total"), 8);
        most_active = most_active.max(gauge("molla_active_sequences"));
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(
        most_active <= 2,
        "{most_active} sequences ran on blocks for two contexts"
    );
    expect_choices(tasks, &alone).await;
    // Fewer blocks than one context: refused with a message naming the flag.
    let file = gguf::GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
    let model = model::Model::from_file(file).unwrap();
    let err = server::State::from_model(model, "tiny".into(), &cfg(3))
        .err()
        .unwrap();
    assert!(err.to_string().contains("--kv-blocks 3"), "{err}");
}

/// A request whose prompt starts like a running one's shares that prompt's KV blocks (whole
/// chunks that are whole blocks) instead of prefilling them, and answers with the bits it gets
/// on a fresh server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_prompt_shares_its_blocks() {
    use tokio_stream::StreamExt;
    use tower::ServiceExt;
    let cfg = || server::Config {
        parallel: 2,
        prefill_chunk: 16,
        max_per_client: 0,
        ..server::Config::default()
    };
    let (app, fresh) = (tiny_app(cfg()), tiny_app(cfg()));
    let long = format!("hello {}", "z ".repeat(30));
    let first = json!({"prompt": format!("{long}first"), "max_tokens": 200, "temperature": 0,
                       "ignore_eos": true, "stream": true});
    let second = json!({"prompt": format!("{long}second"), "max_tokens": 8, "temperature": 0,
                        "logprobs": 2});
    // The first streams; once two of its tokens are out, its prompt is in its cache.
    let resp = app
        .clone()
        .oneshot(post("/v1/completions", first.to_string()))
        .await
        .unwrap();
    let mut body = resp.into_body().into_data_stream();
    let mut seen = String::new();
    while seen.matches("data:").count() < 2 {
        let chunk = body.next().await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let (s, v) = post_json(&app, "/v1/completions", &second).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 32 && cached % 16 == 0, "{v}");
    let (_, alone) = post_json(&fresh, "/v1/completions", &second).await;
    assert_eq!(alone["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(v["choices"], alone["choices"], "text and logprobs");
    drop(body);
}

/// A finished request's slot keeps its prompt's blocks for reuse and gives the generated
/// positions' blocks back at once.
#[tokio::test]
async fn a_finished_request_keeps_only_its_prompt_blocks() {
    let app = tiny_app(server::Config {
        ctx: 256,
        prefill_chunk: 16,
        ..server::Config::default()
    });
    let req = json!({"prompt": "hello there", "max_tokens": 60, "temperature": 0,
                     "ignore_eos": true});
    let (s, v) = post_json(&app, "/v1/completions", &req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert!(
        prompt + 60 > 2 * cpu::BLOCK_POSITIONS,
        "the answer spans more blocks"
    );
    // The engine updates the gauge after the step that sent the answer: wait for it.
    let used = format!(
        "molla_kv_blocks_used {}\n",
        prompt.div_ceil(cpu::BLOCK_POSITIONS)
    );
    let mut text = String::new();
    for _ in 0..200 {
        text = send(&app, get("/metrics")).await.1;
        if text.contains(&used) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("want {used}in {text}");
}

/// On a GPU backend, embeddings come from the CPU model of the same file: the CPU backend's
/// hidden states, bit for bit (here the wgpu backend, on Mesa's software Vulkan device when
/// present; skipped without an adapter).
#[cfg(feature = "gpu")]
#[test]
fn gpu_backends_embed_on_the_cpu() {
    use server::backend::{Backend, Device};
    let load = || {
        let file = gguf::GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
        model::Model::from_file(file).unwrap()
    };
    let gpu = match Backend::new(load(), Device::Gpu) {
        Ok(b) => b,
        Err(e) => {
            // CI sets MOLLA_REQUIRE_GPU where the software Vulkan driver is installed.
            assert!(
                std::env::var_os("MOLLA_REQUIRE_GPU").is_none(),
                "no wgpu adapter: {e}"
            );
            eprintln!("skipped: no wgpu adapter ({e})");
            return;
        }
    };
    let cpu = Backend::new(load(), Device::Cpu).unwrap();
    let tokens = [1, 2, 3, 4, 5];
    let want = cpu.hidden_states(&tokens).unwrap();
    assert_eq!(gpu.hidden_states(&tokens).unwrap(), want);
    assert_eq!(gpu.hidden_states(&tokens).unwrap(), want, "a second call");
}
