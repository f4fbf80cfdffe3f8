//! Helpers shared by the CLI's integration tests: running the binary, checking one-line errors,
//! a scratch directory, the real SmolLM2, and a tiny synthetic chat model (a `model::synth`
//! llama with gpt2-style byte-level tokenizer metadata and an optional chat template).
#![allow(dead_code)]

use gguf::{Array, GgufFile, GgufWriter, TensorSpec, Value};
use model::synth::{SynthSpec, build};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn molla() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_molla"));
    for k in [
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "HF_TOKEN",
    ] {
        c.env_remove(k);
    }
    c
}

/// A fresh directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("molla-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn models_dir() -> PathBuf {
    std::env::var_os("MOLLA_MODELS").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/molla/models"),
        PathBuf::from,
    )
}

/// The real SmolLM2-135M-Instruct; fails naming the script that fetches it when it is missing.
pub fn smollm2() -> PathBuf {
    let p = models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models (or set MOLLA_MODELS)",
        p.display()
    );
    p
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts exit code 2 and one line on stderr starting with "error: " that contains `needle`.
pub fn assert_error(out: &Output, needle: &str, what: &str) {
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: exited {:?}; stderr: {err}",
        out.status
    );
    assert!(
        err.starts_with("error: "),
        "{what}: stderr does not start with 'error: ': {err:?}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: error is not one line: {err:?}"
    );
    assert!(!err.contains("panicked"), "{what}: panic: {err}");
    assert!(
        err.contains(needle),
        "{what}: error does not mention {needle:?}: {err}"
    );
}

/// GPT-2's byte-to-unicode table: the printable character standing for each byte.
fn byte_char(b: u8) -> char {
    let printable = |c: u32| {
        (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || (0xae..=0xff).contains(&c)
    };
    if printable(b as u32) {
        return char::from(b);
    }
    let n = (0..b as u32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// Token ids of the tiny chat model's special tokens (after the 256 byte tokens).
pub const ENDOFTEXT: u32 = 256;
pub const IM_START: u32 = 257;
pub const IM_END: u32 = 258;

/// A tiny llama (random weights, 259 tokens: the 256 bytes and three ChatML specials) with
/// byte-level BPE metadata and `template` as `tokenizer.chat_template` (ChatML when None).
pub fn tiny_chat_model(template: Option<&str>) -> Vec<u8> {
    let spec = SynthSpec {
        n_vocab: 259,
        ..SynthSpec::tiny("llama")
    };
    let base = GgufFile::from_bytes(build(&spec).unwrap()).unwrap();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
    let mut types = vec![1i32; 256];
    types.extend([3, 3, 3]);
    let mut md: Vec<(String, Value)> = base.metadata().to_vec();
    let s = |v: &str| Value::String(v.into());
    md.extend([
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.pre".into(), s("gpt2")),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(Vec::new())),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(ENDOFTEXT)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(IM_END)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]);
    if let Some(t) = template {
        md.push(("tokenizer.chat_template".into(), s(t)));
    }
    let specs: Vec<TensorSpec> = base
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &specs).unwrap();
    for t in base.tensors() {
        w.write_tensor(base.tensor_data(t)).unwrap();
    }
    w.finish().unwrap()
}

/// Writes `bytes` as `name` in `dir`.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
