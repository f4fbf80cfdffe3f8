//! GGUF files: a strict, memory-mapped reader and a streaming writer.
//!
//! [`GgufFile::open`] maps a file and validates all of it up front (every count, length, string,
//! shape, type id and offset, bounded by the bytes actually present), so that later accesses are
//! infallible and tensor data is a zero-copy slice. [`GgufWriter`] writes GGUF v3 one tensor at a
//! time. Errors are one line, start with `gguf:` and name the key or tensor concerned.

mod cursor;
mod decode;
mod display;
mod error;
mod reader;
mod rewrite;
mod tensor;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use reader::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GgufFile};
pub use rewrite::rewrite;
pub use tensor::{MAX_DIMS, TensorInfo, TensorSpec};
pub use types::GgmlType;
pub use value::{Array, Value};
pub use writer::{GgufWriter, WRITE_VERSION};

/// Deepest nesting of metadata arrays the reader accepts and the writer writes (an array of
/// scalars is depth 1).
pub const MAX_ARRAY_DEPTH: usize = cursor::MAX_DEPTH;
