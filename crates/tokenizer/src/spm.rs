//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`): spaces become U+2581, then
//! adjacent symbols merge, highest-scoring resulting token first; what is left that is not a
//! token falls back to `<0xNN>` byte tokens (llama.cpp's `llm_tokenizer_spm_session`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// What SPM merging needs from the vocabulary.
pub(crate) struct SpmVocab<'v> {
    pub to_id: &'v HashMap<String, u32>,
    pub scores: &'v [f32],
    /// Token for each byte value (`<0xNN>`, else the byte itself as a token), if any.
    pub byte_ids: &'v [Option<u32>; 256],
    pub unk: Option<u32>,
}

/// Tokenizes one fragment; `text` already has spaces replaced by U+2581.
pub(crate) fn encode(v: &SpmVocab<'_>, text: &str, out: &mut Vec<u32>) {
    let mut syms: Vec<Symbol> = Vec::with_capacity(text.len());
    for (start, c) in text.char_indices() {
        let end = start + c.len_utf8();
        let i = syms.len();
        syms.push(Symbol {
            start,
            end,
            prev: i.checked_sub(1),
            next: (end < text.len()).then_some(i + 1),
        });
    }
    let mut queue = BinaryHeap::new();
    for i in 1..syms.len() {
        push_pair(v, text, &syms, i - 1, i, &mut queue);
    }
    while let Some(pair) = queue.pop() {
        let (l, r) = (&syms[pair.left], &syms[pair.right]);
        if l.is_empty() || r.is_empty() || l.len() + r.len() != pair.len {
            continue; // outdated
        }
        let next = r.next;
        syms[pair.left].end = r.end;
        syms[pair.right].end = syms[pair.right].start;
        syms[pair.left].next = next;
        if let Some(n) = next {
            syms[n].prev = Some(pair.left);
        }
        if let Some(p) = syms[pair.left].prev {
            push_pair(v, text, &syms, p, pair.left, &mut queue);
        }
        if let Some(n) = next {
            push_pair(v, text, &syms, pair.left, n, &mut queue);
        }
    }
    for sym in syms.iter().filter(|s| !s.is_empty()) {
        let piece = &text[sym.start..sym.end];
        if let Some(&id) = v.to_id.get(piece) {
            out.push(id);
            continue;
        }
        // Merged symbols are always tokens, so this is a single character: spell its bytes.
        for b in piece.bytes() {
            if let Some(id) = v.byte_ids[b as usize].or(v.unk) {
                out.push(id);
            }
        }
    }
}

fn push_pair(
    v: &SpmVocab<'_>,
    text: &str,
    syms: &[Symbol],
    left: usize,
    right: usize,
    queue: &mut BinaryHeap<Pair>,
) {
    let (start, end) = (syms[left].start, syms[right].end);
    if let Some(&id) = v.to_id.get(&text[start..end]) {
        let score = v.scores.get(id as usize).copied().unwrap_or(0.0);
        queue.push(Pair {
            score,
            left,
            right,
            len: end - start,
        });
    }
}

#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    end: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Symbol {
    fn len(&self) -> usize {
        self.end - self.start
    }
    fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// A candidate merge: the highest score pops first, then the leftmost.
#[derive(Clone, Copy, Debug)]
struct Pair {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Pair {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}
impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Pair {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Pair {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_score_with_byte_fallback() {
        let tokens = [
            "▁", "a", "b", "▁a", "ab", "▁ab", "<0xE4>", "<0xB8>", "<0xAD>",
        ];
        let to_id: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        // "ab" scores higher than "▁a", so "▁ab" forms via ▁ + ab.
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0, 0.0, 0.0, 0.0];
        let mut byte_ids = [None; 256];
        byte_ids[0xE4] = Some(6);
        byte_ids[0xB8] = Some(7);
        byte_ids[0xAD] = Some(8);
        let v = SpmVocab {
            to_id: &to_id,
            scores: &scores,
            byte_ids: &byte_ids,
            unk: None,
        };
        let mut out = vec![];
        encode(&v, "▁ab中", &mut out);
        assert_eq!(out, [5, 6, 7, 8]);
    }
}
