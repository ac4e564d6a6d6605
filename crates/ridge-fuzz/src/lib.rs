//! Fuzz entry points for ridge, shared by the cargo-fuzz targets (`fuzz/`, libFuzzer) and the
//! regression tests (`tests/regressions.rs`, run by `cargo test --workspace`).
//!
//! Each entry point takes arbitrary bytes, drives one untrusted-input surface through ridge's
//! public API, and panics only when ridge breaks a promise: a panic inside the library, a
//! result that violates a documented invariant (checked with `assert!` here), or — caught by
//! libFuzzer's limits rather than here — an unbounded allocation or a hang. Keeping the logic
//! in an ordinary workspace crate means the exact code libFuzzer ran also runs on stable Rust in
//! CI, over every input committed under `fuzz/regressions/<target>/`.
//!
//! The surfaces:
//! * [`gguf`]: bytes as a GGUF file (header, metadata, tensor index), then everything ridge
//!   builds from a file: model config and weight binding, tokenizer, chat template, and a
//!   two-token generation when the model is small.
//! * [`tokenizer`]: encode arbitrary text and decode arbitrary ids with byte-level BPE and
//!   SentencePiece vocabularies (synthetic ones always; SmolLM2's and Gemma 3's when the
//!   models are in the ridge cache).
//! * [`chat_template`]: arbitrary template source rendered over arbitrary messages by ridge's
//!   sandboxed renderer, and arbitrary messages through a ChatML template.
//! * [`request`]: arbitrary bytes as the body of `/v1/completions`, `/v1/chat/completions`,
//!   `/tokenize` and `/detokenize`, through the server's validator and the engine's checks.

#![warn(missing_docs)]

use std::sync::{Arc, OnceLock};

use ridge_gguf::{ArrayValue, GgufFile, GgufWriter, MetadataValue};
use ridge_server::handlers::Validator;
use ridge_tokenizer::{ChatMessage, ChatTemplate, IncrementalDecoder, Tokenizer};

pub mod vocab;

/// Names of the fuzz targets, as directories under `fuzz/regressions/`.
pub const TARGETS: [&str; 4] = ["gguf", "tokenizer", "chat_template", "request"];

/// Runs the entry point of `target` (one of [`TARGETS`]) on `data`.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "gguf" => gguf(data),
        "tokenizer" => tokenizer(data),
        "chat_template" => chat_template(data),
        "request" => request(data),
        other => panic!("unknown fuzz target {other:?}"),
    }
}

/// Parses `data` as a GGUF file and, when it parses, builds everything ridge builds from one.
pub fn gguf(data: &[u8]) {
    let Ok(file) = GgufFile::from_bytes("<fuzz>", data.to_vec()) else {
        return;
    };
    // Every accessor must be total on a file that parsed.
    for (k, v) in file.metadata() {
        assert!(file.get(k).is_some(), "metadata key {k:?} not indexed");
        let _ = (v.as_u64(), v.as_f64(), v.as_str(), v.as_bool());
        if let Some(a) = v.as_array() {
            let _ = (a.len(), a.to_i64_vec());
        }
    }
    for t in file.tensors() {
        assert_eq!(file.tensor_data(t).len(), t.size);
        let _ = (t.n_elements(), t.row_len(), t.n_rows());
    }
    let file = Arc::new(file);
    if let Ok(tok) = Tokenizer::from_gguf(&file) {
        let ids = tok.encode("Hello, world! <|im_start|> ▁x \u{1F600}", true, true);
        if let Ok(ids) = ids {
            let _ = tok.decode(&ids, false);
        }
        if let Ok(t) = ChatTemplate::from_gguf(&file, &tok) {
            let _ = t.render(&[ChatMessage::new("user", "hi")], true);
        }
    }
    let Ok(model) = ridge_model::Model::from_gguf(file) else {
        return;
    };
    let cfg = model.config();
    // Two tokens of greedy generation when the model is small enough to run in a fuzz
    // iteration: the forward pass over file-controlled shapes and weights must not panic.
    let weights: usize = model.gguf().tensors().iter().map(|t| t.size).sum();
    if cfg.n_layers <= 4 && cfg.vocab <= 4096 && cfg.ctx_len >= 2 && weights <= 4 << 20 {
        let params = ridge_engine::GenerateParams {
            max_tokens: 2,
            sampling: ridge_engine::SamplingParams::greedy(),
            stop_tokens: Vec::new(),
            constraint: None,
        };
        let _ = ridge_engine::generate(&model, &[0], &params, |_| true);
    }
}

/// Encodes text and decodes ids with one of the fuzz vocabularies.
///
/// Byte 0 picks the vocabulary (bits 0–1), what to do (bits 2–3: encode, decode, or both) and
/// the encode flags (bit 4: `add_special`, bit 5: `parse_special`, bit 6: `skip_special` when
/// decoding); the rest is the text (lossy UTF-8) or the ids (little-endian `u32`s, folded to
/// mostly in-range values).
pub fn tokenizer(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let v = vocab::pick(sel & 3);
    let tok = &v.tokenizer;
    let add_special = sel & 0x10 != 0;
    let parse_special = sel & 0x20 != 0;
    let skip_special = sel & 0x40 != 0;
    let mode = (sel >> 2) & 3;
    let n_vocab = tok.vocab_size();
    if mode != 1 {
        let text = String::from_utf8_lossy(rest);
        let ids = match tok.encode(&text, add_special, parse_special) {
            Ok(ids) => ids,
            Err(e) => panic!("encoding valid UTF-8 failed: {e}"),
        };
        assert!(
            ids.iter().all(|&i| (i as usize) < n_vocab),
            "id out of range"
        );
        if v.lossless && !add_special {
            // Byte-level BPE with all 256 byte tokens is lossless: every special token it
            // matched renders as its text.
            assert_eq!(tok.decode(&ids, false), text, "BPE round trip");
        }
        let _ = tok.encode_chat_prompt(&text);
    }
    if mode != 0 {
        let ids: Vec<u32> = rest
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                let x = u32::from_le_bytes(b);
                // Mostly valid ids, sometimes just past the end, sometimes anything.
                match x >> 30 {
                    0..=2 => x % n_vocab.max(1) as u32,
                    _ => x,
                }
            })
            .collect();
        let whole = tok.decode(&ids, skip_special);
        let mut stream = IncrementalDecoder::new(skip_special);
        let mut streamed = String::new();
        for &id in &ids {
            stream.push_into(tok, id, &mut streamed);
        }
        streamed.push_str(&stream.finish());
        assert_eq!(streamed, whole, "incremental decode differs from decode");
    }
}

fn messages_from(data: &[u8]) -> Vec<ChatMessage> {
    const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];
    data.split(|&b| b == 1)
        .enumerate()
        .map(|(i, part)| {
            let role = part.first().map_or(i, |&b| b as usize + i) % ROLES.len();
            ChatMessage::new(ROLES[role], String::from_utf8_lossy(part))
        })
        .collect()
}

fn chatml() -> &'static ChatTemplate {
    static T: OnceLock<ChatTemplate> = OnceLock::new();
    T.get_or_init(|| {
        ChatTemplate::new(vocab::CHATML, "", "<|im_end|>").unwrap_or_else(|e| {
            panic!("the built-in ChatML template must compile: {e}");
        })
    })
}

/// Renders arbitrary templates and messages.
///
/// Byte 0, bit 0: `add_generation_prompt`; bit 1: render the messages (the rest of the input)
/// through the ChatML template instead. Otherwise the rest is `template \0 messages`, messages
/// separated by `\x01`.
pub fn chat_template(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let add_gen = sel & 1 != 0;
    if sel & 2 != 0 {
        let msgs = messages_from(rest);
        if let Err(e) = chatml().render(&msgs, add_gen) {
            panic!("ChatML must render any messages: {e}");
        }
        return;
    }
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let source = String::from_utf8_lossy(&rest[..split]);
    let msgs = messages_from(rest.get(split + 1..).unwrap_or(&[]));
    let Ok(t) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let mut extra = serde_json::Map::new();
    extra.insert("tools".into(), serde_json::json!([{"name": "f", "n": 1.5}]));
    if let Ok(out) = t.render_with(&msgs, add_gen, &extra) {
        assert!(
            out.len() <= ridge_tokenizer::MAX_RENDER_BYTES,
            "render output over the bound"
        );
    }
}

/// Validates arbitrary bytes as a request body for every endpoint that takes one.
///
/// Byte 0 picks the endpoint (bits 0–1, and bit 3 for the second family: Anthropic's
/// messages and count_tokens, OpenAI's responses with and without a stored conversation to
/// continue) and the vocabulary (bit 2: SentencePiece, else byte-level BPE); the rest is the
/// body.
pub fn request(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let tok = &vocab::pick((sel >> 2) & 1).tokenizer;
    let v = Validator {
        tokenizer: tok,
        template: Some(chatml()),
        vocab: tok.vocab_size(),
        parse_reasoning: sel & 16 == 0,
        reasoning_budget: (sel & 32 != 0).then_some(16),
    };
    const CTX: usize = 2048;
    const BLOCKS: usize = 64;
    let stored = |id: &str| {
        (id == "resp_1").then(|| {
            let mut call = ridge_tokenizer::ChatMessage::new("assistant", "");
            call.tool_calls = Some(vec![serde_json::json!({"id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": {"a": 1}}})]);
            vec![ridge_tokenizer::ChatMessage::new("user", "hi"), call]
        })
    };
    // As the server does: parse once, and every endpoint reads the object.
    let body = match ridge_server::params::Fields::parse(body) {
        Ok(m) => m,
        Err(e) => return check_error_or(Err::<(), _>(e), |_| {}),
    };
    let body = &body;
    let job = match (sel >> 3 & 1, sel & 3) {
        (1, 0) => v.messages(body).map(|m| m.job),
        (1, 1) => {
            check_error_or(v.count_tokens(body), |n| assert!(n > 0));
            return;
        }
        (1, 2) => v.responses(body, &|_| None).map(|r| r.job),
        (1, _) => v.responses(body, &stored).map(|r| r.job),
        (_, 0) => v.completion(body),
        (_, 1) => v.chat(body),
        (_, 2) => {
            check_error_or(v.tokenize(body), |ids| {
                assert!(ids.iter().all(|&i| (i as usize) < v.vocab));
            });
            return;
        }
        _ => {
            check_error_or(v.detokenize(body), |ids| {
                let _ = tok.decode(&ids, false);
            });
            return;
        }
    };
    check_error_or(job, |job| {
        assert!(!job.prompts.is_empty() && job.common.n >= 1);
        for p in job.prompts {
            match ridge_server::params::engine_request(
                p,
                &job.common,
                job.default_max,
                job.logprobs,
                CTX,
            ) {
                Ok(r) => {
                    // What the server validated must pass the engine's own checks, except the
                    // KV-capacity one, which depends on the cache size.
                    if let Err(e) = ridge_engine::check_request(&r, CTX, v.vocab, usize::MAX / 64) {
                        panic!("validated request refused by the engine: {e}");
                    }
                    let _ = ridge_engine::check_request(&r, CTX, v.vocab, BLOCKS);
                }
                Err(e) => check_api_error(&e),
            }
        }
    });
}

fn check_error_or<T>(r: Result<T, ridge_server::error::ApiError>, ok: impl FnOnce(T)) {
    match r {
        Ok(t) => ok(t),
        Err(e) => check_api_error(&e),
    }
}

/// Every validation error is a 4xx with an OpenAI error object.
fn check_api_error(e: &ridge_server::error::ApiError) {
    assert!(e.status.is_client_error(), "status {}", e.status);
    let body = e.body();
    let err = &body["error"];
    assert!(
        err["message"].is_string() && err["type"].is_string(),
        "{body}"
    );
    assert!(
        err.get("param").is_some() && err.get("code").is_some(),
        "{body}"
    );
}

fn seed_gguf_files() -> Vec<Vec<u8>> {
    let mut out = vec![
        ridge_model::synthetic::synthetic_model(&ridge_model::synthetic::SyntheticSpec {
            n_layers: 1,
            d_model: 32,
            n_heads: 2,
            n_kv_heads: 1,
            ffn_dim: 32,
            ctx_len: 16,
            ..Default::default()
        }),
        ridge_model::synthetic::synthetic_model(&ridge_model::synthetic::SyntheticSpec {
            arch: ridge_model::Architecture::Gemma3,
            n_layers: 1,
            d_model: 32,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: Some(16),
            ffn_dim: 32,
            ctx_len: 16,
            ..Default::default()
        }),
    ];
    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetadataValue::U32(64)).meta(
        "nested",
        MetadataValue::Array(ArrayValue::Array(vec![ArrayValue::U8(vec![1, 2])])),
    );
    out.push(w.to_bytes());
    out.push(vocab::bpe_gguf());
    out.push(vocab::spm_gguf());
    out.extend(
        moe_seed_specs()
            .iter()
            .map(ridge_model::synthetic::synthetic_model),
    );
    out
}

/// Tiny mixtures of experts (qwen3moe; qwen2moe with a shared expert), small enough that the
/// `gguf` target runs their routed forward pass.
pub fn moe_seed_specs() -> Vec<ridge_model::synthetic::SyntheticSpec> {
    use ridge_model::synthetic::{SyntheticMoe, SyntheticSpec};
    use ridge_model::Architecture;
    let spec = |arch, shared_ffn| SyntheticSpec {
        arch,
        n_layers: 1,
        d_model: 32,
        n_heads: 2,
        n_kv_heads: 1,
        ffn_dim: 32,
        ctx_len: 16,
        moe: Some(SyntheticMoe::new(4, 2, 32, shared_ffn)),
        ..Default::default()
    };
    vec![
        spec(Architecture::Qwen3Moe, None),
        spec(Architecture::Qwen2Moe, Some(32)),
        // gpt-oss: sinks, biases, YaRN, a window, MXFP4 experts.
        SyntheticSpec {
            arch: Architecture::GptOss,
            sliding_window: 4,
            dtype: ridge_kernels::DType::Q8_0,
            expert_dtype: Some(ridge_kernels::DType::MXFP4),
            ..spec(Architecture::GptOss, None)
        },
    ]
}

/// Seed inputs for every target: well-formed examples of each input format, so the fuzzers
/// start from the interesting structure instead of discovering it byte by byte.
pub fn seeds() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let with = |sel: u8, body: &[u8]| {
        let mut v = vec![sel];
        v.extend_from_slice(body);
        v
    };
    let texts: [&[u8]; 8] = [
        b"Hello world, the hello!",
        b"<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
        "caf\u{e9} \u{1F600}\u{1F468}\u{200D}\u{1F469} \u{4F60}\u{597D} \u{645}\u{631}".as_bytes(),
        b"   \n\n\t  x  \r\n 12345 3.14 don't I'll",
        "\u{2581}hello <ud> <start_of_turn>user <tool> <s></s>".as_bytes(),
        b"fn main() { println!(\"{}\", 1 + 2); }",
        b"\xff\xfe invalid \xc3",
        b"",
    ];
    let mut tokenizer = Vec::new();
    for vocab in 0..4u8 {
        for (i, t) in texts.iter().enumerate() {
            let flags = (i as u8 % 4) << 4;
            tokenizer.push(with(vocab | flags, t));
        }
        tokenizer.push(with(
            vocab | 4,
            &[1, 0, 0, 0, 255, 0, 0, 0, 0, 1, 0, 0, 7, 0, 0, 0],
        ));
        tokenizer.push(with(vocab | 8 | 0x40, "h\u{e9}llo".as_bytes()));
    }
    let templates: [&str; 10] = [
        vocab::CHATML,
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
        "{% for m in messages %}{{ m.role.upper() }}: {{ m.content.strip().split(' ') | join('|') }}{% endfor %}{{ tools | tojson(indent=2) }}",
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content | length %}{% endfor %}{{ ns.n }}{{ strftime_now('%Y-%m-%d') }}",
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(10) }}",
        "{% for i in range(1000) %}{% for j in range(1000) %}{{ i }}{% endfor %}{% endfor %}",
        "{{ messages | map(attribute='content') | join(', ') | indent(4, true) }}",
        "{{ 'x' * 1000 }}{{ messages[0].content[::-1] }}{{ messages | length }}{{ (messages | first).role | title }}",
        "{% include 'x' %}{% import 'y' as z %}",
        "{%- for m in messages -%}{{- m['content'] | replace('a', 'bb') | center(20) -}}{%- endfor -%}",
    ];
    let msgs = b"You are terse.\x01Hello there\x01Hi! How can I help?\x01Tell me a joke";
    let mut chat = Vec::new();
    for (i, t) in templates.iter().enumerate() {
        let mut body = t.as_bytes().to_vec();
        body.push(0);
        body.extend_from_slice(msgs);
        chat.push(with(i as u8 & 1, &body));
    }
    chat.push(with(3, msgs));
    let bodies: [(u8, &str); 20] = [
        (
            0,
            r#"{"prompt": "Hello world", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n", "the"], "seed": 1}"#,
        ),
        (
            0,
            r#"{"model": "fuzz-model", "prompt": [[1, 2, 3], [4, 5]], "n": 2, "logprobs": 3, "stream": true, "stream_options": {"include_usage": true}}"#,
        ),
        (
            0,
            r#"{"prompt": ["a", "b", "c"], "logit_bias": {"1": 5, "2": -100}, "stop_token_ids": [3], "ignore_eos": true, "max_completion_tokens": 2047}"#,
        ),
        (
            0,
            r#"{"prompt": [0, 1, 2, 99999999999], "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.1, "presence_penalty": -2, "frequency_penalty": 2}"#,
        ),
        (
            0,
            r#"{"prompt": "x", "max_tokens": 1e300, "n": 16.0, "temperature": null}"#,
        ),
        (
            1,
            r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 4, "logprobs": true, "top_logprobs": 2}"#,
        ),
        (
            1,
            r#"{"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant"}], "add_generation_prompt": false}"#,
        ),
        (
            1,
            r#"{"messages": [{"role": "tool", "content": 1}], "model": "other"}"#,
        ),
        (1, r#"{"messages": [], "top_logprobs": 5}"#),
        (
            2,
            r#"{"prompt": "<|im_start|>hi", "add_special_tokens": false}"#,
        ),
        (2, r#"{"messages": [{"role": "user", "content": "hello"}]}"#),
        (3, r#"{"tokens": [1, 2, 3, 270, 4294967296, -1]}"#),
        (
            4,
            r#"{"prompt": "hello \u2581 <start_of_turn>", "max_tokens": 3}"#,
        ),
        (5, "[1, {\"a\": \"\\ud800\"}, 1e999]"),
        (
            8,
            r#"{"max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}], "stop_sequences": ["x"], "messages": [{"role": "user", "content": "What is the weather?"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "P"}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "18C"}], "is_error": true}]}], "tools": [{"name": "w", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "w", "disable_parallel_tool_use": true}, "thinking": {"type": "enabled", "budget_tokens": 64}, "stream": true}"#,
        ),
        (
            12,
            r#"{"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image"}]}], "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}, "effort": "max"}}"#,
        ),
        (
            9,
            r#"{"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "w", "input_schema": {}}]}"#,
        ),
        (
            10,
            r#"{"instructions": "Be brief.", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"}, {"type": "function_call_output", "call_id": "c1", "output": "ok"}], "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": {"type": "function", "name": "f"}, "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}, "reasoning": {"effort": "low"}, "max_output_tokens": 9, "store": false}"#,
        ),
        (
            11,
            r#"{"input": "more", "previous_response_id": "resp_1", "max_output_tokens": 3}"#,
        ),
        (11, r#"{"input": "more", "previous_response_id": "resp_2"}"#),
    ];
    let request = bodies
        .iter()
        .map(|(sel, b)| with(*sel, b.as_bytes()))
        .collect();
    vec![
        ("gguf", seed_gguf_files()),
        ("tokenizer", tokenizer),
        ("chat_template", chat),
        ("request", request),
    ]
}
