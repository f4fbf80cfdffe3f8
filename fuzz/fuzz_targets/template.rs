//! Fuzz target `template`: see molla_fuzz::template (fuzz/src/template.rs) for what it feeds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molla_fuzz::template::run(data));
