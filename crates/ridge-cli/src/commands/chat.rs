//! `ridge chat [--model M]`: an interactive conversation. Each turn re-renders the whole
//! conversation through the model's chat template. Models without a template fall back to
//! plain completion of what is typed (and say so).

use anyhow::Result;
use ridge_tokenizer::{ChatMessage, ChatTemplate};
use std::io::{BufRead, Write};

use super::run::{stats_line, stream, GenArgs};

/// Arguments of `chat`.
#[derive(clap::Args)]
pub struct Args {
    /// Model path or known name (default: smollm2-135m).
    #[arg(long, short)]
    model: Option<String>,
    /// A system message to start the conversation with.
    #[arg(long)]
    system: Option<String>,
    /// Print the stats line after each reply.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    gen: GenArgs,
}

/// Runs `chat`.
pub fn main(a: Args) -> Result<()> {
    let l = crate::load::load(a.model.as_deref())?;
    let template = match ChatTemplate::from_gguf(l.model.gguf(), &l.tokenizer) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("note: {e}; falling back to plain completion of each line");
            None
        }
    };
    let mut messages: Vec<ChatMessage> = a
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.clone()))
        .collect();
    eprintln!("ridge chat — type a message; /reset clears the conversation, /exit or Ctrl-D quits");
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let input = line.trim_end_matches(['\n', '\r']);
        match input.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages.retain(|m| m.role == "system");
                continue;
            }
            _ => {}
        }
        let prompt = match &template {
            Some(t) => {
                messages.push(ChatMessage::new("user", input));
                let text = t.render(&messages, true)?;
                l.tokenizer.encode_chat_prompt(&text)?
            }
            None => l.tokenizer.encode(input, true, true)?,
        };
        let g = match stream(&l, &prompt, &a.gen) {
            Ok(g) => g,
            Err(e) => {
                // Keep the session alive: a too-long conversation is reported, then reset.
                eprintln!("error: {e:#}; conversation reset");
                messages.retain(|m| m.role == "system");
                continue;
            }
        };
        println!();
        if a.stats {
            eprintln!("{}", stats_line(&g));
        }
        if template.is_some() {
            messages.push(ChatMessage::new(
                "assistant",
                l.tokenizer.decode(&g.tokens, true),
            ));
        }
    }
    Ok(())
}
