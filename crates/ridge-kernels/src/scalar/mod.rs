//! The portable scalar reference: every kernel's plain-Rust version, which runs on any CPU and
//! which the SIMD paths are tested against (bit for bit where their arithmetic is exact or
//! ordered alike). The activation quantizers' reference is in `act::blocks`, attention's in
//! `attention`.

pub mod dot;
pub(crate) mod elementwise;
pub mod lowbit;
pub(crate) mod recurrent;
