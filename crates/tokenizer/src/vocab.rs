//! The plain data a tokenizer is built from: what GGUF's `tokenizer.ggml.*` keys hold.

/// Which algorithm the vocabulary is for (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VocabKind {
    /// `"gpt2"`: byte-level BPE with merges and a pre-tokenizer regex.
    #[default]
    Bpe,
    /// `"llama"`: SentencePiece-style merging by score with `<0xNN>` byte fallback.
    Spm,
}

impl VocabKind {
    /// The kind a `tokenizer.ggml.model` value names, if supported.
    pub fn from_model_name(name: &str) -> Option<Self> {
        match name {
            "gpt2" => Some(VocabKind::Bpe),
            "llama" => Some(VocabKind::Spm),
            _ => None,
        }
    }
}

/// Token types as GGUF stores them (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum TokenType {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    /// The type a stored integer means; anything unknown is `Undefined` (as in llama.cpp).
    pub fn from_i32(v: i32) -> Self {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Special token ids from `tokenizer.ggml.*_token_id`. `None` means the key is absent; the
/// tokenizer then applies llama.cpp's defaults and name-based detection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Everything a [`crate::Tokenizer`] is built from. Build one by hand in tests, or read it
/// with [`Vocab::from_gguf`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vocab {
    pub kind: VocabKind,
    /// `tokenizer.ggml.pre` (BPE pre-tokenizer name); empty when absent.
    pub pre: String,
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`; empty means all zero.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.token_type` as stored; empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges`, each `"left right"`, highest priority first.
    pub merges: Vec<String>,
    pub special: SpecialIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
}
