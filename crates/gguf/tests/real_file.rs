//! Real GGUF files from /work/shared/peers (tensor-less files with real tokenizers), when present.

use gguf::{GgufFile, GgufWriter, TensorSpec, Value};
use std::path::Path;

const PEERS: &str = "/work/shared/peers";

/// Opens `name` from the peers folder, or prints why the test is skipped.
fn open(name: &str) -> Option<GgufFile> {
    let path = Path::new(PEERS).join(name);
    if !path.exists() {
        eprintln!("skipping: {} is absent", path.display());
        return None;
    }
    Some(GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn smollm2_meta() {
    let Some(f) = open("smollm2-135m.meta.gguf") else {
        return;
    };
    assert_eq!(f.version(), 3);
    assert!(f.tensors().is_empty());
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("llama")
    );
    assert_eq!(
        f.get("llama.embedding_length").and_then(Value::as_u64),
        Some(576)
    );
    assert_eq!(f.get("llama.block_count").and_then(Value::as_u64), Some(30));
    let tokens = f
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .and_then(|a| a.as_strings())
        .unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens[0], "<|endoftext|>");
    let shown = f.get("tokenizer.ggml.tokens").unwrap().to_string();
    assert!(
        shown.starts_with("[array of 49152 string: \"<|endoftext|>\", \"<|im_start|>\", "),
        "{shown}"
    );
    assert_eq!(
        f.get("tokenizer.ggml.tokens").unwrap().type_name(),
        "array[string]"
    );
    for (k, v) in f.metadata() {
        let line = v.to_string();
        assert!(
            !line.contains('\n') && line.chars().count() < 300,
            "{k} = {line}"
        );
    }
}

#[test]
fn every_peer_meta_file_round_trips_through_the_writer() {
    for name in [
        "smollm2-135m.meta.gguf",
        "qwen2.5-0.5b.meta.gguf",
        "llama3.1-8b.meta.gguf",
    ] {
        let Some(f) = open(name) else { continue };
        let specs: Vec<TensorSpec> = Vec::new();
        let out = GgufWriter::new(Vec::new(), f.metadata(), &specs)
            .unwrap()
            .finish()
            .unwrap();
        let g = GgufFile::from_bytes(out.clone()).unwrap();
        assert_eq!(g.metadata(), f.metadata(), "{name}");
        // The peers' files end without padding; ours pads to the data section. Otherwise identical.
        assert_eq!(&out[..f.bytes().len()], f.bytes(), "{name}");
    }
}

#[test]
fn truncated_real_file_is_rejected() {
    let Some(f) = open("smollm2-135m.meta.gguf") else {
        return;
    };
    let bytes = f.bytes();
    for k in 0..16 {
        let n = bytes.len() * k / 16;
        let e = GgufFile::from_bytes(bytes[..n].to_vec()).expect_err("truncated");
        let msg = e.to_string();
        assert!(msg.starts_with("gguf: ") && !msg.contains('\n'), "{msg}");
    }
}
