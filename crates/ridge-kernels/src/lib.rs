//! Compute kernels for ridge: the arithmetic of every weight format, and the handful of
//! operations a transformer forward pass needs.
//!
//! Design:
//! - Weights are computed in their stored block format ([`DType`]); nothing is dequantized into
//!   a second copy of the model. Quantized weights (Q4_0, Q4_1, Q5_0, Q8_0, and the k-quants
//!   Q4_K, Q5_K, Q6_K) are multiplied against activations quantized on the fly to 8-bit (or
//!   16-bit) blocks of 32 ([`act::ActBlock`]), so the inner loop is an integer dot product (a
//!   k-quant super-block meets eight activation blocks); float weights (F32, F16, BF16)
//!   multiply f32 activations.
//! - Where tile kernels exist for it (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), a matrix is
//!   repacked at load into tiles of eight rows ([`packed`]): the same blocks, the same bytes
//!   (Q4_K +2.8%), interleaved so one instruction advances eight rows. The file's pages are
//!   released as they are copied, so resident memory stays about the file's size.
//! - Every operation has a scalar reference. SIMD paths (AVX2+FMA+F16C, and AVX-512 VNNI for
//!   the tile products) are selected once by [`Isa::detect`] and tested against the scalar
//!   path on random data.
//! - Each output element of a matrix product is reduced in the same order whatever the batch
//!   size, so a sequence's result does not depend on what else is in the batch.
//! - Parallelism goes through [`pool`], one place to replace with a lower-latency pool.

pub mod act;
pub mod attention;
pub mod blocks;
mod cpu;
mod dot_avx2;
mod dot_kquant_avx2;
pub mod dot_scalar;
mod dot_tiles_avx2;
mod dot_tiles_vnni;
mod dot_tiles_zmm;
mod dtype;
mod elementwise_avx2;
pub mod kquant;
pub mod matmul;
pub mod ops;
pub mod packed;
pub mod pool;

pub use cpu::{Isa, IsaKind};
pub use dtype::DType;
pub use matmul::{
    matmul, matmul_each, matmul_many, ActPrecision, Layout, MatmulScratch, WeightMatrix,
};
pub use packed::PackedMatrix;
