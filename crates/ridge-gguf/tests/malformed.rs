//! The reader against valid and hostile files: every malformed file is an error naming the file,
//! never a panic or a huge allocation.

use ridge_gguf::{ArrayValue, GgmlType, GgufError, GgufFile, GgufWriter, MetadataValue};
use std::io::Write;

fn write_tmp(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.meta(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .meta("llama.block_count", MetadataValue::U32(2))
    .meta("x.f", MetadataValue::F32(1.5))
    .meta(
        "tok",
        MetadataValue::Array(ArrayValue::String(vec!["a".into(), "bc".into()])),
    )
    .meta("ids", MetadataValue::Array(ArrayValue::I32(vec![1, -2, 3])))
    .tensor("w", &[4, 2], GgmlType::F32, (0..32u8).collect())
    .tensor("q", &[32, 1], GgmlType::Q8_0, vec![7u8; 34]);
    w.to_bytes()
}

fn open_err(bytes: &[u8]) -> String {
    let f = write_tmp(bytes);
    match GgufFile::open(f.path()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&f.path().display().to_string()),
                "message names the file: {msg}"
            );
            msg
        }
    }
}

#[test]
fn reads_valid_file() {
    let f = write_tmp(&sample());
    let g = GgufFile::open(f.path()).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(g.get_f64("x.f").unwrap(), 1.5);
    assert_eq!(g.get_string_array("tok").unwrap(), &["a", "bc"]);
    assert_eq!(
        g.get_array("ids").unwrap().to_i64_vec().unwrap(),
        vec![1, -2, 3]
    );
    let w = g.tensor("w").unwrap();
    assert_eq!(w.dims, vec![4, 2]);
    assert_eq!(w.offset % 32, 0);
    assert_eq!(g.tensor_data(w), &(0..32u8).collect::<Vec<_>>()[..]);
    let q = g.tensor("q").unwrap();
    assert_eq!(q.ty, GgmlType::Q8_0);
    assert_eq!(g.tensor_data(q), &[7u8; 34][..]);
    assert!(matches!(
        g.get_u64("missing"),
        Err(GgufError::Metadata { .. })
    ));
    assert!(matches!(
        g.get_str("llama.block_count"),
        Err(GgufError::Metadata { .. })
    ));
    assert!(matches!(g.tensor("nope"), Err(GgufError::Tensor { .. })));
}

#[test]
fn missing_file() {
    let e = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/model.gguf"));
}

#[test]
fn empty_and_tiny_files() {
    assert!(open_err(b"").contains("too small"));
    assert!(open_err(b"GGUF").contains("too small"));
}

#[test]
fn bad_magic_and_versions() {
    let mut b = sample();
    b[0] = b'X';
    assert!(open_err(&b).contains("magic"));
    let mut b = sample();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(open_err(&b).contains("version 1"));
    let mut b = sample();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(open_err(&b).contains("big-endian"));
    let mut b = sample();
    b[4..8].copy_from_slice(&99u32.to_le_bytes());
    assert!(open_err(&b).contains("version 99"));
}

#[test]
fn absurd_counts() {
    let mut b = sample();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(open_err(&b).contains("tensor count"));
    let mut b = sample();
    b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(open_err(&b).contains("metadata count"));
}

#[test]
fn absurd_string_length() {
    // First key's length field sits right after the 24-byte header.
    let mut b = sample();
    b[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(open_err(&b).contains("length of key"));
}

#[test]
fn every_truncation_is_an_error() {
    let b = sample();
    for len in 0..b.len() {
        let f = write_tmp(&b[..len]);
        assert!(
            GgufFile::open(f.path()).is_err(),
            "truncated to {len} bytes"
        );
    }
}

#[test]
fn random_bytes_and_bit_flips_never_panic() {
    // A small deterministic xorshift so the test needs no RNG crate.
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..200 {
        let n = (next() % 4096) as usize;
        let mut b: Vec<u8> = (0..n).map(|_| next() as u8).collect();
        if next() % 2 == 0 && b.len() >= 4 {
            b[..4].copy_from_slice(b"GGUF");
        }
        let f = write_tmp(&b);
        let _ = GgufFile::open(f.path());
    }
    let base = sample();
    for _ in 0..2000 {
        let mut b = base.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % b.len();
            b[i] ^= 1 << (next() % 8);
        }
        let f = write_tmp(&b);
        if let Ok(g) = GgufFile::open(f.path()) {
            for t in g.tensors() {
                assert!(g.tensor_data(t).len() == t.size);
            }
        }
    }
}

#[test]
fn tensor_past_end_and_bad_shapes() {
    let mut w = GgufWriter::new();
    w.tensor("q", &[33, 1], GgmlType::Q8_0, vec![0; 34]);
    assert!(open_err(&w.to_bytes()).contains("block size"));

    let mut w = GgufWriter::new();
    w.tensor("w", &[1024, 1024], GgmlType::F32, vec![0; 16]);
    assert!(open_err(&w.to_bytes()).contains("past the end"));

    let mut w = GgufWriter::new();
    w.tensor("w", &[u64::MAX / 2, 4], GgmlType::F32, vec![0; 16]);
    assert!(open_err(&w.to_bytes()).contains("overflow"));
}

#[test]
fn duplicate_names_and_bad_alignment() {
    let mut w = GgufWriter::new();
    w.tensor("w", &[4], GgmlType::F32, vec![0; 16])
        .tensor("w", &[4], GgmlType::F32, vec![0; 16]);
    assert!(open_err(&w.to_bytes()).contains("twice"));

    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetadataValue::U32(48));
    assert!(open_err(&w.to_bytes()).contains("alignment"));
}
