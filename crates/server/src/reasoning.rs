//! Reasoning models' thoughts (Qwen3, SmolLM3, DeepSeek-R1 and others: `<think>...</think>`
//! before the answer) split from the answer, as llama.cpp (`--reasoning-format deepseek`), vLLM
//! and Ollama do: OpenAI's `reasoning_content`, Anthropic's `thinking` blocks, the Responses
//! API's `reasoning` items. Only for models whose chat template writes `<think>`; a request may
//! turn it off (`reasoning_format: "none"`).

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Part of an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Nothing shown yet: the answer may open with `<think>`.
    Start,
    Thinking,
    /// Just after `</think>`: the blank before the answer is dropped.
    Gap,
    Answer,
}

/// Splits an answer as it streams. Text that may be the start of a tag is held until the next
/// text says whether it is.
#[derive(Debug)]
pub struct Splitter {
    state: State,
    held: String,
}

/// The longest end of `s` that is a proper start of `tag`.
fn tag_start(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| s.ends_with(&tag[..n]))
        .unwrap_or(0)
}

impl Splitter {
    /// A splitter for an answer that follows a prompt ending inside `<think>` (`opened`: the
    /// template opened the thoughts itself) or not.
    pub fn new(opened: bool) -> Splitter {
        Splitter {
            state: if opened {
                State::Thinking
            } else {
                State::Start
            },
            held: String::new(),
        }
    }

    /// Takes the next text; returns what may be shown now.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let s = self.held.trim_start();
                    if s.is_empty() || OPEN.starts_with(s) {
                        return out;
                    }
                    if let Some(rest) = s.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.state = State::Thinking;
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Thinking => {
                    if let Some(i) = self.held.find(CLOSE) {
                        let thought = self.held[..i].to_string();
                        let rest = self.held[i + CLOSE.len()..].to_string();
                        if !thought.is_empty() {
                            out.push(Piece::Reasoning(thought));
                        }
                        self.held = rest;
                        self.state = State::Gap;
                        continue;
                    }
                    let cut = self.held.len() - tag_start(&self.held, CLOSE);
                    if cut > 0 {
                        out.push(Piece::Reasoning(self.held[..cut].to_string()));
                        self.held.drain(..cut);
                    }
                    return out;
                }
                State::Gap => {
                    // The answer starts after the blank the template puts after the tag.
                    self.held = self.held.trim_start().to_string();
                    if self.held.is_empty() {
                        return out;
                    }
                    self.state = State::Answer;
                }
                State::Answer => {
                    if !self.held.is_empty() {
                        out.push(Piece::Content(std::mem::take(&mut self.held)));
                    }
                    return out;
                }
            }
        }
    }

    /// The answer has ended: what was held (unfinished thoughts stay thoughts).
    pub fn finish(&mut self) -> Vec<Piece> {
        let held = std::mem::take(&mut self.held);
        match self.state {
            _ if held.is_empty() => Vec::new(),
            State::Thinking => vec![Piece::Reasoning(held)],
            State::Start | State::Gap | State::Answer => vec![Piece::Content(held)],
        }
    }
}

/// A whole answer as (thoughts, answer): None for the thoughts when there were none.
pub fn split(text: &str, opened: bool) -> (Option<String>, String) {
    let mut s = Splitter::new(opened);
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    let (mut reasoning, mut content) = (None::<String>, String::new());
    for p in pieces {
        match p {
            Piece::Reasoning(t) => reasoning.get_or_insert_default().push_str(&t),
            Piece::Content(t) => content.push_str(&t),
        }
    }
    (reasoning.map(|r| r.trim().to_string()), content)
}

/// The `chat_template_kwargs` that ask a reasoning model's template not to think (Qwen3's
/// `enable_thinking` false; Anthropic's `thinking` disabled, Ollama's `think: false`).
pub fn thinking_off() -> serde_json::Map<String, serde_json::Value> {
    serde_json::Map::from_iter([(
        "enable_thinking".to_string(),
        serde_json::Value::Bool(false),
    )])
}

/// Whether a model's template writes thoughts (so answers are split).
pub fn template_thinks(source: &str) -> bool {
    source.contains(OPEN) && source.contains(CLOSE)
}

/// Whether a rendered prompt ends inside an opened `<think>` (the template opened the
/// thoughts for the model).
pub fn prompt_opens(prompt: &str) -> bool {
    prompt.trim_end().ends_with(OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` one at a time: (thoughts, answer) as concatenated from the pieces.
    fn run(pieces: &[&str], opened: bool) -> (String, String) {
        let mut s = Splitter::new(opened);
        let mut all: Vec<Piece> = pieces.iter().flat_map(|p| s.push(p)).collect();
        all.extend(s.finish());
        let (mut r, mut c) = (String::new(), String::new());
        for p in all {
            match p {
                Piece::Reasoning(t) => r.push_str(&t),
                Piece::Content(t) => c.push_str(&t),
            }
        }
        (r, c)
    }

    #[test]
    fn thoughts_then_answer_in_any_pieces() {
        let whole = "<think>\nLet me add.\n</think>\n\nIt is 4.";
        let want = ("\nLet me add.\n".to_string(), "It is 4.".to_string());
        assert_eq!(run(&[whole], false), want);
        let chars: Vec<String> = whole.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&refs, false), want);
        assert_eq!(
            run(&["<th", "ink>a</th", "ink>b"], false),
            ("a".into(), "b".into())
        );
        // Opened by the template: no opening tag in the answer.
        assert_eq!(run(&["a</think>b"], true), ("a".into(), "b".into()));
        // No thoughts: all answer, '<' included.
        assert_eq!(
            run(&["<b>x</b>"], false),
            (String::new(), "<b>x</b>".into())
        );
        assert_eq!(run(&["  hi"], false), (String::new(), "  hi".into()));
        // Unfinished thoughts stay thoughts.
        assert_eq!(
            run(&["<think>hmm </thi"], false),
            ("hmm </thi".into(), String::new())
        );
        assert_eq!(
            split(whole, false),
            (Some("Let me add.".into()), "It is 4.".into())
        );
        assert_eq!(split("plain", false), (None, "plain".into()));
        assert_eq!(split("<think></think>x", false), (None, "x".into()));
    }

    /// Random texts of tag fragments and multi-byte characters, fed whole and in random pieces
    /// (cut at character boundaries): the same thoughts and answer either way.
    #[test]
    fn pieces_never_change_the_split() {
        const BITS: [&str; 10] = [
            "<think>", "</think>", "<th", "ink>", "</", " ", "\n", "é€", "a", "<",
        ];
        for (text, pieces) in crate::answer::random_pieces(&BITS, 11, 3000) {
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            for opened in [false, true] {
                assert_eq!(
                    run(&pieces, opened),
                    run(&[&text], opened),
                    "{text:?} in {pieces:?}"
                );
            }
        }
    }

    #[test]
    fn templates_and_prompts() {
        assert!(template_thinks("{{ '<think>\\n\\n</think>' }}"));
        assert!(!template_thinks("{{ messages }}"));
        assert!(prompt_opens("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
    }
}
