//! The generated part of the seed corpus (`fuzz/corpus/<target>/`): small real inputs of each
//! kind. `tests/corpus.rs` writes them when `MOLLA_FUZZ_WRITE_SEEDS=1` (scripts/fuzz seeds) and
//! otherwise replays every committed file.

use gguf::{GgmlType, GgufFile, GgufWriter, TensorSpec};
use model::synth::{SynthSpec, build, chat_model};
use serde_json::json;

/// One seed: (target, file name, bytes).
pub type Seed = (&'static str, String, Vec<u8>);

const TEMPLATES: [(&str, &str); 5] = [
    (
        "smollm2",
        include_str!("../../crates/template/tests/data/smollm2.jinja"),
    ),
    (
        "qwen2.5-coder",
        include_str!("../../crates/template/tests/data/qwen2.5-coder.jinja"),
    ),
    (
        "gemma3-it",
        include_str!("../../crates/template/tests/data/gemma3-it.jinja"),
    ),
    (
        "pycompat",
        include_str!("../../crates/template/tests/data/pycompat.jinja"),
    ),
    ("chatml", template::CHATML_TEMPLATE),
];

fn small(arch: &'static str, n_vocab: usize, ty: GgmlType, tied: bool) -> SynthSpec {
    SynthSpec {
        arch,
        n_vocab,
        n_embd: 32,
        n_layer: 1,
        n_ff: 32,
        n_head: 2,
        n_head_kv: 1,
        ty,
        tied,
        seed: 7,
    }
}

/// A small llama (32 wide, one layer) with the synthetic chat model's 259-token byte-level
/// tokenizer and `template`.
fn small_chat(template: &str) -> Vec<u8> {
    let base =
        GgufFile::from_bytes(build(&small("llama", 259, GgmlType::Q8_0, true)).expect("synth"))
            .expect("parses");
    let chat = GgufFile::from_bytes(chat_model(Some(template)).expect("synth")).expect("parses");
    let mut md = base.metadata().to_vec();
    md.extend(
        chat.metadata()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned(),
    );
    let specs: Vec<TensorSpec> = base
        .tensors()
        .iter()
        .map(|t| TensorSpec::new(t.name.clone(), t.dims.clone(), t.ty))
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &specs).expect("writer");
    for t in base.tensors() {
        w.write_tensor(base.tensor_data(t)).expect("write");
    }
    w.finish().expect("finish")
}

fn gguf_seeds() -> Vec<Seed> {
    let mut v = vec![
        (
            "gguf",
            "small-chat-chatml.gguf".into(),
            small_chat(template::CHATML_TEMPLATE),
        ),
        (
            "gguf",
            "small-chat-smollm2.gguf".into(),
            small_chat(TEMPLATES[0].1),
        ),
    ];
    for (name, spec) in [
        (
            "small-llama-q8_0.gguf",
            small("llama", 64, GgmlType::Q8_0, false),
        ),
        (
            "small-qwen2-q4_0-tied.gguf",
            small("qwen2", 64, GgmlType::Q4_0, true),
        ),
        (
            "small-llama-f16.gguf",
            small("llama", 32, GgmlType::F16, true),
        ),
        (
            "small-gemma3-q8_0-tied.gguf",
            small("gemma3", 64, GgmlType::Q8_0, true),
        ),
    ] {
        v.push(("gguf", name.into(), build(&spec).expect("synth")));
    }
    v
}

fn tokenizer_seeds() -> Vec<Seed> {
    let texts: [&[u8]; 6] = [
        b"Hello world! The 1234 apples\n\n  tabs\tand <|im_start|>user\nhi<|im_end|>",
        "日本語のテキスト and émojis 🦀🦀 ’quotes’ — dashes".as_bytes(),
        b"   leading and trailing   \r\n",
        b"<s><start_of_turn>user\n\xe2\x96\x81Hello world</s>",
        b"don't we'll I'M 3.14159 x=y+1; <tool>call</tool>",
        b"\xff\xfe broken \xc3 utf-8 \xe2\x82",
    ];
    let mut v = Vec::new();
    for which in 0..10u8 {
        for (i, t) in texts.iter().enumerate() {
            let op = [0u8, 12, 4, 8, 3, 0][i];
            let mut data = vec![which, op];
            data.extend_from_slice(t);
            v.push(("tokenizer", format!("t{which}-encode-{i}"), data));
        }
        let mut ids = vec![which, 1];
        for id in [
            0u16, 1, 2, 3, 100, 200, 255, 256, 257, 258, 259, 300, 1000, 49151, 65535,
        ] {
            ids.extend_from_slice(&id.to_le_bytes());
        }
        v.push(("tokenizer", format!("t{which}-decode"), ids));
        let mut raw = vec![which, 2];
        for id in [5u32, u32::MAX, 70, 1 << 20] {
            raw.extend_from_slice(&id.to_le_bytes());
        }
        v.push(("tokenizer", format!("t{which}-raw-ids"), raw));
    }
    v
}

fn template_seeds() -> Vec<Seed> {
    let contexts = [
        json!({}),
        json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "url": "x"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get", "arguments": "{\"q\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "get", "content": "42"}],
            "tools": [{"type": "function", "function": {"name": "get", "description": "d",
                "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}}],
            "add_generation_prompt": true, "bos": "<|endoftext|>", "eos": "<|im_end|>"}),
        json!({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
               "add_generation_prompt": false}),
    ];
    let mut v = Vec::new();
    for (name, src) in TEMPLATES {
        for (i, ctx) in contexts.iter().enumerate() {
            let mut data = src.as_bytes().to_vec();
            data.push(0);
            data.extend_from_slice(ctx.to_string().as_bytes());
            v.push(("template", format!("{name}-{i}"), data));
        }
    }
    let small = [
        "{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}",
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}",
        "{{ messages | tojson(indent=2) }}{{ strftime_now('%Y-%m-%d') }}",
        "{% set ns = namespace(x='a') %}{% for i in range(5) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x }}",
        "{{ raise_exception('no system role') if messages[0].role != 'system' }}",
        "{{ (messages | selectattr('role', 'equalto', 'user') | list | length) * 3 }}{{ bos_token }}",
        "{% generation %}{{ messages[-1].content.split(' ')[0] }}{% endgeneration %}",
        // namespace attributes hold plain data only (crates/template/src/plain.rs)
        "{% set ns = namespace(l=[], d={}) %}{% for m in messages %}{% set ns.l = ns.l + [m] %}\
         {% set ns.d = {'r': ns.l | reverse, 'i': ns | items, 't': (m.role, loop.index)} %}\
         {{ loop.changed(m.role) }}{% endfor %}{{ ns.d | tojson }}{% set ns.x = [ns] %}",
    ];
    for (i, src) in small.iter().enumerate() {
        let mut data = src.as_bytes().to_vec();
        data.push(0);
        data.extend_from_slice(contexts[i % 2].to_string().as_bytes());
        v.push(("template", format!("small-{i}"), data));
    }
    v
}

fn http_seeds() -> Vec<Seed> {
    let route = |path: &str, method: &str| {
        crate::http::ROUTES
            .iter()
            .position(|&(m, p)| m == method && p == path)
            .expect("route") as u8
    };
    let chat = json!({"model": "tiny", "messages": [{"role": "system", "content": "s"},
        {"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "seed": 1,
        "stop": ["\n"], "logprobs": true, "top_logprobs": 2});
    let chat_stream = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_completion_tokens": 3, "stream": true, "stream_options": {"include_usage": true},
        "logit_bias": {"65": 5}, "ignore_eos": true, "top_k": 5, "min_p": 0.1, "repeat_penalty": 1.1});
    let completion = json!({"prompt": "Once upon", "max_tokens": 3, "logprobs": 2, "top_p": 0.9,
        "frequency_penalty": 0.5, "presence_penalty": -0.5, "n": 1});
    let completion_ids = json!({"prompt": [72, 105, 258], "max_tokens": 2, "stream": true});
    let messages = json!({"model": "tiny", "max_tokens": 3, "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
        {"role": "user", "content": [{"type": "text", "text": "again"}]}],
        "temperature": 0.5, "stop_sequences": ["x"]});
    let messages_stream = json!({"model": "tiny", "max_tokens": 2, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let count = json!({"messages": [{"role": "user", "content": "hi"}], "system": [{"type": "text", "text": "s"}]});
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]);
    let chat_tools = json!({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"}],
        "tools": tools, "tool_choice": "required", "max_tokens": 24, "stream": true});
    let chat_json = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
        {"type": "object", "properties": {"b": {"type": "string", "maxLength": 3}}}}}});
    let messages_tools = json!({"model": "tiny", "max_tokens": 24, "stream": true,
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]});
    let responses = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "1"}],
        "instructions": "s", "max_output_tokens": 6, "stream": true,
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "text": {"format": {"type": "json_object"}}});
    let seeds = [
        (
            "chat-tools",
            route("/v1/chat/completions", "POST"),
            0u8,
            chat_tools.to_string(),
        ),
        (
            "chat-json",
            route("/v1/chat/completions", "POST"),
            0,
            chat_json.to_string(),
        ),
        (
            "messages-tools",
            route("/v1/messages", "POST"),
            0,
            messages_tools.to_string(),
        ),
        (
            "responses",
            route("/v1/responses", "POST"),
            0,
            responses.to_string(),
        ),
        (
            "ollama-chat",
            route("/api/chat", "POST"),
            0,
            json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                   "format": "json", "think": false, "tools": tools,
                   "options": {"num_predict": 6, "temperature": 0.5, "stop": ["x"]}})
            .to_string(),
        ),
        (
            "ollama-generate",
            route("/api/generate", "POST"),
            0,
            json!({"prompt": "hi", "system": "s", "stream": false, "options": {"num_predict": 3}})
                .to_string(),
        ),
        (
            "chat",
            route("/v1/chat/completions", "POST"),
            0,
            chat.to_string(),
        ),
        (
            "chat-stream",
            route("/v1/chat/completions", "POST"),
            1,
            chat_stream.to_string(),
        ),
        (
            "completion",
            route("/v1/completions", "POST"),
            0,
            completion.to_string(),
        ),
        (
            "completion-ids",
            route("/v1/completions", "POST"),
            0,
            completion_ids.to_string(),
        ),
        (
            "messages",
            route("/v1/messages", "POST"),
            0,
            messages.to_string(),
        ),
        (
            "messages-stream",
            route("/v1/messages", "POST"),
            0,
            messages_stream.to_string(),
        ),
        (
            "count-tokens",
            route("/v1/messages/count_tokens", "POST"),
            0,
            count.to_string(),
        ),
        (
            "tokenize",
            route("/tokenize", "POST"),
            0,
            json!({"content": "<|im_start|>hi", "add_special": true}).to_string(),
        ),
        (
            "detokenize",
            route("/detokenize", "POST"),
            0,
            json!({"tokens": [72, 105, 258]}).to_string(),
        ),
        (
            "embeddings",
            route("/v1/embeddings", "POST"),
            0,
            json!({"input": ["a", "bc"]}).to_string(),
        ),
        (
            "embeddings-ids",
            route("/v1/embeddings", "POST"),
            0,
            json!({"input": [1, 2, 3]}).to_string(),
        ),
        ("health", route("/health", "GET"), 2, String::new()),
        ("model", route("/v1/models/tiny", "GET"), 2, String::new()),
        (
            "wrong-type",
            route("/v1/chat/completions", "POST"),
            0,
            r#"{"messages": "hi", "max_tokens": -1}"#.into(),
        ),
        (
            "deep",
            route("/v1/chat/completions", "POST"),
            0,
            format!("{{\"tools\": {}1{}}}", "[".repeat(40), "]".repeat(40)),
        ),
        (
            "text-plain",
            route("/tokenize", "POST"),
            3,
            "content=hi".into(),
        ),
    ];
    seeds
        .into_iter()
        .map(|(name, r, flags, body)| {
            let mut data = vec![r, flags];
            data.extend_from_slice(body.as_bytes());
            ("http", name.to_string(), data)
        })
        .collect()
}

/// Every generated seed.
pub fn seeds() -> Vec<Seed> {
    let mut v = gguf_seeds();
    v.extend(tokenizer_seeds());
    v.extend(template_seeds());
    v.extend(http_seeds());
    v
}
