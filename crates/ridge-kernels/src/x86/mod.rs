//! x86-64 kernels, one folder per instruction set: [`avx2`] (AVX2 + FMA + F16C, every
//! operation) and [`avx512`] (F/BW/VL/VNNI: the integer tile products and attention with 32
//! registers; everything else an AVX-512 CPU runs is AVX2's). [`shared`] holds the helpers
//! both use. AMX tiles (`amx`) would be a third folder: not built, since no machine this
//! project has tested on so far had AMX and no kernel ships untested.
//!
//! Imports run one way: `avx512` may use `avx2` and `shared`, `avx2` uses `shared`, and none
//! of them imports the generic modules that call them (`ops`, `act`, `attention`, `matmul`),
//! only the layouts and types below those (`act::blocks`, `attention::layout`,
//! `packed::layout`, `matrix`, `matmul::acts`, `tiles`).

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod shared;
