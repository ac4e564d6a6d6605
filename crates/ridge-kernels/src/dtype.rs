//! Weight element formats ridge computes with, and their block geometry.

/// The lattice and ternary formats (`iquant`) as one match pattern, so the places that treat
/// them alike name them once.
macro_rules! lattice {
    () => {
        $crate::DType::IQ2_XXS
            | $crate::DType::IQ2_XS
            | $crate::DType::IQ2_S
            | $crate::DType::IQ3_XXS
            | $crate::DType::IQ3_S
            | $crate::DType::IQ1_S
            | $crate::DType::IQ1_M
            | $crate::DType::TQ1_0
            | $crate::DType::TQ2_0
    };
}
pub(crate) use lattice;

/// A weight storage format. Quantized formats store blocks of 32 elements with a scale, or
/// (the k-quants) super-blocks of 256 elements: eight or sixteen sub-blocks whose scales are
/// themselves quantized against one f16 super-block scale.
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
    /// 32 × 5-bit with an f16 scale, value = d·(q − 16) (22 bytes).
    Q5_0,
    /// 32 × 5-bit with f16 scale and minimum, value = d·q + m (24 bytes).
    Q5_1,
    /// 256 × 4-bit in 8 sub-blocks of 32 with 6-bit scales and minimums, value = d·sc·q − dmin·m
    /// (144 bytes).
    Q4_K,
    /// As Q4_K with a fifth bit per element, q in 0..32 (176 bytes).
    Q5_K,
    /// 256 × 6-bit in 16 sub-blocks of 16 with int8 scales, value = d·sc·(q − 32) (210 bytes).
    Q6_K,
    /// OCP microscaling FP4 (gpt-oss's experts): 32 × 4-bit e2m1 codes with one e8m0 scale
    /// byte, value = 2^(e − 128) · K[q] for K the doubled e2m1 values
    /// `0, 1, 2, 3, 4, 6, 8, 12` and their negatives (17 bytes).
    MXFP4,
    /// 256 × 2-bit in 16 sub-blocks of 16 with 4-bit scales and minimums, value =
    /// d·sc·q − dmin·m (84 bytes; layout in `lowbit`).
    Q2_K,
    /// 256 × 3-bit in 16 sub-blocks of 16 with 6-bit signed scales, value = d·sc·q, q in
    /// −4..4 (110 bytes).
    Q3_K,
    /// 32 × 4-bit codes on a non-uniform grid with an f16 scale, value = `d·K[q]` (18 bytes).
    IQ4_NL,
    /// 256 × 4-bit codes as IQ4_NL's in 8 sub-blocks of 32 with 6-bit signed scales (136
    /// bytes).
    IQ4_XS,
    /// 2.06 bits per weight: groups of 8 from a 256-entry lattice codebook with 7-bit sign
    /// patterns, a 4-bit scale per 32 (66 bytes; layouts of this and the following in
    /// `iquant`).
    IQ2_XXS,
    /// 2.31 bits: a 512-entry codebook, 4-bit scales per 16 (74 bytes).
    IQ2_XS,
    /// 2.56 bits: a 1024-entry codebook, explicit signs (82 bytes).
    IQ2_S,
    /// 3.06 bits: groups of 4 from a 256-entry codebook (98 bytes).
    IQ3_XXS,
    /// 3.44 bits: a 512-entry codebook, explicit signs (110 bytes).
    IQ3_S,
    /// 1.56 bits: groups of 8 of −1, 0, 1 from a 2048-entry codebook, shifted by ±1/8 (50
    /// bytes).
    IQ1_S,
    /// 1.75 bits: IQ1_S's codebook with scales per 16 (56 bytes).
    IQ1_M,
    /// 1.69 bits: ternary values packed five per byte in base 3 (54 bytes).
    TQ1_0,
    /// 2.06 bits: ternary values in two bits each (66 bytes).
    TQ2_0,
}

impl DType {
    /// Every format, in the order of this enum.
    pub const ALL: [DType; 25] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::MXFP4,
        DType::Q2_K,
        DType::Q3_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::IQ2_XXS,
        DType::IQ2_XS,
        DType::IQ2_S,
        DType::IQ3_XXS,
        DType::IQ3_S,
        DType::IQ1_S,
        DType::IQ1_M,
        DType::TQ1_0,
        DType::TQ2_0,
    ];

    /// The format named `name` as ggml names it, any case (`q3_k`, `IQ4_XS`).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| format!("{d:?}").eq_ignore_ascii_case(name))
    }

    /// Stored bits per weight (`Q4_K`: 4.5).
    pub fn bits_per_weight(self) -> f64 {
        8.0 * self.block_bytes() as f64 / self.block_size() as f64
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0
            | DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::MXFP4
            | DType::IQ4_NL => 32,
            DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::Q2_K
            | DType::Q3_K
            | DType::IQ4_XS
            | lattice!() => 256,
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
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::MXFP4 => 17,
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::IQ4_NL => 18,
            DType::IQ4_XS => 136,
            DType::IQ2_XXS => 66,
            DType::IQ2_XS => 74,
            DType::IQ2_S => 82,
            DType::IQ3_XXS => 98,
            DType::IQ3_S => 110,
            DType::IQ1_S => 50,
            DType::IQ1_M => 56,
            DType::TQ1_0 => 54,
            DType::TQ2_0 => 66,
        }
    }

    /// Bytes of one row of `n` elements (`n` must be a multiple of the block size).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }

    /// True for the quantized (block) formats, which meet activations as 8-bit blocks or f32.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }
}
