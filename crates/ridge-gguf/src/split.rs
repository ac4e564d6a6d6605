//! Split models: llama.cpp's `gguf-split` layout, opened as one file.
//!
//! A big model ships as shards `NAME-00001-of-0000N.gguf` … `NAME-0000N-of-0000N.gguf` in one
//! folder. Each shard is a complete GGUF file with its own header, tensor index and data
//! section. The first carries all the model's metadata; every shard carries `split.no`
//! (0-based), `split.count` and `split.tensors.count` (the tensors over all shards), and only
//! its own tensors.
//!
//! Everything above this crate reads weights as `&file.bytes()[t.offset..]`, hands offsets back
//! to [`GgufFile::release`](crate::GgufFile::release), and never asks which file a tensor came
//! from. So rather than teach every consumer about shards, a split model is made to look like
//! one file: on unix one contiguous address range is reserved (an anonymous `PROT_NONE`
//! mapping, which costs no memory), and each shard is mapped read-only with `MAP_FIXED` over
//! its part of it, shard k starting at the page boundary after shard k−1 ends. The view is one
//! slice: a tensor's offset is its shard's base plus its offset in the shard, the tail of each
//! shard's last page reads as zeros (the kernel fills a file mapping's partial page so), and
//! releasing pages is one `madvise` on the region. Weights are still never copied, resident
//! memory is still the pages touched, and dropping the file is one `munmap`. Where there is no
//! mmap, the shards are read into one buffer with the same layout.
//!
//! The shards are checked against each other, each failure one line naming the file: a missing
//! shard, a shard whose `split.no` or `split.count` disagrees with its name or the first shard,
//! a tensor in two shards, a tensor total other than `split.tensors.count`, and a later shard
//! given directly (the first one must be opened; it is the one with the metadata). A file that
//! is neither named as a shard nor has `split.count` above 1 never comes here.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::file::{open_checked, parse_layout, Data, Layout};
use crate::value::MetadataValue;
use crate::GgufError;

/// The shard's 0-based index.
pub(crate) const KEY_NO: &str = "split.no";
/// How many shards the model has.
pub(crate) const KEY_COUNT: &str = "split.count";
/// Tensors over all shards.
pub(crate) const KEY_TENSORS: &str = "split.tensors.count";

/// The path of shard `no` (1-based) of `count` for `prefix`: `{prefix}-{no:05}-of-{count:05}.gguf`,
/// the names llama.cpp's `gguf-split` writes (`llama_split_path`).
pub fn split_path(prefix: impl AsRef<Path>, no: u32, count: u32) -> PathBuf {
    let mut s = prefix.as_ref().as_os_str().to_os_string();
    s.push(format!("-{no:05}-of-{count:05}.gguf"));
    PathBuf::from(s)
}

/// The files a model at `path` is made of, judged by name alone (nothing is opened): all N
/// shard paths when `path` is named as the first shard of N > 1 (`NAME-00001-of-0000N.gguf`),
/// else `[path]`. For sizes on disk without mapping the model; [`GgufFile::shards`] is the
/// checked list of an opened one.
///
/// [`GgufFile::shards`]: crate::GgufFile::shards
pub fn shard_paths(path: impl AsRef<Path>) -> Vec<PathBuf> {
    let path = path.as_ref();
    match SplitName::parse(path) {
        Some(n) if n.no == 1 && n.count > 1 => (1..=n.count).map(|k| n.path(k)).collect(),
        _ => vec![path.to_path_buf()],
    }
}

/// Takes a shard name `{prefix}-{no:05}-of-{count:05}.gguf` apart into `(prefix, no, count)`
/// (`no` 1-based); `None` when `name` has not that form. Works on any `/`-separated name — a
/// file name, or a path inside a model repository.
pub fn parse_shard_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.get(..name.len().checked_sub(5)?)?;
    if !name[stem.len()..].eq_ignore_ascii_case(".gguf") {
        return None;
    }
    let (head, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = head.rsplit_once('-')?;
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
    if prefix.is_empty() || !digits(no) || !digits(count) {
        return None;
    }
    let (no, count): (u32, u32) = (no.parse().ok()?, count.parse().ok()?);
    (no != 0 && count != 0).then_some((prefix, no, count))
}

/// A path of the form `{prefix}-{no:05}-of-{count:05}.gguf`, taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SplitName {
    /// Everything before `-{no}-of-{count}`, folder included.
    prefix: PathBuf,
    /// 1-based shard number.
    pub(crate) no: u32,
    /// Shards in the model.
    pub(crate) count: u32,
}

impl SplitName {
    /// Reads a shard name; `None` when the file name has not that form.
    pub(crate) fn parse(path: &Path) -> Option<Self> {
        let (prefix, no, count) = parse_shard_name(path.file_name()?.to_str()?)?;
        Some(SplitName {
            prefix: path.with_file_name(prefix),
            no,
            count,
        })
    }

    /// The path of shard `no` (1-based) of this model.
    pub(crate) fn path(&self, no: u32) -> PathBuf {
        split_path(&self.prefix, no, self.count)
    }

    /// The file name of shard `no`, for messages.
    fn file_name(&self, no: u32) -> String {
        let p = self.path(no);
        p.file_name()
            .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
    }
}

fn malformed(path: &Path, message: String) -> GgufError {
    GgufError::Malformed {
        path: path.to_path_buf(),
        message,
    }
}

/// An integer `split.*` key of `layout` (any integer type), `None` when absent.
fn int_key(path: &Path, layout: &Layout, key: &str) -> Result<Option<u64>, GgufError> {
    match layout.metadata.iter().find(|(k, _)| k == key) {
        None => Ok(None),
        Some((_, v)) => v.as_u64().map(Some).ok_or_else(|| {
            malformed(
                path,
                format!("{key} is {v:?}; expected a non-negative integer"),
            )
        }),
    }
}

/// Decides from the opened file's name and metadata whether it is a split model: `None` for a
/// plain file (opened as always), the shard names for the first shard of a split model, and an
/// error for a later shard or a name that contradicts the metadata.
pub(crate) fn plan(path: &Path, layout: &Layout) -> Result<Option<SplitName>, GgufError> {
    let name = SplitName::parse(path);
    let count = int_key(path, layout, KEY_COUNT)?;
    let no = int_key(path, layout, KEY_NO)?;
    let meta_split = count.is_some_and(|c| c > 1);
    let name_split = name.as_ref().is_some_and(|n| n.count > 1);
    if !meta_split && !name_split {
        return Ok(None);
    }
    let later = no.is_some_and(|n| n > 0) || name.as_ref().is_some_and(|n| n.no > 1);
    if later {
        return Err(malformed(path, not_first_message(name.as_ref(), no, count)));
    }
    let (Some(name), Some(count)) = (name, count) else {
        return Err(malformed(path, naming_message(count)));
    };
    if count != u64::from(name.count) {
        return Err(malformed(
            path,
            format!(
                "split.count is {count} but the file name says the model has {} shards",
                name.count
            ),
        ));
    }
    Ok(Some(name))
}

/// The message for a later shard opened directly.
fn not_first_message(name: Option<&SplitName>, no: Option<u64>, count: Option<u64>) -> String {
    match name {
        Some(n) => format!(
            "this is shard {} of {} of a split model; open the first shard, {}",
            n.no,
            n.count,
            n.file_name(1)
        ),
        None => {
            let count = count.unwrap_or(0);
            format!(
                "this is shard {} of {count} of a split model (split.no {}); open the first \
                 shard, the file whose name ends in -00001-of-{count:05}.gguf",
                no.unwrap_or(0) + 1,
                no.unwrap_or(0)
            )
        }
    }
}

/// The message for a first shard whose name and `split.count` do not fit together.
fn naming_message(count: Option<u64>) -> String {
    match count {
        Some(c) => format!(
            "split.count is {c} but the file name does not end in -00001-of-{c:05}.gguf, so \
             the other shards cannot be found; keep the names gguf-split gave them"
        ),
        None => "the file name says it is a shard of a split model but it has no split.count \
                 key (rename it if it is a whole model)"
            .to_string(),
    }
}

/// A split model, opened: the view, the merged index, and the files behind it.
pub(crate) struct Opened {
    pub(crate) data: Data,
    pub(crate) layout: Layout,
    pub(crate) shards: Vec<PathBuf>,
    pub(crate) file_size: usize,
}

/// Opens every shard of the model whose first shard is `first`, lays them out side by side and
/// merges their tensor indexes (metadata from the first shard).
pub(crate) fn open_shards(first: &Path, name: &SplitName) -> Result<Opened, GgufError> {
    let shards: Vec<PathBuf> = std::iter::once(first.to_path_buf())
        .chain((2..=name.count).map(|k| name.path(k)))
        .collect();
    let mut files = Vec::with_capacity(shards.len());
    for (i, p) in shards.iter().enumerate() {
        files.push(open_shard(p, i, name)?);
    }
    let lens: Vec<u64> = files.iter().map(|(_, len)| *len).collect();
    let file_size = lens
        .iter()
        .try_fold(0usize, |acc, &l| acc.checked_add(usize::try_from(l).ok()?))
        .ok_or_else(|| malformed(first, "the shards are too big to map together".into()))?;
    let (bases, total) = bases(&lens, page_size())
        .ok_or_else(|| malformed(first, "the shards are too big to map together".into()))?;
    let io = |source| GgufError::Io {
        path: first.to_path_buf(),
        source,
    };
    #[cfg(unix)]
    let data = Data::Split(Region::map_shards(&files, &bases, total).map_err(io)?);
    #[cfg(not(unix))]
    let data = Data::Owned(read_shards(&files, &bases, total).map_err(io)?);
    let layout = merge(&shards, &data, &bases, &lens, name.count)?;
    Ok(Opened {
        data,
        layout,
        shards,
        file_size,
    })
}

/// Opens shard `i` (0-based); a missing one is named with the count the model expects.
fn open_shard(path: &Path, i: usize, name: &SplitName) -> Result<(File, u64), GgufError> {
    if i > 0 && !path.exists() {
        return Err(malformed(
            path,
            format!(
                "shard {} of {} is missing: the model is split into {} files, {} to {}, which \
                 must all be in one folder",
                i + 1,
                name.count,
                name.count,
                name.file_name(1),
                name.file_name(name.count)
            ),
        ));
    }
    let file = open_checked(path)?;
    let len = file
        .metadata()
        .map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    Ok((file, len))
}

/// Each shard's base in the combined view (page-aligned, consecutive) and the view's length.
fn bases(lens: &[u64], page: usize) -> Option<(Vec<usize>, usize)> {
    let mut bases = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &len in lens {
        bases.push(at);
        let len = usize::try_from(len).ok()?;
        at = at.checked_add(len.checked_next_multiple_of(page)?)?;
    }
    Some((bases, at))
}

/// Parses every shard from its part of the view, checks its `split.*` keys, and merges the
/// tensor indexes in shard order with offsets into the view.
fn merge(
    shards: &[PathBuf],
    view: &[u8],
    bases: &[usize],
    lens: &[u64],
    count: u32,
) -> Result<Layout, GgufError> {
    let mut merged: Option<Layout> = None;
    let mut tensors = Vec::new();
    let mut owner: HashMap<String, usize> = HashMap::new();
    for (i, path) in shards.iter().enumerate() {
        let end = bases[i] + lens[i] as usize;
        let mut layout =
            parse_layout(&view[bases[i]..end]).map_err(|message| malformed(path, message))?;
        check_keys(path, &layout, i, count, shards)?;
        for mut t in layout.tensors.drain(..) {
            if let Some(&j) = owner.get(&t.name) {
                return Err(malformed(
                    path,
                    format!(
                        "tensor `{}` is also in {}; a tensor must be in one shard only",
                        t.name,
                        shards[j].display()
                    ),
                ));
            }
            owner.insert(t.name.clone(), i);
            t.offset += bases[i];
            tensors.push(t);
        }
        merged.get_or_insert(layout);
    }
    let mut layout = merged.ok_or_else(|| malformed(&shards[0], "no shards".into()))?;
    if let Some(want) = int_key(&shards[0], &layout, KEY_TENSORS)? {
        if want != tensors.len() as u64 {
            return Err(malformed(
                &shards[0],
                format!(
                    "the {count} shards hold {} tensors but split.tensors.count says {want}",
                    tensors.len()
                ),
            ));
        }
    }
    layout.tensors = tensors;
    Ok(layout)
}

/// Checks that shard `i` (0-based) says it is shard `i` of `count`. The first shard may omit
/// `split.no` (it is 0); the others must carry both keys.
fn check_keys(
    path: &Path,
    layout: &Layout,
    i: usize,
    count: u32,
    shards: &[PathBuf],
) -> Result<(), GgufError> {
    let no = int_key(path, layout, KEY_NO)?;
    let n = int_key(path, layout, KEY_COUNT)?;
    let first = shards[0].display();
    if no.unwrap_or(0) != i as u64 || (i > 0 && no.is_none()) {
        let got = no.map_or_else(|| "missing".to_string(), |v| v.to_string());
        return Err(malformed(
            path,
            format!(
                "split.no is {got} but this file should be shard {} of {count} (split.no {i}) \
                 of {first}, as its name says",
                i + 1
            ),
        ));
    }
    if n != Some(u64::from(count)) {
        let got = n.map_or_else(|| "missing".to_string(), |v| v.to_string());
        return Err(malformed(
            path,
            format!("split.count is {got} but {first} says the model has {count} shards"),
        ));
    }
    Ok(())
}

/// The size of a memory page (the granularity of the shards' bases).
fn page_size() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf only reads a system constant.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(p) = usize::try_from(p) {
            if p.is_power_of_two() {
                return p;
            }
        }
    }
    4096
}

/// Reads the shards into one buffer with the layout of the mapped view (for systems without
/// mmap; on unix only the tests use it, to check it against the mapping).
#[cfg_attr(unix, allow(dead_code))]
fn read_shards(files: &[(File, u64)], bases: &[usize], total: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; total];
    for ((file, len), &base) in files.iter().zip(bases) {
        let mut f = file;
        f.read_exact(&mut buf[base..base + *len as usize])?;
    }
    Ok(buf)
}

/// The shards of a split model mapped side by side into one reserved address range.
///
/// Invariant: `ptr..ptr + len` is one mapping this value owns, and once [`Region::map_shards`]
/// returns, every page of it is a read-only shared mapping of one of the shard files.
#[cfg(unix)]
pub(crate) struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is read-only memory owned by this value until Drop unmaps it; nothing
// writes through it, so sharing or moving it between threads is as safe as for a `&[u8]`.
#[cfg(unix)]
unsafe impl Send for Region {}
// SAFETY: as above: only shared reads and `madvise` hints, which the kernel serialises.
#[cfg(unix)]
unsafe impl Sync for Region {}

#[cfg(unix)]
impl Region {
    /// Reserves `total` bytes of address space and maps each file at its base. `bases` are
    /// page-aligned and each file fits before the next base (see [`bases`]).
    fn map_shards(files: &[(File, u64)], bases: &[usize], total: usize) -> std::io::Result<Region> {
        use std::os::fd::AsRawFd;
        // SAFETY: an anonymous PROT_NONE reservation at an address the kernel picks: it
        // overlaps nothing, and no one can read it until a shard is mapped over it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // From here on Drop unmaps the whole range, whether or not every shard got mapped.
        let region = Region {
            ptr: ptr.cast(),
            len: total,
        };
        for ((file, len), &base) in files.iter().zip(bases) {
            let len = *len as usize;
            // SAFETY: `base + len` lies inside the reservation (bases() sized it so) and
            // `base` is page-aligned, so MAP_FIXED replaces only pages of our own
            // reservation, never another mapping. The mapping is read-only and shared: see
            // `GgufFile::open` for what rewriting a mapped file in place would do.
            let got = unsafe {
                libc::mmap(
                    region.ptr.add(base).cast(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if got == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(region)
    }

    /// Drops the pages under `offset..offset + len` from the resident set (a hint; later reads
    /// fault the same bytes back in from the files). Out-of-range requests are ignored.
    pub(crate) fn release(&self, offset: usize, len: usize) {
        let Some(end) = offset.checked_add(len).filter(|&e| e <= self.len) else {
            return;
        };
        let start = offset - offset % page_size();
        // SAFETY: `start..end` lies in the region and `start` is page-aligned. Every page is a
        // read-only file mapping, so dropping it loses nothing and no slice observes a change;
        // failure only leaves the pages resident.
        let _ =
            unsafe { libc::madvise(self.ptr.add(start).cast(), end - start, libc::MADV_DONTNEED) };
    }
}

#[cfg(unix)]
impl std::ops::Deref for Region {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: by the type's invariant all `len` bytes are mapped readable for as long as
        // `self` lives, and nothing writes to them.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

#[cfg(unix)]
impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is the reservation this value made (shard mappings inside
        // it included), and no slice of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The `split.*` entries the writer puts in shard `no` (0-based) of `count` holding `tensors`
/// in all: the types and the order llama.cpp's `gguf-split` writes (it sets `split.count` last),
/// so a model split by ridge is byte for byte what `gguf-split --split-max-tensors` makes.
pub(crate) fn split_keys(no: usize, count: usize, tensors: usize) -> [(String, MetadataValue); 3] {
    let u16_of = |v: usize| MetadataValue::U16(u16::try_from(v).unwrap_or(u16::MAX));
    [
        (KEY_NO.to_string(), u16_of(no)),
        (
            KEY_TENSORS.to_string(),
            MetadataValue::I32(i32::try_from(tensors).unwrap_or(i32::MAX)),
        ),
        (KEY_COUNT.to_string(), u16_of(count)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_parse_and_rebuild() {
        let n = SplitName::parse(Path::new("/m/Big-Model-00001-of-00003.gguf")).unwrap();
        assert_eq!((n.no, n.count), (1, 3));
        assert_eq!(n.path(2), Path::new("/m/Big-Model-00002-of-00003.gguf"));
        assert_eq!(n.file_name(3), "Big-Model-00003-of-00003.gguf");
        assert_eq!(shard_paths("/m/Big-Model-00001-of-00003.gguf").len(), 3);
        assert_eq!(shard_paths("/m/Big-Model-00002-of-00003.gguf").len(), 1);
        assert_eq!(
            shard_paths("/m/model.gguf"),
            vec![PathBuf::from("/m/model.gguf")]
        );
        for plain in [
            "/m/model.gguf",
            "/m/x-1-of-3.gguf",
            "/m/-00001-of-00003.gguf",
            "/m/x-00000-of-00003.gguf",
            "/m/x-00001-of-00003.bin",
            "/m/x-0000a-of-00003.gguf",
        ] {
            assert_eq!(SplitName::parse(Path::new(plain)), None, "{plain}");
        }
    }

    #[test]
    fn bases_are_page_aligned_and_consecutive() {
        let (b, total) = bases(&[100, 4096, 4097], 4096).unwrap();
        assert_eq!(b, vec![0, 4096, 8192]);
        assert_eq!(total, 8192 + 8192);
        assert_eq!(bases(&[u64::MAX], 4096), None);
    }

    #[cfg(unix)]
    #[test]
    fn owned_read_matches_the_mapped_region() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (i, len) in [5000usize, 30, 4096].into_iter().enumerate() {
            let p = dir.path().join(format!("s{i}"));
            let mut f = File::create(&p).unwrap();
            f.write_all(&vec![i as u8 + 1; len]).unwrap();
            drop(f);
            files.push((File::open(&p).unwrap(), len as u64));
        }
        let lens: Vec<u64> = files.iter().map(|f| f.1).collect();
        let (b, total) = bases(&lens, page_size()).unwrap();
        let region = Region::map_shards(&files, &b, total).unwrap();
        let owned = read_shards(&files, &b, total).unwrap();
        assert_eq!(&region[..], &owned[..]);
        assert_eq!(region[b[1]], 2);
        assert_eq!(
            region[b[1] + 30],
            0,
            "the tail of a shard's last page reads as zero"
        );
        region.release(0, total);
        assert_eq!(
            &region[..],
            &owned[..],
            "released pages fault back unchanged"
        );
    }
}
