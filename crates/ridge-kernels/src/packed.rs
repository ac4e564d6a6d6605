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
//! Q4_1 tile (one block of 32 elements for rows `8g..8g+8`, 160 bytes = the eight blocks it
//! replaces): the eight rows' f16 scales `d`, their f16 minimums `m`, then four 32-byte
//! vectors `V_k` (k = 0..4) whose lane `j` is row `j`'s quant bytes `4k..4k+4` — each byte's
//! low nibble is element `4k + i`, its high nibble element `16 + 4k + i`. Tiles are stored
//! group by group, each group's blocks in order, so a task streams one contiguous range.
//!
//! The copy is made once at load (the file's bytes are left untouched) and has exactly the
//! size of what it replaces.

use crate::{DType, WeightMatrix};

/// Rows per tile.
pub const TILE_ROWS: usize = 8;

/// Bytes of one Q4_1 tile.
pub const Q4_1_TILE: usize = 160;

/// 32 bytes, 32-byte aligned: the unit of a packed buffer (tiles start on vector boundaries).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Chunk([u8; 32]);

/// A weight matrix in the tiled layout, owning its bytes.
pub struct PackedMatrix {
    dtype: DType,
    rows: usize,
    cols: usize,
    buf: Vec<Chunk>,
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

/// True when `w` can be packed: a format with a tile layout and whole groups of rows.
pub fn packable(w: &WeightMatrix<'_>) -> bool {
    w.layout == crate::matmul::Layout::Rows
        && w.dtype == DType::Q4_1
        && w.rows > 0
        && w.rows.is_multiple_of(TILE_ROWS)
}

impl PackedMatrix {
    /// Repacks `w`; `None` if it is not [`packable`].
    pub fn pack(w: &WeightMatrix<'_>) -> Option<PackedMatrix> {
        if !packable(w) {
            return None;
        }
        let bytes = w.data.len();
        let mut buf = vec![Chunk([0; 32]); bytes.div_ceil(32)];
        // SAFETY: `buf` owns at least `bytes` initialised bytes; Chunk is plain bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, bytes) };
        let nb = w.cols / 32;
        for g in 0..w.rows / TILE_ROWS {
            for b in 0..nb {
                let tile = &mut out[(g * nb + b) * Q4_1_TILE..][..Q4_1_TILE];
                for j in 0..TILE_ROWS {
                    let blk = &w.row(g * TILE_ROWS + j)[b * 20..][..20];
                    tile[2 * j..2 * j + 2].copy_from_slice(&blk[0..2]);
                    tile[16 + 2 * j..18 + 2 * j].copy_from_slice(&blk[2..4]);
                    for k in 0..4 {
                        let at = 32 + 32 * k + 4 * j;
                        tile[at..at + 4].copy_from_slice(&blk[4 + 4 * k..8 + 4 * k]);
                    }
                }
            }
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
        let len = self.dtype.row_bytes(self.cols) * self.rows;
        // SAFETY: `buf` holds at least `len` initialised bytes (see `pack`).
        let data = unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const u8, len) };
        WeightMatrix {
            dtype: self.dtype,
            rows: self.rows,
            cols: self.cols,
            data,
            layout: crate::matmul::Layout::Tiles8,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.dtype.row_bytes(self.cols) * self.rows
    }
}

/// Row `r` of a tiled matrix back in the stored layout, into `out` (`row_bytes(cols)` bytes):
/// the scalar path and the f32-activation path read rows this way.
pub(crate) fn unpack_row(w: &WeightMatrix<'_>, r: usize, out: &mut [u8]) {
    debug_assert_eq!(w.dtype, DType::Q4_1);
    let nb = w.cols / 32;
    let (g, j) = (r / TILE_ROWS, r % TILE_ROWS);
    for b in 0..nb {
        let tile = &w.data[(g * nb + b) * Q4_1_TILE..][..Q4_1_TILE];
        let blk = &mut out[b * 20..][..20];
        blk[0..2].copy_from_slice(&tile[2 * j..2 * j + 2]);
        blk[2..4].copy_from_slice(&tile[16 + 2 * j..18 + 2 * j]);
        for k in 0..4 {
            let at = 32 + 32 * k + 4 * j;
            blk[4 + 4 * k..8 + 4 * k].copy_from_slice(&tile[at..at + 4]);
        }
    }
}
