//! Rank pooling: the classifier head of a decoder-only reranker, and how its prompt is formed.
//!
//! # What ridge computes (llama.cpp's definition, for the architectures ridge runs)
//!
//! A reranker scores one (query, document) pair per sequence. llama.cpp defines rank pooling
//! (`{arch}.pooling_type = 4`) as: take one token's final hidden state — after the output
//! norm, where the LM head would read it —, the *last* token's for a causal model (every
//! architecture ridge runs is causal), the first token's otherwise; apply the optional dense
//! layer `cls.weight`/`cls.bias` with a tanh, then the optional projection
//! `cls.output.weight`/`cls.output.bias` (`n_cls_out` outputs, one per label in
//! `{arch}.classifier.output_labels`, 1 without labels); for qwen3 a softmax over those
//! outputs. The score the server reports is the first output.
//!
//! Which of those tensors exist depends on the architecture in llama.cpp's loader: for qwen3
//! only `cls.output.weight` (`[d_model, n_cls_out]`, no bias, no dense layer) — what
//! Qwen3-Reranker GGUFs carry, the LM head's rows of "yes" and "no" with labels
//! `["yes", "no"]`, so that the score is P(yes) = softmax(W·h)₀. For llama and qwen2 llama.cpp
//! loads no head at all, and the "score" is then the first element of the normed hidden
//! state, which no reranker means; ridge refuses those files with an error that says so,
//! rather than serve a number without a meaning. A qwen3 file without `cls.output.weight`
//! would likewise have llama.cpp softmax the hidden state itself; ridge refuses it naming the
//! missing tensor. With one label (or none) qwen3's softmax makes every score 1 — llama.cpp's
//! definition, kept.
//!
//! The score is the head's output as is: no sigmoid beyond qwen3's softmax, no
//! normalisation (llama-server reports `embd[0]`; `--embd-normalize` does not touch it).
//!
//! # The prompt
//!
//! llama-server forms a pair's prompt from the file's rerank template,
//! `tokenizer.chat_template.rerank`, with `{query}` and `{document}` replaced and the result
//! tokenized with special tokens parsed and none added; without one, as
//! `[BOS if add_bos] query [EOS if add_eos] [SEP if add_sep] document [EOS if add_eos]`, the
//! texts tokenized plainly. The model only keeps the template ([`RankHead::template`]); the
//! server, which holds the tokenizer, forms the tokens the same way.
//!
//! The head is a few thousand floats at most (`n_cls_out × d_model`), so it is dequantized to
//! f32 at load and applied in f64 per sequence, once, when its last chunk is computed.

use ridge_gguf::GgufFile;
use ridge_kernels::blocks;

use crate::config::{Architecture, ModelConfig};
use crate::weights::{matrix, shape_err};
use crate::ModelError;

/// The classifier head of a reranker (rank pooling), bound at load.
#[derive(Clone, Debug)]
pub struct RankHead {
    /// `n_cls_out` rows of `d_model` weights (`cls.output.weight`), row after row.
    weight: Vec<f32>,
    d_model: usize,
    /// One label per output (`{arch}.classifier.output_labels`; empty without them).
    labels: Vec<String>,
    /// Whether the outputs go through a softmax (qwen3, as llama.cpp does).
    softmax: bool,
    /// The rerank prompt template (`tokenizer.chat_template.rerank`), if the file has one.
    template: Option<String>,
}

/// The tensor that holds the projection.
const CLS_OUT: &str = "cls.output.weight";

impl RankHead {
    /// Binds the head of a file that declares rank pooling. Errors name the file, the tensor
    /// or the key, and what was expected.
    pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let unsupported = |message: String| ModelError::Unsupported {
            path: f.path().display().to_string(),
            message,
        };
        if cfg.arch != Architecture::Qwen3 {
            return Err(unsupported(format!(
                "the file declares rank pooling ({}.pooling_type = 4), but llama.cpp loads no \
                 classifier head for {} (its score would be one element of the hidden state); \
                 ridge runs rank pooling for qwen3 rerankers with `{CLS_OUT}`",
                cfg.arch.gguf_name(),
                cfg.arch.gguf_name()
            )));
        }
        let arch = cfg.arch.gguf_name();
        let key = format!("{arch}.classifier.output_labels");
        let labels: Vec<String> = if f.get(&key).is_some() {
            f.get_string_array(&key)?.to_vec()
        } else {
            Vec::new()
        };
        let n_out = labels.len().max(1);
        let d = cfg.d_model;
        if !f.has_tensor(CLS_OUT) {
            return Err(unsupported(format!(
                "the file declares rank pooling but has no `{CLS_OUT}` (the reranker's \
                 projection, [{d}, {n_out}]), so there is no score to compute"
            )));
        }
        let m = matrix(f, CLS_OUT, n_out, d)?;
        if m.dtype.is_quantized() && !d.is_multiple_of(m.dtype.block_size()) {
            return Err(shape_err(
                f,
                CLS_OUT,
                format!("rows of {d} do not fill whole {:?} blocks", m.dtype),
            ));
        }
        let view = m.view(f.bytes());
        // `matrix` checked the shape against the file's index, so every row is in bounds.
        let mut weight = vec![0f32; n_out * d];
        for (r, out) in weight.chunks_mut(d).enumerate() {
            blocks::dequantize_row(m.dtype, view.row(r), out);
        }
        if let Some(i) = weight.iter().position(|w| !w.is_finite()) {
            return Err(shape_err(
                f,
                CLS_OUT,
                format!("element {i} is {}; expected finite weights", weight[i]),
            ));
        }
        let tkey = "tokenizer.chat_template.rerank";
        let template = match f.get(tkey) {
            Some(_) => Some(f.get_str(tkey)?.to_string()),
            None => None,
        };
        Ok(RankHead {
            weight,
            d_model: d,
            labels,
            softmax: true,
            template,
        })
    }

    /// Number of outputs (`n_cls_out`).
    pub fn n_outputs(&self) -> usize {
        self.weight.len() / self.d_model.max(1)
    }

    /// The outputs' labels (empty when the file names none).
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The rerank prompt template, if the file has one.
    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// The head's outputs for the chosen token's normed hidden state `h` (`d_model` values);
    /// the score is the first.
    pub fn outputs(&self, h: &[f32]) -> Vec<f32> {
        let mut out: Vec<f64> = self
            .weight
            .chunks(self.d_model.max(1))
            .map(|w| {
                w.iter()
                    .zip(h)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum()
            })
            .collect();
        if self.softmax && !out.is_empty() {
            let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for x in out.iter_mut() {
                *x = (*x - max).exp();
                sum += *x;
            }
            for x in out.iter_mut() {
                *x /= sum;
            }
        }
        out.into_iter().map(|x| x as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ridge_gguf::{GgmlType, GgufFile, GgufWriter, MetadataValue};

    use super::*;
    use crate::synthetic::{synthetic_model, synthetic_reranker, SyntheticSpec};
    use crate::Model;

    fn load(spec: &SyntheticSpec) -> Result<Model, ModelError> {
        let f = GgufFile::from_bytes("<memory>", synthetic_model(spec)).expect("a valid file");
        Model::from_gguf(Arc::new(f))
    }

    /// A file of only rank metadata and `cls` tensors, bound against `cfg`.
    fn bind_head(cfg: &ModelConfig, labels: &[&str], dims: &[u64]) -> Result<RankHead, ModelError> {
        let mut w = GgufWriter::new();
        w.meta(
            "general.architecture",
            MetadataValue::String("qwen3".into()),
        );
        w.meta(
            "qwen3.classifier.output_labels",
            MetadataValue::Array(ridge_gguf::ArrayValue::String(
                labels.iter().map(|s| s.to_string()).collect(),
            )),
        );
        let n: u64 = dims.iter().product();
        w.tensor(CLS_OUT, dims, GgmlType::F32, vec![0u8; 4 * n as usize]);
        let f = GgufFile::from_bytes("<memory>", w.to_bytes()).expect("a valid file");
        RankHead::bind(&f, cfg)
    }

    #[test]
    fn a_qwen3_reranker_binds_its_head() {
        let m = load(&synthetic_reranker()).expect("the reranker loads");
        let head = m.rank_head().expect("a head");
        assert_eq!(head.n_outputs(), 2);
        assert_eq!(head.labels(), ["yes", "no"]);
        assert!(head.template().is_some_and(|t| t.contains("{document}")));
        // Softmax outputs: positive, summing to one, for any state.
        let h = vec![0.5f32; m.config().d_model];
        let o = head.outputs(&h);
        assert!((o.iter().sum::<f32>() - 1.0).abs() < 1e-6 && o.iter().all(|&x| x > 0.0));
    }

    #[test]
    fn missing_and_misshapen_heads_are_named() {
        let plain = load(&SyntheticSpec {
            arch: Architecture::Qwen3,
            ..Default::default()
        })
        .expect("a plain qwen3 loads");
        let cfg = plain.config();
        let d = cfg.d_model as u64;
        let e = bind_head(cfg, &["yes", "no"], &[d, 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains(CLS_OUT) && e.contains("expected [64, 2]"), "{e}");
        assert!(bind_head(cfg, &["yes", "no"], &[d, 2]).is_ok());
        assert!(bind_head(cfg, &["score"], &[d, 1]).is_ok());

        let mut w = GgufWriter::new();
        w.meta(
            "general.architecture",
            MetadataValue::String("qwen3".into()),
        );
        let f = GgufFile::from_bytes("<memory>", w.to_bytes()).expect("a valid file");
        let e = RankHead::bind(&f, cfg).unwrap_err().to_string();
        assert!(e.contains("has no `cls.output.weight`"), "{e}");

        // llama.cpp loads no head for llama (or qwen2): refused, saying so.
        let mut llama = synthetic_reranker();
        llama.arch = Architecture::Llama;
        let e = load(&llama).unwrap_err().to_string();
        assert!(e.contains("loads no classifier head for llama"), "{e}");
    }
}
