//! Tokenizers built from GGUF metadata that match llama.cpp id for id.
//!
//! - Byte-level BPE (`tokenizer.ggml.model = "gpt2"`: SmolLM, Qwen2, Llama 3, GPT-2, ...),
//!   with the pre-tokenizer named by `tokenizer.ggml.pre` (`pre_type.rs`, `pretokenize.rs`).
//! - SentencePiece-style merging by score (`"llama"`: Gemma 3, Llama 2, ...), with
//!   `<0xNN>` byte fallback (`spm.rs`).
//! - Special tokens written in text are recognised, BOS/EOS added as the metadata says, and
//!   the end-of-generation set is chosen as llama.cpp chooses it (`special.rs`).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = gguf::GgufFile::open("model.gguf")?;
//! let tok = tokenizer::Tokenizer::from_gguf(&file)?;
//! let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", true, true);
//! assert_eq!(tok.decode(&ids)?, "<|im_start|>user\nhi<|im_end|>");
//! let mut stream = tok.stream_decoder();
//! let text: String = ids.iter().map(|&id| stream.push(id)).collect::<Result<_, _>>()?;
//! # Ok(()) }
//! ```

mod attr;
mod bpe;
mod decode;
mod error;
mod from_gguf;
mod pre_type;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod tokenizer;
pub mod toy;
mod unicode;
mod vocab;

pub use error::{Result, TokError};
pub use stream::StreamDecoder;
pub use tokenizer::Tokenizer;
pub use vocab::{SpecialIds, TokenType, Vocab, VocabKind};

impl Tokenizer {
    /// A [`StreamDecoder`] over this tokenizer.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }
}
