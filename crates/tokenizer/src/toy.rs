//! Small hand-built vocabularies of both kinds, for tests and fuzzing: a byte-level BPE with
//! GPT-2's byte characters and a SentencePiece vocabulary with byte fallback.

use crate::vocab::{SpecialIds, Vocab, VocabKind};

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// GPT-2's printable stand-in for byte `b` (bytes that print as themselves keep their char, the
/// others are numbered from U+0100 in byte order).
pub fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(0x100 + n).unwrap_or('\u{fffd}')
}

/// Byte-level BPE with pre-tokenizer `pre`: the control tokens `<|endoftext|>` (BOS),
/// `<|im_start|>`, `<|im_end|>` (EOS), the 256 byte tokens, then one token per merge
/// ("a b" makes "ab").
pub fn byte_bpe(pre: &str, merges: &[&str]) -> Vocab {
    let mut tokens = strings(&["<|endoftext|>", "<|im_start|>", "<|im_end|>"]);
    let mut types = vec![3, 3, 3];
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    types.extend([1; 256]);
    let merges = strings(merges);
    for m in &merges {
        tokens.push(m.replace(' ', ""));
        types.push(1);
    }
    Vocab {
        kind: VocabKind::Bpe,
        pre: pre.to_string(),
        tokens,
        token_types: types,
        merges,
        special: SpecialIds {
            bos: Some(0),
            eos: Some(2),
            ..SpecialIds::default()
        },
        ..Vocab::default()
    }
}

/// SentencePiece with byte fallback: `<unk>`, `<s>` (BOS), `</s>` (EOS), `<start_of_turn>`, "▁",
/// every prefix of at least `min_prefix` characters of `words`, then the 256 byte tokens; the
/// score of a token is minus its id.
pub fn spm(words: &[&str], min_prefix: usize) -> Vocab {
    let mut tokens = strings(&["<unk>", "<s>", "</s>", "<start_of_turn>", "▁"]);
    let mut types = vec![2, 3, 3, 3, 1];
    for word in words {
        let chars: Vec<char> = word.chars().collect();
        for n in min_prefix.max(1)..=chars.len() {
            let prefix: String = chars[..n].iter().collect();
            if !tokens.contains(&prefix) {
                tokens.push(prefix);
                types.push(1);
            }
        }
    }
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let scores = (0..tokens.len()).map(|i| -(i as f32)).collect();
    Vocab {
        kind: VocabKind::Spm,
        tokens,
        scores,
        token_types: types,
        special: SpecialIds {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            ..SpecialIds::default()
        },
        ..Vocab::default()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_chars_are_gpt2s() {
        assert_eq!(super::byte_char(b'a'), 'a');
        assert_eq!(super::byte_char(0), '\u{100}');
        assert_eq!(super::byte_char(b' '), 'Ġ');
        assert_eq!(super::byte_char(0xAD), 'Ń');
        let all: std::collections::HashSet<char> = (0..=255u8).map(super::byte_char).collect();
        assert_eq!(all.len(), 256);
    }
}
