//! Gemma 4's metadata (`gemma4.rs` runs the model): the layer kinds and each kind's head shape,
//! the shared K/V map, per-layer feed-forward widths, the per-layer embedding width and the
//! soft-cap. A module of its own, below `config.rs`, which applies what [`read`] returns (as it
//! does `hybrid.rs`'s recurrent configuration), so that imports run one way.

use ridge_gguf::{ArrayValue, GgufFile, MetadataValue};

use crate::per_layer::trunk;

/// What `config.rs` has read before Gemma 4's own keys.
pub(crate) struct Base {
    /// Trunk layers and the multi-token-prediction layers after them.
    pub n_layers: usize,
    pub nextn: usize,
    pub n_heads: usize,
    /// The global layers' head width (`attention.key_length`) and rotated width.
    pub head_dim: usize,
    pub rope_dim: usize,
}

/// Gemma 4's keys, validated.
pub(crate) struct Gemma4Keys {
    pub sliding_window: usize,
    /// One flag per layer: sliding (else global).
    pub sliding_layers: Vec<bool>,
    pub rope_base_swa: f32,
    /// The global layers' K/V heads.
    pub n_kv_heads: usize,
    /// The sliding layers' head width, K/V heads and rotated width.
    pub swa: (usize, usize, usize),
    /// Per layer, the earlier layer whose K/V it reads (empty when none shares).
    pub kv_source: Vec<Option<usize>>,
    /// Per-layer feed-forward widths (empty when the file gives one).
    pub ffn_dims: Vec<usize>,
    pub ple_dim: usize,
    pub softcap: Option<f32>,
}

/// Reads and checks Gemma 4's keys; errors name the key.
pub(crate) fn read(f: &GgufFile, arch_name: &str, base: Base) -> Result<Gemma4Keys, String> {
    let k = |s: &str| format!("{arch_name}.{s}");
    let (n, nextn) = (base.n_layers, base.nextn);
    // The reader's messages name the file, which the caller's error names too.
    let err = |e: ridge_gguf::GgufError| {
        let msg = e.to_string();
        let prefix = format!("{}: ", f.path().display());
        msg.strip_prefix(&prefix)
            .map_or(msg.clone(), str::to_string)
    };
    let opt_usize = |key: &str, range: std::ops::RangeInclusive<usize>| match f.get(&k(key)) {
        None => Ok(None),
        Some(_) => f.get_usize_in(&k(key), range).map(Some).map_err(err),
    };
    let positive = |key: &str| -> Result<Option<f32>, String> {
        match f.get(&k(key)) {
            None => Ok(None),
            Some(_) => {
                let v = f.get_f64(&k(key)).map_err(err)? as f32;
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("`{}` is {v}; it must be positive", k(key)));
                }
                Ok(Some(v))
            }
        }
    };
    let sliding_window = opt_usize("attention.sliding_window", 1..=1 << 24)?
        .ok_or_else(|| format!("`{}` is missing", k("attention.sliding_window")))?;
    let pattern = k("attention.sliding_window_pattern");
    let sliding_layers = match f.get(&pattern) {
        Some(MetadataValue::Array(ArrayValue::Bool(flags))) => trunk(flags, &pattern, (n, nextn))?,
        Some(_) => return Err(format!("`{pattern}` must be an array of booleans")),
        None => {
            return Err(format!(
                "`{pattern}` is missing (gemma4 lists its sliding layers)"
            ))
        }
    };
    // Heads: values as wide as keys, for each kind (llama.cpp requires it).
    let same = |a: &str, b: &str, dflt: usize| -> Result<usize, String> {
        let ka = opt_usize(a, 1..=4096)?.unwrap_or(dflt);
        let kb = opt_usize(b, 1..=4096)?.unwrap_or(ka);
        if ka != kb {
            return Err(format!(
                "`{}` {kb} != `{}` {ka}: gemma4 needs values as wide as keys",
                k(b),
                k(a)
            ));
        }
        Ok(ka)
    };
    same(
        "attention.key_length",
        "attention.value_length",
        base.head_dim,
    )?;
    let hd_swa = same(
        "attention.key_length_swa",
        "attention.value_length_swa",
        base.head_dim,
    )?;
    let rope_swa = opt_usize("rope.dimension_count_swa", 2..=hd_swa)?.unwrap_or(base.rope_dim);
    if hd_swa % 2 != 0 || rope_swa % 2 != 0 || rope_swa > hd_swa {
        return Err(format!(
            "sliding head width {hd_swa} / rotated width {rope_swa} (`{}`) must be even, rotated ≤ head",
            k("rope.dimension_count_swa")
        ));
    }
    // K/V heads: one count, or one per layer (the same within each kind).
    let kv_key = k("attention.head_count_kv");
    let per_layer: Vec<usize> = match f.get(&kv_key) {
        Some(MetadataValue::Array(a)) => {
            let v = a
                .to_i64_vec()
                .ok_or_else(|| format!("`{kv_key}` must be an array of integers"))?;
            trunk(&v, &kv_key, (n, nextn))?
                .into_iter()
                .map(|h| usize::try_from(h).unwrap_or(0))
                .collect()
        }
        Some(_) => vec![f.get_usize_in(&kv_key, 1..=base.n_heads).map_err(err)?; n],
        None => vec![base.n_heads; n],
    };
    let kind_heads = |sliding: bool| -> Result<Option<usize>, String> {
        let mut it = (0..n)
            .filter(|&l| sliding_layers[l] == sliding)
            .map(|l| per_layer[l]);
        let Some(first) = it.next() else {
            return Ok(None);
        };
        if it.any(|h| h != first) || first == 0 || !base.n_heads.is_multiple_of(first) {
            return Err(format!(
                "`{kv_key}` must give every {} layer the same count, dividing the {} heads",
                if sliding { "sliding" } else { "global" },
                base.n_heads
            ));
        }
        Ok(Some(first))
    };
    let (kv_global, kv_swa) = (kind_heads(false)?, kind_heads(true)?);
    let n_kv_heads = kv_global.or(kv_swa).unwrap_or(base.n_heads);
    // Shared K/V: the last `shared` layers read the layer llama.cpp maps them to.
    let shared_key = k("attention.shared_kv_layers");
    let shared = opt_usize("attention.shared_kv_layers", 0..=n)?.unwrap_or(0);
    let mut kv_source = Vec::new();
    if shared > 0 {
        let first = n - shared;
        if first < 2 {
            return Err(format!(
                "`{shared_key}` = {shared} leaves {first} of {n} layers with K/V of their own; gemma4 needs 2"
            ));
        }
        kv_source = vec![None; n];
        for (l, s) in kv_source.iter_mut().enumerate().skip(first) {
            let from = if sliding_layers[l] {
                first - 2
            } else {
                first - 1
            };
            if sliding_layers[from] != sliding_layers[l] {
                return Err(format!(
                    "`{shared_key}`: layer {l} would read layer {from}'s K/V, a layer of the other kind (sliding vs global)"
                ));
            }
            *s = Some(from);
        }
    }
    // Feed-forward widths: one, or one per layer.
    let ffn_key = k("feed_forward_length");
    let mut ffn_dims = Vec::new();
    if let Some(MetadataValue::Array(a)) = f.get(&ffn_key) {
        let v = a
            .to_i64_vec()
            .ok_or_else(|| format!("`{ffn_key}` must be an array of integers"))?;
        ffn_dims = trunk(&v, &ffn_key, (n, nextn))?
            .into_iter()
            .map(|w| usize::try_from(w).unwrap_or(0))
            .collect();
        if ffn_dims.iter().any(|&w| !(1..=1 << 20).contains(&w)) {
            return Err(format!("`{ffn_key}` entries must be in 1..=1048576"));
        }
    }
    Ok(Gemma4Keys {
        sliding_window,
        sliding_layers,
        rope_base_swa: positive("rope.freq_base_swa")?.unwrap_or(10000.0),
        n_kv_heads,
        swa: (hd_swa, kv_swa.unwrap_or(n_kv_heads), rope_swa),
        kv_source,
        ffn_dims,
        ple_dim: opt_usize("embedding_length_per_layer_input", 0..=1 << 16)?.unwrap_or(0),
        softcap: positive("final_logit_softcapping")?,
    })
}
