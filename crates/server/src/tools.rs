//! Tool calls: finding the calls in a model's answer (OpenAI's `tool_calls`, Anthropic's
//! `tool_use` blocks), as a whole or while it streams, and the grammar that forces a call when
//! the request requires one.
//!
//! Models write calls in one of two ways, and the parser takes both whatever the template:
//! - Hermes style (Qwen2.5, Qwen3, SmolLM3, many fine-tunes): `<tool_call>{"name": ...,
//!   "arguments": {...}}</tool_call>`, one block a call, text before or between them (`<tool_call>`
//!   is a control token in Qwen's vocabulary: tool requests render control tokens as text);
//! - bare JSON (Llama 3.1/3.2, and small models that drop the tags): the whole answer is one
//!   object `{"name": ..., "parameters"|"arguments": {...}}` (after Llama's `<|python_tag|>`,
//!   if any) or an array of them.
//!
//! A call counts only when its name is one of the request's tools; otherwise the answer stays
//! text, as it would without tools.

use serde_json::{Value, json};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
/// A Markdown JSON block around a bare call (small models write one).
const FENCE: &str = "```json";

/// One call the model made.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub name: String,
    /// The arguments, a JSON object (or whatever value the model gave).
    pub arguments: Value,
}

/// The names of the functions in OpenAI-shaped `tools` (`[{"type": "function", "function":
/// {"name": ...}}]`).
pub fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// A call from a JSON value `{"name": ..., "arguments"|"parameters": ...}` whose name is in
/// `names`. Arguments given as a JSON string are parsed.
fn call_of(v: &Value, names: &[String]) -> Option<Call> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?;
    if !names.iter().any(|n| n == name) {
        return None;
    }
    let args = o
        .get("arguments")
        .or_else(|| o.get("parameters"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let arguments = match args {
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        v => v,
    };
    Some(Call {
        name: name.to_string(),
        arguments,
    })
}

/// The text and calls of a whole answer, when it holds calls (None: it is plain text). The text
/// is what lies outside the calls, trimmed.
pub fn parse(text: &str, names: &[String]) -> Option<(String, Vec<Call>)> {
    if text.contains(OPEN) {
        let mut content = String::new();
        let mut calls = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find(OPEN) {
            content.push_str(&rest[..i]);
            let body = &rest[i + OPEN.len()..];
            let (inner, after) = match body.find(CLOSE) {
                Some(j) => (&body[..j], &body[j + CLOSE.len()..]),
                None => (body, ""),
            };
            let v: Value = serde_json::from_str(inner.trim()).ok()?;
            calls.push(call_of(&v, names)?);
            rest = after;
        }
        content.push_str(rest);
        return Some((content.trim().to_string(), calls));
    }
    let t = text.trim();
    let t = t.strip_prefix(PYTHON_TAG).unwrap_or(t).trim();
    let t = match t.strip_prefix(FENCE) {
        Some(inner) => inner.trim_end().strip_suffix("```")?.trim(),
        None => t,
    };
    if !(t.starts_with('{') || t.starts_with('[')) {
        return None;
    }
    // One value, or several one after another (one call a line, as small models write them).
    let mut calls = Vec::new();
    for v in serde_json::Deserializer::from_str(t).into_iter::<Value>() {
        match v.ok()? {
            Value::Array(items) if !items.is_empty() => {
                for i in &items {
                    calls.push(call_of(i, names)?);
                }
            }
            v @ Value::Object(_) => calls.push(call_of(&v, names)?),
            _ => return None,
        }
    }
    Some((String::new(), calls))
}

/// Finds calls while an answer streams: text goes on as it comes until it may be a call (an
/// answer opening with `{`, `[`, `<|python_tag|>` or `<tool_call>`, or a `<tool_call>` later
/// on), which is held until the end; a possible start of `<tool_call>` is held until the next
/// text says whether it is one.
#[derive(Debug)]
pub struct Stream {
    names: Vec<String>,
    held: String,
    started: bool,
    calls: bool,
}

impl Stream {
    pub fn new(names: Vec<String>) -> Stream {
        Stream {
            names,
            held: String::new(),
            started: false,
            calls: false,
        }
    }

    /// Takes the next text; returns what may be shown now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.calls {
            return String::new();
        }
        if !self.started {
            let s = self.held.trim_start();
            let prefix = |tag: &str| tag.starts_with(s);
            if s.is_empty() || prefix(OPEN) || prefix(PYTHON_TAG) || prefix(FENCE) {
                return String::new();
            }
            let opens = |tag: &str| s.starts_with(tag);
            if s.starts_with(['{', '[']) || opens(OPEN) || opens(PYTHON_TAG) || opens(FENCE) {
                self.calls = true;
                return String::new();
            }
            self.started = true;
        }
        if let Some(i) = self.held.find(OPEN) {
            self.calls = true;
            let out = self.held[..i].to_string();
            self.held.drain(..i);
            return out;
        }
        // Hold the longest end of the text that could open a call.
        let keep = (1..OPEN.len())
            .rev()
            .find(|&n| self.held.ends_with(&OPEN[..n]))
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        out
    }

    /// The answer has ended: the text still to show and the calls found (none when what was
    /// held is not a call after all: then it is all text).
    pub fn finish(&mut self) -> (String, Vec<Call>) {
        let held = std::mem::take(&mut self.held);
        if self.calls
            && let Some((text, calls)) = parse(&held, &self.names)
        {
            return (text, calls);
        }
        (held, Vec::new())
    }
}

/// How a model's chat template asks for calls, for the grammar that forces one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.
    Hermes,
    /// `{"name": ..., "parameters": ...}` (Llama 3.1's templates).
    LlamaJson,
    /// `{"name": ..., "arguments": ...}`: a template that shows no format.
    Json,
}

impl Syntax {
    /// The syntax a chat template's source shows.
    pub fn of_template(source: &str) -> Syntax {
        if source.contains(OPEN) {
            Syntax::Hermes
        } else if source.contains("\"parameters\"") || source.contains("<|python_tag|>") {
            Syntax::LlamaJson
        } else {
            Syntax::Json
        }
    }
}

/// A Lark grammar (llguidance's dialect) for one call to any of `tools` (OpenAI-shaped), or to
/// `only` when given, written in `syntax`; `open` is how the grammar names `<tool_call>`
/// (`<[id]>` when the vocabulary has it as a control token, else the quoted text). None when no
/// tool matches.
pub fn forced_call(
    tools: &Value,
    only: Option<&str>,
    syntax: Syntax,
    open: &str,
) -> Option<String> {
    let key = if syntax == Syntax::LlamaJson {
        "parameters"
    } else {
        "arguments"
    };
    let alternatives: Vec<Value> = tools
        .as_array()?
        .iter()
        .filter_map(|t| {
            let f = &t["function"];
            let name = f["name"].as_str()?;
            if only.is_some_and(|o| o != name) {
                return None;
            }
            let mut params = match &f["parameters"] {
                Value::Null => json!({"type": "object"}),
                p => p.clone(),
            };
            // Only the declared arguments (a function rejects others), unless the schema says.
            if let Some(o) = params.as_object_mut()
                && o.contains_key("properties")
                && !o.contains_key("additionalProperties")
            {
                o.insert("additionalProperties".into(), json!(false));
            }
            Some(json!({"type": "object",
                        "properties": {"name": {"const": name}, key: params},
                        "required": ["name", key], "additionalProperties": false}))
        })
        .collect();
    if alternatives.is_empty() {
        return None;
    }
    let schema = json!({"anyOf": alternatives,
                        "x-guidance": {"item_separator": ", ", "key_separator": ": ",
                                       "whitespace_flexible": false}});
    let call = format!("call: %json {schema}");
    Some(match syntax {
        Syntax::Hermes => format!("start: {open} \"\\n\" call \"\\n{CLOSE}\"\n{call}\n"),
        Syntax::LlamaJson | Syntax::Json => format!("start: call\n{call}\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["get_weather".into(), "add".into()]
    }

    #[test]
    fn hermes_blocks_and_text_around_them() {
        let t = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>";
        let (text, calls) = parse(t, &names()).unwrap();
        assert_eq!(text, "Let me look.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(calls[1].arguments, json!({"a": 1}));
        // An unknown function or a broken block leaves the answer as text.
        assert!(
            parse(
                "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
                &names()
            )
            .is_none()
        );
        assert!(parse("<tool_call>{\"name\": \"add\", </tool_call>", &names()).is_none());
        // An unclosed last block (the answer ended at its end-of-turn token) still counts.
        assert!(
            parse(
                "<tool_call>{\"name\": \"add\", \"arguments\": {}}",
                &names()
            )
            .is_some()
        );
    }

    #[test]
    fn bare_json_calls() {
        let (_, c) = parse(
            " {\"name\": \"add\", \"parameters\": {\"a\": 2}} ",
            &names(),
        )
        .unwrap();
        assert_eq!(
            c,
            vec![Call {
                name: "add".into(),
                arguments: json!({"a": 2})
            }]
        );
        let (_, c) = parse("<|python_tag|>{\"name\": \"add\"}", &names()).unwrap();
        assert_eq!(c[0].arguments, json!({}));
        let (_, c) = parse("[{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {}}]", &names()).unwrap();
        assert_eq!(c.len(), 2);
        let (_, c) = parse(
            "{\"name\": \"add\"}\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}",
            &names(),
        )
        .unwrap();
        assert_eq!(c.len(), 2);
        let fenced = "```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n```";
        assert_eq!(
            parse(fenced, &names()).unwrap().1[0].arguments,
            json!({"a": 1})
        );
        assert!(
            parse("```json\n{\"name\": \"add\"}", &names()).is_none(),
            "unclosed"
        );
        for text in [
            "The answer is {\"name\": \"add\"}",
            "{\"a\": 1}",
            "[]",
            "{\"name\": \"add\"} and more",
            "plain",
        ] {
            assert!(parse(text, &names()).is_none(), "{text}");
        }
    }

    /// Feeds `pieces` to a stream: (shown text, final text, calls).
    fn stream(pieces: &[&str]) -> (String, String, Vec<Call>) {
        let mut s = Stream::new(names());
        let shown: String = pieces.iter().map(|p| s.push(p)).collect();
        let (rest, calls) = s.finish();
        (shown, rest, calls)
    }

    #[test]
    fn streams_text_and_holds_calls() {
        let (shown, rest, calls) = stream(&[
            "Sure",
            ", <tool",
            "_call>\n{\"name\": \"add\",",
            " \"arguments\": {}}\n</tool_call>",
        ]);
        assert_eq!(
            (shown.as_str(), rest.as_str(), calls.len()),
            ("Sure, ", "", 1)
        );
        // A '<' that is not a call goes on once the next text says so.
        let (shown, rest, calls) = stream(&["a <", "b> c <tool"]);
        assert_eq!(
            (shown.as_str(), rest.as_str(), calls.len()),
            ("a <b> c ", "<tool", 0)
        );
        // An answer opening with JSON is held; not a call after all, it all comes at the end.
        let (shown, rest, calls) = stream(&["  {\"x\"", ": 1}"]);
        assert_eq!(
            (shown.as_str(), rest.as_str(), calls.len()),
            ("", "  {\"x\": 1}", 0)
        );
        let (shown, _, calls) =
            stream(&["{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"]);
        assert_eq!(
            (shown.as_str(), calls[0].arguments["city"].as_str()),
            ("", Some("Oslo"))
        );
        let (shown, rest, calls) = stream(&["plain", " text"]);
        assert_eq!((shown + &rest, calls.len()), ("plain text".to_string(), 0));
    }

    #[test]
    fn streams_hold_a_json_block_not_other_code() {
        let (shown, _, calls) = stream(&["```js", "on\n{\"name\": \"add\"}\n```"]);
        assert_eq!((shown.as_str(), calls.len()), ("", 1));
        let (shown, rest, calls) = stream(&["```py", "thon\nx = 1\n```"]);
        assert_eq!(
            (shown + &rest, calls.len()),
            ("```python\nx = 1\n```".to_string(), 0)
        );
    }

    /// Random texts of call fragments, fed to a stream in random pieces: the calls are the whole
    /// text's, and without calls nothing is lost or changed.
    #[test]
    fn streams_agree_with_the_whole_text() {
        const BITS: [&str; 14] = [
            "<tool_call>",
            "</tool_call>",
            "{\"name\": \"add\", \"arguments\": {}}",
            "{",
            "}",
            "[",
            "]",
            "```json",
            "```",
            "<|python_tag|>",
            " ",
            "\n",
            "é€",
            "<tool",
        ];
        for (text, pieces) in crate::answer::random_pieces(&BITS, 7, 3000) {
            let mut s = Stream::new(names());
            let shown: String = pieces.iter().map(|p| s.push(p)).collect();
            let (rest, calls) = s.finish();
            let whole = parse(&text, &names());
            assert_eq!(
                calls,
                whole.as_ref().map(|w| w.1.clone()).unwrap_or_default(),
                "{text:?}"
            );
            let squeeze = |t: &str| t.split_whitespace().collect::<String>();
            match whole {
                Some((content, _)) => {
                    assert_eq!(squeeze(&(shown + &rest)), squeeze(&content), "{text:?}")
                }
                None => assert_eq!(shown + &rest, text),
            }
        }
    }

    #[test]
    fn forced_grammar_names_only_the_tools_asked_for() {
        let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}},
                           {"type": "function", "function": {"name": "get_weather"}}]);
        let g = forced_call(&tools, Some("add"), Syntax::Hermes, "<[151657]>").unwrap();
        assert!(
            g.starts_with("start: <[151657]> \"\\n\" call")
                && g.contains("\"add\"")
                && !g.contains("get_weather"),
            "{g}"
        );
        let g = forced_call(&tools, None, Syntax::LlamaJson, "").unwrap();
        assert!(g.contains("parameters") && g.contains("get_weather"), "{g}");
        // Declared arguments only, unless the schema allows more.
        let t = json!([{"type": "function", "function": {"name": "f", "parameters": {"properties": {}}}}]);
        assert!(
            forced_call(&t, None, Syntax::Json, "")
                .unwrap()
                .contains("\"additionalProperties\":false")
        );
        assert!(forced_call(&tools, Some("nope"), Syntax::Json, "").is_none());
        assert_eq!(Syntax::of_template("... <tool_call> ..."), Syntax::Hermes);
        assert_eq!(Syntax::of_template("{{ messages }}"), Syntax::Json);
    }
}
