//! Streaming detokenization: text out as ids come in, never half a UTF-8 character.

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// Turns ids into text one at a time. A token may end inside a multi-byte character (byte
/// tokens, or BPE tokens that split an emoji); those bytes are held back until the character
/// completes. Pieces are concatenated as they are (no clean-up of spaces, as in llama.cpp's
/// own streaming), with control tokens rendered unless [`StreamDecoder::skip_special`] is set.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u8>,
    skip_special: bool,
}

impl<'t> StreamDecoder<'t> {
    pub fn new(tok: &'t Tokenizer) -> Self {
        StreamDecoder {
            tok,
            pending: Vec::new(),
            skip_special: false,
        }
    }

    /// Leave control and unknown tokens (e.g. `<|im_end|>`) out of the text.
    pub fn skip_special(mut self, skip: bool) -> Self {
        self.skip_special = skip;
        self
    }

    /// Adds one id; returns the text that is now complete (possibly empty). Invalid UTF-8
    /// in the middle becomes U+FFFD; an incomplete character at the end waits. Fails on an
    /// out-of-range id, leaving the decoder as it was.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.tok.check_id(id)?;
        self.tok.piece(id, !self.skip_special, &mut self.pending);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // valid_up_to marks valid UTF-8, so this cannot fail.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &after[bad..];
                        }
                        None => {
                            rest = after; // incomplete character: keep for the next push
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        self.pending.drain(..self.pending.len() - keep);
        Ok(out)
    }

    /// Ends the stream: returns what was held back, invalid bytes as U+FFFD.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    /// Ends a generation: like [`StreamDecoder::finish`], but the first bytes of a character
    /// that generation stopped in the middle of are dropped rather than shown as U+FFFD.
    pub fn finish_generation(&mut self) -> String {
        let cut = incomplete_tail(&self.pending);
        self.pending.truncate(self.pending.len() - cut);
        self.finish()
    }
}

/// How many bytes at the end of `b` begin a multi-byte UTF-8 character without completing it.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead byte
        }
        let need = match c {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::incomplete_tail;
    use crate::{Tokenizer, Vocab, VocabKind};

    #[test]
    fn incomplete_tails() {
        assert_eq!(incomplete_tail(b"ab"), 0);
        assert_eq!(incomplete_tail("é".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_tail(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_tail(&"😀".as_bytes()[..2]), 2);
        assert_eq!(incomplete_tail("😀".as_bytes()), 0);
        assert_eq!(
            incomplete_tail(b"a\x80"),
            0,
            "a stray continuation byte is not a character start"
        );
    }

    fn spm_with_bytes() -> Tokenizer {
        let mut tokens: Vec<String> =
            vec!["<unk>".into(), "<s>".into(), "</s>".into(), "▁hi".into()];
        let mut types = vec![2, 3, 3, 1];
        for b in 0..256 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        Tokenizer::new(Vocab {
            kind: VocabKind::Spm,
            tokens,
            token_types: types,
            ..Vocab::default()
        })
        .unwrap()
    }

    #[test]
    fn holds_back_partial_characters() {
        let tok = spm_with_bytes();
        let byte = |b: u32| 4 + b;
        let mut s = tok.stream_decoder();
        assert_eq!(s.push(3).unwrap(), " hi");
        // "é" = C3 A9, then a stray continuation byte, then "中" = E4 B8 AD.
        assert_eq!(s.push(byte(0xC3)).unwrap(), "");
        assert_eq!(s.push(byte(0xA9)).unwrap(), "é");
        assert_eq!(s.push(byte(0xA9)).unwrap(), "\u{FFFD}");
        assert_eq!(s.push(byte(0xE4)).unwrap(), "");
        assert_eq!(s.push(byte(0xB8)).unwrap(), "");
        assert!(s.push(100_000).is_err());
        assert_eq!(s.push(byte(0xAD)).unwrap(), "中");
        assert_eq!(s.push(byte(0xE4)).unwrap(), "");
        assert_eq!(s.push(byte(b'x' as u32)).unwrap(), "\u{FFFD}x");
        assert_eq!(s.push(byte(0xF0)).unwrap(), "");
        assert_eq!(s.finish(), "\u{FFFD}");
        assert_eq!(s.finish(), "");
        assert_eq!(s.push(2).unwrap(), "</s>");
        let mut quiet = tok.stream_decoder().skip_special(true);
        assert_eq!(quiet.push(2).unwrap(), "");
    }
}
