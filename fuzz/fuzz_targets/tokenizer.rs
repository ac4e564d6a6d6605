//! cargo-fuzz target `tokenizer`: see `ridge_fuzz::tokenizer` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ridge_fuzz::tokenizer(data));
