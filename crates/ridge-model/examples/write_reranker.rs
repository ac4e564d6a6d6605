//! Writes the synthetic reranker the rank fixtures are made on
//! ([`ridge_model::synthetic::synthetic_reranker`]) to a file and prints its path (see
//! `tools/reference/make_rerank_fixtures.sh`).
//!
//!     cargo run --release -p ridge-model --example write_reranker -- FILE

fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| std::io::Error::other("usage: write_reranker FILE"))?;
    let spec = ridge_model::synthetic::synthetic_reranker();
    std::fs::write(&path, ridge_model::synthetic::synthetic_model(&spec))?;
    println!("{path}");
    Ok(())
}
