//! cargo-fuzz target `request`: see `ridge_fuzz::request` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ridge_fuzz::request(data));
