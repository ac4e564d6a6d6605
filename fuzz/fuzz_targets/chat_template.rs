//! cargo-fuzz target `chat_template`: see `ridge_fuzz::chat_template` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ridge_fuzz::chat_template(data));
