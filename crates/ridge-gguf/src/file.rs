//! The opened, memory-mapped GGUF file: header, metadata, tensor index, and data views.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::parse::{Cursor, ParseResult};
use crate::types::GgmlType;
use crate::value::{ArrayValue, MetadataValue};
use crate::{GgufError, DEFAULT_ALIGNMENT, GGUF_MAGIC};

/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Alignments above this are refused (nothing real uses more than a page).
const MAX_ALIGNMENT: u64 = 1 << 16;
/// Smallest possible encoded size of one tensor-index entry (empty name, one dim).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Smallest possible encoded size of one metadata entry (empty key, type tag, one byte).
const MIN_KV_BYTES: u64 = 8 + 4 + 1;

/// One entry of the tensor index, validated against the file.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as ggml orders them: a weight matrix with
    /// `rows` outputs of `cols` inputs is `[cols, rows]`.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Absolute byte offset of the data in [`GgufFile::bytes`] (for a split model, the shard's
    /// base in the combined view plus the offset in the shard).
    pub offset: usize,
    /// Size of the data in bytes.
    pub size: usize,
}

impl TensorInfo {
    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Elements per row (the innermost dimension).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows (product of all outer dimensions).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// The bytes behind a [`GgufFile`]: a read-only memory map of a file on disk, the shards of a
/// split model mapped side by side into one reserved region (unix), or a buffer (the caller's,
/// from [`GgufFile::from_bytes`], or a split model read into memory where there is no mmap).
pub(crate) enum Data {
    Mapped(Mmap),
    #[cfg(unix)]
    Split(crate::split::Region),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Data {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            #[cfg(unix)]
            Data::Split(r) => r,
            Data::Owned(v) => v,
        }
    }
}

/// An open GGUF file. Tensor data is borrowed from the memory map; nothing is copied.
pub struct GgufFile {
    path: PathBuf,
    /// Every file behind the model: `[path]`, or all shards of a split model in order.
    shards: Vec<PathBuf>,
    /// Bytes on disk over all shards (the view may be longer: shards start on page boundaries).
    file_size: usize,
    map: Data,
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetadataValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("shards", &self.shards.len())
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens and validates a GGUF file (v2 or v3).
    ///
    /// Given the first shard of a split model (`NAME-00001-of-0000N.gguf`, or a file whose
    /// `split.count` is above 1), opens all N shards and presents them as one file (the shards
    /// mapped side by side; see the crate docs). A later shard given directly is an error
    /// naming the first.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref().to_path_buf();
        let file = open_checked(&path)?;
        // SAFETY: the map is read-only (a shared mapping ridge never writes through), and every
        // slice handed out is checked against its length at parse time. Removing the file or
        // renaming another over it is harmless (the mapping keeps the inode). If another process
        // truncates or rewrites the same inode while it is mapped, reads of the lost pages fault
        // (SIGBUS); RELIABILITY.md documents that model files must be replaced by rename, never
        // modified in place, as every mmap-based loader (llama.cpp included) requires.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| GgufError::Io {
            path: path.clone(),
            source,
        })?;
        let layout = parse_layout(&map).map_err(|message| GgufError::Malformed {
            path: path.clone(),
            message,
        })?;
        match crate::split::plan(&path, &layout)? {
            None => {
                let size = map.len();
                Self::build(path.clone(), vec![path], size, Data::Mapped(map), layout)
            }
            Some(name) => {
                drop(map);
                let s = crate::split::open_shards(&path, &name)?;
                Self::build(path, s.shards, s.file_size, s.data, s.layout)
            }
        }
    }

    /// Tells the kernel that `len` bytes at `offset` will not be read again (a tensor a loader
    /// copied into another layout), so their pages leave this process's resident set. A hint:
    /// should they be read after all, they are faulted back in from the file, unchanged.
    pub fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        match &self.map {
            Data::Mapped(m) => {
                if offset.checked_add(len).is_some_and(|end| end <= m.len()) {
                    // SAFETY: the map is a read-only file mapping, so dropping its pages loses
                    // nothing: any later read faults the same bytes back in from the file, and
                    // no slice handed out observes a change. Failure only leaves them resident.
                    let _ = unsafe {
                        m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
                    };
                }
            }
            Data::Split(r) => r.release(offset, len),
            Data::Owned(_) => {}
        }
        let _ = (offset, len);
    }

    /// Parses and validates a GGUF image held in memory, with the same checks as
    /// [`GgufFile::open`]. `name` stands in for the path in error messages (e.g. `"<memory>"`).
    ///
    /// ridge itself always maps files; this entry point exists for tests and fuzzing, which
    /// build or mutate images in memory, and for callers that already hold the bytes. One shard
    /// of a split model parses as the lone file it is: no other shard is looked for.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::parse(name.into(), Data::Owned(bytes))
    }

    fn parse(path: PathBuf, map: Data) -> Result<Self, GgufError> {
        let layout = match parse_layout(&map) {
            Ok(l) => l,
            Err(message) => return Err(GgufError::Malformed { path, message }),
        };
        let size = map.len();
        Self::build(path.clone(), vec![path], size, map, layout)
    }

    fn build(
        path: PathBuf,
        shards: Vec<PathBuf>,
        file_size: usize,
        map: Data,
        layout: Layout,
    ) -> Result<Self, GgufError> {
        let mut metadata_index = HashMap::with_capacity(layout.metadata.len());
        for (i, (k, _)) in layout.metadata.iter().enumerate() {
            if metadata_index.insert(k.clone(), i).is_some() {
                return Err(GgufError::Malformed {
                    path,
                    message: format!("metadata key `{k}` appears twice"),
                });
            }
        }
        let mut tensor_index = HashMap::with_capacity(layout.tensors.len());
        for (i, t) in layout.tensors.iter().enumerate() {
            if tensor_index.insert(t.name.clone(), i).is_some() {
                return Err(GgufError::Malformed {
                    path,
                    message: format!("tensor `{}` appears twice", t.name),
                });
            }
        }
        Ok(GgufFile {
            path,
            shards,
            file_size,
            map,
            version: layout.version,
            alignment: layout.alignment,
            metadata: layout.metadata,
            metadata_index,
            tensors: layout.tensors,
            tensor_index,
        })
    }

    /// The path the file was opened from (for a split model, its first shard).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every file behind this model, in order: just [`GgufFile::path`] for a single file, all
    /// shards (the first one first) for a split model.
    pub fn shards(&self) -> &[PathBuf] {
        &self.shards
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Size of the model on disk in bytes: the file, or the sum of all shards' sizes.
    pub fn file_size(&self) -> usize {
        self.file_size
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> &[(String, MetadataValue)] {
        &self.metadata
    }

    /// All tensors in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn meta_err(&self, key: &str, message: impl Into<String>) -> GgufError {
        GgufError::Metadata {
            path: self.path.clone(),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn require(&self, key: &str) -> Result<&MetadataValue, GgufError> {
        self.get(key).ok_or_else(|| self.meta_err(key, "missing"))
    }

    /// A required non-negative integer (any integer width).
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        v.as_u64().ok_or_else(|| {
            self.meta_err(key, format!("expected a non-negative integer, found {v:?}"))
        })
    }

    /// A required integer that must fit in `usize` and lie in `range`.
    pub fn get_usize_in(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<usize>,
    ) -> Result<usize, GgufError> {
        let v = self.get_u64(key)?;
        match usize::try_from(v) {
            Ok(u) if range.contains(&u) => Ok(u),
            _ => Err(self.meta_err(
                key,
                format!("value {v} outside the accepted range {range:?}"),
            )),
        }
    }

    /// A required number as f64 (any numeric type).
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self.require(key)?;
        v.as_f64()
            .ok_or_else(|| self.meta_err(key, format!("expected a number, found {v:?}")))
    }

    /// A required string.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| self.meta_err(key, "expected a string"))
    }

    /// An optional bool; an entry of another type is an error.
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.meta_err(key, "expected a bool")),
        }
    }

    /// A required array.
    pub fn get_array(&self, key: &str) -> Result<&ArrayValue, GgufError> {
        let v = self.require(key)?;
        v.as_array()
            .ok_or_else(|| self.meta_err(key, "expected an array"))
    }

    /// A required array of strings.
    pub fn get_string_array(&self, key: &str) -> Result<&[String], GgufError> {
        match self.get_array(key)? {
            ArrayValue::String(v) => Ok(v),
            _ => Err(self.meta_err(key, "expected an array of strings")),
        }
    }

    /// A tensor's index entry by name.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| GgufError::Tensor {
                path: self.path.clone(),
                name: name.to_string(),
                message: "missing".into(),
            })
    }

    /// True when a tensor of this name exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensor_index.contains_key(name)
    }

    /// The bytes of a tensor, borrowed from the map. The range was validated at open.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        &self.map[t.offset..t.offset + t.size]
    }

    /// The whole mapped file; for a split model, all shards side by side, each starting on a
    /// page boundary (the bytes between one shard's end and the next one's start read as zero).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// Opens `path` for reading and checks it can be a GGUF file: not a folder, at least a header.
pub(crate) fn open_checked(path: &Path) -> Result<std::fs::File, GgufError> {
    let io = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(GgufError::Malformed {
            path: path.to_path_buf(),
            message: "is a directory, not a GGUF file".into(),
        });
    }
    if meta.len() < 24 {
        return Err(GgufError::Malformed {
            path: path.to_path_buf(),
            message: format!(
                "file is {} bytes, too small to hold a GGUF header (24 bytes)",
                meta.len()
            ),
        });
    }
    Ok(file)
}

/// What [`parse_layout`] reads from one file: header fields, metadata, tensor index.
pub(crate) struct Layout {
    pub(crate) version: u32,
    pub(crate) alignment: u64,
    pub(crate) metadata: Vec<(String, MetadataValue)>,
    pub(crate) tensors: Vec<TensorInfo>,
}

pub(crate) fn parse_layout(bytes: &[u8]) -> ParseResult<Layout> {
    let mut c = Cursor::new(bytes);
    let magic = c.take(4, "magic")?;
    if magic != GGUF_MAGIC {
        return Err(format!(
            "bad magic {:02x?} (expected \"GGUF\"); not a GGUF file",
            magic
        ));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => return Err("GGUF version 1 is not supported (only 2 and 3)".into()),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err("big-endian GGUF files are not supported".into())
        }
        v => return Err(format!("unsupported GGUF version {v} (only 2 and 3)")),
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    if n_kv.saturating_mul(MIN_KV_BYTES) > c.remaining() {
        return Err(format!(
            "metadata count {n_kv} cannot fit in the {} bytes of the file",
            bytes.len()
        ));
    }
    if n_tensors.saturating_mul(MIN_TENSOR_INFO_BYTES) > c.remaining() {
        return Err(format!(
            "tensor count {n_tensors} cannot fit in the {} bytes of the file",
            bytes.len()
        ));
    }

    let mut metadata = Vec::new();
    for i in 0..n_kv {
        let key = c.string(&format!("key of metadata entry {i}"))?;
        let ty = c.value_type(&format!("type of metadata `{key}`"))?;
        let value = c.value(ty, &format!("metadata `{key}`"))?;
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
            _ => {
                return Err(format!(
                    "general.alignment is {v:?}; expected a power of two up to {MAX_ALIGNMENT}"
                ))
            }
        },
    };

    struct RawTensor {
        name: String,
        dims: Vec<u64>,
        ty: GgmlType,
        rel_offset: u64,
        size: u64,
    }
    let mut raw = Vec::new();
    for i in 0..n_tensors {
        let name = c.string(&format!("name of tensor {i}"))?;
        let n_dims = c.u32(&format!("dimension count of tensor `{name}`"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(format!(
                "tensor `{name}` has {n_dims} dimensions (expected 1 to {MAX_DIMS})"
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let v = c.u64(&format!("dimension {d} of tensor `{name}`"))?;
            if v == 0 {
                return Err(format!("tensor `{name}` has a zero-sized dimension {d}"));
            }
            dims.push(v);
        }
        let type_id = c.u32(&format!("type of tensor `{name}`"))?;
        let ty = GgmlType::from_id(type_id)
            .ok_or_else(|| format!("tensor `{name}` has unknown type id {type_id}"))?;
        let rel_offset = c.u64(&format!("offset of tensor `{name}`"))?;
        if rel_offset % alignment != 0 {
            return Err(format!(
                "tensor `{name}` offset {rel_offset} is not a multiple of the alignment {alignment}"
            ));
        }
        dims.iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(ty.block_bytes()))
            .ok_or_else(|| format!("tensor `{name}` shape {dims:?} overflows"))?;
        let n_rows = dims[1..]
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("tensor `{name}` shape {dims:?} overflows"))?;
        let size = ty
            .row_bytes(dims[0])
            .ok_or_else(|| {
                format!(
                    "tensor `{name}` row length {} is not a multiple of the {ty} block size {}",
                    dims[0],
                    ty.block_size()
                )
            })?
            .checked_mul(n_rows)
            .ok_or_else(|| format!("tensor `{name}` shape {dims:?} overflows"))?;
        raw.push(RawTensor {
            name,
            dims,
            ty,
            rel_offset,
            size,
        });
    }

    let index_end = c.pos() as u64;
    let data_start = index_end.div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        let start = data_start.checked_add(t.rel_offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => tensors.push(TensorInfo {
                name: t.name,
                dims: t.dims,
                ty: t.ty,
                offset: s as usize,
                size: t.size as usize,
            }),
            _ => {
                return Err(format!(
                    "tensor `{}` data ({} bytes at offset {}) runs past the end of the file ({} bytes); file truncated?",
                    t.name, t.size, t.rel_offset, file_len
                ))
            }
        }
    }
    Ok(Layout {
        version,
        alignment,
        metadata,
        tensors,
    })
}
