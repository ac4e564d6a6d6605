//! Split models (llama.cpp's `gguf-split` layout): the first shard opens as the whole model,
//! byte for byte, and every inconsistency between shards is one error line naming the file.

use std::path::{Path, PathBuf};

use ridge_gguf::{split_path, ArrayValue, GgmlType, GgufFile, GgufWriter, MetadataValue};

/// Tensors of a few types and sizes; some span several pages so shards are not page multiples.
fn tensors() -> Vec<(String, Vec<u64>, GgmlType, Vec<u8>)> {
    let mut v = Vec::new();
    for i in 0..7u8 {
        let (dims, ty, len) = match i % 3 {
            0 => (
                vec![4, 2 + i as u64],
                GgmlType::F32,
                4 * 4 * (2 + i as usize),
            ),
            1 => (vec![32, 300], GgmlType::Q8_0, 34 * 300),
            _ => (vec![8], GgmlType::F16, 16),
        };
        let data = (0..len).map(|b| (b as u8).wrapping_mul(7) ^ i).collect();
        v.push((format!("blk.{i}.w"), dims, ty, data));
    }
    v
}

fn writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .meta("llama.block_count", MetadataValue::U32(7))
    .meta(
        "tokenizer.ggml.tokens",
        MetadataValue::Array(ArrayValue::String(vec!["a".into(), "bc".into()])),
    );
    for (name, dims, ty, data) in tensors() {
        w.tensor(&name, &dims, ty, data);
    }
    w
}

/// Writes shards as `dir/m-0000K-of-0000N.gguf` and returns their paths.
fn write_shards(dir: &Path, shards: &[Vec<u8>]) -> Vec<PathBuf> {
    let n = shards.len() as u32;
    shards
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let p = split_path(dir.join("m"), i as u32 + 1, n);
            std::fs::write(&p, bytes).unwrap();
            p
        })
        .collect()
}

/// The model split into 3 shards (3 + 3 + 1 tensors) in a fresh folder.
fn split3() -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let shards = writer().to_split_bytes(3);
    assert_eq!(shards.len(), 3);
    let paths = write_shards(dir.path(), &shards);
    (dir, paths)
}

/// One hand-made shard: `split.no` = `no`, `split.count` = `count`, `split.tensors.count` =
/// `total` (as u16/u16/i32 like gguf-split), the metadata when `no` is 0, and `names` as tensors.
fn shard(no: u16, count: u16, total: i32, names: &[&str]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if no == 0 {
        w.meta(
            "general.architecture",
            MetadataValue::String("llama".into()),
        );
    }
    w.meta("split.no", MetadataValue::U16(no))
        .meta("split.count", MetadataValue::U16(count))
        .meta("split.tensors.count", MetadataValue::I32(total));
    for n in names {
        w.tensor(n, &[4], GgmlType::F32, vec![no as u8; 16]);
    }
    w.to_bytes()
}

fn open_err(path: &Path) -> String {
    match GgufFile::open(path) {
        Ok(_) => panic!("{}: expected an error", path.display()),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "one line: {msg}");
            msg
        }
    }
}

#[test]
fn the_first_shard_opens_as_the_whole_model() {
    let (dir, paths) = split3();
    let whole_path = dir.path().join("whole.gguf");
    std::fs::write(&whole_path, writer().to_bytes()).unwrap();
    let whole = GgufFile::open(&whole_path).unwrap();
    let split = GgufFile::open(&paths[0]).unwrap();

    assert_eq!(split.path(), paths[0]);
    assert_eq!(split.shards(), &paths[..]);
    assert_eq!(whole.shards(), std::slice::from_ref(&whole_path));
    let on_disk: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(split.file_size() as u64, on_disk);
    assert!(split.bytes().len() >= split.file_size());

    for (k, v) in whole.metadata() {
        assert_eq!(split.get(k), Some(v), "metadata {k}");
    }
    assert_eq!(split.get_u64("split.count").unwrap(), 3);
    assert_eq!(split.get_u64("split.no").unwrap(), 0);
    assert_eq!(split.get_u64("split.tensors.count").unwrap(), 7);
    assert_eq!(split.metadata().len(), whole.metadata().len() + 3);

    assert_eq!(split.tensors().len(), whole.tensors().len());
    for (a, b) in whole.tensors().iter().zip(split.tensors()) {
        assert_eq!(
            (&a.name, &a.dims, a.ty, a.size),
            (&b.name, &b.dims, b.ty, b.size)
        );
        assert_eq!(whole.tensor_data(a), split.tensor_data(b), "{}", a.name);
        assert_eq!(split.tensor(&a.name).unwrap().offset, b.offset);
    }
    // The last tensor lives in the third shard, past the first two shards' bytes.
    let last = split.tensors().last().unwrap();
    let first_two: u64 = paths[..2]
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(last.offset as u64 > first_two);
}

#[test]
fn released_pages_read_back_unchanged() {
    let (_dir, paths) = split3();
    let split = GgufFile::open(&paths[0]).unwrap();
    let before: Vec<Vec<u8>> = split
        .tensors()
        .iter()
        .map(|t| split.tensor_data(t).to_vec())
        .collect();
    for t in split.tensors() {
        split.release(t.offset, t.size);
    }
    split.release(0, split.bytes().len());
    split.release(split.bytes().len(), 1); // out of range: ignored
    split.release(usize::MAX, 2);
    for (t, b) in split.tensors().iter().zip(&before) {
        assert_eq!(split.tensor_data(t), &b[..], "{}", t.name);
    }
}

#[test]
fn the_writer_uses_gguf_split_key_types() {
    let shards = writer().to_split_bytes(3);
    for (i, bytes) in shards.iter().enumerate() {
        let f = GgufFile::from_bytes("<shard>", bytes.clone()).unwrap();
        assert_eq!(f.get("split.no"), Some(&MetadataValue::U16(i as u16)));
        assert_eq!(f.get("split.count"), Some(&MetadataValue::U16(3)));
        assert_eq!(f.get("split.tensors.count"), Some(&MetadataValue::I32(7)));
        let has_meta = f.get("general.architecture").is_some();
        assert_eq!(has_meta, i == 0, "metadata only in the first shard");
        assert_eq!(f.tensors().len(), if i < 2 { 3 } else { 1 });
    }
    assert_eq!(writer().to_split_bytes(100).len(), 1);
}

#[test]
fn any_integer_type_is_accepted_for_the_split_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut shards = Vec::new();
    for (no, names) in [(0u32, ["a"]), (1, ["b"])] {
        let mut w = GgufWriter::new();
        w.meta("split.no", MetadataValue::I64(no as i64))
            .meta("split.count", MetadataValue::U32(2))
            .meta("split.tensors.count", MetadataValue::U64(2));
        w.tensor(names[0], &[4], GgmlType::F32, vec![no as u8; 16]);
        shards.push(w.to_bytes());
    }
    let paths = write_shards(dir.path(), &shards);
    let f = GgufFile::open(&paths[0]).unwrap();
    assert_eq!(f.tensor_data(f.tensor("b").unwrap()), &[1u8; 16]);
}

#[test]
fn a_plain_file_opens_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.gguf");
    let bytes = writer().to_bytes();
    std::fs::write(&p, &bytes).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(f.shards(), std::slice::from_ref(&p));
    assert_eq!(f.file_size(), bytes.len());
    assert_eq!(f.bytes(), &bytes[..]);
    // A one-shard "split" is a plain file too.
    let one = write_shards(dir.path(), &writer().to_split_bytes(100));
    let f = GgufFile::open(&one[0]).unwrap();
    assert_eq!(f.shards().len(), 1);
    assert_eq!(f.tensors().len(), 7);
}

#[test]
fn a_missing_shard_is_named_with_the_count() {
    let (_dir, paths) = split3();
    std::fs::remove_file(&paths[1]).unwrap();
    let msg = open_err(&paths[0]);
    assert!(msg.contains("m-00002-of-00003.gguf"), "{msg}");
    assert!(msg.contains("missing") && msg.contains("3 files"), "{msg}");
}

#[test]
fn a_later_shard_given_directly_names_the_first() {
    let (_dir, paths) = split3();
    for p in &paths[1..] {
        let msg = open_err(p);
        assert!(
            msg.contains("open the first shard, m-00001-of-00003.gguf"),
            "{msg}"
        );
    }
    // Without a shard name, the metadata alone gives it away.
    let renamed = paths[1].with_file_name("renamed.gguf");
    std::fs::rename(&paths[1], &renamed).unwrap();
    let msg = open_err(&renamed);
    assert!(
        msg.contains("open the first shard") && msg.contains("-00001-of-00003.gguf"),
        "{msg}"
    );
}

#[test]
fn a_shard_with_the_wrong_number_is_refused() {
    let (_dir, paths) = split3();
    // Shard 3's bytes (split.no 2) under shard 2's name.
    std::fs::copy(&paths[2], &paths[1]).unwrap();
    let msg = open_err(&paths[0]);
    assert!(
        msg.contains("m-00002-of-00003.gguf") && msg.contains("split.no is 2"),
        "{msg}"
    );
}

#[test]
fn a_shard_with_another_count_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shards = [
        shard(0, 3, 3, &["a"]),
        shard(1, 4, 3, &["b"]),
        shard(2, 3, 3, &["c"]),
    ];
    let paths = write_shards(dir.path(), &shards);
    let msg = open_err(&paths[0]);
    assert!(
        msg.contains("m-00002-of-00003.gguf") && msg.contains("split.count is 4"),
        "{msg}"
    );
    // The first shard's count against its own name.
    std::fs::write(&paths[0], shard(0, 4, 3, &["a"])).unwrap();
    let msg = open_err(&paths[0]);
    assert!(
        msg.contains("m-00001-of-00003.gguf") && msg.contains("split.count is 4"),
        "{msg}"
    );
}

#[test]
fn a_wrong_tensor_total_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shards = [shard(0, 2, 5, &["a", "b"]), shard(1, 2, 5, &["c"])];
    let paths = write_shards(dir.path(), &shards);
    let msg = open_err(&paths[0]);
    assert!(
        msg.contains("m-00001-of-00002.gguf")
            && msg.contains("3 tensors")
            && msg.contains("split.tensors.count says 5"),
        "{msg}"
    );
}

#[test]
fn a_tensor_in_two_shards_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shards = [
        shard(0, 3, 3, &["a"]),
        shard(1, 3, 3, &["b"]),
        shard(2, 3, 3, &["a"]),
    ];
    let paths = write_shards(dir.path(), &shards);
    let msg = open_err(&paths[0]);
    assert!(
        msg.contains("m-00003-of-00003.gguf")
            && msg.contains("tensor `a` is also in")
            && msg.contains("m-00001-of-00003.gguf"),
        "{msg}"
    );
}

#[test]
fn a_split_first_shard_needs_its_shard_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.gguf");
    std::fs::write(&p, shard(0, 2, 2, &["a"])).unwrap();
    let msg = open_err(&p);
    assert!(
        msg.contains("model.gguf") && msg.contains("-00001-of-00002.gguf"),
        "{msg}"
    );
    // A shard name on a file without split keys contradicts itself.
    let named = split_path(dir.path().join("x"), 1, 2);
    std::fs::write(&named, writer().to_bytes()).unwrap();
    let msg = open_err(&named);
    assert!(
        msg.contains("x-00001-of-00002.gguf") && msg.contains("no split.count"),
        "{msg}"
    );
}
