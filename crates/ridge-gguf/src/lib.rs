//! GGUF reader for ridge.
//!
//! A GGUF file is a small header (magic, version, counts), a list of typed key/value metadata
//! entries, a tensor index (name, shape, element type, offset), then the tensor data aligned to
//! `general.alignment` (32 by default). ridge memory-maps the file and hands out tensor data as
//! borrowed byte slices of that map: the weights are never copied, so resident memory stays the
//! size of the pages actually touched.
//!
//! The reader is hardened against hostile files. Every count, length and offset read from the
//! file is checked against the bytes that remain before anything is allocated or sliced, so a
//! header claiming 2^60 tensors or a 4 GiB string fails with [`GgufError`] naming the file and the
//! problem instead of a panic or an out-of-memory abort.
//!
//! A model split by llama.cpp's `gguf-split` (`NAME-00001-of-0000N.gguf` …) opens as one
//! [`GgufFile`] from its first shard: the shards are mapped side by side into one reserved
//! address range, so [`GgufFile::bytes`] is still one slice and tensor offsets still index it
//! (module `split`).

mod error;
mod file;
mod parse;
mod split;
mod types;
mod value;
mod writer;

pub use error::GgufError;
pub use file::{GgufFile, TensorInfo};
pub use split::{parse_shard_name, shard_paths, split_path};
pub use types::GgmlType;
pub use value::{ArrayValue, MetadataValue, ValueType};
pub use writer::GgufWriter;

/// The GGUF magic number, "GGUF" read as little-endian bytes.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
