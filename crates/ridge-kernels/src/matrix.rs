//! A borrowed weight matrix in its stored format and layout: the view every product takes,
//! kept apart from the products (`matmul`) and the packing (`packed`) that both use it.

use crate::packed::layout::{tile_bytes, TILE_ROWS};
use crate::DType;

/// A borrowed weight matrix: `rows` rows of `cols` elements in `dtype` layout.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    /// Storage format.
    pub dtype: DType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// `rows * dtype.row_bytes(cols)` bytes.
    pub data: &'a [u8],
    /// How the blocks are arranged in `data`.
    pub layout: Layout,
}

/// The arrangement of a matrix's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// As stored in GGUF: row after row.
    Rows,
    /// Tiles of eight rows ([`crate::packed`]), made at load by
    /// [`PackedMatrix::pack`](crate::packed::PackedMatrix::pack).
    Tiles8,
}

impl<'a> WeightMatrix<'a> {
    /// Checks the geometry; `None` if `data` does not hold exactly `rows` rows of `cols`.
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> Option<Self> {
        if !cols.is_multiple_of(dtype.block_size()) || data.len() != rows * dtype.row_bytes(cols) {
            return None;
        }
        Some(WeightMatrix {
            dtype,
            rows,
            cols,
            data,
            layout: Layout::Rows,
        })
    }

    /// The matrix of its first `n` rows (a prefix of the data in either layout), or `None`
    /// when `n` exceeds the rows or, for tiles, is not a whole number of tile groups.
    pub fn first_rows(&self, n: usize) -> Option<WeightMatrix<'a>> {
        self.row_range(0, n)
    }

    /// The matrix of rows `r0 .. r0 + n` (one expert of a mixture's stacked expert tensor,
    /// a restricted head), or `None` when they exceed the rows or, for tiles, do not start
    /// and end on tile groups.
    pub fn row_range(&self, r0: usize, n: usize) -> Option<WeightMatrix<'a>> {
        let bytes_of = |rows: usize| match self.layout {
            Layout::Rows => Some(rows * self.dtype.row_bytes(self.cols)),
            Layout::Tiles8 if rows.is_multiple_of(TILE_ROWS) => Some(
                rows / TILE_ROWS * (self.cols / self.dtype.block_size()) * tile_bytes(self.dtype),
            ),
            Layout::Tiles8 => None,
        };
        let end = r0.checked_add(n).filter(|&e| e <= self.rows)?;
        let (b0, b1) = (bytes_of(r0)?, bytes_of(end)?);
        Some(WeightMatrix {
            rows: n,
            data: &self.data[b0..b1],
            ..*self
        })
    }

    /// The bytes of row `r` (stored layout only).
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        debug_assert_eq!(self.layout, Layout::Rows);
        let rb = self.dtype.row_bytes(self.cols);
        &self.data[r * rb..(r + 1) * rb]
    }
}
