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
//! - [`hardware`] is the table of machines people ask about (H100, H200, A100, B200, MI300X:
//!   datasheet bandwidth and dense peaks) plus `local`, measured by [`probe`].
//! - [`spec`] reads what the model needs to know about a model from a GGUF file's tensor index
//!   or a Hugging Face `config.json` (for models that cannot be loaded here).
//! - [`analytic`] is DESIGN.md's model in full: bytes and FLOPs per step, arithmetic intensity
//!   against the ridge point, the binding roof, TPOT and TTFT floors, throughput and cost per
//!   token — the numbers `ridge roofline` prints.
//! - [`plan`] sizes a fleet on those floors: a queueing model of one continuous-batching
//!   replica (prefill as an M/D/1 queue, decode batch by Little's law) gives the largest
//!   request rate that meets TTFT and TPOT SLOs, hence the replicas and machines a traffic
//!   needs and their cost per token — `ridge roofline plan`.
//! - [`chart`] draws them (plotters, SVG or PNG), and holds the chart plumbing `ridge-bench`
//!   shares.
//!
//! The bandwidth and FMA probes run on plain `std::thread::scope` threads: they are measurement
//! code, not the hot path, and should not depend on the kernels' thread pool to be trusted. The
//! matmul probe deliberately goes through that pool, since it measures the kernel as ridge runs
//! it.

#![warn(missing_docs)]

pub mod analytic;
pub mod chart;
pub mod hardware;
pub mod model;
pub mod plan;
pub mod probe;
pub mod spec;

pub use analytic::{Bound, KvDtype, OperatingPoint, Setup};
pub use hardware::{Hardware, Precision};
pub use model::{floor_ms, step_bytes, RooflineInputs, RoutedExperts, WindowedKv};
pub use probe::{memory_level, CacheProbe, FloorBandwidth, ProbeConfig, ProbeReport};
pub use spec::{ModelSpec, SlidingWindow};
