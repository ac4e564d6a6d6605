//! Writes the seed corpus of every fuzz target into `<dir>/<target>/`:
//! `cargo run -p ridge-fuzz --example seeds -- fuzz/corpus`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    for (target, seeds) in ridge_fuzz::seeds() {
        let d = root.join(target);
        std::fs::create_dir_all(&d)?;
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i:03}")), s)?;
        }
        println!("{}: {} seeds", d.display(), seeds.len());
    }
    Ok(())
}
