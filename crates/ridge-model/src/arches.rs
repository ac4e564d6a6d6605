//! The table of architectures: which file's [`Stack`] runs a configuration's layers. Adding an
//! architecture is its file plus one arm here (see `stack.rs`).

use ridge_gguf::GgufFile;

use crate::config::{Architecture, ModelConfig};
use crate::stack::Stack;
use crate::{
    deepseek2, gemma3, gemma4, granite_hybrid, lfm2, llama, nemotron_h, qwen35, ModelError,
};

/// Binds the layers of `cfg.arch`: the table of architectures.
pub(crate) fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Box<dyn Stack>, ModelError> {
    Ok(match cfg.arch {
        Architecture::Llama
        | Architecture::Qwen2
        | Architecture::Qwen3
        | Architecture::Qwen2Moe
        | Architecture::Qwen3Moe
        | Architecture::Olmoe
        | Architecture::GptOss
        | Architecture::Smollm3
        | Architecture::Mistral3
        | Architecture::Phi3
        | Architecture::Glm4Moe => Box::new(llama::LlamaStack::bind(f, cfg)?),
        Architecture::Gemma3 => Box::new(gemma3::Gemma3Stack::bind(f, cfg)?),
        Architecture::Qwen35 | Architecture::Qwen35Moe | Architecture::Qwen3Next => {
            Box::new(qwen35::Qwen35Stack::bind(f, cfg)?)
        }
        Architecture::GraniteHybrid | Architecture::Granite | Architecture::GraniteMoe => {
            Box::new(granite_hybrid::GraniteHybridStack::bind(f, cfg)?)
        }
        Architecture::NemotronH => Box::new(nemotron_h::NemotronHStack::bind(f, cfg)?),
        Architecture::Lfm2 => Box::new(lfm2::Lfm2Stack::bind(f, cfg)?),
        Architecture::Deepseek2 => Box::new(deepseek2::Deepseek2Stack::bind(f, cfg)?),
        Architecture::Gemma4 => Box::new(gemma4::Gemma4Stack::bind(f, cfg)?),
    })
}
