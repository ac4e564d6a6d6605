//! Weights repacked at load into tiles of eight rows, for matrix products whose activations are
//! many rows (prefill, batched decode, speculative verification).
//!
//! Why: in the stored layout one row's block meets one activation block in a `pmaddubsw`
//! whose eight 32-bit lanes hold partial sums of that one row; every (row, token, block) then
//! pays a widening add, a conversion, a scale broadcast and a fused multiply-add on top of the
//! product itself — about six instructions for one `pmaddubsw`, and the profile showed the
//! kernel retiring ~6 multiply-adds per cycle where the core can do tens. In a tile the eight
//! lanes are eight rows: lane `j` of a 32-byte vector holds four consecutive quants of row
//! `j`, so one `pmaddubsw` against four activation bytes broadcast to every lane advances eight
//! rows at once, the 16-bit partial sums of a whole block stay in one register, and the
//! scales of the eight rows are one vector: the per-block overhead is paid once per eight rows
//! instead of once per row, and no horizontal sum is ever needed (lane `j` is output `j`).
//!
//! A tile holds one block of 32 elements for rows `8g..8g+8` and has exactly the size of the
//! eight blocks it replaces: first each f16 field of the block for the eight rows (Q4_1: the
//! scales `d`, then the minimums `m`; Q4_0 and Q8_0: the scales), 16 bytes per field, then the quant
//! bytes as 32-byte vectors `V_k` whose lane `j` is row `j`'s quant bytes `4k..4k+4` (Q4_0, Q4_1:
//! four vectors, each byte's low nibble element `4k + i`, its high nibble element
//! `16 + 4k + i`; Q8_0: eight vectors of signed bytes, element `4k + i`; Q5_0: its scales,
//! then its fifth bits for the eight rows arranged like the nibbles (see
//! `spread_high_bits`), then four nibble vectors as Q4_1's; MXFP4: the eight rows' e8m0 scale
//! bytes, then four nibble vectors as Q4_0's). Super-block formats tile a whole super-block of
//! eight rows (Q2_K, Q3_K, Q4_K, Q6_K, IQ2_S, IQ3_S, IQ4_XS: see their `*_TILE` constants).
//! Tiles are stored group by group, each group's blocks in order, so a task streams one contiguous range.
//!
//! The copy is made once at load (the file's bytes are left untouched).

use crate::matrix::{Layout, WeightMatrix};
use crate::{kquant, DType};
pub(crate) use layout::tile_bytes;

mod buffer;
pub mod layout;

use buffer::TileBuf;

pub use layout::{
    IQ2S_QH, IQ2S_QS, IQ2S_SC, IQ2S_SG, IQ2_S_TILE, IQ3S_QH, IQ3S_QS, IQ3S_SC, IQ3S_SG, IQ3_S_TILE,
    IQ4XS_QS, IQ4_XS_TILE, MXFP4_TILE, Q2K_QS, Q2K_SC, Q2_K_TILE, Q3K_HM, Q3K_QS, Q3K_SC,
    Q3_K_TILE, Q4_0_TILE, Q4_1_TILE, Q4_K_TILE, Q5_0_TILE, Q5_1_TILE, Q6K_HIGH, Q6K_LOW, Q6_K_TILE,
    Q8_0_TILE, TILE_ROWS,
};

/// A tiled format's block layout.
#[derive(Clone, Copy)]
enum Shape {
    /// f16 fields first (`fields` of them), for Q5_0 the 32 fifth bits (`high_bits`), then
    /// the quant bytes; `block` bytes in all.
    Simple {
        fields: usize,
        high_bits: bool,
        block: usize,
    },
    /// Q4_K (see [`Q4_K_TILE`]).
    Q4K,
    /// Q6_K (see [`Q6_K_TILE`]).
    Q6K,
    /// MXFP4 (see [`MXFP4_TILE`]).
    Mxfp4,
    /// IQ4_XS (see [`IQ4_XS_TILE`]).
    Iq4Xs,
    /// Q3_K (see [`Q3_K_TILE`]).
    Q3K,
    /// Q2_K (see [`Q2_K_TILE`]).
    Q2K,
    /// IQ3_S (see [`IQ3_S_TILE`]).
    Iq3S,
    /// IQ2_S (see [`IQ2_S_TILE`]).
    Iq2S,
}

impl Shape {
    fn of(dtype: DType) -> Option<Shape> {
        let simple = |fields, high_bits, block| {
            Some(Shape::Simple {
                fields,
                high_bits,
                block,
            })
        };
        match dtype {
            // IQ4_NL's block is Q4_0's (an f16 scale, 16 nibble bytes); only its codes differ.
            DType::Q4_0 | DType::IQ4_NL => simple(1, false, 18),
            DType::Q4_1 => simple(2, false, 20),
            DType::Q8_0 => simple(1, false, 34),
            DType::Q5_0 => simple(1, true, 22),
            DType::Q5_1 => simple(2, true, 24),
            DType::Q4_K => Some(Shape::Q4K),
            DType::Q6_K => Some(Shape::Q6K),
            DType::MXFP4 => Some(Shape::Mxfp4),
            DType::IQ4_XS => Some(Shape::Iq4Xs),
            DType::Q3_K => Some(Shape::Q3K),
            DType::Q2_K => Some(Shape::Q2K),
            DType::IQ3_S => Some(Shape::Iq3S),
            DType::IQ2_S => Some(Shape::Iq2S),
            _ => None,
        }
    }

    /// Bytes of one stored block.
    fn block(self) -> usize {
        match self {
            Shape::Simple { block, .. } => block,
            Shape::Q4K => 144,
            Shape::Q6K => 210,
            Shape::Mxfp4 => 17,
            Shape::Iq4Xs => 136,
            Shape::Q3K => 110,
            Shape::Q2K => 84,
            Shape::Iq3S => 110,
            Shape::Iq2S => 82,
        }
    }

    fn tile(self) -> usize {
        match self {
            Shape::Simple { block, .. } => TILE_ROWS * block,
            Shape::Q4K => Q4_K_TILE,
            Shape::Q6K => Q6_K_TILE,
            Shape::Mxfp4 => MXFP4_TILE,
            Shape::Iq4Xs => IQ4_XS_TILE,
            Shape::Q3K => Q3_K_TILE,
            Shape::Q2K => Q2_K_TILE,
            Shape::Iq3S => IQ3_S_TILE,
            Shape::Iq2S => IQ2_S_TILE,
        }
    }

    /// Moves one row's block between its stored form and its place in a tile (row `j`):
    /// `to_tile` copies `blk` into `tile`, else `tile` into `blk`.
    fn shuttle(self, tile: &mut [u8], j: usize, blk: &mut [u8], to_tile: bool) {
        let mv = |tile: &mut [u8], blk: &mut [u8], t: usize, b: usize, len: usize| {
            if to_tile {
                tile[t..t + len].copy_from_slice(&blk[b..b + len]);
            } else {
                blk[b..b + len].copy_from_slice(&tile[t..t + len]);
            }
        };
        if let Shape::Q6K = self {
            return q6k_shuttle(tile, j, blk, to_tile);
        }
        if let Shape::Mxfp4 = self {
            mv(tile, blk, j, 0, 1);
            for k in 0..4 {
                mv(tile, blk, 8 + 32 * k + 4 * j, 1 + 4 * k, 4);
            }
            return;
        }
        if let Shape::Iq3S = self {
            mv(tile, blk, 2 * j, 0, 2);
            mv(tile, blk, IQ3S_SC + 4 * j, 106, 4);
            for v in 0..2 {
                mv(tile, blk, IQ3S_QH + 32 * v + 4 * j, 66 + 4 * v, 4);
            }
            for c in 0..8 {
                mv(tile, blk, IQ3S_SG + 32 * c + 4 * j, 74 + 4 * c, 4);
                for u in 0..2 {
                    let t = IQ3S_QS + 32 * (2 * c + u) + 4 * j;
                    mv(tile, blk, t, 2 + 8 * c + 4 * u, 4);
                }
            }
            return;
        }
        if let Shape::Iq2S = self {
            mv(tile, blk, 2 * j, 0, 2);
            for v in 0..2 {
                mv(tile, blk, IQ2S_SC + 32 * v + 4 * j, 74 + 4 * v, 4);
                mv(tile, blk, IQ2S_QH + 32 * v + 4 * j, 66 + 4 * v, 4);
            }
            for c in 0..8 {
                mv(tile, blk, IQ2S_SG + 32 * c + 4 * j, 34 + 4 * c, 4);
                mv(tile, blk, IQ2S_QS + 32 * c + 4 * j, 2 + 4 * c, 4);
            }
            return;
        }
        if let Shape::Q2K = self {
            mv(tile, blk, 2 * j, 80, 2);
            mv(tile, blk, 16 + 2 * j, 82, 2);
            for v in 0..4 {
                mv(tile, blk, Q2K_SC + 32 * v + 4 * j, 4 * v, 4);
            }
            for k in 0..8 {
                for h in 0..2 {
                    let t = Q2K_QS + 32 * (8 * h + k) + 4 * j;
                    mv(tile, blk, t, 16 + 32 * h + 4 * k, 4);
                }
            }
            return;
        }
        if let Shape::Q3K = self {
            mv(tile, blk, 2 * j, 108, 2);
            for v in 0..3 {
                mv(tile, blk, Q3K_SC + 32 * v + 4 * j, 96 + 4 * v, 4);
            }
            for k in 0..8 {
                mv(tile, blk, Q3K_HM + 32 * k + 4 * j, 4 * k, 4);
                for h in 0..2 {
                    let t = Q3K_QS + 32 * (8 * h + k) + 4 * j;
                    mv(tile, blk, t, 32 + 32 * h + 4 * k, 4);
                }
            }
            return;
        }
        if let Shape::Iq4Xs = self {
            mv(tile, blk, 2 * j, 0, 2);
            mv(tile, blk, 16 + 2 * j, 2, 2);
            mv(tile, blk, 32 + 4 * j, 4, 4);
            for c in 0..8 {
                for k in 0..4 {
                    mv(
                        tile,
                        blk,
                        IQ4XS_QS + 128 * c + 32 * k + 4 * j,
                        8 + 16 * c + 4 * k,
                        4,
                    );
                }
            }
            return;
        }
        let Shape::Simple {
            fields,
            high_bits,
            block,
        } = self
        else {
            mv(tile, blk, 2 * j, 0, 2);
            mv(tile, blk, 16 + 2 * j, 2, 2);
            if to_tile {
                let (sc, m) = kquant::scales_mins(&blk[4..16]);
                for s in 0..8 {
                    tile[32 + 8 * s + j] = kquant::lane(sc, s);
                    tile[96 + 8 * s + j] = kquant::lane(m, s);
                }
            } else {
                let sc = std::array::from_fn(|s| tile[32 + 8 * s + j]);
                let m = std::array::from_fn(|s| tile[96 + 8 * s + j]);
                blk[4..16].copy_from_slice(&kquant::pack_scales_mins(&sc, &m));
            }
            for p in 0..4 {
                for k in 0..8 {
                    mv(
                        tile,
                        blk,
                        160 + 256 * p + 32 * k + 4 * j,
                        16 + 32 * p + 4 * k,
                        4,
                    );
                }
            }
            return;
        };
        for f in 0..fields {
            mv(tile, blk, 16 * f + 2 * j, 2 * f, 2);
        }
        let (mut head, mut src) = (16 * fields, 2 * fields);
        if high_bits {
            let (h, b) = (&mut tile[head + 4 * j..][..4], &mut blk[src..][..4]);
            if to_tile {
                h.copy_from_slice(&spread_high_bits(u32::from_le_bytes([
                    b[0], b[1], b[2], b[3],
                ])));
            } else {
                b.copy_from_slice(&gather_high_bits([h[0], h[1], h[2], h[3]]).to_le_bytes());
            }
            head += 32;
            src += 4;
        }
        for k in 0..(block - src) / 4 {
            mv(tile, blk, head + 32 * k + 4 * j, src + 4 * k, 4);
        }
    }
}

/// [`Shape::shuttle`] for Q6_K: the quants are regrouped element by element (see
/// [`Q6_K_TILE`]).
fn q6k_shuttle(tile: &mut [u8], j: usize, blk: &mut [u8], to_tile: bool) {
    // Element e's byte in the low-nibble and high-bit vectors, and its shifts there.
    let low_at = |e: usize| (Q6K_LOW + 32 * (e / 4 % 32) + 4 * j + e % 4, 4 * (e / 128));
    let high_at = |e: usize| (Q6K_HIGH + 32 * (e / 4 % 16) + 4 * j + e % 4, 2 * (e / 64));
    if to_tile {
        tile[2 * j..2 * j + 2].copy_from_slice(&blk[208..210]);
        for s in 0..16 {
            tile[16 + 8 * s + j] = blk[192 + s];
        }
        for e in 0..256 {
            let q = kquant::q6(blk, e);
            let (l, ls) = low_at(e);
            let (h, hs) = high_at(e);
            tile[l] = tile[l] & !(0x0F << ls) | (q & 0x0F) << ls;
            tile[h] = tile[h] & !(0x03 << hs) | (q >> 4) << hs;
        }
    } else {
        blk[208..210].copy_from_slice(&tile[2 * j..2 * j + 2]);
        for s in 0..16 {
            blk[192 + s] = tile[16 + 8 * s + j];
        }
        blk[..192].fill(0);
        for e in 0..256 {
            let (l, ls) = low_at(e);
            let (h, hs) = high_at(e);
            let (lo, hi) = ((tile[l] >> ls) & 0x0F, (tile[h] >> hs) & 0x03);
            // Stored layout (see `kquant`): half h, element l of it.
            let (half, k) = (e / 128, e % 128);
            blk[64 * half + k % 64] |= lo << (4 * (k / 64));
            blk[128 + 32 * half + k % 32] |= hi << (2 * (k / 32));
        }
    }
}

/// A Q5_0 block's fifth bits (bit `e` of `qh` belongs to element `e`) arranged like its
/// quant bytes in the tile: byte `i` holds in bit `k` the bit of element `4k + i` (the low
/// nibble of byte `i` of vector `V_k`) and in bit `4 + k` that of element `16 + 4k + i` (its
/// high nibble), so a kernel moves them into place with one shift and mask per vector.
fn spread_high_bits(qh: u32) -> [u8; 4] {
    let mut out = [0u8; 4];
    for (i, o) in out.iter_mut().enumerate() {
        for k in 0..4 {
            *o |= (((qh >> (4 * k + i)) & 1) as u8) << k;
            *o |= (((qh >> (16 + 4 * k + i)) & 1) as u8) << (4 + k);
        }
    }
    out
}

/// The inverse of [`spread_high_bits`].
fn gather_high_bits(h: [u8; 4]) -> u32 {
    let mut qh = 0u32;
    for (i, &b) in h.iter().enumerate() {
        for k in 0..4 {
            qh |= (((b >> k) & 1) as u32) << (4 * k + i);
            qh |= (((b >> (4 + k)) & 1) as u32) << (16 + 4 * k + i);
        }
    }
    qh
}

/// A weight matrix in the tiled layout, owning its bytes.
pub struct PackedMatrix {
    dtype: DType,
    rows: usize,
    cols: usize,
    buf: TileBuf,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("dtype", &self.dtype)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

/// Whether tiles of `dtype` run faster than its stored rows on `isa`'s kernels, so a model
/// should pack it there. True for every tiled format but IQ3_S and IQ2_S off the AVX-512
/// path: their tile kernels fetch grid entries by gathers, which AVX-512 cores run cheaply and
/// older AVX2 cores do not (IQ3_S's AVX2 tile kernel on a Zen 4 multiplied 64 tokens at 26
/// GMAC/s against the stored rows' 35; on the AVX-512 path tiles took prefill 36 → 56 and
/// decode 9.5 → 20, IQ2_S's 34.8 → 81 and 12.7 → 24).
pub fn tiles_pay_on(dtype: DType, isa: crate::Isa) -> bool {
    !matches!(dtype, DType::IQ3_S | DType::IQ2_S) || isa.avx512()
}

/// True when `w` can be packed: a format with a tile layout and whole groups of rows.
pub fn packable(w: &WeightMatrix<'_>) -> bool {
    w.layout == Layout::Rows
        && Shape::of(w.dtype).is_some()
        && w.rows > 0
        && w.rows.is_multiple_of(TILE_ROWS)
}

impl PackedMatrix {
    /// Repacks `w`; `None` if it is not [`packable`].
    pub fn pack(w: &WeightMatrix<'_>) -> Option<PackedMatrix> {
        Self::pack_with(w, |_, _| {})
    }

    /// [`PackedMatrix::pack`], calling `done(r0, r1)` after rows `r0..r1` of `w` have been
    /// copied (in slabs of a few MB, in order), so a caller can release the source pages as it
    /// goes instead of holding both copies of a large matrix at once.
    pub fn pack_with(
        w: &WeightMatrix<'_>,
        mut done: impl FnMut(usize, usize),
    ) -> Option<PackedMatrix> {
        if !packable(w) {
            return None;
        }
        let shape = Shape::of(w.dtype)?;
        let nb = w.cols / w.dtype.block_size();
        let (tb, bb) = (shape.tile(), shape.block());
        let groups = w.rows / TILE_ROWS;
        let bytes = groups * nb * tb;
        let mut buf = TileBuf::zeroed(bytes);
        let out = crate::pool::SharedMut(buf.bytes_mut().as_mut_ptr());
        // Slabs of ~4 MB of tiles, a group per task within each (the output head of a large
        // vocabulary is ~200 MB).
        let slab = (4 << 20) / (nb * tb).max(1) + 1;
        let mut g0 = 0;
        while g0 < groups {
            let g1 = (g0 + slab).min(groups);
            crate::pool::parallel_for(g1 - g0, |i| {
                let g = g0 + i;
                // SAFETY: task g alone writes group g's tiles, bytes g·nb·tb..(g+1)·nb·tb of
                // the buffer, which outlives the loop.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(out.ptr().add(g * nb * tb), nb * tb) };
                let mut blk = [0u8; 256];
                for (b, tile) in out.chunks_exact_mut(tb).enumerate() {
                    for j in 0..TILE_ROWS {
                        blk[..bb].copy_from_slice(&w.row(g * TILE_ROWS + j)[b * bb..][..bb]);
                        shape.shuttle(tile, j, &mut blk[..bb], true);
                    }
                }
            });
            done(g0 * TILE_ROWS, g1 * TILE_ROWS);
            g0 = g1;
        }
        Some(PackedMatrix {
            dtype: w.dtype,
            rows: w.rows,
            cols: w.cols,
            buf,
        })
    }

    /// The matrix as the products take it.
    pub fn view(&self) -> WeightMatrix<'_> {
        let data = self.buf.bytes();
        WeightMatrix {
            dtype: self.dtype,
            rows: self.rows,
            cols: self.cols,
            data,
            layout: Layout::Tiles8,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        tile_bytes(self.dtype) * self.rows / TILE_ROWS * (self.cols / self.dtype.block_size())
    }
}

/// Row `r` of a tiled matrix back in the stored layout, into `out` (`row_bytes(cols)` bytes):
/// the scalar path and the f32-activation path read rows this way.
pub(crate) fn unpack_row(w: &WeightMatrix<'_>, r: usize, out: &mut [u8]) {
    let Some(shape) = Shape::of(w.dtype) else {
        unreachable!("only tiled formats are packed")
    };
    let (tb, bb, nb) = (shape.tile(), shape.block(), w.cols / w.dtype.block_size());
    let (g, j) = (r / TILE_ROWS, r % TILE_ROWS);
    let mut tile = vec![0u8; tb];
    for b in 0..nb {
        tile.copy_from_slice(&w.data[(g * nb + b) * tb..][..tb]);
        shape.shuttle(&mut tile, j, &mut out[b * bb..][..bb], false);
    }
}

impl PackedMatrix {
    /// `w` (stored rows or tiles, any format) re-encoded in `to` and packed: each row
    /// dequantized to f32 and quantized again. Lossy by design — for a draft model, whose
    /// guesses are checked by the target, fewer bytes per guess can be worth a few more
    /// misses. `None` when `to` has no tile layout or the rows are not whole tile groups.
    pub fn requantize(w: &WeightMatrix<'_>, to: DType) -> Option<PackedMatrix> {
        if Shape::of(to).is_none() || !w.cols.is_multiple_of(to.block_size()) {
            return None;
        }
        let (src_rb, dst_rb) = (w.dtype.row_bytes(w.cols), to.row_bytes(w.cols));
        let mut data = vec![0u8; w.rows * dst_rb];
        let per_task = 64;
        let out = crate::pool::SharedMut(data.as_mut_ptr());
        crate::pool::parallel_for(w.rows.div_ceil(per_task), |task| {
            let (mut raw, mut f) = (vec![0u8; src_rb], vec![0f32; w.cols]);
            for r in task * per_task..((task + 1) * per_task).min(w.rows) {
                let row: &[u8] = match w.layout {
                    Layout::Rows => w.row(r),
                    Layout::Tiles8 => {
                        unpack_row(w, r, &mut raw);
                        &raw
                    }
                };
                crate::blocks::dequantize_row(w.dtype, row, &mut f);
                let q = crate::blocks::quantize_row(to, &f);
                // SAFETY: row r's dst_rb bytes lie inside `data` (rows · dst_rb long, which
                // outlives parallel_for), and only the task owning r writes them.
                unsafe {
                    std::ptr::copy_nonoverlapping(q.as_ptr(), out.ptr().add(r * dst_rb), dst_rb)
                };
            }
        });
        PackedMatrix::pack(&WeightMatrix::new(to, w.rows, w.cols, &data)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The geometry the kernels address tiles by agrees with the packing code's layouts.
    #[test]
    fn tile_bytes_match_the_packed_layouts() {
        use DType::*;
        let all = [
            F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS,
            Q3_K, Q2_K, IQ3_S, IQ2_S, IQ2_XS,
        ];
        for d in all {
            assert_eq!(tile_bytes(d), Shape::of(d).map_or(0, Shape::tile), "{d:?}");
        }
    }
}
