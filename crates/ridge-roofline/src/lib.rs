//! The roofline: how fast this machine *could* run a model, so every measurement can say how
//! close it came.
//!
//! # The physics
//!
//! A decode step multiplies one activation row per sequence by every weight matrix of the model.
//! Each weight byte is read from memory once and used for a handful of floating-point
//! operations — far fewer than a CPU core can do in the time it takes to fetch the byte. Decode
//! is therefore *memory-bound*: the step cannot finish before the bytes it reads have crossed the
//! memory bus,
//!
//! ```text
//! t_step  ≥  bytes read / read bandwidth
//! bytes read = W + Σ_seq kv_bytes_per_token · context(seq)
//! ```
//!
//! where `W` is the bytes of weights actually read (their quantized size) and the sum is the KV
//! cache every sequence in the batch attends over. Batching shares the `W` term among more
//! tokens; only when a step does enough arithmetic per byte does the compute roof
//! (`2 · params · batch / FLOP/s`) take over.
//!
//! # What is here
//!
//! - [`probe`] measures the two roofs of *this* machine: memory read bandwidth (all threads, a
//!   buffer far larger than the last-level cache, best of several passes) and arithmetic rate
//!   (peak f32 FMA, and ridge's real quantized matrix kernel on cache-resident data).
//! - [`model`] turns a model's byte counts and a batch's contexts into the bytes one step reads
//!   and the floor on its latency.
//!
//! The bandwidth and FMA probes run on plain `std::thread::scope` threads: they are measurement
//! code, not the hot path, and should not depend on the kernels' thread pool to be trusted. The
//! matmul probe deliberately goes through that pool, since it measures the kernel as ridge runs
//! it.

#![warn(missing_docs)]

pub mod model;
pub mod probe;

pub use model::{floor_ms, step_bytes, RooflineInputs};
pub use probe::{ProbeConfig, ProbeReport};
