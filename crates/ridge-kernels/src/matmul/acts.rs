//! How a product's activations are held: the precision a caller asks for, the path a matrix
//! takes, and the activation rows in that path's form. Kept below the products and their
//! kernels, which all read them.

use crate::act::blocks::{Act16Block, ActBlock, ActSplit16};
use crate::matrix::Layout;
use crate::DType;

/// How activations meet quantized weights.
///
/// `Int8` quantizes each activation row to 8-bit blocks once per call and runs integer dot
/// products (fast); `F32` keeps activations in f32 and dequantizes weights in registers (exact
/// up to f32 rounding, for the matrices where 8-bit activations cost measurable accuracy).
/// Float weight formats always use f32 activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActPrecision {
    /// 8-bit activation blocks.
    Int8,
    /// 16-bit activation blocks (every quantized format; Q6_K only in tiles): integer dot
    /// products nearly as fast as 8-bit, with rounding
    /// ~256× finer. Other formats take the f32 path.
    Int16,
    /// f32 activations.
    F32,
}

/// The dot-product path one call takes (resolved from the format and the precision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// 8-bit activation blocks.
    Int8,
    /// 16-bit activation blocks.
    Int16,
    /// f32 activations.
    F32,
}

impl Path {
    /// The path of a `dtype` matrix in `layout` at `precision`.
    pub(crate) fn of(dtype: DType, precision: ActPrecision, layout: Layout) -> Path {
        // Every quantized format has a 16-bit kernel; Q6_K only in tiles.
        let has16 = dtype != DType::Q6_K || layout == Layout::Tiles8;
        match precision {
            _ if !dtype.is_quantized() => Path::F32,
            ActPrecision::Int8 => Path::Int8,
            ActPrecision::Int16 if has16 => Path::Int16,
            ActPrecision::Int16 | ActPrecision::F32 => Path::F32,
        }
    }
}

/// One activation row in the form its path reads: 8-bit blocks, 16-bit blocks or f32.
#[derive(Clone, Copy)]
pub(crate) struct Acts<'x> {
    /// 8-bit blocks (empty unless the path is 8-bit).
    pub q8: &'x [ActBlock],
    /// 16-bit blocks (empty unless the path is 16-bit).
    pub q16: &'x [Act16Block],
    /// f32 values (empty unless the path is f32).
    pub f: &'x [f32],
}

/// The activations of one call, every row in its path's form.
#[derive(Clone, Copy)]
pub(crate) struct CallActs<'x> {
    /// The path every row takes.
    pub path: Path,
    /// Elements per row.
    pub cols: usize,
    /// 8-bit blocks of every row.
    pub q8: &'x [ActBlock],
    /// 16-bit blocks of every row.
    pub q16: &'x [Act16Block],
    /// 16-bit blocks split into bytes (tiled 16-bit paths).
    pub s16: &'x [ActSplit16],
    /// f32 values of every row.
    pub f: &'x [f32],
}

impl<'x> CallActs<'x> {
    /// Activation row `t` (only the slice its path reads is non-empty).
    #[inline]
    pub(crate) fn row(&self, t: usize) -> Acts<'x> {
        let (cols, nb) = (self.cols, self.cols / 32);
        Acts {
            q8: if self.path == Path::Int8 {
                &self.q8[t * nb..(t + 1) * nb]
            } else {
                &[]
            },
            q16: if self.path == Path::Int16 {
                &self.q16[t * nb..(t + 1) * nb]
            } else {
                &[]
            },
            f: if self.path == Path::F32 {
                &self.f[t * cols..(t + 1) * cols]
            } else {
                &[]
            },
        }
    }
}
