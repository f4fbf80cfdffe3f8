//! Exact agreement with llama.cpp on real models.
//!
//! tests/data/expected-*.json hold llama.cpp's ids, detokenized bytes and token pieces for
//! every text in tests/data/texts.json (recorded by scripts/tokenizer_expected.py). The models
//! come from scripts/fetch-models, in $MOLLA_MODELS or ~/.cache/molla/models. Pre-tokenizers
//! that no test model uses are checked on SmolLM2's vocabulary with `tokenizer.ggml.pre`
//! replaced (and `add_bos_token` removed), as the script recorded them.

use serde_json::Value;
use std::path::PathBuf;
use tokenizer::{Tokenizer, Vocab};

fn models_dir() -> PathBuf {
    match std::env::var_os("MOLLA_MODELS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/molla/models")
        }
    }
}

/// The model's tokenizer; with `pre`, its vocabulary with that pre-tokenizer and the BOS
/// default instead of the stored `add_bos_token`.
fn load(file: &str, pre: Option<&str>) -> Tokenizer {
    let path = models_dir().join(file);
    assert!(
        path.exists(),
        "model {} is missing: run scripts/fetch-models (or set MOLLA_MODELS to the folder holding it)",
        path.display()
    );
    let gguf = gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut vocab = Vocab::from_gguf(&gguf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Some(pre) = pre {
        vocab.pre = pre.to_string();
        vocab.add_bos = None;
    }
    Tokenizer::new(vocab).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expected(name: &str) -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/expected-{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn opt_id(v: &Value) -> Option<u32> {
    v.as_u64().map(|x| x as u32)
}

fn unhex(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn check_model(name: &str, file: &str, pre: Option<&str>) {
    let tok = load(file, pre);
    let exp = expected(name);
    let mut failures: Vec<String> = Vec::new();
    let mut fail = |what: String| failures.push(what);

    assert_eq!(
        tok.n_vocab() as u64,
        exp["n_vocab"].as_u64().unwrap(),
        "{name}: n_vocab"
    );
    assert_eq!(tok.bos(), opt_id(&exp["bos"]), "{name}: bos");
    assert_eq!(tok.eos(), opt_id(&exp["eos"]), "{name}: eos");
    assert_eq!(
        tok.add_bos(),
        exp["add_bos"].as_bool().unwrap(),
        "{name}: add_bos"
    );
    assert_eq!(
        tok.add_eos(),
        exp["add_eos"].as_bool().unwrap(),
        "{name}: add_eos"
    );
    assert_eq!(
        tok.eog_ids(),
        ids(&exp["eog"]).as_slice(),
        "{name}: end-of-generation ids"
    );
    // llama.cpp picks EOT among several candidates in hash-map order; ours is in the EOG set.
    if let Some(eot) = opt_id(&exp["eot"]) {
        assert!(
            tok.eot().is_some_and(|e| tok.is_eog(e)),
            "{name}: eot {:?} (llama.cpp: {eot})",
            tok.eot()
        );
    }
    assert!(
        tok.warnings().is_empty(),
        "{name}: warnings {:?}",
        tok.warnings()
    );

    for (id, hex) in exp["pieces"].as_object().unwrap() {
        let id: u32 = id.parse().unwrap();
        let want = unhex(hex);
        let got = tok.token_to_piece(id).unwrap();
        if got != want {
            fail(format!(
                "piece {id}: want {:?} got {:?}",
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }

    let cases = exp["cases"].as_array().unwrap();
    let (mut agree, mut round_trips, mut llama_round_trips) = (0, 0, 0);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let mut ok = true;
        let want = ids(&case["ids"]);
        let got = tok.encode(text, true, true);
        if got != want {
            ok = false;
            fail(format!(
                "encode {text:?}:\n  llama.cpp {want:?}\n  ours      {got:?}"
            ));
        }
        let want_plain = ids(&case["ids_plain"]);
        let got_plain = tok.encode(text, false, false);
        if got_plain != want_plain {
            ok = false;
            fail(format!(
                "encode(plain) {text:?}:\n  llama.cpp {want_plain:?}\n  ours      {got_plain:?}"
            ));
        }
        for (key, remove, unparse) in [("detok", true, true), ("detok_raw", false, false)] {
            let want = unhex(&case[key]);
            let got = tok.detokenize(&ids(&case["ids"]), remove, unparse).unwrap();
            if got != want {
                ok = false;
                fail(format!(
                    "{key} {text:?}: llama.cpp {:?} ours {:?}",
                    String::from_utf8_lossy(&want),
                    String::from_utf8_lossy(&got)
                ));
            }
        }
        // Round trip wherever llama.cpp's own detokenization gives the text back.
        if unhex(&case["detok"]) == text.as_bytes() {
            llama_round_trips += 1;
            let back = tok.decode(&tok.encode(text, false, true)).unwrap();
            if back == text {
                round_trips += 1;
            } else {
                ok = false;
                fail(format!("round trip {text:?} -> {back:?}"));
            }
        }
        agree += usize::from(ok);
    }
    eprintln!(
        "{name}: {agree}/{} texts agree with llama.cpp; {round_trips}/{llama_round_trips} round trips",
        cases.len()
    );
    if !failures.is_empty() {
        let shown: Vec<&str> = failures.iter().take(25).map(String::as_str).collect();
        panic!(
            "{name}: {} mismatches with llama.cpp:\n{}",
            failures.len(),
            shown.join("\n")
        );
    }
}

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn smollm2_matches_llamacpp() {
    check_model("smollm2", SMOLLM2, None);
}

#[test]
fn qwen2_matches_llamacpp() {
    check_model("qwen2", "qwen2.5-coder-0.5b-instruct.gguf", None);
}

#[test]
fn gemma3_matches_llamacpp() {
    check_model("gemma3", "gemma-3-270m-q4_k_m.gguf", None);
}

#[test]
fn llama_bpe_pre_tokenizer_matches_llamacpp() {
    check_model("smollm2-llama-bpe", SMOLLM2, Some("llama-bpe"));
}

#[test]
fn gpt2_pre_tokenizer_matches_llamacpp() {
    check_model("smollm2-gpt2", SMOLLM2, Some("gpt-2"));
}

#[test]
fn default_pre_tokenizer_matches_llamacpp() {
    check_model("smollm2-default", SMOLLM2, Some("default"));
}

#[test]
fn falcon_pre_tokenizer_matches_llamacpp() {
    check_model("smollm2-falcon", SMOLLM2, Some("falcon"));
}
