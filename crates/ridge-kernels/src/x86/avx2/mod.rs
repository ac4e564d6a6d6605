//! AVX2 + FMA + F16C kernels: every operation with a SIMD path has its AVX2 version here, and
//! AVX-512 CPUs run these too wherever `x86::avx512` has nothing faster.
//!
//! Every function is `unsafe`: it must only run on a CPU with those features, which callers
//! guarantee by reaching it through the dispatch table of an [`crate::Isa`] (made only after
//! detection checked them).

pub(crate) mod act;
pub(crate) mod attention;
pub(crate) mod dot;
pub(crate) mod elementwise;
pub(crate) mod kquant;
pub(crate) mod lowbit;
pub(crate) mod recurrent;
pub(crate) mod rows;
pub(crate) mod tiles;
