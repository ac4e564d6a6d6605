//! The vocabularies the fuzz targets run on: tiny synthetic ones built in memory (always
//! there, so the targets and regression tests need no model file), and SmolLM2's byte-level
//! BPE and Gemma 3's SentencePiece vocabularies when those models are already in the ridge
//! cache (`ridge pull`; nothing is downloaded here).

use std::sync::OnceLock;

use ridge_gguf::{ArrayValue, GgufFile, GgufWriter, MetadataValue};
use ridge_model::synthetic::gpt2_byte_char;
use ridge_tokenizer::Tokenizer;

/// A ChatML template like SmolLM2's, with a default system prompt and a generation prompt.
pub const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fn s(v: &str) -> MetadataValue {
    MetadataValue::String(v.into())
}

fn strings(v: Vec<String>) -> MetadataValue {
    MetadataValue::Array(ArrayValue::String(v))
}

/// A byte-level BPE vocabulary (`gpt2`, `smollm` pre-tokenizer): the 256 byte tokens, a few
/// merges, ChatML control tokens and one user-defined token.
pub fn bpe_gguf() -> Vec<u8> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| gpt2_byte_char(b).to_string()).collect();
    let merged = [
        "he", "ll", "hell", "hello", "Ġt", "Ġthe", "Ġw", "or", "Ġwor", "ld", "Ġworld",
    ];
    tokens.extend(merged.iter().map(|t| t.to_string()));
    let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"];
    tokens.extend(specials.iter().map(|t| t.to_string()));
    let mut types = vec![1i32; 256 + merged.len()];
    types.extend([3, 3, 3, 4]);
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ t", "Ġt he", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
    ];
    let eos = (256 + merged.len()) as u32;
    let mut w = GgufWriter::new();
    w.meta("tokenizer.ggml.model", s("gpt2"))
        .meta("tokenizer.ggml.pre", s("smollm"))
        .meta("tokenizer.ggml.tokens", strings(tokens))
        .meta(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(ArrayValue::I32(types)),
        )
        .meta(
            "tokenizer.ggml.merges",
            strings(merges.iter().map(|m| m.to_string()).collect()),
        )
        .meta("tokenizer.ggml.bos_token_id", MetadataValue::U32(eos))
        .meta("tokenizer.ggml.eos_token_id", MetadataValue::U32(eos + 2))
        .meta("tokenizer.ggml.add_bos_token", MetadataValue::Bool(true))
        .meta("tokenizer.chat_template", s(CHATML));
    w.to_bytes()
}

/// A SentencePiece vocabulary (`llama`): `<unk>`, `<s>`, `</s>`, the 256 `<0xNN>` byte
/// tokens, scored pieces, a control and a user-defined token.
pub fn spm_gguf() -> Vec<u8> {
    let mut v: Vec<(String, f32, i32)> = vec![
        ("<unk>".into(), 0.0, 2),
        ("<s>".into(), 0.0, 3),
        ("</s>".into(), 0.0, 3),
    ];
    v.extend((0..=255u32).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
    for (t, sc) in [
        ("▁", -20.0),
        ("h", -20.0),
        ("e", -20.0),
        ("l", -20.0),
        ("o", -20.0),
        ("é", -20.0),
        ("▁h", -6.0),
        ("he", -3.0),
        ("ll", -2.0),
        ("lo", -1.0),
        ("hell", -4.0),
        ("▁hell", -5.0),
        ("▁hello", -0.5),
        ("▁▁", -7.0),
    ] {
        v.push((t.to_string(), sc, 1));
    }
    v.push(("<start_of_turn>".into(), 0.0, 3));
    v.push(("<ud>".into(), 0.0, 4));
    let mut w = GgufWriter::new();
    w.meta("tokenizer.ggml.model", s("llama"))
        .meta(
            "tokenizer.ggml.tokens",
            strings(v.iter().map(|t| t.0.clone()).collect()),
        )
        .meta(
            "tokenizer.ggml.scores",
            MetadataValue::Array(ArrayValue::F32(v.iter().map(|t| t.1).collect())),
        )
        .meta(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(ArrayValue::I32(v.iter().map(|t| t.2).collect())),
        )
        .meta("tokenizer.ggml.unknown_token_id", MetadataValue::U32(0))
        .meta("tokenizer.ggml.bos_token_id", MetadataValue::U32(1))
        .meta("tokenizer.ggml.eos_token_id", MetadataValue::U32(2));
    w.to_bytes()
}

fn load(name: &str, bytes: Vec<u8>) -> Tokenizer {
    let f = GgufFile::from_bytes(name, bytes)
        .unwrap_or_else(|e| panic!("synthetic vocabulary {name} must parse: {e}"));
    Tokenizer::from_gguf(&f)
        .unwrap_or_else(|e| panic!("synthetic vocabulary {name} must load: {e}"))
}

fn cached(model: &str) -> Option<Tokenizer> {
    if std::env::var_os("RIDGE_FUZZ_SYNTHETIC_ONLY").is_some() {
        return None;
    }
    let m = ridge_model::registry::find(model)?;
    let path = ridge_model::registry::cached_path(m);
    let f = GgufFile::open(path).ok()?;
    Tokenizer::from_gguf(&f).ok()
}

/// A fuzz vocabulary and whether byte-level BPE encoding is lossless with it.
pub struct Vocab {
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// Byte-level BPE whose vocabulary has all 256 byte tokens, so `decode(encode(text))` is
    /// `text`. SmolLM2's lacks 21 of them (bytes 4, 6, 19, 20, 22, 29, 192, 193, 241, 242,
    /// 245–255); like llama.cpp, ridge drops a byte that has no token, so the round trip
    /// only holds for text without those bytes.
    pub lossless: bool,
}

impl Vocab {
    fn new(tokenizer: Tokenizer) -> Self {
        let lossless = tokenizer.model_name() == "gpt2"
            && (0..=255u8).all(|b| tokenizer.token_id(&gpt2_byte_char(b).to_string()).is_some());
        Vocab {
            tokenizer,
            lossless,
        }
    }
}

/// Vocabulary `which` (0: synthetic BPE, 1: synthetic SentencePiece, 2: SmolLM2, 3: Gemma 3;
/// a real one falls back to the synthetic one of its kind when its model is not cached, or
/// when `RIDGE_FUZZ_SYNTHETIC_ONLY` is set). Each is loaded once per process.
pub fn pick(which: u8) -> &'static Vocab {
    static BPE: OnceLock<Vocab> = OnceLock::new();
    static SPM: OnceLock<Vocab> = OnceLock::new();
    static SMOL: OnceLock<Option<Vocab>> = OnceLock::new();
    static GEMMA: OnceLock<Option<Vocab>> = OnceLock::new();
    let bpe = || BPE.get_or_init(|| Vocab::new(load("<synthetic bpe>", bpe_gguf())));
    let spm = || SPM.get_or_init(|| Vocab::new(load("<synthetic spm>", spm_gguf())));
    match which & 3 {
        0 => bpe(),
        1 => spm(),
        2 => SMOL
            .get_or_init(|| cached("smollm2-135m").map(Vocab::new))
            .as_ref()
            .unwrap_or_else(bpe),
        _ => GEMMA
            .get_or_init(|| cached("gemma3-270m").map(Vocab::new))
            .as_ref()
            .unwrap_or_else(spm),
    }
}
