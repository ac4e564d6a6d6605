//! Weight element formats ridge computes with, and their block geometry.

/// A weight storage format. Quantized formats store blocks of 32 elements with a scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// 32 × int8 with an f16 scale (34 bytes).
    Q8_0,
    /// 32 × 4-bit with an f16 scale, value = d·(q − 8) (18 bytes).
    Q4_0,
    /// 32 × 4-bit with f16 scale and minimum, value = d·q + m (20 bytes).
    Q4_1,
}

impl DType {
    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
        }
    }

    /// Bytes of one row of `n` elements (`n` must be a multiple of the block size).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }

    /// True for the 8-bit-activation integer formats.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }
}
