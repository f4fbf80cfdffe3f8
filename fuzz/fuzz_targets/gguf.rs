//! Fuzz target `gguf`: see molla_fuzz::gguf (fuzz/src/gguf.rs) for what it feeds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molla_fuzz::gguf::run(data));
