//! One module per subcommand.

pub mod bench;
pub mod bench_spec;
pub mod chat;
pub mod list;
pub mod perplexity;
pub mod probe;
pub mod ps;
pub mod pull;
pub mod rm;
pub mod roofline;
pub mod run;
pub mod serve;
pub mod serve_models;
pub mod show;
pub mod tokenize;
