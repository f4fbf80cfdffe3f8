//! [`Tokenizer`]: a validated vocabulary plus the algorithm it needs, and the public API.

use crate::attr::{self, Attr};
use crate::bpe::Bpe;
use crate::error::{Result, TokError};
use crate::special::{self, Fragment, Specials};
use crate::spm::{self, SpmVocab};
use crate::vocab::{TokenType, Vocab, VocabKind};
use std::collections::HashMap;

/// A tokenizer that splits text into ids and back exactly as llama.cpp does for the same
/// GGUF vocabulary.
pub struct Tokenizer {
    pub(crate) kind: VocabKind,
    pub(crate) texts: Vec<String>,
    pub(crate) attrs: Vec<Attr>,
    scores: Vec<f32>,
    to_id: HashMap<String, u32>,
    /// Present for BPE vocabularies.
    bpe: Option<Bpe>,
    /// SPM byte-fallback tokens by byte value.
    byte_ids: Box<[Option<u32>; 256]>,
    special_cache: Vec<u32>,
    specials: Specials,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("pre", &self.pre())
            .field("n_vocab", &self.n_vocab())
            .field("bos", &self.bos())
            .field("eos", &self.eos())
            .field("add_bos", &self.add_bos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds a tokenizer, checking the vocabulary: array lengths must match, token texts
    /// must be unique, and every merge must name two tokens.
    pub fn new(vocab: Vocab) -> Result<Tokenizer> {
        let n = vocab.tokens.len();
        if n == 0 {
            return Err(TokError::EmptyVocab);
        }
        if u32::try_from(n).is_err() {
            return Err(TokError::VocabTooLarge { n });
        }
        for (what, got) in [
            ("scores", vocab.scores.len()),
            ("token types", vocab.token_types.len()),
        ] {
            if got != 0 && got != n {
                return Err(TokError::LengthMismatch {
                    what,
                    got,
                    n_vocab: n,
                });
            }
        }
        let mut warnings = Vec::new();

        let mut texts = vocab.tokens;
        let mut to_id = HashMap::with_capacity(n);
        for (i, text) in texts.iter_mut().enumerate() {
            if text.is_empty() {
                warnings.push(format!("token {i} is empty; named [EMPTY_{i}]"));
                *text = format!("[EMPTY_{i}]");
            }
            if let Some(first) = to_id.insert(text.clone(), i as u32) {
                return Err(TokError::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: i as u32,
                });
            }
        }
        let mut attrs: Vec<Attr> = if vocab.token_types.is_empty() {
            vec![attr::NORMAL; n]
        } else {
            vocab
                .token_types
                .iter()
                .map(|&t| attr::from_type(TokenType::from_i32(t)))
                .collect()
        };
        let scores = if vocab.scores.is_empty() {
            vec![0.0; n]
        } else {
            vocab.scores
        };

        let (bpe, mut add_bos, clean_spaces, mut add_space_prefix) = match vocab.kind {
            VocabKind::Bpe => {
                let (pre, warning) = crate::pre_type::resolve(&vocab.pre);
                warnings.extend(warning);
                let (add_bos, clean) = (pre.add_bos, pre.clean_spaces);
                (
                    Some(Bpe::new(&vocab.merges, &to_id, pre)?),
                    add_bos,
                    clean,
                    false,
                )
            }
            VocabKind::Spm => (None, true, false, true),
        };
        add_space_prefix = vocab.add_space_prefix.unwrap_or(add_space_prefix);
        add_bos = vocab.add_bos.unwrap_or(add_bos);
        let add_eos = vocab.add_eos.unwrap_or(false);

        let specials = special::resolve(
            vocab.kind,
            &vocab.special,
            &texts,
            &to_id,
            &mut attrs,
            &mut warnings,
        );
        if add_bos && specials.ids.bos.is_none() {
            warnings.push("BOS should be added but the vocabulary has no BOS token".into());
        }
        if add_eos && specials.ids.eos.is_none() {
            warnings.push("EOS should be added but the vocabulary has no EOS token".into());
        }
        let special_cache = special::cache(&texts, &attrs);

        let mut byte_ids = Box::new([None; 256]);
        if vocab.kind == VocabKind::Spm {
            for (b, slot) in byte_ids.iter_mut().enumerate() {
                let hex = format!("<0x{b:02X}>");
                let raw = char::from_u32(b as u32)
                    .filter(|_| (1..0x80).contains(&b))
                    .map(String::from);
                *slot = to_id
                    .get(&hex)
                    .or_else(|| raw.and_then(|r| to_id.get(&r)))
                    .copied();
            }
        }

        Ok(Tokenizer {
            kind: vocab.kind,
            texts,
            attrs,
            scores,
            to_id,
            bpe,
            byte_ids,
            special_cache,
            specials,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            warnings,
        })
    }

    /// Reads the vocabulary from a GGUF file's metadata and builds the tokenizer.
    pub fn from_gguf(file: &gguf::GgufFile) -> Result<Tokenizer> {
        Tokenizer::new(Vocab::from_gguf(file)?)
    }

    /// Opens a GGUF file and builds its tokenizer.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Tokenizer> {
        let file = gguf::GgufFile::open(path).map_err(|e| TokError::Gguf(e.to_string()))?;
        Tokenizer::from_gguf(&file)
    }

    /// Text to ids. `add_special` adds BOS/EOS where the vocabulary asks for them;
    /// `parse_special` turns control-token text written in `text` (e.g. `<|im_start|>`) into
    /// those tokens (user-defined tokens are always recognised, as in llama.cpp).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let frags = special::partition(
            text,
            &self.special_cache,
            &self.texts,
            &self.attrs,
            parse_special,
        );
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos());
        }
        match &self.bpe {
            Some(bpe) => {
                for frag in frags {
                    match frag {
                        Fragment::Text(t) => bpe.encode(t, &self.to_id, &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            None => {
                let v = SpmVocab {
                    to_id: &self.to_id,
                    scores: &self.scores,
                    byte_ids: &self.byte_ids,
                    unk: self.specials.ids.unk,
                };
                let mut prev_special = true;
                let mut buf = String::new();
                for frag in frags {
                    match frag {
                        Fragment::Text(t) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push('\u{2581}');
                            }
                            buf.extend(t.chars().map(|c| if c == ' ' { '\u{2581}' } else { c }));
                            spm::encode(&v, &buf, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos());
        }
        out
    }

    /// Ids to text: llama.cpp's detokenize with special tokens rendered and nothing removed.
    /// Bytes that are not valid UTF-8 become U+FFFD. Fails on an out-of-range id.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let bytes = self.detokenize(ids, false, true)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes of one token (control tokens give their text).
    pub fn token_to_piece(&self, id: u32) -> Result<Vec<u8>> {
        self.check_id(id)?;
        let mut out = Vec::new();
        self.piece(id, true, &mut out);
        Ok(out)
    }

    /// The token's text as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Result<&str> {
        self.check_id(id)?;
        Ok(&self.texts[id as usize])
    }

    /// The id of a token given its stored text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.to_id.get(text).copied()
    }

    /// Whether `id` is a control or unknown token (rendered only on request).
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs
            .get(id as usize)
            .is_some_and(|a| a & (attr::CONTROL | attr::UNKNOWN) != 0)
    }

    pub(crate) fn check_id(&self, id: u32) -> Result<()> {
        if (id as usize) < self.texts.len() {
            Ok(())
        } else {
            Err(TokError::InvalidId {
                id,
                n_vocab: self.texts.len(),
            })
        }
    }

    pub fn n_vocab(&self) -> usize {
        self.texts.len()
    }
    pub fn kind(&self) -> VocabKind {
        self.kind
    }
    /// The pre-tokenizer in use ("default", "llama-bpe", "qwen2", ...); `None` for SPM.
    pub fn pre(&self) -> Option<&'static str> {
        self.bpe.as_ref().map(|b| b.pre.name)
    }
    pub fn bos(&self) -> Option<u32> {
        self.specials.ids.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.specials.ids.eos
    }
    pub fn eot(&self) -> Option<u32> {
        self.specials.ids.eot
    }
    pub fn unk(&self) -> Option<u32> {
        self.specials.ids.unk
    }
    pub fn pad(&self) -> Option<u32> {
        self.specials.ids.pad
    }
    /// All resolved special ids (BOS, EOS, EOT, FIM, ...).
    pub fn special_ids(&self) -> &crate::vocab::SpecialIds {
        &self.specials.ids
    }
    /// Whether `encode(.., add_special = true, ..)` starts with BOS / ends with EOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    /// End-of-generation ids, sorted (EOS, EOT, `<|im_end|>`, `<end_of_turn>`, ...).
    pub fn eog_ids(&self) -> &[u32] {
        &self.specials.eog
    }
    pub fn is_eog(&self, id: u32) -> bool {
        self.specials.eog.binary_search(&id).is_ok()
    }
    /// Notes from construction: unsupported pre-tokenizer, ignored metadata, ...
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}
