//! x86-64 kernels, one folder per instruction set: [`avx2`] (AVX2 + FMA + F16C, every
//! operation) and [`avx512`] (F/BW/VL/VNNI: the integer tile products and attention with 32
//! registers; everything else an AVX-512 CPU runs is AVX2's). [`shared`] holds the helpers
//! both use. [`amx`] (AMX-TILE/INT8 on top of AVX-512) holds the tile-register products of
//! 16-token blocks; everything else an AMX CPU runs is the AVX-512 folder's.
//!
//! Imports run one way: `amx` may use `avx512`, `avx512` may use `avx2` and `shared`, `avx2`
//! uses `shared`, and none
//! of them imports the generic modules that call them (`ops`, `act`, `attention`, `matmul`),
//! only the layouts and types below those (`act::blocks`, `attention::layout`,
//! `packed::layout`, `matrix`, `matmul::acts`, `tiles`).

pub(crate) mod amx;
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod iq2s;
pub(crate) mod shared;
