//! Reading an answer as it streams, for every API: a reasoning model's thoughts
//! ([`crate::reasoning`]) apart from the rest, and tool calls ([`crate::tools`]) out of that rest.

use crate::reasoning::{Piece, Splitter};
use crate::tools::{self, Call};
use template::Message;

/// What an answer is read for (either may be off).
#[derive(Debug, Default)]
pub struct Reader {
    calls: Option<tools::Stream>,
    think: Option<Splitter>,
}

impl Reader {
    /// A reader for the request's tool names (None: no tools) and, for a reasoning model, whether
    /// its prompt opened `<think>` (None: no thoughts to split).
    pub fn new(names: Option<Vec<String>>, think: Option<bool>) -> Reader {
        Reader {
            calls: names.map(tools::Stream::new),
            think: think.map(Splitter::new),
        }
    }

    /// Whether the answer is read for nothing (its text passes as it comes).
    pub fn is_plain(&self) -> bool {
        self.calls.is_none() && self.think.is_none()
    }

    /// Takes the next text: gives the thoughts in it to `thought` (false from it stops the
    /// reading: None), and returns the rest that may be shown now.
    pub fn push(&mut self, text: &str, thought: &mut dyn FnMut(&str) -> bool) -> Option<String> {
        let text = match self.think.as_mut() {
            Some(s) => answer_of(s.push(text), thought)?,
            None => text.to_string(),
        };
        Some(match self.calls.as_mut() {
            Some(c) => c.push(&text),
            None => text,
        })
    }

    /// The answer has ended: the last thoughts go to `thought`; returns the text still to show
    /// and the calls found.
    pub fn finish(&mut self, thought: &mut dyn FnMut(&str) -> bool) -> (String, Vec<Call>) {
        let tail = match self.think.as_mut() {
            Some(s) => answer_of(s.finish(), thought).unwrap_or_default(),
            None => String::new(),
        };
        match self.calls.as_mut() {
            Some(c) => {
                let shown = c.push(&tail);
                let (rest, found) = c.finish();
                (shown + &rest, found)
            }
            None => (tail, Vec::new()),
        }
    }
}

/// A whole answer read as the streams read it: its thoughts (None: none, or `think` None),
/// its text, and the calls in it (to `names`, when given; the text then is what lies outside
/// them, trimmed).
pub fn read_whole(
    text: String,
    names: Option<&[String]>,
    think: Option<bool>,
) -> (Option<String>, String, Vec<Call>) {
    let (thoughts, text) = match think {
        Some(opened) => crate::reasoning::split(&text, opened),
        None => (None, text),
    };
    match names.and_then(|n| tools::parse(&text, n)) {
        Some((text, calls)) => (thoughts, text, calls),
        None => (thoughts, text, Vec::new()),
    }
}

/// Gives the thoughts among `pieces` to `thought`; returns the answer's text among them.
fn answer_of(pieces: Vec<Piece>, thought: &mut dyn FnMut(&str) -> bool) -> Option<String> {
    let mut content = String::new();
    for p in pieces {
        match p {
            Piece::Reasoning(r) => {
                if !thought(&r) {
                    return None;
                }
            }
            Piece::Content(t) => content.push_str(&t),
        }
    }
    Some(content)
}

/// A tool's result as the `tool` message templates take: `out`, the call's id, and the name of
/// the function that call named among the messages `before` it (some templates print it).
pub fn tool_result(before: &[Message], id: Option<String>, out: String) -> Message {
    let name = before
        .iter()
        .flat_map(|m| m.tool_calls.iter().flatten())
        .find(|c| c.id.is_some() && c.id == id)
        .map(|c| c.function.name.clone());
    let mut m = Message::new("tool", out);
    m.tool_call_id = id;
    m.name = name;
    m
}

/// For the readers' tests: `n` random texts of up to `len` of `bits` each, every one with its
/// cut into random pieces at character boundaries (a fixed xorshift stream: the same texts every
/// run).
#[cfg(test)]
pub fn random_pieces(bits: &[&str], len: usize, n: usize) -> Vec<(String, Vec<String>)> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    };
    (0..n)
        .map(|_| {
            let text: String = (0..next(len + 1)).map(|_| bits[next(bits.len())]).collect();
            let mut bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            bounds.push(text.len());
            let mut cuts: Vec<usize> = (0..next(6)).map(|_| bounds[next(bounds.len())]).collect();
            cuts.push(text.len());
            cuts.sort_unstable();
            let (mut pieces, mut at) = (Vec::new(), 0);
            for c in cuts {
                pieces.push(text[at..c].to_string()); // sorted: never before `at`
                at = c;
            }
            (text, pieces)
        })
        .collect()
}
