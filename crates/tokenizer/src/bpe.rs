//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): pre-tokenize, map bytes to GPT-2's
//! printable chars, then merge adjacent symbols by lowest merge rank (llama.cpp's
//! `llm_tokenizer_bpe_session`).

use crate::error::{Result, TokError};
use crate::pre_type::PreConfig;
use crate::pretokenize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

pub(crate) struct Bpe {
    /// (left id, right id) -> rank; the first listing of a pair wins.
    ranks: HashMap<(u32, u32), u32>,
    pub(crate) pre: PreConfig,
    byte_chars: [char; 256],
}

impl Bpe {
    /// Parses `"left right"` merges; both sides must be tokens.
    pub(crate) fn new(
        merges: &[String],
        to_id: &HashMap<String, u32>,
        pre: PreConfig,
    ) -> Result<Bpe> {
        let mut ranks = HashMap::with_capacity(merges.len());
        for (index, merge) in merges.iter().enumerate() {
            // Split at the first space after the first byte, as llama.cpp does.
            let split = merge
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1);
            let Some(split) = split else {
                return Err(TokError::BadMerge {
                    index,
                    merge: merge.clone(),
                });
            };
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            let id = |part: &str| {
                to_id
                    .get(part)
                    .copied()
                    .ok_or_else(|| TokError::MergeUnknownToken {
                        index,
                        merge: merge.clone(),
                        part: part.to_string(),
                    })
            };
            let rank = u32::try_from(index).unwrap_or(u32::MAX);
            ranks.entry((id(left)?, id(right)?)).or_insert(rank);
        }
        Ok(Bpe {
            ranks,
            pre,
            byte_chars: crate::unicode::byte_to_char_table(),
        })
    }

    /// Tokenizes one fragment of plain text (no special tokens in it).
    pub(crate) fn encode(&self, text: &str, to_id: &HashMap<String, u32>, out: &mut Vec<u32>) {
        let mut word = String::new();
        for raw in pretokenize::split(text, &self.pre.steps) {
            word.clear();
            word.extend(raw.bytes().map(|b| self.byte_chars[b as usize]));
            if self.pre.ignore_merges
                && let Some(&id) = to_id.get(word.as_str())
            {
                out.push(id);
                continue;
            }
            self.merge_word(&word, to_id, out);
        }
    }

    fn merge_word(&self, word: &str, to_id: &HashMap<String, u32>, out: &mut Vec<u32>) {
        let mut syms: Vec<Symbol> = Vec::with_capacity(word.len());
        for (start, c) in word.char_indices() {
            let end = start + c.len_utf8();
            let i = syms.len();
            syms.push(Symbol {
                start,
                end,
                prev: i.checked_sub(1),
                next: (end < word.len()).then_some(i + 1),
                id: to_id.get(&word[start..end]).copied(),
            });
        }
        let mut queue = BinaryHeap::new();
        for i in 1..syms.len() {
            self.push_pair(&syms, i - 1, i, &mut queue);
        }
        while let Some(Reverse(Pair {
            left, right, len, ..
        })) = queue.pop()
        {
            let (l, r) = (&syms[left], &syms[right]);
            if l.is_empty() || r.is_empty() || l.len() + r.len() != len {
                continue; // outdated: one side has merged since
            }
            let (start, end, next) = (l.start, r.end, r.next);
            syms[right].end = syms[right].start;
            syms[left].end = end;
            syms[left].next = next;
            syms[left].id = to_id.get(&word[start..end]).copied();
            if let Some(n) = next {
                syms[n].prev = Some(left);
            }
            if let Some(p) = syms[left].prev {
                self.push_pair(&syms, p, left, &mut queue);
            }
            if let Some(n) = next {
                self.push_pair(&syms, left, n, &mut queue);
            }
        }
        for sym in syms.iter().filter(|s| !s.is_empty()) {
            match sym.id {
                Some(id) => out.push(id),
                // Not a token: fall back to single-byte tokens of its text, skipping misses.
                None => {
                    let text = &word[sym.start..sym.end];
                    for i in 0..text.len() {
                        if let Some(&id) = text.get(i..i + 1).and_then(|b| to_id.get(b)) {
                            out.push(id);
                        }
                    }
                }
            }
        }
    }

    fn push_pair(
        &self,
        syms: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Reverse<Pair>>,
    ) {
        let (Some(l), Some(r)) = (syms[left].id, syms[right].id) else {
            return;
        };
        if let Some(&rank) = self.ranks.get(&(l, r)) {
            let len = syms[left].len() + syms[right].len();
            queue.push(Reverse(Pair {
                rank,
                left,
                right,
                len,
            }));
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    end: usize,
    prev: Option<usize>,
    next: Option<usize>,
    /// The token its text is, if any.
    id: Option<u32>,
}

impl Symbol {
    fn len(&self) -> usize {
        self.end - self.start
    }
    fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// A candidate merge; ordered by rank, then leftmost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    rank: u32,
    left: usize,
    right: usize,
    len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pre_type::resolve;

    fn vocab(tokens: &[&str]) -> HashMap<String, u32> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect()
    }

    #[test]
    fn merges_by_rank() {
        let to_id = vocab(&["a", "b", "c", "Ġ", "ab", "bc", "abc", "Ġa"]);
        let merges: Vec<String> = ["b c", "a b", "a bc", "Ġ a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let bpe = Bpe::new(&merges, &to_id, resolve("gpt2").0).unwrap();
        let mut out = vec![];
        bpe.encode("abc ab", &to_id, &mut out);
        // "abc": b+c first (rank 0), then a+bc; "Ġab": a+b (rank 1) beats Ġ+a (rank 3).
        assert_eq!(out, [6, 3, 4]);
    }

    #[test]
    fn bad_merges_are_errors() {
        let to_id = vocab(&["a", "b"]);
        let bad = |m: &str| {
            Bpe::new(&[m.to_string()], &to_id, resolve("gpt2").0)
                .err()
                .unwrap()
        };
        assert!(matches!(bad("ab"), TokError::BadMerge { .. }));
        assert!(matches!(bad("a z"), TokError::MergeUnknownToken { .. }));
    }
}
