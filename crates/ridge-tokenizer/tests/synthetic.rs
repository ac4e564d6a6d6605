//! Tokenizers built from tiny hand-made GGUF vocabularies: exact ids that follow from the
//! vocabulary by construction, and malformed metadata that must be rejected with an error.

use ridge_gguf::{ArrayValue, GgufFile, GgufWriter, MetadataValue};
use ridge_tokenizer::{ChatTemplate, Tokenizer, TokenizerError};

/// GPT-2's byte -> character table, written out independently of the crate.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

const HE: u32 = 256;
const G_T: u32 = 257;
const G_THE: u32 = 258;
const END: u32 = 259;
const UD: u32 = 260;

/// Ids 0..=255: the byte tokens in byte order; then "he", "Ġt", "Ġthe", a control token
/// `<|end|>` and a user-defined token `<ud>`.
fn base() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(["he", "Ġt", "Ġthe", "<|end|>", "<ud>"].map(String::from));
    let mut types = vec![1; 259];
    types.extend([3, 4]);
    let merges = ["h e", "Ġ t", "Ġt he"].map(String::from).to_vec();
    (tokens, types, merges)
}

struct Meta(Vec<(&'static str, MetadataValue)>);

impl Meta {
    fn new(tokens: Vec<String>, types: Vec<i32>, merges: Vec<String>) -> Self {
        Meta(vec![
            ("tokenizer.ggml.model", MetadataValue::String("gpt2".into())),
            ("tokenizer.ggml.pre", MetadataValue::String("gpt-2".into())),
            (
                "tokenizer.ggml.tokens",
                MetadataValue::Array(ArrayValue::String(tokens)),
            ),
            (
                "tokenizer.ggml.token_type",
                MetadataValue::Array(ArrayValue::I32(types)),
            ),
            (
                "tokenizer.ggml.merges",
                MetadataValue::Array(ArrayValue::String(merges)),
            ),
        ])
    }
    fn ok() -> Self {
        let (t, ty, m) = base();
        Self::new(t, ty, m)
    }
    fn set(mut self, key: &'static str, v: MetadataValue) -> Self {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, v));
        self
    }
    fn remove(mut self, key: &str) -> Self {
        self.0.retain(|(k, _)| *k != key);
        self
    }
    fn open(&self) -> (tempfile::TempDir, GgufFile) {
        let mut w = GgufWriter::new();
        for (k, v) in &self.0 {
            w.meta(k, v.clone());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, w.to_bytes()).unwrap();
        let f = GgufFile::open(&path).unwrap();
        (dir, f)
    }
    fn build(&self) -> Result<Tokenizer, TokenizerError> {
        let (_d, f) = self.open();
        Tokenizer::from_gguf(&f)
    }
}

fn bytes_ids(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

#[test]
fn bpe_merges_and_special_tokens() {
    let tok = Meta::ok().build().unwrap();
    assert_eq!(tok.vocab_size(), 261);
    // " the" -> Ġ t h e -> (h e) -> (Ġ t) -> (Ġt he): one token. " end" has no merges.
    let mut want = vec![G_THE, 32, 101, 110, 100, END, UD];
    assert_eq!(tok.encode(" the end<|end|><ud>", true, true).unwrap(), want);
    // Without parse_special the control token is plain text ("<|", "end", "|>" by bytes), the
    // user-defined token is still matched.
    want.splice(5..6, bytes_ids("<|end|>"));
    assert_eq!(
        tok.encode(" the end<|end|><ud>", true, false).unwrap(),
        want
    );
    // "the" without the space: only "he" merges.
    assert_eq!(tok.encode("the", false, true).unwrap(), vec![116, HE]);
    assert_eq!(tok.encode("", true, true).unwrap(), Vec::<u32>::new());

    assert_eq!(tok.decode(&[G_THE, END, UD], false), " the<|end|><ud>");
    assert_eq!(tok.decode(&[G_THE, END, UD], true), " the<ud>");
    assert_eq!(tok.token_to_piece(G_T, false), b" t");
    assert_eq!(tok.token_str(G_THE), Some("Ġthe"));
    assert_eq!(tok.token_id("Ġthe"), Some(G_THE));
    // Vocabulary of 261 > 11 tokens and no BOS/EOS keys: llama.cpp's gpt2 default id 11.
    assert_eq!(tok.bos_id(), Some(11));
    assert_eq!(tok.eos_id(), Some(11));
    assert!(!tok.add_bos() && !tok.add_eos());
    // <|end|> ends generation (llama.cpp's text list) as does EOS; ordinary tokens do not.
    assert!(tok.is_eog(END) && tok.is_eog(11) && !tok.is_eog(G_THE) && !tok.is_eog(9999));
    assert!(tok.is_control(END) && !tok.is_control(UD));
    // Unknown ids decode to nothing rather than panicking.
    assert_eq!(tok.decode(&[9999, G_T], false), " t");
}

#[test]
fn add_bos_eos_follow_metadata() {
    let tok = Meta::ok()
        .set("tokenizer.ggml.bos_token_id", MetadataValue::U32(END))
        .set("tokenizer.ggml.eos_token_id", MetadataValue::U32(UD))
        .set("tokenizer.ggml.add_bos_token", MetadataValue::Bool(true))
        .set("tokenizer.ggml.add_eos_token", MetadataValue::Bool(true))
        .build()
        .unwrap();
    assert_eq!(
        tok.encode("the", true, true).unwrap(),
        vec![END, 116, HE, UD]
    );
    assert_eq!(tok.encode("the", false, true).unwrap(), vec![116, HE]);
    // A rendered chat prompt that already starts with BOS gets no second BOS, and no EOS.
    assert_eq!(
        tok.encode_chat_prompt("<|end|>the").unwrap(),
        vec![END, 116, HE]
    );
    assert_eq!(tok.encode_chat_prompt("the").unwrap(), vec![END, 116, HE]);
    assert!(!tok.should_add_bos("<|end|>x") && tok.should_add_bos("x"));
}

#[test]
fn llama3_pre_tokenizer_adds_bos_by_default() {
    let tok = Meta::ok()
        .set(
            "tokenizer.ggml.pre",
            MetadataValue::String("llama-bpe".into()),
        )
        .set("tokenizer.ggml.bos_token_id", MetadataValue::U32(UD))
        .build()
        .unwrap();
    assert!(tok.add_bos());
    // Llama 3 splits digits in groups of three.
    assert_eq!(
        tok.encode("12345", true, true).unwrap(),
        [vec![UD], bytes_ids("12345")].concat()
    );
}

fn assert_malformed(m: Meta, key: &str) {
    match m.build() {
        Err(TokenizerError::Malformed { key: k, message }) => {
            assert_eq!(k, key, "message: {message}")
        }
        Err(other) => panic!("expected Malformed({key}), got {other}"),
        Ok(_) => panic!("expected Malformed({key}), got a tokenizer"),
    }
}

#[test]
fn malformed_vocabularies_are_errors() {
    let (tokens, types, merges) = base();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    // Merges naming tokens that do not exist, or producing one that does not exist.
    let mut m = merges.clone();
    m.push("Ġ zz".into());
    assert_malformed(
        Meta::new(tokens.clone(), types.clone(), m),
        "tokenizer.ggml.merges",
    );
    let mut m = merges.clone();
    m.push("t h".into());
    assert_malformed(
        Meta::new(tokens.clone(), types.clone(), m),
        "tokenizer.ggml.merges",
    );
    // A merge without a separator.
    assert_malformed(
        Meta::new(tokens.clone(), types.clone(), s(&["he"])),
        "tokenizer.ggml.merges",
    );
    // Merges missing or of the wrong type.
    assert_malformed(
        Meta::ok().remove("tokenizer.ggml.merges"),
        "tokenizer.ggml.merges",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.merges",
            MetadataValue::Array(ArrayValue::I32(vec![1, 2])),
        ),
        "tokenizer.ggml.merges",
    );
    // token_type: length mismatch, wrong element type, value out of range.
    assert_malformed(
        Meta::new(tokens.clone(), types[..100].to_vec(), merges.clone()),
        "tokenizer.ggml.token_type",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(ArrayValue::String(s(&["1"]))),
        ),
        "tokenizer.ggml.token_type",
    );
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.token_type", MetadataValue::U32(1)),
        "tokenizer.ggml.token_type",
    );
    let mut t = types.clone();
    t[7] = 42;
    assert_malformed(
        Meta::new(tokens.clone(), t, merges.clone()),
        "tokenizer.ggml.token_type",
    );
    // Special ids out of range or not integers.
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.bos_token_id", MetadataValue::U32(261)),
        "tokenizer.ggml.bos_token_id",
    );
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.eos_token_id", MetadataValue::I32(-1)),
        "tokenizer.ggml.eos_token_id",
    );
    assert_malformed(
        Meta::ok().set(
            "tokenizer.ggml.padding_token_id",
            MetadataValue::String("0".into()),
        ),
        "tokenizer.ggml.padding_token_id",
    );
    // Empty vocabulary.
    assert_malformed(Meta::new(vec![], vec![], vec![]), "tokenizer.ggml.tokens");
    // A vocabulary too small for the default BOS (id 11) that must add BOS.
    let small = Meta::new(s(&["a", "b"]), vec![1, 1], vec![])
        .set("tokenizer.ggml.add_bos_token", MetadataValue::Bool(true));
    assert_malformed(small, "tokenizer.ggml.add_bos_token");
    // Pre-tokenizer name of the wrong type.
    assert_malformed(
        Meta::ok().set("tokenizer.ggml.pre", MetadataValue::U32(3)),
        "tokenizer.ggml.pre",
    );
}

#[test]
fn missing_or_mistyped_keys_are_errors() {
    for m in [
        Meta::ok().remove("tokenizer.ggml.tokens"),
        Meta::ok().remove("tokenizer.ggml.model"),
        Meta::ok().set(
            "tokenizer.ggml.tokens",
            MetadataValue::Array(ArrayValue::I32(vec![1, 2, 3])),
        ),
        Meta::ok().set("tokenizer.ggml.add_bos_token", MetadataValue::U8(1)),
    ] {
        let e = m.build().unwrap_err();
        assert!(matches!(e, TokenizerError::Gguf(_)), "{e}");
        assert!(e.to_string().contains("tokenizer."), "{e}");
    }
}

#[test]
fn unsupported_models_and_unknown_pre_tokenizers() {
    let e = Meta::ok()
        .set("tokenizer.ggml.model", MetadataValue::String("t5".into()))
        .build()
        .unwrap_err();
    assert!(matches!(e, TokenizerError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("t5"), "{e}");
    // "llama" (SentencePiece) is implemented, and needs scores this vocabulary lacks.
    let e = Meta::ok()
        .set(
            "tokenizer.ggml.model",
            MetadataValue::String("llama".into()),
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, TokenizerError::Malformed { key, .. } if key == "tokenizer.ggml.scores"),
        "{e}"
    );

    let e = Meta::ok()
        .set(
            "tokenizer.ggml.pre",
            MetadataValue::String("mystery".into()),
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, TokenizerError::UnknownPreTokenizer { name, .. } if name == "mystery"),
        "{e}"
    );
}

#[test]
fn chat_template_missing_is_a_clear_error() {
    let m = Meta::ok();
    let (_d, f) = m.open();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let e = ChatTemplate::from_gguf(&f, &tok).unwrap_err();
    assert!(matches!(e, TokenizerError::MissingChatTemplate), "{e}");
    assert!(e.to_string().contains("tokenizer.chat_template"));

    let m = Meta::ok().set(
        "tokenizer.chat_template",
        MetadataValue::String("{% if %}".into()),
    );
    let (_d, f) = m.open();
    let e = ChatTemplate::from_gguf(&f, &tok).unwrap_err();
    assert!(matches!(e, TokenizerError::ChatTemplate(_)), "{e}");
}
