//! `ridge`: one binary for running, chatting with, and measuring GGUF models.
//!
//! This crate only parses arguments and wires the library crates together; every command lives
//! in its own file under `commands/`. Errors end the process with one line on stderr and exit
//! code 1, whatever their source (bad flag, bad file, bad prompt).

mod commands;
mod hub;
mod inspect;
mod load;
mod models;
mod progress;
mod spec_args;

use clap::{Parser, Subcommand};

/// ridge: LLM inference measured against the hardware's limit.
#[derive(Parser)]
#[command(name = "ridge", version, about)]
struct Cli {
    /// Worker threads for the kernels (default: physical cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Activation precision against quantized weights: f32 (exact), mixed, int8 (fastest).
    #[arg(long, global = true, default_value = "mixed")]
    activations: ridge_model::ActPolicy,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fetch a known model into the local cache.
    Pull(commands::pull::Args),
    /// The models already downloaded: size, architecture, quantisation, parameters, source.
    List(commands::list::Args),
    /// What a model file holds: architecture, sizes, tokenizer, chat template, tensor types.
    Show(commands::show::Args),
    /// Delete downloaded models from the caches.
    Rm(commands::rm::Args),
    /// Generate text from a prompt, streaming it to stdout.
    Run(commands::run::Args),
    /// Interactive multi-turn chat through the model's chat template.
    Chat(commands::chat::Args),
    /// Print the token ids of a text as a JSON array.
    Tokenize(commands::tokenize::Args),
    /// Perplexity of a text file, with llama-perplexity's protocol.
    Perplexity(commands::perplexity::Args),
    /// Measure this machine's memory read bandwidth and arithmetic rate.
    Probe(commands::probe::Args),
    /// OpenAI-compatible HTTP server with continuous batching (one model or several).
    Serve(Box<commands::serve::Args>),
    /// What a running server has loaded: memory, requests in flight, idle time.
    Ps(commands::ps::Args),
    /// Offline benchmark: prefill and batched decode rates, TTFT, TPOT, roofline efficiency.
    Bench(commands::bench::Args),
    /// Predict decode and prefill floors, throughput and cost of a model on a machine.
    Roofline(commands::roofline::Args),
}

/// Gives SIGPIPE back its default action, so that `ridge probe | head -1` ends quietly when the
/// reader goes away, as any Unix tool does (Rust ignores the signal, and `println!` then
/// panics on the write error). The server keeps ignoring it: a client that hangs up is an
/// error on that connection only.
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: `signal` with SIG_DFL for SIGPIPE only changes this process's disposition of that
    // signal; it is called before any thread of ours exists and installs no handler code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                std::process::exit(0);
            }
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("{first} (see `ridge --help`)");
            std::process::exit(1);
        }
    };
    if !matches!(cli.command, Command::Serve(_)) {
        default_sigpipe();
    }
    if let Some(t) = cli.threads {
        if t == 0 {
            eprintln!("error: --threads must be at least 1");
            std::process::exit(1);
        }
        ridge_kernels::pool::init(t);
    }
    let _ = load::ACT_POLICY.set(cli.activations);
    let result = match cli.command {
        Command::Pull(a) => commands::pull::main(a),
        Command::List(a) => commands::list::main(a),
        Command::Show(a) => commands::show::main(a),
        Command::Rm(a) => commands::rm::main(a),
        Command::Run(a) => commands::run::main(a),
        Command::Chat(a) => commands::chat::main(a),
        Command::Tokenize(a) => commands::tokenize::main(a),
        Command::Perplexity(a) => commands::perplexity::main(a),
        Command::Probe(a) => commands::probe::main(a),
        Command::Bench(a) => commands::bench::main(a),
        Command::Serve(a) => commands::serve::main(*a),
        Command::Ps(a) => commands::ps::main(a),
        Command::Roofline(a) => commands::roofline::main(a),
    };
    if let Err(e) = result {
        let msg = format!("{e:#}").replace('\n', " ");
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}
