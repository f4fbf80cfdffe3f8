//! Malformed GGUF files given to `molla inspect` and `molla logits`: every one must end with a
//! one-line error on stderr and exit code 2, never a panic or a hang.

use model::synth::{SynthSpec, build};
use std::path::{Path, PathBuf};
use std::process::Command;

fn molla() -> Command {
    Command::new(env!("CARGO_BIN_EXE_molla"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("molla-malformed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs inspect and logits on `path`; both must fail cleanly.
fn assert_refused(path: &Path, what: &str) {
    let p = path.to_str().unwrap();
    for args in [
        vec!["inspect", p],
        vec!["logits", "--model", p, "--tokens", "1,2,3"],
    ] {
        let out = molla().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{what}: `molla {}` exited {:?}; stderr: {err}",
            args[0],
            out.status
        );
        assert!(
            err.starts_with("error: "),
            "{what}: stderr does not start with 'error: ': {err}"
        );
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{what}: error is not one line: {err}"
        );
        assert!(!err.contains("panicked"), "{what}: panic: {err}");
    }
}

fn valid() -> Vec<u8> {
    build(&SynthSpec::tiny("llama")).unwrap()
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Offset of the tensor-info fields after `name` in the directory: (n_dims, type, offset).
fn tensor_fields(b: &[u8], name: &str) -> (usize, usize, usize) {
    let at = find(b, name.as_bytes()) + name.len();
    let n_dims = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let ty = at + 4 + 8 * n_dims;
    (at, ty, ty + 4)
}

#[test]
fn valid_synthetic_model_works() {
    let path = scratch("valid.gguf");
    std::fs::write(&path, valid()).unwrap();
    let out = molla()
        .args(["inspect", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("blk.1.ffn_down.weight"));
    let out = molla()
        .args([
            "logits",
            "--model",
            path.to_str().unwrap(),
            "--tokens",
            "1,2,3",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["vocab"], 256);
    assert_eq!(v["logprobs"].as_array().unwrap().len(), 256);
}

#[test]
fn truncated_at_every_sixteenth() {
    let b = valid();
    for k in 0..16 {
        let path = scratch(&format!("trunc{k}.gguf"));
        std::fs::write(&path, &b[..b.len() * k / 16]).unwrap();
        assert_refused(&path, &format!("truncated at {k}/16"));
    }
}

#[test]
fn huge_counts_and_lengths() {
    let b = valid();
    let (name_at, _, _) = tensor_fields(&b, "token_embd.weight");
    let cases: Vec<(&str, usize)> = vec![
        ("tensor_count", 8),
        ("kv_count", 16),
        ("first key length", 24),
        (
            "tensor name length",
            name_at - "token_embd.weight".len() - 8,
        ),
    ];
    for (what, at) in cases {
        for v in [1u64 << 63, u64::MAX] {
            let mut m = b.clone();
            put_u64(&mut m, at, v);
            let path = scratch("huge.gguf");
            std::fs::write(&path, &m).unwrap();
            assert_refused(&path, &format!("{what} = {v}"));
        }
    }
}

#[test]
fn unknown_type_and_misaligned_offset() {
    let b = valid();
    let (_, ty, _) = tensor_fields(&b, "token_embd.weight");
    let mut m = b.clone();
    m[ty..ty + 4].copy_from_slice(&99u32.to_le_bytes());
    let path = scratch("type.gguf");
    std::fs::write(&path, &m).unwrap();
    assert_refused(&path, "unknown tensor type");

    let (_, _, off) = tensor_fields(&b, "blk.0.attn_q.weight");
    let mut m = b.clone();
    let o = u64::from_le_bytes(m[off..off + 8].try_into().unwrap());
    put_u64(&mut m, off, o + 1);
    std::fs::write(&path, &m).unwrap();
    assert_refused(&path, "misaligned offset");

    let mut m = b.clone();
    put_u64(&mut m, off, 1 << 62);
    std::fs::write(&path, &m).unwrap();
    assert_refused(&path, "offset past the end");
}

#[test]
fn lying_shapes_are_refused() {
    // A model whose q projection is narrower than its hyper-parameters say.
    let b = build(&SynthSpec {
        n_embd: 64,
        ..SynthSpec::tiny("llama")
    })
    .unwrap();
    let mut m = b.clone();
    let key = b"llama.attention.head_count_kv";
    let at = find(&m, key) + key.len() + 4; // skip the u32 value type
    m[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    let path = scratch("shape.gguf");
    std::fs::write(&path, &m).unwrap();
    let out = molla()
        .args(["logits", "--model", path.to_str().unwrap(), "--tokens", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("attn_k.weight") && err.contains("shape"),
        "{err}"
    );
}
