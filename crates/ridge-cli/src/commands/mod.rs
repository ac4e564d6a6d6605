//! One module per subcommand.

pub mod chat;
pub mod perplexity;
pub mod pull;
pub mod run;
pub mod tokenize;
