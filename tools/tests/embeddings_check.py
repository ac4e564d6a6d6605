"""Drives `POST /v1/embeddings` of a running `ridge serve` with the official OpenAI Python SDK.

Usage: python3 tools/tests/embeddings_check.py BASE_URL EXPECTED_JSON

EXPECTED_JSON holds what the engine itself gives for a few texts (computed in-process by
crates/ridge-cli/tests/embeddings.rs, which runs this script): {"model", "width", "texts",
"token_ids", "vectors"}. Every vector that comes over HTTP must equal it exactly, as JSON floats
(`encoding_format="float"`), as the SDK's default (it asks for base64 and decodes it) and as raw
base64 (decoded here: little-endian f32). Bad inputs must be 4xx with OpenAI's error object.
Exits non-zero with a message on the first failed check; prints a JSON summary.
"""

import base64
import json
import math
import struct
import sys

import openai
from openai import OpenAI


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def f32(x):
    """x rounded to the nearest f32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main():
    base, expected_path = sys.argv[1].rstrip("/"), sys.argv[2]
    want = json.load(open(expected_path))
    name, width, texts = want["model"], want["width"], want["texts"]
    vectors = [[f32(x) for x in v] for v in want["vectors"]]
    client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    n_tokens = sum(len(t) for t in want["token_ids"])

    def same(got, i, what):
        check(len(got) == width, f"{what}: {len(got)} dimensions, want {width}")
        diff = max(abs(f32(g) - w) for g, w in zip(got, vectors[i]))
        check(diff == 0.0, f"{what}: input {i} differs from the engine's vector by {diff}")

    def shapes(r, n, what):
        check(r.object == "list", f"{what}: object {r.object!r}")
        check(r.model == name, f"{what}: model {r.model!r}")
        check(len(r.data) == n, f"{what}: {len(r.data)} items, want {n}")
        for i, d in enumerate(r.data):
            check(d.object == "embedding" and d.index == i, f"{what}: item {i} is {d}")

    # Floats.
    r = client.embeddings.create(model=name, input=texts, encoding_format="float")
    shapes(r, len(texts), "float")
    for i, d in enumerate(r.data):
        same(d.embedding, i, "float")
    check(r.usage.prompt_tokens == n_tokens and r.usage.total_tokens == n_tokens,
          f"usage {r.usage}, want {n_tokens} tokens")

    # The SDK's default: it asks for base64 and decodes it to floats.
    r = client.embeddings.create(model=name, input=texts)
    shapes(r, len(texts), "default (base64, decoded by the SDK)")
    for i, d in enumerate(r.data):
        same(d.embedding, i, "default")

    # Raw base64: little-endian f32 bytes.
    r = client.embeddings.create(model=name, input=texts[0], encoding_format="base64", user="u-1")
    shapes(r, 1, "base64")
    raw = base64.b64decode(r.data[0].embedding)
    check(len(raw) == 4 * width, f"base64: {len(raw)} bytes")
    same(list(struct.unpack(f"<{width}f", raw)), 0, "base64")

    # Token ids, one input and several, give the vectors of the texts they tokenize to.
    ids = want["token_ids"]
    r = client.embeddings.create(model=name, input=ids[1], encoding_format="float")
    shapes(r, 1, "token ids")
    same(r.data[0].embedding, 1, "token ids")
    r = client.embeddings.create(model=name, input=ids, encoding_format="float", dimensions=width)
    shapes(r, len(ids), "arrays of token ids")
    for i, d in enumerate(r.data):
        same(d.embedding, i, "arrays of token ids")

    # A text and itself, in one request: the same vector, cosine 1; another text is not.
    r = client.embeddings.create(model=name, input=[texts[0], texts[1], texts[0]], encoding_format="float")
    a, b, c = (d.embedding for d in r.data)
    check(a == c, "a text twice in one request gives the same vector")
    check(abs(cosine(a, c) - 1.0) < 1e-6, f"cosine with itself {cosine(a, c)}")
    check(abs(math.sqrt(sum(x * x for x in a)) - 1.0) < 1e-5, "unit length")
    check(cosine(a, b) < 0.99, f"different texts are different vectors ({cosine(a, b)})")

    # Bad inputs: 400 with OpenAI's error object.
    bad = [
        ({"input": ""}, "input", 400),
        ({"input": []}, "input", 400),
        ({"input": [[]]}, "input", 400),
        ({"input": [1.5]}, "input", 400),
        ({"input": [[10**9]]}, "input", 400),
        ({"input": [{"text": "x"}]}, "input", 400),
        ({"input": ["a", 3]}, "input", 400),
        ({"input": "x", "dimensions": width // 2}, "dimensions", 400),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format", 400),
        ({"input": "x", "model": 5}, "model", 400),
    ]
    for body, param, status in bad:
        kwargs = {"model": name, **body}
        try:
            client.embeddings.create(**kwargs)
        except openai.APIStatusError as e:
            err = e.body if isinstance(e.body, dict) else {}
            check(e.status_code == status, f"{body}: status {e.status_code}, want {status}")
            check(isinstance(err.get("message"), str) and err.get("type") and err.get("param") == param,
                  f"{body}: error object {e.body}")
        else:
            check(False, f"{body}: accepted")
    # The SDK drops `input=None`; raw body without it.
    try:
        client.post("/embeddings", body={"model": name}, cast_to=object)
    except openai.BadRequestError as e:
        check(e.body.get("param") == "input", f"missing input: {e.body}")
    else:
        check(False, "a body without input was accepted")

    print(json.dumps({"texts": len(texts), "width": width, "checked_bad": len(bad) + 1}))


if __name__ == "__main__":
    main()
