//! Typed GGUF metadata values.
//!
//! Arrays of scalars are stored as typed vectors (not a vector of enums) so that a large array
//! costs what its elements cost, e.g. 262 144 token scores take 1 MiB, not 8 MiB.

/// The on-disk metadata value type tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// Maps the on-disk tag.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The fewest bytes one value of this type can take in the file; used to bound array
    /// counts by the bytes that remain before allocating.
    pub fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    /// An array; see [`ArrayValue`].
    Array(ArrayValue),
}

/// A typed array value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum ArrayValue {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// Arrays of arrays (rare; kept for completeness).
    Array(Vec<ArrayValue>),
}

impl ArrayValue {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayValue::U8(v) => v.len(),
            ArrayValue::I8(v) => v.len(),
            ArrayValue::U16(v) => v.len(),
            ArrayValue::I16(v) => v.len(),
            ArrayValue::U32(v) => v.len(),
            ArrayValue::I32(v) => v.len(),
            ArrayValue::F32(v) => v.len(),
            ArrayValue::Bool(v) => v.len(),
            ArrayValue::String(v) => v.len(),
            ArrayValue::U64(v) => v.len(),
            ArrayValue::I64(v) => v.len(),
            ArrayValue::F64(v) => v.len(),
            ArrayValue::Array(v) => v.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Integer elements widened to i64 (any integer element type); `None` otherwise or when a
    /// u64 element does not fit.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match self {
            ArrayValue::U8(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayValue::I8(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayValue::U16(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayValue::I16(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayValue::U32(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayValue::I32(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayValue::I64(v) => v.clone(),
            ArrayValue::U64(v) => v
                .iter()
                .map(|&x| i64::try_from(x).ok())
                .collect::<Option<Vec<_>>>()?,
            _ => return None,
        })
    }
}

impl MetadataValue {
    /// The value as a u64 if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetadataValue::U8(v) => Some(v as u64),
            MetadataValue::U16(v) => Some(v as u64),
            MetadataValue::U32(v) => Some(v as u64),
            MetadataValue::U64(v) => Some(v),
            MetadataValue::I8(v) => u64::try_from(v).ok(),
            MetadataValue::I16(v) => u64::try_from(v).ok(),
            MetadataValue::I32(v) => u64::try_from(v).ok(),
            MetadataValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an f64 if it is any number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetadataValue::F32(v) => Some(v as f64),
            MetadataValue::F64(v) => Some(v),
            MetadataValue::I8(v) => Some(v as f64),
            MetadataValue::I16(v) => Some(v as f64),
            MetadataValue::I32(v) => Some(v as f64),
            MetadataValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a string slice.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetadataValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetadataValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&ArrayValue> {
        match self {
            MetadataValue::Array(a) => Some(a),
            _ => None,
        }
    }
}
