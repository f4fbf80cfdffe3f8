//! GGUF files: a strict, memory-mapped reader and a streaming writer.

mod types;

pub use types::GgmlType;
