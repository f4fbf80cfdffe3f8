//! The crate's one error type.

/// What can go wrong building a tokenizer or turning ids back into text.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum TokError {
    #[error("tokenizer metadata key {key} is missing")]
    MissingKey { key: &'static str },
    #[error("tokenizer metadata key {key} has the wrong type (expected {expected})")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
    #[error("tokenizer model {0:?} is not supported (supported: gpt2, llama)")]
    UnsupportedModel(String),
    #[error("vocabulary is empty")]
    EmptyVocab,
    #[error("vocabulary has {n} tokens, more than a u32 id can address")]
    VocabTooLarge { n: usize },
    #[error("{what} has {got} entries but the vocabulary has {n_vocab} tokens")]
    LengthMismatch {
        what: &'static str,
        got: usize,
        n_vocab: usize,
    },
    #[error("token {text:?} appears twice in the vocabulary (ids {first} and {second})")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("merge {index} ({merge:?}) is not two tokens separated by a space")]
    BadMerge { index: usize, merge: String },
    #[error("merge {index} ({merge:?}) references {part:?}, which is not in the vocabulary")]
    MergeUnknownToken {
        index: usize,
        merge: String,
        part: String,
    },
    #[error(
        "the vocabulary has {n_vocab} tokens (tokenizer.ggml.tokens) but the model's token_embd.weight has {rows} rows"
    )]
    EmbeddingMismatch { n_vocab: usize, rows: u64 },
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    InvalidId { id: u32, n_vocab: usize },
    /// Opening or parsing the GGUF file failed (the gguf crate's message).
    #[error("{0}")]
    Gguf(String),
}

pub type Result<T, E = TokError> = std::result::Result<T, E>;
