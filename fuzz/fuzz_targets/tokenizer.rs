//! Fuzz target `tokenizer`: see molla_fuzz::tokenizer (fuzz/src/tokenizer.rs) for what it feeds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molla_fuzz::tokenizer::run(data));
