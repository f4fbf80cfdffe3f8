//! The one error type of the crate. Every message is a single line that starts with `gguf:` and
//! names the header field, metadata key or tensor it is about.

use std::io;

/// Everything that can go wrong reading or writing a GGUF file.
///
/// `at` fields name the place in the file: `header`, `metadata key #12 ("general.name")`,
/// `tensor 'blk.0.attn_q.weight'` (or `tensor #3` before its name is known), or `writer: ...` for
/// misuse of [`crate::GgufWriter`]. Names taken from the file are escaped and shortened so that a
/// message always stays on one line.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Opening, inspecting or memory-mapping a file failed.
    #[error("gguf: {path}: {op} failed: {source}")]
    Io {
        /// The path as given to [`crate::GgufFile::open`].
        path: String,
        /// What was being done: `open`, `stat` or `mmap`.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The output of a [`crate::GgufWriter`] failed.
    #[error("gguf: writing {what}: {source}")]
    Write {
        /// What was being written (`header`, `tensor 'x' data`, ...).
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the bytes `GGUF`.
    #[error("gguf: header: bad magic {found} (expected \"GGUF\"): not a GGUF file")]
    BadMagic {
        /// The first bytes of the file, escaped.
        found: String,
    },
    /// A little-endian version this reader does not handle (only 2 and 3 are accepted).
    #[error(
        "gguf: header: version {version} is not supported (this reader accepts versions 2 and 3)"
    )]
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },
    /// The version field reads as a byte-swapped small number: a big-endian file.
    #[error(
        "gguf: header: version field {raw:#010x} is version {swapped} byte-swapped: \
         big-endian GGUF files are not supported"
    )]
    BigEndian {
        /// The version field read as little endian.
        raw: u32,
        /// The same field read as big endian.
        swapped: u32,
    },
    /// A fixed-size field runs past the end of the file.
    #[error(
        "gguf: {at}: {field} needs {need} bytes at offset {offset}, but only {remaining} remain in the file"
    )]
    Truncated {
        /// Where in the file (see the type's docs).
        at: String,
        /// The field being read.
        field: String,
        /// Absolute file offset of the field.
        offset: u64,
        /// Bytes the field needs.
        need: u64,
        /// Bytes left in the file from `offset`.
        remaining: u64,
    },
    /// A count or length read from the file is larger than what is left of the file could hold.
    #[error("gguf: {at}: {field} {value} exceeds remaining {remaining} bytes of file")]
    TooLarge {
        /// Where in the file (see the type's docs).
        at: String,
        /// The count or length, with the bytes each element needs at least.
        field: String,
        /// The value read from the file.
        value: u64,
        /// Bytes left in the file after the count or length.
        remaining: u64,
    },
    /// A metadata value or array element type id outside 0..=12.
    #[error("gguf: {at}: unknown {field} {id}")]
    UnknownValueType {
        /// Where in the file (see the type's docs).
        at: String,
        /// `value type` or `array element type`.
        field: &'static str,
        /// The type id read from the file.
        id: u32,
    },
    /// A tensor's ggml type id is not a known (or is a retired) ggml type.
    #[error("gguf: {at}: unknown ggml type id {id}")]
    UnknownGgmlType {
        /// Where in the file (see the type's docs).
        at: String,
        /// The type id read from the file.
        id: u32,
    },
    /// A string (key, value, array element or tensor name) is not valid UTF-8.
    #[error("gguf: {at}: {field} is not valid UTF-8 (first bad byte at index {valid_up_to})")]
    InvalidUtf8 {
        /// Where in the file (see the type's docs).
        at: String,
        /// Which string.
        field: String,
        /// Length of the valid prefix.
        valid_up_to: usize,
    },
    /// A metadata key occurs twice.
    #[error("gguf: {at}: duplicate metadata key (first seen as key #{first})")]
    DuplicateKey {
        /// The second occurrence.
        at: String,
        /// Index of the first occurrence.
        first: usize,
    },
    /// A tensor name occurs twice.
    #[error("gguf: {at}: duplicate tensor name (first seen as tensor #{first})")]
    DuplicateTensor {
        /// The second occurrence.
        at: String,
        /// Index of the first occurrence.
        first: usize,
    },
    /// Any other field holding a value the format does not allow (bad alignment, shape, offset,
    /// overlap, writer misuse, ...).
    #[error("gguf: {at}: {msg}")]
    Invalid {
        /// Where in the file (see the type's docs).
        at: String,
        /// What is wrong.
        msg: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, GgufError>;

/// `s` escaped to one line and shortened to at most `max` characters (with `…` when cut).
pub(crate) fn escape_short(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        out.extend(c.escape_debug());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_short_is_one_line_and_bounded() {
        assert_eq!(escape_short("a\nb", 10), "a\\nb");
        assert_eq!(escape_short("abcdef", 3), "abc…");
        assert_eq!(escape_short("", 3), "");
    }

    #[test]
    fn example_message_format() {
        let e = GgufError::TooLarge {
            at: "metadata key #12 (\"general.name\")".into(),
            field: "string length".into(),
            value: 1 << 63,
            remaining: 1234,
        };
        assert_eq!(
            e.to_string(),
            "gguf: metadata key #12 (\"general.name\"): string length 9223372036854775808 exceeds \
             remaining 1234 bytes of file"
        );
    }
}
