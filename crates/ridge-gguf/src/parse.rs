//! A bounds-checked little-endian cursor over the mapped file.
//!
//! Every read checks the remaining length first; every count read from the file is checked
//! against the remaining bytes (count × smallest possible element size) before a vector is
//! grown. Errors are plain strings here; `file.rs` attaches the path.

use crate::value::{ArrayValue, MetadataValue, ValueType};

/// Arrays of arrays deeper than this are rejected (bounds recursion on hostile input).
const MAX_ARRAY_DEPTH: usize = 4;

pub(crate) type ParseResult<T> = Result<T, String>;

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    pub(crate) fn take(&mut self, n: u64, what: &str) -> ParseResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(format!(
                "{what} needs {n} bytes at offset {} but only {} remain (file truncated?)",
                self.pos,
                self.remaining()
            ));
        }
        let n = n as usize;
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> ParseResult<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u32(&mut self, what: &str) -> ParseResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> ParseResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that will drive a loop over elements of at least `min_size` bytes each.
    pub(crate) fn count(&mut self, min_size: u64, what: &str) -> ParseResult<u64> {
        let n = self.u64(what)?;
        match n.checked_mul(min_size) {
            Some(need) if need <= self.remaining() => Ok(n),
            _ => Err(format!(
                "{what} is {n}, more than the {} bytes left in the file can hold",
                self.remaining()
            )),
        }
    }

    pub(crate) fn string(&mut self, what: &str) -> ParseResult<String> {
        let len = self.count(1, &format!("length of {what}"))?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not valid UTF-8"))
    }

    pub(crate) fn value_type(&mut self, what: &str) -> ParseResult<ValueType> {
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| format!("{what}: unknown value type {id}"))
    }

    pub(crate) fn value(&mut self, ty: ValueType, what: &str) -> ParseResult<MetadataValue> {
        self.value_at_depth(ty, what, 0)
    }

    fn value_at_depth(
        &mut self,
        ty: ValueType,
        what: &str,
        depth: usize,
    ) -> ParseResult<MetadataValue> {
        Ok(match ty {
            ValueType::U8 => MetadataValue::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => MetadataValue::I8(self.array::<1>(what)?[0] as i8),
            ValueType::U16 => MetadataValue::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => MetadataValue::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => MetadataValue::U32(self.u32(what)?),
            ValueType::I32 => MetadataValue::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => MetadataValue::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::Bool => {
                let b = self.array::<1>(what)?[0];
                match b {
                    0 => MetadataValue::Bool(false),
                    1 => MetadataValue::Bool(true),
                    _ => return Err(format!("{what}: bool byte is {b}, expected 0 or 1")),
                }
            }
            ValueType::String => MetadataValue::String(self.string(what)?),
            ValueType::U64 => MetadataValue::U64(self.u64(what)?),
            ValueType::I64 => MetadataValue::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => MetadataValue::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Array => MetadataValue::Array(self.array_value(what, depth)?),
        })
    }

    fn array_value(&mut self, what: &str, depth: usize) -> ParseResult<ArrayValue> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(format!(
                "{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
            ));
        }
        let elem = self.value_type(&format!("element type of {what}"))?;
        let n = self.count(elem.min_encoded_size(), &format!("element count of {what}"))?;
        macro_rules! collect {
            ($variant:ident, $pat:ident) => {{
                let mut v = Vec::new();
                for _ in 0..n {
                    match self.value_at_depth(elem, what, depth + 1)? {
                        MetadataValue::$pat(x) => v.push(x),
                        _ => unreachable!("value_at_depth returns the requested type"),
                    }
                }
                ArrayValue::$variant(v)
            }};
        }
        Ok(match elem {
            ValueType::U8 => collect!(U8, U8),
            ValueType::I8 => collect!(I8, I8),
            ValueType::U16 => collect!(U16, U16),
            ValueType::I16 => collect!(I16, I16),
            ValueType::U32 => collect!(U32, U32),
            ValueType::I32 => collect!(I32, I32),
            ValueType::F32 => collect!(F32, F32),
            ValueType::Bool => collect!(Bool, Bool),
            ValueType::String => collect!(String, String),
            ValueType::U64 => collect!(U64, U64),
            ValueType::I64 => collect!(I64, I64),
            ValueType::F64 => collect!(F64, F64),
            ValueType::Array => collect!(Array, Array),
        })
    }
}
