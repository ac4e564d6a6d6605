//! Compute kernels for ridge: the arithmetic of every weight format, and the handful of
//! operations a transformer forward pass needs.
//!
//! Design:
//! - Weights are computed in their stored block format ([`DType`]); nothing is dequantized into
//!   a second copy of the model. Quantized weights (Q4_0, Q4_1, Q5_0, Q8_0, and the k-quants
//!   Q4_K, Q5_K, Q6_K) are multiplied against activations quantized on the fly to 8-bit (or
//!   16-bit) blocks of 32 ([`act::ActBlock`]), so the inner loop is an integer dot product (a
//!   k-quant super-block meets eight activation blocks); float weights (F32, F16, BF16)
//!   multiply f32 activations. The low-bit formats (Q2_K, Q3_K, IQ4_NL, IQ4_XS: [`lowbit`];
//!   the lattice and ternary IQ1..IQ3, TQ1_0, TQ2_0: [`iquant`]) go the same way, the lattice
//!   ones through a per-block decoder to signed bytes.
//! - Where tile kernels exist for it (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), a matrix is
//!   repacked at load into tiles of eight rows ([`packed`]): the same blocks, the same bytes
//!   (Q4_K +2.8%), interleaved so one instruction advances eight rows. The file's pages are
//!   released as they are copied, so resident memory stays about the file's size.
//! - Every operation has a scalar reference ([`scalar`]). SIMD paths live in one folder per
//!   instruction set (`x86::avx2`: AVX2+FMA+F16C; `x86::avx512`: VNNI tile products and
//!   attention), behind one dispatch table per path (`dispatch`) that [`Isa::detect`]
//!   chooses once; they are tested against the scalar path on random data.
//! - Layers, so that no module imports one that imports it: the formats and layouts
//!   (`dtype`, `fields`, [`blocks`], [`kquant`], `act::blocks`, `attention::layout`,
//!   `packed::layout`, `matrix`, `matmul::acts`, `tiles`) below the kernels ([`scalar`],
//!   `x86`), those below the dispatch table and [`Isa`], and those below the operations
//!   callers use ([`ops`], [`act`], [`attention`], [`matmul`], [`packed`]). The test
//!   `tests/import_graph.rs` keeps it so.
//! - Each output element of a matrix product is reduced in the same order whatever the batch
//!   size, so a sequence's result does not depend on what else is in the batch.
//! - Parallelism goes through [`pool`], one place to replace with a lower-latency pool.

pub mod act;
pub mod attention;
pub mod blocks;
mod cpu;
mod dispatch;
mod dtype;
mod fields;
mod iq_grids;
pub mod iquant;
pub mod kquant;
pub mod latent;
pub mod lowbit;
pub mod matmul;
mod matrix;
pub mod ops;
pub mod packed;
pub mod pool;
pub mod recurrent;
pub mod scalar;
mod tiles;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use cpu::{Isa, IsaKind};
pub use dtype::DType;
pub use matmul::{
    matmul, matmul_each, matmul_many, ActPrecision, Layout, MatmulScratch, WeightMatrix,
};
pub use packed::PackedMatrix;
pub use scalar::dot as dot_scalar;
