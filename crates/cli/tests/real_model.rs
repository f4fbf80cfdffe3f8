//! End to end on the real SmolLM2-135M-Instruct (fetched by scripts/fetch-models; the test fails,
//! naming the script, when it is missing): tokenize, and a greedy answer from `molla run`.

mod common;

use common::smollm2;

/// Runs molla with `args`: (stdout, stderr, exit code).
fn molla(args: &[&str]) -> (String, String, Option<i32>) {
    let out = common::molla().args(args).output().unwrap();
    (
        common::text(&out.stdout),
        common::text(&out.stderr),
        out.status.code(),
    )
}

#[test]
fn tokenize_parses_special_tokens() {
    let m = smollm2();
    let (out, err, code) = molla(&[
        "tokenize",
        "--model",
        m.to_str().unwrap(),
        "--text",
        "<|im_start|>user\nHi",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<u64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(ids[0], 1, "<|im_start|> is one special token: {ids:?}");
    assert_eq!(ids.len(), 4, "{ids:?}");
}

#[test]
fn greedy_run_answers() {
    let m = smollm2();
    let (out, err, code) = molla(&[
        "run",
        "--model",
        m.to_str().unwrap(),
        "--device",
        "cpu",
        "--temp",
        "0",
        "-n",
        "24",
        "What is the capital of France?",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Paris"), "answer: {out:?}");
    assert!(err.contains("generated"), "stats on stderr: {err}");
}

#[test]
fn run_refuses_a_missing_model_cleanly() {
    let (_, err, code) = molla(&["run", "--model", "/nonexistent.gguf", "hi"]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("error: ") && err.contains("nonexistent"),
        "{err}"
    );
}

#[test]
fn greedy_run_is_identical_across_runs() {
    let m = smollm2();
    let args = [
        "run",
        "--model",
        m.to_str().unwrap(),
        "--device",
        "cpu",
        "--temp",
        "0",
        "-n",
        "64",
        "-q",
        "Write three sentences about the sea.",
    ];
    let (first, err, code) = molla(&args);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.is_empty(), "--quiet leaves stderr empty: {err:?}");
    assert!(first.split_whitespace().count() > 10, "{first:?}");
    let (second, err, code) = molla(&args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(first, second);
}

/// `molla run` on SmolLM2 on the CPU with `args` after the model.
fn run_smol(args: &[&str]) -> (String, String, Option<i32>) {
    let m = smollm2();
    let mut all = vec!["run", "--model", m.to_str().unwrap(), "--device", "cpu"];
    all.extend_from_slice(args);
    molla(&all)
}

#[test]
fn run_answers_in_the_json_schema_or_regex_asked_for() {
    let schema = r#"{"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]}"#;
    let ask = "What is the capital of France?";
    let (out, err, code) = run_smol(&["--temp", "0", "-n", "30", "--json-schema", schema, ask]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["capital"].as_str().unwrap().contains("Paris"), "{out}");
    let yes_no = [
        "--temp",
        "1",
        "--seed",
        "5",
        "--regex",
        "(yes|no)",
        "Is Paris in France?",
    ];
    let (out, err, code) = run_smol(&yes_no);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.trim() == "yes" || out.trim() == "no", "{out:?}");
    // A schema llguidance rejects is one clear line before any generation.
    let (out, err, code) = run_smol(&["--json-schema", r#"{"type": "nope"}"#, "hi"]);
    assert_ne!(code, Some(0));
    assert!(out.is_empty() && err.contains("--json-schema"), "{err}");
}
