//! BPE pre-tokenizers: split text into words before merging, as llama.cpp does for each
//! `tokenizer.ggml.pre`.
//!
//! llama.cpp applies a list of regexes in turn, each splitting the pieces the previous one left
//! (text between matches stays a piece of its own). The big GPT-2 / Llama 3 / Qwen2 regexes it
//! runs through hand-written matchers rather than a regex engine; the small ones through
//! `std::regex` over a "collapsed" text where each non-ASCII code point stands for its class.
//! Both are reproduced here, quirks included, so that the split is the same code point for code
//! point. Pieces are counted in code points.

use crate::unicode::{Class, class, is_letter, is_number, is_whitespace};

/// One split step of a pre-tokenizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` (Llama 3: 3 digits; Qwen2: 1).
    Llama3 { max_digits: usize },
    /// Runs of one character class: each run is a match, cut into chunks of `chunk` code
    /// points when given (`\p{N}` is chunk 1, `[0-9][0-9][0-9]` chunk 3 with the remainder
    /// left unmatched).
    Runs { set: CharSet, chunk: Option<usize> },
}

/// Character sets of the small regexes, as they match in llama.cpp's collapsed text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CharSet {
    /// `\p{N}`
    Number,
    /// `[0-9]` (ASCII only)
    AsciiDigit,
    /// `[\p{P}\$\+<=>\^~\|]`, plus the backtick for Falcon.
    PunctSym { backtick: bool },
}

impl CharSet {
    fn contains(self, c: char) -> bool {
        // In the collapsed text a non-ASCII code point is a byte for its class (whitespace
        // becomes \v); ASCII stays itself and the class escapes list ASCII members explicitly.
        let ascii = c.is_ascii();
        let collapsed = |want: Class| !ascii && !is_whitespace(c) && class(c) == want;
        match self {
            CharSet::Number => c.is_ascii_digit() || collapsed(Class::Number),
            CharSet::AsciiDigit => c.is_ascii_digit(),
            CharSet::PunctSym { backtick } => {
                matches!(c, '!'..='#' | '%'..='*' | ',' ..='/' | ':' | ';' | '?' | '@')
                    || matches!(c, '['..=']' | '_' | '{' | '}' | '$' | '+' | '<'..='>')
                    || matches!(c, '^' | '~' | '|')
                    || (backtick && c == '`')
                    || collapsed(Class::Punctuation)
            }
        }
    }
}

/// Splits `text` by `steps`, returning the words (not yet byte-encoded).
pub(crate) fn split<'t>(text: &'t str, steps: &[Step]) -> Vec<&'t str> {
    let cps: Vec<char> = text.chars().collect();
    let mut lens = vec![cps.len()];
    for step in steps {
        let mut out = Vec::with_capacity(lens.len());
        let mut start = 0;
        for &len in &lens {
            let piece = &cps[start..start + len];
            match *step {
                Step::Gpt2 => split_gpt2(piece, &mut out),
                Step::Llama3 { max_digits } => split_llama3(piece, max_digits, &mut out),
                Step::Runs { set, chunk } => split_runs(piece, set, chunk, &mut out),
            }
            start += len;
        }
        lens = out;
    }
    // Code point lengths -> string slices.
    let mut words = Vec::with_capacity(lens.len());
    let mut rest = text;
    for len in lens {
        let bytes: usize = rest.chars().take(len).map(char::len_utf8).sum();
        let (word, tail) = rest.split_at(bytes);
        if !word.is_empty() {
            words.push(word);
        }
        rest = tail;
    }
    words
}

/// Flags of the code point at `i` of a piece; all false past either end (llama.cpp's
/// `OUT_OF_RANGE`), which is how look-ahead stops at a piece boundary.
#[derive(Clone, Copy, Default)]
struct Flags {
    present: bool,
    letter: bool,
    number: bool,
    space: bool,
}

impl Flags {
    fn of(s: &[char], i: usize) -> Flags {
        match s.get(i) {
            None => Flags::default(),
            Some(&c) => Flags {
                present: true,
                letter: is_letter(c),
                number: is_number(c),
                space: is_whitespace(c),
            },
        }
    }

    /// `[^\s\p{L}\p{N}]`, and present.
    fn other(self) -> bool {
        self.present && !(self.space || self.letter || self.number)
    }
}

/// Collects piece lengths: `cut(end)` closes the token that started at the previous cut.
struct Cutter<'o> {
    out: &'o mut Vec<usize>,
    prev: usize,
}

impl Cutter<'_> {
    fn cut(&mut self, end: usize) -> usize {
        let len = end - self.prev;
        if len > 0 {
            self.out.push(len);
        }
        self.prev = end;
        len
    }
}

/// Length of an English contraction starting at `pos` (`'s`, `'re`, ...), if any.
fn contraction(s: &[char], pos: usize, ignore_case: bool) -> Option<usize> {
    let n = s.len();
    if s[pos] != '\'' || pos + 1 >= n {
        return None;
    }
    let low = |c: char| {
        if ignore_case {
            c.to_ascii_lowercase()
        } else {
            c
        }
    };
    let c1 = low(s[pos + 1]);
    if matches!(c1, 's' | 't' | 'm' | 'd') {
        return Some(2);
    }
    if pos + 2 < n {
        let c2 = low(s[pos + 2]);
        if matches!((c1, c2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return Some(3);
        }
    }
    None
}

fn split_gpt2(s: &[char], out: &mut Vec<usize>) {
    let mut cut = Cutter { out, prev: 0 };
    let mut pos = 0;
    while pos < s.len() {
        let c = s[pos];
        if let Some(len) = contraction(s, pos, false) {
            pos += cut.cut(pos + len);
            continue;
        }
        let space = usize::from(c == ' ');
        let f2 = Flags::of(s, pos + space);
        if f2.letter || f2.number || f2.other() {
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the same kind of code point repeated.
            let same = |f: Flags| {
                if f2.letter {
                    f.letter
                } else if f2.number {
                    f.number
                } else {
                    f.other()
                }
            };
            pos += space;
            while same(Flags::of(s, pos)) {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }
        let n_ws = (pos..).take_while(|&i| Flags::of(s, i).space).count();
        if n_ws > 1 && pos + n_ws < s.len() {
            // `\s+(?!\S)`: leave the last space to prefix the next word.
            pos += n_ws - 1;
        } else if n_ws > 0 {
            pos += n_ws;
        } else {
            pos += 1;
        }
        cut.cut(pos);
    }
}

fn split_llama3(s: &[char], max_digits: usize, out: &mut Vec<usize>) {
    let mut cut = Cutter { out, prev: 0 };
    let mut pos = 0;
    while pos < s.len() {
        let c = s[pos];
        let f = Flags::of(s, pos);
        if let Some(len) = contraction(s, pos, true) {
            pos += cut.cut(pos + len);
            continue;
        }
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if !(c == '\r' || c == '\n' || f.number) && (f.letter || Flags::of(s, pos + 1).letter) {
            pos += 1;
            while Flags::of(s, pos).letter {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }
        // `\p{N}{1,max_digits}`, repeated over the whole run of digits.
        if f.number {
            let mut start = pos;
            while Flags::of(s, pos).number {
                pos += 1;
                if pos - start >= max_digits {
                    cut.cut(pos);
                    start = pos;
                }
            }
            cut.cut(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (llama.cpp tests the first code point's presence, not
        // the one after the optional space; kept as is).
        let space = usize::from(c == ' ');
        let mut f2 = Flags::of(s, pos + space);
        if !(f2.space || f2.letter || f2.number) && f.present {
            pos += space;
            while f2.other() {
                pos += 1;
                f2 = Flags::of(s, pos);
            }
            while matches!(s.get(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }
        let mut n_ws = 0;
        let mut last_newline_end = None;
        while Flags::of(s, pos + n_ws).space {
            if matches!(s[pos + n_ws], '\r' | '\n') {
                last_newline_end = Some(pos + n_ws + 1);
            }
            n_ws += 1;
        }
        if let Some(end) = last_newline_end {
            // `\s*[\r\n]+`
            pos = end;
        } else if n_ws > 1 && pos + n_ws < s.len() {
            // `\s+(?!\S)`
            pos += n_ws - 1;
        } else if n_ws > 0 {
            pos += n_ws;
        } else {
            pos += 1;
        }
        cut.cut(pos);
    }
}

/// Leftmost non-overlapping matches of `set+` (or `set{chunk}`), with the text between
/// matches kept as pieces, as `std::regex_iterator` leaves them.
fn split_runs(s: &[char], set: CharSet, chunk: Option<usize>, out: &mut Vec<usize>) {
    let mut cut = Cutter { out, prev: 0 };
    let mut pos = 0;
    while pos < s.len() {
        if !set.contains(s[pos]) {
            pos += 1;
            continue;
        }
        let run = s[pos..].iter().take_while(|&&c| set.contains(c)).count();
        match chunk {
            None => {
                cut.cut(pos);
                pos += run;
                cut.cut(pos);
            }
            Some(k) => {
                let n_chunks = run / k.max(1);
                for _ in 0..n_chunks {
                    cut.cut(pos);
                    pos += k;
                    cut.cut(pos);
                }
                // A remainder shorter than a chunk does not match: it joins the gap.
                pos += run - n_chunks * k.max(1);
            }
        }
    }
    cut.cut(s.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPT2: &[Step] = &[Step::Gpt2];
    const LLAMA3: &[Step] = &[Step::Llama3 { max_digits: 3 }];

    #[test]
    fn gpt2_words() {
        assert_eq!(
            split("Hello world's  end\n\n 123!!", GPT2),
            ["Hello", " world", "'s", " ", " end", "\n\n", " 123", "!!"]
        );
        assert_eq!(split("a   ", GPT2), ["a", "   "]);
        assert_eq!(split("", GPT2), Vec::<&str>::new());
    }

    #[test]
    fn llama3_words() {
        assert_eq!(
            split("I'M 12345 ok\r\n\nx", LLAMA3),
            ["I", "'M", " ", "123", "45", " ok", "\r\n\n", "x"]
        );
        assert_eq!(split("  ...\n\nhi", LLAMA3), [" ", " ...\n\n", "hi"]);
        assert_eq!(split("\tfoo", LLAMA3), ["\tfoo"]);
    }

    #[test]
    fn runs_keep_gaps() {
        let digits3 = [Step::Runs {
            set: CharSet::AsciiDigit,
            chunk: Some(3),
        }];
        assert_eq!(split("ab12345cd", &digits3), ["ab", "123", "45cd"]);
        let num1 = [Step::Runs {
            set: CharSet::Number,
            chunk: Some(1),
        }];
        assert_eq!(split("x12٣", &num1), ["x", "1", "2", "٣"]);
        let punct = [Step::Runs {
            set: CharSet::PunctSym { backtick: false },
            chunk: None,
        }];
        assert_eq!(split("a,.b`", &punct), ["a", ",.", "b`"]);
    }
}
