//! Helpers shared by the CLI's integration tests: running the binary, checking one-line errors,
//! a scratch directory, the real SmolLM2, and a tiny synthetic chat model (a `model::synth`
//! llama with gpt2-style byte-level tokenizer metadata and an optional chat template).
#![allow(dead_code)]

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

/// A tiny llama with byte-level tokenizer metadata and `template` as its chat template
/// (`model::synth::chat_model`).
pub fn tiny_chat_model(template: Option<&str>) -> Vec<u8> {
    model::synth::chat_model(template).unwrap()
}

/// Writes `bytes` as `name` in `dir`.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
