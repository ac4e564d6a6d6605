//! A minimal GGUF v3 writer: builds a file in memory from metadata and raw tensor bytes.
//!
//! ridge uses it to make small synthetic models and malformed variants for tests; it writes
//! exactly the layout the reader expects (tensor data aligned to `general.alignment`), as one
//! file ([`GgufWriter::to_bytes`]) or as the shards of a split model in llama.cpp's
//! `gguf-split` layout ([`GgufWriter::to_split_bytes`]).

use crate::value::{ArrayValue, MetadataValue};
use crate::{GgmlType, DEFAULT_ALIGNMENT, GGUF_MAGIC};

/// One tensor to write: name, dims (innermost first), type, bytes.
type Tensor = (String, Vec<u64>, GgmlType, Vec<u8>);

/// Collects metadata and tensors, then serialises them with [`GgufWriter::to_bytes`] or
/// [`GgufWriter::to_split_bytes`].
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<Tensor>,
}

fn type_id(v: &MetadataValue) -> u32 {
    match v {
        MetadataValue::U8(_) => 0,
        MetadataValue::I8(_) => 1,
        MetadataValue::U16(_) => 2,
        MetadataValue::I16(_) => 3,
        MetadataValue::U32(_) => 4,
        MetadataValue::I32(_) => 5,
        MetadataValue::F32(_) => 6,
        MetadataValue::Bool(_) => 7,
        MetadataValue::String(_) => 8,
        MetadataValue::Array(_) => 9,
        MetadataValue::U64(_) => 10,
        MetadataValue::I64(_) => 11,
        MetadataValue::F64(_) => 12,
    }
}

fn ggml_type_id(t: GgmlType) -> u32 {
    (0..64)
        .find(|&id| GgmlType::from_id(id) == Some(t))
        .expect("every GgmlType has an id")
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetadataValue) {
    match v {
        MetadataValue::U8(x) => out.push(*x),
        MetadataValue::I8(x) => out.push(*x as u8),
        MetadataValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::Bool(x) => out.push(*x as u8),
        MetadataValue::String(s) => put_str(out, s),
        MetadataValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &ArrayValue) {
    macro_rules! arr {
        ($id:expr, $v:expr, $f:expr) => {{
            out.extend_from_slice(&($id as u32).to_le_bytes());
            out.extend_from_slice(&($v.len() as u64).to_le_bytes());
            for x in $v {
                $f(out, x);
            }
        }};
    }
    match a {
        ArrayValue::U8(v) => arr!(0, v, |o: &mut Vec<u8>, x: &u8| o.push(*x)),
        ArrayValue::I8(v) => arr!(1, v, |o: &mut Vec<u8>, x: &i8| o.push(*x as u8)),
        ArrayValue::U16(v) => arr!(2, v, |o: &mut Vec<u8>, x: &u16| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::I16(v) => arr!(3, v, |o: &mut Vec<u8>, x: &i16| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::U32(v) => arr!(4, v, |o: &mut Vec<u8>, x: &u32| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::I32(v) => arr!(5, v, |o: &mut Vec<u8>, x: &i32| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::F32(v) => arr!(6, v, |o: &mut Vec<u8>, x: &f32| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::Bool(v) => arr!(7, v, |o: &mut Vec<u8>, x: &bool| o.push(*x as u8)),
        ArrayValue::String(v) => arr!(8, v, |o: &mut Vec<u8>, x: &String| put_str(o, x)),
        ArrayValue::U64(v) => arr!(10, v, |o: &mut Vec<u8>, x: &u64| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::I64(v) => arr!(11, v, |o: &mut Vec<u8>, x: &i64| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::F64(v) => arr!(12, v, |o: &mut Vec<u8>, x: &f64| o
            .extend_from_slice(&x.to_le_bytes())),
        ArrayValue::Array(v) => arr!(9, v, |o: &mut Vec<u8>, x: &ArrayValue| put_array(o, x)),
    }
}

impl GgufWriter {
    /// An empty file description.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry.
    pub fn meta(&mut self, key: &str, value: MetadataValue) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor; `dims` innermost first, `data` already in the type's block layout.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensors
            .push((name.to_string(), dims.to_vec(), ty, data));
        self
    }

    /// Serialises to GGUF v3 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serialise(&self.metadata, &self.tensors)
    }

    /// Serialises as the shards of a split model, at most `max_tensors_per_shard` tensors each
    /// (0 counts as 1), in llama.cpp's `gguf-split` layout: the first shard has all metadata
    /// then `split.no` (u16, 0-based), `split.tensors.count` (i32) and `split.count` (u16); the
    /// others only those three keys and their own tensors (so the default alignment). Fed a
    /// file's metadata and tensors in file order, the shards are byte for byte what
    /// `gguf-split --split-max-tensors` makes of it (checked on SmolLM2-135M). Any `split.*`
    /// entries already added are left out. Write shard k (1-based) of n to
    /// [`crate::split_path`]`(prefix, k, n)`. A writer with no tensors gives one shard.
    pub fn to_split_bytes(&self, max_tensors_per_shard: usize) -> Vec<Vec<u8>> {
        let chunks: Vec<&[Tensor]> = if self.tensors.is_empty() {
            vec![&[]]
        } else {
            self.tensors.chunks(max_tensors_per_shard.max(1)).collect()
        };
        let count = chunks.len();
        chunks
            .iter()
            .enumerate()
            .map(|(no, tensors)| {
                let mut meta: Vec<(String, MetadataValue)> = if no == 0 {
                    self.metadata
                        .iter()
                        .filter(|(k, _)| !k.starts_with("split."))
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                meta.extend(crate::split::split_keys(no, count, self.tensors.len()));
                serialise(&meta, tensors)
            })
            .collect()
    }
}

/// One GGUF v3 file of `metadata` and `tensors`, data aligned to its `general.alignment`.
fn serialise(metadata: &[(String, MetadataValue)], tensors: &[Tensor]) -> Vec<u8> {
    let align = metadata
        .iter()
        .find(|(k, _)| k == "general.alignment")
        .and_then(|(_, v)| v.as_u64())
        .unwrap_or(DEFAULT_ALIGNMENT) as usize;
    let mut out = Vec::new();
    out.extend_from_slice(&GGUF_MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut out, k);
        out.extend_from_slice(&type_id(v).to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0usize;
    let mut offsets = Vec::new();
    for (name, dims, ty, data) in tensors {
        put_str(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ggml_type_id(*ty).to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        offsets.push(offset);
        offset = (offset + data.len()).div_ceil(align) * align;
    }
    let data_start = out.len().div_ceil(align) * align;
    out.resize(data_start, 0);
    for ((_, _, _, data), off) in tensors.iter().zip(offsets) {
        out.resize(data_start + off, 0);
        out.extend_from_slice(data);
    }
    out
}
