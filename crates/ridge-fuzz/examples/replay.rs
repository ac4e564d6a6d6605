//! Replays inputs through a fuzz entry point on stable Rust and prints each one's time:
//! `cargo run --release -p ridge-fuzz --example replay -- <target> <file>...`
//! (targets: gguf, tokenizer, chat_template, request). A crash panics with the file's name.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(target) = args.next() else {
        eprintln!("usage: replay <target> <file>...");
        std::process::exit(2);
    };
    for path in args {
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            }
        };
        let t = Instant::now();
        ridge_fuzz::run(&target, &data);
        println!("{:.6} {path}", t.elapsed().as_secs_f64());
    }
}
