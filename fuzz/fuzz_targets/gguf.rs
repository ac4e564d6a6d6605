//! cargo-fuzz target `gguf`: see `ridge_fuzz::gguf` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ridge_fuzz::gguf(data));
