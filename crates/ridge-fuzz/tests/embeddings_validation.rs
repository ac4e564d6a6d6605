//! `/v1/embeddings` bodies through the server's validator on the synthetic byte-level
//! vocabulary (no model): each accepted shape gives the inputs it should, each mistake is a 4xx
//! naming its field, and mangled bodies never panic.

use ridge_fuzz::vocab;
use ridge_server::embeddings::{validate, Encoding, MAX_INPUTS};
use serde_json::{json, Value};

const CTX: usize = 64;
const WIDTH: usize = 32;

/// A body as the server takes it: parsed once (a 400 when that fails), then validated.
fn validate_bytes(
    body: &[u8],
    tok: &ridge_tokenizer::Tokenizer,
    vocab: usize,
    ctx: usize,
    width: usize,
) -> Result<ridge_server::embeddings::EmbeddingJob, ridge_server::error::ApiError> {
    validate(
        &ridge_server::params::Fields::parse(body)?,
        tok,
        vocab,
        ctx,
        width,
    )
}

fn check(body: &Value) -> Result<ridge_server::embeddings::EmbeddingJob, (u16, Value)> {
    let tok = &vocab::pick(0).tokenizer;
    let bytes = body.to_string().into_bytes();
    validate_bytes(&bytes, tok, tok.vocab_size(), CTX, WIDTH).map_err(|e| {
        assert!(e.status.is_client_error());
        (e.status.as_u16(), e.body()["error"]["param"].clone())
    })
}

#[test]
fn accepted_shapes_give_their_inputs() {
    let tok = &vocab::pick(0).tokenizer;
    let hello = tok.encode("hello", true, true).unwrap();
    let one = check(&json!({"input": "hello"})).unwrap();
    assert_eq!(one.inputs, vec![hello.clone()]);
    assert_eq!(one.encoding, Encoding::Float);
    let two = check(
        &json!({"input": ["hello", "hello"], "encoding_format": "base64",
                            "model": "m", "user": "x", "dimensions": WIDTH}),
    )
    .unwrap();
    assert_eq!(two.inputs, vec![hello.clone(), hello]);
    assert_eq!(two.encoding, Encoding::Base64);
    assert_eq!(
        check(&json!({"input": [1, 2, 3]})).unwrap().inputs,
        vec![vec![1, 2, 3]]
    );
    assert_eq!(
        check(&json!({"input": [[1], [2, 3]]})).unwrap().inputs,
        vec![vec![1], vec![2, 3]]
    );
    // Exactly the context is allowed (nothing is generated after it).
    assert!(check(&json!({"input": vec![5; CTX]})).is_ok());
}

#[test]
fn mistakes_are_4xx_naming_the_field() {
    let cases = [
        (json!({}), 400, "input"),
        (json!({"input": ""}), 400, "input"),
        (json!({"input": []}), 400, "input"),
        (json!({"input": [[]]}), 400, "input"),
        (json!({"input": [-1]}), 400, "input"),
        (json!({"input": [1.5]}), 400, "input"),
        (json!({"input": [100_000]}), 400, "input"),
        (json!({"input": ["a", 1]}), 400, "input"),
        (json!({"input": [[1], "a"]}), 400, "input"),
        (json!({"input": {"a": 1}}), 400, "input"),
        (json!({"input": true}), 400, "input"),
        (json!({"input": vec![5; CTX + 1]}), 400, "input"),
        (json!({"input": vec!["a"; MAX_INPUTS + 1]}), 400, "input"),
        (
            json!({"input": "a", "dimensions": WIDTH - 1}),
            400,
            "dimensions",
        ),
        (json!({"input": "a", "dimensions": 0}), 400, "dimensions"),
        (json!({"input": "a", "dimensions": "32"}), 400, "dimensions"),
        (
            json!({"input": "a", "encoding_format": "hex"}),
            400,
            "encoding_format",
        ),
        (
            json!({"input": "a", "encoding_format": 1}),
            400,
            "encoding_format",
        ),
        (json!({"input": "a", "user": 7}), 400, "user"),
        (json!({"input": "a", "model": 5}), 400, "model"),
    ];
    for (body, status, param) in cases {
        match check(&body) {
            Ok(j) => panic!("{body} accepted: {:?}", j.inputs),
            Err((s, p)) => {
                assert_eq!((s, p.as_str()), (status, Some(param)), "{body}");
            }
        }
    }
    let tok = &vocab::pick(0).tokenizer;
    for body in [&b"[1]"[..], b"{", b"\xff\xfe", b"null", b""] {
        let e = validate_bytes(body, tok, tok.vocab_size(), CTX, WIDTH).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
    }
}

#[test]
fn mangled_bodies_never_panic() {
    let tok = &vocab::pick(0).tokenizer;
    let seeds = [
        json!({"input": ["hello", "world"], "encoding_format": "base64"}).to_string(),
        json!({"input": [[1, 2], [3]], "dimensions": 32}).to_string(),
    ];
    // A fixed-seed xorshift: every byte of each seed replaced, deleted or duplicated.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for seed in &seeds {
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = seed.clone().into_bytes();
            let i = (x as usize) % b.len();
            match (x >> 32) % 3 {
                0 => b[i] = (x >> 40) as u8,
                1 => {
                    b.remove(i);
                }
                _ => b.insert(i, b[i]),
            }
            if let Err(e) = validate_bytes(&b, tok, tok.vocab_size(), CTX, WIDTH) {
                assert!(e.status.is_client_error());
            }
        }
    }
}
