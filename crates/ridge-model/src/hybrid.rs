//! The shape of a hybrid model's recurrent layers, read from the `ssm.*` keys llama.cpp's
//! converter writes, and checked before anything is sized from it.
//!
//! A hybrid keeps, per sequence and per recurrent layer, a fixed-size state, however long the
//! context. Qwen3.5 and Qwen3.6 (three Gated DeltaNet layers to one attention layer) keep a
//! convolution window of `conv_kernel − 1` inputs and a delta-rule state of `n_v_heads`
//! matrices `head_dim × head_dim`; which layers are recurrent is `attention.recurrent_layers`
//! (one flag per layer) or else every layer but each `full_attention_interval`-th (llama.cpp's
//! default 4). LFM2's short-convolution layers keep only a window of `shortconv.l_cache − 1`
//! rows of `d_model` channels; its recurrent layers are those whose `attention.head_count_kv`
//! entry is 0.

use ridge_gguf::{ArrayValue, GgufFile, MetadataValue};

/// What a recurrent layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecurrentKind {
    /// Qwen3.5's Gated DeltaNet: a convolution over queries, keys and values, then the gated
    /// delta rule over a matrix state per value head (`delta_net.rs`).
    GatedDeltaNet,
    /// LFM2's gated short convolution over `d_model` channels (`short_conv.rs`): no state
    /// beyond the convolution's window.
    ShortConv,
    /// Mamba2 (Granite 4.0-H, Nemotron-H): a convolution over `x, B, C`, then the selective
    /// scan over a `head_dim × d_state` state per head (`mamba2.rs`).
    Mamba2,
}

/// A hybrid model's recurrent (linear-attention or convolution) layers.
#[derive(Clone, Debug, PartialEq)]
pub struct RecurrentConfig {
    /// What the recurrent layers run.
    pub kind: RecurrentKind,
    /// Taps of the causal convolution (`ssm.conv_kernel`, `shortconv.l_cache`).
    pub conv_kernel: usize,
    /// Channels of a short convolution (`d_model`; unused by a Gated DeltaNet).
    pub conv_channels: usize,
    /// Query/key heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of `n_k_heads`: value head `h` reads
    /// query/key head `h mod n_k_heads`, as llama.cpp's kernel does.
    pub n_v_heads: usize,
    /// Elements per head: a Gated DeltaNet's keys and values alike (`ssm.state_size`), a
    /// Mamba2 head's rows (`ssm.inner_size / ssm.time_step_rank`).
    pub head_dim: usize,
    /// Mamba2's state entries per row (`ssm.state_size`; 0 for the other kinds). Its heads are
    /// `n_v_heads`, its groups (of `B` and `C`) `n_k_heads`.
    pub d_state: usize,
    /// One flag per layer: recurrent (true) or attention.
    pub layers: Vec<bool>,
    /// How value heads share key heads: Qwen3-Next repeats each key head in place
    /// (`true`: value head `h` reads `h / (n_v / n_k)`), Qwen3.5 tiles them (`h mod n_k`).
    pub interleaved_key_heads: bool,
}

impl RecurrentConfig {
    /// The query/key head value head `v` reads (see [`RecurrentConfig::interleaved_key_heads`]).
    pub fn key_head(&self, v: usize) -> usize {
        if self.interleaved_key_heads {
            v / (self.n_v_heads / self.n_k_heads.max(1)).max(1)
        } else {
            v % self.n_k_heads.max(1)
        }
    }

    /// Width of the query and of the key projections (`n_k_heads · head_dim`).
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_dim
    }

    /// Width of the value projection and of the layer's output before `ssm_out`
    /// (`ssm.inner_size`).
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }

    /// Channels of the convolution: a Gated DeltaNet's queries, keys and values side by
    /// side, or a short convolution's `d_model`.
    pub fn conv_dim(&self) -> usize {
        match self.kind {
            RecurrentKind::GatedDeltaNet => 2 * self.key_dim() + self.value_dim(),
            RecurrentKind::ShortConv => self.conv_channels,
            // x (inner), then B and C (a group's `d_state` each).
            RecurrentKind::Mamba2 => self.value_dim() + 2 * self.n_k_heads * self.d_state,
        }
    }

    /// f32 values of one layer's convolution window.
    pub fn conv_state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }

    /// f32 values of one layer's delta-rule or SSM state (0 for a short convolution).
    pub fn delta_state_len(&self) -> usize {
        match self.kind {
            RecurrentKind::Mamba2 => self.n_v_heads * self.head_dim * self.d_state,
            _ => self.n_v_heads * self.head_dim * self.head_dim,
        }
    }

    /// Mamba2's layers (Granite 4.0-H: those with no K/V heads in `attention.head_count_kv`),
    /// from the `ssm.*` keys: `conv_kernel`, `inner_size`, `state_size`, `time_step_rank`
    /// (heads) and `group_count`. Every message names the key.
    pub(crate) fn mamba2(f: &GgufFile, arch_name: &str, layers: Vec<bool>) -> Result<Self, String> {
        let k = |s: &str| format!("{arch_name}.{s}");
        let usize_in = |key: &str, range| hybrid_key(f, &k(key), range);
        let conv_kernel = usize_in("ssm.conv_kernel", 1..=64)?;
        let inner = usize_in("ssm.inner_size", 1..=1 << 20)?;
        let d_state = usize_in("ssm.state_size", 1..=1024)?;
        let n_heads = usize_in("ssm.time_step_rank", 1..=4096)?;
        let n_groups = usize_in("ssm.group_count", 1..=1024)?;
        if inner % n_heads != 0 || n_heads % n_groups != 0 {
            return Err(format!(
                "`{}` = {inner} must split into `{}` = {n_heads} heads, and those into `{}` = {n_groups} groups",
                k("ssm.inner_size"),
                k("ssm.time_step_rank"),
                k("ssm.group_count")
            ));
        }
        Ok(RecurrentConfig {
            kind: RecurrentKind::Mamba2,
            conv_kernel,
            conv_channels: 0,
            n_k_heads: n_groups,
            n_v_heads: n_heads,
            head_dim: inner / n_heads,
            d_state,
            layers,
            interleaved_key_heads: true,
        })
    }

    /// LFM2's short-convolution layers: `l_cache` taps over `d_model` channels on the layers
    /// `layers` marks (those with no K/V heads). The message names the key.
    pub(crate) fn short_conv(
        f: &GgufFile,
        arch_name: &str,
        d_model: usize,
        layers: Vec<bool>,
    ) -> Result<Self, String> {
        let key = format!("{arch_name}.shortconv.l_cache");
        let conv_kernel = hybrid_key(f, &key, 2..=64)?;
        Ok(RecurrentConfig {
            kind: RecurrentKind::ShortConv,
            conv_kernel,
            conv_channels: d_model,
            n_k_heads: 0,
            n_v_heads: 0,
            head_dim: 0,
            d_state: 0,
            layers,
            interleaved_key_heads: false,
        })
    }

    /// Recurrent layers.
    pub fn n_recurrent(&self) -> usize {
        self.layers.iter().filter(|&&r| r).count()
    }

    /// Bytes of one sequence's whole recurrent state (every recurrent layer, f32): what a
    /// decode step reads and writes per sequence, whatever the context.
    pub fn state_bytes(&self) -> usize {
        4 * self.n_recurrent() * (self.conv_state_len() + self.delta_state_len())
    }

    /// Reads the keys of `arch_name` for a model of `n_layers` trunk layers and `nextn`
    /// prediction layers after them. Every message names the key.
    pub(crate) fn from_gguf(
        f: &GgufFile,
        arch_name: &str,
        (n_layers, nextn): (usize, usize),
    ) -> Result<Self, String> {
        let k = |s: &str| format!("{arch_name}.{s}");
        let usize_in = |key: &str, range| hybrid_key(f, &k(key), range);
        let conv_kernel = usize_in("ssm.conv_kernel", 1..=64)?;
        let head_dim = usize_in("ssm.state_size", 1..=1024)?;
        let n_v_heads = usize_in("ssm.time_step_rank", 1..=1024)?;
        let n_k_heads = usize_in("ssm.group_count", 1..=1024)?;
        let inner = usize_in("ssm.inner_size", 1..=1 << 20)?;
        if n_v_heads % n_k_heads != 0 {
            return Err(format!(
                "`{}` = {n_v_heads} is not a multiple of `{}` = {n_k_heads}",
                k("ssm.time_step_rank"),
                k("ssm.group_count")
            ));
        }
        if inner != n_v_heads * head_dim {
            return Err(format!(
                "`{}` = {inner} is not `{}` × `{}` = {n_v_heads} × {head_dim}",
                k("ssm.inner_size"),
                k("ssm.time_step_rank"),
                k("ssm.state_size")
            ));
        }
        let layers = match f.get(&k("attention.recurrent_layers")) {
            Some(MetadataValue::Array(ArrayValue::Bool(flags))) => {
                crate::per_layer::trunk(flags, &k("attention.recurrent_layers"), (n_layers, nextn))?
            }
            Some(_) => {
                return Err(format!(
                    "`{}` must be an array of booleans",
                    k("attention.recurrent_layers")
                ))
            }
            None => {
                let every = match f.get(&k("full_attention_interval")) {
                    None => 4,
                    Some(_) => usize_in("full_attention_interval", 1..=n_layers)?,
                };
                (0..n_layers).map(|i| (i + 1) % every != 0).collect()
            }
        };
        Ok(RecurrentConfig {
            kind: RecurrentKind::GatedDeltaNet,
            conv_kernel,
            conv_channels: 0,
            n_k_heads,
            n_v_heads,
            head_dim,
            d_state: 0,
            layers,
            interleaved_key_heads: false,
        })
    }
}

/// The integer at `key` within `range`; the message says whether it is missing or out of range.
fn hybrid_key(
    f: &GgufFile,
    key: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, String> {
    f.get_usize_in(key, range.clone())
        .map_err(|_| match f.get(key) {
            None => format!("`{key}` is missing (a hybrid model needs it)"),
            Some(_) => format!(
                "`{key}` must be an integer in {}..={}",
                range.start(),
                range.end()
            ),
        })
}

/// Reads `rope.dimension_sections` (M-RoPE's four sections, in rotated pairs) and returns,
/// for each of the `rope_dim / 2` pairs, whether a text token rotates it. llama.cpp gives a
/// text token the positions `[p, p, p, 0]`; with interleaved sections (Qwen3.5's IMROPE) pair
/// `i` takes section `i mod 3`'s position while `i < 3 · sections[i mod 3]`, and the fourth
/// position (0: no rotation) otherwise. `None` when the file has no sections.
pub(crate) fn imrope_rotated_pairs(
    f: &GgufFile,
    arch_name: &str,
    rope_dim: usize,
) -> Result<Option<Vec<bool>>, String> {
    let key = format!("{arch_name}.rope.dimension_sections");
    let Some(v) = f.get(&key) else {
        return Ok(None);
    };
    let secs: Vec<i64> = match v {
        MetadataValue::Array(ArrayValue::I32(a)) => a.iter().map(|&x| x as i64).collect(),
        MetadataValue::Array(ArrayValue::U32(a)) => a.iter().map(|&x| x as i64).collect(),
        _ => return Err(format!("`{key}` must be an array of integers")),
    };
    if secs.len() < 3 || secs.len() > 4 || secs.iter().any(|&s| !(0..=4096).contains(&s)) {
        return Err(format!("`{key}` must hold 3 or 4 sizes between 0 and 4096"));
    }
    let total: i64 = secs.iter().sum();
    let pairs = rope_dim / 2;
    if total <= 0 || total as usize > pairs {
        return Err(format!(
            "`{key}` sums to {total} pairs; the rotation has {pairs} (rope.dimension_count / 2)"
        ));
    }
    let s = |i: usize| secs[i] as usize;
    Ok(Some(
        (0..pairs)
            .map(|i| {
                let sector = i % total as usize;
                let m = sector % 3;
                sector < 3 * s(m)
            })
            .collect(),
    ))
}
