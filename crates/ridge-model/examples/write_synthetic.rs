//! Writes the synthetic models that are checked against llama.cpp into a folder, as
//! `<name>.gguf`, printing the protocol and then `name path` lines (see `tools/reference/make_synthetic_llama_cpp_fixtures.sh`).
//!
//!     cargo run --release -p ridge-model --example write_synthetic -- DIR [hybrid|families|gemma4]
//!
//! With `hybrid`, the hybrid models (`llama_cpp::hybrid_specs`) instead of the others; with
//! `families`, the families on llama's layer (`llama_cpp::family_specs`); with `gemma4`,
//! `llama_cpp::gemma4_specs`.

#[path = "../tests/common/llama_cpp.rs"]
mod llama_cpp;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .ok_or_else(|| std::io::Error::other("usage: write_synthetic DIR"))?;
    // First line: the perplexity protocol the fixtures use (llama-perplexity's -c and --chunks).
    println!("{} {}", llama_cpp::CTX, llama_cpp::CHUNKS);
    let specs = match std::env::args().nth(2).as_deref() {
        Some("hybrid") => llama_cpp::hybrid_specs(),
        Some("families") => llama_cpp::family_specs(),
        Some("gemma4") => llama_cpp::gemma4_specs(),
        _ => llama_cpp::specs(),
    };
    for (name, spec) in specs {
        let path = std::path::Path::new(&dir).join(format!("{name}.gguf"));
        std::fs::write(&path, ridge_model::synthetic::synthetic_model(&spec))?;
        println!("{name} {}", path.display());
    }
    Ok(())
}
