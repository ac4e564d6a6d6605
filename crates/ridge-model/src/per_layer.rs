//! Per-layer metadata lists and the layers they cover. A file's `block_count` may count
//! multi-token-prediction layers after the trunk (`nextn_predict_layers`), which ridge does not
//! run; llama.cpp sizes its per-layer lists by every block, some converters by the trunk, so
//! both lengths are read. A module of its own because both `config.rs` and `hybrid.rs` read
//! such lists and `config.rs` imports `hybrid.rs`.

/// A per-layer list's entries for the trunk's `n_layers` layers: the list may have one entry
/// per trunk layer or one per block (`nextn` more, for the prediction layers).
pub(crate) fn trunk<T: Clone>(
    v: &[T],
    key: &str,
    (n_layers, nextn): (usize, usize),
) -> Result<Vec<T>, String> {
    if v.len() != n_layers && v.len() != n_layers + nextn {
        return Err(format!(
            "`{key}` has {} entries for {n_layers} layers",
            v.len()
        ));
    }
    Ok(v[..n_layers].to_vec())
}
