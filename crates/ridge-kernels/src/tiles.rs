//! The one interface of the tile kernels: what a tiled format's arithmetic is for an
//! instruction set ([`Tiles`]), what an instruction set's pass over a row group is
//! ([`TileIsa`]), and the one place that picks the kernel for a matrix's format and its
//! activations' width ([`TilePass::pass`]).
//!
//! Why one trait for every instruction set: the AVX2, AVX-512 VNNI and 512-bit pair kernels
//! differ only in their registers (`__m256` or `__m512` accumulators, one tile pointer or two)
//! and their instructions; the loop over a group's tiles, the prefetch, where outputs go and
//! which format takes which activations are the same. Each instruction set's folder
//! (`x86::avx2`, `x86::avx512`; one day `arm::neon`, `x86::amx`) implements [`TileIsa`] for
//! its marker type and [`Tiles`] for the formats it has, and the drivers here serve them all:
//! adding an instruction set adds a folder, not arms to a match.
//!
//! Tiles themselves are laid out by [`crate::packed`] (eight rows interleaved per block).

use crate::act::blocks::{Act16Block, ActBlock, ActSplit16};
use crate::matmul::acts::{CallActs, Path};
use crate::matrix::WeightMatrix;
use crate::packed::layout::{
    tile_bytes, IQ2_S_DEC_TILE, IQ2_S_TILE, IQ3_S_DEC_TILE, IQ3_S_TILE, IQ4_XS_TILE, MXFP4_TILE,
    Q2_K_TILE, Q3_K_TILE, Q4_0_TILE, Q4_1_TILE, Q4_K_TILE, Q5_0_TILE, Q5_1_TILE, Q6_K_TILE,
    Q8_0_TILE, TILE_ROWS,
};
use crate::pool::SharedMut;
use crate::DType;

/// Q4_0 tiles.
pub(crate) struct Q40;
/// Q4_1 tiles.
pub(crate) struct Q41;
/// Q8_0 tiles.
pub(crate) struct Q80;
/// Q5_0 tiles.
pub(crate) struct Q50;
/// Q5_1 tiles.
pub(crate) struct Q51;
/// Q4_K tiles.
pub(crate) struct Q4K;
/// Q6_K tiles.
pub(crate) struct Q6K;
/// MXFP4 tiles.
pub(crate) struct Mx4;
/// IQ4_XS tiles.
pub(crate) struct Iq4Xs;
/// Q3_K tiles.
pub(crate) struct Q3K;
/// Q2_K tiles.
pub(crate) struct Q2K;
/// IQ3_S tiles.
pub(crate) struct Iq3S;
/// IQ3_S tiles decoded for a prefill chunk (`x86::avx512::decoded`).
pub(crate) struct Iq3SDec;
/// IQ2_S tiles.
pub(crate) struct Iq2S;
/// IQ2_S tiles decoded for a prefill chunk (`x86::avx512::decoded`).
pub(crate) struct Iq2SDec;
/// IQ4_NL tiles (Q4_0's layout).
pub(crate) struct Iq4Nl;

/// A tiled format's geometry, the same on every instruction set.
pub(crate) trait TileFormat {
    /// Bytes of one tile.
    const BYTES: usize;
    /// Activation blocks one tile spans (8 for a 256-element super-block).
    const SPAN: usize;
}

macro_rules! tile_format {
    ($($f:ty => $bytes:expr, $span:expr;)*) => {
        $(impl TileFormat for $f {
            const BYTES: usize = $bytes;
            const SPAN: usize = $span;
        })*
    };
}

tile_format! {
    Q40 => Q4_0_TILE, 1;
    Q41 => Q4_1_TILE, 1;
    Q80 => Q8_0_TILE, 1;
    Q50 => Q5_0_TILE, 1;
    Q51 => Q5_1_TILE, 1;
    Q4K => Q4_K_TILE, 8;
    Q6K => Q6_K_TILE, 8;
    Mx4 => MXFP4_TILE, 1;
    Iq4Xs => IQ4_XS_TILE, 8;
    Q3K => Q3_K_TILE, 8;
    Q2K => Q2_K_TILE, 8;
    Iq3S => IQ3_S_TILE, 8;
    Iq3SDec => IQ3_S_DEC_TILE, 8;
    Iq2S => IQ2_S_TILE, 8;
    Iq2SDec => IQ2_S_DEC_TILE, 8;
    Iq4Nl => Q4_0_TILE, 1;
}

/// An instruction set's way of running tile kernels: its registers and its pass over the
/// tiles of one or two row groups.
pub(crate) trait TileIsa: Sized {
    /// Where a pass reads: one group's tiles, or two groups' side by side.
    type Src: Copy;
    /// One token's accumulator.
    type Acc: Copy;
    /// One token's outputs of a pass: `TILE_ROWS · GROUPS` floats (an 8- or 16-float array,
    /// so a 256-bit pass neither zeroes nor copies lanes it never writes).
    type Out: Copy + AsRef<[f32]>;
    /// Row groups one pass covers (outputs `TILE_ROWS · GROUPS` rows per token).
    const GROUPS: usize;

    /// The source of groups `g, g + 1, …` whose first tile is at `p`, `group_bytes` apart.
    fn src(p: *const u8, group_bytes: usize) -> Self::Src;

    /// Format `F`'s tiles at `src` (`x[t].len() / F::SPAN` per group) against `T` activation
    /// rows: `out[t][j]` = row `j` of the pass's groups · activation row `t`.
    ///
    /// # Safety
    /// The CPU has this instruction set (the caller holds an [`crate::Isa`] of it); `src`
    /// points at `x[t].len() / F::SPAN` (the same for every `t`) tiles of `F` per group.
    unsafe fn run<A, F: Tiles<Self, A>, const T: usize>(
        src: Self::Src,
        x: [&[A]; T],
    ) -> [Self::Out; T];
}

/// A tiled format's arithmetic on instruction set `I` for one tile against `T` activation
/// rows of type `A`; the loop over a group's tiles, the prefetch and the output are
/// [`TileIsa::run`]'s, the same for every format.
pub(crate) trait Tiles<I: TileIsa, A>: TileFormat {
    /// Adds tile `i` (at `src`, against activation blocks `i·SPAN..`) into `acc`.
    ///
    /// # Safety
    /// As [`TileIsa::run`]; `i` is below the group's tile count.
    unsafe fn tile<const T: usize>(src: I::Src, x: &[&[A]; T], i: usize, acc: &mut [I::Acc; T]);
}

/// An activation block type the tile kernels take: its scale and quant sum.
pub(crate) trait TileAct {
    /// Scale.
    fn d(&self) -> f32;
    /// `d · Σq`, precomputed at quantization.
    fn dsum(&self) -> f32;
}

impl TileAct for ActBlock {
    #[inline(always)]
    fn d(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    fn dsum(&self) -> f32 {
        self.dsum
    }
}

impl TileAct for ActSplit16 {
    #[inline(always)]
    fn d(&self) -> f32 {
        self.d
    }
    #[inline(always)]
    fn dsum(&self) -> f32 {
        self.dsum
    }
}

/// Whether tiles of `dtype` have kernels for activations of `path` (every tiled format with 8-
/// or 16-bit activations; f32 activations unpack the rows instead).
pub(crate) fn has_kernel(dtype: DType, path: Path) -> bool {
    matches!(
        (dtype, path),
        (
            DType::Q4_0
                | DType::Q4_1
                | DType::Q5_0
                | DType::Q5_1
                | DType::Q8_0
                | DType::Q4_K
                | DType::Q6_K
                | DType::MXFP4
                | DType::IQ4_NL
                | DType::IQ4_XS
                | DType::Q3_K
                | DType::Q2_K
                | DType::IQ3_S
                | DType::IQ2_S,
            Path::Int8 | Path::Int16
        )
    )
}

/// Tokens `t..t + T`'s activations in every form a tile kernel reads (the other path's rows
/// are empty).
pub(crate) struct PassActs<'x, const T: usize> {
    /// Whether the path is 16-bit.
    pub i16: bool,
    /// 8-bit blocks.
    pub x8: [&'x [ActBlock]; T],
    /// 16-bit blocks split into bytes (formats whose 16-bit kernels take bytes).
    pub s16: [&'x [ActSplit16]; T],
    /// 16-bit blocks (Q8_0, MXFP4, IQ4_NL, IQ4_XS, Q3_K, Q2_K, IQ3_S, IQ2_S).
    pub x16: [&'x [Act16Block]; T],
}

impl<'x, const T: usize> PassActs<'x, T> {
    /// Tokens `t..t + T` of one call's activations.
    pub(crate) fn of(a: &CallActs<'x>, t: usize) -> Self {
        let nb = a.cols / 32;
        let i16 = a.path == Path::Int16;
        PassActs {
            i16,
            x8: std::array::from_fn(|j| a.row(t + j).q8),
            s16: std::array::from_fn(|j| match i16 {
                true => &a.s16[(t + j) * nb..(t + j + 1) * nb],
                false => &[],
            }),
            x16: std::array::from_fn(|j| a.row(t + j).q16),
        }
    }
}

/// An instruction set that has every tiled format's kernels, for both activation widths.
pub(crate) trait TilePass: TileIsa {
    /// One pass over the groups at `src` for the format `dtype` names: the one match from a
    /// matrix's format and activation width to its kernel.
    ///
    /// # Safety
    /// As [`TileIsa::run`]; [`has_kernel`] holds for `dtype` and `a`'s path; `src` holds
    /// `dtype`'s tiles.
    unsafe fn pass<const T: usize>(
        dtype: DType,
        a: &PassActs<'_, T>,
        src: Self::Src,
    ) -> [Self::Out; T];
}

impl<I> TilePass for I
where
    I: TileIsa,
    Q80: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Mx4: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Iq4Xs: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Q3K: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Q2K: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Iq3S: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Iq2S: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Iq4Nl: Tiles<I, ActBlock> + Tiles<I, Act16Block>,
    Q40: Tiles<I, ActBlock> + Tiles<I, ActSplit16>,
    Q41: Tiles<I, ActBlock> + Tiles<I, ActSplit16>,
    Q50: Tiles<I, ActBlock> + Tiles<I, ActSplit16>,
    Q51: Tiles<I, ActBlock> + Tiles<I, ActSplit16>,
    Q4K: Tiles<I, ActBlock> + Tiles<I, ActSplit16>,
    Q6K: Tiles<I, ActBlock> + Tiles<I, ActSplit16>,
{
    #[inline(always)]
    unsafe fn pass<const T: usize>(dtype: DType, a: &PassActs<'_, T>, src: I::Src) -> [I::Out; T] {
        let i16 = a.i16;
        match dtype {
            DType::Q8_0 if i16 => I::run::<_, Q80, T>(src, a.x16),
            DType::Q8_0 => I::run::<_, Q80, T>(src, a.x8),
            DType::MXFP4 if i16 => I::run::<_, Mx4, T>(src, a.x16),
            DType::MXFP4 => I::run::<_, Mx4, T>(src, a.x8),
            DType::IQ4_XS if i16 => I::run::<_, Iq4Xs, T>(src, a.x16),
            DType::IQ4_XS => I::run::<_, Iq4Xs, T>(src, a.x8),
            DType::Q3_K if i16 => I::run::<_, Q3K, T>(src, a.x16),
            DType::Q3_K => I::run::<_, Q3K, T>(src, a.x8),
            DType::Q2_K if i16 => I::run::<_, Q2K, T>(src, a.x16),
            DType::Q2_K => I::run::<_, Q2K, T>(src, a.x8),
            DType::IQ3_S if i16 => I::run::<_, Iq3S, T>(src, a.x16),
            DType::IQ3_S => I::run::<_, Iq3S, T>(src, a.x8),
            DType::IQ2_S if i16 => I::run::<_, Iq2S, T>(src, a.x16),
            DType::IQ2_S => I::run::<_, Iq2S, T>(src, a.x8),
            DType::IQ4_NL if i16 => I::run::<_, Iq4Nl, T>(src, a.x16),
            DType::IQ4_NL => I::run::<_, Iq4Nl, T>(src, a.x8),
            DType::Q5_0 if i16 => I::run::<_, Q50, T>(src, a.s16),
            DType::Q5_0 => I::run::<_, Q50, T>(src, a.x8),
            DType::Q5_1 if i16 => I::run::<_, Q51, T>(src, a.s16),
            DType::Q5_1 => I::run::<_, Q51, T>(src, a.x8),
            DType::Q4_0 if i16 => I::run::<_, Q40, T>(src, a.s16),
            DType::Q4_0 => I::run::<_, Q40, T>(src, a.x8),
            DType::Q4_1 if i16 => I::run::<_, Q41, T>(src, a.s16),
            DType::Q4_1 => I::run::<_, Q41, T>(src, a.x8),
            DType::Q4_K if i16 => I::run::<_, Q4K, T>(src, a.s16),
            DType::Q4_K => I::run::<_, Q4K, T>(src, a.x8),
            DType::Q6_K if i16 => I::run::<_, Q6K, T>(src, a.s16),
            _ => I::run::<_, Q6K, T>(src, a.x8),
        }
    }
}

/// Tokens `t..t + T` against tile groups `g0..g1` of `w` through `I`, `I::GROUPS` groups per
/// pass, into `y` (row-major, `rows` floats per token); returns the first group not done (a
/// remainder smaller than `I::GROUPS`).
///
/// # Safety
/// As [`TilePass::pass`]; groups `g0..g1` lie inside `w` and their outputs are this caller's alone;
/// `y` holds `(t + T) · rows` floats.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn groups<I: TilePass, const T: usize>(
    w: &WeightMatrix<'_>,
    a: &PassActs<'_, T>,
    t: usize,
    g0: usize,
    g1: usize,
    y: SharedMut<f32>,
    rows: usize,
) -> usize {
    let group_bytes = w.cols / w.dtype.block_size() * tile_bytes(w.dtype);
    let mut g = g0;
    while g + I::GROUPS <= g1 {
        let src = I::src(w.data.as_ptr().add(g * group_bytes), group_bytes);
        let o = I::pass::<T>(w.dtype, a, src);
        for (j, oj) in o.iter().enumerate() {
            let dst = y.ptr().add((t + j) * rows + g * TILE_ROWS);
            let oj = oj.as_ref();
            debug_assert_eq!(oj.len(), I::GROUPS * TILE_ROWS);
            std::ptr::copy_nonoverlapping(oj.as_ptr(), dst, I::GROUPS * TILE_ROWS);
        }
        g += I::GROUPS;
    }
    g
}
