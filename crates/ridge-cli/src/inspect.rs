//! What a model file holds, read from its GGUF header only: shards, size, architecture,
//! parameter count and quantisation — the facts `ridge list` and `ridge show` print.
//!
//! Headers are memory-mapped and only the metadata and tensor index are parsed, so looking at a
//! multi-gigabyte model costs milliseconds and reads no weights. A split model
//! (`NAME-00001-of-00003.gguf`) is one model: its size, parameters and tensor types add up
//! over every shard; its metadata comes from the first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ridge_gguf::GgufFile;

/// A model, opened (headers only; a split model's shards all mapped as one by `GgufFile`).
pub struct Model {
    /// The model's GGUF image: metadata from the first shard, tensors from every shard.
    pub file: GgufFile,
}

impl Model {
    /// Opens the model whose (first) file is `first`.
    pub fn open(first: &Path) -> Result<Self> {
        let file = GgufFile::open(first).with_context(|| "cannot read the GGUF header")?;
        Ok(Self { file })
    }

    /// The files on disk, first shard first.
    pub fn paths(&self) -> &[PathBuf] {
        self.file.shards()
    }

    /// The first shard, which holds the metadata.
    pub fn head(&self) -> &GgufFile {
        &self.file
    }

    /// A metadata string of the first shard.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.head().get(key).and_then(|v| v.as_str())
    }

    /// A metadata integer of the first shard.
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.head().get(key).and_then(|v| v.as_u64())
    }

    /// `general.architecture`.
    pub fn arch(&self) -> Option<&str> {
        self.str("general.architecture")
    }

    /// Bytes on disk over every shard.
    pub fn size_bytes(&self) -> u64 {
        self.file.file_size() as u64
    }

    /// Tensor elements over every shard (the embedding table counts once, however the output
    /// head is stored).
    pub fn parameters(&self) -> u64 {
        self.file.tensors().iter().map(|t| t.n_elements()).sum()
    }

    /// Tensor count and bytes per ggml type, most bytes first.
    pub fn tensor_types(&self) -> Vec<TypeUse> {
        let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for t in self.file.tensors() {
            let e = by.entry(t.ty.to_string()).or_default();
            e.0 += 1;
            e.1 += t.size as u64;
        }
        let mut v: Vec<TypeUse> = by
            .into_iter()
            .map(|(ty, (count, bytes))| TypeUse { ty, count, bytes })
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.ty.cmp(&b.ty)));
        v
    }

    /// The ggml type holding most bytes among the weight matrices (tensors of two or more
    /// dimensions): what the model is "quantised to" when the file does not say.
    pub fn weight_type(&self) -> Option<String> {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for t in self.file.tensors() {
            if t.dims.len() >= 2 {
                *by.entry(t.ty.to_string()).or_default() += t.size as u64;
            }
        }
        by.into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(ty, _)| ty)
    }

    /// The quantisation by its usual name: `general.file_type` as llama.cpp names it
    /// (`Q4_K_M`) when the file records a known one, else [`Model::weight_type`].
    pub fn quant(&self) -> Option<String> {
        self.u64("general.file_type")
            .and_then(file_type_name)
            .map(str::to_string)
            .or_else(|| self.weight_type())
    }
}

/// One row of a model's tensor-type table.
#[derive(Clone, Debug)]
pub struct TypeUse {
    /// The ggml type (`Q4_K`).
    pub ty: String,
    /// Tensors of that type.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// llama.cpp's name for a `general.file_type` value (its `llama_ftype`), as quantisation tags
/// in file names spell it; `None` for values it never assigned or retired.
pub fn file_type_name(ft: u64) -> Option<&'static str> {
    Some(match ft {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

/// Bytes in binary units, as `ridge ps` prints memory (`93.8 MiB`, `1.04 GiB`).
pub fn human_bytes(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    if f >= KIB * KIB * KIB {
        format!("{:.2} GiB", f / (KIB * KIB * KIB))
    } else if f >= KIB * KIB {
        format!("{:.1} MiB", f / (KIB * KIB))
    } else if f >= KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{b} B")
    }
}

/// A parameter count the way model names give it (`135M`, `1.5B`, `70B`).
pub fn human_count(n: u64) -> String {
    let f = n as f64;
    let (v, unit) = if f >= 1e12 {
        (f / 1e12, "T")
    } else if f >= 1e9 {
        (f / 1e9, "B")
    } else if f >= 1e6 {
        (f / 1e6, "M")
    } else if f >= 1e3 {
        (f / 1e3, "K")
    } else {
        return n.to_string();
    };
    if v < 10.0 {
        let s = format!("{v:.1}");
        format!("{}{unit}", s.strip_suffix(".0").unwrap_or(&s))
    } else {
        format!("{v:.0}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_count(134_515_008), "135M");
        assert_eq!(human_count(1_543_714_304), "1.5B");
        assert_eq!(human_count(7_000_000_000), "7B");
        assert_eq!(human_count(70_553_706_496), "71B");
        assert_eq!(human_count(999), "999");
        assert_eq!(human_bytes(98_362_432), "93.8 MiB");
        assert_eq!(human_bytes(1_117_320_768), "1.04 GiB");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
        assert_eq!(file_type_name(4), None);
    }
}
