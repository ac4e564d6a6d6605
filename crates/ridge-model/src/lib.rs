//! Models for ridge: reading an architecture's hyper-parameters and weights out of a GGUF file
//! and running its forward pass over a batch of tokens.
//!
//! - [`Model::load`] memory-maps the file, validates every tensor's type and shape against the
//!   configuration, and keeps only offsets: weights are read in place from the map.
//! - [`Model::forward`] takes a [`Batch`] — tokens from one or several sequences, each with its
//!   position — and a paged [`KvCache`]; it appends every token's keys and values to its
//!   sequence, attends causally, and returns logits for the tokens that asked for them. Decode,
//!   prefill, chunked prefill and batched decode are all this one call.
//! - [`Model::forward_outputs`] is the same pass that also returns the final hidden states
//!   (after the output norm) of the rows that ask, for embeddings; [`Pooling`] names how the
//!   file says they are pooled.
//! - The arithmetic lives in `ridge-kernels`; this crate reads like the math, in three layers
//!   whose imports run one way: `model.rs` (load, bind, the two ends of a forward pass) and
//!   `arches.rs` (the table of architectures) on top; one file per architecture behind one
//!   trait (`stack.rs`): `llama.rs`, which also runs qwen2, qwen3, the mixtures of experts,
//!   gpt-oss and Llama 3's RoPE scaling; `gemma3.rs`; `gemma4.rs` (its keys in `gemma4_config.rs`);
//!   `qwen35.rs`, the Qwen3.5 hybrids whose
//!   recurrent layers keep a fixed state per sequence in the [`KvCache`] (shape in
//!   `hybrid.rs`) — and the routed feed-forward (`moe.rs`), each owning the weights only it
//!   has; and `layer.rs`, the weights and steps every layer shares, which names neither the
//!   model nor an architecture (it reads a small context the model lends).
//! - [`registry`] knows the models `ridge pull` can fetch and where they are cached.

mod act_policy;
mod arches;
mod attend;
mod batch;
mod block_pool;
mod config;
mod deepseek2;
mod delta_net;
mod disk_tier;
mod error;
mod gemma3;
mod gemma4;
mod gemma4_config;
mod granite_hybrid;
mod hybrid;
mod kv_cache;
mod layer;
mod lfm2;
mod llama;
mod mamba2;
mod model;
mod moe;
mod nemotron_h;
mod per_layer;
mod pooling;
mod qwen35;
mod rank;
mod recurrent_state;
pub mod registry;
mod rope;
mod short_conv;
mod stack;
pub mod synthetic;
mod synthetic_gemma4;
mod synthetic_spec;
mod weights;
mod workspace;
mod zeroed;

pub use act_policy::ActPolicy;
pub use batch::Batch;
pub use config::{
    Architecture, AttnTemperature, ExpertAct, Gating, HeadShape, MlaConfig, ModelConfig, MoeConfig,
    RopeScaling, Yarn, GEMMA3_SWA_PATTERN, GEMMA3_SWA_ROPE_BASE, GPT_OSS_SWA_PATTERN,
};
pub use disk_tier::{DiskTierConfig, DiskTierStats};
pub use error::ModelError;
pub use hybrid::{RecurrentConfig, RecurrentKind};
pub use kv_cache::{KvCache, KvDtype, KvEvent, SeqId, DROPPED, KV_BLOCK_SIZE};
pub use model::{Model, Outputs};
pub use pooling::Pooling;
pub use rank::RankHead;
pub use recurrent_state::{CHECKPOINT_INTERVAL, DEFAULT_CHECKPOINT_BYTES};
pub use workspace::Workspace;
