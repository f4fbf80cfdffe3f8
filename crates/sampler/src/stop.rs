//! Stop strings over streamed text: hold back what could still become a stop string,
//! emit the rest, and cut the output where a stop string first appears.

/// What a [`StopMatcher::push`] lets through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopResult {
    /// Text that is safe to show now (never part of a stop string).
    pub emit: String,
    /// A stop string has been seen: generation should end, and `emit` is the last text.
    pub stopped: bool,
}

/// Watches streamed text for any of a set of stop strings.
///
/// Text that ends with a proper prefix of some stop string is held back until the
/// following text settles it; everything before that is emitted at once. When a stop
/// string appears, the text before it is emitted and the stop string and anything after
/// it are dropped; among stop strings found in the same push, the one starting earliest
/// wins (then the one listed first). Works on `str`s, so it never splits a UTF-8
/// character; the detokenizer must hand it whole characters. Empty stop strings are
/// ignored.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops`.
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// Feeds the next piece of text.
    pub fn push(&mut self, text: &str) -> StopResult {
        if self.matched.is_some() {
            return StopResult {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|pos| (pos, i)))
            .min();
        if let Some((pos, i)) = first {
            self.matched = Some(i);
            self.held.truncate(pos);
            return StopResult {
                emit: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep = self.partial_len();
        let emit: String = self.held.drain(..self.held.len() - keep).collect();
        StopResult {
            emit,
            stopped: false,
        }
    }

    /// Ends the stream: returns the held-back text (nothing after a stop).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Whether a stop string has been seen.
    pub fn is_stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// The stop string that ended the stream, if any.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// The length of the longest end of the held text that is a proper prefix of a stop
    /// string (0 if none). Such a prefix starts on a character boundary of the held text,
    /// because a stop string's first byte starts a character.
    fn partial_len(&self) -> usize {
        let mut best = 0;
        for s in &self.stops {
            let longest = (1..s.len())
                .rev()
                .filter(|&k| s.is_char_boundary(k) && k > best)
                .find(|&k| self.held.ends_with(&s[..k]));
            if let Some(k) = longest {
                best = k;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    /// Pushes each piece; returns everything emitted (including `finish`) and whether
    /// the stream stopped.
    fn run(stop_strings: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(&stops(stop_strings));
        let mut out = String::new();
        for p in pieces {
            let r = m.push(p);
            out.push_str(&r.emit);
            if r.stopped {
                assert!(m.is_stopped());
                assert_eq!(m.finish(), "");
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    fn chars(s: &str) -> Vec<String> {
        s.chars().map(String::from).collect()
    }

    #[test]
    fn no_stop_strings_pass_everything() {
        assert_eq!(
            run(&[], &["hello ", "world"]),
            ("hello world".into(), false)
        );
        assert_eq!(run(&[""], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn stop_in_one_piece() {
        assert_eq!(run(&["STOP"], &["abcSTOPdef"]), ("abc".into(), true));
        assert_eq!(run(&["STOP"], &["STOP"]), ("".into(), true));
    }

    #[test]
    fn stop_split_across_many_pushes() {
        let text = "The answer is 4.<|im_end|>ignored";
        let pieces = chars(text);
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(
            run(&["<|im_end|>"], &refs),
            ("The answer is 4.".into(), true)
        );
        assert_eq!(
            run(
                &["<|im_end|>"],
                &["The answer is 4.<|im", "_e", "nd", "|>x"]
            ),
            ("The answer is 4.".into(), true)
        );
    }

    #[test]
    fn held_text_is_released_when_it_stops_matching() {
        let mut m = StopMatcher::new(&stops(&["</s>"]));
        assert_eq!(
            m.push("a<"),
            StopResult {
                emit: "a".into(),
                stopped: false
            }
        );
        assert_eq!(
            m.push("/"),
            StopResult {
                emit: "".into(),
                stopped: false
            }
        );
        assert_eq!(
            m.push("x"),
            StopResult {
                emit: "</x".into(),
                stopped: false
            }
        );
        assert_eq!(
            m.push("<"),
            StopResult {
                emit: "".into(),
                stopped: false
            }
        );
        assert_eq!(m.finish(), "<");
    }

    #[test]
    fn overlapping_prefixes() {
        // "aab" must be found even though "aa" first looks like a failed "aab" prefix
        assert_eq!(
            run(&["aab"], &["a", "a", "a", "b", "c"]),
            ("a".into(), true)
        );
        assert_eq!(run(&["aab"], &["aaa", "ab"]), ("aa".into(), true));
        // both "ab" and "aab" present: the earlier start wins
        assert_eq!(run(&["ab", "aab"], &["xaab"]), ("x".into(), true));
        let mut m = StopMatcher::new(&stops(&["ab", "aab"]));
        assert_eq!(m.push("xa").emit, "x");
        assert_eq!(m.push("a").emit, "");
        assert_eq!(
            m.push("b"),
            StopResult {
                emit: "".into(),
                stopped: true
            }
        );
        assert_eq!(m.matched(), Some("aab"));
        // self-overlapping stop string
        assert_eq!(run(&["abab"], &["ababa", "bab"]), ("".into(), true));
        assert_eq!(run(&["abab"], &["aba", "ca", "bab"]), ("abac".into(), true));
    }

    #[test]
    fn multiple_stops() {
        let mut m = StopMatcher::new(&stops(&["\n\n", "User:", "###"]));
        assert_eq!(m.push("Hi there").emit, "Hi there");
        assert_eq!(m.push("\nUse").emit, "\n");
        assert_eq!(
            m.push("r: next"),
            StopResult {
                emit: "".into(),
                stopped: true
            }
        );
        assert_eq!(m.matched(), Some("User:"));
        assert_eq!(
            m.push("more"),
            StopResult {
                emit: "".into(),
                stopped: true
            }
        );
        // the earliest start wins regardless of list order
        assert_eq!(run(&["###", "END"], &["a END b ###"]), ("a ".into(), true));
    }

    #[test]
    fn unicode_is_never_split() {
        // multi-byte stop strings whose prefixes share bytes with other characters
        let pieces = chars("日本語のテキスト。終わり");
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(run(&["。終"], &refs), ("日本語のテキスト".into(), true));
        assert_eq!(run(&["🛑"], &["ok 👍", "🛑 no"]), ("ok 👍".into(), true));
        // "é" (2 bytes) vs "ê": same lead byte, different character: nothing held
        let mut m = StopMatcher::new(&stops(&["éa"]));
        assert_eq!(m.push("café").emit, "caf");
        assert_eq!(m.push("ê").emit, "éê");
        assert_eq!(m.push("é").emit, "");
        assert_eq!(
            m.push("a"),
            StopResult {
                emit: "".into(),
                stopped: true
            }
        );
    }

    #[test]
    fn finish_flushes_a_partial_match() {
        assert_eq!(
            run(&["<|eot_id|>"], &["bye<|eot"]),
            ("bye<|eot".into(), false)
        );
    }
}
