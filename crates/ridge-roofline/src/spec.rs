//! What the analytic model needs to know about a model: how many bytes of weights one decode
//! step reads, how many parameters it multiplies, and the attention shape that sizes the KV
//! cache.
//!
//! Two sources, because the question "how fast could this run on an H100?" is usually asked
//! about models that cannot be loaded here:
//!
//! - a **GGUF file**: bytes and parameter counts come from the tensor index, so quantization is
//!   accounted for exactly (a Q4_1 matrix reads its quantized size, norms their f32 size); the
//!   shape comes from the `{arch}.*` metadata keys every llama.cpp-style architecture writes,
//!   so models ridge cannot *run* (gemma3, qwen, …) can still be *predicted*;
//! - a **Hugging Face `config.json`**: the shape is given and the parameter count is derived for
//!   a dense decoder (attention with grouped KV heads, gated MLP, untied or tied output head),
//!   at a chosen bytes per parameter (bf16 by default).
//!
//! "Read per step" follows [`crate::model`]: every layer matrix, every norm and the output head
//! are read once; the token embedding contributes one row per token (negligible) unless it is
//! tied to the output head, in which case it *is* the output head.

use ridge_gguf::GgufFile;

/// Errors of building a [`ModelSpec`]; messages name the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The GGUF file could not be read or lacks a key.
    #[error(transparent)]
    Gguf(#[from] ridge_gguf::GgufError),
    /// A config.json that is not JSON, or lacks or mistypes a field.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A model this analytic model does not describe.
    #[error("{path}: {message}")]
    Unsupported {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// The shape and byte counts of a model, as the analytic model uses them.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// A name for titles (the GGUF file's stem, or the config's `_name_or_path`).
    pub name: String,
    /// Transformer layers.
    pub n_layers: u64,
    /// Of them, the layers that keep K/V (all but a hybrid's recurrent layers).
    pub kv_layers: u64,
    /// Rows a token adds per such layer: a K and a V row (2), or latent attention's one
    /// latent row of `head_dim` (1).
    pub kv_rows: u64,
    /// A hybrid's recurrent state per sequence, bytes (f32), read and written whole every
    /// decode step whatever the context; 0 without recurrent layers.
    pub state_bytes: u64,
    /// Query heads.
    pub n_heads: u64,
    /// Key/value heads (grouped-query attention shares each among `n_heads / n_kv_heads`).
    pub n_kv_heads: u64,
    /// Elements per head.
    pub head_dim: u64,
    /// Bytes of weights one forward pass reads (quantized size for GGUF).
    pub weight_bytes: u64,
    /// Parameters multiplied per token: every matrix a token passes through, output head
    /// included, the embedding lookup excluded. One token costs `2 · params` FLOPs outside
    /// attention.
    pub params: u64,
    /// Of `params`, the output head (`vocab · d_model`): a prefill multiplies it only for the
    /// rows that sample (one per prompt), not for every prompt token.
    pub head_params: u64,
    /// How the weights are stored, for display (`Q4_1`, `bf16`, …).
    pub weights_format: String,
    /// Layers that attend through a sliding window, if any (they read at most its positions).
    pub sliding_window: Option<SlidingWindow>,
    /// A mixture of experts' routed experts: `weight_bytes` and `params` count the `k` of `E`
    /// one token reads; a step of `B` tokens reads the distinct experts they choose.
    pub experts: Option<crate::RoutedExperts>,
    /// Bytes of every weight in the file (for a mixture, all experts; else `weight_bytes`).
    pub total_weight_bytes: u64,
}

/// A model's sliding-window attention layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    /// Positions a token of these layers sees.
    pub positions: u64,
    /// How many of the model's layers attend this way.
    pub layers: u64,
}

impl ModelSpec {
    /// Reads the spec of a GGUF file (see the module doc for what counts as read).
    pub fn from_gguf(f: &GgufFile) -> Result<ModelSpec, SpecError> {
        let path = f.path().display().to_string();
        let arch = f.get_str("general.architecture")?.to_string();
        // One head shape per model is all this model has; Gemma 4's (and Gemma 3n's) kinds
        // differ in head width, share K/V across layers and add per-layer token embeddings
        // (a lookup the tensor index would count as a matrix): refused rather than
        // mispriced.
        if matches!(arch.as_str(), "gemma4" | "gemma3n") {
            return Err(SpecError::Unsupported {
                path,
                message: format!(
                    "{arch}: layer kinds of different head widths, K/V shared across layers and \
                     per-layer token embeddings are not modelled (`ridge bench` measures it \
                     against its memory floor)"
                ),
            });
        }
        let k = |s: &str| format!("{arch}.{s}");
        let n_layers = f.get_u64(&k("block_count"))?;
        let d_model = f.get_u64(&k("embedding_length"))?;
        let n_heads = f.get_u64(&k("attention.head_count"))?;
        // A hybrid (LFM2, Granite 4.0-H, Nemotron-H) lists one count per layer, 0 on the
        // layers without K/V; the others must agree.
        let per_layer = |key: &str| match f.get(&k(key)) {
            Some(ridge_gguf::MetadataValue::Array(a)) => a.to_i64_vec(),
            _ => None,
        };
        let kv_list = per_layer("attention.head_count_kv");
        let n_kv_heads = match (&kv_list, f.get(&k("attention.head_count_kv"))) {
            (_, None) => n_heads,
            (Some(list), _) => {
                let mut heads = list.iter().copied().filter(|&h| h > 0);
                let first = heads.next().unwrap_or(0);
                if heads.any(|h| h != first) {
                    return Err(SpecError::Unsupported {
                        path,
                        message: format!(
                            "{}: attention layers with different K/V head counts are not modelled",
                            k("attention.head_count_kv")
                        ),
                    });
                }
                first as u64
            }
            (None, Some(v)) => v.as_u64().ok_or_else(|| SpecError::Unsupported {
                path: path.clone(),
                message: format!("{}: expected an integer", k("attention.head_count_kv")),
            })?,
        };
        let (kv_layers, state_bytes) = hybrid_layers(f, &arch, n_layers, d_model, kv_list)?;
        // Latent attention (deepseek2 with `key_length_mla`) caches one row of
        // `key_length` (latent + rotated part) per token and layer.
        let kv_rows = if f.get(&k("attention.key_length_mla")).is_some() {
            1
        } else {
            2
        };
        let head_dim = match f.get(&k("attention.key_length")) {
            Some(_) => f.get_u64(&k("attention.key_length"))?,
            None if n_heads > 0 => d_model / n_heads,
            None => 0,
        };
        if n_layers == 0 || n_heads == 0 || n_kv_heads == 0 || head_dim == 0 {
            return Err(SpecError::Unsupported {
                path,
                message: format!(
                    "layers {n_layers}, heads {n_heads}, KV heads {n_kv_heads}, head dim \
                     {head_dim}: all must be at least 1"
                ),
            });
        }
        let tied = !f.has_tensor("output.weight");
        // A mixture's stacked expert tensors (`…_exps`, `[cols, rows, E]`): one token reads
        // `k` of the `E` experts in each.
        let (n_expert, n_used) = match f.get(&k("expert_count")) {
            Some(_) => (
                f.get_u64(&k("expert_count"))?,
                f.get_u64(&k("expert_used_count"))?,
            ),
            None => (0, 0),
        };
        if n_expert > 0 && !(1..=n_expert).contains(&n_used) {
            return Err(SpecError::Unsupported {
                path,
                message: format!("{n_used} experts used of {n_expert}: expected 1..={n_expert}"),
            });
        }
        let (mut weight_bytes, mut total_weight_bytes, mut expert_bytes) = (0u64, 0u64, 0u64);
        let mut params = 0u64;
        let mut head_params = 0u64;
        let mut formats: Vec<(String, u64)> = Vec::new();
        for t in f.tensors() {
            if t.name == "token_embd.weight" && !tied {
                continue; // looked up one row per token, not read whole
            }
            total_weight_bytes += t.size as u64;
            // (gpt-oss's per-expert biases, `…_exps.bias` `[rows, E]`, are read the same way.)
            let routed = n_expert > 0
                && ((t.dims.len() == 3 && t.name.ends_with("_exps.weight"))
                    || (t.dims.len() == 2
                        && t.dims[1] == n_expert
                        && t.name.ends_with("_exps.bias")));
            if routed {
                expert_bytes += t.size as u64 / n_expert;
                weight_bytes += t.size as u64 / n_expert * n_used;
                params += t.n_elements() / n_expert * n_used;
            } else {
                weight_bytes += t.size as u64;
            }
            if t.dims.len() >= 2 {
                if !routed {
                    params += t.n_elements();
                }
                if t.name == "output.weight" || (tied && t.name == "token_embd.weight") {
                    head_params = t.n_elements();
                }
                let name = format!("{:?}", t.ty);
                match formats.iter_mut().find(|(n, _)| *n == name) {
                    Some(e) => e.1 += t.size as u64,
                    None => formats.push((name, t.size as u64)),
                }
            }
        }
        // The format holding most of the bytes names the model's quantization.
        formats.sort_by_key(|f| std::cmp::Reverse(f.1));
        let weights_format = formats
            .first()
            .map(|f| f.0.clone())
            .unwrap_or_else(|| "none".to_string());
        // The file's name is what the user typed or pulled; `general.name` is often a
        // training-run label.
        let name = file_stem(&path);
        // Sliding-window layers, where the architecture fixes which layers they are (Gemma 3:
        // all but every sixth; Gemma 2: every other one from the first).
        let windowed = |i: u64| match arch.as_str() {
            "gemma3" => Some(!(i + 1).is_multiple_of(6)),
            "gemma2" => Some(i.is_multiple_of(2)),
            _ => None,
        };
        let sliding_window = match f.get(&k("attention.sliding_window")) {
            Some(_) if windowed(0).is_some() => {
                let positions = f.get_u64(&k("attention.sliding_window"))?;
                let layers = (0..n_layers).filter(|&i| windowed(i) == Some(true)).count();
                (positions > 0).then_some(SlidingWindow {
                    positions,
                    layers: layers as u64,
                })
            }
            _ => None,
        };
        Ok(ModelSpec {
            name,
            n_layers,
            kv_layers,
            kv_rows,
            state_bytes,
            n_heads,
            n_kv_heads,
            head_dim,
            weight_bytes,
            params,
            head_params,
            weights_format,
            sliding_window,
            experts: (n_expert > 0).then_some(crate::RoutedExperts {
                bytes_per_expert: expert_bytes as usize,
                n_expert: n_expert as usize,
                n_used: n_used as usize,
            }),
            total_weight_bytes,
        })
    }

    /// Weight bytes one step of `tokens` tokens reads: `weight_bytes`, and for a mixture the
    /// expected distinct experts beyond the `k` one token reads.
    pub fn weight_bytes_for(&self, tokens: u64) -> f64 {
        match self.experts {
            Some(x) if tokens > 1 => {
                let extra = x.expected_distinct(tokens as usize) - x.n_used as f64;
                self.weight_bytes as f64 + extra.max(0.0) * x.bytes_per_expert as f64
            }
            _ => self.weight_bytes as f64,
        }
    }

    /// Builds the spec of a dense decoder from a Hugging Face `config.json` (`text` is its
    /// contents, `path` names it in errors) at `bytes_per_param` bytes per weight.
    ///
    /// Parameters read per token, per layer: `q` (`d · H · hd`), `k` and `v` (`d · KV · hd`
    /// each), `o` (`H · hd · d`), the gated MLP (`3 · d · ff`) and two norms (`2 · d`); then the
    /// final norm (`d`) and the output head (`vocab · d`, tied or not — the head is read either
    /// way). A multimodal config's `text_config` is used when the top level has no
    /// `hidden_size`.
    ///
    /// A mixture of experts (`num_local_experts` or `num_experts`, top-k from
    /// `num_experts_per_tok` / `experts_per_token`, expert width `moe_intermediate_size`, else
    /// `intermediate_size`) reads per layer its router (`E · d`), any shared expert
    /// (`shared_expert_intermediate_size`: `3 · d · f_s + d`) and `k` experts of `3 · d · f`;
    /// the total counts all `E`. Where the config's `quantization_config` says `mxfp4` (gpt-oss),
    /// the experts are counted at MXFP4's 17 bytes per 32 weights and the rest at
    /// `bytes_per_param`. DeepSeek's routed experts (`n_routed_experts`, with latent attention)
    /// and configs whose dense and routed layers mix are refused.
    pub fn from_hf_config(
        text: &str,
        path: &str,
        bytes_per_param: f64,
        format: &str,
    ) -> Result<ModelSpec, SpecError> {
        let cfg_err = |message: String| SpecError::Config {
            path: path.to_string(),
            message,
        };
        let root: serde_json::Value =
            serde_json::from_str(text).map_err(|e| cfg_err(format!("not valid JSON: {e}")))?;
        let c = if root.get("hidden_size").is_none() {
            root.get("text_config").unwrap_or(&root)
        } else {
            &root
        };
        let get = |key: &str| -> Result<Option<u64>, SpecError> {
            match c.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v.as_u64().filter(|&n| n > 0).map(Some).ok_or_else(|| {
                    cfg_err(format!("`{key}` must be a positive integer, found {v}"))
                }),
            }
        };
        let need = |key: &str| -> Result<u64, SpecError> {
            get(key)?.ok_or_else(|| cfg_err(format!("`{key}` is missing")))
        };
        let unsupported = |message: String| SpecError::Unsupported {
            path: path.to_string(),
            message,
        };
        if get("kv_lora_rank")?.is_some() {
            return mla_from_hf(c, &root, path, bytes_per_param, format);
        }
        if get("n_routed_experts")?.is_some_and(|n| n > 1) {
            return Err(unsupported(
                "`n_routed_experts` without `kv_lora_rank`: DeepSeek-style mixtures are \
                 modelled with their latent attention only"
                    .into(),
            ));
        }
        let n_expert = match get("num_local_experts")? {
            Some(n) => Some(n),
            None => get("num_experts")?,
        }
        .filter(|&n| n > 1);
        let mixed = get("decoder_sparse_step")?.is_some_and(|s| s > 1)
            || c.get("mlp_only_layers")
                .and_then(|v| v.as_array())
                .is_some_and(|a| !a.is_empty());
        if n_expert.is_some() && mixed {
            return Err(unsupported(
                "`decoder_sparse_step` / `mlp_only_layers`: mixtures whose dense and routed \
                 layers mix are not modelled"
                    .into(),
            ));
        }
        let d = need("hidden_size")?;
        let n_layers = need("num_hidden_layers")?;
        let n_heads = need("num_attention_heads")?;
        let n_kv_heads = get("num_key_value_heads")?.unwrap_or(n_heads);
        let head_dim = get("head_dim")?.unwrap_or(d / n_heads);
        let ff = need("intermediate_size")?;
        let vocab = need("vocab_size")?;
        if head_dim == 0 {
            return Err(cfg_err(format!(
                "hidden_size {d} / num_attention_heads {n_heads} gives a zero head dimension"
            )));
        }
        let attention =
            d * n_heads * head_dim + 2 * d * n_kv_heads * head_dim + n_heads * head_dim * d;
        if !(bytes_per_param.is_finite() && bytes_per_param > 0.0) {
            return Err(cfg_err(format!(
                "bytes per parameter must be positive, got {bytes_per_param}"
            )));
        }
        let norms = n_layers * 2 * d + d;
        // (dense parameters per layer, one expert's parameters per layer, experts, top-k).
        let (dense, expert, e, k) = match n_expert {
            None => (attention + 3 * d * ff, 0, 0, 0),
            Some(e) => {
                let k = match get("num_experts_per_tok")? {
                    Some(k) => k,
                    None => get("experts_per_token")?.ok_or_else(|| {
                        cfg_err(
                            "`num_experts_per_tok` is missing (a mixture of experts needs it)"
                                .into(),
                        )
                    })?,
                };
                if k > e {
                    return Err(cfg_err(format!(
                        "`num_experts_per_tok` {k} exceeds the {e} experts"
                    )));
                }
                let f = get("moe_intermediate_size")?.unwrap_or(ff);
                let shared = get("shared_expert_intermediate_size")?.map_or(0, |sf| 3 * d * sf + d);
                (attention + e * d + shared, 3 * d * f, e, k)
            }
        };
        let mxfp4 = c
            .get("quantization_config")
            .or_else(|| root.get("quantization_config"))
            .and_then(|q| q.get("quant_method"))
            .and_then(|m| m.as_str())
            == Some("mxfp4");
        let expert_bpp = if mxfp4 && e > 0 {
            17.0 / 32.0
        } else {
            bytes_per_param
        };
        let dense_params = n_layers * dense + vocab * d;
        let bytes = |experts: u64| {
            ((dense_params + norms) as f64 * bytes_per_param
                + (n_layers * experts * expert) as f64 * expert_bpp)
                .round() as u64
        };
        let matrices = dense_params + n_layers * k * expert;
        let weight_bytes = bytes(k);
        let total_weight_bytes = bytes(e);
        let experts = (e > 0).then(|| crate::RoutedExperts {
            bytes_per_expert: ((n_layers * expert) as f64 * expert_bpp).round() as usize,
            n_expert: e as usize,
            n_used: k as usize,
        });
        let name = ModelSpec::config_name(&root, path);
        // Sliding-window layers as the config lists them (`layer_types`), or as a window with
        // a period (`sliding_window_pattern`: every p-th layer is global). A bare
        // `sliding_window` is ambiguous across model families (often unused) and is ignored.
        let lenient = |key: &str| c.get(key).and_then(|v| v.as_u64()).filter(|&n| n > 0);
        let window = lenient("sliding_window");
        let windowed_layers = match (c.get("layer_types"), lenient("sliding_window_pattern")) {
            (Some(serde_json::Value::Array(types)), _) => Some(
                types
                    .iter()
                    .filter(|t| t.as_str() == Some("sliding_attention"))
                    .count() as u64,
            ),
            (_, Some(p)) if p > 0 => {
                Some((0..n_layers).filter(|i| (i + 1) % p != 0).count() as u64)
            }
            _ => None,
        };
        let sliding_window = match (window, windowed_layers) {
            (Some(positions), Some(layers)) if layers > 0 => Some(SlidingWindow {
                positions,
                layers: layers.min(n_layers),
            }),
            _ => None,
        };
        Ok(ModelSpec {
            name,
            n_layers,
            kv_layers: n_layers,
            kv_rows: 2,
            state_bytes: 0,
            n_heads,
            n_kv_heads,
            head_dim,
            weight_bytes,
            params: matrices,
            head_params: vocab * d,
            weights_format: format.to_string(),
            sliding_window,
            experts,
            total_weight_bytes,
        })
    }

    /// The name a config gives itself (`_name_or_path`), else its folder's.
    fn config_name(root: &serde_json::Value, path: &str) -> String {
        root.get("_name_or_path")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                let p = std::path::Path::new(path);
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| file_stem(path))
            })
    }

    /// Multiply-adds of the linear layers in a prefill of `prompts` prompts holding `tokens`
    /// tokens in all: every token passes every matrix but the head, which only the last token
    /// of each prompt (the one that samples) multiplies.
    pub fn prefill_params(&self, prompts: u64, tokens: u64) -> f64 {
        let body = self.params.saturating_sub(self.head_params) as f64;
        tokens as f64 * body + prompts.min(tokens) as f64 * self.head_params as f64
    }

    /// Elements one token adds to the cache over all layers:
    /// `kv_rows · kv_layers · n_kv_heads · head_dim` (K and V, or one latent row).
    pub fn kv_elems_per_token(&self) -> u64 {
        self.kv_rows * self.kv_layers * self.n_kv_heads * self.head_dim
    }

    /// Layer-positions a token at `context` cached positions attends over, summed over the
    /// layers: `n_layers · context`, except that sliding-window layers see at most their
    /// window. KV bytes read and attention FLOPs scale with it.
    pub fn attended(&self, context: u64) -> u64 {
        match self.sliding_window {
            Some(w) => {
                (self.kv_layers - w.layers.min(self.kv_layers)) * context
                    + w.layers.min(self.kv_layers) * context.min(w.positions)
            }
            None => self.kv_layers * context,
        }
    }

    /// [`ModelSpec::attended`] summed over the positions `1..=prompt` of a prefill (each token
    /// attends over the positions up to itself).
    pub fn attended_prefill(&self, prompt: u64) -> f64 {
        // Σ_{i=1..p} min(i, w) = p(p+1)/2 up to the window, then w per position.
        let tri = |p: f64, w: f64| {
            if p <= w {
                p * (p + 1.0) / 2.0
            } else {
                w * (w + 1.0) / 2.0 + (p - w) * w
            }
        };
        let p = prompt as f64;
        match self.sliding_window {
            Some(w) => {
                let windowed = w.layers.min(self.kv_layers) as f64;
                (self.kv_layers as f64 - windowed) * tri(p, p)
                    + windowed * tri(p, w.positions as f64)
            }
            None => self.kv_layers as f64 * tri(p, p),
        }
    }
}

fn file_stem(path: &str) -> String {
    std::path::Path::new(path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// A hybrid's layers that keep K/V and its recurrent state per sequence (bytes, f32), from the
/// keys llama.cpp's loaders read: Qwen3.5 / Qwen3-Next's Gated DeltaNet (`ssm.*`, the layers
/// `attention.recurrent_layers` or all but every `full_attention_interval`-th), Granite
/// 4.0-H's and Nemotron-H's Mamba2 (the layers with no K/V heads, and for Nemotron-H no
/// feed-forward), LFM2's short convolutions (`shortconv.l_cache`). `(n_layers, 0)` for a model
/// that is not a hybrid.
fn hybrid_layers(
    f: &GgufFile,
    arch: &str,
    n_layers: u64,
    d_model: u64,
    kv_list: Option<Vec<i64>>,
) -> Result<(u64, u64), SpecError> {
    let k = |s: &str| format!("{arch}.{s}");
    let u = |key: &str| f.get_u64(&k(key));
    let kv_of = |i: usize| kv_list.as_ref().and_then(|l| l.get(i).copied());
    let (recurrent, per_layer): (Vec<bool>, u64) = match arch {
        "qwen35" | "qwen35moe" | "qwen3next" => {
            let flags = match f.get(&k("attention.recurrent_layers")) {
                Some(ridge_gguf::MetadataValue::Array(ridge_gguf::ArrayValue::Bool(b))) => {
                    b.clone()
                }
                _ => {
                    let every = match f.get(&k("full_attention_interval")) {
                        Some(_) => u("full_attention_interval")?.max(1),
                        None => 4,
                    };
                    (0..n_layers).map(|i| (i + 1) % every != 0).collect()
                }
            };
            let (kern, hd) = (u("ssm.conv_kernel")?, u("ssm.state_size")?);
            let (nk, nv) = (u("ssm.group_count")?, u("ssm.time_step_rank")?);
            let conv = kern.saturating_sub(1) * (2 * nk * hd + nv * hd);
            (flags, conv + nv * hd * hd)
        }
        "granitehybrid" | "nemotron_h" => {
            let ff = match f.get(&k("feed_forward_length")) {
                Some(ridge_gguf::MetadataValue::Array(a)) => a.to_i64_vec(),
                _ => None,
            };
            let flags = (0..n_layers as usize)
                .map(|i| kv_of(i) == Some(0) && ff.as_ref().is_none_or(|w| w.get(i) == Some(&0)))
                .collect();
            let (kern, inner) = (u("ssm.conv_kernel")?, u("ssm.inner_size")?);
            let (ds, ng) = (u("ssm.state_size")?, u("ssm.group_count")?);
            (
                flags,
                kern.saturating_sub(1) * (inner + 2 * ng * ds) + inner * ds,
            )
        }
        "lfm2" => {
            let flags = (0..n_layers as usize)
                .map(|i| kv_of(i) == Some(0))
                .collect();
            (flags, u("shortconv.l_cache")?.saturating_sub(1) * d_model)
        }
        _ => return Ok((n_layers, 0)),
    };
    // Layers with K/V: not recurrent, and (with a per-layer list) with K/V heads.
    let kv_layers = (0..n_layers as usize)
        .filter(|&i| !recurrent.get(i).copied().unwrap_or(false) && kv_of(i).is_none_or(|h| h > 0))
        .count() as u64;
    let n_rec = recurrent.iter().filter(|&&r| r).count() as u64;
    Ok((kv_layers, 4 * n_rec * per_layer))
}

/// A latent-attention model's spec from its config.json (DeepSeek-V2/V3, Kimi K2,
/// GLM-4.7-Flash): per layer the query projection (`d · q_lora + q_lora · H · (nope + rope)`,
/// or `d · H · (nope + rope)` without `q_lora_rank`), `kv_a` (`d · (kv_lora + rope)`), `kv_b`
/// (`kv_lora · H · (nope + v)`) and `o` (`H · v · d`); the first `first_k_dense_replace`
/// layers a dense gated MLP of `intermediate_size`, the others a router (`E · d`),
/// `n_shared_experts` shared experts and `k` of `E` experts of `3 · d · moe_intermediate_size`;
/// norms; the head. The cache holds one row of `kv_lora + rope` per token and layer.
fn mla_from_hf(
    c: &serde_json::Value,
    root: &serde_json::Value,
    path: &str,
    bytes_per_param: f64,
    format: &str,
) -> Result<ModelSpec, SpecError> {
    let cfg_err = |message: String| SpecError::Config {
        path: path.to_string(),
        message,
    };
    let get = |key: &str| -> Result<Option<u64>, SpecError> {
        match c.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                cfg_err(format!("`{key}` must be a non-negative integer, found {v}"))
            }),
        }
    };
    let need = |key: &str| -> Result<u64, SpecError> {
        get(key)?.filter(|&n| n > 0).ok_or_else(|| {
            cfg_err(format!(
                "`{key}` is missing or 0 (latent attention needs it)"
            ))
        })
    };
    if !(bytes_per_param.is_finite() && bytes_per_param > 0.0) {
        return Err(cfg_err(format!(
            "bytes per parameter must be positive, got {bytes_per_param}"
        )));
    }
    let (d, n_layers, h) = (
        need("hidden_size")?,
        need("num_hidden_layers")?,
        need("num_attention_heads")?,
    );
    let (kv_lora, nope, rope, v) = (
        need("kv_lora_rank")?,
        need("qk_nope_head_dim")?,
        need("qk_rope_head_dim")?,
        need("v_head_dim")?,
    );
    let (ff, vocab) = (need("intermediate_size")?, need("vocab_size")?);
    let q_lora = get("q_lora_rank")?.filter(|&r| r > 0);
    let q = match q_lora {
        Some(r) => d * r + r * h * (nope + rope),
        None => d * h * (nope + rope),
    };
    let attention = q + d * (kv_lora + rope) + kv_lora * h * (nope + v) + h * v * d;
    let norms_per_layer = 2 * d + kv_lora + q_lora.unwrap_or(0);
    let e = get("n_routed_experts")?.unwrap_or(0);
    let (moe_layers, k, f, shared) = if e > 0 {
        let k = need("num_experts_per_tok")?;
        if k > e {
            return Err(cfg_err(format!(
                "`num_experts_per_tok` {k} exceeds the {e} experts"
            )));
        }
        let dense = get("first_k_dense_replace")?.unwrap_or(0).min(n_layers);
        (
            n_layers - dense,
            k,
            need("moe_intermediate_size")?,
            get("n_shared_experts")?.unwrap_or(0),
        )
    } else {
        (0, 0, 0, 0)
    };
    let dense_layers = n_layers - moe_layers;
    let expert = 3 * d * f;
    // Parameters every token passes (experts aside), and the head.
    let fixed = n_layers * attention
        + dense_layers * 3 * d * ff
        + moe_layers * (e * d + shared * expert)
        + vocab * d;
    let norms = n_layers * norms_per_layer + d;
    let bytes = |experts: u64| {
        ((fixed + norms + moe_layers * experts * expert) as f64 * bytes_per_param).round() as u64
    };
    Ok(ModelSpec {
        name: ModelSpec::config_name(root, path),
        n_layers,
        kv_layers: n_layers,
        kv_rows: 1,
        state_bytes: 0,
        n_heads: h,
        n_kv_heads: 1,
        head_dim: kv_lora + rope,
        weight_bytes: bytes(k),
        params: fixed + moe_layers * k * expert,
        head_params: vocab * d,
        weights_format: format.to_string(),
        sliding_window: None,
        experts: (e > 0).then(|| crate::RoutedExperts {
            bytes_per_expert: ((moe_layers * expert) as f64 * bytes_per_param).round() as usize,
            n_expert: e as usize,
            n_used: k as usize,
        }),
        total_weight_bytes: bytes(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's config.json fields.
    const SMOLLM2: &str = r#"{
        "_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16"
    }"#;

    #[test]
    fn hf_config_parameter_count_by_hand() {
        let s = ModelSpec::from_hf_config(SMOLLM2, "config.json", 2.0, "bf16").unwrap();
        assert_eq!(s.name, "HuggingFaceTB/SmolLM2-135M-Instruct");
        assert_eq!(
            (s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim),
            (30, 9, 3, 64)
        );
        // Per layer: q 576·576 = 331 776; k, v 576·192 = 110 592 each; o 331 776;
        // MLP 3·576·1536 = 2 654 208 → 3 538 944. × 30 = 106 168 320; head 49 152·576 =
        // 28 311 552 → 134 479 872 (the "135M").
        assert_eq!(s.params, 134_479_872);
        // Norms 30·2·576 + 576 = 35 136; (134 479 872 + 35 136) · 2 bytes.
        assert_eq!(s.weight_bytes, 269_030_016);
        assert_eq!(s.kv_elems_per_token(), 2 * 30 * 3 * 64);
    }

    /// A two-layer gemma3-shaped GGUF (an architecture ridge cannot run, but can predict):
    /// Q4_1 matrices, f32 norms, tied or untied head.
    fn tiny_gguf(tied: bool) -> tempfile::NamedTempFile {
        use ridge_gguf::{GgmlType, GgufWriter, MetadataValue as V};
        use std::io::Write;
        let (d, ff, vocab, heads, kv, hd) = (64u64, 96u64, 100u64, 4u64, 2u64, 32u64);
        let mut w = GgufWriter::new();
        w.meta("general.architecture", V::String("gemma3".into()))
            .meta("general.name", V::String("tiny".into()))
            .meta("gemma3.block_count", V::U32(2))
            .meta("gemma3.embedding_length", V::U32(d as u32))
            .meta("gemma3.attention.head_count", V::U32(heads as u32))
            .meta("gemma3.attention.head_count_kv", V::U32(kv as u32))
            .meta("gemma3.attention.key_length", V::U32(hd as u32));
        // Q4_1: 20 bytes per 32 elements.
        let q = |n: u64| vec![0u8; (n / 32 * 20) as usize];
        let f = |n: u64| vec![0u8; (n * 4) as usize];
        w.tensor(
            "token_embd.weight",
            &[d, vocab],
            GgmlType::Q4_1,
            q(d * vocab),
        );
        for l in 0..2 {
            let t = |s: &str| format!("blk.{l}.{s}.weight");
            w.tensor(
                &t("attn_q"),
                &[d, heads * hd],
                GgmlType::Q4_1,
                q(d * heads * hd),
            )
            .tensor(&t("attn_k"), &[d, kv * hd], GgmlType::Q4_1, q(d * kv * hd))
            .tensor(&t("attn_v"), &[d, kv * hd], GgmlType::Q4_1, q(d * kv * hd))
            .tensor(
                &t("attn_output"),
                &[heads * hd, d],
                GgmlType::Q4_1,
                q(d * heads * hd),
            )
            .tensor(&t("ffn_gate"), &[d, ff], GgmlType::Q4_1, q(d * ff))
            .tensor(&t("ffn_up"), &[d, ff], GgmlType::Q4_1, q(d * ff))
            .tensor(&t("ffn_down"), &[ff, d], GgmlType::Q4_1, q(d * ff))
            .tensor(&t("attn_norm"), &[d], GgmlType::F32, f(d))
            .tensor(&t("ffn_norm"), &[d], GgmlType::F32, f(d));
        }
        w.tensor("output_norm.weight", &[d], GgmlType::F32, f(d));
        if !tied {
            w.tensor(
                "output.weight",
                &[d, vocab],
                GgmlType::F16,
                vec![0; (d * vocab * 2) as usize],
            );
        }
        let mut file = tempfile::Builder::new().suffix(".gguf").tempfile().unwrap();
        file.write_all(&w.to_bytes()).unwrap();
        file.flush().unwrap();
        file
    }

    #[test]
    fn gguf_bytes_and_params_from_the_tensor_index() {
        // Per layer: q, o 64·128 = 8192 each; k, v 64·64 = 4096 each; gate, up, down 64·96 =
        // 6144 each → 43 008 params; Q4_1 bytes = 43 008 / 32 · 20 = 26 880; norms 2·64·4 = 512.
        let f = ridge_gguf::GgufFile::open(tiny_gguf(true).path()).unwrap();
        let s = ModelSpec::from_gguf(&f).unwrap();
        assert!(f
            .path()
            .to_string_lossy()
            .ends_with(&format!("{}.gguf", s.name)));
        assert_eq!(
            (s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim),
            (2, 4, 2, 32)
        );
        // Tied: the embedding table (6400 params, 4000 bytes) is the output head and is read.
        assert_eq!(s.params, 2 * 43_008 + 6_400);
        assert_eq!(s.head_params, 6_400);
        assert_eq!(s.prefill_params(2, 10), 10.0 * 86_016.0 + 2.0 * 6_400.0);
        assert_eq!(s.weight_bytes, 2 * (26_880 + 512) + 256 + 4_000);
        assert_eq!(s.weights_format, "Q4_1");
        assert_eq!(s.kv_elems_per_token(), 2 * 2 * 2 * 32);
        // Untied: the embedding is a lookup (not read whole), the f16 head is read.
        let f = ridge_gguf::GgufFile::open(tiny_gguf(false).path()).unwrap();
        let s = ModelSpec::from_gguf(&f).unwrap();
        assert_eq!(s.params, 2 * 43_008 + 6_400);
        assert_eq!(s.head_params, 6_400);
        assert_eq!(s.weight_bytes, 2 * (26_880 + 512) + 256 + 12_800);
    }

    /// Gemma 4 is refused with one line naming it, not priced with one head shape.
    #[test]
    fn gemma4_is_refused_not_mispriced() {
        use ridge_gguf::{GgufWriter, MetadataValue as V};
        use std::io::Write;
        let mut w = GgufWriter::new();
        w.meta("general.architecture", V::String("gemma4".into()))
            .meta("gemma4.block_count", V::U32(2));
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(&w.to_bytes()).unwrap();
        let f = ridge_gguf::GgufFile::open(t.path()).unwrap();
        let e = ModelSpec::from_gguf(&f).unwrap_err().to_string();
        assert!(e.contains("gemma4: layer kinds"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn hf_config_defaults_and_errors() {
        // No num_key_value_heads → multi-head attention; no head_dim → hidden / heads.
        let cfg = r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 128, "vocab_size": 100}"#;
        let s = ModelSpec::from_hf_config(cfg, "m/config.json", 1.0, "int8").unwrap();
        assert_eq!((s.n_kv_heads, s.head_dim), (4, 16));
        assert_eq!(s.name, "m");
        // 2 · (4096 + 2·4096 + 4096 + 3·64·128) + 100·64 = 2·40 960 + 6 400.
        assert_eq!(s.params, 88_320);
        assert_eq!(s.head_params, 6_400);
        // Nested text_config (multimodal wrappers).
        let nested = format!(r#"{{"text_config": {cfg}}}"#);
        assert_eq!(
            ModelSpec::from_hf_config(&nested, "c.json", 1.0, "int8")
                .unwrap()
                .params,
            88_320
        );
        let err = |t: &str| {
            ModelSpec::from_hf_config(t, "c.json", 2.0, "bf16")
                .unwrap_err()
                .to_string()
        };
        assert!(err("{").contains("not valid JSON"));
        assert!(err(r#"{"hidden_size": 64}"#).contains("`num_hidden_layers` is missing"));
        assert!(err(r#"{"hidden_size": "big"}"#).contains("positive integer"));
        let moe = cfg.replace("\"vocab_size\"", "\"num_local_experts\": 8, \"vocab_size\"");
        assert!(err(&moe).contains("`num_experts_per_tok` is missing"));
        let deepseek = cfg.replace("\"vocab_size\"", "\"n_routed_experts\": 64, \"vocab_size\"");
        assert!(err(&deepseek).contains("DeepSeek"));
    }

    #[test]
    fn sliding_window_layers_from_a_config_or_a_gguf() {
        let base = r#""hidden_size": 64, "num_hidden_layers": 12, "num_attention_heads": 4,
                      "intermediate_size": 128, "vocab_size": 100"#;
        let spec = |extra: &str| {
            ModelSpec::from_hf_config(&format!("{{{base}{extra}}}"), "c.json", 1.0, "int8")
                .unwrap()
                .sliding_window
        };
        // Gemma 3: every sixth layer global.
        let gemma3 = spec(r#", "sliding_window": 512, "sliding_window_pattern": 6"#);
        assert_eq!(
            gemma3,
            Some(SlidingWindow {
                positions: 512,
                layers: 10
            })
        );
        // Listed per layer.
        let listed = spec(
            r#", "sliding_window": 4096, "layer_types": ["sliding_attention", "full_attention",
                "sliding_attention"]"#,
        );
        assert_eq!(
            listed,
            Some(SlidingWindow {
                positions: 4096,
                layers: 2
            })
        );
        // A bare window (often unused by the model family) or a null one: none.
        assert_eq!(spec(r#", "sliding_window": 4096"#), None);
        assert_eq!(
            spec(r#", "sliding_window": null, "sliding_window_pattern": 6"#),
            None
        );
        // Attended layer-positions: 2 global layers over the context, 10 over the window.
        let mut s =
            ModelSpec::from_hf_config(&format!("{{{base}}}"), "c.json", 1.0, "int8").unwrap();
        assert_eq!(s.attended(4096), 12 * 4096);
        s.sliding_window = gemma3;
        assert_eq!(s.attended(100), 12 * 100);
        assert_eq!(s.attended(4096), 2 * 4096 + 10 * 512);
        // Prefill of 1000: Σ attended(i) = 2 · 1000·1001/2 + 10 · (512·513/2 + 488 · 512).
        let want = 2.0 * 500_500.0 + 10.0 * (131_328.0 + 249_856.0);
        assert_eq!(s.attended_prefill(1000), want);
        assert_eq!(s.attended_prefill(300), 12.0 * 45_150.0);
        // A llama GGUF has none.
        let f = ridge_gguf::GgufFile::open(tiny_gguf(true).path()).unwrap();
        assert_eq!(ModelSpec::from_gguf(&f).unwrap().sliding_window, None);
    }
}
