//! Byte-for-byte comparison with Python's jinja2 set up like transformers, from
//! tests/data/expected.json (written by scripts/template_expected.py).

use std::path::Path;

use serde_json::Value;
use template::{ChatTemplate, Message, TemplateError};

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

fn load() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn template(doc: &Value, name: &str) -> ChatTemplate {
    let t = &doc["templates"][name];
    let source = std::fs::read_to_string(repo_root().join(t["file"].as_str().unwrap())).unwrap();
    ChatTemplate::new(
        &source,
        t["bos"].as_str().unwrap(),
        t["eos"].as_str().unwrap(),
    )
    .unwrap()
    .with_fixed_time(doc["fixed_now"].as_i64().unwrap())
}

#[test]
fn matches_transformers_rendering() {
    let doc = load();
    let mut failures = Vec::new();
    let rows = doc["expected"].as_array().unwrap();
    for row in rows {
        let (tname, cname) = (
            row["template"].as_str().unwrap(),
            row["case"].as_str().unwrap(),
        );
        let t = template(&doc, tname);
        let case = &doc["cases"][cname];
        let messages: Vec<Message> = serde_json::from_value(case["messages"].clone()).unwrap();
        let tools = case.get("tools");
        let got = t.render(
            &messages,
            tools,
            case["add_generation_prompt"].as_bool().unwrap(),
        );
        match (row.get("output").and_then(Value::as_str), got) {
            (Some(want), Ok(got)) if want == got => {}
            (Some(want), Ok(got)) => failures.push(format!(
                "{tname}/{cname}:\n--- want\n{want}\n--- got\n{got}"
            )),
            (Some(_), Err(e)) => failures.push(format!("{tname}/{cname}: unexpected error: {e}")),
            (None, Ok(got)) => failures.push(format!(
                "{tname}/{cname}: want error {}, got\n{got}",
                row["error"]
            )),
            (None, Err(e)) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n'), "multi-line error: {msg}");
                // raise_exception's message must come through as is
                if let Some(raised) = row["error"]
                    .as_str()
                    .unwrap()
                    .strip_prefix("TemplateError: ")
                {
                    assert_eq!(
                        e,
                        TemplateError::Raised(raised.to_string()),
                        "{tname}/{cname}"
                    );
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} renderings differ:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n\n")
    );
}

#[test]
fn parts_support_probe_agrees_with_python() {
    let doc = load();
    for (name, t) in doc["templates"].as_object().unwrap() {
        let want = t["supports_content_parts"].as_bool().unwrap();
        assert_eq!(
            template(&doc, name).supports_content_parts(),
            want,
            "{name}"
        );
    }
}

#[test]
fn strftime_now_matches_python_strftime() {
    let doc = load();
    for row in doc["strftime"].as_array().unwrap() {
        let fmt = row["format"].as_str().unwrap();
        let source = format!(
            "{{{{ strftime_now({}) }}}}",
            serde_json::to_string(fmt).unwrap()
        );
        let t = ChatTemplate::new(&source, "", "")
            .unwrap()
            .with_fixed_time(row["timestamp"].as_i64().unwrap());
        assert_eq!(
            t.render(&[], None, false).unwrap(),
            row["output"].as_str().unwrap(),
            "{fmt}"
        );
    }
}

#[test]
fn missing_template_falls_back_to_chatml() {
    let t = ChatTemplate::from_metadata(None, "<bos>", "<eos>").unwrap();
    let msgs = [Message::new("system", "S"), Message::new("user", "Hi")];
    assert_eq!(
        t.render(&msgs, None, true).unwrap(),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let empty = ChatTemplate::from_metadata(Some("  "), "", "").unwrap();
    assert_eq!(
        empty.render(&msgs[1..], None, false).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn gemma_fallback_opens_the_first_user_turn_with_the_system_text() {
    let t = ChatTemplate::gemma("<bos>", "<eos>");
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", " Hi "),
        Message::new("assistant", "Hello."),
        Message::new("user", "Bye"),
    ];
    assert_eq!(
        t.render(&msgs, None, true).unwrap(),
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(
        t.render(&msgs[3..], None, false).unwrap(),
        "<bos><start_of_turn>user\nBye<end_of_turn>\n"
    );
}
