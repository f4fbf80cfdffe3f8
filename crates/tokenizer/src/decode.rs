//! Ids -> bytes: one token's piece, and whole sequences with llama.cpp's space clean-up
//! (`llama_vocab::impl::token_to_piece` and `detokenize`).

use crate::attr;
use crate::error::Result;
use crate::tokenizer::Tokenizer;
use crate::unicode::char_to_byte;
use crate::vocab::VocabKind;

impl Tokenizer {
    /// The bytes token `id` stands for. Control and unknown tokens give their text when
    /// `special`, nothing otherwise. `id` must be in range.
    pub(crate) fn piece(&self, id: u32, special: bool, out: &mut Vec<u8>) {
        let a = self.attrs[id as usize];
        let text = &self.texts[id as usize];
        if a & (attr::UNKNOWN | attr::CONTROL) != 0 {
            if special {
                out.extend_from_slice(text.as_bytes());
            }
        } else if a & attr::USER_DEFINED != 0 {
            out.extend_from_slice(text.as_bytes());
        } else if a & attr::NORMAL != 0 {
            match self.kind {
                VocabKind::Spm => out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes()),
                VocabKind::Bpe => decode_byte_level(text, out),
            }
        } else if a & attr::BYTE != 0 {
            out.push(hex_byte(text));
        }
    }

    /// llama.cpp's `llama_detokenize`: concatenated pieces, then (for most BPE vocabularies)
    /// spaces before punctuation and contractions removed. `remove_special` drops a leading
    /// BOS / trailing EOS the model adds itself; `unparse_special` renders control tokens.
    pub fn detokenize(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>> {
        for &id in ids {
            self.check_id(id)?;
        }
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos && ids.first().is_some_and(|&id| Some(id) == self.bos()) {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.add_eos && ids.last().is_some_and(|&id| Some(id) == self.eos()) {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let start = out.len();
            self.piece(id, unparse_special, &mut out);
            if remove_space && out.get(start) == Some(&b' ') {
                out.remove(start);
            }
            remove_space = false;
        }
        if self.clean_spaces {
            clean_spaces(&mut out);
        }
        Ok(out)
    }
}

/// GPT-2 chars back to bytes; a char outside the byte map is spelled out the way llama.cpp
/// does it (`[UNK_BYTE_0x..<token>]`).
fn decode_byte_level(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// The byte of a `<0xNN>` token (0 when malformed, like `strtol`).
fn hex_byte(text: &str) -> u8 {
    let digits = text.get(3..5).unwrap_or("");
    let valid: String = digits
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u8::from_str_radix(&valid, 16).unwrap_or(0)
}

/// llama.cpp's three clean-up passes, in place over bytes: drop the space in " ?", " !",
/// " .", " ,"; turn " ' " into "'"; drop the space in " 's", " 'm", " 're", " 've".
fn clean_spaces(t: &mut Vec<u8>) {
    // Each pass compacts in place: reads t[i-1..=i+2] (never yet overwritten), writes t[total].
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        t[total] = x;
        total += 1;
    }

    let n = total;
    total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = t[i];
        if x == b'\'' && i + 1 < n && t[i - 1] == b' ' && t[i + 1] == b' ' {
            total -= 1;
            i += 1;
            t[i] = 0;
        }
        t[total] = x;
        total += 1;
        i += 1;
    }

    let n = total;
    total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = t[i + 1];
            let re_ve = i + 2 < n && matches!((x1, t[i + 2]), (b'r', b'e') | (b'v', b'e'));
            if matches!(x1, b's' | b'm') || re_ve {
                total -= 1;
            }
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn clean_up() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("it 's a ' quote ' ok"), "it's a'quote'ok");
        assert_eq!(clean("we 're we 've I 'm don 't"), "we're we've I'm don 't");
        assert_eq!(clean(""), "");
        assert_eq!(clean(" ."), ".");
        assert_eq!(clean("a  ."), "a .");
    }

    #[test]
    fn hex() {
        assert_eq!(hex_byte("<0x0A>"), 10);
        assert_eq!(hex_byte("<0xFF>"), 255);
        assert_eq!(hex_byte("<0x"), 0);
    }
}
