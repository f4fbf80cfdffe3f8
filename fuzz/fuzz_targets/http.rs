//! Fuzz target `http`: see molla_fuzz::http (fuzz/src/http.rs) for what it feeds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molla_fuzz::http::run(data));
