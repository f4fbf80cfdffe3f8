//! molla's fuzz targets, as plain functions so that `fuzz_targets/*.rs` (libFuzzer, through
//! cargo-fuzz) and `tests/corpus.rs` (a normal test replaying the committed corpus) run the same
//! code. Each `run` must never panic, hang or allocate without bound on any input: a panic is
//! a crash libFuzzer reports, and so is a failed invariant check (`assert!`) in here.
//!
//! - [`gguf`]: bytes as a GGUF file; every metadata value and tensor walked; tokenizer, model
//!   binding and chat template built from it when it parses.
//! - [`tokenizer`]: text to encode and ids to decode, on small real vocabularies.
//! - [`template`]: a chat template's source plus messages, rendered under the sandbox limits.
//! - [`http`]: an HTTP request (route, content type, body) through the server's axum Router
//!   over a tiny synthetic model.

pub mod gguf;
pub mod http;
pub mod seeds;
pub mod template;
pub mod tokenizer;

/// Splits `data` at the first occurrence of `sep`: (before, after); all of it before when absent.
pub fn split_at_byte(data: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == sep) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}
