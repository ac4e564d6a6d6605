//! cargo-fuzz target `request`: see `ridge_fuzz::request` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(
    // libfuzzer-sys aborts in its panic hook, before any unwinding. ridge catches panics of the
    // template engine at the `ChatTemplate::render` boundary and turns them into errors, so
    // restore the default hook: a panic that escapes ridge's API still aborts (libfuzzer-sys
    // catches the unwind at the top and aborts), one that ridge contains does not.
    init: drop(std::panic::take_hook()),
    |data: &[u8]| ridge_fuzz::request(data)
);
