//! Model files that lie, given to `molla serve`, `molla run` and `molla logits`: a tokenizer
//! whose vocabulary is larger than the embedding, no tokenizer at all, NaN weights. Each is
//! refused with a one-line error naming what is wrong (exit 2), never a panic or garbage text.

mod common;

use common::*;
use gguf::{Array, GgufFile, Value};

/// The tiny chat model rewritten with `edit` applied to its metadata and `patch` to each
/// tensor's data.
fn rewrite(
    edit: impl FnOnce(&mut Vec<(String, Value)>),
    patch: impl Fn(&str, &mut Vec<u8>),
) -> Vec<u8> {
    let f = GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
    gguf::rewrite(&f, edit, patch).unwrap()
}

fn run_and_serve(path: &std::path::Path) -> Vec<(&'static str, std::process::Output)> {
    let p = path.to_str().unwrap();
    let run = molla()
        .args(["run", "--model", p, "--device", "cpu", "-q", "--temp", "0"])
        .args(["-n", "4", "hi"])
        .output()
        .unwrap();
    let serve = molla()
        .args(["serve", "--model", p, "--device", "cpu", "--port", "0"])
        .output()
        .unwrap();
    vec![("run", run), ("serve", serve)]
}

#[test]
fn vocabulary_larger_than_the_embedding_is_refused() {
    let bytes = rewrite(
        |md| {
            for (k, v) in md.iter_mut() {
                match (k.as_str(), v) {
                    ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                        t.extend((0..8).map(|i| format!("<extra_{i}>")));
                    }
                    ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) => {
                        t.extend([1; 8]);
                    }
                    _ => {}
                }
            }
        },
        |_, _| {},
    );
    let dir = scratch("vocab");
    let path = write(&dir, "vocab.gguf", &bytes);
    for (what, out) in run_and_serve(&path) {
        assert_error(&out, "token_embd", what);
    }
}

#[test]
fn missing_tokenizer_is_refused() {
    let bytes = rewrite(
        |md| md.retain(|(k, _)| !k.starts_with("tokenizer.")),
        |_, _| {},
    );
    let dir = scratch("notok");
    let path = write(&dir, "notok.gguf", &bytes);
    for (what, out) in run_and_serve(&path) {
        assert_error(&out, "tokenizer.ggml", what);
    }
}

#[test]
fn nan_weights_stop_with_an_error() {
    let bytes = rewrite(
        |_| {},
        |name, data| {
            if name == "output_norm.weight" {
                for c in data.chunks_exact_mut(4) {
                    c.copy_from_slice(&f32::NAN.to_le_bytes());
                }
            }
        },
    );
    let dir = scratch("nan");
    let path = write(&dir, "nan.gguf", &bytes);
    let p = path.to_str().unwrap();
    let out = molla()
        .args(["run", "--model", p, "--device", "cpu", "-q", "--temp", "0"])
        .args(["-n", "4", "hi"])
        .output()
        .unwrap();
    assert_error(&out, "finite", "run");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let out = molla()
        .args(["logits", "--model", p, "--tokens", "1,2"])
        .output()
        .unwrap();
    // logits prints what the model computes; NaN is not valid JSON, so it must refuse
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}
