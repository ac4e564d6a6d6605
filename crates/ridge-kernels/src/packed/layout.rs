//! The tile layout's geometry (rows per tile, bytes per tile of each format): what the tile
//! kernels and the matrix views need to address tiles, without the packing code itself
//! ([`crate::packed`], which documents each layout).

use crate::DType;

/// Rows per tile.
pub const TILE_ROWS: usize = 8;

/// Bytes of one Q4_0 tile (the scales, then four nibble vectors as Q4_1's).
pub const Q4_0_TILE: usize = 144;

/// Bytes of one Q5_1 tile: the scales, the minimums, then as Q5_0's after its scales.
pub const Q5_1_TILE: usize = 192;

/// Bytes of one Q4_1 tile.
pub const Q4_1_TILE: usize = 160;

/// Bytes of one Q8_0 tile.
pub const Q8_0_TILE: usize = 272;

/// Bytes of one Q5_0 tile.
pub const Q5_0_TILE: usize = 176;

/// Bytes of one Q4_K tile: the eight rows' `d` and `dmin` (f16), their eight sub-block scales
/// and minimums unpacked to bytes (`sc[s][j]` at `32 + 8s + j`, `m[s][j]` at `96 + 8s + j`),
/// then for each pair of sub-blocks `p` eight nibble vectors at `160 + 256p + 32k` whose
/// lane `j` is row `j`'s quant bytes `32p + 4k..32p + 4k + 4` (low nibbles sub-block `2p`,
/// high nibbles `2p + 1`). Unpacking the 12-byte scales once here instead of in every
/// product costs 32 bytes per tile (2.8%).
pub const Q4_K_TILE: usize = 1184;

/// Bytes of one Q6_K tile: the eight rows' `d` (f16), their sixteen int8 sub-block scales
/// (`sc[s][j]` at `16 + 8s + j`), then 32 vectors of low nibbles from [`Q6K_LOW`] (vector `m`,
/// lane `j`: row `j`'s elements `4m..4m+4` in the low nibbles, `128+4m..` in the high ones)
/// and 16 vectors of top-two-bit pairs from [`Q6K_HIGH`] (vector `n`, lane `j`, byte `i`, bits
/// `2c..2c+2`: element `4(n + 16c) + i`). The size of the eight blocks it replaces.
pub const Q6_K_TILE: usize = 1680;

/// Offset of a Q6_K tile's low-nibble vectors.
pub const Q6K_LOW: usize = 144;

/// Offset of a Q6_K tile's high-bit vectors.
pub const Q6K_HIGH: usize = 1168;

/// Bytes of one MXFP4 tile: the eight rows' e8m0 scale bytes, then four nibble vectors as
/// Q4_0's (vector `k`, lane `j`: row `j`'s quant bytes `4k..4k + 4`, low nibbles element
/// `4k + i`, high nibbles `16 + 4k + i`). The size of the eight blocks it replaces.
pub const MXFP4_TILE: usize = 136;

/// Bytes of one IQ4_XS tile: the eight rows' `d` (f16, at `2j`), their `scales_h` (u16, at
/// `16 + 2j`) and `scales_l` (4 bytes, at `32 + 4j`) as stored, then for each sub-block `c`
/// four nibble vectors at `64 + 128c + 32k` whose lane `j` is row `j`'s quant bytes
/// `16c + 4k..16c + 4k + 4` (low nibbles element `4k + i` of the sub-block, high nibbles
/// `16 + 4k + i`, as Q4_0's). The size of the eight super-blocks it replaces.
pub const IQ4_XS_TILE: usize = 1088;

/// Offset of an IQ4_XS tile's nibble vectors.
pub const IQ4XS_QS: usize = 64;

/// Bytes of one Q3_K tile, the stored bytes of eight rows' super-blocks rearranged: the rows'
/// `d` (f16, at `2j`); three vectors of their scale bytes at [`Q3K_SC`] (vector `v`, lane `j`:
/// row `j`'s `scales[4v..4v + 4]`); eight vectors of their `hmask` at [`Q3K_HM`] (vector `k`,
/// lane `j`: row `j`'s `hmask[4k..4k + 4]`); sixteen vectors of their `qs` at [`Q3K_QS`]
/// (vector `8h + k`, lane `j`: row `j`'s `qs[32h + 4k..32h + 4k + 4]`). Element `32c + 4k + i`
/// of row `j` is then byte `4j + i` of hmask vector `k` (bit `c`) and of qs vector
/// `8·(c / 4) + k` (bits `2·(c % 4)..`). The size of the eight super-blocks it replaces.
pub const Q3_K_TILE: usize = 880;

/// Bytes of one Q2_K tile, the stored bytes of eight rows' super-blocks rearranged as Q3_K's:
/// the rows' `d` (f16, at `2j`) and `dmin` (at `16 + 2j`); four vectors of their scale bytes at
/// [`Q2K_SC`] (vector `v`, lane `j`: row `j`'s `scales[4v..4v + 4]`); sixteen vectors of their
/// `qs` at [`Q2K_QS`] (as Q3_K's at [`Q3K_QS`]). The size of the eight super-blocks it replaces.
pub const Q2_K_TILE: usize = 672;

/// Offset of a Q2_K tile's scale vectors.
pub const Q2K_SC: usize = 32;

/// Offset of a Q2_K tile's qs vectors.
pub const Q2K_QS: usize = 160;

/// Bytes of one IQ3_S tile, the stored bytes of eight rows' super-blocks rearranged: the rows'
/// `d` (f16, at `2j`); their `scales` at [`IQ3S_SC`] (one vector, lane `j`: row `j`'s four
/// bytes); their `qh` at [`IQ3S_QH`] (vector `v`, lane `j`: `qh[4v..4v + 4]`); their `signs` at
/// [`IQ3S_SG`] (vector `c`, lane `j`: `signs[4c..4c + 4]`); their `qs` at [`IQ3S_QS`] (vector
/// `2c + u`, lane `j`: `qs[8c + 4u..8c + 4u + 4]`). Chunk `k` of group `c` (elements
/// `32c + 4k..`) of row `j` is then grid entry `qs[8c + k] | (bit k of qh[c]) << 8` with sign
/// bits `4k..4k + 4` of its signs lane. The size of the eight super-blocks it replaces.
pub const IQ3_S_TILE: usize = 880;

/// Bytes of one IQ3_S tile decoded for a prefill chunk (never stored in a model): per element
/// group `c`, at `288c`, the eight rows' scales `d · (1 + 2s)` (f32), then eight vectors of
/// their values plus 128 as unsigned bytes (vector `k`, lane `j`: row `j`'s elements
/// `32c + 4k..32c + 4k + 4`).
pub const IQ3_S_DEC_TILE: usize = 2304;

/// Bytes of one IQ2_S tile, the stored bytes of eight rows' super-blocks rearranged: the rows'
/// `d` (f16, at `2j`); their `scales` at [`IQ2S_SC`] (vector `v`, lane `j`: row `j`'s
/// `scales[4v..4v + 4]`); their `qh` at [`IQ2S_QH`] (vector `v`, lane `j`: `qh[4v..4v + 4]`);
/// their `signs` at [`IQ2S_SG`] (vector `c`, lane `j`: `signs[4c..4c + 4]`); their `qs` at
/// [`IQ2S_QS`] (vector `c`, lane `j`: `qs[4c..4c + 4]`). Chunk `l` of group `c` (elements
/// `32c + 8l..32c + 8l + 8`) of row `j` is then grid entry `qs[4c + l] | ((qh[c] >> 2l) & 3) << 8`
/// with sign byte `l` of its signs lane, and its scale is nibble `l / 2` of `scales[c]`. The
/// size of the eight super-blocks it replaces.
pub const IQ2_S_TILE: usize = 656;

/// Offset of an IQ2_S tile's scale vectors.
pub const IQ2S_SC: usize = 16;

/// Offset of an IQ2_S tile's qh vectors.
pub const IQ2S_QH: usize = 80;

/// Offset of an IQ2_S tile's sign vectors.
pub const IQ2S_SG: usize = 144;

/// Offset of an IQ2_S tile's qs vectors.
pub const IQ2S_QS: usize = 400;

/// Bytes of one IQ2_S tile decoded for a prefill chunk (never stored in a model): the eight
/// rows' `d / 8` (f32), then per element group `c`, at `32 + 320c`, the rows' odd scale
/// factors `2s + 1` of its two halves (i32, half 0's eight then half 1's), then eight vectors
/// of their values plus 128 as unsigned bytes (vector `k`, lane `j`: row `j`'s elements
/// `32c + 4k..32c + 4k + 4`).
pub const IQ2_S_DEC_TILE: usize = 2592;

/// Offset of an IQ3_S tile's scale vector.
pub const IQ3S_SC: usize = 16;

/// Offset of an IQ3_S tile's qh vectors.
pub const IQ3S_QH: usize = 48;

/// Offset of an IQ3_S tile's sign vectors.
pub const IQ3S_SG: usize = 112;

/// Offset of an IQ3_S tile's qs vectors.
pub const IQ3S_QS: usize = 368;

/// Offset of a Q3_K tile's scale vectors.
pub const Q3K_SC: usize = 16;

/// Offset of a Q3_K tile's hmask vectors.
pub const Q3K_HM: usize = 112;

/// Offset of a Q3_K tile's qs vectors.
pub const Q3K_QS: usize = 368;

/// Bytes of one tile of `dtype` (0 for formats without tiles).
pub(crate) fn tile_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Q4_0 => Q4_0_TILE,
        DType::Q4_1 => Q4_1_TILE,
        DType::Q5_0 => Q5_0_TILE,
        DType::Q5_1 => Q5_1_TILE,
        DType::Q8_0 => Q8_0_TILE,
        DType::Q4_K => Q4_K_TILE,
        DType::Q6_K => Q6_K_TILE,
        DType::MXFP4 => MXFP4_TILE,
        DType::IQ4_XS => IQ4_XS_TILE,
        DType::IQ4_NL => Q4_0_TILE,
        DType::Q3_K => Q3_K_TILE,
        DType::Q2_K => Q2_K_TILE,
        DType::IQ3_S => IQ3_S_TILE,
        DType::IQ2_S => IQ2_S_TILE,
        _ => 0,
    }
}
